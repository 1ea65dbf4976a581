"""onnxruntime CPU back-end (fp32): the built network exported to ONNX, intra-op threads pinned."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.backends.base import Backend, Session, cycling
from anb.collect_throughput.environment import host_environment
from anb.collect_throughput.inputs import make_inputs
from anb.collect_throughput.protocol import Protocol
from anb.collect_throughput.timing import CpuClock
from anb.searchspace.arch import Arch
from anb.searchspace.model import build_model
from anb.searchspace.onnx_export import export_onnx


def float_onnx(arch: Arch, workdir: Path, resolution: int = 224) -> Path:
    """The exported fp32 model of ``arch`` (dynamic batch and size), cached in ``workdir``."""
    path = Path(workdir) / f"{arch.id}_fp32.onnx"
    if not path.exists():
        export_onnx(build_model(arch).eval(), path, resolution=resolution, batch=1, dynamic=True)
    return path


def ort_session(path: Path, threads: int):
    """A CPU session with ``threads`` intra-op threads, sequential execution, full optimisation."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxRuntimeBackend(Backend):
    """onnxruntime on the CPU, fp32, NCHW."""

    name = "onnxruntime"
    precision = "fp32"

    def check(self, protocol: Protocol) -> None:
        super().check(protocol)
        if protocol.layout != "nchw":
            raise ValueError(f"layout={protocol.layout!r} is not run by the {self.name!r} "
                             "back-end; allowed: ['nchw']")

    def model_path(self, arch: Arch, protocol: Protocol, workdir: Path) -> tuple[Path, dict]:
        return float_onnx(arch, workdir, protocol.resolution), {}

    def prepare(self, arch: Arch, protocol: Protocol, workdir: Path) -> Session:
        self.check(protocol)
        path, extra = self.model_path(arch, protocol, workdir)
        session = ort_session(path, protocol.threads)
        batches = [np.ascontiguousarray(x) for x in make_inputs(protocol)]
        env: dict[str, Any] = {**host_environment(), "device_name": "cpu",
                               "ort_providers": session.get_providers(),
                               "ort_intra_op_threads": protocol.threads}
        return Session(step=cycling(batches, lambda x: session.run(["logits"], {"input": x})),
                       clock=CpuClock(kind=protocol.clock), environment=env, extra=extra)
