"""Robust summary statistics of repeated timings (numpy + stdlib only, shared with the board
runner).

The stopping rule uses the confidence interval of the trimmed mean (Tukey-McLaughlin:
winsorised variance, ``n - 2g - 1`` degrees of freedom), which a few preempted repetitions on a
loaded machine do not blow up the way they blow up the plain mean's.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np


def t_quantile(p: float, df: int) -> float:
    """Student-t quantile (Cornish-Fisher expansion; within 1 % of exact for df >= 3, 0.2 % for
    df >= 5; the trimmed CI of >= 5 repetitions has df >= 4)."""
    z = NormalDist().inv_cdf(p)
    if df <= 0:
        return math.inf
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def _trim_count(n: int, trim: float) -> int:
    return int(math.floor(trim * n))


def trimmed_mean(values: Sequence[float] | np.ndarray, trim: float = 0.1) -> float:
    x = np.sort(np.asarray(values, dtype=float))
    g = _trim_count(x.size, trim)
    return float(x[g: x.size - g].mean())


def trimmed_ci_halfwidth(values: Sequence[float] | np.ndarray, trim: float = 0.1,
                         confidence: float = 0.95) -> float:
    """Half-width of the ``confidence`` interval of the trimmed mean (inf below 3 values)."""
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    g = _trim_count(n, trim)
    df = n - 2 * g - 1
    if n < 3 or df < 1:
        return math.inf
    winsorised = np.clip(x, x[g], x[n - g - 1])
    se = winsorised.std(ddof=1) / ((1 - 2 * g / n) * math.sqrt(n))
    return float(t_quantile(0.5 + confidence / 2, df) * se)


def relative_ci(values: Sequence[float] | np.ndarray, trim: float = 0.1,
                confidence: float = 0.95) -> float:
    """CI half-width of the trimmed mean divided by the trimmed mean."""
    if len(values) < 3:
        return math.inf
    centre = trimmed_mean(values, trim)
    return trimmed_ci_halfwidth(values, trim, confidence) / abs(centre) if centre else math.inf


def summarize(values: Sequence[float] | np.ndarray, trim: float = 0.1,
              confidence: float = 0.95) -> dict:
    """n, mean, std, median, min, max, trimmed mean/std, cv (trimmed std / trimmed mean), ci_rel."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("summarize() needs at least one value")
    s = np.sort(x)
    g = _trim_count(x.size, trim)
    kept = s[g: x.size - g]
    t_mean = float(kept.mean())
    t_std = float(kept.std(ddof=1)) if kept.size > 1 else 0.0
    return {
        "n": int(x.size),
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "median": float(np.median(x)),
        "min": float(s[0]),
        "max": float(s[-1]),
        "trimmed_mean": t_mean,
        "trimmed_std": t_std,
        "cv": t_std / t_mean if t_mean else math.inf,
        "ci_rel": relative_ci(x, trim, confidence),
        "trim": trim,
        "confidence": confidence,
    }


def drift_factors(models: Sequence[int], times: Sequence[float], window: int = 2,
                  rounds: int = 3) -> np.ndarray:
    """The machine's speed drift at each repetition of interleaved timings, as a factor.

    ``models[j]`` is the model timed by repetition ``j`` (in time order) and ``times[j]`` its
    time. Model ``i``'s time is taken as ``level_i * drift(t) * noise``: the drift at a
    repetition is the median log-residual (time over the model's level) of the ``window``
    repetitions on each side that timed *other* models, so no repetition corrects itself. Levels
    and drift are refined ``rounds`` times; factors are normalised to a median of 1, so corrected
    times (``times / factors``) keep the session's typical speed. Repetitions with no other
    model in reach get factor 1.
    """
    m = np.asarray(models, dtype=np.int64)
    y = np.log(np.asarray(times, dtype=float))
    n = y.size
    if m.shape != y.shape:
        raise ValueError(f"models ({m.size}) and times ({n}) must have the same length")
    if n == 0 or window <= 0:
        return np.ones(n)
    offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)])
    neighbour = np.arange(n)[:, None] + offsets[None, :]
    inside = (neighbour >= 0) & (neighbour < n)
    neighbour = np.clip(neighbour, 0, n - 1)
    usable = inside & (m[neighbour] != m[:, None])
    has_any = usable.any(axis=1)
    groups = [np.flatnonzero(m == i) for i in np.unique(m)]

    def levels(values: np.ndarray) -> np.ndarray:
        level = np.empty(n)
        for g in groups:
            level[g] = np.median(values[g])
        return level

    drift = np.zeros(n)
    for _ in range(rounds):
        resid = y - levels(y - drift)
        window_resid = np.where(usable, resid[neighbour], np.nan)
        drift = np.zeros(n)
        drift[has_any] = np.nanmedian(window_resid[has_any], axis=1)
    drift -= np.median(drift)
    return np.exp(drift)
