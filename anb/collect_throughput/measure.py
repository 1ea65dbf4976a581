"""Measure one architecture under one protocol: prepare -> warm up -> timed repetitions -> record."""
from __future__ import annotations

import tempfile
from pathlib import Path

from anb.collect_throughput.backends import Backend, get_backend
from anb.collect_throughput.protocol import Protocol
from anb.collect_throughput.result import Measurement
from anb.collect_throughput.timing import run_loop
from anb.searchspace.arch import Arch, as_arch


def measure(arch: Arch | str, protocol: Protocol, workdir: str | Path | None = None,
            backend: Backend | None = None) -> Measurement:
    """Run ``protocol`` on ``arch`` and return its :class:`Measurement`."""
    arch = as_arch(arch)
    backend = backend or get_backend(protocol.backend)
    with tempfile.TemporaryDirectory(prefix="anb-measure-") as scratch:
        session = backend.prepare(arch, protocol, Path(workdir or scratch))
        loop = run_loop(session.step, session.clock, protocol.warmup, protocol.stopping,
                        session.compile_count)
        extra = {**session.extra, **loop.extra, "warmup_compiles": loop.warmup_compiles,
                 "elapsed_seconds": loop.elapsed_seconds, **session.finish()}
    return Measurement(
        arch=str(arch), arch_id=arch.id, device=protocol.device, kind=protocol.kind,
        batch=protocol.batch, resolution=protocol.resolution, precision=protocol.precision,
        times_s=loop.times, warmup_times_s=loop.warmup_times, inner=loop.inner,
        stop_reason=loop.stop_reason, protocol=protocol.as_dict(),
        environment=session.environment, extra=extra,
    )
