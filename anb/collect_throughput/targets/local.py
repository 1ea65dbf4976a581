"""This host's back-ends as a target: :class:`LocalTarget` (a protocol config without
``[remote]``), and how it measures architectures under one protocol: prepare -> warm up ->
timed repetitions -> record.

:func:`measure` times one architecture on its own; :func:`measure_interleaved` times a block of
architectures round-robin (see :func:`anb.collect_throughput.timing.loop.run_interleaved`).
Latency is per request: each step of a latency protocol waits for the device
(``Session.sync``) before the next is issued, so it is not launch-bound streaming. The machine's
state (:func:`~anb.collect_throughput.timing.environment.machine_state`) is recorded at the start
and the end of each block, and the process's CPU use and resident memory are sampled while the
models warm up and are timed (:class:`~anb.collect_throughput.board.runner.Sampler`, the one
the board runner uses: every :data:`SAMPLE_INTERVAL` s, the peak RSS exact from the kernel's
high-water mark reset at the start; an interleaved block's figures are the block's, with
``shared_by``). Architectures belong to the protocol's search space
(:mod:`anb.collect_throughput.timing.network`); a string is parsed in it.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.backends import Backend, Session, get_backend
from anb.collect_throughput.board.runner import Sampler
from anb.collect_throughput.targets.base import MeasureSummary, RunSettings
from anb.collect_throughput.targets.protocol_target import ProtocolTarget
from anb.collect_throughput.timing.environment import check_pinnable, machine_state, pin_cpus
from anb.collect_throughput.timing.loop import LoopResult, run_interleaved, run_loop
from anb.collect_throughput.timing.network import measured_arch, measured_resolution
from anb.collect_throughput.timing.protocol import DEVICE_BACKENDS, Protocol
from anb.collect_throughput.timing.result import Measurement, utilisation_fields

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


def onnx_outputs(path: Path, images: np.ndarray, batch: int = 64) -> np.ndarray:
    """The first output of an ONNX model over ``images`` in onnxruntime on this host (one
    thread; the model's own input and output names)."""
    from anb.collect_throughput.backends.onnxruntime_backend import ort_session

    session = ort_session(Path(path), 1)
    name, fixed = session.get_inputs()[0].name, session.get_inputs()[0].shape[0]
    step = fixed if isinstance(fixed, int) and fixed > 0 else batch
    out = [session.run(None, {name: images[i:i + step]})[0]
           for i in range(0, len(images), step)]
    return np.concatenate(out).reshape(len(images), -1)


def openvino_outputs(path: Path, images: np.ndarray, threads: int) -> np.ndarray:
    """The model's outputs over ``images`` in OpenVINO's CPU plug-in (as the back-end compiles
    it)."""
    from anb.collect_throughput.backends.openvino_backend import compile_cpu

    compiled, _ = compile_cpu(path, threads)
    request = compiled.create_infer_request()
    out = [np.array(request.infer({0: images[i:i + 1]})[compiled.output(0)])
           for i in range(len(images))]
    return np.concatenate(out).reshape(len(images), -1)


class LocalTarget(ProtocolTarget):
    """A protocol config measured by this host's back-ends; a config with ``pinned = true``
    pins this process to ``threads`` CPUs for the run."""

    where = "host"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.backends: dict[str, Backend] = {}
        """The back-end of each protocol, made once per target."""

    def backend(self, protocol: Protocol) -> Backend:
        if protocol.backend not in self.backends:
            self.backends[protocol.backend] = get_backend(protocol.backend)
        return self.backends[protocol.backend]

    def pinned_threads(self) -> list[int]:
        """The thread counts of the protocols pinned on this host."""
        return [p.threads for p in self.config.protocols if p.pinned]

    def check(self) -> None:
        pinned = self.pinned_threads()
        if pinned:
            check_pinnable(max(pinned))

    def run_pending(self, pending: list, out: str | Path, run: RunSettings,
                    summary: MeasureSummary) -> None:
        """The blocks, pinned where the config says; every protocol's back-end is made first
        (a missing one stops the run before anything is timed, ``keep_going`` or not)."""
        pinned = self.pinned_threads()
        affinity = os.sched_getaffinity(0) if pinned else None
        if pinned:
            summary.pinned_cpus = pin_cpus(max(pinned))
        try:
            for protocol in self.config.protocols:
                self.backend(protocol)
            super().run_pending(pending, out, run, summary)
        finally:
            if affinity is not None:
                os.sched_setaffinity(0, affinity)

    def measure_block(self, protocol: Protocol, archs: list[Any],
                      workdir: Path) -> list[Measurement]:
        return measure_interleaved(archs, protocol, workdir, self.backend(protocol))

    def prepare_model(self, arch: Any, protocol: Protocol,
                      workdir: Path) -> tuple[Path, dict[str, Any]]:
        backend = self.backend(protocol)
        if not hasattr(backend, "model_path"):
            return Path(), {"converted": False}
        return backend.model_path(arch, protocol, workdir)

    def outputs(self, protocol: Protocol, model: str | Path, images: np.ndarray) -> np.ndarray:
        if protocol.backend.startswith("openvino"):
            return openvino_outputs(Path(model), images, protocol.threads)
        return onnx_outputs(Path(model), images)
