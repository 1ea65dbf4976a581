"""Observation noise: how much a repeated measurement of the same architecture varies.

This is not the model's error. Accuracy: seed-to-seed spread from architectures trained more
than once in the data (training time likewise, in log); device speed: the recorded
per-measurement ``<metric>_std`` (relative, model space is log), ~0 for deterministic FPGA runs.
``noise=True`` draws use it, seeded per (seed, architecture, metric) so a draw never depends on
batch position or on the other metrics in the query.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from anb.searchspace.base import Space

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def observation_std(frame: pd.DataFrame, choices: np.ndarray, target: str, transform: str,
                    rows: np.ndarray) -> float:
    """Observation noise of ``target`` in model space, from the rows ``rows`` (never test)."""
    y = frame[target].to_numpy(dtype=float)
    std_col = f"{target}_std"
    if std_col in frame.columns:
        rel = frame[std_col].to_numpy(dtype=float)[rows] / y[rows]
        rel = rel[np.isfinite(rel)]
        value = float(np.median(rel)) if rel.size else 0.0
        return value if transform == "log" else value * float(np.nanmedian(y[rows]))
    if transform == "log":  # repeats of a positive label without a recorded std (train_time)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(y > 0, np.log(y), np.nan)
    keys = pd.Series([c.tobytes() for c in choices[rows]])
    groups = pd.DataFrame({"key": keys, "y": y[rows]}).dropna().groupby("key")["y"]
    var = groups.var(ddof=1).dropna()
    if var.empty:
        return 0.0
    sizes = groups.size()[var.index] - 1
    return float(np.sqrt(np.sum(var * sizes) / np.sum(sizes)))


def _splitmix(x: np.ndarray | np.uint64) -> np.ndarray | np.uint64:
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return x ^ (x >> np.uint64(31))


def standard_normal(seed: int, choices: np.ndarray, metric: str, space: Space) -> np.ndarray:
    """One N(0, 1) value per architecture, a pure function of (seed, architecture, metric)."""
    tag = int.from_bytes(hashlib.sha256(metric.encode()).digest()[:8], "little")
    index = space.index_from_choices(choices)
    if index.dtype == object:  # spaces beyond 2**62: fold the Python ints into 64 bits
        index = np.array([(i ^ (i >> 64)) & 0xFFFFFFFFFFFFFFFF for i in index.tolist()],
                         dtype=np.uint64)
    from scipy.special import ndtri  # here: a query without noise never imports scipy

    index = index.astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _splitmix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) ^ np.uint64(tag))
        bits = _splitmix(index ^ key)
    uniform = ((bits >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
    return ndtri(uniform)
