"""The MnasNet macro space: a fixed skeleton of MBConv stages with per-stage choices.

A :class:`SearchSpace` is a list of :class:`StageSpec` (channels, stride, allowed choices)
and implements :class:`~anb.searchspace.base.Space`: a batch of architectures is a
``(n, num_stages, 4)`` integer array of raw choice values ``(e, k, l, se)``; every
architecture has a unique mixed-radix *index* in ``[0, size())``.

Extents:

- ``anb-mnasnet`` (Accel-NASBench's space; skeleton of EfficientNet-B0: stem 3x3 stride 2 of
  32, stages 16, 24, 40, 80, 112, 192, 320 at strides 1, 2, 2, 2, 1, 2, 1, head 1280): per
  stage ``e`` in {1, 4, 6}, ``k`` in {3, 5}, ``l`` in {1, 2, 3} ({1, 2, 3, 4} in stage 5) and
  ``se`` on/off: ``36**6 * 48`` = 104,485,552,128 architectures; ImageNet, 224 px by default
  (costs and the network take any input size, odd ones included), 1000 classes.
- ``anb-seq1d``: five stride-1 1-D stages (16, 24, 40, 80, 112), ``e`` in {1, 4, 6}, ``k`` in
  {3, 5}, ``l`` in {1, 2, 3}, no SE: ``18**5`` = 1,889,568 architectures; sequences of 1000
  (any length), one channel, 10 classes.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from anb.searchspace.base import (
    CostTable,
    CostUnits,
    Space,
    Task,
    UnitCosts,
    Variable,
    check_resolution,
)

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from anb.searchspace.arch import Arch

FIELDS = ("e", "k", "l", "se")


@dataclass(frozen=True)
class StageSpec:
    """One stage of the skeleton and the values each of its choices may take."""

    in_channels: int
    out_channels: int
    stride: int
    expansions: tuple[int, ...] = (1, 4, 6)
    kernels: tuple[int, ...] = (3, 5)
    layers: tuple[int, ...] = (1, 2, 3)
    se: tuple[bool, ...] = (True, False)

    def allowed(self, field: str) -> tuple:
        return {"e": self.expansions, "k": self.kernels, "l": self.layers, "se": self.se}[field]

    @property
    def radices(self) -> tuple[int, int, int, int]:
        return tuple(len(self.allowed(f)) for f in FIELDS)  # type: ignore[return-value]

    @property
    def size(self) -> int:
        return int(np.prod(self.radices))


@dataclass(frozen=True, eq=False)
class SearchSpace(Space):
    """A macro space of MBConv stages between a fixed stem and head.

    ``dims`` is 2 for images (stem 3x3 stride 2, 224 px) and 1 for the sequence variant.
    """

    name: str
    stages: tuple[StageSpec, ...]
    stem_channels: int = 32
    head_channels: int = 1280
    stem_stride: int = 2
    dims: int = 2
    version: str = "1"
    task: Task = Task("imagenet", 224, 1000)
    summary: str = "MnasNet/EfficientNet-B0 macro space: per stage (e, k, layers, se)"
    variable_depth: bool = True

    # -- the Space interface -------------------------------------------------------------
    @property
    def variables(self) -> tuple[Variable, ...]:
        return _variables(self)

    @property
    def choice_shape(self) -> tuple[int, ...]:
        return (self.num_stages, len(FIELDS))

    def positions(self, choices: np.ndarray) -> np.ndarray:
        choices = np.asarray(choices, dtype=np.int64)
        return self.ordinal(choices).reshape(len(choices), -1)

    def variable_groups(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_stages), len(FIELDS))

    def position_names(self) -> list[str]:
        return [f"b{s}_{f}" for s in range(self.num_stages) for f in FIELDS]

    def from_positions(self, positions: np.ndarray) -> np.ndarray:
        pos = self.check_positions(positions).reshape(-1, self.num_stages, len(FIELDS))
        out = np.empty_like(pos)
        for s, stage in enumerate(self._value_tables()):
            for f, table in enumerate(stage):
                out[:, s, f] = table[pos[:, s, f]]
        return out

    def format(self, row: np.ndarray) -> str:
        from anb.searchspace.arch import archs_from_choices

        return str(archs_from_choices(np.asarray(row)[None], self)[0])

    def parse_string(self, text: str) -> np.ndarray:
        from anb.searchspace.arch import Arch

        return Arch.from_string(text, self).to_choices()

    def arch_id(self, text: str) -> str:
        # the released benchmark's ids predate named spaces: keep their prefix
        import hashlib

        from anb.searchspace.base import ID_LENGTH

        return hashlib.sha256(f"anb-arch:{text}".encode()).hexdigest()[:ID_LENGTH]

    def to_record(self, arch: Any) -> dict[str, Any]:
        return self.arch(arch).to_anb_dict()

    def from_record(self, mapping: Any) -> np.ndarray:
        from anb.searchspace.arch import Arch

        return Arch.from_anb_dict(mapping, self).to_choices()

    def arch(self, obj: Any) -> Arch:
        from anb.searchspace.arch import as_arch

        return as_arch(obj, self)

    def archs_from_choices(self, choices: np.ndarray) -> list[Arch]:
        from anb.searchspace.arch import archs_from_choices

        return archs_from_choices(choices, self)

    def stage_combos(self, choices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The choices' ordinal positions (validated) and, per stage, the index of its
        combination: mixed radix over the ``e, k, l, se`` positions, ``se`` fastest."""
        pos = self.ordinal(choices)
        radices = np.array([spec.radices for spec in self.stages])
        index = np.zeros(pos.shape[:2], dtype=np.int64)
        for f in range(4):
            index = index * radices[None, :, f] + pos[:, :, f]
        return pos, index

    def arch_strings(self, choices: np.ndarray) -> list[str]:
        """``str`` of each architecture, joined from per-stage tables (no Arch is built)."""
        _, index = self.stage_combos(choices)
        words = _stage_words(self)
        return ["-".join(row) for row in words[np.arange(self.num_stages), index].tolist()]

    def to_choices(self, archs: Any) -> np.ndarray:
        from anb.searchspace.arch import Arch, as_arch

        if isinstance(archs, np.ndarray):
            choices = archs.astype(np.int64, copy=False)
            self.ordinal(choices)
            return choices
        if isinstance(archs, (Arch, str, dict)):
            archs = [archs]
        rows = [as_arch(a, self).to_choices() for a in archs]
        if not rows:
            return np.zeros((0, self.num_stages, len(FIELDS)), dtype=np.int64)
        return np.stack(rows)

    def cost_table(self, choices: np.ndarray, resolution: int | None = None,
                   num_classes: int | None = None, in_channels: int | None = None) -> CostTable:
        from anb.searchspace.counting import cost_table

        size = (self.task.resolution if resolution is None
                else check_resolution(self.name, resolution))
        return cost_table(choices, self, size,
                          num_classes or self.task.num_classes, in_channels)

    def cost_units(self, choices: np.ndarray) -> CostUnits:
        """Per stage two slots: the first layer's ``(e, k, se)`` once, the same unit
        ``layers - 1`` times for the later layers (they all share the stage's shape)."""
        choices = np.asarray(choices, dtype=np.int64)
        pos = self.ordinal(choices)
        units, counts, widths, names = [], [], [], []
        for s, spec in enumerate(self.stages):
            radix_e, radix_k, _, radix_se = spec.radices
            combo = (pos[:, s, 0] * radix_k + pos[:, s, 1]) * radix_se + pos[:, s, 3]
            width = radix_e * radix_k * radix_se
            units += [combo, combo]
            counts += [np.ones(len(choices)), (choices[:, s, 2] - 1).astype(np.float64)]
            widths += [width, width]
            names += [f"s{s}_first", f"s{s}_later"]
        n = len(choices)
        return CostUnits(np.stack(units, 1) if units else np.zeros((n, 0), np.int64),
                         np.stack(counts, 1) if counts else np.zeros((n, 0)),
                         tuple(widths), tuple(names))

    def unit_costs(self) -> UnitCosts:
        """Each slot's per-layer operation costs (``OPERATION_NAMES``) of all 12 units."""
        from anb.searchspace.counting import OPERATION_NAMES, unit_operation_costs

        shared = len({tuple(spec.allowed(f) for f in FIELDS if f != "l")
                      for spec in self.stages}) == 1
        parts = []
        for spec in self.stages:  # cost_units' order: unit = (e * radix_k + k) * radix_se + se
            radix_e, radix_k, _, radix_se = spec.radices
            unit = np.arange(radix_e * radix_k * radix_se)
            levels = np.stack([unit // (radix_k * radix_se), unit // radix_se % radix_k,
                               unit % radix_se], axis=1)
            parts += [levels, levels]
        return UnitCosts(unit_operation_costs(self, self.task.resolution), OPERATION_NAMES,
                         shared, tuple(parts))

    def block_names(self) -> list[str]:
        return [f"s{s}" for s in range(self.num_stages)]

    def operation_costs(self, choices: np.ndarray) -> tuple[np.ndarray, list[str]]:
        from anb.searchspace.counting import OPERATION_NAMES, operation_costs

        return operation_costs(choices, self, self.task.resolution), list(OPERATION_NAMES)

    def depth(self, choices: np.ndarray) -> np.ndarray:
        return np.asarray(choices, dtype=np.int64)[:, :, 2]

    def build(self, arch: Any, num_classes: int | None = None, **options: Any) -> nn.Module:
        from anb.searchspace.model import build_model

        return build_model(self.arch(arch), num_classes or self.task.num_classes,
                           space=self, **options)

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def size(self) -> int:
        """Number of distinct architectures (exact Python int)."""
        total = 1
        for stage in self.stages:
            total *= stage.size
        return total

    # -- validation ---------------------------------------------------------------------
    def validate_values(self, stage: int, values: dict) -> None:
        """Raise ValueError naming stage, field, value and allowed set for any bad choice."""
        spec = self.stages[stage]
        for field in FIELDS:
            value = values[field]
            allowed = spec.allowed(field)
            if field == "se":
                ok = isinstance(value, (bool, np.bool_)) and bool(value) in allowed
            else:
                ok = (
                    isinstance(value, (int, np.integer))
                    and not isinstance(value, (bool, np.bool_))
                    and int(value) in allowed
                )
            if not ok:
                raise ValueError(
                    f"{self.name}: stage {stage} field '{field}' has value {value!r}; "
                    f"allowed values are {list(allowed)}"
                )

    def contains(self, arch: Arch) -> bool:
        """True when ``arch`` has this space's number of stages and only allowed values."""
        if len(arch.stages) != self.num_stages:
            return False
        try:
            for i, stage in enumerate(arch.stages):
                self.validate_values(i, stage.as_dict())
        except ValueError:
            return False
        return True

    def check(self, arch: Arch) -> Arch:
        """Return ``arch`` unchanged, or raise a ValueError saying what is outside the space.

        A stage of plain ``int`` values and a ``bool`` is looked up in the stage's allowed
        combinations; any other stage is checked value by value (:meth:`validate_values`)."""
        if len(arch.stages) != self.num_stages:
            raise ValueError(
                f"{self.name}: expected {self.num_stages} stages, got {len(arch.stages)}"
            )
        for i, (stage, allowed) in enumerate(zip(arch.stages, _stage_combos(self),
                                                 strict=True)):
            if tuple(map(type, stage)) != _PLAIN or stage not in allowed:
                self.validate_values(i, stage.as_dict())
        return arch

    # -- mixed-radix indexing (vectorised) ------------------------------------------------
    def _value_tables(self) -> list[list[np.ndarray]]:
        return [
            [np.asarray([int(v) for v in spec.allowed(f)], dtype=np.int64) for f in FIELDS]
            for spec in self.stages
        ]

    def choices_from_index(self, index: np.ndarray | Sequence[int]) -> np.ndarray:
        """Decode indices into a ``(n, num_stages, 4)`` array of raw values (se as 0/1)."""
        rest = self._check_index(index).copy()
        out = np.empty((rest.size, self.num_stages, len(FIELDS)), dtype=np.int64)
        tables = self._value_tables()
        for s in reversed(range(self.num_stages)):
            for f in reversed(range(4)):
                radix = len(tables[s][f])
                out[:, s, f] = tables[s][f][rest % radix]
                rest //= radix
        return out

    def index_from_choices(self, choices: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`choices_from_index`; raises on values outside the space."""
        choices = np.asarray(choices, dtype=np.int64)
        ordinal = self.ordinal(choices)
        index = np.zeros(choices.shape[0], dtype=np.int64)
        for s, spec in enumerate(self.stages):
            for f, radix in enumerate(spec.radices):
                index = index * radix + ordinal[:, s, f]
        return index

    def ordinal(self, choices: np.ndarray) -> np.ndarray:
        """Map raw values to choice positions ``0..radix-1`` (same shape), validating them."""
        choices = np.asarray(choices, dtype=np.int64)
        if choices.ndim != 3 or choices.shape[1:] != (self.num_stages, 4):
            raise ValueError(
                f"{self.name}: choices must have shape (n, {self.num_stages}, 4), "
                f"got {choices.shape}"
            )
        lookup = _ordinal_lookup(self)
        width = lookup.shape[-1]
        inside = (choices >= 0) & (choices < width)
        offsets = (np.arange(self.num_stages * 4, dtype=np.int64) * width).reshape(
            self.num_stages, 4
        )
        out = lookup.ravel()[offsets + np.where(inside, choices, 0)]
        out[~inside] = -1
        if (out < 0).any():
            _, s, f = (int(v[0]) for v in np.nonzero(out < 0))
            bad = int(choices[np.nonzero(out < 0)[0][0], s, f])
            allowed = list(self.stages[s].allowed(FIELDS[f]))
            raise ValueError(
                f"{self.name}: stage {s} field '{FIELDS[f]}' has value {bad}; "
                f"allowed values are {allowed}"
            )
        return out


@cache
def _variables(space: SearchSpace) -> tuple[Variable, ...]:
    """:attr:`SearchSpace.variables`, built once per space (read per row and label)."""
    return tuple(Variable(f"block{i}_{f}", tuple(int(v) for v in spec.allowed(f)),
                          tuple(str(v) for v in spec.allowed(f)) if f == "se" else None)
                 for i, spec in enumerate(space.stages) for f in FIELDS)


#: The value types of a stage the fast path of :meth:`SearchSpace.check` takes.
_PLAIN = (int, int, int, bool)


@cache
def _stage_combos(space: SearchSpace) -> tuple[frozenset[tuple[int, int, int, bool]], ...]:
    """Per stage, every allowed ``(e, k, l, se)`` as plain ints and a bool."""
    return tuple(frozenset(itertools.product(*(spec.allowed(f) for f in FIELDS)))
                 for spec in space.stages)


@cache
def _ordinal_lookup(space: SearchSpace) -> np.ndarray:
    """``lookup[stage, field, value]`` = position of ``value`` in the allowed set, or -1."""
    tables = space._value_tables()
    width = 1 + max(int(t.max()) for stage in tables for t in stage)
    lookup = np.full((space.num_stages, 4, width), -1, dtype=np.int64)
    for s, stage in enumerate(tables):
        for f, table in enumerate(stage):
            lookup[s, f, table] = np.arange(table.size)
    return lookup


@cache
def _stage_words(space: SearchSpace) -> np.ndarray:
    """``words[stage, combo]``: the stage's part of an architecture string for each of its
    choice combinations (:meth:`SearchSpace.stage_combos`' order)."""
    from anb.searchspace.arch import StageChoice

    radices = [spec.radices for spec in space.stages]
    words = np.full((space.num_stages, max(int(np.prod(r)) for r in radices)), "", dtype=object)
    for s, values in enumerate(space._value_tables()):
        for combo, pos in enumerate(np.ndindex(*radices[s])):
            e, k, layers, se = (int(values[f][p]) for f, p in enumerate(pos))
            words[s, combo] = str(StageChoice(e, k, layers, bool(se)))
    return words


def _mnasnet_stages() -> tuple[StageSpec, ...]:
    skeleton = [(32, 16, 1), (16, 24, 2), (24, 40, 2), (40, 80, 2), (80, 112, 1),
                (112, 192, 2), (192, 320, 1)]
    return tuple(
        StageSpec(cin, cout, stride, layers=(1, 2, 3, 4) if i == 5 else (1, 2, 3))
        for i, (cin, cout, stride) in enumerate(skeleton)
    )


def _seq1d_stages() -> tuple[StageSpec, ...]:
    skeleton = [(32, 16), (16, 24), (24, 40), (40, 80), (80, 112)]
    return tuple(StageSpec(cin, cout, 1, se=(False,)) for cin, cout in skeleton)


#: The MnasNet / EfficientNet-B0 macro space of Accel-NASBench (36^6 x 48 architectures).
ANB_SPACE = SearchSpace(name="anb-mnasnet", stages=_mnasnet_stages())

#: The 1-D variant for sequence tasks (5 stride-1 stages, no SE, head 1280).
SEQ1D_SPACE = SearchSpace(name="anb-seq1d", stages=_seq1d_stages(), stem_stride=1, dims=1,
                          task=Task("sequence", 1000, 10, in_channels=1, dims=1),
                          summary="1-D MBConv macro space for sequence tasks")


def iter_stage_values(space: SearchSpace) -> Iterable[tuple[int, str, tuple]]:
    """Yield ``(stage, field, allowed_values)`` for every choice of the space."""
    for i, spec in enumerate(space.stages):
        for field in FIELDS:
            yield i, field, spec.allowed(field)
