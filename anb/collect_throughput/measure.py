"""Measure architectures under one protocol: prepare -> warm up -> timed repetitions -> record.

:func:`measure` times one architecture on its own; :func:`measure_interleaved` times a block of
architectures round-robin (see :func:`anb.collect_throughput.timing.run_interleaved`).
Latency is per request: each step of a latency protocol waits for the device
(``Session.sync``) before the next is issued, so it is not launch-bound streaming. The machine's
state (:func:`~anb.collect_throughput.environment.machine_state`) is recorded at the start and
the end of each block, and the process's CPU use and resident memory are sampled while the
models warm up and are timed (:class:`~anb.collect_throughput.board.runner.Sampler`, the one
the board runner uses: every :data:`SAMPLE_INTERVAL` s, the peak RSS exact from the kernel's
high-water mark reset at the start; an interleaved block's figures are the block's, with
``shared_by``). Architectures belong to the protocol's search space
(:mod:`.network`); a string is parsed in it.
"""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anb.collect_throughput.backends import Backend, Session, get_backend
from anb.collect_throughput.board.runner import Sampler
from anb.collect_throughput.environment import machine_state
from anb.collect_throughput.network import measured_arch, measured_resolution
from anb.collect_throughput.protocol import DEVICE_BACKENDS, Protocol
from anb.collect_throughput.result import Measurement, utilisation_fields
from anb.collect_throughput.timing import LoopResult, run_interleaved, run_loop

SAMPLE_INTERVAL = 0.1
"""Seconds between utilisation samples (a sample reads a few /proc files: ~50 us)."""


def timed_step(session: Session, protocol: Protocol):
    """The step the clock times: for latency, one request followed by a device sync."""
    if protocol.kind != "latency" or session.sync is None:
        return session.step
    step, sync = session.step, session.sync

    def request() -> None:
        step()
        sync()

    return request


def _measurement(arch: Any, protocol: Protocol, session: Session, loop: LoopResult,
                 states: dict, stats: dict) -> Measurement:
    extra = {**session.extra, **loop.extra, "warmup_compiles": loop.warmup_compiles,
             "elapsed_seconds": loop.elapsed_seconds, **session.finish(),
             **utilisation_fields(stats)}
    return Measurement(
        arch=str(arch), arch_id=arch.id, device=protocol.device, kind=protocol.kind,
        batch=protocol.batch, resolution=measured_resolution(protocol, arch),
        precision=protocol.precision,
        times_s=loop.times, warmup_times_s=loop.warmup_times, inner=loop.inner,
        stop_reason=loop.stop_reason, protocol=protocol.as_dict(),
        environment={**session.environment, **states}, extra=extra, drift=loop.drift,
    )


def measure(arch: Any, protocol: Protocol, workdir: str | Path | None = None,
            backend: Backend | None = None) -> Measurement:
    """Run ``protocol`` on ``arch`` and return its :class:`Measurement`."""
    return measure_interleaved([arch], protocol, workdir, backend)[0]


def measure_interleaved(archs: Sequence[Any], protocol: Protocol,
                        workdir: str | Path | None = None, backend: Backend | None = None,
                        ) -> list[Measurement]:
    """Run ``protocol`` on every architecture of ``archs`` (one alone: :func:`run_loop`)."""
    arch_list = [measured_arch(protocol, a) for a in archs]
    backend = backend or get_backend(protocol.backend)
    with tempfile.TemporaryDirectory(prefix="anb-measure-") as scratch:
        sessions = [backend.prepare(a, protocol, Path(workdir or scratch)) for a in arch_list]
        steps = [timed_step(s, protocol) for s in sessions]
        start = machine_state()
        sampler = Sampler(SAMPLE_INTERVAL, gpu=protocol.backend in DEVICE_BACKENDS)
        sampler.start()
        try:
            if len(sessions) == 1:
                s = sessions[0]
                loops = [run_loop(steps[0], s.clock, protocol.warmup, protocol.stopping,
                                  s.compile_count)]
            else:
                loops = run_interleaved(steps, [s.clock for s in sessions],
                                        protocol.warmup, protocol.stopping,
                                        sessions[0].compile_count)
        finally:
            stats = sampler.stop()
        if len(sessions) > 1:
            stats["shared_by"] = len(sessions)
        states = {"state_start": start, "state_end": machine_state()}
        return [_measurement(a, protocol, s, loop, states, stats)
                for a, s, loop in zip(arch_list, sessions, loops, strict=True)]
