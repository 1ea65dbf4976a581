"""The timing core every target shares: measurement protocols and device configs
(:mod:`.protocol`), the timing loop (:mod:`.loop`) and its statistics (:mod:`.stats`), what a
protocol measures and its inputs (:mod:`.network`, :mod:`.inputs`, :mod:`.digits`), the machine's
state (:mod:`.environment`) and the result record (:mod:`.result`)."""
