"""The layer-cost model: a learned per-layer cost, summed over an architecture's layers.

Device time is close to a sum of per-layer times. Every space states that structure as its
``cost_units`` (slot ``s`` holds one of ``widths[s]`` units, ``counts[:, s]`` times; for MnasNet
a stage's first layer once and its later layers ``layers - 1`` times, each chosen by the stage's
``(e, k, se)``). :class:`LayerCostModel` fits it per target by least squares: the cost
(``1/throughput``, ``latency`` or accuracy) is a sum over slots of the unit's weight times its
count. Its predictions (in the target's transformed space) are extra features and the base the
tree models correct (:class:`~anb.surrogates.features.FeatureBuilder`). Weights are plain
arrays (saved as ``.npz`` without pickle).

Some devices stop being compute-bound for small, fast networks: on TPU v3 the measured
throughput saturates near a host-side ceiling (about 1,600 img/s, and about 1,400 img/s in the
last measurement campaign of the released data); the VCK190 saturates near 4,000 img/s. A plain
least-squares fit bends its per-layer costs towards those ceilings and so mis-ranks the
compute-bound majority. With ``trim`` set, device targets are refitted a few times leaving out
the rows measured much *slower* than the additive model predicts (residual below the median
minus ``trim`` robust standard deviations): the weights then describe compute-bound cost, and
the tree members learn the ceiling on top of it from the feature. With ``saturating`` set
(every time target, or those it names), time targets (device metrics and training time) are
instead ``(S**p + F**p)**(1/p)``: the additive sum ``S`` under a per-target floor ``F`` (none
where no floor fits better), so a unit never seen in a slot is priced from compute-bound
siblings and still saturates where its networks run near the ceiling. A floor fitted to the
training rows also caps what lies beyond them (an architecture faster than every one
measured), one reason the packaged config names only the VCK190 (``DEFAULTS.md``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np

from anb.searchspace.base import CostUnits, Space
from anb.searchspace.registry import check_same_space
from anb.surrogates.data import transform_for

#: Rules for what work of a kind no training architecture had (``_idle_costs``) takes per unit
#: of its analytic cost, from the fitted effects of the kinds seen.
IDLE_RULES: dict[str, Callable[[np.ndarray], float]] = {
    "none": lambda seen: 0.0,
    "median": lambda seen: float(np.median(seen)),
    "mean": lambda seen: float(np.mean(seen)),
}
#: The rule per target transform. Time targets (log): the median speed, not none (its std:
#: ``UNMEASURED_STD``). Accuracy (identity): the mean effect, chosen by leaving one measured
#: kind out (``benchmarks/unmeasured_prior.py``, never the squeeze-excite labels): trained
#: without squeeze-excite, each of the six kinds seen, given the others' mean / median / no
#: effect in turn, moved top-1 by a median 2.53 / 2.75 / 2.79 pp averaged over the kinds.
IDLE_RULE = {"log": "median", "identity": "mean"}


def layer_design(choices: np.ndarray, space: Space) -> np.ndarray:
    """Per slot of the space's cost units: the unit's one-hot times its count; then a bias."""
    units = space.cost_units(choices)
    design = np.zeros((len(choices), sum(units.widths) + 1))
    np.put_along_axis(design, units.flat(), units.counts, axis=1)
    design[:, -1] = 1.0
    return design


def to_cost(target: str, y: np.ndarray) -> np.ndarray:
    """The additive quantity of a target: time per image for throughput, else the label."""
    return 1.0 / y if target.startswith("throughput_") else y


def cost_to_feature(target: str, cost: np.ndarray, floor: float) -> np.ndarray:
    """Map a predicted cost into the target's transformed space (log for device metrics)."""
    if transform_for(target) != "log":
        return cost
    value = np.log(np.maximum(cost, floor))
    return -value if target.startswith("throughput_") else value


