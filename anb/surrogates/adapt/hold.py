"""Hold a default candidate unless another one wins clearly out of fold.

An out-of-fold choice among some 40 candidates (blend weightings and analytic proxies) on 20
measured rows picks, by chance, one that fits those rows better than the default and ranks the
device worse. :func:`held` keeps the default unless the picked candidate lowers the rows'
squared out-of-fold error by more than ``k`` standard errors of the per-row difference (a
paired test of the two columns). The std scores the whole choice, hold included, out of fold
(:func:`anb.surrogates.adapt.choice.choose`)."""
from __future__ import annotations

import numpy as np


def held(residuals: np.ndarray, default: int, pick: int, k: float) -> int:
    """``pick`` where its squared errors (column of ``residuals``, ``(n, k)`` out-of-fold
    errors) beat column ``default``'s by more than ``k`` standard errors of their per-row
    difference (mean over the rows), else ``default``."""
    residuals = np.asarray(residuals, dtype=np.float64)
    gain = residuals[:, default] ** 2 - residuals[:, pick] ** 2
    if pick == default or len(gain) < 2:
        return pick
    return pick if gain.mean() > k * gain.std(ddof=1) / np.sqrt(len(gain)) else default
