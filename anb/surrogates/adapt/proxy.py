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


def _logs(proxies: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``log`` of each proxy, floored at ``log 1`` (a block-free architecture has none)."""
    return {name: np.log(np.maximum(values, 1.0)) for name, values in proxies.items()}


def log_proxy(space: Space, choices: np.ndarray, name: str) -> np.ndarray:
    """``log`` of proxy ``name`` (one of :data:`PROXY_NAMES`) of each architecture, as
    :func:`fit_proxy` fits it."""
    if name not in PROXY_NAMES:
        raise ValueError(f"proxy {name!r} is unknown; allowed: {list(PROXY_NAMES)}")
    return _logs(analytic_proxies(space, choices))[name]


def choose_proxy(logs: dict[str, np.ndarray], y: np.ndarray) -> tuple[str, np.ndarray, float]:
    """Among the log proxies ``logs`` of the measured rows, the one whose least-squares line
    fits ``y`` (their log costs) with the least leave-one-out error: its name, the line
    ``(intercept, slope)`` and that error's RMSE (``inf`` where no proxy varies)."""
    errors = {name: loo_error(x, y) for name, x in logs.items()}
    name = min(errors, key=errors.__getitem__)
    X = np.column_stack([np.ones(len(y)), logs[name]])
    return name, np.linalg.lstsq(X, y, rcond=None)[0], float(np.sqrt(errors[name]))


def fit_proxy(space: Space, choices: np.ndarray, y: np.ndarray
              ) -> tuple[str, np.ndarray, float, np.ndarray]:
    """:func:`choose_proxy` over the analytic proxies of ``choices``, plus the chosen log
    proxy of those rows."""
    logs = _logs(analytic_proxies(space, choices))
    name, line, rmse = choose_proxy(logs, y)
    return name, line, rmse, logs[name]


def best_proxy(proxies: dict[str, np.ndarray], rows: np.ndarray, y: np.ndarray
               ) -> tuple[str, np.ndarray]:
    """The proxy with the least leave-one-out error of ``log y ~ log proxy`` on ``rows``
    (``y`` the log costs of those rows), and its fitted log cost of every architecture."""
    logs = _logs(proxies)
    name, line, _ = choose_proxy({k: v[rows] for k, v in logs.items()}, y)
    return name, line[0] + line[1] * logs[name]
