"""CUDA back-end: the PyTorch back-end on a GPU with the reference protocol's idioms.

eval + inference mode, channels_last, fp16/bf16 autocast, ``cudnn.benchmark``, optional
``torch.compile``, inputs already on the device in the protocol's precision (fp16 for the
reference's a100/3090 columns: batch 128 at 256 px), and a clock of CUDA events: the
stop event is recorded after the steps and synchronised before the elapsed time is read.
With ``cuda_graphs`` (the shipped configs' latency protocol) the forward is captured once as a
CUDA graph after warm-up and every step replays it: a batch-1 request then times the GPU's
work rather than Python's kernel launches, which on a fast GPU dominate and vary with the host.
Records GPU name, compute capability, memory, driver, CUDA, cuDNN and torch versions.
"""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from anb.extras import missing

try:
    import torch
except ModuleNotFoundError as err:
    raise missing(err, "measure", "anb.collect_throughput.backends.cuda") from None

from anb.collect_throughput.backends.base import Session, cycling
from anb.collect_throughput.backends.torch_backend import AUTOCAST, TorchBackend
from anb.collect_throughput.timing.environment import host_environment
from anb.collect_throughput.timing.loop import Clock
from anb.collect_throughput.timing.protocol import Protocol

GRAPH_WARMUP_STEPS = 3
"""Eager steps on a side stream before capture (cuDNN autotuning, allocator, lazy init)."""


class CudaEventClock:
    """Elapsed device time between two CUDA events, synchronised before reading."""

    def __init__(self) -> None:
        self.begin = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        torch.cuda.synchronize()
        self.begin.record()

    def stop(self) -> float:
        self.end.record()
        self.end.synchronize()
        return self.begin.elapsed_time(self.end) / 1e3


def driver_version() -> str | None:
    """NVIDIA driver version from ``nvidia-smi`` (None when it is not on PATH)."""
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None


def gpu_environment(index: int = 0) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    return {
        "device_name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "driver": driver_version(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "torch": torch.__version__,
    }


def graph_step(run: Callable[[torch.Tensor], torch.Tensor], batches: Sequence[torch.Tensor],
               ) -> Callable[[], None]:
    """A step that copies the next batch into a static input and replays one CUDA graph of
    ``run`` on it (the graph's output stays alive in its static buffer)."""
    static = batches[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_STEPS):
            run(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(static)
    if len(batches) == 1:
        return graph.replay

    def feed(x: torch.Tensor) -> None:
        static.copy_(x)
        graph.replay()

    return cycling(batches, feed)


class CudaBackend(TorchBackend):
    """PyTorch on the first CUDA device."""

    name = "cuda"
    device = "cuda"

    def check(self, protocol: Protocol) -> None:
        super().check(protocol)
        if not torch.cuda.is_available():
            raise RuntimeError("backend='cuda' needs a CUDA GPU; torch.cuda.is_available() is "
                               f"False (torch {torch.__version__}, CUDA {torch.version.cuda})")

    def setup(self, protocol: Protocol) -> None:
        torch.backends.cudnn.benchmark = protocol.cudnn_benchmark

    def sync(self):
        return torch.cuda.synchronize

    def input_dtype(self, protocol: Protocol) -> torch.dtype:
        """fp16/bf16 inputs on the device, as the reference's columns were measured."""
        return AUTOCAST.get(protocol.precision, torch.float32)

    def clock(self, protocol: Protocol) -> Clock:
        return CudaEventClock()

    def prepare(self, arch: Any, protocol: Protocol, workdir: Path) -> Session:
        if not protocol.cuda_graphs:
            return super().prepare(arch, protocol, workdir)
        self.check(protocol)
        self.setup(protocol)
        run, batches = self.forward(arch, protocol, autocast_cache=False)  # capture needs no cache
        return Session(step=graph_step(run, batches), clock=self.clock(protocol),
                       environment=self.environment(protocol), sync=self.sync(),
                       extra={"cuda_graphs": True})

    def environment(self, protocol: Protocol) -> dict[str, Any]:
        return {**host_environment(), **gpu_environment(),
                "cudnn_benchmark": torch.backends.cudnn.benchmark}
