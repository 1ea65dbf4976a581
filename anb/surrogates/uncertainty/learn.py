"""Fitting's learned uncertainty: every std term from the internal hold-outs, in their order.

The hole, base, reach and cost stds come first (one set of folds, :func:`~.holes.learn_hole_std`),
then the unit std where the training data lack a unit (:func:`~.holes.learn_unit_std`, on top
of the hole std), then the edge stds (:func:`~.holes.learn_edge_std`, on top of every term
before them, combined as a query combines them: :func:`~.terms.widened_std`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from anb.searchspace.base import Space
from anb.surrogates.uncertainty.holes import (
    Refit,
    learn_edge_std,
    learn_hole_std,
    learn_unit_std,
)
from anb.surrogates.uncertainty.support import Support
from anb.surrogates.uncertainty.terms import StdTerms, widened_std


def learn_std_terms(choices: np.ndarray, masks: dict[str, np.ndarray], space: Space,
                    n_folds: int, refit: Refit, log_macs: np.ndarray, seed: int,
                    support: Support, terms: Mapping[str, StdTerms],
                    values: dict[str, tuple[np.ndarray, np.ndarray]]
                    ) -> tuple[Support, dict[str, StdTerms]]:
    """The fitted ``support`` with its learned hole and unit stds, and per target ``terms``
    (those learned before any hold-out: the cost slope and observation noise) with the base,
    reach, cost and edge stds learned on ``n_folds`` internal hold-outs of the train and val
    rows of ``masks`` (``values``: per target its model-space labels and present mask over
    all rows, for its edge fold)."""
    hole_std, base_std, reach_std, cost_std = learn_hole_std(choices, masks, space, n_folds,
                                                             refit, log_macs, seed)
    learned = dict(terms)
    for target in hole_std:  # learned: the cost std replaces the slope
        learned[target] = replace(learned[target], base_std=base_std[target],
                                  reach_std=reach_std[target], cost_std=cost_std[target])
    unit_std: dict[str, float] = {}
    if len(support.unseen_units()):  # a unit no training architecture holds anywhere
        unit_std = learn_unit_std(choices, masks, space, refit, hole_std)
    support = support.with_stds(hole_std, unit_std)

    def widen(target: str, result: tuple[np.ndarray, ...], ood: dict[str, np.ndarray]
              ) -> np.ndarray:
        """A refit's std with every learned term but the edge (as a query adds them)."""
        _, _, std, excess, hole, _ = result
        return widened_std(learned[target], support, target, std,
                           {**ood, "hole": hole, "excess": excess})

    for target, (edge_std, edge_cap) in learn_edge_std(masks, refit, values, widen).items():
        learned[target] = replace(learned[target], edge_std=edge_std, edge_cap=edge_cap)
    return support, learned
