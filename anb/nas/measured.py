"""Search with measurement in the loop: device speed measured on demand, accuracy from a
surrogate (or the analytic counters).

A :class:`Measurer` measures architectures on one device and answers with futures:
:class:`LocalMeasurer` runs the throughput stage here (``anb measure``'s driver, results in
``<out>/<device>/<arch_id>.json``), :class:`QueueMeasurer` submits ``measure`` jobs to the job
queue and waits for the workers that reach the device. The device is either kind of config
(:func:`anb.collect_throughput.targets.devices.load_target`): a protocol config, or a Qualcomm SNPE
one measured on its board with ``measure_qualcomm`` through its transport.
:class:`MeasuredEvaluator` is an evaluator for :mod:`anb.nas.search`: the device's metrics
(``throughput_<device>``, ``latency_<device>``) come from the measurer, cached by (architecture
id, device) in memory and on disk; each batch's new architectures are submitted together and
awaited together; the rest come from the surrogate. Budgets: ``max_measurements`` new
measurements and ``max_hours`` of wall time; past either :class:`BudgetExhausted` ends the
search, and :meth:`report` writes what was found from the evaluator's own log (every
evaluation, measured or cached, in order). Ctrl-C stops the search after the block being timed
(``interleave`` architectures): the report of what was measured so far is written, and running
the same command again resumes, since stored measurements (``<out>/measurements``, or the
queue's finished jobs) are reused.
"""
from __future__ import annotations

import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future, wait
from pathlib import Path
from queue import Queue
from typing import Any

import numpy as np
import pandas as pd

from anb.io import atomic_write, atomic_write_json, read_json
from anb.nas.mutation import random_choices
from anb.nas.objectives import Constraint, Evaluator, Objective, check_objectives
from anb.nas.pareto import pareto_mask
from anb.nas.report import summary_header
from anb.searchspace.arch import Arch, archs_from_choices
from anb.searchspace.base import Space
from anb.searchspace.space import ANB_SPACE
from anb.sigint import deferred_sigint


