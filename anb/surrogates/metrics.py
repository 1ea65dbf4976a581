"""Surrogate metrics as the NAS-benchmark literature reports them."""
from __future__ import annotations

import numpy as np

METRIC_NAMES = ("r2", "kendall_tau", "sparse_kendall_tau", "spearman_rho", "mae", "rmse")


def regression_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """R^2, Kendall tau, sparse Kendall tau (predictions rounded to 0.1, labels as measured,
    as the NAS-benchmark literature defines it),
    Spearman rho, MAE and RMSE of one target."""
    from scipy.stats import kendalltau, spearmanr  # here: loading a benchmark never imports it

    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    if y_true.shape != y_pred.shape or y_true.ndim != 1:
        raise ValueError(f"y_true and y_pred must be 1-D of one length, got shapes "
                         f"{y_true.shape} and {y_pred.shape}")
    if len(y_true) < 2:
        raise ValueError(f"need at least 2 labelled rows to score, got {len(y_true)}")
    residual = y_true - y_pred
    total = np.sum((y_true - y_true.mean()) ** 2)
    return {
        "r2": float(1.0 - np.sum(residual**2) / total) if total > 0 else float("nan"),
        "kendall_tau": float(kendalltau(y_true, y_pred)[0]),
        "sparse_kendall_tau": float(kendalltau(y_true, np.round(y_pred, 1))[0]),
        "spearman_rho": float(spearmanr(y_true, y_pred)[0]),
        "mae": float(np.mean(np.abs(residual))),
        "rmse": float(np.sqrt(np.mean(residual**2))),
    }
