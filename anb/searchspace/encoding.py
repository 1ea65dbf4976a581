"""Vectorised encodings of architecture batches for surrogate models.

Every encoder takes anything :func:`to_choices` accepts (a choices array of the space, a list
of architectures / records / strings) and returns a float32 matrix with named columns. They are
written once on the :class:`~anb.searchspace.base.Space` interface:

- ``ordinal``: each variable's position in its allowed values (for MnasNet the benchmark's
  ``[b0_e, b0_k, b0_l, b0_se, ...]``: e 1/4/6 -> 0/1/2, k 3/5 -> 0/1, l -> l-1, se true -> 0).
- ``onehot``: one column per (variable, allowed value).
- ``features``: ordinal plus per-block analytic costs (log MACs, true MACs, params,
  activation traffic), per-block depth where depth varies, and totals: what makes device
  speed predictable.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from anb.searchspace.base import COST_NAMES, Space


def to_choices(archs: Any, space: Space) -> np.ndarray:
    """Coerce a batch (array, or sequence of architectures / records / strings) to choices."""
    return space.to_choices(archs)


def ordinal_names(space: Space) -> list[str]:
    return space.position_names()


def ordinal(archs: Any, space: Space) -> np.ndarray:
    """Each variable's position, ``(n, num_variables)`` float32."""
    return space.positions(to_choices(archs, space)).astype(np.float32)


def onehot_names(space: Space) -> list[str]:
    return [f"{name}={label}" for name, variable in zip(space.position_names(), space.variables,
                                                         strict=True)
            for label in (variable.labels or variable.values)]


def onehot(archs: Any, space: Space) -> np.ndarray:
    """One-hot of every choice, ``(n, sum of radices)`` float32."""
    positions = space.positions(to_choices(archs, space))
    blocks = [np.eye(variable.radix, dtype=np.float32)[positions[:, v]]
              for v, variable in enumerate(space.variables)]
    return np.concatenate(blocks, axis=1) if blocks else np.zeros((len(positions), 0), np.float32)


def feature_names(space: Space) -> list[str]:
    names = ordinal_names(space)
    blocks = space.block_names()
    for name in COST_NAMES:
        names += [f"log_{name}_{b}" for b in blocks]
    if space.variable_depth:
        names += [f"depth_{b}" for b in blocks]
    names += [f"log_{name}_total" for name in COST_NAMES]
    return names + (["depth_total"] if space.variable_depth else [])


def features(archs: Any, space: Space, resolution: int | None = None) -> np.ndarray:
    """Ordinal choices plus analytic per-block and total costs (logs), float32."""
    choices = to_choices(archs, space)
    table = space.cost_table(choices, resolution=resolution)
    parts = [ordinal(choices, space)]
    for name in COST_NAMES:
        parts.append(np.log1p(table.per_stage[name]))
    depth = space.depth(choices) if space.variable_depth else None
    if depth is not None:
        parts.append(depth)
    parts.append(np.stack([np.log1p(table.total(name)) for name in COST_NAMES], axis=1))
    if depth is not None:
        parts.append(depth.sum(axis=1, keepdims=True))
    return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts], axis=1)


ENCODERS: dict[str, tuple[Callable[..., np.ndarray], Callable[..., list[str]]]] = {
    "ordinal": (ordinal, ordinal_names),
    "onehot": (onehot, onehot_names),
    "features": (features, feature_names),
}


def encode(archs: Any, kind: str = "ordinal", *, space: Space) -> np.ndarray:
    """Encode a batch with the named encoder (``ordinal``, ``onehot`` or ``features``)."""
    return _encoder(kind)[0](archs, space=space)


def encoding_names(kind: str = "ordinal", *, space: Space) -> Sequence[str]:
    """Column names of the named encoder."""
    return _encoder(kind)[1](space)


def _encoder(kind: str):
    if kind not in ENCODERS:
        raise ValueError(f"unknown encoding {kind!r}; allowed encodings are {sorted(ENCODERS)}")
    return ENCODERS[kind]
