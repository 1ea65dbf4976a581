"""Search algorithms that run on an evaluator (a surrogate benchmark or the analytic counters).

- :func:`random_search`: uniform samples, the baseline every NAS paper reports.
- :func:`regularized_evolution`: aging evolution (Real et al., 2019) with tournament
  selection and one-choice mutations; ``batch`` children per step for cheap batched queries.
- :func:`nsga2` / :func:`pymoo_nsga2`: multi-objective search on pymoo (:mod:`anb.nas.moo`).

Constraints are handled by feasibility first: a feasible architecture beats an infeasible one;
two infeasible ones compare by total violation (pymoo's constrained domination for NSGA-II).
With ``supported_only`` an architecture the surrogate flags as out of distribution counts as
infeasible. Every evaluated architecture is kept in the
result's history, in evaluation order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from anb.nas.mutation import mutate, random_choices
from anb.nas.objectives import Constraint, Evaluator, Objective, check_objectives
from anb.nas.pareto import pareto_mask
from anb.searchspace.base import Space


@dataclass
class Problem:
    """What to optimise: an evaluator, objectives and constraints over a space."""

    evaluator: Evaluator
    objectives: Sequence[Objective]
    constraints: Sequence[Constraint] = ()
    space: Space = field(kw_only=True)
    #: count out-of-distribution architectures (the surrogate's ``ood`` flag) as infeasible
    supported_only: bool = False

    def __post_init__(self) -> None:
        if not self.objectives:
            raise ValueError("objectives is empty: a search needs at least one objective, "
                             "e.g. 'val_top1:max'")
        check_objectives(self.objectives)
        self.metrics = list(dict.fromkeys(
            [o.metric for o in self.objectives] + [c.metric for c in self.constraints]))

    def evaluate(self, choices: np.ndarray) -> dict[str, np.ndarray]:
        """The metrics, plus whatever else the evaluator reports (``<metric>_std``, ``ood``)."""
        values = self.evaluator(choices, self.metrics)
        out = {m: np.asarray(values[m], dtype=float) for m in self.metrics}
        out.update({k: np.asarray(v) for k, v in values.items() if k not in out})
        return out

    def scores(self, values: dict[str, np.ndarray]) -> np.ndarray:
        """``(n, objectives)``, larger is better."""
        return np.stack([o.score(values[o.metric]) for o in self.objectives], axis=1)

    def violation(self, values: dict[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(values.values())))
        total = np.zeros(n)
        for c in self.constraints:
            total += c.violation(values[c.metric])
        if self.supported_only and "ood" in values:
            total += np.asarray(values["ood"], dtype=float)
        return total


@dataclass
class SearchResult:
    """Every evaluation of a search, in order, and the summaries people ask for."""

    problem: Problem
    choices: np.ndarray
    values: dict[str, np.ndarray]
    algorithm: str
    seed: int
    info: dict = field(default_factory=dict)

    @property
    def feasible(self) -> np.ndarray:
        return self.problem.violation(self.values) == 0

    def history(self) -> pd.DataFrame:
        archs = self.problem.space.archs_from_choices(self.choices)
        frame = pd.DataFrame({"step": np.arange(len(archs)), "space": self.problem.space.name,
                              "arch_id": [a.id for a in archs],
                              "arch": [str(a) for a in archs]})
        for metric, values in self.values.items():
            frame[metric] = values
        frame["feasible"] = self.feasible
        return frame

    def violations(self, row: int) -> dict[str, float]:
        """How far evaluation ``row`` is outside each constraint it breaks (``ood``: 1)."""
        out = {str(c): float(c.violation(self.values[c.metric][row:row + 1])[0])
               for c in self.problem.constraints}
        if self.problem.supported_only and "ood" in self.values:
            out["in-distribution (supported_only)"] = float(bool(self.values["ood"][row]))
        return {name: gap for name, gap in out.items() if gap > 0}

    def best(self) -> pd.Series:
        """The best feasible evaluation of the first objective (the least violating if none)."""
        frame = self.history()
        score = self.problem.scores(self.values)[:, 0]
        key = np.where(self.feasible, score, -np.inf)
        if not self.feasible.any():
            key = -self.problem.violation(self.values)
        return frame.iloc[int(np.argmax(key))]

    def best_supported(self) -> pd.Series | None:
        """The best feasible evaluation the surrogate does not flag as out of distribution."""
        if "ood" not in self.values:
            return self.best()
        ok = self.feasible & ~np.asarray(self.values["ood"], dtype=bool)
        if not ok.any():
            return None
        score = np.where(ok, self.problem.scores(self.values)[:, 0], -np.inf)
        return self.history().iloc[int(np.argmax(score))]

    def hypervolume(self, reference: np.ndarray | None = None) -> tuple[float, list[float]]:
        """Hypervolume of the feasible front in score space (larger is better) and the
        reference point used (default: the worst score of every objective in the history)."""
        from anb.nas.pareto import hypervolume

        scores = self.problem.scores(self.values)
        reference = scores.min(axis=0) if reference is None else np.asarray(reference, float)
        feasible = scores[self.feasible]
        return hypervolume(feasible, reference) if len(feasible) else 0.0, reference.tolist()

    def incumbent_trace(self) -> np.ndarray:
        """Best feasible first-objective value after each evaluation (NaN before any)."""
        objective = self.problem.objectives[0]
        score = np.where(self.feasible, objective.score(self.values[objective.metric]), -np.inf)
        best = np.maximum.accumulate(score)
        trace = np.where(np.isfinite(best), best, np.nan)
        return trace if objective.maximise else -trace

    def pareto_front(self) -> pd.DataFrame:
        """Feasible, non-dominated evaluations (unique architectures)."""
        frame = self.history()
        keep = self.feasible.copy()
        scores = self.problem.scores(self.values)
        mask = np.zeros(len(frame), dtype=bool)
        if keep.any():
            idx = np.nonzero(keep)[0]
            mask[idx[pareto_mask(scores[idx])]] = True
        return frame[mask].drop_duplicates("arch_id").reset_index(drop=True)


def _fitness(problem: Problem, values: dict[str, np.ndarray]) -> np.ndarray:
    """Scalar fitness for single-objective selection: feasible first, then score."""
    violation = problem.violation(values)
    score = problem.scores(values)[:, 0]
    return np.where(violation == 0, score, -1e12 - violation)


def concat_values(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Objective values of batches evaluated in turn, as one batch."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def random_search(problem: Problem, budget: int, seed: int = 0, batch: int = 1024,
                  progress: bool = False) -> SearchResult:
    """Evaluate ``budget`` uniform samples in batches."""
    check_budget(budget)
    check_counts(batch=batch)
    rng = np.random.default_rng(seed)
    chunks, values = [], []
    for start in tqdm(range(0, budget, batch), disable=not progress, desc="random search"):
        choices = random_choices(min(batch, budget - start), rng, problem.space)
        chunks.append(choices)
        values.append(problem.evaluate(choices))
    return SearchResult(problem, np.concatenate(chunks), concat_values(values), "random", seed)


def regularized_evolution(problem: Problem, budget: int, seed: int = 0, population: int = 64,
                          sample: int = 16, batch: int = 1,
                          progress: bool = False) -> SearchResult:
    """Aging evolution: each step, ``batch`` tournaments of ``sample`` members pick parents,
    each parent yields one mutated child, and the ``batch`` oldest members die."""
    check_budget(budget)
    check_counts(population=population, batch=batch)
    if not 1 <= sample <= population:
        raise ValueError(f"sample={sample} must be in 1..population ({population})")
    rng = np.random.default_rng(seed)
    pop = random_choices(min(population, budget), rng, problem.space)
    pop_values = problem.evaluate(pop)
    chunks, values = [pop], [pop_values]
    fitness = _fitness(problem, pop_values)
    done = len(pop)
    bar = tqdm(total=budget, initial=done, disable=not progress, desc="regularized evolution")
    while done < budget:
        n = min(batch, budget - done)
        # each tournament samples ``sample`` distinct members (without replacement)
        contenders = np.argsort(rng.random((n, len(pop))), axis=1)[:, :sample]
        winners = contenders[np.arange(n), np.argmax(fitness[contenders], axis=1)]
        children = mutate(pop[winners], rng, problem.space)
        child_values = problem.evaluate(children)
        chunks.append(children)
        values.append(child_values)
        pop = np.concatenate([pop[n:], children])
        fitness = np.concatenate([fitness[n:], _fitness(problem, child_values)])
        done += n
        bar.update(n)
    bar.close()
    return SearchResult(problem, np.concatenate(chunks), concat_values(values),
                        "regularized_evolution", seed,
                        {"population": population, "sample": sample, "batch": batch})


def nsga2(problem: Problem, budget: int, seed: int = 0, population: int = 64,
          progress: bool = False, offspring: int | None = 32) -> SearchResult:
    """anb's default multi-objective search: pymoo NSGA-II (NSGA-III for 3+ objectives) with
    space-aware operators; see :mod:`anb.nas.moo`."""
    from anb.nas.moo import nsga2 as run

    return run(problem, budget, seed, population, progress, offspring)


def pymoo_nsga2(problem: Problem, budget: int, seed: int = 0, population: int = 100,
                progress: bool = False) -> SearchResult:
    """pymoo's NSGA-II with its integer-variable defaults (the generic baseline)."""
    from anb.nas.moo import pymoo_nsga2 as run

    return run(problem, budget, seed, population, progress)


#: name -> search(problem, budget, seed=..., progress=...)
ALGORITHMS: dict[str, Callable[..., SearchResult]] = {
    "random": random_search, "re": regularized_evolution, "nsga2": nsga2,
    "pymoo_nsga2": pymoo_nsga2}
#: The algorithms that run on pymoo (the ``search`` extra).
PYMOO_ALGORITHMS = ("nsga2", "pymoo_nsga2")


def check_counts(**counts: int | None) -> None:
    """Each of a search's sizes (``batch``, ``population``...) is an integer >= 1 (None: its
    default)."""
    for name, value in counts.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def check_budget(budget: int) -> None:
    """A search's budget is at least one evaluation."""
    if budget < 1:
        raise ValueError(f"budget must be >= 1 evaluation, got {budget}")