class BudgetExhausted(RuntimeError):
    """The measurement budget (count or hours) is spent."""


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a measured search; the partial report (if any) is in ``out``."""

    def __init__(self, out: str | Path, evaluations: int, measured: int):
        super().__init__(out)
        self.out, self.evaluations, self.measured = Path(out), evaluations, measured


class Measurer(ABC):
    """Measures architectures on one device; :meth:`submit` returns one future per
    architecture resolving to ``{metric: value}`` (e.g. ``throughput_cpu-ort``)."""

    device: str
    metrics: tuple[str, ...]

    @abstractmethod
    def submit(self, archs: Sequence[Arch]) -> list[Future]: ...

    def stored(self) -> dict[str, dict[str, float]]:
        """Values already measured before this run (arch id -> values)."""
        return {}

    @abstractmethod
    def close(self) -> None:
        """Release workers and connections."""

    def stop(self) -> None:
        """Ctrl-C: end what is running at the next safe point, cancel the futures not
        measured by then, and release (as :meth:`close`)."""
        self.close()


def _values(record: dict, metrics: Sequence[str]) -> dict[str, float]:
    perf = record["platform_perf"]
    out = {}
    for key in metrics:
        kind = key.split("_", 1)[0]
        if key in perf:
            out[key] = float(perf[key][f"{kind}_mean"])
    return out


class LocalMeasurer(Measurer):
    """The device's protocols run on this machine on a background thread; each submitted batch
    is timed interleaved in blocks of up to ``interleave`` architectures (robust ranks on a
    shared machine), one batch after another; records go to ``<out>/<device>/<arch_id>.json``.
    In-loop measurements skip the driver's drift anchors (a search measures few at a time).
    A line per block reports progress; :meth:`stop` ends a batch after the current block."""

    def __init__(self, device: str, out: str | Path, overrides: dict[str, Any] | None = None,
                 interleave: int = 8):
        from anb.collect_throughput.targets.devices import load_target

        self.target = load_target(device, overrides or {}, space=ANB_SPACE.name)
        self.config = self.target.config
        self.device = self.target.name
        self.metrics = tuple(self.target.keys)
        self.out, self.interleave = Path(out), interleave
        self._batches: Queue[tuple[list[Arch], list[Future]] | None] = Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="anb-measure")
        self._thread.start()

    def _serve(self) -> None:
        while (batch := self._batches.get()) is not None:
            archs, futures = batch
            for start in range(0, len(archs), self.interleave):
                if self._stop.is_set():
                    for fut in futures[start:]:
                        fut.cancel()
                    break
                end = start + self.interleave
                self._measure(archs[start:end], futures[start:end])
                print(f"anb search: {self.device}: measured {min(end, len(archs))}/"
                      f"{len(archs)} of the batch", file=sys.stderr, flush=True)

    def _measure(self, archs: list[Arch], futures: list[Future]) -> None:
        from anb.collect_throughput.records.folder import read_result, result_path
        from anb.collect_throughput.targets.base import RunSettings
        from anb.collect_throughput.targets.protocol_target import Schedule, scheduled

        try:
            target = scheduled(self.target, Schedule(interleave=self.interleave, anchors=()))
            summary = target.measure(archs, self.out, RunSettings(progress=False,
                                                                  keep_going=True))
        except Exception as err:  # noqa: BLE001 - every future of the batch gets the error
            for fut in futures:
                fut.set_exception(err)
            return
        for arch, fut in zip(archs, futures, strict=True):
            if arch.id in summary.failed:
                fut.set_exception(RuntimeError(summary.failed[arch.id]))
                continue
            record = read_result(result_path(self.out, self.device, arch))
            if record is None:
                fut.set_exception(RuntimeError(f"{self.device}: {arch.id} was measured but has "
                                               f"no record in {self.out / self.device}"))
            else:
                fut.set_result(_values(record, self.metrics))

    def submit(self, archs: Sequence[Arch]) -> list[Future]:
        futures: list[Future] = [Future() for _ in archs]
        self._batches.put((list(archs), futures))
        return futures

    def stored(self) -> dict[str, dict[str, float]]:
        folder = self.out / self.device
        found = {}
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            values = _values(read_json(path), self.metrics)
            if len(values) == len(self.metrics):
                found[path.stem] = values
        return found

    def close(self) -> None:
        self._batches.put(None)
        with deferred_sigint():  # a second Ctrl-C must not leave the thread inside the runtime
            self._thread.join()

    def stop(self) -> None:
        self._stop.set()
        self.close()


class QueueMeasurer(Measurer):
    """``measure`` jobs of ``space``'s architectures on the job queue at ``url`` for ``device``
    (a device config name or TOML path; the jobs carry its table); a thread polls the queue
    and resolves the futures as workers finish (a failed job fails its future)."""

    def __init__(self, url: str, device: str, metrics: Sequence[str], space: Space,
                 priority: int | None = None, poll_seconds: float = 0.5):
        from anb.collect_throughput.targets.devices import device_table
        from anb.jobs.queue import open_queue

        self.device_spec, self.space = device, space
        self.device, self.metrics = device_table(device)[0], tuple(metrics)
        self.queue = open_queue(url)
        self.priority, self.poll = priority, poll_seconds
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="anb-queue-watch", daemon=True)
        self._thread.start()

    def submit(self, archs: Sequence[Arch]) -> list[Future]:
        from anb.collect_throughput.queue.stages import job_specs, submit_jobs

        specs = job_specs(archs, [self.device_spec], self.space, ["measure"], self.priority)
        futures: list[Future] = [Future() for _ in archs]
        with self._lock:
            submit_jobs(self.queue, specs)  # returns new ids only; lookup gives every spec's job
            for spec, job_id, fut in zip(specs, self.queue.lookup(specs), futures, strict=True):
                if job_id is None:
                    raise RuntimeError(f"the job queue has no job for {spec.arch} "
                                       f"on {spec.device} right after submitting it")
                self._pending[job_id] = fut
        return futures

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            with self._lock:
                ids = list(self._pending)
            if not ids:
                continue
            for job in self.queue.get(ids):
                if job.state == "done":
                    values = {k: float(v) for k, v in (job.result or {}).get("values", {}).items()
                              if k in self.metrics}
                    self._pending.pop(job.id).set_result(values)
                elif job.state in ("failed", "cancelled"):
                    self._pending.pop(job.id).set_exception(RuntimeError(
                        f"job {job.id} ({job.arch} on {job.device}) {job.state}: "
                        f"{job.last_error}"))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.queue.close()


def check_limits(max_measurements: int | None, max_hours: float | None) -> None:
    """ValueError naming the limit unless each is None or positive (checked before any
    measurement starts)."""
    if max_measurements is not None and max_measurements < 1:
        raise ValueError(f"max_measurements (--max-measurements) {max_measurements} is "
                         "invalid; allowed: >= 1")
    if max_hours is not None and not max_hours > 0:
        raise ValueError(f"max_hours (--max-hours) {max_hours:g} is invalid; allowed: > 0")


class MeasuredEvaluator:
    """An evaluator (see module docstring). ``other`` answers every metric the measurer does
    not (a surrogate or the analytic counters, :func:`anb.nas.evaluators.combined`)."""

    def __init__(self, measurer: Measurer, other: Evaluator, max_measurements: int | None = None,
                 max_hours: float | None = None):
        check_limits(max_measurements, max_hours)
        self.measurer, self.other = measurer, other
        self.max_measurements, self.max_hours = max_measurements, max_hours
        self.cache: dict[tuple[str, str], dict[str, float]] = {
            (arch_id, measurer.device): v for arch_id, v in measurer.stored().items()}
        self.log: list[dict[str, Any]] = []
        self.measured = 0
        self.failed: dict[str, str] = {}
        self.started = time.monotonic()

    @property
    def hours(self) -> float:
        return (time.monotonic() - self.started) / 3600

    def _measure(self, archs: list[Arch]) -> None:
        todo = list({a.id: a for a in archs if (a.id, self.measurer.device) not in self.cache
                     and a.id not in self.failed}.values())
        if not todo:
            return
        if self.max_hours is not None and self.hours >= self.max_hours:
            raise BudgetExhausted(f"{self.max_hours:g} h of measurement spent")
        left = None if self.max_measurements is None else self.max_measurements - self.measured
        if left is not None and left <= 0:
            raise BudgetExhausted(f"{self.max_measurements} measurements spent")
        batch = todo if left is None else todo[:left]
        print(f"anb search: measuring {len(batch)} architecture(s) on {self.measurer.device} "
              f"({self.measured} measured so far, {self.hours * 60:.1f} min)", file=sys.stderr,
              flush=True)
        futures = self.measurer.submit(batch)
        try:
            wait(futures)
        except KeyboardInterrupt:
            self.measurer.stop()  # the running block finishes, the rest is cancelled
            self._collect(batch, futures)
            raise
        self._collect(batch, futures)
        if len(batch) < len(todo):
            raise BudgetExhausted(f"{self.max_measurements} measurements spent")

    def _collect(self, batch: list[Arch], futures: list[Future]) -> None:
        for arch, fut in zip(batch, futures, strict=True):
            if fut.cancelled():  # not measured (Ctrl-C)
                continue
            self.measured += 1
            if fut.exception() is not None:
                self.failed[arch.id] = str(fut.exception())
            else:
                self.cache[(arch.id, self.measurer.device)] = fut.result()

    def __call__(self, choices: np.ndarray, metrics: Sequence[str]) -> dict[str, np.ndarray]:
        archs = archs_from_choices(choices, ANB_SPACE)
        measured = [m for m in metrics if m in self.measurer.metrics]
        rest = [m for m in metrics if m not in self.measurer.metrics]
        spent = None
        if measured:
            try:
                self._measure(archs)
            except (BudgetExhausted, KeyboardInterrupt) as err:  # log what got measured, stop
                spent = err
                keep = [i for i, a in enumerate(archs)
                        if (a.id, self.measurer.device) in self.cache or a.id in self.failed]
                choices, archs = choices[keep], [archs[i] for i in keep]
        out = dict(self.other(choices, rest)) if rest and len(archs) else {}
        for m in measured:
            out[m] = np.array([self._value(a, m) for a in archs])
        for i, arch in enumerate(archs):
            self.log.append({"arch": str(arch), "arch_id": arch.id,
                             "measured": arch.id not in self.failed,
                             **(self.cache.get((arch.id, self.measurer.device), {})
                                if measured else {}),
                             **{m: float(out[m][i]) for m in metrics}})
        if spent is not None:
            raise spent
        return out

    def _value(self, arch: Arch, metric: str) -> float:
        values = self.cache.get((arch.id, self.measurer.device))
        if values is None or metric not in values:
            # a failed measurement: the worst value, so the search passes the design over
            return 0.0 if metric.startswith("throughput") else float("inf")
        return values[metric]

    def report(self, out: str | Path, objectives: Sequence[Objective],
               constraints: Sequence[Constraint] = (), info: dict | None = None) -> dict:
        """``history.csv`` (every evaluation), ``pareto.csv`` (non-dominated feasible designs,
        measured ones only) and ``summary.json`` in ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        history = pd.DataFrame(self.log)
        unique = history.drop_duplicates("arch_id").reset_index(drop=True)
        feasible = unique["measured"].to_numpy(bool).copy()
        for c in constraints:
            feasible &= c.satisfied(unique[c.metric].to_numpy(float))
        scores = np.stack([o.score(unique[o.metric].to_numpy(float)) for o in objectives], 1)
        mask = np.zeros(len(unique), bool)
        if feasible.any():
            mask[np.flatnonzero(feasible)[pareto_mask(scores[feasible])]] = True
        front = unique[mask].sort_values(objectives[0].metric,
                                         ascending=not objectives[0].maximise)
        atomic_write(out / "history.csv", lambda t: history.to_csv(t, index=False))
        atomic_write(out / "pareto.csv", lambda t: front.to_csv(t, index=False))
        summary = {**summary_header(), "device": self.measurer.device,
                   "evaluations": len(history),
                   "unique_architectures": len(unique), "measurements": self.measured,
                   "failed": self.failed, "cache_hits": len(history) - self.measured,
                   "max_measurements": self.max_measurements, "max_hours": self.max_hours,
                   "hours": self.hours, "objectives": [str(o) for o in objectives],
                   "constraints": [str(c) for c in constraints], "pareto_size": int(mask.sum()),
                   "pareto": front.to_dict(orient="records"), **(info or {})}
        atomic_write_json(out / "summary.json", summary)
        return summary


