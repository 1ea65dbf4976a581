"""Measurement targets: the one interface (:mod:`.base`), a protocol config's run
(:mod:`.protocol_target`) on this host (:mod:`.local`) or on a board over ``[remote]``
(:mod:`.remote`, :mod:`.board_runtimes`, :mod:`.resident`), an FPGA board (:mod:`.fpga`), a
Qualcomm SoC (:mod:`.qualcomm`), and the loader that picks one for a device config
(:mod:`.devices`)."""
