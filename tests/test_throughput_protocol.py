"""Protocol/config validation, robust statistics and the stopping rule of the timing loop."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from anb.collect_throughput.timing.loop import (
    CompilationDuringTiming,
    run_interleaved,
    run_loop,
    warm_up,
)
from anb.collect_throughput.timing.protocol import (
    Protocol,
    StoppingRule,
    WarmupRule,
    available_devices,
    device_from_mapping,
    load_device,
)
from anb.collect_throughput.timing.stats import relative_ci, summarize, t_quantile, trimmed_mean
from anb.searchspace.space import ANB_SPACE


class ScriptedClock:
    """A clock that returns scripted step durations: drives the rule deterministically."""

    def __init__(self, durations):
        self.durations = iter(durations)
        self.steps = 0

    def step(self):
        self.steps += 1

    def start(self):
        self.steps = 0

    def stop(self):
        return sum(next(self.durations) for _ in range(self.steps))


def test_every_shipped_device_config_loads():
    names = available_devices()
    assert {"cpu-ort", "cpu-torch", "cpu-int8", "a100", "tpuv3"} <= set(names)
    for name in names:
        config = load_device(name, space=ANB_SPACE.name)
        assert config.protocols and all(p.device == config.name for p in config.protocols)
        assert all(k.endswith(f"_{config.name}") for k in config.keys)


def test_overrides_apply_and_batch_only_to_throughput():
    config = load_device("cpu-ort", {"resolution": 64, "batch": 4,
                                     "stopping": {"budget_seconds": 1}}, space=ANB_SPACE.name)
    by_kind = {p.kind: p for p in config.protocols}
    assert by_kind["latency"].batch == 1 and by_kind["throughput"].batch == 4
    assert all(p.resolution == 64 and p.stopping.budget_seconds == 1 for p in config.protocols)


@pytest.mark.parametrize("changes, field", [
    ({"precision": "fp8"}, "precision"), ({"batch": 0}, "batch"), ({"kind": "power"}, "kind"),
    ({"resolution": 16}, "resolution"), ({"backend": "tensorrt"}, "backend"),
    ({"precision": "int8"}, "precision"), ({"clock": "cpu", "threads": 2}, "clock"),
    ({"inputs": "imagenet"}, "imagenet_dir"), ({"device": "a b"}, "device"),
])
def test_bad_protocol_names_field_and_value(changes, field):
    with pytest.raises(ValueError) as err:
        Protocol(**{"device": "cpu-ort", "backend": "onnxruntime", **changes})
    assert field in str(err.value)


def test_bad_rules_and_config_tables_are_named():
    with pytest.raises(ValueError, match="stopping.rel_ci"):
        StoppingRule(rel_ci=-1)
    with pytest.raises(ValueError, match="stopping.max_reps"):
        StoppingRule(min_reps=10, max_reps=5)
    with pytest.raises(ValueError, match="warmup.window"):
        WarmupRule(window=0)
    with pytest.raises(ValueError, match="stopping.typo"):
        device_from_mapping({"name": "x", "backend": "torch", "latency": {},
                             "stopping": {"typo": 1}}, space=ANB_SPACE.name)
    with pytest.raises(ValueError, match="kind='local' needs at least one of the tables"):
        device_from_mapping({"kind": "local", "name": "x", "backend": "torch"},
                            space=ANB_SPACE.name)
    with pytest.raises(ValueError, match="'nope'"):
        load_device("nope", space=ANB_SPACE.name)


def test_t_quantile_matches_scipy():
    for df in (3, 5, 10, 30, 200):
        for p in (0.9, 0.975, 0.995):
            assert t_quantile(p, df) == pytest.approx(sps.t.ppf(p, df),
                                                      rel=1e-2 if df < 5 else 2e-3)


def test_trimmed_statistics_resist_preempted_repetitions():
    rng = np.random.default_rng(0)
    clean = 10 + rng.normal(0, 0.05, 60)
    spiky = clean.copy()
    spiky[::10] *= 3  # every tenth repetition preempted
    assert trimmed_mean(spiky, 0.1) == pytest.approx(clean.mean(), rel=5e-3)
    assert relative_ci(spiky, 0.1) < 0.01 < relative_ci(spiky, 0.0)
    s = summarize(spiky)
    assert s["n"] == 60 and s["median"] == pytest.approx(np.median(spiky))
    assert s["cv"] == pytest.approx(s["trimmed_std"] / s["trimmed_mean"])
    assert math.isinf(relative_ci([1.0, 2.0]))


def test_warmup_waits_for_stable_step_time():
    durations = [1.0, 0.5, 0.3, 0.2, 0.11, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    clock = ScriptedClock(durations)
    times, _, reason = warm_up(clock.step, clock, WarmupRule(min_steps=3, window=3, tolerance=0.05))
    assert reason == "stable"
    # stable once the median of the last 3 (0.1) is within 5 % of the 3 before (0.11, 0.1, 0.1)
    assert times == durations[:10]


def test_warmup_runs_at_least_its_minimum_steps():
    """Catches: a warm-up that ignores its minimum step count (constant step times are stable
    from the second step; min_steps=7 must still run exactly 7)."""
    clock = ScriptedClock([0.1] * 50)
    times, _, reason = warm_up(clock.step, clock, WarmupRule(min_steps=7, window=1))
    assert (reason, len(times)) == ("stable", 7)
    clock = ScriptedClock([0.1] * 50)
    times, _, _ = warm_up(clock.step, clock, WarmupRule(min_steps=1, window=3))
    assert len(times) == 6  # two windows are needed whatever the minimum


def test_warmup_waits_for_compilation_to_stop():
    compiles = iter([0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5])
    count = [0]

    def compile_count():
        return count[0]

    clock = ScriptedClock([0.1] * 50)

    def step():
        clock.step()
        count[0] = next(compiles)

    times, compiled, reason = warm_up(step, clock, WarmupRule(min_steps=3, window=3), compile_count)
    assert reason == "stable" and compiled == 5
    assert len(times) >= 8  # steady times alone would have stopped at 6


def test_loop_converges_on_quiet_steps_and_stops_on_budget_when_noisy():
    rng = np.random.default_rng(1)
    quiet = ScriptedClock(list(1e-3 * (1 + 0.001 * rng.standard_normal(10_000))))
    result = run_loop(quiet.step, quiet, WarmupRule(), StoppingRule(min_reps=5, rel_ci=0.01,
                                                                     min_rep_seconds=0))
    assert result.stop_reason == "converged" and len(result.times) == 5
    noisy = ScriptedClock(list(1e-3 * rng.lognormal(0, 1.0, 100_000)))
    result = run_loop(noisy.step, noisy, WarmupRule(max_steps=10),
                      StoppingRule(min_reps=5, max_reps=40, rel_ci=1e-4, min_rep_seconds=0))
    assert result.stop_reason == "max_reps" and len(result.times) == 40


def test_loop_calibrates_inner_repetitions_to_min_rep_seconds():
    clock = ScriptedClock([0.01] * 10_000)
    result = run_loop(clock.step, clock, WarmupRule(), StoppingRule(min_rep_seconds=0.05))
    assert result.inner == 5
    assert result.times[0] == pytest.approx(0.01)  # per-step time, not per repetition


def test_compilation_while_timing_is_an_error():
    state = {"n": 0, "steps": 0}
    clock = ScriptedClock([0.01] * 1000)

    def step():
        clock.step()
        state["steps"] += 1
        if state["steps"] == 8:  # a new shape appears after warm-up (stable after 6 steps)
            state["n"] += 1

    with pytest.raises(CompilationDuringTiming, match="1 compilation"):
        run_loop(step, clock, WarmupRule(), StoppingRule(min_rep_seconds=0, rel_ci=1e-9),
                 lambda: state["n"])


def test_interleaved_rounds_time_every_model_equally_often():
    rng = np.random.default_rng(2)
    clocks = [ScriptedClock(list(base * (1 + 0.001 * rng.standard_normal(5000))))
              for base in (1e-3, 2e-3, 3e-3)]
    results = run_interleaved([c.step for c in clocks], clocks, WarmupRule(),
                              StoppingRule(min_reps=6, rel_ci=0.01, min_rep_seconds=0))
    assert [r.stop_reason for r in results] == ["converged"] * 3
    assert len({len(r.times) for r in results}) == 1 and len(results[0].times) == 6
    for r, base in zip(results, (1e-3, 2e-3, 3e-3), strict=True):
        assert np.median(r.times) == pytest.approx(base, rel=0.01)
        assert r.extra["interleaved_with"] == 3
    # one noisy model keeps all of them going until max_reps
    clocks = [ScriptedClock([1e-3] * 5000), ScriptedClock(list(1e-3 * rng.lognormal(0, 1, 5000)))]
    results = run_interleaved([c.step for c in clocks], clocks, WarmupRule(max_steps=10),
                              StoppingRule(min_reps=5, max_reps=15, rel_ci=1e-3,
                                           min_rep_seconds=0))
    assert all(r.stop_reason == "max_reps" and len(r.times) == 15 for r in results)


def _interleaved_sequence(levels, rounds, drift, rng, noise=0.002):
    """Round-robin order (fresh permutation each round), times = level * drift(t) * noise."""
    order = np.concatenate([rng.permutation(len(levels)) for _ in range(rounds)])
    t = np.arange(order.size)
    times = np.asarray(levels)[order] * drift(t) * np.exp(noise * rng.standard_normal(order.size))
    return order, times


def test_drift_factors_remove_machine_drift_shared_by_interleaved_models():
    from anb.collect_throughput.timing.stats import drift_factors

    rng = np.random.default_rng(3)
    levels = np.linspace(1e-3, 5e-3, 30)
    # the machine slows by up to 15 % in slow waves and a step: common to every model
    drift = lambda t: (1 + 0.08 * np.sin(t / 17.0)) * np.where(t > 300, 1.07, 1.0)  # noqa: E731
    order, times = _interleaved_sequence(levels, 20, drift, rng)
    factors = drift_factors(order, times, window=2)
    assert np.median(factors) == pytest.approx(1.0)
    corrected = times / factors
    for i in range(len(levels)):
        raw, fixed = times[order == i], corrected[order == i]
        assert np.std(fixed) / np.mean(fixed) < 0.4 * np.std(raw) / np.mean(raw)
    # the levels keep their ratios (a common scale is all the correction may change)
    med = np.array([np.median(corrected[order == i]) for i in range(len(levels))])
    assert np.allclose(med / med[0], levels / levels[0], rtol=0.01)


def test_drift_factors_never_let_a_repetition_correct_itself():
    from anb.collect_throughput.timing.stats import drift_factors

    rng = np.random.default_rng(4)
    order, times = _interleaved_sequence(np.linspace(1e-3, 2e-3, 10), 8, lambda t: 1.0, rng)
    spike = 37
    times[spike] *= 2.0  # one repetition of one model preempted: not machine drift
    factors = drift_factors(order, times, window=2)
    assert factors[spike] == pytest.approx(1.0, abs=0.01)
    assert np.all(np.abs(factors - 1) < 0.02)
    assert np.array_equal(drift_factors(order, times, window=0), np.ones(order.size))
    # with no drift at all, the correction must not shrink a model's own noise
    order, times = _interleaved_sequence(np.linspace(1e-3, 2e-3, 10), 30, lambda t: 1.0, rng,
                                         noise=0.02)
    for window in (1, 2):
        corrected = times / drift_factors(order, times, window=window)
        cv = [np.std(x[order == i]) / np.mean(x[order == i]) for x in (times, corrected)
              for i in range(10)]
        assert np.median(cv[10:]) >= 0.95 * np.median(cv[:10])
    with pytest.raises(ValueError, match="same length"):
        drift_factors(order[:-1], times)


class DriftingClocks:
    """Scripted clocks of several models on one machine whose speed drifts with every step."""

    def __init__(self, levels, drift):
        self.levels, self.drift, self.t = levels, drift, 0
        self.clocks = [self._clock(i) for i in range(len(levels))]

    def _clock(self, i):
        machine = self

        class Clock:
            steps = 0

            def step(self):
                self.steps += 1

            def start(self):
                self.steps = 0

            def stop(self):
                elapsed = 0.0
                for _ in range(self.steps):
                    elapsed += machine.levels[i] * machine.drift(machine.t)
                    machine.t += 1
                return elapsed

        return Clock()


def test_interleaved_loop_records_drift_and_corrects_its_statistics():
    from anb.collect_throughput.timing.result import Measurement

    levels = [1e-3, 1.5e-3, 2e-3, 3e-3]
    drift = lambda t: 1 + 0.1 * np.sin(t / 40.0)  # noqa: E731
    machine = DriftingClocks(levels, drift)
    rule = StoppingRule(min_reps=8, max_reps=40, rel_ci=0.002, min_rep_seconds=0)
    results = run_interleaved([c.step for c in machine.clocks], machine.clocks,
                              WarmupRule(max_steps=10), rule)
    for r in results:
        assert r.drift is not None and len(r.drift) == len(r.times)
        m = Measurement(arch="a", arch_id="x", device="cpu-ort", kind="latency", batch=1,
                        resolution=224, precision="fp32", times_s=r.times,
                        warmup_times_s=r.warmup_times, inner=r.inner, stop_reason=r.stop_reason,
                        protocol={"stopping": {"trim": 0.1}}, environment={}, drift=r.drift)
        entry = m.to_perf_entry()
        assert entry["raw_times_s"] == r.times and entry["drift_factors"] == r.drift
        assert entry["cv"] < 0.5 * entry["cv_uncorrected"]
    # the correction is what made the rule converge: without it the drift keeps the CI wide
    assert results[0].stop_reason == "converged"
    machine = DriftingClocks(levels, drift)
    off = run_interleaved([c.step for c in machine.clocks], machine.clocks,
                          WarmupRule(max_steps=10), StoppingRule(**{**rule.__dict__,
                                                                    "drift_window": 0}))
    assert off[0].drift is None and off[0].stop_reason == "max_reps"
    with pytest.raises(ValueError, match="stopping.drift_window"):
        StoppingRule(drift_window=-1)
