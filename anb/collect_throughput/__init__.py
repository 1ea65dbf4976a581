"""Device throughput/latency collection: one measurement model for every device.

Rooms (import what you need from their modules; ARCHITECTURE.md has their order):
:mod:`.timing` (protocols, the timing loop, statistics, inputs, the result record),
:mod:`.backends` (this host's back-ends), :mod:`.transports` (reaching a board),
:mod:`.targets` (what measurement targets: this host, a board, an FPGA, a Qualcomm SoC, and the
loader that picks one by a config's ``kind``), :mod:`.records` (the results folder, anchors,
reports, ``anb merge``), :mod:`.quantization` (quantization analysis, quality on the target)
and :mod:`.queue` (the queue's device stages and commands).
"""
