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

from anb.surrogates.adapt.hold import held


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


@dataclass(frozen=True)
class Choice:
    """What an out-of-fold choice picked: a column of the candidates (the blend weightings,
    then the proxies) and the std's error (the choice itself scored out of fold)."""

    column: int
    rmse: float


@dataclass(frozen=True)
class ChoiceRule:
    """How the candidate that predicts is chosen from ``n`` measured rows: below
    ``choice_min`` none is (the fallback predicts); from ``rank_from`` up to ``rank_below``
    by :func:`rank_choice` (``margin``) among all; otherwise the blend of least squared
    error, replaced by the proxy of least such error where that is lower. In the rank
    regime the fallback is held unless the pick lowers the squared errors by more than
    ``hold_se`` standard errors of the per-row difference (:func:`~anb.surrogates.adapt.hold.held`;
    ``None``: no hold); below ``rank_from`` rows (and in the rank regime without a hold) the
    pick predicts only where its squared error is under ``fallback_ratio`` times the
    fallback's (``None``: always)."""

    choice_min: int
    rank_from: int
    rank_below: int
    margin: float
    fallback_ratio: float | None = None
    hold_se: float | None = None

    def pick(self, blends: np.ndarray, proxies: np.ndarray, y: np.ndarray, fallback: int,
             n: int) -> int:
        """The column picked on these rows under the regime of ``n`` measured rows."""
        if n < self.choice_min:
            return fallback
        candidates = np.column_stack([blends, proxies])
        errors = np.mean(candidates**2, axis=0)
        if self.rank_from <= n < self.rank_below:
            column = rank_choice(candidates, y, self.margin)
            if self.hold_se is not None:
                return held(candidates, fallback, column, self.hold_se)
        else:
            column = int(np.argmin(errors[:blends.shape[1]]))
            if proxies.shape[1] and np.min(errors[blends.shape[1]:]) < errors[column]:
                column = blends.shape[1] + int(np.argmin(errors[blends.shape[1]:]))
        if (self.fallback_ratio is not None and n < self.rank_below
                and not errors[column] < self.fallback_ratio * errors[fallback]):
            return fallback
        return column


def choose(blends: np.ndarray, proxies: np.ndarray, y: np.ndarray, fallback: int,
           rule: ChoiceRule) -> Choice:
    """The candidate that predicts under ``rule``, among ``blends`` (``(n, g)`` out-of-fold
    errors of the blend weightings; ``fallback`` the one that predicts without a choice) and
    ``proxies`` (``(n, p)``, of the analytic proxies' lines) on log costs ``y``. The std's
    error scores the whole choice out of fold: each row under the column the rule picks on
    the other rows (in the regime of all ``n``)."""
    n = len(y)
    column = rule.pick(blends, proxies, y, fallback, n)
    candidates = np.column_stack([blends, proxies])
    keep = np.ones(n, dtype=bool)
    errors = np.empty(n)
    for i in range(n):
        keep[i] = False
        errors[i] = candidates[i, rule.pick(blends[keep], proxies[keep], y[keep], fallback, n)]
        keep[i] = True
    return Choice(column, float(np.sqrt(np.mean(errors**2))))
