"""Single analytic proxies of a new device's cost (issue 47's "never worse than simple"
yardstick): each architecture's MACs, parameters, activation traffic or layer count from the
space's cost functions, one fitted on the ``n`` measurements by a line in log-log space, the
one kept chosen by its leave-one-out error on those measurements."""
from __future__ import annotations

import numpy as np

from anb.searchspace.base import COST_NAMES, Space

#: The proxies :func:`analytic_proxies` returns: the space's cost totals, then the number of
#: blocks that compute (non-zero MACs).
PROXY_NAMES = (*COST_NAMES, "layers")


def analytic_proxies(space: Space, choices: np.ndarray) -> dict[str, np.ndarray]:
    """``(n,)`` positive values of each of :data:`PROXY_NAMES` for a batch of architectures."""
    table = space.cost_table(choices)
    out = {name: table.total(name).astype(np.float64) for name in COST_NAMES}
    out["layers"] = (table.per_stage["macs"] > 0).sum(axis=1).astype(np.float64)
    return out


def loo_error(x: np.ndarray, y: np.ndarray) -> float:
    """Mean squared leave-one-out error of the least-squares line ``y ~ a + b x`` (the hat
    matrix's closed form); ``inf`` where ``x`` is constant (no line to fit)."""
    X = np.column_stack([np.ones_like(x), x])
    if len(x) < 3 or np.ptp(x) == 0:
        return float("inf")
    hat = X @ np.linalg.pinv(X)
    residual = y - hat @ y
    return float(np.mean((residual / (1 - np.diag(hat))) ** 2))


def log_proxy(space: Space, choices: np.ndarray, name: str) -> np.ndarray:
    """``log`` of proxy ``name`` (one of :data:`PROXY_NAMES`) of each architecture, floored at
    ``log 1`` as :func:`best_proxy` fits it."""
    if name not in PROXY_NAMES:
        raise ValueError(f"proxy {name!r} is unknown; allowed: {list(PROXY_NAMES)}")
    return np.log(np.maximum(analytic_proxies(space, choices)[name], 1.0))


def fit_proxy(space: Space, choices: np.ndarray, y: np.ndarray
              ) -> tuple[str, np.ndarray, float]:
    """The proxy whose log-log line fits ``y`` (log costs of ``choices``) with the least
    leave-one-out error: its name, the line ``(intercept, slope)`` and that error's RMSE
    (``inf`` where no proxy varies over ``choices``)."""
    logs = {name: np.log(np.maximum(values, 1.0))
            for name, values in analytic_proxies(space, choices).items()}
    errors = {name: loo_error(x, y) for name, x in logs.items()}
    name = min(errors, key=errors.__getitem__)
    if not np.isfinite(errors[name]):
        return name, np.zeros(2), float("inf")
    X = np.column_stack([np.ones(len(y)), logs[name]])
    return name, np.linalg.lstsq(X, y, rcond=None)[0], float(np.sqrt(errors[name]))


def best_proxy(proxies: dict[str, np.ndarray], rows: np.ndarray, y: np.ndarray
               ) -> tuple[str, np.ndarray]:
    """The proxy with the least leave-one-out error of ``log y ~ log proxy`` on ``rows``
    (``y`` the log costs of those rows), and its fitted log cost of every architecture."""
    logs = {name: np.log(np.maximum(values, 1.0)) for name, values in proxies.items()}
    name = min(logs, key=lambda k: loo_error(logs[k][rows], y))
    X = np.column_stack([np.ones(len(rows)), logs[name][rows]])
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    return name, coef[0] + coef[1] * logs[name]
