"""Threading and timing of DPU runners, kept apart from ``vart`` (numpy + anb's timing core).

Works with anything that has the ``vart.Runner`` interface: ``get_input_tensors()``,
``get_output_tensors()`` (tensors with ``dims``, ``name`` and ``get_attr("fix_point")``),
``execute_async(inputs, outputs) -> job`` and ``wait(job)``. On the board that is
``vart.Runner`` (see ``run_dpu.py``); in tests and host emulation it is the onnxruntime-backed
``ort_runner.OrtStandInRunner``.

Latency: one thread, one runner, native batch, one job at a time, under the shared warm-up and
stopping rule. Throughput: for each thread count of a sweep, one runner per thread, each thread
submitting jobs back to back until the round's images (~1000) are done; a round is one timed
step of the same loop; the best thread count is reported. Both produce
:class:`anb.collect_throughput.result.Measurement` with per-job times (batch = native batch).
"""
from __future__ import annotations

import math
import threading
from typing import Any, Callable, Sequence

import numpy as np

from anb.collect_throughput.protocol import Protocol
from anb.collect_throughput.result import Measurement
from anb.collect_throughput.timing import CpuClock, run_loop

BOARDS = {
    "zcu102": {"dpu": "DPUCZDX8G_ISA1_B4096", "latency_threads": 1, "threads": (1, 2, 3, 4, 5, 6)},
    "vck190": {"dpu": "DPUCVDX8G", "latency_threads": 1, "threads": (1, 2, 4, 6, 8)},
}


def fix_point(tensor: Any) -> int:
    """The tensor's power-of-two scale exponent (value = int8 * 2**-fix_point)."""
    return int(tensor.get_attr("fix_point"))


def prescale(x: np.ndarray, fix: int) -> np.ndarray:
    """Float input to the DPU's int8: round(x * 2**fix), saturated."""
    return np.clip(np.round(np.asarray(x, dtype=np.float32) * (2.0 ** fix)), -128, 127
                   ).astype(np.int8)


def to_nhwc(images_nchw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(images_nchw, (0, 2, 3, 1)))


def io_buffers(runner: Any, images_nchw: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One native batch of pre-scaled int8 NHWC inputs and zeroed int8 output buffers."""
    (inp,) = runner.get_input_tensors()
    batch = int(inp.dims[0])
    if len(images_nchw) < batch:
        raise ValueError(f"need at least the runner's native batch of {batch} images, "
                         f"got {len(images_nchw)}")
    x = prescale(to_nhwc(images_nchw[:batch]), fix_point(inp))
    if tuple(x.shape) != tuple(inp.dims):
        raise ValueError(f"input {inp.name!r} expects {tuple(inp.dims)}, images give {x.shape}")
    outputs = [np.zeros(tuple(t.dims), dtype=np.int8) for t in runner.get_output_tensors()]
    return [x], outputs


def run_jobs(runner: Any, inputs: list[np.ndarray], outputs: list[np.ndarray], jobs: int) -> None:
    """Submit ``jobs`` jobs back to back on one runner (one in flight, as on the board)."""
    for _ in range(jobs):
        runner.wait(runner.execute_async(inputs, outputs))


def threaded_round(runners: Sequence[Any], buffers: Sequence[tuple[list, list]],
                   jobs_per_thread: int) -> Callable[[], None]:
    """A step running ``jobs_per_thread`` jobs on every runner, one thread per runner."""

    def step() -> None:
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                run_jobs(runners[i], *buffers[i], jobs_per_thread)
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller
                errors.append(err)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(runners))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    return step


def _measurement(arch: str, arch_id: str, protocol: Protocol, times: list[float],
                 warm: list[float], stop_reason: str, environment: dict, extra: dict,
                 ) -> Measurement:
    return Measurement(arch=arch, arch_id=arch_id, device=protocol.device, kind=protocol.kind,
                       batch=protocol.batch, resolution=protocol.resolution, precision="int8",
                       times_s=times, warmup_times_s=warm, inner=1, stop_reason=stop_reason,
                       protocol=protocol.as_dict(), environment=environment, extra=extra)


def measure_latency(runner: Any, images: np.ndarray, protocol: Protocol, arch: str, arch_id: str,
                    environment: dict) -> Measurement:
    """Per-job latency of one runner on one thread (``protocol.batch`` = native batch)."""
    inputs, outputs = io_buffers(runner, images)
    loop = run_loop(lambda: run_jobs(runner, inputs, outputs, 1), CpuClock(), protocol.warmup,
                    protocol.stopping)
    return _measurement(arch, arch_id, protocol, loop.times, loop.warmup_times,
                        loop.stop_reason, environment,
                        {"threads": 1, "input_fix_point": fix_point(runner.get_input_tensors()[0])})


def measure_throughput(make_runner: Callable[[], Any], images: np.ndarray, protocol: Protocol,
                       arch: str, arch_id: str, environment: dict,
                       thread_counts: Sequence[int], images_per_round: int = 1000,
                       ) -> Measurement:
    """Sweep ``thread_counts``; report the best (highest trimmed-mean images/s)."""
    best: Measurement | None = None
    sweep: dict[str, float] = {}
    for count in thread_counts:
        runners = [make_runner() for _ in range(count)]
        buffers = [io_buffers(r, images) for r in runners]
        batch = int(runners[0].get_input_tensors()[0].dims[0])
        jobs = max(1, math.ceil(images_per_round / (count * batch)))
        loop = run_loop(threaded_round(runners, buffers, jobs), CpuClock(), protocol.warmup,
                        protocol.stopping)
        per_job = count * jobs  # a round's time divided by its jobs: time per native batch
        m = _measurement(arch, arch_id, protocol, [t / per_job for t in loop.times],
                         [t / per_job for t in loop.warmup_times], loop.stop_reason, environment,
                         {"threads": count, "jobs_per_thread": jobs,
                          "images_per_round": per_job * batch})
        sweep[str(count)] = m.value
        if best is None or m.value > best.value:
            best = m
    assert best is not None, "thread_counts must not be empty"
    best.extra["thread_sweep"] = sweep
    return best
