"""The out-of-fold error of a choice among candidates: the error of the winner on the rows it
was chosen on is optimistic (the choice saw them), so each row is scored by the candidate that
wins on the other rows."""
from __future__ import annotations

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
