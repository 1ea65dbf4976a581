"""One target's learned std terms and the one way they widen a prediction's std.

A query's std (model space) starts from the ensemble's: the members' spread and the label noise
(:class:`~anb.surrogates.ensemble.TargetSurrogate`), scaled by the support distance. Each term
below is a std per unit of a measure of how little data a prediction rests on, and
:func:`widened_std` adds them in quadrature. Fitting computes a :class:`StdTerms` per target
(:func:`anb.surrogates.uncertainty.learn.learn_std_terms` on internal hold-outs, else the
defaults and the cost slope) and hands it to ``TargetSurrogate.fit``, which stores it; the
per-target hole and unit stds belong to the :class:`~.support.Support` whose measures they
multiply.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from anb.surrogates.uncertainty.support import Support

#: Std per model-space unit of base excess when no internal hold-out learned one (a fit with
#: ``hole_folds: 0``): an extrapolation by d is uncertain by about d. The slopes the internal
#: hold-outs learn for the 10 targets of the packaged fit span 0.08-2.9, mean 0.96.
BASE_STD = 1.0
#: Std (model space) per unit of :meth:`LayerCostModel.unmeasured_share`. Chosen by leaving
#: one measured kind out (``benchmarks/unmeasured_prior.py``), never on the squeeze-excite
#: hold-out it is reported on: fitted on the released architectures without squeeze-excite,
#: each of the six kinds of work they hold takes the median speed of the others (the rule an
#: unmeasured kind gets) on each of the 9 time targets; 0.87 is the smallest std (to 0.01)
#: whose central 90 % interval holds the move of log time on at least 85 % of the
#: architectures in every (kind, target) cell (the fitted speeds lie -0.8x to 12x the median).
#: Not a fold of the fit: a fold hiding a kind the training data hold would remove nearly
#: every row.
UNMEASURED_STD = 0.87


@dataclass(frozen=True)
class StdTerms:
    """One target's learned stds (model space), each per unit of the measure it multiplies.

    The artifact's target spec keeps the keys it always had (:meth:`to_spec`); a key an older
    artifact lacks reads as the default, which adds nothing (``base_std`` aside, as before)."""

    #: per log unit of ``ood_cost`` (analytic cost beyond the training range): learned on
    #: internal hold-outs, else :func:`cost_slope` (the spec key is ``trend``)
    cost_std: float = 0.0
    #: per unit of base excess (:meth:`TargetSurrogate.base_excess`): learned, else ``BASE_STD``
    base_std: float = BASE_STD
    #: per unit of the benchmark's reach (:meth:`SurrogateBenchmark.reach`): learned, else 0
    reach_std: float = 0.0
    #: per unit of edge excess (:meth:`TargetSurrogate.edge_excess`) below and above the
    #: training labels: learned on hold-outs of the target's label extremes, else 0
    edge_std: tuple[float, float] = (0.0, 0.0)
    #: the largest edge excess (below, above) those hold-outs had: the measure stops there
    edge_cap: tuple[float, float] = (np.inf, np.inf)
    #: the spread of a repeated measurement (:func:`~.noise.observation_std`): what a
    #: ``noise=True`` query draws; not part of the predictive std
    observation_std: float = 0.0

    def edge_width(self, excess: np.ndarray) -> np.ndarray:
        """The std the edge adds at edge ``excess`` (positive above, negative below): the end's
        ``edge_std`` times the excess, up to the end's ``edge_cap``."""
        (below, above), (cap_below, cap_above) = self.edge_std, self.edge_cap
        return (above * np.clip(excess, 0.0, cap_above)
                + below * np.clip(-excess, 0.0, cap_below))

    def to_spec(self) -> dict[str, Any]:
        """The target spec's fields (their JSON keys, as artifacts have always held them)."""
        return {"trend": self.cost_std, "base_std": self.base_std, "reach_std": self.reach_std,
                "edge_std": list(self.edge_std), "edge_cap": list(self.edge_cap),
                "observation_std": self.observation_std}

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> StdTerms:
        """Read :meth:`to_spec`'s fields; one an older artifact lacks is the default."""
        below, above = spec.get("edge_std", (0.0, 0.0))
        cap_below, cap_above = spec.get("edge_cap", (np.inf, np.inf))
        return cls(cost_std=float(spec.get("trend", 0.0)),
                   base_std=float(spec.get("base_std", BASE_STD)),
                   reach_std=float(spec.get("reach_std", 0.0)),
                   edge_std=(float(below), float(above)),
                   edge_cap=(float(cap_below), float(cap_above)),
                   observation_std=float(spec.get("observation_std", 0.0)))


def cost_slope(log_macs: np.ndarray, y: np.ndarray) -> float:
    """``|slope|`` of a target (model space) against log MACs on the training rows: the cost
    std of a fit without internal hold-outs."""
    return float(abs(np.polyfit(log_macs, y, 1)[0]))


def widened_std(terms: StdTerms, support: Support | None, target: str, std: np.ndarray,
                measures: Mapping[str, Any]) -> np.ndarray:
    """``std`` (model space, already scaled by the support distance) widened in quadrature by
    every term: ``cost_std`` times ``ood_cost``; the support's hole std of ``target`` times
    ``hole`` (:meth:`SurrogateBenchmark.hole_measure`) and its unit std times ``ood_unit``;
    :data:`UNMEASURED_STD` times ``unmeasured`` (:meth:`SurrogateBenchmark.unmeasured_measure`);
    ``base_std`` times the base ``excess``; ``reach_std`` times ``reach``; and, given the
    ``edge`` excess, the edge width (:meth:`StdTerms.edge_width`). The one composition a query
    and the internal hold-outs that learn these stds share."""
    hole_std = support.hole_std_.get(target, 0.0) if support is not None else 0.0
    unit_std = support.unit_std_.get(target, 0.0) if support is not None else 0.0
    edge = terms.edge_width(measures["edge"]) if "edge" in measures else 0.0
    return np.sqrt(std**2 + (terms.cost_std * measures["ood_cost"]) ** 2
                   + (hole_std * measures["hole"]) ** 2
                   + (unit_std * measures.get("ood_unit", 0.0)) ** 2
                   + (UNMEASURED_STD * measures.get("unmeasured", 0.0)) ** 2
                   + (terms.base_std * measures["excess"]) ** 2
                   + (terms.reach_std * measures["reach"]) ** 2 + edge**2)
