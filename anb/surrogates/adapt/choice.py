"""Out-of-fold choices among candidates and their honest error.

Each candidate is a column of out-of-fold errors (prediction minus the measured log cost) on
the measured rows. Two rules choose among them: the least squared error
(:func:`selected_rmse` scores it), and, from enough rows, the best rank agreement of the
held-out predictions with the measurements (:func:`rank_choice`), the least squared error
among the candidates within a margin of the best: what a benchmark is asked is an order, and
squared error does not order the candidates by rank where they differ (issue 47's "never
worse than simple"). The error of the winner on the rows it was chosen on is optimistic (the
choice saw them), so the std's error scores each row under the candidate chosen on the other
rows."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def selected_rmse(residuals: np.ndarray) -> float:
    """RMSE over the rows of ``residuals`` (``(n, k)``: each column a candidate's out-of-fold
    errors) of row ``i``'s error under the candidate with the least squared error on the
    other rows; columns that are not finite everywhere are no candidates."""
    residuals = np.asarray(residuals, dtype=np.float64)
    squares = residuals[:, np.isfinite(residuals).all(axis=0)] ** 2
    if squares.shape[1] == 0:
        return float("inf")
    pick = np.argmin(squares.sum(axis=0) - squares, axis=1)
    return float(np.sqrt(np.mean(squares[np.arange(len(squares)), pick])))


def rank_agreement(residuals: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman correlation of each column's held-out predictions (``y + residuals``) with
    ``y`` (0 where either is constant); ``-inf`` for a column that is not finite everywhere
    (no candidate)."""
    from scipy.stats import rankdata  # fitting only

    residuals = np.asarray(residuals, dtype=np.float64)
    finite = np.isfinite(residuals).all(axis=0)
    out = np.full(residuals.shape[1], -np.inf)
    if not finite.any():
        return out
    ranks = rankdata(y[:, None] + residuals[:, finite], axis=0)
    truth = rankdata(y)
    ranks, truth = ranks - ranks.mean(0), truth - truth.mean()
    norm = np.sqrt((ranks**2).sum(0) * (truth**2).sum())
    out[finite] = np.divide((ranks * truth[:, None]).sum(0), norm, out=np.zeros_like(norm),
                            where=norm > 0)
    return out


def rank_choice(residuals: np.ndarray, y: np.ndarray, margin: float) -> int:
    """The column of ``residuals`` chosen by :func:`rank_agreement` with ``y``: among those
    within ``margin`` of the best agreement, the one of least squared error."""
    score = rank_agreement(residuals, y)
    if not np.isfinite(score).any():
        raise ValueError("no candidate has finite out-of-fold errors")
    near = np.flatnonzero(score >= score.max() - margin)
    return int(near[np.argmin(np.mean(residuals[:, near] ** 2, axis=0))])


def rank_selected_rmse(residuals: np.ndarray, y: np.ndarray, margin: float) -> float:
    """RMSE over the rows of row ``i``'s error under the column :func:`rank_choice` picks on
    the other rows (the rank choice scored out of fold)."""
    residuals = np.asarray(residuals, dtype=np.float64)
    errors = np.empty(len(y))
    for i in range(len(y)):
        rest = np.arange(len(y)) != i
        errors[i] = residuals[i, rank_choice(residuals[rest], y[rest], margin)]
    return float(np.sqrt(np.mean(errors**2)))


@dataclass(frozen=True)
class Choice:
    """What an out-of-fold choice picked: a column of the candidates (the blend weightings,
    then the proxies) and the std's error (the choice itself scored out of fold)."""

    column: int
    rmse: float


def choose(blends: np.ndarray, proxies: np.ndarray, y: np.ndarray, fallback: int,
           *, choice_min: int, rank_from: int, rank_below: int, margin: float) -> Choice:
    """The candidate that predicts, among ``blends`` (``(n, g)`` out-of-fold errors of the
    blend weightings) and ``proxies`` (``(n, p)``, of the analytic proxies' lines) on log
    costs ``y``: below ``choice_min`` rows column ``fallback`` (no choice); from
    ``rank_from`` up to ``rank_below`` rows :func:`rank_choice` among all; otherwise the
    blend of least squared error, replaced by the proxy of least such error where that is
    lower. The std's error scores each row under the candidate chosen without it."""
    n = len(y)
    if n < choice_min:
        return Choice(fallback, float(np.sqrt(np.mean(blends**2, axis=0))[fallback]))
    candidates = np.column_stack([blends, proxies])
    if rank_from <= n < rank_below:
        return Choice(rank_choice(candidates, y, margin),
                      rank_selected_rmse(candidates, y, margin))
    errors = np.mean(candidates**2, axis=0)
    blend = int(np.argmin(errors[:blends.shape[1]]))
    if proxies.shape[1] and np.nanmin(errors[blends.shape[1]:]) < errors[blend]:
        return Choice(blends.shape[1] + int(np.argmin(errors[blends.shape[1]:])),
                      selected_rmse(proxies))
    return Choice(blend, selected_rmse(blends))
