"""A fitted anb benchmark as an OptunaHub benchmark problem (``optunahub.benchmarks.BaseProblem``).

    problem = AnbProblem(anb.load(), objectives=["val_top1", "latency_zcu102"],
                         constraints=["throughput_a100>=5000"])
    study = optuna.create_study(directions=problem.directions)
    study.optimize(problem, n_trials=100)

One categorical parameter per variable of the benchmark's search space (its labels, or its
numbers), in any space. ``directions`` follow anb's senses (accuracy and throughput maximised;
latency, ``train_time``, size minimised). ``evaluate_constraints`` gives one value per
constraint, ``value - bound`` for ``<=`` and ``bound - value`` for ``>=`` (<= 0 is feasible,
Optuna's convention), named like the constraint; the problem sets them on each trial itself.
``noise=True`` draws one plausible repeated measurement per (seed, architecture, metric).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anb.extras import missing

try:
    import optuna
    from optunahub.benchmarks import BaseProblem
except ModuleNotFoundError as err:
    raise missing(err, "optunahub",
                  "the OptunaHub problem (anb.integrations.optuna)") from None

from anb.integrations.common import (
    check_metrics,
    domains,
    maximised,
    parse_constraints,
    to_choices,
)
from anb.nas.objectives import Constraint


class AnbProblem(BaseProblem):
    """OptunaHub problem of a fitted benchmark (see the module doc); single-objective with one
    objective, multi-objective with several."""

    def __init__(self, bench: Any, objectives: Sequence[str] = ("val_top1",),
                 constraints: Sequence[str | Constraint] = (), noise: bool = False,
                 seed: int = 0):
        self.bench = bench
        self.objectives = check_metrics(list(objectives), bench.metrics)
        self.constraints = parse_constraints(constraints, bench.metrics)
        self.noise, self.seed = noise, seed
        self._space = {d.name: optuna.distributions.CategoricalDistribution(list(d.values))
                       for d in domains(bench.space)}
        self._last: tuple[tuple, dict[str, float]] | None = None

    @property
    def search_space(self) -> dict[str, optuna.distributions.BaseDistribution]:
        return dict(self._space)

    @property
    def directions(self) -> list[optuna.study.StudyDirection]:
        return [optuna.study.StudyDirection.MAXIMIZE if maximised(m)
                else optuna.study.StudyDirection.MINIMIZE for m in self.objectives]

    def values(self, params: dict[str, Any]) -> dict[str, float]:
        """Every objective and constrained metric of one configuration (the last one is kept,
        so ``evaluate_constraints`` and ``evaluate`` of a trial query once)."""
        key = tuple(sorted(params.items()))
        if self._last is None or self._last[0] != key:
            names = list(dict.fromkeys([*self.objectives, *(c.metric for c in self.constraints)]))
            row = self.bench.query(to_choices([params], self.bench.space), names,
                                   noise=self.noise, seed=self.seed).iloc[0]
            self._last = (key, {m: float(row[m]) for m in names})
        return self._last[1]

    def evaluate(self, params: dict[str, Any]) -> float | list[float]:
        values = self.values(params)
        out = [values[m] for m in self.objectives]
        return out[0] if len(out) == 1 else out

    def evaluate_constraints(self, params: dict[str, Any]) -> dict[str, float]:
        values = self.values(params)
        return {str(c): values[c.metric] - c.bound if c.upper else c.bound - values[c.metric]
                for c in self.constraints}
