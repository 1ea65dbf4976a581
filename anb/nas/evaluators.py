"""Evaluators: map a choices array of the space to metric name -> values.

``analytic``: exact MACs / true MACs / params (millions) and depth from the counters.
``surrogate``: a fitted benchmark's predictions (optionally one seeded noisy draw per query), with
each metric's ``<metric>_std`` and the out-of-distribution flag ``ood``.
:func:`combined` answers analytic metrics exactly and sends the rest to the surrogate.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from anb.nas.objectives import Evaluator
from anb.searchspace.base import Space

ANALYTIC_METRICS = ("macs", "true_macs", "params", "depth")


def analytic_evaluator(resolution: int | None = None, *, space: Space) -> Evaluator:
    """Exact architecture costs; see :data:`ANALYTIC_METRICS` (resolution: the space's)."""

    def evaluate(choices: np.ndarray, metrics: Sequence[str]) -> dict[str, np.ndarray]:
        unknown = sorted(set(metrics) - set(ANALYTIC_METRICS))
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; the analytic evaluator knows "
                             f"{list(ANALYTIC_METRICS)}")
        table = space.cost_table(choices, resolution=resolution)
        known = {name: table.total(name) / 1e6 for name in ("macs", "true_macs", "params")}
        known["depth"] = space.depth(choices).sum(axis=1).astype(float)
        return {m: known[m] for m in metrics}

    return evaluate


def surrogate_evaluator(benchmark: Any, noise: bool = False, seed: int = 0) -> Evaluator:
    """Predictions of a fitted benchmark (``anb.surrogates.load``); with ``noise`` each call
    draws plausible observed values from a seeded stream."""
    rng = np.random.default_rng(seed)

    def evaluate(choices: np.ndarray, metrics: Sequence[str]) -> dict[str, np.ndarray]:
        call_seed = int(rng.integers(2**31)) if noise else None
        frame = benchmark.query(choices, metrics=list(metrics), noise=noise, seed=call_seed)
        out = {}
        for m in metrics:
            name = benchmark.resolve(m)[0]
            out[m] = frame[name].to_numpy(dtype=float)
            out[f"{m}_std"] = frame[f"{name}_std"].to_numpy(dtype=float)
        if "ood" in frame:
            out["ood"] = frame["ood"].to_numpy(dtype=bool)
        return out

    return evaluate


def combined(surrogate: Evaluator | None, resolution: int | None = None,
             *, space: Space) -> Evaluator:
    """Analytic metrics exactly, everything else from ``surrogate`` (if given)."""
    analytic = analytic_evaluator(resolution, space=space)

    def evaluate(choices: np.ndarray, metrics: Sequence[str]) -> dict[str, np.ndarray]:
        exact = [m for m in metrics if m in ANALYTIC_METRICS]
        rest = [m for m in metrics if m not in ANALYTIC_METRICS]
        out = dict(analytic(choices, exact)) if exact else {}
        if rest:
            if surrogate is None:
                raise ValueError(f"metric(s) {rest} need a surrogate benchmark; the analytic "
                                 f"metrics are {list(ANALYTIC_METRICS)}")
            out.update(surrogate(choices, rest))
        return out

    return evaluate
