"""Qualcomm SNPE / QNN back-end (docs/background/devices.md, "Qualcomm SNPE and QNN").

- :mod:`.config`: ``configs/devices/qualcomm/*.toml`` (SDK, runtime, duration, perf profile,
  quantizer options, transport).
- :mod:`.tools`: the SDK's command lines, run with clear errors (tool missing, tool failed).
- :mod:`.host`: host stages, no device needed: ONNX -> DLC, NHWC raw inputs + input list,
  quantization, graph and encodings.
- :mod:`.device`: device stages over a transport (``local://``, ``ssh://``, ``adb://``):
  throughput run, output run, per-layer times.
- :mod:`.parse`: the tools' output formats.
- :mod:`.stages`: one architecture end to end -> ``throughput_<device>`` / ``latency_<device>``
  record entries and the per-layer table beside the record.
"""
