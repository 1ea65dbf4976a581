"""Where the training data lie, so that predictions outside it say so.

Three signals per architecture:

- ``ood_distance``: the distance to the nearest training architecture in the ordinal feature
  space (each choice scaled to 0..1), relative to the 99th percentile of the training
  architectures' own nearest-neighbour distances (above 1: farther out than 99 % of the data);
- ``ood_cost``: how far its analytic costs (MACs, params) lie outside the training range, in
  log units;
- holes: how often the training data hold each of its *combinations*: every variable's value,
  every pair of variables of one group (:meth:`Space.variable_groups`) and every unit in its
  slot of :meth:`Space.cost_units` (for MnasNet a stage's ``(e, k, se)``). A combination seen
  fewer than ``min_count`` times is a hole, named in ``ood_reason``;
- ``ood_unit``: in spaces whose slots share one unit vocabulary, the share of the
  architecture's layers (cost-unit instances) whose unit the training data hold in *no* slot
  (for MnasNet, squeeze-excite when no trained architecture had it): there the layer-cost
  model has only the unit's analytic costs to go on.

``ood`` flags any of them and ``ood_reason`` says why (empty in distribution). The predictive
std grows with each (:func:`anb.surrogates.uncertainty.terms.widened_std`): the spread scales
with the relative distance, a cost excess adds a per-target std per log unit of excess, and a
hole adds a per-target std in proportion to the part of the prediction resting on the units in
holes of their slots (:meth:`slot_rarity` weights each; without a layer-cost model, to how rare
the rarest combination is), a unit unseen in every slot a per-target std per unit of
``ood_unit``; all are learned at fit time on internal hold-outs
(:mod:`anb.surrogates.uncertainty.holes`; without them the cost term is the target's own
slope, ``|d target / d log MACs| * excess``).
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anb.searchspace.base import Space
from anb.searchspace.space import SearchSpace
from anb.surrogates.features import stage_cost_table

COSTS = ("macs", "params")
QUANTILE = 0.99
#: A combination seen fewer times than this in training is a hole (chosen on hold-outs).
MIN_COUNT = 3
#: Version of ``support.npz``: 1 (no key) has no hole tables and no hole widening; 2 no table
#: of the units seen per slot (no ``ood_unit``; its hole std is per unit of ``ood_hole``).
VERSION = 3
#: At most this many holes are named per architecture in ``ood_reason``.
REASONS = 2
_PROBE = 2048  # random architectures that tell which variables make up a slot's unit


def _positions(choices: np.ndarray, space: Space) -> np.ndarray:
    pos = space.positions(choices).astype(np.float64)
    radices = space.radices().astype(np.float64)
    return (pos / np.maximum(radices - 1, 1)).astype(np.float32)


def log_costs(choices: np.ndarray, space: Space) -> np.ndarray:
    """``(n, len(COSTS))`` natural logs of the analytic costs."""
    if isinstance(space, SearchSpace):  # a gather from its tabulated stages
        return np.log(stage_cost_table(space).totals(choices, COSTS))
    table = space.cost_table(choices)
    return np.log(np.stack([table.total(c) for c in COSTS], axis=1).astype(np.float64))


def _determining(key: np.ndarray, unit: np.ndarray) -> bool:
    """Whether ``unit`` is a function of the rows of ``key`` on the probe: sorted by row,
    every run of equal rows has one unit (a lexsort: ~7x faster than ``unique(axis=0)``)."""
    order = np.lexsort(key.T[::-1])
    rows, units = key[order], unit[order]
    starts = np.ones(len(rows), dtype=bool)
    starts[1:] = np.any(rows[1:] != rows[:-1], axis=1)
    first = units[np.flatnonzero(starts)][np.cumsum(starts) - 1]
    return bool(np.all(first == units))


@dataclass(frozen=True)
class Combinations:
    """The combinations a space's architectures are checked for (one column each): which
    variables (1 or 2) or which slot, and where each one's counts start in the flat table."""

    variables: np.ndarray  # (C, 2) variable indices; -1 in the second for a single variable
    slots: np.ndarray  # (C,) slot index for a unit-in-slot check, -1 otherwise
    slot_variables: tuple[tuple[int, ...], ...]  # per slot: the variables naming its unit
    offsets: np.ndarray  # (C + 1,) start of each combination's counts in the table
    space: Space  # the space whose architectures are checked

    @classmethod
    def of(cls, space: Space) -> Combinations:
        radices = space.radices()
        groups = space.variable_groups()
        n_var = len(radices)
        pairs = [(v, -1) for v in range(n_var)]
        pairs += [(a, b) for a in range(n_var) for b in range(a + 1, n_var)
                  if groups[a] == groups[b]]
        sizes = [int(radices[a]) * (int(radices[b]) if b >= 0 else 1) for a, b in pairs]
        rng = np.random.default_rng(0)
        pos = rng.integers(0, radices, size=(_PROBE, n_var))
        pos = space.positions(space.from_positions(pos))
        units = space.cost_units(space.from_positions(pos))
        slots, slot_variables = [], []
        for s, width in enumerate(units.widths):
            unit = np.asarray(units.units[:, s], dtype=np.int64)
            naming = _naming_variables(pos, groups, unit)
            slot_variables.append(naming)
            if len(naming) > 1:  # one variable's value is checked already
                slots.append(s)
                sizes.append(int(width))
        variables = np.array(pairs + [(-1, -1)] * len(slots), dtype=np.int64).reshape(-1, 2)
        return cls(variables, np.array([-1] * len(pairs) + slots, dtype=np.int64),
                   tuple(slot_variables), np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                   space)

    def codes(self, positions: np.ndarray, active: np.ndarray, choices: np.ndarray
              ) -> np.ndarray:
        """``(n, C)`` index of each row's combination in the flat table; -1 where it is not in
        effect (a variable switched off, a slot used 0 times)."""
        a, b = self.variables[:, 0], self.variables[:, 1]
        single = (b < 0) & (a >= 0)
        pair = b >= 0
        radices = self.space.radices()
        out = np.full((len(positions), len(self.slots)), -1, dtype=np.int64)
        out[:, single] = np.where(active[:, a[single]], positions[:, a[single]], -1)
        pa, pb = a[pair], b[pair]
        both = active[:, pa] & active[:, pb]
        out[:, pair] = np.where(both, positions[:, pa] * radices[pb] + positions[:, pb], -1)
        unit_cols = self.slots >= 0
        if unit_cols.any():
            units = self.space.cost_units(choices)
            s = self.slots[unit_cols]
            used = np.asarray(units.counts)[:, s] > 0
            out[:, unit_cols] = np.where(used, np.asarray(units.units, np.int64)[:, s], -1)
        return np.where(out >= 0, out + self.offsets[:-1], -1)

    def describe(self, column: int, positions_row: np.ndarray, slot_names: tuple[str, ...]
                 ) -> str:
        """A combination as text, e.g. ``block5_e=6 with block5_k=5`` or
        ``slot s5_first unit block5_e=6 block5_k=5 block5_se=1``."""
        slot = int(self.slots[column])
        if slot >= 0:
            name = slot_names[slot] if slot < len(slot_names) else f"slot {slot}"
            naming = " ".join(_value(self.space, v, positions_row)
                              for v in self.slot_variables[slot])
            return f"{name} unit {naming}" if naming else f"{name} unit"
        return " with ".join(_value(self.space, int(v), positions_row)
                             for v in self.variables[column] if v >= 0)


