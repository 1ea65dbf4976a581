"""Objectives and constraints of a search, parsed from short strings.

``"val_top1:max"``, ``"latency_zcu102:min"`` (a bare name means ``max``, except ``latency_*``,
``macs``, ``params`` and ``train_time``, which mean ``min``); constraints like
``"latency_zcu102<=5"``.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: An evaluator maps a ``(n, stages, 4)`` choices array to metric name -> ``(n,)`` values.
Evaluator = Callable[[np.ndarray, Sequence[str]], Mapping[str, np.ndarray]]

_MINIMISED = re.compile(r"latency_.*|macs|params|true_macs|train_time")
_CONSTRAINT = re.compile(r"\s*([A-Za-z0-9_.\-]+)\s*(<=|>=)\s*([-+0-9.eE]+)\s*")


@dataclass(frozen=True)
class Objective:
    metric: str
    maximise: bool

    @classmethod
    def parse(cls, text: str) -> Objective:
        name, _, sense = text.partition(":")
        name = name.strip()
        if not name:
            raise ValueError(f"objective {text!r} has no metric name; e.g. 'val_top1:max'")
        if sense and sense not in ("max", "min"):
            raise ValueError(f"objective {text!r}: sense {sense!r} is not 'max' or 'min'")
        maximise = sense == "max" if sense else not _MINIMISED.fullmatch(name)
        return cls(name, maximise)

    def score(self, values: np.ndarray) -> np.ndarray:
        """Larger is better."""
        return values if self.maximise else -values

    def __str__(self) -> str:
        return f"{self.metric}:{'max' if self.maximise else 'min'}"


def check_objectives(objectives: Sequence[Objective]) -> None:
    """Refuse a metric given as more than one objective (``-o m -o m:min``), also through an
    alias (``-o val_top1 -o accuracy``)."""
    from anb.surrogates.benchmark import check_distinct

    check_distinct([o.metric for o in objectives], "objective metric",
                   [str(o) for o in objectives])


@dataclass(frozen=True)
class Constraint:
    metric: str
    upper: bool
    bound: float

    @classmethod
    def parse(cls, text: str) -> Constraint:
        match = _CONSTRAINT.fullmatch(text)
        if not match:
            raise ValueError(f"constraint {text!r} is malformed; expected '<metric><=<number>' "
                             "or '<metric>>=<number>', e.g. 'latency_zcu102<=5'")
        return cls(match.group(1), match.group(2) == "<=", float(match.group(3)))

    def satisfied(self, values: np.ndarray) -> np.ndarray:
        return values <= self.bound if self.upper else values >= self.bound

    def violation(self, values: np.ndarray) -> np.ndarray:
        """How far outside the bound (0 when satisfied)."""
        gap = values - self.bound if self.upper else self.bound - values
        return np.maximum(gap, 0.0)

    def __str__(self) -> str:
        return f"{self.metric}{'<=' if self.upper else '>='}{self.bound:g}"
