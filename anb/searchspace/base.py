"""The search-space interface every stage uses.

A space is a fixed set of categorical decision variables (possibly conditional: a variable
switched off by another takes its first value). A batch of architectures is a *choices*
array of shape ``(n, *space.choice_shape)`` holding raw values as integers (a space decides
the shape; MnasNet keeps ``(stages, 4)``, the cell spaces a flat vector of op indices). Every
space supplies, vectorised over batches:

- ``positions``: each variable's position in its allowed values, ``(n, num_variables)``;
  the inverse ``from_positions``; a bijective ``index`` onto ``range(size())``;
- ``format`` / ``parse`` of a canonical string, record keys, a stable content id;
- exact analytic per-block costs (:class:`CostTable`) and ``cost_units``: the additive
  structure the layer-cost surrogate learns (which unit occupies each slot, how many times);
- a PyTorch builder (``build``) and the input the built network takes (:class:`Task`).

Sampling, encodings, ConfigSpace export, mutation and the surrogates are written once on top
of this interface (see ``anb.searchspace.sampler`` / ``encoding``).
"""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

COST_NAMES = ("macs", "true_macs", "params", "activations")
#: The largest input resolution (pixels) and classifier width a network is built or counted for.
MAX_RESOLUTION = 8192
MAX_CLASSES = 100_000
ID_LENGTH = 16


def shown(obj: Any) -> str:
    """``obj``'s repr for an error message, cut at 60 characters."""
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Variable:
    """One categorical decision: its name and allowed raw values (ints, in order)."""

    name: str
    values: tuple[int, ...]
    labels: tuple[str, ...] | None = None  # printable names of the values, when not numbers

    @property
    def radix(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class Task:
    """What a space's networks take and give by default: input size, channels, classes."""

    dataset: str
    resolution: int
    num_classes: int
    in_channels: int = 3
    dims: int = 2

    def input_shape(self, batch: int = 1, resolution: int | None = None) -> tuple[int, ...]:
        size = resolution if resolution is not None else self.resolution
        return (batch, self.in_channels, *(size,) * self.dims)


def check_resolution(space: str, resolution: Any) -> int:
    """A ``resolution`` override as an int; a ValueError unless it is a positive integer."""
    if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)) \
            or not 1 <= resolution <= MAX_RESOLUTION:
        raise ValueError(f"{space}: resolution must be an integer from 1 to {MAX_RESOLUTION} "
                         f"(pixels), got {resolution!r}")
    return int(resolution)


@dataclass
class CostTable:
    """Per-block costs of a batch (each ``(n, num_blocks)``) plus the fixed stem and head
    (ints, or ``(n,)`` arrays where an architecture variable such as the resolution sets them)."""

    per_stage: dict[str, np.ndarray]
    stem: dict[str, Any]
    head: dict[str, Any]

    def total(self, name: str) -> np.ndarray:
        return self.per_stage[name].sum(axis=1) + self.stem[name] + self.head[name]


@dataclass(frozen=True)
class CostUnits:
    """The additive structure of a batch: slot ``s`` holds unit ``units[:, s]`` (one of
    ``widths[s]``) repeated ``counts[:, s]`` times; a network's cost is close to the sum."""

    units: np.ndarray
    counts: np.ndarray
    widths: tuple[int, ...]
    slot_names: tuple[str, ...] = field(default=())

    def flat(self) -> np.ndarray:
        """``(n, slots)``: each slot's unit as an index into the flat (slot, unit) table, slot
        by slot (the layer-cost design's column order)."""
        offsets = np.concatenate([[0], np.cumsum(self.widths)[:-1]]).astype(np.int64)
        return np.asarray(self.units, dtype=np.int64) + offsets


@dataclass(frozen=True, eq=False)
class UnitCosts:
    """Exact analytic costs of one instance of every unit in every cost-unit slot:
    ``tables[s]`` is ``(widths[s], len(names))``. ``shared``: unit ``u`` means the same
    operation in every slot (one vocabulary), so its effect may be shared across slots.
    ``parts[s]`` (optional) is ``(widths[s], n_parts)``: the level of each choice a unit is
    made of (MnasNet's ``e``, ``k``, ``se``), so that units agreeing in all parts but one may
    share an effect."""

    tables: tuple[np.ndarray, ...]
    names: tuple[str, ...]
    shared: bool = False
    parts: tuple[np.ndarray, ...] = ()


