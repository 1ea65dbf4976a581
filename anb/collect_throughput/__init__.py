"""Device throughput/latency collection: one measurement model for every device.

Import what you need from the submodules (kept light so the FPGA board can reuse the stats):
:mod:`.protocol` (Protocol, StoppingRule, WarmupRule, load_device), :mod:`.timing` (run_loop),
:mod:`.stats`, :mod:`.result` (Measurement), :mod:`.measure` (measure), :mod:`.driver`
(measure_archs), :mod:`.merge` (merge), :mod:`.quantize` and :mod:`.quant_report` (int8).
"""
