"""TPU back-end (torch-xla): one XLA device, bf16, the XLA timing idioms.

Each step keeps its output alive until the clock stops and ends with ``torch_xla.sync()`` (cut
and launch the graph; a dropped output would leave nothing to execute); the clock waits for all
device ops (``xm.wait_device_ops``) before reading the time; warm-up runs until the
uncached-compile counter stops growing and the step time is stable, and a compilation while
timing is an error (:class:`~anb.collect_throughput.timing.loop.CompilationDuringTiming`). Ops that
fell back to the CPU (``executed_fallback_ops``) are recorded and fail the measurement unless
``allow_fallbacks``. Without a TPU, ``PJRT_DEVICE=CPU`` runs the same code on the XLA CPU client.
torch-xla lives in its own environment: ``scripts/setup_xla_env.sh``.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from anb.extras import missing

try:
    import torch
except ModuleNotFoundError as err:
    raise missing(err, "tpu", "anb.collect_throughput.backends.xla") from None

from anb.collect_throughput.backends.base import Backend, Session, cycling
from anb.collect_throughput.timing.environment import host_environment, library_versions
from anb.collect_throughput.timing.inputs import make_inputs
from anb.collect_throughput.timing.network import build_network
from anb.collect_throughput.timing.protocol import Protocol

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _xla():
    try:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
    except ImportError as err:
        raise RuntimeError(f"backend='xla' needs torch-xla ({err}); build its environment with "
                           "scripts/setup_xla_env.sh") from None
    return torch_xla, xm, met


class XlaClock:
    """Wall clock that waits for every pending device op before each reading.

    ``live`` holds the outputs of the steps run since ``start``: a lazy tensor nobody holds is
    not materialised by ``torch_xla.sync()``, so without it the network would never execute.
    They are released only after the device ops are done and the clock has been read.
    """

    def __init__(self, live: list | None = None) -> None:
        self.xm = _xla()[1]
        self.live = live if live is not None else []
        self._t0 = 0.0

    def start(self) -> None:
        self.xm.wait_device_ops()
        self.live.clear()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        self.xm.wait_device_ops()
        elapsed = time.perf_counter() - self._t0
        self.live.clear()
        return elapsed


def execution_count() -> int:
    """Graphs executed on the device so far (the ``ExecuteComputation`` counter)."""
    return int(_xla()[2].counter_value("ExecuteComputation") or 0)


def compile_count() -> int:
    """Graphs compiled so far in this process (the ``UncachedCompile`` counter)."""
    return int(_xla()[2].counter_value("UncachedCompile") or 0)


def fallback_ops() -> list[str]:
    """Ops executed on the CPU instead of the XLA device so far."""
    return sorted(_xla()[2].executed_fallback_ops())


class XlaBackend(Backend):
    """PyTorch/XLA on the process's first XLA device (one TPU core)."""

    name = "xla"

    def check(self, protocol: Protocol) -> None:
        super().check(protocol)
        if protocol.precision not in DTYPES:
            raise ValueError(f"precision={protocol.precision!r} is not run by the 'xla' "
                             f"back-end; allowed: {list(DTYPES)}")
        if protocol.layout != "nchw":
            raise ValueError(f"layout={protocol.layout!r} is not run by the 'xla' back-end "
                             "(XLA chooses layouts itself); allowed: ['nchw']")

    def prepare(self, arch: Any, protocol: Protocol, workdir: Path) -> Session:
        self.check(protocol)
        torch_xla, xm, _ = _xla()
        device = torch_xla.device()
        dtype = DTYPES[protocol.precision]
        model = build_network(protocol, arch).eval().to(device=device, dtype=dtype)
        batches = [torch.from_numpy(x).to(device=device, dtype=dtype)
                   for x in make_inputs(protocol, arch)]
        before = set(fallback_ops())
        live: list[torch.Tensor] = []

        def run(x: torch.Tensor) -> None:
            with torch.no_grad():
                live.append(model(x))  # held until the clock stops, so sync() executes it
            torch_xla.sync()

        def finish() -> dict[str, Any]:
            new = sorted(set(fallback_ops()) - before)
            if new and not protocol.allow_fallbacks:
                raise RuntimeError(f"ops fell back to the CPU on XLA: {new}; fix the model or "
                                   "set allow_fallbacks = true")
            return {"xla_fallback_ops": new, "xla_compiles_total": compile_count()}

        env = {**host_environment(), "device_name": xm.xla_device_hw(device),
               "xla_device": str(device), "pjrt_device": os.environ.get("PJRT_DEVICE"),
               "libraries": library_versions(("torch", "torch-xla", "numpy"))}
        return Session(step=cycling(batches, run), clock=XlaClock(live), environment=env,
                       compile_count=compile_count, finish=finish, sync=xm.wait_device_ops)
