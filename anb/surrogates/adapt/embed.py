"""A transfer that knows architectures, not only devices (issue 47): the new device's log cost
as a ridge regression on four blocks of what anb knows of each architecture, each block with
its own shrinkage chosen by the closed-form leave-one-out error on the ``n`` measured rows.

- ``known``: the known devices' predicted log costs. With the layer-cost source these are the
  known devices' per-unit cost models, fitted jointly on every known device's measurements:
  each (slot, unit) carries a vector of its costs across the known devices, and the new
  device's weights on those vectors are what the block fits.
- ``analytic``: log MACs, true MACs, parameters, activation traffic and layer count, and the
  log of the space's exact operation totals (compute MACs vs activation traffic: the two
  sides of a roofline).
- ``ops``: how many times each unit of the space's vocabulary occurs, summed over slots
  (spaces whose slots share one vocabulary, :attr:`~anb.searchspace.base.UnitCosts.shared`;
  none otherwise): one latent cost per operation for every slot, which carries what no known
  family weights (a kernel launch per operation on a batch-1 GPU, whatever its MACs).
- ``units``: per-(slot, unit) counts, the residual of each unit in each slot.

Where the known devices are of another family than the new one, the ridge on ``known`` alone
says "a mix of the known devices"; the other blocks let 20 measurements say how this device
weights work, traffic and operations (``benchmarks/help_transfer.py --on family_valid``, the
split settings are chosen on: FBNet mean Spearman at n = 20 from 0.80 to 0.87).

The fitted model is a coefficient vector over the standardised features; it needs the rows'
known log costs and :func:`arch_features` of their choices to predict.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from anb.searchspace.base import Space
from anb.surrogates.adapt.proxy import PROXY_NAMES, analytic_proxies

#: The feature blocks, in column order (see the module docstring).
BLOCKS = ("known", "analytic", "ops", "units")
#: The shrinkage of each block is one of these (features standardised on the measured rows).
LAMBDAS = (0.1, 1.0, 10.0, 100.0, 1e3, 1e5)
#: Coordinate sweeps over the blocks' shrinkage (each block tried at every value of
#: :data:`LAMBDAS`, the others held): 2 sweeps settle it on the validation splits.
SWEEPS = 2
#: Shrinkage every block starts from.
START_LAMBDA = 10.0
#: The intercept's prior variance (large: the intercept is in effect free).
_INTERCEPT_VAR = 1e4


def arch_features(space: Space, choices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(features, block)``: the architecture-only columns (``analytic``, ``ops``, ``units``)
    of a batch, ``(n, q)``, and each column's index into :data:`BLOCKS`."""
    choices = np.asarray(choices, dtype=np.int64)
    proxies = analytic_proxies(space, choices)
    ops = space.operation_costs(choices)[0]
    analytic = np.column_stack([np.log(np.maximum(proxies[name], 1.0)) for name in PROXY_NAMES]
                               + [np.log1p(ops)])
    units = space.cost_units(choices)
    flat, rows = units.flat(), np.arange(len(choices))
    per_unit = np.zeros((len(choices), int(sum(units.widths))))
    for slot in range(flat.shape[1]):
        np.add.at(per_unit, (rows, flat[:, slot]), units.counts[:, slot])
    unit_costs = space.unit_costs()
    shared = unit_costs is not None and unit_costs.shared
    per_op = np.zeros((len(choices), max(units.widths) if shared else 0))
    if shared:
        for slot in range(flat.shape[1]):
            np.add.at(per_op, (rows, units.units[:, slot]), units.counts[:, slot])
    block = np.concatenate([np.full(analytic.shape[1], 1), np.full(per_op.shape[1], 2),
                            np.full(per_unit.shape[1], 3)])
    return np.concatenate([analytic, per_op, per_unit], axis=1), block


