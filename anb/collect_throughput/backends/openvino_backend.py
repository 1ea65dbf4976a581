"""OpenVINO CPU back-ends: the exported ONNX model compiled by OpenVINO's CPU plug-in.

``openvino`` runs the fp32 export with f32 inference precision forced (OpenVINO would otherwise
pick bf16 on CPUs that have it); ``openvino-int8`` runs the same static int8 (QDQ) model the
``onnxruntime-int8`` back-end builds under the protocol's ``quantization`` scheme, which
OpenVINO's low-precision transformations execute with int8 kernels. One inference stream,
``threads`` inference threads, latency hint; timed on the wall clock (OpenVINO runs inference on
its own threads, so the calling thread's CPU time would not see it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.backends.base import Session, cycling
from anb.collect_throughput.backends.int8_backend import OnnxRuntimeInt8Backend
from anb.collect_throughput.backends.onnxruntime_backend import OnnxRuntimeBackend
from anb.collect_throughput.timing.environment import host_environment
from anb.collect_throughput.timing.inputs import make_inputs
from anb.collect_throughput.timing.loop import CpuClock
from anb.collect_throughput.timing.protocol import Protocol


def cpu_config(threads: int) -> dict[str, Any]:
    """The CPU plug-in's settings (also sent to boards running the ``openvino`` runtime)."""
    return {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}


def compile_cpu(path: Path, threads: int) -> tuple[Any, dict[str, Any]]:
    """``path`` (ONNX) compiled for OpenVINO's CPU plug-in; returns it and its settings."""
    import openvino as ov

    core = ov.Core()
    config = cpu_config(threads)
    compiled = core.compile_model(core.read_model(str(path)), "CPU", config)
    values = {key: compiled.get_property(key) for key in config}
    settings = {key: v.get_type_name() if hasattr(v, "get_type_name") else str(v)
                for key, v in values.items()}
    return compiled, {"openvino_version": ov.get_version(), "openvino_device": "CPU",
                      "openvino_cpu": str(core.get_property("CPU", "FULL_DEVICE_NAME")),
                      "openvino_settings": settings}


class OpenVinoBackend(OnnxRuntimeBackend):
    """OpenVINO on the CPU, fp32, NCHW: the same ONNX export as onnxruntime."""

    name = "openvino"
    precision = "fp32"
    own_threads = "OpenVINO's own threads"

    def prepare(self, arch: Any, protocol: Protocol, workdir: Path) -> Session:
        self.check(protocol)
        path, extra = self.model_path(arch, protocol, workdir)
        compiled, facts = compile_cpu(path, protocol.threads)
        request = compiled.create_infer_request()
        batches = [np.ascontiguousarray(x) for x in make_inputs(protocol, arch)]
        env: dict[str, Any] = {**host_environment(), "device_name": "cpu", **facts}
        return Session(step=cycling(batches, lambda x: request.infer({0: x})),
                       clock=CpuClock(kind=protocol.clock), environment=env, extra=extra)


class OpenVinoInt8Backend(OpenVinoBackend):
    """OpenVINO on the CPU, static int8: the onnxruntime-int8 back-end's QDQ model."""

    name = "openvino-int8"
    precision = "int8"

    def model_path(self, arch: Any, protocol: Protocol, workdir: Path) -> tuple[Path, dict]:
        return OnnxRuntimeInt8Backend().model_path(arch, protocol, workdir)
