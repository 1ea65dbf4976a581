"""One interval definition and the proper scores, for every coverage figure anb reports.

A surrogate's predictive distribution is Gaussian in the space its target is fitted in: the
log of the value for device and time targets (``transforms[target] == "log"``), the value
itself for accuracy. The central ``level`` interval is that Gaussian's quantiles, mapped to
values (for a log target ``exp(mu -+ z sigma)``: asymmetric around the median, as the errors
are). Coverage counts the labels inside it; the scores below are computed in the fitted space
too, so that they are comparable across targets of any unit:

- CRPS (continuous ranked probability score, closed form for the Gaussian) and the negative log
  likelihood: proper scores, lower is better; a sharper model that stays honest scores lower.
- The interval (Winkler) score of the central ``level`` interval: its width plus ``2 / alpha``
  times how far a label falls outside it.
- Sharpness: the median predicted std over the median absolute error (about 1.48 for a
  calibrated Gaussian: robust to heavy tails), and the mean ratio beside it.

Every function takes what a query returns in value space (``<metric>`` and ``<metric>_std``)
and whether the target is log-modelled; :func:`fitted_params` inverts the query's value-space
std exactly (``std = exp(mu) sqrt(exp(sigma^2) - 1)``). The rule this replaces counted a log
target covered when ``|y - median| <= 1.645 std`` in value space, which overstates coverage for
skewed errors (docs/use/uncertainty.md, "One interval definition", has an example).
"""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

#: The default interval level (a central 90 % interval).
LEVEL = 0.9


def z_value(level: float = LEVEL) -> float:
    """The standard normal quantile bounding the central ``level`` interval."""
    if not isinstance(level, (int, float)) or isinstance(level, bool) or not 0 < level < 1:
        raise ValueError(f"level {level!r} is invalid; allowed: a number strictly between 0 "
                         "and 1 (0.9: the central 90 % interval)")
    return NormalDist().inv_cdf(0.5 + level / 2)


def fitted_params(pred: np.ndarray, std: np.ndarray, log: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The fitted-space mean and std from a query's value-space ``pred`` (the median for a log
    target) and ``std``: for a log target ``log pred`` and ``sqrt(log1p((std / pred)^2))``."""
    pred, std = np.asarray(pred, dtype=np.float64), np.asarray(std, dtype=np.float64)
    if not log:
        return pred, std
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(pred), np.sqrt(np.log1p(np.square(std / pred)))


def fitted_space(y: np.ndarray, pred: np.ndarray, std: np.ndarray, log: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels (``log y`` for a log target), means and stds in the fitted space."""
    mu, sigma = fitted_params(pred, std, log)
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.log(y) if log else y), mu, sigma


def bounds(mu: np.ndarray, sigma: np.ndarray, log: bool, level: float = LEVEL
           ) -> tuple[np.ndarray, np.ndarray]:
    """The central ``level`` interval, in values, of the fitted-space Gaussian (``mu``,
    ``sigma``)."""
    z = z_value(level)
    lo, hi = np.asarray(mu) - z * np.asarray(sigma), np.asarray(mu) + z * np.asarray(sigma)
    return (np.exp(lo), np.exp(hi)) if log else (lo, hi)


def coverage(y: np.ndarray, pred: np.ndarray, std: np.ndarray, log: bool,
             level: float = LEVEL) -> float:
    """Share of labels inside the central ``level`` interval of the predictive distribution."""
    t, mu, sigma = fitted_space(y, pred, std, log)
    return float(np.mean(np.abs(t - mu) <= z_value(level) * sigma))


def crps(y: np.ndarray, pred: np.ndarray, std: np.ndarray, log: bool) -> float:
    """Mean Gaussian CRPS in the fitted space (log units for a log target)."""
    t, mu, sigma = fitted_space(y, pred, std, log)
    sigma = np.maximum(sigma, 1e-12)
    z = (t - mu) / sigma
    cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z**2) / math.sqrt(2.0 * math.pi)
    return float(np.mean(sigma * (z * (2.0 * cdf - 1.0) + 2.0 * pdf - 1.0 / math.sqrt(math.pi))))


def nll(y: np.ndarray, pred: np.ndarray, std: np.ndarray, log: bool) -> float:
    """Mean Gaussian negative log likelihood in the fitted space (of ``log y`` for a log
    target: add the mean ``log y`` for the density of the value itself)."""
    t, mu, sigma = fitted_space(y, pred, std, log)
    var = np.maximum(sigma, 1e-12) ** 2
    return float(np.mean(0.5 * np.log(2.0 * math.pi * var) + (t - mu) ** 2 / (2.0 * var)))


def interval_score(y: np.ndarray, pred: np.ndarray, std: np.ndarray, log: bool,
                   level: float = LEVEL) -> float:
    """Mean interval (Winkler) score of the central ``level`` interval in the fitted space:
    width plus ``2 / (1 - level)`` times the distance of a label outside it."""
    t, mu, sigma = fitted_space(y, pred, std, log)
    half = z_value(level) * sigma
    lo, hi = mu - half, mu + half
    penalty = 2.0 / (1.0 - level)
    return float(np.mean((hi - lo) + penalty * (np.maximum(lo - t, 0) + np.maximum(t - hi, 0))))


def sharpness(y: np.ndarray, pred: np.ndarray, std: np.ndarray, log: bool
              ) -> tuple[float, float]:
    """(median std / median |error|, mean of std / |error| over rows with an error) in the
    fitted space: the first is robust to a heavy tail, the second is the older figure."""
    t, mu, sigma = fitted_space(y, pred, std, log)
    error = np.abs(t - mu)
    median_error = float(np.median(error))
    robust = float(np.median(sigma)) / median_error if median_error > 0 else math.inf
    some = error > 0
    mean_ratio = float(np.mean(sigma[some] / error[some])) if some.any() else math.inf
    return robust, mean_ratio


def scores(y: np.ndarray, pred: np.ndarray, std: np.ndarray, log: bool,
           level: float = LEVEL) -> dict[str, float]:
    """Coverage, CRPS, NLL, interval score and both sharpness figures of one target."""
    percent = round(level * 100)
    robust, mean_ratio = sharpness(y, pred, std, log)
    return {f"coverage{percent}": coverage(y, pred, std, log, level),
            "crps": crps(y, pred, std, log), "nll": nll(y, pred, std, log),
            f"interval_score{percent}": interval_score(y, pred, std, log, level),
            "sharpness": robust, "sharpness_mean_ratio": mean_ratio}


def _erf(x: np.ndarray) -> np.ndarray:
    """Vectorised ``math.erf`` (scipy stays out of the query path)."""
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(np.asarray(x, dtype=np.float64)),
                      dtype=np.float64)