def backoff_map(space: Space) -> tuple[np.ndarray, np.ndarray]:
    """The linear map ``M`` from back-off parameters to :func:`layer_design` weights
    (``weights = M @ theta``) and each parameter's group: 0 the shared analytic costs (per
    cost name, all slots), 1 each slot's own analytic costs, 2 unit effects shared across
    slots (scaled by the slot's size; spaces with one unit vocabulary), 3 the unit-in-slot
    effects, 4 the bias, 5 per slot the effects shared by units agreeing in all their parts
    but one (``UnitCosts.parts``: e.g. MnasNet's ``e4 k5`` with and without squeeze-excite).
    The space's :meth:`~anb.searchspace.base.Space.unit_costs` supply the analytic costs;
    without them only groups 3 and 4 remain."""
    units = space.cost_units(space.choices_from_index([0]))
    widths = [int(w) for w in units.widths]
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(int)
    rows = int(offsets[-1]) + 1
    analytic = space.unit_costs()
    columns: list[np.ndarray] = []
    groups: list[int] = []
    if analytic is not None:
        tables = [np.asarray(t, dtype=np.float64) for t in analytic.tables]
        norm = np.concatenate(tables).mean(axis=0)
        norm[norm == 0] = 1.0
        tables = [t / norm for t in tables]
        n_costs = len(analytic.names)
        shared = np.zeros((rows, n_costs))
        for s, table in enumerate(tables):
            shared[offsets[s]:offsets[s + 1]] = table
        columns.append(shared)
        groups += [0] * n_costs
        for s, table in enumerate(tables):
            own = np.zeros((rows, n_costs))
            own[offsets[s]:offsets[s + 1]] = table
            columns.append(own)
            groups += [1] * n_costs
        if analytic.shared and len(set(widths)) == 1:
            effect = np.zeros((rows, widths[0]))
            for s, table in enumerate(tables):
                effect[offsets[s]:offsets[s + 1]] = np.eye(widths[0]) * table.mean()
            columns.append(effect)
            groups += [2] * widths[0]
        siblings = _sibling_effects(analytic.parts, offsets, rows)
        columns.append(siblings)
        groups += [5] * siblings.shape[1]
    columns.append(np.eye(rows)[:, :-1])
    groups += [3] * (rows - 1)
    columns.append(np.eye(rows)[:, -1:])
    groups.append(4)
    return np.concatenate(columns, axis=1), np.asarray(groups)


def _sibling_effects(parts: tuple[np.ndarray, ...], offsets: np.ndarray, rows: int
                     ) -> np.ndarray:
    """Indicator columns over the weight rows: per slot and per part left out, one column
    for each combination of the other parts' levels (none for single-part units, whose
    only such combination is the whole slot)."""
    columns = []
    for s, levels in enumerate(parts):
        for dropped in range(levels.shape[1] if levels.shape[1] > 1 else 0):
            kept = np.delete(levels, dropped, axis=1)
            _, key = np.unique(kept, axis=0, return_inverse=True)
            block = np.zeros((rows, int(key.max()) + 1))
            block[offsets[s] + np.arange(len(key)), key.ravel()] = 1.0
            columns.append(block)
    return np.concatenate(columns, axis=1) if columns else np.zeros((rows, 0))


#: Candidate powers ``p`` and floors (fractions of the fastest training time) of the saturating
#: time base ``T = (S**p + F**p)**(1/p)``; each device target takes the pair whose fit has the
#: smallest log RMSE on its own training rows, unless the additive fit's is smaller (no floor).
FLOOR_POWERS = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)
FLOOR_FRACTIONS = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.995)


def _floor_slope(cost: np.ndarray, time: np.ndarray, power: float) -> np.ndarray:
    """``d log T / d log S`` of the saturating time ``T`` (``time``) at its additive cost
    ``S`` (``cost``): ``(S / T)**p``, 1 far above the floor and 0 at it."""
    return (cost / time) ** power


def _unfloored(unit: np.ndarray, fraction: float, power: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """Times ``unit`` (in units of the fastest) with a floor ``fraction`` taken out, and each
    row's Gauss-Newton weight: :func:`_floor_slope` over ``S``."""
    inner = (unit**power - fraction**power) ** (1 / power)
    return inner, _floor_slope(inner, unit, power) / inner


def _log_rmse(fitted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.log(np.maximum(fitted, 1e-12 * measured.min())
                                        / measured) ** 2)))


def saturate(cost: np.ndarray, floor: float, power: float) -> np.ndarray:
    """``(cost**power + floor**power)**(1/power)`` (``cost`` where ``floor`` is 0): an additive
    time that cannot fall below a device's own floor (a host-side throughput ceiling)."""
    if floor <= 0:
        return cost
    log_cost = np.log(np.maximum(cost, 1e-12 * floor))
    return np.exp(np.logaddexp(power * log_cost, power * np.log(floor)) / power)


