"""Export a space as a ``ConfigSpace.ConfigurationSpace`` and convert configurations back.

One hyperparameter per decision variable, named like the record keys: ordinal for numeric
values (MnasNet's e, k, l), categorical for named ones (MnasNet's se as a bool, a cell space's
op names); a conditional space's conditions become ConfigSpace ``InCondition``s.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ConfigSpace import (
    CategoricalHyperparameter,
    ConfigurationSpace,
    InCondition,
    OrdinalHyperparameter,
)

from anb.searchspace.base import Space
from anb.searchspace.space import FIELDS, SearchSpace


def to_configspace(space: Space, seed: int | None = None) -> ConfigurationSpace:
    """One hyperparameter per variable with the allowed values of the space."""
    cs = ConfigurationSpace(name=space.name, seed=seed)
    if isinstance(space, SearchSpace):
        for i, spec in enumerate(space.stages):
            for field in FIELDS:
                values = spec.allowed(field)
                name = f"block{i}_{field}"
                if field == "se":
                    cs.add(CategoricalHyperparameter(name, [bool(v) for v in values]))
                else:
                    cs.add(OrdinalHyperparameter(name, [int(v) for v in values]))
        return cs
    params = {v.name: CategoricalHyperparameter(v.name, list(v.labels)) if v.labels
              else OrdinalHyperparameter(v.name, [int(x) for x in v.values])
              for v in space.variables}
    cs.add(list(params.values()))
    cs.add([InCondition(params[child], params[parent], list(values))
            for child, parent, values in space.conditions()])
    return cs


def from_configuration(config: Mapping[str, Any], space: Space) -> Any:
    """The architecture of a ConfigSpace ``Configuration`` (or any mapping of its values);
    variables a condition switched off take their first value."""
    values = dict(config)
    if not isinstance(space, SearchSpace):
        for v in space.variables:
            values.setdefault(v.name, (v.labels or v.values)[0])
    return space.arch(values)


def to_configuration(arch: Any, cs: ConfigurationSpace, space: Space) -> Any:
    """The ``Configuration`` of ``cs`` holding ``arch``'s choices (inactive variables left out)."""
    from ConfigSpace import Configuration

    record = space.to_record(arch)
    if not isinstance(space, SearchSpace):
        active = space.active(space.positions(space.to_choices([arch])))[0]
        record = {v.name: record[v.name] for v, on in zip(space.variables, active, strict=True)
                  if on}
    return Configuration(cs, values=record)