@dataclass
class EmbedModel:
    """The fitted ridge: standardisation, coefficients and intercept over the columns
    ``[known log costs, arch_features]``; ``lambdas`` each block's shrinkage."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    lambdas: np.ndarray

    @classmethod
    def fit(cls, known_log: np.ndarray, features: np.ndarray, block: np.ndarray,
            y: np.ndarray) -> tuple[EmbedModel, np.ndarray]:
        """Fit on the measured rows (``y``: their log costs); also returns the rows'
        leave-one-out residuals (prediction minus ``y``) at the chosen shrinkage."""
        X, blocks = _design(known_log, features, block)
        mean = X.mean(0)
        scale = X.std(0)
        scale = np.where(scale > 1e-9 * np.maximum(np.abs(mean), 1.0), scale, np.inf)
        Z = (X - mean) / scale
        grams = [Z[:, blocks == b] @ Z[:, blocks == b].T for b in range(len(BLOCKS))]
        lambdas = choose_shrinkage(grams, y)
        residuals, dual = _loo(grams, lambdas, y)[1:]
        coef = Z.T @ dual / lambdas[blocks]
        model = cls(mean, np.where(np.isfinite(scale), scale, 0.0), coef,
                    float(_INTERCEPT_VAR * dual.sum()), lambdas)
        return model, residuals

    def log_cost(self, known_log: np.ndarray, features: np.ndarray) -> np.ndarray:
        """The predicted log cost of rows with these known log costs and
        :func:`arch_features` (its first array)."""
        X = np.concatenate([known_log, features], axis=1)
        if X.shape[1] != len(self.coef):
            raise ValueError(f"the embedding model takes {len(self.coef)} columns (known log "
                             f"costs, then arch_features), got {X.shape[1]}")
        safe = np.where(self.scale > 0, self.scale, 1.0)
        return ((X - self.mean) / safe) @ np.where(self.scale > 0, self.coef, 0.0) \
            + self.intercept

    def arrays(self) -> dict[str, np.ndarray]:
        """What an adapted artifact saves (with :attr:`intercept` as a scalar)."""
        return {"embed_mean": self.mean, "embed_scale": self.scale, "embed_coef": self.coef,
                "embed_lambdas": self.lambdas}


def choose_shrinkage(grams: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """Each block's shrinkage for the ridge whose blocks have these Gram matrices on the
    measured rows (log costs ``y``): from :data:`START_LAMBDA`, :data:`SWEEPS` coordinate
    sweeps over :data:`LAMBDAS`, a change kept only where it lowers the leave-one-out error."""
    lambdas = np.full(len(grams), START_LAMBDA)
    error = _loo(grams, lambdas, y)[0]
    for _ in range(SWEEPS):
        for b in range(len(grams)):
            for value in LAMBDAS:
                trial = lambdas.copy()
                trial[b] = value
                trial_error = _loo(grams, trial, y)[0]
                if trial_error < error - 1e-12:
                    lambdas, error = trial, trial_error
    return lambdas


def _design(known_log: np.ndarray, features: np.ndarray, block: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """The columns ``[known, features]`` and each one's block index."""
    return (np.concatenate([known_log, features], axis=1),
            np.concatenate([np.zeros(known_log.shape[1], dtype=np.int64), block]))


def _loo(grams: list[np.ndarray], lambdas: np.ndarray, y: np.ndarray
         ) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean squared leave-one-out error of the ridge with block shrinkage ``lambdas`` (the
    dual form: the kernel is the blocks' Gram matrices over their shrinkage, plus a nearly
    free intercept), the residuals and the dual weights."""
    n = len(y)
    kernel = sum(g / lam for g, lam in zip(grams, lambdas, strict=True)) \
        + _INTERCEPT_VAR * np.ones((n, n))
    inverse = np.linalg.inv(kernel + np.eye(n))
    dual = inverse @ y
    # the leave-one-out residual of a kernel ridge: dual weight over the inverse's diagonal
    residuals = -dual / np.diag(inverse)
    return float(np.mean(residuals**2)), residuals, dual