def check_measured(other: Evaluator, device: str, objectives: Sequence[str],
                   constraints: Sequence[str], max_measurements: int | None = None,
                   max_hours: float | None = None) -> tuple[list[Objective], list[Constraint], Any]:
    """Everything a measured search is given, checked before any measurement or output: the
    objectives and constraints parse, the limits are positive, the device's config loads and
    measures one of their metrics, and ``other`` answers the rest (an unknown metric is a
    ValueError here, not after a batch was measured). Returns them parsed, and the target."""
    from anb.collect_throughput.targets.devices import load_target

    objs = [Objective.parse(o) for o in objectives]
    check_objectives(objs)
    cons = [Constraint.parse(c) for c in constraints]
    check_limits(max_measurements, max_hours)
    target = load_target(device, space=ANB_SPACE.name)
    keys = tuple(target.keys)
    wanted = list(dict.fromkeys([o.metric for o in objs] + [c.metric for c in cons]))
    if not set(wanted) & set(keys):
        raise ValueError(f"--measure {device}: no objective or constraint uses its metrics "
                         f"{list(keys)}")
    rest = [m for m in wanted if m not in keys]
    if rest:
        other(random_choices(1, np.random.default_rng(0), ANB_SPACE), rest)
    return objs, cons, target


def search_measured(algorithm: Any, other: Evaluator, device: str, queue: str | None,
                    objectives: Sequence[str], constraints: Sequence[str], budget: int,
                    seed: int, out: str | Path, max_measurements: int | None = None,
                    max_hours: float | None = None, supported_only: bool = False) -> dict:
    """Run ``algorithm`` (an :data:`anb.nas.search.ALGORITHMS` entry) with ``device``'s metrics
    measured in the loop (here, or through the job queue at ``queue``); write the report into
    ``out`` (records of local measurements under ``out/measurements``). ``supported_only``: as
    :class:`anb.nas.search.Problem`'s (architectures the surrogate flags are infeasible)."""
    objs, cons, target = check_measured(other, device, objectives, constraints,
                                        max_measurements, max_hours)
    keys = tuple(target.keys)
    if queue is None:
        measurer: Measurer = LocalMeasurer(device, Path(out) / "measurements")
    else:
        measurer = QueueMeasurer(queue, device, keys, ANB_SPACE)
    try:
        return _run_measured(algorithm, measurer, other, objs, cons, budget, seed, out,
                             max_measurements, max_hours, supported_only, queue)
    except SearchInterrupted:
        raise  # stopped already, the front so far written
    except BaseException:
        measurer.stop()  # the measuring thread ends on every error, not only Ctrl-C
        raise


