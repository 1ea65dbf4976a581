"""How much wider a prediction in a hole of the training data must be, learned at fit time.

Internal hold-outs cut holes into the training data: each fold picks units in slots of
:meth:`Space.cost_units` at random (for MnasNet a stage's ``(e, k, se)``) and removes every
train/val row that uses one of them, until about ``HOLE_SHARE`` of the rows are gone; the
benchmark is refitted on the rest and predicts the removed rows, whose units it has never seen.
Per target, the hole std is the smallest that, added in quadrature to the refit's own std
(times the rows' ``ood_hole``), puts ``LEVEL`` of the removed rows inside their 90 % interval
(0 when they are inside already). The published test split is never read.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.stats import norm

from anb.searchspace.base import Space

#: Share of the train/val rows one fold removes (roughly: whole units are removed).
HOLE_SHARE = 0.2
#: Interval level the learned hole std is calibrated to.
LEVEL = 0.9
#: A unit is a candidate hole when at least this many rows use it.
MIN_ROWS = 10


def hole_folds(choices: np.ndarray, space: Space, n_folds: int, seed: int = 0
               ) -> list[np.ndarray]:
    """Per fold a boolean mask over ``choices``: the rows using one of the fold's held-out
    units. Folds take different units; a fold never removes more than twice ``HOLE_SHARE``."""
    units = space.cost_units(choices)
    used = np.asarray(units.counts) > 0
    unit = np.asarray(units.units, dtype=np.int64)
    candidates = [(s, u) for s in range(unit.shape[1])
                  for u in np.unique(unit[used[:, s], s])
                  if 1 < len(np.unique(unit[used[:, s], s]))
                  and (used[:, s] & (unit[:, s] == u)).sum() >= MIN_ROWS]
    rng = np.random.default_rng(seed)
    order = [candidates[i] for i in rng.permutation(len(candidates))]
    folds = []
    for _ in range(n_folds):
        mask = np.zeros(len(choices), dtype=bool)
        for s, u in list(order):
            if mask.mean() >= HOLE_SHARE:
                break
            grown = mask | (used[:, s] & (unit[:, s] == u))
            if grown.mean() <= 2 * HOLE_SHARE:
                mask = grown
                order.remove((s, u))
        if mask.any():
            folds.append(mask)
    return folds


def hole_std(errors: np.ndarray, std: np.ndarray, hole: np.ndarray,
             level: float = LEVEL) -> float:
    """The smallest ``a >= 0`` with ``|error| <= z * sqrt(std**2 + (a * hole)**2)`` for a
    ``level`` share of the rows (``z``: the central ``level`` Gaussian quantile)."""
    keep = hole > 0
    if not keep.any():
        return 0.0
    z = norm.ppf(0.5 + level / 2)
    needed = np.sqrt(np.maximum((errors[keep] / z) ** 2 - std[keep] ** 2, 0.0)) / hole[keep]
    k = int(np.ceil(level * len(needed) - 1e-9)) - 1  # the k+1 smallest cover the level
    return float(np.sort(needed)[max(k, 0)])


#: Refits the benchmark on the given masks and returns, for the rows of ``held`` (a boolean
#: mask), per target ``(label present, error, std)`` in model space plus the rows' ``ood_hole``.
Refit = Callable[[dict[str, np.ndarray], np.ndarray],
                 tuple[dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray]]


def learn_hole_std(choices: np.ndarray, masks: dict[str, np.ndarray], space: Space,
                   n_folds: int, refit: Refit, seed: int = 0) -> dict[str, float]:
    """Per target the hole std (model space) from ``n_folds`` internal hold-outs of the train
    and val rows of ``masks`` (see the module docstring)."""
    seen = masks["train"] | masks["val"]
    pooled: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for fold in hole_folds(choices[seen], space, n_folds, seed):
        cut = np.zeros(len(choices), dtype=bool)
        cut[np.flatnonzero(seen)[fold]] = True
        sub = {"train": masks["train"] & ~cut, "val": masks["val"] & ~cut,
               "test": np.zeros(len(choices), dtype=bool)}
        results, hole = refit(sub, cut)
        for target, (present, error, std) in results.items():
            pooled.setdefault(target, []).append((error[present], std[present], hole[present]))
    out = {}
    for t, rows in pooled.items():
        error, std, hole = (np.concatenate(parts) for parts in zip(*rows, strict=True))
        out[t] = hole_std(error, std, hole)
    return out
