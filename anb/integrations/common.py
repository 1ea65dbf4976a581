"""What both adapters share: a space's variables as plain value lists, configurations back to
architectures, the benchmark's metrics with their senses, and constraints."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anb.nas.objectives import Constraint, Objective
from anb.searchspace.base import Space


@dataclass(frozen=True)
class Domain:
    """One decision variable as a tool sees it: its name, its values (the labels of a named
    variable, else its numbers) and whether they are ordered numbers."""

    name: str
    values: tuple[Any, ...]
    ordered: bool


def domains(space: Space) -> list[Domain]:
    """One :class:`Domain` per variable of ``space``, in the order of its positions."""
    return [Domain(v.name, tuple(v.labels), False) if v.labels
            else Domain(v.name, tuple(int(x) for x in v.values), True)
            for v in space.variables]


def to_choices(configs: Sequence[Mapping[str, Any]], space: Space) -> np.ndarray:
    """The choices array of configurations (a value per variable; a variable left out, as a
    conditional one the tool switched off, takes its first value; the space canonicalises
    inactive ones). A missing name or a value outside a domain is an error naming it."""
    doms = domains(space)
    positions = np.zeros((len(configs), len(doms)), dtype=np.int64)
    for row, config in enumerate(configs):
        unknown = sorted(set(config) - {d.name for d in doms})
        if unknown:
            raise ValueError(f"configuration has unknown variable(s) {unknown}; space "
                             f"{space.name!r} has {[d.name for d in doms][:6]}...")
        for col, dom in enumerate(doms):
            if dom.name not in config:
                continue
            value = config[dom.name]
            if value not in dom.values:
                raise ValueError(f"variable {dom.name!r} has value {value!r}; allowed: "
                                 f"{list(dom.values)}")
            positions[row, col] = dom.values.index(value)
    return space.from_positions(positions)


def maximised(metric: str) -> bool:
    """Whether larger is better for ``metric`` (anb's convention: latency, cost, size and
    ``train_time`` are minimised, accuracy and throughput maximised)."""
    return Objective.parse(metric).maximise


def parse_constraints(given: Sequence[str | Constraint], metrics: Sequence[str]
                      ) -> list[Constraint]:
    """Parse ``"latency_zcu102<=5"``-style constraints on the benchmark's metrics."""
    out = [c if isinstance(c, Constraint) else Constraint.parse(c) for c in given]
    for c in out:
        if c.metric not in metrics:
            raise ValueError(f"constraint {c} names metric {c.metric!r}; this benchmark has "
                             f"{list(metrics)}")
    return out


def check_metrics(wanted: Sequence[str] | None, metrics: Sequence[str]) -> list[str]:
    """``wanted`` (default: all the benchmark's metrics), each one of ``metrics``."""
    if wanted is None:
        return list(metrics)
    unknown = [m for m in wanted if m not in metrics]
    if unknown or not wanted:
        raise ValueError(f"unknown objective(s) {unknown}; this benchmark has {list(metrics)}")
    from anb.surrogates.benchmark import check_distinct

    check_distinct(wanted, "objective metric")
    return list(wanted)
