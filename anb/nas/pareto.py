"""Pareto utilities on score matrices where larger is better in every column."""
from __future__ import annotations

import numpy as np


def dominates(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``out[i, j]``: row ``i`` of ``a`` dominates row ``j`` of ``b``."""
    ge = (a[:, None, :] >= b[None, :, :]).all(axis=2)
    gt = (a[:, None, :] > b[None, :, :]).any(axis=2)
    return ge & gt  # type: ignore[return-value]  # numpy's stubs: .all(axis=) may be a scalar


def pareto_mask(scores: np.ndarray) -> np.ndarray:
    """True for rows no other row dominates."""
    scores = np.asarray(scores, dtype=float)
    return ~dominates(scores, scores).any(axis=0)  # type: ignore[return-value]  # as above


def non_dominated_fronts(scores: np.ndarray) -> np.ndarray:
    """Front number of every row (0 = Pareto front), by repeated peeling."""
    scores = np.asarray(scores, dtype=float)
    dom = dominates(scores, scores)
    rank = np.full(len(scores), -1)
    remaining = np.ones(len(scores), dtype=bool)
    front = 0
    while remaining.any():
        dominated = dom[remaining][:, remaining].any(axis=0)
        current = np.nonzero(remaining)[0][~dominated]
        rank[current] = front
        remaining[current] = False
        front += 1
    return rank


def crowding_distance(scores: np.ndarray) -> np.ndarray:
    """NSGA-II crowding distance within one front (boundary points get infinity)."""
    scores = np.asarray(scores, dtype=float)
    n, m = scores.shape
    distance = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for j in range(m):
        order = np.argsort(scores[:, j], kind="stable")
        column = scores[order, j]
        span = column[-1] - column[0]
        distance[order[[0, -1]]] = np.inf
        if span > 0:
            distance[order[1:-1]] += (column[2:] - column[:-2]) / span
    return distance


def hypervolume(scores: np.ndarray, reference: np.ndarray) -> float:
    """Volume dominated by score rows (larger is better, any number of objectives) above
    ``reference``: exact, by slicing along the last objective (equal to pymoo's HV)."""
    points = np.asarray(scores, dtype=float)
    reference = np.asarray(reference, dtype=float)
    points = points[(points > reference).all(axis=1)]
    if not len(points):
        return 0.0
    return _volume(points[pareto_mask(points)] - reference)


def _volume(points: np.ndarray) -> float:
    """Volume dominated by positive points above the origin (larger is better)."""
    if points.shape[1] == 1:
        return float(points.max())
    order = np.argsort(-points[:, -1], kind="stable")  # slabs from the top of the last axis
    points, total = points[order], 0.0
    for i in range(len(points)):
        low = points[i + 1, -1] if i + 1 < len(points) else 0.0
        if points[i, -1] > low:
            total += _volume(points[: i + 1, :-1]) * (points[i, -1] - low)
    return total