def _naming_variables(pos: np.ndarray, groups: np.ndarray, unit: np.ndarray) -> tuple[int, ...]:
    """The fewest variables of one group whose values decide a slot's unit on the probe
    (empty when no group does)."""
    for group in np.unique(groups):
        members = [int(v) for v in np.flatnonzero(groups == group)]
        if not _determining(pos[:, members], unit):
            continue
        for v in list(members):
            rest = [m for m in members if m != v]
            if rest and _determining(pos[:, rest], unit):
                members = rest
        return tuple(members)
    return ()


def _value(space: Space, v: int, positions_row: np.ndarray) -> str:
    variable = space.variables[v]
    p = int(positions_row[v])
    label = variable.labels[p] if variable.labels else str(variable.values[p])
    return f"{variable.name}={label}"


class Support:
    """The training architectures' region of the space (fit once, saved as ``.npz``)."""

    def __init__(self, space: Space, min_count: int | None = None):
        min_count = MIN_COUNT if min_count is None else min_count
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        self.space = space
        self.min_count = min_count
        #: per target: the std (model space) a hole adds (learned in holes.py, given to
        #: :meth:`with_stds`)
        self.hole_std_: dict[str, float] = {}
        #: per target: the std (model space) per unit of ``ood_unit`` (likewise)
        self.unit_std_: dict[str, float] = {}
        self.counts_: np.ndarray | None = None  # None: a version-1 support without hole tables
        #: training count of each (slot, unit) of :meth:`Space.cost_units`, flat in
        #: :func:`~anb.surrogates.layer_cost.layer_design`'s order (None before version 3)
        self.slot_counts_: np.ndarray | None = None
        self._combinations: Combinations | None = None
        self._vocabulary: int | None = None

    @property
    def combinations(self) -> Combinations:
        if self._combinations is None:
            self._combinations = Combinations.of(self.space)
        return self._combinations

    @property
    def vocabulary(self) -> int:
        """:func:`shared_vocabulary` of the space (0: its slots share none)."""
        if self._vocabulary is None:
            self._vocabulary = shared_vocabulary(self.space)
        return self._vocabulary

    def fit(self, choices: np.ndarray) -> Support:
        if len(choices) < 3:
            raise ValueError(f"support needs at least 3 training architectures, got {len(choices)}")
        self.positions_ = np.unique(_positions(choices, self.space), axis=0)
        nn = self._nearest(self.positions_, exclude_self=True)
        self.reference_ = float(max(np.quantile(nn, QUANTILE), 1e-9))
        costs = log_costs(choices, self.space)
        self.cost_low_, self.cost_high_ = costs.min(0), costs.max(0)
        codes = self._codes(choices)
        size = int(self.combinations.offsets[-1])
        self.counts_ = np.bincount(codes[codes >= 0], minlength=size).astype(np.int64)
        units = self.space.cost_units(choices)
        self.slot_counts_ = np.bincount(units.flat()[np.asarray(units.counts) > 0],
                                        minlength=int(sum(units.widths))).astype(np.int64)
        return self

    def with_stds(self, hole_std: Mapping[str, float], unit_std: Mapping[str, float]
                  ) -> Support:
        """A copy of this fitted support holding the per-target hole and unit stds learned on
        its internal hold-outs (:mod:`anb.surrogates.uncertainty.holes`)."""
        out = copy.copy(self)
        out.hole_std_, out.unit_std_ = dict(hole_std), dict(unit_std)
        return out

    def slot_rarity(self, choices: np.ndarray) -> np.ndarray:
        """``(n, slots)``: per slot in use, ``1 - count / min_count`` of its unit's training
        count in that slot (1: unseen there), 0 for a unit seen often enough or a slot unused;
        all 0 for a support before version 3."""
        units = self.space.cost_units(choices)
        counts = np.asarray(units.counts)
        if self.slot_counts_ is None:
            return np.zeros(counts.shape)
        seen = self.slot_counts_[units.flat()]
        return np.where(counts > 0, np.clip(1.0 - seen / self.min_count, 0.0, 1.0), 0.0)

    def unseen_units(self) -> np.ndarray:
        """The units of the shared vocabulary no training architecture holds in any slot
        (none without a shared vocabulary or before version 3)."""
        if self.slot_counts_ is None or not self.vocabulary:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.slot_counts_.reshape(-1, self.vocabulary).sum(axis=0) == 0)

    def unit_share(self, choices: np.ndarray) -> np.ndarray:
        """``ood_unit``: per architecture, the share of its layers whose unit is unseen in
        every slot (0 without a shared vocabulary)."""
        unseen = self.unseen_units()
        if not len(unseen):
            return np.zeros(len(choices))
        units = self.space.cost_units(choices)
        counts = np.asarray(units.counts, dtype=np.float64)
        new = np.isin(np.asarray(units.units), unseen)
        return (counts * new).sum(axis=1) / np.maximum(counts.sum(axis=1), 1.0)

    def _codes(self, choices: np.ndarray) -> np.ndarray:
        pos = self.space.positions(choices)
        return self.combinations.codes(pos, self.space.active(pos), choices)

    def _nearest(self, points: np.ndarray, exclude_self: bool = False, chunk: int = 256
                 ) -> np.ndarray:
        """Euclidean distance to the nearest training architecture: ``|t|^2 - 2 p.t`` is one
        matrix product per cache-sized block, ``|p|^2`` is added after the minimum."""
        train = self.positions_
        norms = np.einsum("ij,ij->i", train, train)
        minus_two_t = np.ascontiguousarray(-2.0 * train.T, dtype=np.float32)
        out = np.empty(len(points))
        points = points.astype(np.float32)
        for start in range(0, len(points), chunk):
            block = points[start:start + chunk]
            own = np.einsum("ij,ij->i", block, block)
            d2 = block @ minus_two_t
            d2 += norms
            if exclude_self:
                d2 += own[:, None]
                d2[d2 < 1e-4] = np.inf  # the point itself (distinct points are >= 1/9 apart)
                best = d2.min(axis=1)
            else:
                best = d2.min(axis=1) + own
            out[start:start + chunk] = np.sqrt(np.maximum(best, 0.0))
        return out

    def log_macs(self, choices: np.ndarray) -> np.ndarray:
        return log_costs(choices, self.space)[:, 0]

    def rarity(self, choices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The training counts of each architecture's combinations ``(n, C)`` (int64 max where
        one is not in effect) and ``ood_hole``: ``1 - rarest / min_count`` for a hole (1:
        unseen), 0 otherwise."""
        if self.counts_ is None:
            n = len(choices)
            return np.full((n, 0), np.iinfo(np.int64).max), np.zeros(n)
        codes = self._codes(choices)
        counts = np.where(codes >= 0, self.counts_[np.maximum(codes, 0)],
                          np.iinfo(np.int64).max)
        rarest = counts.min(axis=1) if counts.shape[1] else np.full(len(choices), np.inf)
        return counts, np.clip(1.0 - rarest / self.min_count, 0.0, 1.0)

    def score(self, choices: np.ndarray) -> dict[str, np.ndarray]:
        """``ood_distance``, ``ood_cost``, ``ood_hole`` (0..1), ``ood_unit`` (0..1), the flag
        ``ood`` and ``ood_reason`` per architecture."""
        if not len(choices):
            return {"ood_distance": np.zeros(0), "ood_cost": np.zeros(0),
                    "ood_hole": np.zeros(0), "ood_unit": np.zeros(0),
                    "ood": np.zeros(0, dtype=bool), "ood_reason": np.zeros(0, dtype=object)}
        distance = self._nearest(_positions(choices, self.space)) / self.reference_
        costs = log_costs(choices, self.space)
        excess = np.maximum(costs - self.cost_high_, 0) + np.maximum(self.cost_low_ - costs, 0)
        cost = excess.max(axis=1)
        counts, hole = self.rarity(choices)
        flag = (distance > 1) | (cost > 0) | (hole > 0)
        reason = np.full(len(choices), "", dtype=object)
        rows = np.flatnonzero(flag)
        if len(rows):
            pos = self.space.positions(choices[rows])
            names = tuple(self.space.cost_units(choices[rows[:1]]).slot_names)
            for j, i in enumerate(rows):
                reason[i] = self._reason(pos[j], names, counts[i] if hole[i] > 0 else None,
                                         distance[i], costs[i])
        return {"ood_distance": distance, "ood_cost": cost, "ood_hole": hole,
                "ood_unit": self.unit_share(choices), "ood": flag, "ood_reason": reason}

    def _reason(self, pos: np.ndarray, slot_names: tuple[str, ...], counts: np.ndarray | None,
                distance: float, costs: np.ndarray) -> str:
        """Why one architecture (its positions) is flagged: its rarest combinations (given
        their training ``counts``), its costs outside the training range, else its distance."""
        parts = []
        if counts is not None:
            rare = np.flatnonzero(counts < self.min_count)
            for c in rare[np.argsort(counts[rare], kind="stable")][:REASONS]:
                seen = "unseen" if counts[c] == 0 else f"seen {counts[c]}x"
                text = self.combinations.describe(int(c), pos, slot_names)
                parts.append(f"{text} {seen} in training")
        for k, name in enumerate(COSTS):
            if costs[k] > self.cost_high_[k]:
                parts.append(f"{name} {costs[k] - self.cost_high_[k]:.2f} log units above "
                             "the training range")
            elif costs[k] < self.cost_low_[k]:
                parts.append(f"{name} {self.cost_low_[k] - costs[k]:.2f} log units below "
                             "the training range")
        if distance > 1 and not parts:
            parts.append(f"nearest training architecture {distance:.2f}x the usual distance")
        return "; ".join(parts)

    # ------------------------------------------------------------ persistence
    def save(self, path: Path) -> None:
        hole: dict[str, Any] = {}
        if self.counts_ is not None:
            names, units = sorted(self.hole_std_), sorted(self.unit_std_)
            hole = {"version": VERSION, "counts": self.counts_, "min_count": self.min_count,
                    "hole_targets": np.array(names, dtype=str),
                    "hole_std": np.array([self.hole_std_[t] for t in names], dtype=np.float64),
                    "slot_counts": self.slot_counts_,
                    "unit_targets": np.array(units, dtype=str),
                    "unit_std": np.array([self.unit_std_[t] for t in units], dtype=np.float64)}
        with open(path, "wb") as handle:
            np.savez(handle, positions=self.positions_, reference=self.reference_,
                     cost_low=self.cost_low_, cost_high=self.cost_high_, **hole)

    @classmethod
    def load(cls, path: Path, space: Space) -> Support:
        """Read :meth:`save`'s file; a version-1 file (no hole tables) flags by distance and
        cost only, a version-2 file has no ``ood_unit``, as they did."""
        with np.load(path, allow_pickle=False) as data:
            version = int(data["version"]) if "version" in data else 1
            if version not in range(1, VERSION + 1):
                raise ValueError(f"{str(path)!r}: support format version {version} is not "
                                 f"supported; this anb reads versions 1 to {VERSION}")
            out = cls(space, int(data["min_count"]) if version > 1 else MIN_COUNT)
            out.positions_ = data["positions"]
            out.reference_ = float(data["reference"])
            out.cost_low_, out.cost_high_ = data["cost_low"], data["cost_high"]
            if version > 1:
                counts = data["counts"]
                if counts.shape != (int(out.combinations.offsets[-1]),):
                    raise ValueError(f"{str(path)!r}: {counts.size} combination counts do not "
                                     f"match space {space.name!r} "
                                     f"({int(out.combinations.offsets[-1])})")
                out.counts_ = counts
                out.hole_std_ = {str(t): float(s)
                                 for t, s in zip(data["hole_targets"], data["hole_std"],
                                                 strict=True)}
            if version > 2:
                out.slot_counts_ = data["slot_counts"] if "slot_counts" in data else None
                out.unit_std_ = {str(t): float(s)
                                 for t, s in zip(data["unit_targets"], data["unit_std"],
                                                 strict=True)}
        return out


def shared_vocabulary(space: Space) -> int:
    """The size of the one unit vocabulary every cost-unit slot shares (unit ``u`` is the same
    operation in each: :class:`~anb.searchspace.base.UnitCosts`), 0 when the slots have none."""
    analytic = space.unit_costs()
    if analytic is None or not analytic.shared:
        return 0
    widths = {len(table) for table in analytic.tables}
    return widths.pop() if len(widths) == 1 else 0