def _run_measured(algorithm: Any, measurer: Measurer, other: Evaluator,
                  objs: list[Objective], cons: list[Constraint], budget: int, seed: int,
                  out: str | Path, max_measurements: int | None, max_hours: float | None,
                  supported_only: bool, queue: str | None) -> dict:
    from anb.nas.search import Problem

    evaluator = MeasuredEvaluator(measurer, other, max_measurements, max_hours)
    name = getattr(getattr(algorithm, "func", algorithm), "__name__", str(algorithm))
    info = {"algorithm": name, "seed": seed, "budget_evaluations": budget,
            "stopped": "evaluation budget", "queue": queue, "supported_only": supported_only}
    try:
        algorithm(Problem(evaluator, objs, cons, space=ANB_SPACE,
                          supported_only=supported_only), budget,
                  seed=seed, progress=False)
    except BudgetExhausted as err:
        info["stopped"] = str(err)
    except KeyboardInterrupt:
        measurer.stop()
        if evaluator.log:  # the front so far; the command resumes from the stored measurements
            evaluator.report(out, objs, cons, {**info, "stopped": "interrupted (Ctrl-C)"})
        raise SearchInterrupted(out, len(evaluator.log), evaluator.measured) from None
    measurer.close()
    return evaluator.report(out, objs, cons, info)
