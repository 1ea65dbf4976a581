"""How long a search will take, estimated from a short pilot run before the real one.

``anb search`` refuses an evaluation budget whose estimate exceeds :data:`MAX_SECONDS` unless
told ``--yes``: a mistyped budget (``10**12``) otherwise starts a run of hundreds of hours.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from anb.nas.mutation import random_choices
from anb.nas.search import Problem, SearchResult

#: Longest estimated search ``anb search`` starts without ``--yes`` (seconds).
MAX_SECONDS = 3600.0
#: Evaluations of the pilot run the estimate is taken from.
PILOT_EVALUATIONS = 256

Algorithm = Callable[..., SearchResult]


def estimate_seconds(algorithm: Algorithm, problem: Problem, budget: int, seed: int = 0
                     ) -> float:
    """Estimated wall time of ``algorithm`` on ``problem`` for ``budget`` evaluations: a pilot
    of :data:`PILOT_EVALUATIONS` (after one warm-up evaluation), scaled linearly. ``problem``
    should be a fresh copy: a noisy evaluator's stream advances with the pilot."""
    pilot = min(budget, PILOT_EVALUATIONS)
    problem.evaluate(random_choices(1, np.random.default_rng(seed), problem.space))  # warm-up
    start = time.perf_counter()
    algorithm(problem, pilot, seed=seed)
    return (time.perf_counter() - start) * budget / pilot


def describe(seconds: float) -> str:
    """``"42 s"``, ``"12.5 min"`` or ``"746.2 h"``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"
