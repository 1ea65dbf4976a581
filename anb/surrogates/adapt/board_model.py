"""A new board's analytic prior calibrated on a few measurements (issue 47: a whole new board
from 20 measurements).

The board's time per image is its prior's parts (:data:`~anb.surrogates.adapt.board_prior.
COMPONENTS`: convolution, depthwise and element-wise compute, weight and activation traffic,
each summed over the architecture's exact layers) at non-negative speeds, plus a non-negative
constant (a host floor, per-image overhead):

    time = prior_parts @ speeds + constant.

Six numbers, fitted by non-negative least squares on relative error (each row's time over its
measured time: a fast and a slow architecture weigh alike). The measurements calibrate a
model whose shape the board's documented parallelism fixes, instead of discovering it; the
fit collapses into one weight per (slot, unit) plus a bias
(:func:`~anb.surrogates.adapt.board_prior.unit_table`), the own model's stored form, so
:class:`~anb.surrogates.adapt.model.AdaptedModel` blends it as its own part. Below
:data:`~anb.surrogates.adapt.anchored.BACKOFF_MIN_POINTS` rows it is a new board's own model
(:mod:`anb.surrogates.adapt.anchored` adds per-layer detail from there).

Chosen on the validation split of ``benchmarks/new_device.py --protocol board`` (each board
hidden in turn, random rows, 30 draws; mean Kendall tau of the adapted model over the 8
metrics): at n = 10, 0.854 without it, 0.858 with it (7 of the 8 metrics up, TPU v3 0.682 ->
0.702); with the prior as before (its traffic one part, padded to 128 lanes on a TPU),
0.854. At n = 20 it replaced the anchored model at no gain (0.905 both, 10 draws), and at 50
it lost (0.910 vs 0.923): the per-layer detail needs the rows. Alone (the prior's parts at
speeds fitted on 20 rows, 10 draws) it ranks the validation rows below the transfer on every
metric: DPU metrics 0.85-0.90 (all train rows: 0.86-0.91, while a free weight per layer
reaches 0.95-0.99), TPU v2 0.86, TPU v3 0.78, A100 0.98, 3090 0.97
(docs/decisions/new-device.md).
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from anb.searchspace.base import Space
from anb.surrogates.adapt.board_prior import unit_table
from anb.surrogates.layer_cost import layer_design, to_cost

#: A held-out row's predicted time is at least this share of its measured one (the log of a
#: non-positive prediction has no error).
MIN_RATIO = 0.05


def fit(target: str, choices: np.ndarray, values: np.ndarray, space: Space
        ) -> tuple[np.ndarray, float, np.ndarray] | None:
    """The calibrated prior of ``target`` on the measured rows: its collapsed per-(slot,
    unit) weights plus bias (:func:`~anb.surrogates.layer_cost.layer_design`'s layout), its
    cost floor (a tenth of the fastest measured time, as the layer-cost model's) and the rows'
    leave-one-out log-cost errors (prediction minus measurement); None where ``target``'s
    board has no prior in ``space``."""
    table = unit_table(target, space)
    if table is None:
        return None
    cost = to_cost(target, np.asarray(values, dtype=np.float64))
    parts = np.column_stack([layer_design(np.asarray(choices, dtype=np.int64), space) @ table,
                             np.ones(len(cost))])
    residuals = np.empty(len(cost))
    for i in range(len(cost)):
        rest = np.arange(len(cost)) != i
        ratio = parts[i] @ speeds(parts[rest], cost[rest]) / cost[i]
        residuals[i] = np.log(max(ratio, MIN_RATIO))
    fitted = speeds(parts, cost)
    weights = table @ fitted[:-1]
    weights[-1] += fitted[-1]  # the constant joins the bias (the stem's and head's row)
    return weights, 0.1 * float(cost.min()), residuals


def speeds(parts: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Non-negative ``w`` of least squared relative error ``parts @ w / cost - 1`` (columns
    scaled to unit norm for the solver, the solution scaled back)."""
    relative = parts / cost[:, None]
    norm = np.sqrt(np.mean(relative**2, axis=0))
    norm[norm == 0] = 1.0
    return nnls(relative / norm, np.ones(len(cost)))[0] / norm
