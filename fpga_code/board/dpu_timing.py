"""Threading and timing of DPU runners, kept apart from ``vart`` (Python 3.7 + numpy only).

Works with anything that has the ``vart.Runner`` interface: ``get_input_tensors()``,
``get_output_tensors()`` (tensors with ``dims``, ``name`` and ``get_attr("fix_point")``),
``execute_async(inputs, outputs) -> job`` and ``wait(job)``. On the board that is
``vart.Runner`` (see ``run_dpu.py``); in tests and host emulation it is the onnxruntime-backed
``ort_runner.OrtStandInRunner``.

Latency (docs/background/devices.md, "FPGA"): one thread, one runner, native batch (1 on ZCU102, 6
on VCK190), one job at a time, under the shared warm-up and stopping rule. Throughput: a fixed
thread count per board (5 on ZCU102, 6 on VCK190, the reference's best), one runner per thread, each
thread keeping ``in_flight`` jobs queued on its runner until the round's ~1000 images are done; a
round is one timed step. A thread sweep (best count reported, the sweep kept) is an option. Both
return ``platform_perf`` entries (:func:`board_core.perf_entry`) with the peak RSS and CPU use of
this process sampled while the timing loop ran (``peak_rss_bytes``, ``utilisation``:
:class:`utilisation.Sampler`, as the board runner of every other board).
"""
from __future__ import annotations

import collections
import math
import threading

import numpy as np

import board_core
import utilisation

BOARDS = {
    "zcu102": {"dpu": "DPUCZDX8G_ISA1_B4096", "latency_threads": 1, "threads": 5,
               "sweep": (1, 2, 3, 4, 5, 6)},
    "vck190": {"dpu": "DPUCVDX8G", "latency_threads": 1, "threads": 6,
               "sweep": (1, 2, 4, 6, 8)},
}
IMAGES_PER_ROUND = 1000
IN_FLIGHT = 2
SAMPLE_INTERVAL = 0.1


def fix_point(tensor):
    """The tensor's power-of-two scale exponent (value = int8 * 2**-fix_point)."""
    return int(tensor.get_attr("fix_point"))


def prescale(x, fix):
    """Float input to the DPU's int8: round(x * 2**fix), saturated."""
    return np.clip(np.round(np.asarray(x, dtype=np.float32) * (2.0 ** fix)), -128, 127
                   ).astype(np.int8)


def to_nhwc(images_nchw):
    return np.ascontiguousarray(np.transpose(images_nchw, (0, 2, 3, 1)))


def native_batch(runner):
    return int(runner.get_input_tensors()[0].dims[0])


def io_buffers(runner, images_nchw):
    """One native batch of pre-scaled int8 NHWC inputs and zeroed int8 output buffers."""
    (inp,) = runner.get_input_tensors()
    batch = int(inp.dims[0])
    if len(images_nchw) < batch:
        raise ValueError("need at least the runner's native batch of {} images, got {}".format(
            batch, len(images_nchw)))
    x = prescale(to_nhwc(images_nchw[:batch]), fix_point(inp))
    if tuple(x.shape) != tuple(inp.dims):
        raise ValueError("input {!r} expects {}, images give {}".format(
            inp.name, tuple(inp.dims), x.shape))
    outputs = [np.zeros(tuple(t.dims), dtype=np.int8) for t in runner.get_output_tensors()]
    return [x], outputs


def run_jobs(runner, buffers, jobs):
    """Run ``jobs`` jobs on one runner with up to ``len(buffers)`` of them queued at once
    (each in-flight job has its own buffers); returns when all are done."""
    queued = collections.deque()
    for j in range(jobs):
        if len(queued) == len(buffers):
            runner.wait(queued.popleft())
        inputs, outputs = buffers[j % len(buffers)]
        queued.append(runner.execute_async(inputs, outputs))
    while queued:
        runner.wait(queued.popleft())


def threaded_round(runners, buffers, jobs_per_thread):
    """A step running ``jobs_per_thread`` jobs on every runner, one thread per runner
    (``buffers[i]``: the in-flight buffer sets of runner ``i``)."""

    def step():
        errors = []

        def work(i):
            try:
                run_jobs(runners[i], buffers[i], jobs_per_thread)
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


def sampled_loop(step, proto):
    """``board_core.run_loop(step, proto)`` under a :class:`utilisation.Sampler`: its result
    and the entry's ``peak_rss_bytes`` / ``utilisation`` fields."""
    sampler = utilisation.Sampler(SAMPLE_INTERVAL, gpu=False)
    sampler.start()
    try:
        result = board_core.run_loop(step, proto)
    finally:
        stats = sampler.stop()
    return result, {"peak_rss_bytes": stats["peak_rss_bytes"], "utilisation": stats}


def measure_latency(runner, images, device, environment, resolution=224, budget=None):
    """Per-job latency of one runner on one thread, one job at a time (native batch)."""
    buffers = [io_buffers(runner, images)]
    proto = board_core.protocol(device, "latency", native_batch(runner), 1, resolution, budget)
    (times, warm, inner, reason), memory = sampled_loop(lambda: run_jobs(runner, buffers, 1),
                                                        proto)
    return board_core.perf_entry(proto, times, warm, inner, reason, environment, dict(
        memory, threads=1, in_flight=1,
        input_fix_point=fix_point(runner.get_input_tensors()[0])))


def _throughput_at(make_runner, images, device, environment, threads, in_flight,
                   images_per_round, resolution, budget):
    runners = [make_runner() for _ in range(threads)]
    buffers = [[io_buffers(r, images) for _ in range(in_flight)] for r in runners]
    batch = native_batch(runners[0])
    jobs = max(1, int(math.ceil(images_per_round / (threads * batch))))
    proto = board_core.protocol(device, "throughput", batch, threads, resolution, budget)
    (times, warm, inner, reason), memory = sampled_loop(
        threaded_round(runners, buffers, jobs), proto)
    per_job = threads * jobs  # a round's time divided by its jobs: time per native batch
    return board_core.perf_entry(
        proto, [t / per_job for t in times], [t / per_job for t in warm], inner, reason,
        environment, dict(memory, threads=threads, in_flight=in_flight, jobs_per_thread=jobs,
                          images_per_round=per_job * batch))


def measure_throughput(make_runner, images, device, environment, threads=None, sweep=None,
                       in_flight=IN_FLIGHT, images_per_round=IMAGES_PER_ROUND, resolution=224,
                       budget=None):
    """Images/s at the board's fixed thread count (``threads``, default :data:`BOARDS`), or
    the best of ``sweep`` (the sweep is kept in the entry)."""
    if in_flight < 1:
        raise ValueError("in_flight={} is invalid; allowed: an integer >= 1".format(in_flight))
    if not sweep:
        count = threads or BOARDS[device]["threads"]
        return _throughput_at(make_runner, images, device, environment, count, in_flight,
                              images_per_round, resolution, budget)
    best, values = None, {}
    for count in sweep:
        entry = _throughput_at(make_runner, images, device, environment, count, in_flight,
                               images_per_round, resolution, budget)
        values[str(count)] = entry["throughput_mean"]
        if best is None or entry["throughput_mean"] > best["throughput_mean"]:
            best = entry
    best["thread_sweep"] = values
    # best-of-sweep is one protocol whatever count wins: the sweep, not the count, is its setting
    best["protocol"] = dict(best["protocol"], threads=list(sweep))
    best["protocol_fingerprint"] = board_core.fingerprint(best["protocol"])
    return best
