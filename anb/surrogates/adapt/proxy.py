"""Single analytic proxies of a new device's cost (issue 47's "never worse than simple"
yardstick): each architecture's MACs, parameters, activation traffic or layer count from the
space's cost functions, one fitted on the ``n`` measurements by a line in log-log space, the
one kept chosen by its leave-one-out error on those measurements."""
from __future__ import annotations

import numpy as np

from anb.searchspace.base import COST_NAMES, Space
from anb.surrogates.adapt.choice import selected_rmse

#: The proxies :func:`analytic_proxies` returns: the space's cost totals, then the number of
#: blocks that compute (non-zero MACs).
PROXY_NAMES = (*COST_NAMES, "layers")


def analytic_proxies(space: Space, choices: np.ndarray) -> dict[str, np.ndarray]:
    """``(n,)`` positive values of each of :data:`PROXY_NAMES` for a batch of architectures."""
    table = space.cost_table(choices)
    out = {name: table.total(name).astype(np.float64) for name in COST_NAMES}
    out["layers"] = (table.per_stage["macs"] > 0).sum(axis=1).astype(np.float64)
    return out


def loo_residuals(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Leave-one-out errors (prediction minus ``y``) of the least-squares line ``y ~ a + b x``
    (the hat matrix's closed form); ``inf`` everywhere where ``x`` is constant or fewer than
    3 rows (no line to fit)."""
    if len(x) < 3 or np.ptp(x) == 0:
        return np.full(len(x), np.inf)
    X = np.column_stack([np.ones_like(x), x])
    hat = X @ np.linalg.pinv(X)
    return (hat @ y - y) / (1 - np.diag(hat))


def fit_line(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The least-squares line ``y ~ a + b x``: ``(a, b)``."""
    return np.linalg.lstsq(np.column_stack([np.ones(len(y)), x]), y, rcond=None)[0]


def log_proxies(space: Space, choices: np.ndarray) -> dict[str, np.ndarray]:
    """``log`` of each of :data:`PROXY_NAMES` of each architecture, as
    :func:`choose_proxy` fits them."""
    return _logs(analytic_proxies(space, choices))


def _logs(proxies: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``log`` of each proxy, floored at ``log 1`` (a block-free architecture has none)."""
    return {name: np.log(np.maximum(values, 1.0)) for name, values in proxies.items()}


def log_proxy(space: Space, choices: np.ndarray, name: str) -> np.ndarray:
    """``log`` of proxy ``name`` (one of :data:`PROXY_NAMES`) of each architecture, as
    :func:`choose_proxy` fits it."""
    if name not in PROXY_NAMES:
        raise ValueError(f"proxy {name!r} is unknown; allowed: {list(PROXY_NAMES)}")
    return log_proxies(space, choices)[name]


def choose_proxy(logs: dict[str, np.ndarray], y: np.ndarray
                 ) -> tuple[str, np.ndarray, float, float]:
    """Among the log proxies ``logs`` of the measured rows, the one whose least-squares line
    fits ``y`` (their log costs) with the least leave-one-out error: its name, the line
    ``(intercept, slope)``, that error's RMSE (``inf`` where no proxy varies) and the
    out-of-fold RMSE of the choice itself (:func:`~anb.surrogates.adapt.choice.selected_rmse`:
    each row scored by the proxy chosen without it)."""
    residuals = {name: loo_residuals(x, y) for name, x in logs.items()}
    errors = {name: float(np.mean(r**2)) for name, r in residuals.items()}
    name = min(errors, key=errors.__getitem__)
    return (name, fit_line(logs[name], y), float(np.sqrt(errors[name])),
            selected_rmse(np.column_stack(list(residuals.values()))))


def best_proxy(proxies: dict[str, np.ndarray], rows: np.ndarray, y: np.ndarray
               ) -> tuple[str, np.ndarray]:
    """The proxy with the least leave-one-out error of ``log y ~ log proxy`` on ``rows``
    (``y`` the log costs of those rows), and its fitted log cost of every architecture."""
    logs = _logs(proxies)
    name, line, _, _ = choose_proxy({k: v[rows] for k, v in logs.items()}, y)
    return name, line[0] + line[1] * logs[name]