class LayerCostModel:
    """Additive per-layer cost model with back-off, one weight vector per target.

    A unit's weight in a slot is its analytic costs in that slot (:meth:`Space.unit_costs`)
    times per-cost speeds shared by all slots, plus shrunk deviations: per-slot speeds, unit
    effects shared across slots, effects shared with the slot's units that differ in one part
    (MnasNet: one of e, k, se) and the unit-in-slot effect (ridge ``shrink`` each, on
    standardised columns). A unit never seen in a slot so gets the cost of its parts, never 0,
    and (time targets) an analytic cost no training unit has gets the median speed of those
    seen.
    The fit is collapsed into one weight per (slot, unit) plus a bias (:func:`layer_design`'s
    layout), so prediction is a gather and old weight files read unchanged."""

    #: ridge penalty (times the number of rows) of each :func:`backoff_map` group, on
    #: columns scaled to unit RMS. Chosen with the layer-cost base alone on the hold-out
    #: families, never the test split: the MnasNet stage hold-outs of benchmarks/shift.py
    #: (per-slot and unit-in-slot penalties), NB201 edge-op hold-outs on HELP latencies
    #: (shared unit effects nearly free: MAC-proportional cost overshoots 3x3 convs on GPUs)
    #: and, for the sibling effects, hold-outs of each stage's second and third most common
    #: (e, k) rather than the reported first (device MAPE 2.76 -> 2.60 % and 3.70 -> 3.25 %)
    SHRINK = (1e-6, 1e-3, 1e-4, 1e-2, 0.0, 3e-3)
    #: the space it was fitted on (``fit``, ``of_weights``, ``load``); another is refused
    space: Space

    def __init__(self, alpha: float = 1e-6, trim: float | None = None, trim_rounds: int = 5,
                 shrink: tuple[float, ...] | None = SHRINK,
                 saturating: bool | Sequence[str] = False):
        if trim is not None and (isinstance(trim, bool) or not isinstance(trim, Real)
                                 or not np.isfinite(trim) or trim <= 0):
            raise ValueError(f"layer-cost trim must be a positive number of robust standard "
                             f"deviations (or null for none), got {trim!r}")
        self.alpha = alpha
        self.trim = trim
        self.trim_rounds = trim_rounds
        self.shrink = shrink  # None: the plain one-hot model (no back-off)
        if not isinstance(saturating, bool) and (
                isinstance(saturating, str) or not isinstance(saturating, Sequence)
                or not all(isinstance(t, str) for t in saturating)):
            raise ValueError(f"layer-cost saturating must be true, false or a list of target "
                             f"names, got {saturating!r}")
        untimed = [t for t in saturating if transform_for(t) != "log"] \
            if not isinstance(saturating, bool) else []
        if untimed:
            raise ValueError(f"layer-cost saturating names {untimed}, which are not time "
                             "targets (device metrics or training time)")
        #: the time targets fitted with a floor: all (True), none (False) or those named
        self.saturating = saturating if isinstance(saturating, bool) else tuple(saturating)
        self.groups_: np.ndarray = np.zeros(0, dtype=np.int64)  # backoff_map's, set by fit

    def _solve(self, raw: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Penalised least squares of ``c`` on the rows ``raw`` of the layer design."""
        return self._solver(raw)(c)

    def _solver(self, raw: np.ndarray, weight: np.ndarray | None = None
                ) -> Callable[[np.ndarray], np.ndarray]:
        """Penalised least squares on the rows ``raw`` of the layer design, mapped to the
        back-off parameters (``weight``: per-row weights), as a map from the right-hand side
        to the parameters. The normal matrix is built once, on the raw design (about a third
        as wide as the mapped one) and then mapped."""
        w = np.ones(len(raw)) if weight is None else weight
        rows = raw * w[:, None]
        mapping = self.mapping_
        gram = mapping.T @ (rows.T @ rows) @ mapping

        def rhs(c: np.ndarray) -> np.ndarray:
            return mapping.T @ (rows.T @ (c * w))

        if self.shrink is None:
            matrix = gram + self.alpha * np.trace(gram) / len(gram) * np.eye(len(gram))
            return lambda c: np.linalg.solve(matrix, rhs(c))
        rms = np.sqrt(np.diag(gram) / len(raw))
        rms[rms == 0] = 1.0
        penalty = np.asarray(self.shrink)[self.groups_] * len(raw)
        penalty[penalty == 0] = self.alpha  # the bias: just enough to stay solvable
        normal = gram / np.outer(rms, rms) + np.diag(penalty)
        return lambda c: np.linalg.solve(normal, rhs(c) / rms) / rms

    def _fitted(self, raw: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """The additive cost of the rows ``raw`` under back-off parameters ``theta``."""
        return raw @ (self.mapping_ @ theta)

    def _trimmed(self, raw: np.ndarray, c: np.ndarray, theta: np.ndarray,
                 predict: Callable[[np.ndarray], np.ndarray],
                 solve: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, int]:
        """Refit ``theta`` a few times without the rows measured more than ``trim`` robust
        stds slower than ``predict(theta)`` (``solve(keep)``: the fit on the kept rows)."""
        keep = np.ones(len(c), dtype=bool)
        for _ in range(self.trim_rounds):
            # log(predicted / measured cost) < 0: measured slower than the model
            resid = np.log(np.maximum(predict(theta), 1e-3 * c.min()) / c)
            centre = np.median(resid[keep])
            spread = 1.4826 * np.median(np.abs(resid[keep] - centre))
            new_keep = resid > centre - self.trim * spread
            if (new_keep.sum() < max(2 * self.mapping_.shape[1], len(c) // 4)
                    or (new_keep == keep).all()):
                break  # never trim to an under-determined fit; stop once stable
            keep = new_keep
            theta = solve(keep)
        return theta, int(keep.sum())

    def _fit_one(self, name: str, raw: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, int]:
        """Parameters of one target and the number of rows the final fit used."""
        theta = self._solve(raw, c)
        if self.trim is None or transform_for(name) != "log":
            return theta, len(c)
        return self._trimmed(raw, c, theta, lambda t: self._fitted(raw, t),
                             lambda keep: self._solve(raw[keep], c[keep]))

    def _fit_saturating(self, name: str, raw: np.ndarray, c: np.ndarray
                        ) -> tuple[np.ndarray, float, float, int]:
        """Parameters, floor and power of one time target's saturating base, and the rows
        used: per candidate (:data:`FLOOR_POWERS` x :data:`FLOOR_FRACTIONS`), the back-off
        solved on the times with the floor taken out, each row weighted by how much its
        log time moves with its additive cost (Gauss-Newton: a row at the floor says little
        about its sum); the pair with the smallest log RMSE, then trimmed like the additive
        fit (``trim``) at that pair. Where no floor beats the additive sum (weighted alike),
        the additive fit itself (no floor)."""
        scale = float(c.min())
        unit = c / scale  # in units of the fastest time: no overflow at power 12
        relative = self._solver(raw, 1.0 / unit)(unit)  # the no-floor limit of the weights
        best_rmse = _log_rmse(self._fitted(raw, relative), unit)
        best: tuple[float, float, np.ndarray, np.ndarray, np.ndarray] | None = None
        for fraction in FLOOR_FRACTIONS:
            for power in FLOOR_POWERS:
                inner, weight = _unfloored(unit, fraction, power)
                theta = self._solver(raw, weight)(inner)
                rmse = _log_rmse(saturate(self._fitted(raw, theta), fraction, power), unit)
                if rmse < best_rmse:
                    best_rmse, best = rmse, (fraction, power, theta, inner, weight)
        if best is None:  # no floor fits better: the additive fit, trimmed
            theta, used = self._fit_one(name, raw, c)
            return theta, 0.0, 1.0, used
        fraction, power, theta, inner, weight = best
        used = len(c)
        if self.trim is not None:
            theta, used = self._trimmed(
                raw, unit, theta, lambda t: saturate(self._fitted(raw, t), fraction, power),
                lambda keep: self._solver(raw[keep], weight[keep])(inner[keep]))
        return theta * scale, fraction * scale, power, used

    def saturates(self, target: str) -> bool:
        """Whether ``target`` is fitted with a floor (a time target ``saturating`` covers)."""
        chosen = self.saturating is True or (not isinstance(self.saturating, bool)
                                             and target in self.saturating)
        return chosen and transform_for(target) == "log"

    def _idle_costs(self, design: np.ndarray, mapping: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """The shared analytic-cost parameters no training row exercises (squeeze-excite's,
        when no trained architecture had it; none when no cost is exercised at all) and the
        (slot, unit) weights that hold such work (``unmeasured_``)."""
        shared = self.groups_ == 0
        idle = shared & ~(design != 0).any(axis=0)
        if idle.sum() == shared.sum():
            idle[:] = False
        return idle, (mapping[:-1, idle] != 0).any(axis=1)

    def fit(self, choices: np.ndarray, targets: Mapping[str, tuple[np.ndarray, np.ndarray]],
            space: Space) -> LayerCostModel:
        """``targets`` maps a name to ``(labels, present mask)`` over the rows of ``choices``
        of ``space`` (the model keeps it and refuses another one)."""
        self.space = space
        design = layer_design(choices, space)
        if self.shrink is None:
            mapping = np.eye(design.shape[1])
            idle = np.zeros(design.shape[1], dtype=bool)
            self.unmeasured_ = idle[:-1]
        else:
            mapping, self.groups_ = backoff_map(space)
            # groups past the model's penalties came after it was saved: it has none
            kept = self.groups_ < len(self.shrink)
            mapping, self.groups_ = mapping[:, kept], self.groups_[kept]
            idle, self.unmeasured_ = self._idle_costs(design @ mapping, mapping)
        self.mapping_ = mapping
        self.targets_ = list(targets)
        self.weights_ = np.zeros((len(self.targets_), mapping.shape[0]))
        self.floors_ = np.zeros(len(self.targets_))
        self.time_floor_ = np.zeros(len(self.targets_))
        self.floor_power_ = np.ones(len(self.targets_))
        self.n_used_ = {}
        #: each target's back-off parameters (``weights_[i] = mapping_ @ params_[target]``;
        #: kept in memory only, for studies of the shared speeds)
        self.params_: dict[str, np.ndarray] = {}
        for i, (name, (y, present)) in enumerate(targets.items()):
            if present.sum() < 2:
                raise ValueError(f"target {name!r} has {int(present.sum())} labelled rows; "
                                 "need >= 2")
            raw, c = design[present], to_cost(name, y[present])
            if self.saturates(name):
                theta, self.time_floor_[i], self.floor_power_[i], self.n_used_[name] = \
                    self._fit_saturating(name, raw, c)
            else:
                theta, self.n_used_[name] = self._fit_one(name, raw, c)
            if self.shrink is not None and idle.any():
                theta = theta.copy()
                rule = IDLE_RULES[IDLE_RULE[transform_for(name)]]
                theta[idle] = rule(theta[(self.groups_ == 0) & ~idle])
            self.weights_[i] = mapping @ theta
            self.params_[name] = theta
            self.floors_[i] = 0.1 * np.abs(c).min() if transform_for(name) == "log" else 0.0
        return self

    def units(self, archs: Any) -> CostUnits:
        """The cost units of architectures of the model's space (a choices array, or
        anything ``space.to_choices`` reads); one of another space is refused, naming both."""
        return self.space.cost_units(self.space.to_choices(archs))

    def transform(self, archs: Any, saturated: bool = True) -> np.ndarray:
        """Predictions of every target in its transformed space, ``(n, n_targets)``;
        ``saturated=False``: the additive sums under no floor (compute-bound costs)."""
        units = self.units(archs)
        cost = self._cost(units)
        floors = self.time_floor_ if saturated else np.zeros(len(self.targets_))
        return np.stack([cost_to_feature(t, saturate(cost[:, i], floors[i],
                                                     self.floor_power_[i]), self.floors_[i])
                         for i, t in enumerate(self.targets_)], axis=1) if self.targets_ \
            else np.zeros((len(units.units), 0))

    def _cost(self, units: CostUnits, slot_weights: np.ndarray | None = None) -> np.ndarray:
        """``layer_design @ weights.T`` as a gather: per slot, the weights of the unit it holds
        times its count (no one-hot matrix is built); ``slot_weights`` ``(n, slots)`` scales
        each slot's part."""
        flat = units.flat()
        cost = np.broadcast_to(self.weights_[:, -1], (len(flat), len(self.targets_))).copy()
        weights_t = self.weights_.T
        for s in range(len(units.widths)):
            count = units.counts[:, s] if slot_weights is None \
                else units.counts[:, s] * slot_weights[:, s]
            cost += weights_t[flat[:, s]] * count[:, None]
        return cost

    def hole_share(self, archs: Any, rarity: np.ndarray) -> np.ndarray:
        """``(n, n_targets)``: how much of each prediction (model space) rests on units in
        holes, each slot's part weighted by its ``rarity`` (``Support.slot_rarity``): the
        change were those units' costs wrong by 100 %: their share of the cost for log-space
        targets, their contribution for the others."""
        return self._hole_share(self.units(archs), rarity, self._log_targets())

    def _log_targets(self) -> np.ndarray:
        """Per target: modelled in log space (time targets, whose holes count relatively)."""
        return np.array([transform_for(t) == "log" for t in self.targets_], dtype=bool)

    def _hole_share(self, units: CostUnits, rarity: np.ndarray, log: np.ndarray) -> np.ndarray:
        """``log``: :meth:`_log_targets`, which the caller has already. Under a floor the
        share is of the saturated time: the sum's share times ``d log T / d log S``."""
        held = self._cost(units, rarity) - self.weights_[:, -1]
        total = self._cost(units)
        share = np.abs(np.where(log, held / np.maximum(np.abs(total), 1e-12), held))
        for i in np.flatnonzero(self.time_floor_ > 0):
            cost = np.maximum(total[:, i], 1e-12 * self.time_floor_[i])
            power = self.floor_power_[i]
            share[:, i] *= _floor_slope(cost, saturate(cost, self.time_floor_[i], power), power)
        return share

    def unmeasured_share(self, archs: Any) -> np.ndarray:
        """``(n, n_targets)``: for time targets, the share of each prediction resting on units
        that hold work of a kind no training architecture had (``unmeasured_``), the measure
        :data:`~anb.surrogates.uncertainty.terms.UNMEASURED_STD` multiplies; 0 for the others
        and where there is none."""
        units = self.units(archs)
        held = self.unmeasured_[units.flat()]
        time = self._log_targets()
        if not held.any() or not time.any():
            return np.zeros((len(units.units), len(self.targets_)))
        return self._hole_share(units, held.astype(np.float64), time) * time

    def names(self) -> list[str]:
        return [f"lc_{t}" for t in self.targets_]

    def save(self, path: str | Path) -> None:
        saturating = np.array(self.saturating, dtype=bool if isinstance(self.saturating, bool)
                              else np.str_)
        np.savez(path, weights=self.weights_, floors=self.floors_,
                 targets=np.array(self.targets_, dtype=np.str_), alpha=np.array(self.alpha),
                 trim=np.array(np.nan if self.trim is None else self.trim),
                 shrink=np.array(self.shrink if self.shrink is not None else [], dtype=float),
                 unmeasured=self.unmeasured_, saturating=saturating,
                 time_floor=self.time_floor_, floor_power=self.floor_power_,
                 space=np.array(self.space.name))

    @classmethod
    def of_weights(cls, targets: Sequence[str], weights: np.ndarray, floors: np.ndarray,
                   space: Space, **settings: Any) -> LayerCostModel:
        """A fitted additive model of ``space`` (no time floor, no unmeasured work) from its
        collapsed weights ``(len(targets), slots x units + 1)`` and cost floors, constructed
        with ``settings``: one stored as arrays (a weight file, an adapted device's own
        model)."""
        model = cls(**settings)
        model.space = space
        model.targets_ = list(targets)
        model.weights_ = np.asarray(weights, dtype=np.float64)
        model.floors_ = np.asarray(floors, dtype=np.float64)
        model.unmeasured_ = np.zeros(model.weights_.shape[1] - 1, dtype=bool)
        model.time_floor_ = np.zeros(len(model.targets_))
        model.floor_power_ = np.ones(len(model.targets_))
        return model

    @classmethod
    def load(cls, path: str | Path, space: Space) -> LayerCostModel:
        """A saved model of ``space`` (files before the space was stored: the caller's, from
        the artifact's manifest); one saved for another space is refused, naming both."""
        with np.load(path, allow_pickle=False) as data:
            if "space" in data.files:
                check_same_space(space.name, str(data["space"]), f"layer-cost model {path}")
            trim = float(data["trim"]) if "trim" in data.files else float("nan")
            # files before the back-off have no "shrink": their one-hot weights read the same
            shrink = (tuple(float(v) for v in data["shrink"]) or None
                      if "shrink" in data.files else None)
            saturating: bool | tuple[str, ...] = False  # files before the saturating base
            if "saturating" in data.files:
                stored = data["saturating"]
                saturating = bool(stored) if stored.dtype == bool \
                    else tuple(str(t) for t in stored)
            model = cls.of_weights([str(t) for t in data["targets"]], data["weights"],
                                   data["floors"], space, alpha=float(data["alpha"]),
                                   trim=None if np.isnan(trim) else trim, shrink=shrink,
                                   saturating=saturating)
            # files before them hold no unmeasured work (none widens) and additive times (no
            # floor): of_weights' defaults
            if "unmeasured" in data.files:
                model.unmeasured_ = data["unmeasured"]
            if "time_floor" in data.files:
                model.time_floor_, model.floor_power_ = data["time_floor"], data["floor_power"]
        return model
