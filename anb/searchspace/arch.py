"""The immutable architecture value type and its dataset-dict and string forms.

String form: one token per stage, joined by ``-``; a token is ``e{e}k{k}l{l}`` followed by
``se`` when squeeze-excite is on, e.g. EfficientNet-B0 is
``e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se``.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, NamedTuple

import numpy as np

from anb.searchspace.base import shown
from anb.searchspace.space import ANB_SPACE, FIELDS, SearchSpace

_TOKEN = re.compile(r"e(\d+)k(\d+)l(\d+)(se)?")
_KEY = re.compile(r"block(\d+)_(e|k|l|se)")
ID_LENGTH = 16


class StageChoice(NamedTuple):
    """The four choices of one stage (an immutable named tuple)."""

    e: int
    k: int
    l: int  # noqa: E741 - the benchmark's own name for the layer count
    se: bool

    def as_dict(self) -> dict[str, Any]:
        return {"e": self.e, "k": self.k, "l": self.l, "se": self.se}

    def __str__(self) -> str:
        return f"e{self.e}k{self.k}l{self.l}{'se' if self.se else ''}"


def _as_int(value: Any, stage: int, field: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"stage {stage} field '{field}' must be an integer, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"stage {stage} field '{field}' must be an integer, got {value!r}")


def _as_bool(value: Any, stage: int, field: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer, float, np.floating)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "0", "1"):
        return value.strip().lower() in ("true", "1")
    raise ValueError(f"stage {stage} field '{field}' must be true or false, got {value!r}")


@cache
def _key_slots(num_stages: int) -> dict[str, tuple[int, str]]:
    """``block{i}_{field}`` -> ``(i, field)`` for every stage of a space of ``num_stages``."""
    return {f"block{i}_{f}": (i, f) for i in range(num_stages) for f in FIELDS}


@dataclass(frozen=True)
class Arch:
    """An architecture: one :class:`StageChoice` per stage. Hashable and immutable."""

    stages: tuple[StageChoice, ...]

    # -- constructors ---------------------------------------------------------------------
    @classmethod
    def from_stages(
        cls, stages: Iterable[Mapping[str, Any] | Sequence[Any]], space: SearchSpace
    ) -> Arch:
        """Build from per-stage ``{"e", "k", "l", "se"}`` mappings or ``(e, k, l, se)`` tuples."""
        built = []
        for i, stage in enumerate(stages):
            if isinstance(stage, Mapping):
                values = dict(stage)
            else:
                stage = tuple(stage)
                if len(stage) != len(FIELDS):
                    raise ValueError(f"stage {i}: {len(stage)} value(s) {stage!r}; expected "
                                     f"{len(FIELDS)}, in the order {list(FIELDS)}")
                values = dict(zip(FIELDS, stage, strict=True))
            missing = [f for f in FIELDS if f not in values]
            if missing:
                raise ValueError(f"stage {i}: missing field(s) {missing}; expected {list(FIELDS)}")
            unknown = sorted(set(values) - set(FIELDS))
            if unknown:
                raise ValueError(f"stage {i}: unknown field(s) {unknown}; expected {list(FIELDS)}")
            built.append(
                StageChoice(
                    e=_as_int(values["e"], i, "e"),
                    k=_as_int(values["k"], i, "k"),
                    l=_as_int(values["l"], i, "l"),
                    se=_as_bool(values["se"], i, "se"),
                )
            )
        return space.check(cls(tuple(built)))

    @classmethod
    def from_anb_dict(cls, d: Mapping[str, Any], space: SearchSpace) -> Arch:
        """Build from the dataset's ``block{i}_{e,k,l,se}`` mapping (exactly those keys)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"architecture must be a mapping of block{{i}}_{{e,k,l,se}} keys, "
                             f"got {type(d).__name__}")
        stages: list[dict[str, Any]] = [{} for _ in range(space.num_stages)]
        slots = _key_slots(space.num_stages)
        for key, value in d.items():
            slot = slots.get(key) if type(key) is str else None
            if slot is not None:  # the canonical key: no pattern to match
                stages[slot[0]][slot[1]] = value
                continue
            match = _KEY.fullmatch(str(key))
            if not match:
                raise ValueError(
                    f"unknown architecture key {key!r}; expected block{{i}}_{{e,k,l,se}} "
                    f"with i in 0..{space.num_stages - 1}"
                )
            stage = int(match.group(1))
            if stage >= space.num_stages:
                raise ValueError(
                    f"architecture key {key!r} names stage {stage}, but space {space.name} "
                    f"has {space.num_stages} stages (0..{space.num_stages - 1})"
                )
            stages[stage][match.group(2)] = value
        for i, block in enumerate(stages):
            missing = [f"block{i}_{f}" for f in FIELDS if f not in block]
            if missing:
                raise ValueError(f"architecture is missing key(s) {missing}")
        return cls.from_stages(stages, space)

    @classmethod
    def from_string(cls, text: str, space: SearchSpace) -> Arch:
        """Parse the compact string form (see module docstring); the strings parsed last are
        remembered, so a string read again (a table loaded twice) is not parsed again."""
        if not isinstance(text, str):
            raise ValueError(f"architecture string must be a str, got {type(text).__name__}")
        return _parse(str(text), space)

    @classmethod
    def from_choices(cls, row: np.ndarray, space: SearchSpace) -> Arch:
        """Build from one ``(num_stages, 4)`` row of raw values (se as 0/1)."""
        row = np.asarray(row)
        return cls.from_stages([(int(e), int(k), int(layers), bool(se))
                                for e, k, layers, se in row], space)

    @classmethod
    def from_index(cls, index: int, space: SearchSpace) -> Arch:
        """The architecture at mixed-radix position ``index`` of ``space``."""
        return cls.from_choices(space.choices_from_index([index])[0], space)

    # -- views ----------------------------------------------------------------------------
    def to_anb_dict(self) -> dict[str, Any]:
        """The dataset's ``block{i}_{e,k,l,se}`` mapping (stage-major key order)."""
        return {
            f"block{i}_{field}": value
            for i, stage in enumerate(self.stages)
            for field, value in stage.as_dict().items()
        }

    def to_choices(self) -> np.ndarray:
        """A ``(num_stages, 4)`` int64 array of raw values (se as 0/1)."""
        return np.asarray([[s.e, s.k, s.l, int(s.se)] for s in self.stages], dtype=np.int64)

    def index(self, space: SearchSpace) -> int:
        """Mixed-radix position in ``space`` (a bijection onto ``range(space.size())``)."""
        return int(space.index_from_choices(self.to_choices()[None])[0])

    @property
    def id(self) -> str:
        """Stable content hash: 16 hex digits of SHA-256 over the canonical string."""
        return hashlib.sha256(f"anb-arch:{self}".encode()).hexdigest()[:ID_LENGTH]

    @property
    def depth(self) -> int:
        """Number of MBConv layers."""
        return sum(stage.l for stage in self.stages)

    def __str__(self) -> str:
        return "-".join(str(stage) for stage in self.stages)

    def __repr__(self) -> str:
        return f"Arch('{self}')"


