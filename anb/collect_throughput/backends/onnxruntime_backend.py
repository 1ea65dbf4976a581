"""onnxruntime CPU back-end (fp32): the built network exported to ONNX, intra-op threads pinned."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.backends.base import Backend, Session, cycling
from anb.collect_throughput.timing.environment import host_environment
from anb.collect_throughput.timing.inputs import make_inputs
from anb.collect_throughput.timing.loop import CpuClock
from anb.collect_throughput.timing.network import protocol_space
from anb.collect_throughput.timing.protocol import Protocol
from anb.searchspace.base import Space
from anb.searchspace.onnx_export import export_onnx


def float_onnx(arch: Any, workdir: Path, resolution: int | None = None,
               *, space: Space) -> Path:
    """The exported fp32 model of ``arch`` (``space.build``; dynamic batch and size; the
    example input at ``resolution``, default the architecture's own), cached in ``workdir``."""
    arch = space.arch(arch)
    path = Path(workdir) / f"{arch.id}_fp32.onnx"
    if not path.exists():
        size = resolution or int(space.resolutions(space.to_choices([arch]))[0])
        export_onnx(space.build(arch).eval(), path, dynamic=True,
                    input_shape=space.task.input_shape(1, size))
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
    """onnxruntime on the CPU, fp32, NCHW; the base of the back-ends that run the ONNX export."""

    name = "onnxruntime"
    precision = "fp32"
    own_threads: str | None = None
    """Where inference runs when not on the calling thread (then only the wall clock sees it)."""

    def check(self, protocol: Protocol) -> None:
        super().check(protocol)
        if protocol.layout != "nchw":
            raise ValueError(f"layout={protocol.layout!r} is not run by the {self.name!r} "
                             "back-end; allowed: ['nchw']")
        if self.own_threads and protocol.clock != "wall":
            raise ValueError(f"clock={protocol.clock!r} is not run by the {self.name!r} "
                             f"back-end (inference runs on {self.own_threads}); allowed: "
                             "['wall']")

    def model_path(self, arch: Any, protocol: Protocol, workdir: Path) -> tuple[Path, dict]:
        return float_onnx(arch, workdir, protocol.resolution, space=protocol_space(protocol)), {}

    def prepare(self, arch: Any, protocol: Protocol, workdir: Path) -> Session:
        self.check(protocol)
        path, extra = self.model_path(arch, protocol, workdir)
        session = ort_session(path, protocol.threads)
        batches = [np.ascontiguousarray(x) for x in make_inputs(protocol, arch)]
        env: dict[str, Any] = {**host_environment(), "device_name": "cpu",
                               "ort_providers": session.get_providers(),
                               "ort_intra_op_threads": protocol.threads}
        return Session(step=cycling(batches, lambda x: session.run(["logits"], {"input": x})),
                       clock=CpuClock(kind=protocol.clock), environment=env, extra=extra)
