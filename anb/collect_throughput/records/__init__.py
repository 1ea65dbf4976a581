"""The per-architecture records measurement writes and joins: the results folder
(:mod:`.folder`), anchor sessions (:mod:`.anchors`), per-run reports (:mod:`.run_report`) and
``anb merge`` (:mod:`.merge`) into a dataset of :mod:`anb.records`."""