@lru_cache(maxsize=8192)
def _parse(text: str, space: SearchSpace) -> Arch:
    """:meth:`Arch.from_string` of a ``str`` (an error is raised anew each time)."""
    tokens = text.strip().split("-")
    if len(tokens) != space.num_stages:
        raise ValueError(
            f"architecture string {text!r} has {len(tokens)} stage token(s); space "
            f"{space.name} needs {space.num_stages} tokens like 'e6k5l2se' joined by '-'"
        )
    stages = []
    for i, token in enumerate(tokens):
        match = _TOKEN.fullmatch(token)
        if not match:
            raise ValueError(
                f"stage {i}: malformed token {token!r} in {text!r}; expected "
                "'e<expansion>k<kernel>l<layers>' with an optional 'se' suffix, e.g. 'e6k5l2se'"
            )
        e, k, layers, se = match.groups()
        stages.append((int(e), int(k), int(layers), se is not None))
    return Arch.from_stages(stages, space)


#: EfficientNet-B0's own choices, a handy reference point in the space.
EFFICIENTNET_B0 = Arch.from_string("e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se",
                                   ANB_SPACE)


def as_arch(obj: Any, space: SearchSpace) -> Arch:
    """Coerce an Arch, a dataset dict (or a record holding one), a string or one choices row
    (an integer ``(num_stages, 4)`` array) into an Arch."""
    if isinstance(obj, Arch):
        return space.check(obj)
    if isinstance(obj, np.ndarray) and obj.dtype.kind in "iu":
        return archs_from_choices(space.to_choices(obj[None]), space)[0]
    if isinstance(obj, str):
        return Arch.from_string(obj, space)
    if isinstance(obj, Mapping):
        if "architecture" in obj:
            return Arch.from_anb_dict(obj["architecture"], space)
        return Arch.from_anb_dict(obj, space)
    raise ValueError(
        f"cannot read an architecture from {type(obj).__name__} {shown(obj)}; give an Arch, a "
        "block{i}_{e,k,l,se} dict, a dataset record, a choices row or a string like "
        "'e6k5l2se-...'"
    )


def archs_from_choices(choices: np.ndarray, space: SearchSpace) -> list[Arch]:
    """Build many architectures from a ``(n, num_stages, 4)`` array, validated in one pass."""
    choices = np.asarray(choices, dtype=np.int64)
    space.ordinal(choices)
    return [
        Arch(tuple(StageChoice(e, k, layers, bool(se)) for e, k, layers, se in row))
        for row in choices.tolist()
    ]


def archs_to_choices(archs: Sequence[Arch], space: SearchSpace) -> np.ndarray:
    """Stack architectures of ``space`` into a ``(n, num_stages, 4)`` array."""
    if len(archs) == 0:
        return np.zeros((0, space.num_stages, 4), dtype=np.int64)
    return np.stack([a.to_choices() for a in archs])
