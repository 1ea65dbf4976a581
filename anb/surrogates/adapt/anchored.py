"""A new board's own per-layer cost model from a few measurements, anchored on its analytic
prior (issue 47: a whole new board from 20 measurements).

The own per-layer model of :class:`~anb.surrogates.adapt.model.AdaptedModel` learns each
(slot, unit)'s time from the space's analytic operation costs alone: it joins from
:data:`~anb.surrogates.adapt.model.OWN_MIN_POINTS` rows. On a board the device table knows,
its analytic prior (:func:`~anb.surrogates.adapt.board_prior.unit_table`: per layer the DPU
cycles, the TPU's padded-lane compute, the GPU's roofline parts) enters each layer's time as
well, at speeds the rows fit:

    time = sum over layers of  prior_parts(layer) @ speeds  +  back-off(layer)  +  bias,

the back-off being the layer-cost model's (:func:`~anb.surrogates.layer_cost.backoff_map`:
the space's operation costs at shared speeds, per-slot speeds, unit effects shared across
slots, sibling effects and the unit-in-slot residual) with its penalties
(:attr:`LayerCostModel.SHRINK <anb.surrogates.layer_cost.LayerCostModel.SHRINK>`; the
prior's speeds take the shared speeds' penalty). So a few rows fix a handful of speeds, and
more rows the per-layer detail where the board departs from its prior. It is fitted as a
ridge regression on relative error (each row's time over its measured time: a fast and a
slow architecture weigh alike), in its dual form so that each row's leave-one-out error
comes in closed form. The fit collapses into one weight per (slot, unit) plus a bias, the
own model's stored form (``own_weights``), which
:class:`~anb.surrogates.layer_cost.LayerCostModel` predicts.

Chosen on the validation split of ``benchmarks/new_device.py --protocol board`` (each board
hidden in turn, 20 random rows, 5 draws; mean Kendall tau of the adapted model): 0.900 with
these penalties, 0.897 / 0.896 with all of them 10 times larger / smaller, 0.898 with the
prior's speeds penalised like the per-slot ones, 0.891 without the anchored model; block
penalties chosen per fit by leave-one-out error instead lost (0.890): the choice overfits 20
rows. From 10 rows it lost (0.848 vs 0.850, 3 draws), at 50 it beat the own model without the
prior (0.922 vs 0.919), hence :data:`BACKOFF_MIN_POINTS`. It joins only for a new board: where
another metric of the same board is known (the metric protocol of that benchmark), the ridge
on it ranks the board already, and the extra candidate only made the choice noisier
(validation split, n = 20, 10 draws: ZCU102 and VCK190 metrics 0.002-0.004 lower with it).

From :data:`MIN_POINTS` to :data:`BACKOFF_MIN_POINTS` rows no back-off is fitted: the prior's
parts alone are calibrated at non-negative speeds (:mod:`anb.surrogates.adapt.board_model`).
"""
from __future__ import annotations

import numpy as np

from anb.searchspace.base import Space
from anb.surrogates.adapt import board_model
from anb.surrogates.adapt.board_prior import unit_table
from anb.surrogates.layer_cost import LayerCostModel, backoff_map, layer_design, to_cost

#: Fewest measured rows a new board with a prior (none of its metrics known) has its own
#: model from (the plain own model needs :data:`~anb.surrogates.adapt.model.OWN_MIN_POINTS`):
#: the calibrated prior (:mod:`~anb.surrogates.adapt.board_model`) up to
#: :data:`BACKOFF_MIN_POINTS` rows, the anchored model from there.
MIN_POINTS = 10
#: Fewest measured rows the anchored model's back-off is fitted from.
BACKOFF_MIN_POINTS = 20
#: The bias's penalty (in effect free; the layer-cost model's ``alpha``).
BIAS_PENALTY = 1e-6


def fit(target: str, choices: np.ndarray, values: np.ndarray, space: Space
        ) -> tuple[np.ndarray, float, np.ndarray] | None:
    """The anchored model of ``target`` on the measured rows: its collapsed per-(slot, unit)
    weights plus bias (:func:`~anb.surrogates.layer_cost.layer_design`'s layout), its cost
    floor (a tenth of the fastest measured time, as the layer-cost model's) and the rows'
    leave-one-out log-cost errors (prediction minus measurement); None where ``target``'s
    board has no prior in ``space``. Below :data:`BACKOFF_MIN_POINTS` rows, the calibrated
    prior (:func:`anb.surrogates.adapt.board_model.fit`)."""
    if len(values) < BACKOFF_MIN_POINTS:
        return board_model.fit(target, choices, values, space)
    table = unit_table(target, space)
    if table is None:
        return None
    cost = to_cost(target, np.asarray(values, dtype=np.float64))
    relative = layer_design(np.asarray(choices, dtype=np.int64), space) / cost[:, None]
    mapping, groups = backoff_map(space)
    maps = [table] + [mapping[:, groups == g] for g in np.unique(groups)]
    shrink = [LayerCostModel.SHRINK[0]] + [LayerCostModel.SHRINK[g] for g in np.unique(groups)]
    penalties = np.array([s * len(cost) if s > 0 else BIAS_PENALTY for s in shrink])
    columns = [relative @ m for m in maps]
    rms = [np.sqrt(np.mean(c**2, axis=0)) for c in columns]
    rms = [np.where(r > 0, r, 1.0) for r in rms]
    scaled = [c / r for c, r in zip(columns, rms, strict=True)]
    _, residuals, dual = _loo([z @ z.T for z in scaled], penalties)
    weights = sum(m @ (z.T @ dual / lam / r)
                  for m, z, lam, r in zip(maps, scaled, penalties, rms, strict=True))
    return np.asarray(weights), 0.1 * float(cost.min()), residuals


def _loo(grams: list[np.ndarray], penalties: np.ndarray
         ) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean squared leave-one-out log error of the ridge on relative error (target 1 per
    row) with a penalty per block of columns (``grams``: each block's Gram matrix over the
    rows; the dual form), the log errors and the dual weights."""
    n = len(grams[0])
    kernel = sum(g / lam for g, lam in zip(grams, penalties, strict=True))
    inverse = np.linalg.inv(kernel + np.eye(n))
    dual = inverse @ np.ones(n)
    # a kernel ridge's held-out residual: dual weight over the inverse's diagonal
    ratio = 1.0 - dual / np.diag(inverse)
    residuals = np.log(np.maximum(ratio, board_model.MIN_RATIO))
    return float(np.mean(residuals**2)), residuals, dual
