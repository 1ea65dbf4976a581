"""The timing loop shared by every back-end: warm up until stable, then timed repetitions
until the confidence interval of the mean is tight enough (see :mod:`.protocol`).

A back-end supplies ``step()`` (enqueue one forward pass) and a :class:`Clock` whose ``stop``
waits for the device before reading the time (CUDA events, XLA ``wait_device_ops``, or nothing
on the CPU). An optional ``compile_count()`` (XLA) is watched: warm-up also waits for it to stop
growing, and it must not grow while timing.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol as TypingProtocol

import numpy as np

from anb.collect_throughput.timing.protocol import StoppingRule, WarmupRule
from anb.collect_throughput.timing.stats import drift_factors, relative_ci


class Clock(TypingProtocol):
    """Start/stop a device-synchronised timer; ``stop`` returns elapsed seconds."""

    def start(self) -> None: ...

    def stop(self) -> float: ...


class CpuClock:
    """Host clock for synchronous back-ends; ``sync`` runs before each reading.

    ``kind="wall"`` reads ``perf_counter``; ``kind="cpu"`` reads the calling thread's CPU time
    (``thread_time``), which preemption by other processes does not inflate.
    """

    def __init__(self, sync: Callable[[], None] | None = None, kind: str = "wall"):
        if kind not in ("wall", "cpu"):
            raise ValueError(f"clock={kind!r} is invalid; allowed: ['wall', 'cpu']")
        self.sync = sync or (lambda: None)
        self.read = time.perf_counter if kind == "wall" else time.thread_time
        self._t0 = 0.0

    def start(self) -> None:
        self.sync()
        self._t0 = self.read()

    def stop(self) -> float:
        self.sync()
        return self.read() - self._t0


class CompilationDuringTiming(RuntimeError):
    """The compile counter grew while timed repetitions ran (shapes were not static)."""


@dataclass
class LoopResult:
    """Raw outcome of one timing loop: per-step seconds of every repetition and how it ended.

    ``drift`` (interleaved loops) holds the machine's speed factor at each repetition; the
    corrected per-step times are ``times / drift``.
    """

    times: list[float]
    warmup_times: list[float]
    inner: int
    stop_reason: str
    elapsed_seconds: float
    warmup_compiles: int = 0
    extra: dict = field(default_factory=dict)
    drift: list[float] | None = None


def warmup_is_stable(times: list[float], rule: WarmupRule, compiles: list[int] | None = None,
                     ) -> bool:
    """Median of the last window within tolerance of the one before, no compilation in it."""
    w = rule.window
    if len(times) < max(rule.min_steps, 2 * w):
        return False
    if compiles is not None and compiles[-1] != compiles[-w - 1]:
        return False
    last, before = np.median(times[-w:]), np.median(times[-2 * w: -w])
    return bool(abs(last - before) <= rule.tolerance * before)


def warm_up(step: Callable[[], None], clock: Clock, rule: WarmupRule,
            compile_count: Callable[[], int] | None = None) -> tuple[list[float], int, str]:
    """Run steps until stable; return (step times, compilations seen, reason it ended)."""
    times: list[float] = []
    counts = [compile_count()] if compile_count else None
    began = time.perf_counter()
    while True:
        clock.start()
        step()
        times.append(clock.stop())
        if counts is not None and compile_count is not None:
            counts.append(compile_count())
        if warmup_is_stable(times, rule, counts):
            reason = "stable"
            break
        if len(times) >= rule.max_steps:
            reason = "max_steps"
            break
        if time.perf_counter() - began >= rule.max_seconds:
            reason = "max_seconds"
            break
    compiled = counts[-1] - counts[0] if counts is not None else 0
    return times, compiled, reason


def run_loop(step: Callable[[], None], clock: Clock, warmup: WarmupRule, stopping: StoppingRule,
             compile_count: Callable[[], int] | None = None) -> LoopResult:
    """Warm up, calibrate the inner count, then repeat until the stopping rule says so."""
    began = time.perf_counter()
    warm_times, compiled, warm_reason = warm_up(step, clock, warmup, compile_count)
    per_step = float(np.median(warm_times[-warmup.window:]))
    inner = max(1, math.ceil(stopping.min_rep_seconds / per_step)) if per_step > 0 else 1
    before = compile_count() if compile_count else 0
    times: list[float] = []
    timed_began = time.perf_counter()
    while True:
        clock.start()
        for _ in range(inner):
            step()
        times.append(clock.stop() / inner)
        if compile_count and compile_count() != before:
            raise CompilationDuringTiming(
                f"{compile_count() - before} compilation(s) happened during timed repetitions; "
                "inputs must keep one static shape")
        n = len(times)
        if n >= stopping.min_reps and relative_ci(times, stopping.trim,
                                                  stopping.confidence) <= stopping.rel_ci:
            reason = "converged"
            break
        if n >= stopping.max_reps:
            reason = "max_reps"
            break
        if time.perf_counter() - timed_began >= stopping.budget_seconds and n >= 3:
            reason = "budget"
            break
    return LoopResult(times=times, warmup_times=warm_times, inner=inner, stop_reason=reason,
                      elapsed_seconds=time.perf_counter() - began, warmup_compiles=compiled,
                      extra={"warmup_stop_reason": warm_reason})


def run_interleaved(steps: list[Callable[[], None]], clocks: list[Clock], warmup: WarmupRule,
                    stopping: StoppingRule, compile_count: Callable[[], int] | None = None,
                    seed: int = 0) -> list[LoopResult]:
    """Time several models round-robin so they share the machine's load over time.

    Each model is warmed up and its inner count calibrated as in :func:`run_loop`; then every
    round times one repetition of each model, in a fresh random order. Rounds go on until every
    model meets the stopping rule (or ``max_reps``), or ``budget_seconds`` times the number of
    models has passed. On a shared machine this keeps a burst of load from landing on one
    architecture only, which is what ranks need. With ``stopping.drift_window`` > 0 and at
    least three models, the drift that remains within a round is estimated from neighbouring
    repetitions of other models and divided out (:func:`drift_factors`) before the stopping
    rule is applied.
    """
    began = time.perf_counter()
    warm = [warm_up(s, c, warmup, compile_count) for s, c in zip(steps, clocks, strict=True)]
    inner = []
    for times, _, _ in warm:
        per_step = float(np.median(times[-warmup.window:]))
        inner.append(max(1, math.ceil(stopping.min_rep_seconds / per_step)) if per_step > 0 else 1)
    before = compile_count() if compile_count else 0
    rng = np.random.default_rng(seed)
    order: list[int] = []  # the model of each repetition, in time order
    flat: list[float] = []  # its per-step time
    correct = stopping.drift_window > 0 and len(steps) >= 3

    def drift_so_far() -> tuple[np.ndarray, np.ndarray]:
        """The model and the machine's speed factor of every repetition so far."""
        factors = drift_factors(order, flat, stopping.drift_window) if correct \
            else np.ones(len(flat))
        return np.asarray(order), factors

    budget = stopping.budget_seconds * len(steps)
    timed_began = time.perf_counter()
    reason = "max_reps"
    for n in range(1, stopping.max_reps + 1):
        for i in rng.permutation(len(steps)):
            clocks[i].start()
            for _ in range(inner[i]):
                steps[i]()
            flat.append(clocks[i].stop() / inner[i])
            order.append(int(i))
        if compile_count and compile_count() != before:
            raise CompilationDuringTiming(
                f"{compile_count() - before} compilation(s) happened during timed repetitions")
        if n >= stopping.min_reps:
            index, factors = drift_so_far()
            corrected = np.asarray(flat) / factors
            if all(relative_ci(corrected[index == i], stopping.trim, stopping.confidence)
                   <= stopping.rel_ci for i in range(len(steps))):
                reason = "converged"
                break
        if time.perf_counter() - timed_began >= budget and n >= 3:
            reason = "budget"
            break
    elapsed = time.perf_counter() - began
    index, factors = drift_so_far()
    results = []
    for i, (w, k) in enumerate(zip(warm, inner, strict=True)):
        mine = np.flatnonzero(index == i)
        results.append(LoopResult(
            times=[flat[j] for j in mine], warmup_times=w[0], inner=k,
            stop_reason=reason, elapsed_seconds=elapsed / len(steps), warmup_compiles=w[1],
            extra={"warmup_stop_reason": w[2], "interleaved_with": len(steps)},
            drift=factors[mine].tolist() if correct else None))
    return results
