"""Multi-objective search on pymoo, behind anb's evaluator (one batched query per generation).

- :func:`pymoo_nsga2`: pymoo's NSGA-II as its documentation sets it up for integer variables
  (integer random sampling, SBX and polynomial mutation with rounding), NSGA-III with
  Das-Dennis reference directions for 3+ objectives: the generic baseline.
- :func:`nsga2` (anb's default): the same engine (constrained domination, crowding, duplicate
  elimination) with what anb knows about the space: one-choice mutations and stage-wise
  crossover that stay inside the space, a first population seeded with the analytic-cost
  extremes (the smallest and largest architecture of every stage choice), and 32 offspring per
  generation of a 64-member population (more, smaller generations).

pymoo minimises; objectives go in negated scores, constraints as ``value - bound <= 0``.
"""
from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from anb.extras import missing

try:
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.algorithms.moo.nsga3 import NSGA3
    from pymoo.core.crossover import Crossover
    from pymoo.core.mutation import Mutation
    from pymoo.core.problem import Problem as PymooProblem
    from pymoo.core.sampling import Sampling
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.repair.rounding import RoundingRepair
    from pymoo.operators.sampling.rnd import IntegerRandomSampling
    from pymoo.optimize import minimize
    from pymoo.util.ref_dirs import get_reference_directions
except ModuleNotFoundError as err:
    raise missing(err, "search", "multi-objective search on pymoo (anb.nas.moo)") from None

from anb.nas.mutation import mutate, random_choices
from anb.nas.search import Problem, SearchResult, check_budget, check_counts, concat_values
from anb.searchspace.base import Space


def to_positions(choices: np.ndarray, space: Space) -> np.ndarray:
    return space.positions(choices)


def from_positions(x: np.ndarray, space: Space) -> np.ndarray:
    return space.from_positions(np.clip(np.round(x).astype(np.int64), 0, space.radices() - 1))


class _Adapter(PymooProblem):
    """anb's :class:`Problem` as a pymoo problem over choice positions; keeps every evaluation."""

    def __init__(self, problem: Problem, budget: int, bar: tqdm):
        self.problem, self.budget, self.bar = problem, budget, bar
        self.chunks: list[np.ndarray] = []
        self.values: list[dict[str, np.ndarray]] = []
        self.done = 0
        super().__init__(n_var=len(problem.space.variables), n_obj=len(problem.objectives),
                         n_ieq_constr=len(problem.constraints) + problem.supported_only, xl=0,
                         xu=problem.space.radices() - 1, vtype=int)

    def _evaluate(self, x, out, *args, **kwargs):
        choices = from_positions(np.asarray(x), self.problem.space)
        values = self.problem.evaluate(choices)
        keep = max(0, min(len(choices), self.budget - self.done))
        if keep:
            self.chunks.append(choices[:keep])
            self.values.append({k: v[:keep] for k, v in values.items()})
        self.done += len(choices)
        self.bar.update(keep)
        out["F"] = -self.problem.scores(values)
        columns = [(values[c.metric] - c.bound) if c.upper else (c.bound - values[c.metric])
                   for c in self.problem.constraints]
        if self.problem.supported_only:  # flagged (1) violates, supported (0) satisfies
            columns.append(np.asarray(values.get("ood", np.zeros(len(choices))), float) - 0.5)
        if columns:
            out["G"] = np.stack(columns, axis=1)


class SpaceSampling(Sampling):
    """Random architectures plus the analytic-cost extremes (all-smallest / all-largest)."""

    def _do(self, problem, n_samples, *args, random_state=None, **kwargs):
        space = problem.problem.space
        rng = random_state
        radices = space.radices()
        extremes = np.stack([np.zeros_like(radices), radices - 1])[:n_samples]
        rest = to_positions(random_choices(n_samples - len(extremes), rng, space), space)
        return np.concatenate([extremes, rest]).astype(float)


class StageCrossover(Crossover):
    """Uniform crossover of whole variable groups (a MnasNet stage's e, k, l, se travel
    together; see ``Space.variable_groups``)."""

    def __init__(self):
        super().__init__(2, 2)

    def _do(self, problem, X, *args, random_state=None, **kwargs):
        _, n, _ = X.shape
        groups = problem.problem.space.variable_groups()
        take = (random_state.random((n, groups.max() + 1)) < 0.5)[:, groups]
        return np.stack([np.where(take, X[0], X[1]), np.where(take, X[1], X[0])])


class ChoiceMutation(Mutation):
    """Every child changes exactly one choice to another allowed value."""

    def _do(self, problem, X, *args, random_state=None, **kwargs):
        space = problem.problem.space
        children = mutate(from_positions(X, space), random_state, space)
        return to_positions(children, space).astype(float)


def _run(problem: Problem, budget: int, seed: int, algorithm, name: str, info: dict,
         progress: bool) -> SearchResult:
    check_budget(budget)
    bar = tqdm(total=budget, disable=not progress, desc=name)
    adapter = _Adapter(problem, budget, bar)
    minimize(adapter, algorithm, ("n_eval", budget), seed=seed, verbose=False)
    bar.close()
    return SearchResult(problem, np.concatenate(adapter.chunks), concat_values(adapter.values),
                        name, seed, info)


def _engine(problem: Problem, population: int, offspring: int | None = None, **operators):
    if len(problem.objectives) >= 3:
        directions = get_reference_directions("das-dennis", len(problem.objectives),
                                              n_partitions=_partitions(len(problem.objectives),
                                                                       population))
        return NSGA3(directions, pop_size=population, n_offsprings=offspring,
                     eliminate_duplicates=True, **operators)
    return NSGA2(pop_size=population, n_offsprings=offspring, eliminate_duplicates=True,
                 **operators)


def _partitions(n_obj: int, population: int) -> int:
    from math import comb

    p = 1
    while comb(p + 1 + n_obj - 1, n_obj - 1) <= population:
        p += 1
    return p


def pymoo_nsga2(problem: Problem, budget: int, seed: int = 0, population: int = 100,
                progress: bool = False) -> SearchResult:
    """pymoo's NSGA-II (NSGA-III for 3+ objectives) with its integer-variable defaults."""
    check_counts(population=population)
    algorithm = _engine(problem, population, sampling=IntegerRandomSampling(),
                        crossover=SBX(prob=1.0, eta=3.0, vtype=float, repair=RoundingRepair()),
                        mutation=PM(prob=1.0, eta=3.0, vtype=float, repair=RoundingRepair()))
    return _run(problem, budget, seed, algorithm, "pymoo_nsga2", {"population": population},
                progress)


def nsga2(problem: Problem, budget: int, seed: int = 0, population: int = 64,
          progress: bool = False, offspring: int | None = 32) -> SearchResult:
    """anb's default multi-objective search: pymoo NSGA-II/III with space-aware operators."""
    check_counts(population=population, offspring=offspring)
    algorithm = _engine(problem, population, offspring, sampling=SpaceSampling(),
                        crossover=StageCrossover(), mutation=ChoiceMutation())
    return _run(problem, budget, seed, algorithm, "nsga2",
                {"population": population, "offspring": offspring, "engine": "pymoo"}, progress)
