"""Hold a default candidate unless another one wins clearly out of fold.

An out-of-fold choice among some 40 candidates (blend weightings and analytic proxies) on 20
measured rows picks, by chance, one that fits those rows better than the default and ranks the
device worse. :func:`held_choice` keeps the default unless the candidate the underlying rule
picks lowers the rows' squared out-of-fold error by more than ``k`` standard errors of the
per-row difference (a paired test of the two columns); :func:`held_selected_rmse` scores that
choice itself out of fold, as the std of an adapted model must (each row under the candidate
held or picked without it)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: An underlying choice: the column of ``residuals`` (``(n, k)`` out-of-fold errors) it
#: picks given the rows' log costs ``y``.
Rule = Callable[[np.ndarray, np.ndarray], int]


def held_choice(residuals: np.ndarray, y: np.ndarray, default: int, rule: Rule,
                k: float) -> int:
    """``rule``'s column where its squared errors beat column ``default``'s by more than
    ``k`` standard errors of their per-row difference (mean over the rows), else
    ``default``."""
    residuals = np.asarray(residuals, dtype=np.float64)
    best = rule(residuals, y)
    gain = residuals[:, default] ** 2 - residuals[:, best] ** 2
    if best == default or len(gain) < 2:
        return best
    return best if gain.mean() > k * gain.std(ddof=1) / np.sqrt(len(gain)) else default


def held_selected_rmse(residuals: np.ndarray, y: np.ndarray, default: int, rule: Rule,
                       k: float) -> float:
    """RMSE over the rows of row ``i``'s error under the column :func:`held_choice` picks on
    the other rows (the held choice scored out of fold)."""
    residuals = np.asarray(residuals, dtype=np.float64)
    errors = np.empty(len(y))
    for i in range(len(y)):
        rest = np.arange(len(y)) != i
        errors[i] = residuals[i, held_choice(residuals[rest], y[rest], default, rule, k)]
    return float(np.sqrt(np.mean(errors**2)))