class SpaceMismatch(ValueError):
    """Something of one search space was given where another space is in use."""


def check_same_space(expected: str, found: str, what: str) -> None:
    """Refuse mixing spaces, naming both (:class:`SpaceMismatch`)."""
    if expected != found:
        raise SpaceMismatch(f"{what} is in search space {found!r}, but {expected!r} is in use; "
                           "spaces cannot be mixed (pass --space to choose)")


@dataclass(frozen=True, eq=False)
class SpaceArch:
    """An architecture of a generic space: the space and its canonical choices row."""

    space: Space
    values: tuple[int, ...]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, SpaceArch) and other.space.name == self.space.name
                and other.values == self.values)

    def __hash__(self) -> int:
        return hash((self.space.name, self.values))

    def to_choices(self) -> np.ndarray:
        return np.asarray(self.values, dtype=np.int64).reshape(self.space.choice_shape)

    @property
    def id(self) -> str:
        return self.space.arch_id(str(self))

    def __str__(self) -> str:
        return self.space.format(self.to_choices())

    def __repr__(self) -> str:
        return f"{type(self.space).__name__}Arch('{self}')"


class Space(ABC):
    """A search space (see the module docstring). Subclasses are registered by name."""

    name: str
    version: str = "1"
    task: Task
    #: printed by ``anb space``; one line
    summary: str = ""
    #: whether blocks have a variable number of layers (``depth`` features)
    variable_depth: bool = False

    # -- variables ---------------------------------------------------------------------
    @property
    @abstractmethod
    def variables(self) -> tuple[Variable, ...]:
        """The decision variables, in the order of :meth:`positions` columns."""

    @property
    @abstractmethod
    def choice_shape(self) -> tuple[int, ...]:
        """Shape of one architecture's choices row."""

    @abstractmethod
    def positions(self, choices: np.ndarray) -> np.ndarray:
        """Validated positions ``(n, num_variables)``; a ValueError names variable and value."""

    @abstractmethod
    def from_positions(self, positions: np.ndarray) -> np.ndarray:
        """Choices of a positions array (inactive variables canonicalised)."""

    def size(self) -> int:
        """Number of distinct architectures (exact Python int)."""
        total = 1
        for variable in self.variables:
            total *= variable.radix
        return total

    def position_names(self) -> list[str]:
        """Column names of the ``ordinal`` encoding (the variable names by default)."""
        return [v.name for v in self.variables]

    def conditions(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """``(child, parent, parent values)``: ``child`` is in effect only when ``parent``
        takes one of those values (none unless the space is conditional)."""
        return []

    def variable_groups(self) -> np.ndarray:
        """Group id of each variable: variables of a group travel together in crossover."""
        return np.arange(len(self.variables))

    def radices(self) -> np.ndarray:
        return np.array([v.radix for v in self.variables], dtype=np.int64)

    def active(self, positions: np.ndarray) -> np.ndarray:
        """Which variables are in effect, ``(n, num_variables)`` bool (all, unless conditional)."""
        return np.ones(np.shape(positions), dtype=bool)

    def choices_from_index(self, index: np.ndarray | Sequence[int]) -> np.ndarray:
        """Decode indices in ``[0, size())`` (mixed radix over the variables)."""
        rest = self._check_index(index)
        radices = [int(r) for r in self.radices()]
        pos = np.empty((rest.size, len(radices)), dtype=np.int64)
        for v in reversed(range(len(radices))):
            pos[:, v] = (rest % radices[v]).astype(np.int64)
            rest //= radices[v]
        return self.from_positions(pos)

    def index_from_choices(self, choices: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`choices_from_index` (``object`` ints beyond 2**62)."""
        pos = self.positions(choices)
        index: np.ndarray = np.zeros(len(pos), dtype=self.index_dtype())
        for v, radix in enumerate(self.radices()):
            index = index * int(radix) + pos[:, v].astype(index.dtype)
        return index

    def index_dtype(self) -> type:
        """``int64``, or ``object`` (Python ints) for spaces beyond 2**62 architectures."""
        return object if self.size() > 2**62 else np.int64

    def _check_index(self, index: np.ndarray | Sequence[int]) -> np.ndarray:
        """``index`` as a 1-D array of :meth:`index_dtype`; a ValueError names the first value
        that is not an integer in ``[0, size())``."""
        array = np.asarray(index)
        if array.ndim != 1:
            raise ValueError(f"{self.name}: index must be 1-D, got shape {array.shape}")
        size = self.size()
        allowed = f"allowed indices are 0 to {size - 1} (the space holds {size:,})"
        if array.dtype.kind in "iu":  # vectorised: the sampler decodes large batches
            outside = (array < 0) | (array >= min(size, np.iinfo(np.int64).max))
            if outside.any():
                raise ValueError(f"{self.name}: index {int(array[outside.argmax()])} is "
                                 f"outside the space; {allowed}")
            return array.astype(self.index_dtype())
        values = array.tolist()
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{self.name}: index {value!r} is not an integer; {allowed}")
            if not 0 <= value < size:
                raise ValueError(f"{self.name}: index {value} is outside the space; {allowed}")
        out: np.ndarray = np.empty(len(values), dtype=self.index_dtype())
        out[:] = [int(v) for v in values]
        return out

    def check_positions(self, positions: np.ndarray) -> np.ndarray:
        """``positions`` as ``(n, num_variables)`` int64; a ValueError names the first
        variable whose position is outside ``[0, radix)``, its value and the range."""
        pos = np.asarray(positions)
        width = len(self.variables)
        if pos.ndim != 2 or pos.shape[1] != width:
            raise ValueError(f"{self.name}: positions must have shape (n, {width}), got "
                             f"{pos.shape}")
        if pos.size and pos.dtype.kind not in "iu":
            raise ValueError(f"{self.name}: positions must be integers, got dtype {pos.dtype}")
        radices = self.radices()
        bad = (pos < 0) | (pos >= radices)
        if bad.any():
            row, column = (int(v[0]) for v in np.nonzero(bad))
            raise ValueError(f"{self.name}: position {int(pos[row, column])} of variable "
                             f"{self.position_names()[column]!r} is outside its range 0 to "
                             f"{radices[column] - 1}")
        return pos.astype(np.int64)

    # -- single architectures ----------------------------------------------------------
    @abstractmethod
    def format(self, row: np.ndarray) -> str:
        """The canonical string of one choices row."""

    @abstractmethod
    def parse_string(self, text: str) -> np.ndarray:
        """One choices row from its string form; a ValueError says what is wrong."""

    def arch_id(self, text: str) -> str:
        """Stable content id: 16 hex digits of SHA-256 over the space name and the string."""
        return hashlib.sha256(f"{self.name}:{text}".encode()).hexdigest()[:ID_LENGTH]

    def record_keys(self) -> list[str]:
        """Keys of a record's ``architecture`` mapping (one per variable by default)."""
        return [v.name for v in self.variables]

    def to_record(self, arch: Any) -> dict[str, Any]:
        pos = self.positions(self.to_choices([arch]))[0]
        return {v.name: self._value_label(v, int(p)) for v, p in zip(self.variables, pos,
                                                                      strict=True)}

    def from_record(self, mapping: Mapping[str, Any]) -> np.ndarray:
        """One choices row from a record's ``architecture`` mapping (exactly its keys)."""
        keys = self.record_keys()
        unknown = sorted(set(map(str, mapping)) - set(keys))
        missing = [k for k in keys if k not in mapping]
        if unknown or missing:
            raise ValueError(f"{self.name}: architecture keys wrong (unknown {unknown}, "
                             f"missing {missing}); expected {keys[0]} ... {keys[-1]}")
        pos = []
        for v in self.variables:
            value = mapping[v.name]
            allowed = list(v.labels) if v.labels else list(v.values)
            text = str(value).strip().lower()
            matches = [i for i, a in enumerate(allowed) if str(a).lower() == text]
            if not matches or isinstance(value, bool) != isinstance(allowed[0], bool):
                raise ValueError(f"{self.name}: variable {v.name!r} has value {value!r}; "
                                 f"allowed values are {allowed}")
            pos.append(matches[0])
        return self.from_positions(np.asarray([pos], dtype=np.int64))[0]

    @staticmethod
    def _value_label(variable: Variable, position: int) -> Any:
        return variable.labels[position] if variable.labels else variable.values[position]

    def arch(self, obj: Any) -> Any:
        """Coerce a string, record, record's ``architecture`` mapping, native form, one choices
        row (an integer array) or arch."""
        if isinstance(obj, SpaceArch):
            check_same_space(self.name, obj.space.name, "the architecture")
            return obj
        if isinstance(obj, Mapping) and "space" in obj:  # a record naming its space
            check_same_space(self.name, str(obj["space"]), "the record")
        if isinstance(obj, np.ndarray) and obj.dtype.kind in "iub":
            row = self.to_choices(obj[None])[0]  # one choices row, validated
        elif isinstance(obj, str):
            row = self.parse_string(obj)
        elif isinstance(obj, Mapping):
            inner = obj.get("architecture", obj)
            row = self.from_native(inner) if self.is_native(inner) else self.from_record(inner)
        else:
            raise ValueError(f"{self.name}: cannot read an architecture from "
                             f"{type(obj).__name__} {shown(obj)}; give a string like "
                             f"{self.format(self.choices_from_index([0])[0])!r} or a record")
        return self.archs_from_choices(row[None])[0]

    def is_native(self, mapping: Mapping[str, Any]) -> bool:
        """True when ``mapping`` is this space's native form (e.g. OFA's ``ks/e/d/r`` dict)."""
        return False

    def from_native(self, mapping: Mapping[str, Any]) -> np.ndarray:
        raise ValueError(f"{self.name} has no native architecture form")

    def archs_from_choices(self, choices: np.ndarray) -> list[Any]:
        choices = self.from_positions(self.positions(choices))
        flat = choices.reshape(len(choices), -1)
        return [SpaceArch(self, tuple(row)) for row in flat.tolist()]

    def arch_strings(self, choices: np.ndarray) -> list[str]:
        """``str`` of each architecture of a batch (a space may override it with a faster
        path)."""
        return [str(arch) for arch in self.archs_from_choices(choices)]

    def to_choices(self, archs: Any) -> np.ndarray:
        """A choices batch from an array (validated) or a sequence of anything :meth:`arch`
        reads."""
        if isinstance(archs, np.ndarray) and archs.dtype.kind in "iub":
            choices = archs.astype(np.int64, copy=False)
            if choices.shape == self.choice_shape:
                choices = choices[None]
            self.positions(choices)
            return choices
        if isinstance(archs, (str, Mapping, SpaceArch)) or not isinstance(
                archs, Sequence | np.ndarray):
            archs = [archs]
        rows = [self.arch(a).to_choices() for a in archs]
        if not rows:
            return np.zeros((0, *self.choice_shape), dtype=np.int64)
        return np.stack(rows)

    # -- costs --------------------------------------------------------------------------
    @abstractmethod
    def cost_table(self, choices: np.ndarray, resolution: int | None = None,
                   num_classes: int | None = None, in_channels: int | None = None) -> CostTable:
        """Exact analytic costs per block (``COST_NAMES``), thop's counting convention."""

    @abstractmethod
    def cost_units(self, choices: np.ndarray) -> CostUnits:
        """The additive slot/unit structure of a batch (see :class:`CostUnits`)."""

    def unit_costs(self) -> UnitCosts | None:
        """Per slot, the analytic costs of each unit it may hold (see :class:`UnitCosts`);
        what the layer-cost surrogate backs off to for a unit it has not seen in a slot.

        By default derived where each variable is one slot and one :meth:`cost_table` block
        whose cost depends on that variable alone (cell / layer-wise spaces): ``COST_NAMES``
        plus a constant 1 per instance. ``None`` (no analytic back-off) otherwise."""
        radices = self.radices()
        units = self.cost_units(self.choices_from_index([0]))
        if (len(units.widths) != len(radices) or tuple(units.widths) != tuple(radices)
                or len(self.block_names()) != len(radices)):
            return None
        width = int(radices.max())
        pos = np.minimum(np.arange(width)[:, None], radices[None, :] - 1)
        per_block = self.cost_table(self.from_positions(pos)).per_stage
        tables = tuple(np.stack([per_block[name][:r, s].astype(np.float64)
                                 for name in COST_NAMES] + [np.ones(r)], axis=1)
                       for s, r in enumerate(int(r) for r in radices))
        values = {(v.values, v.labels) for v in self.variables}
        return UnitCosts(tables, (*COST_NAMES, "instances"), shared=len(values) == 1)

    def block_names(self) -> list[str]:
        """Names of the :meth:`cost_table` blocks (columns of ``per_stage``)."""
        n = self.cost_table(self.choices_from_index([0])).per_stage["macs"].shape[1]
        return [f"b{i}" for i in range(n)]

    def operation_costs(self, choices: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Exact totals per kind of operation, ``(n, k)`` and their names: what a device's
        time is close to a non-negative combination of. By default convolution / linear MACs,
        the other counted MACs, activation traffic and layers; spaces may be finer."""
        table = self.cost_table(choices)
        true_macs, macs = table.total("true_macs"), table.total("macs")
        parts = [true_macs, macs - true_macs, table.total("activations"),
                 self.depth(choices).sum(axis=1)]
        return (np.stack(parts, axis=1).astype(np.float64),
                ["conv_macs", "other_macs", "activations", "layers"])

    def resolutions(self, choices: np.ndarray) -> np.ndarray:
        """Each architecture's input resolution ``(n,)``: the task's, unless the space makes
        the resolution an architecture variable (OFA)."""
        return np.full(len(choices), self.task.resolution, dtype=np.int64)

    def depth(self, choices: np.ndarray) -> np.ndarray:
        """Layers in effect per block, ``(n, num_blocks)`` (1 where a block is one layer)."""
        n_blocks = len(self.block_names())
        return np.ones((len(choices), n_blocks), dtype=np.int64)

    # -- networks -----------------------------------------------------------------------
    @abstractmethod
    def build(self, arch: Any, num_classes: int | None = None, **options: Any) -> nn.Module:
        """The PyTorch network of ``arch`` (``num_classes`` defaults to the task's)."""

    def describe(self) -> dict[str, Any]:
        """Name, version, size and task: what ``anb space`` prints."""
        return {"name": self.name, "version": self.version, "size": self.size(),
                "variables": len(self.variables), "dataset": self.task.dataset,
                "resolution": self.task.resolution, "num_classes": self.task.num_classes,
                "summary": self.summary}


class OpSpace(Space):
    """A space whose choices row is one op index per variable (positions are the choices):
    cell and layer-wise spaces such as NAS-Bench-201 and FBNet."""

    @property
    def choice_shape(self) -> tuple[int, ...]:
        return (len(self.variables),)

    def allowed_text(self, variable: Variable) -> str:
        """How an error lists a variable's allowed op indices."""
        labels = variable.labels or tuple(map(str, variable.values))
        return ", ".join(f"{i} ({op})" for i, op in enumerate(labels))

    def positions(self, choices: np.ndarray) -> np.ndarray:
        choices = np.asarray(choices)
        width = len(self.variables)
        if choices.ndim != 2 or choices.shape[1] != width:
            raise ValueError(f"{self.name}: choices must have shape (n, {width}), "
                             f"got {choices.shape}")
        if choices.dtype.kind not in "iu":
            raise ValueError(f"{self.name}: choices must be integer op indices, "
                             f"got dtype {choices.dtype}")
        bad = (choices < 0) | (choices >= self.radices())
        if bad.any():
            row, col = (int(v[0]) for v in np.nonzero(bad))
            variable = self.variables[col]
            raise ValueError(f"{self.name}: variable {variable.name!r} has value "
                             f"{int(choices[row, col])}; allowed values are "
                             f"{self.allowed_text(variable)}")
        return choices.astype(np.int64)

    def from_positions(self, positions: np.ndarray) -> np.ndarray:
        return self.positions(positions)
