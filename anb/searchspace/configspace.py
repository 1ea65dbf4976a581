"""Export the space as a ``ConfigSpace.ConfigurationSpace`` and convert configurations back.

Hyperparameters are named like the dataset keys (``block{i}_{e,k,l,se}``): ordinal
hyperparameters for e, k, l (ordered values) and a categorical for se.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ConfigSpace import CategoricalHyperparameter, ConfigurationSpace, OrdinalHyperparameter

from anb.searchspace.arch import Arch
from anb.searchspace.space import ANB_SPACE, FIELDS, SearchSpace


def to_configspace(space: SearchSpace = ANB_SPACE, seed: int | None = None) -> ConfigurationSpace:
    """One hyperparameter per (stage, field) with the allowed values of the space."""
    cs = ConfigurationSpace(name=space.name, seed=seed)
    for i, spec in enumerate(space.stages):
        for field in FIELDS:
            values = spec.allowed(field)
            name = f"block{i}_{field}"
            if field == "se":
                cs.add(CategoricalHyperparameter(name, [bool(v) for v in values]))
            else:
                cs.add(OrdinalHyperparameter(name, [int(v) for v in values]))
    return cs


def from_configuration(config: Mapping[str, Any], space: SearchSpace = ANB_SPACE) -> Arch:
    """An :class:`Arch` from a ConfigSpace ``Configuration`` (or any mapping of its values)."""
    return Arch.from_anb_dict(dict(config), space)


def to_configuration(arch: Arch, cs: ConfigurationSpace):
    """The ``Configuration`` of ``cs`` holding ``arch``'s choices."""
    from ConfigSpace import Configuration

    return Configuration(cs, values=arch.to_anb_dict())
