"""Vectorised encodings of architecture batches for surrogate models.

Every encoder takes anything :func:`to_choices` accepts (a ``(n, num_stages, 4)`` array,
a list of Arch / dataset dicts / strings) and returns a float32 matrix with named columns.

- ``ordinal``: the benchmark's vector of choice positions ``[b0_e, b0_k, b0_l, b0_se, ...]``
  (e 1/4/6 -> 0/1/2, k 3/5 -> 0/1, l -> l-1, se true -> 0, false -> 1).
- ``onehot``: one column per (stage, field, allowed value).
- ``features``: ordinal plus per-stage analytic costs (log MACs, true MACs, params,
  activation traffic), per-stage depth and totals: what makes device speed predictable.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from anb.searchspace.arch import Arch, as_arch
from anb.searchspace.counting import COST_NAMES, cost_table
from anb.searchspace.space import ANB_SPACE, FIELDS, SearchSpace


def to_choices(archs: Any, space: SearchSpace = ANB_SPACE) -> np.ndarray:
    """Coerce a batch (array, or sequence of Arch / dicts / strings) to raw choices."""
    if isinstance(archs, np.ndarray):
        choices = archs.astype(np.int64, copy=False)
        space.ordinal(choices)
        return choices
    if isinstance(archs, (Arch, str, dict)):
        archs = [archs]
    rows = [as_arch(a, space).to_choices() for a in archs]
    if not rows:
        return np.zeros((0, space.num_stages, 4), dtype=np.int64)
    return np.stack(rows)


def ordinal_names(space: SearchSpace = ANB_SPACE) -> list[str]:
    return [f"b{s}_{f}" for s in range(space.num_stages) for f in FIELDS]


def ordinal(archs: Any, space: SearchSpace = ANB_SPACE) -> np.ndarray:
    """The benchmark's ordinal vector, ``(n, 4 * num_stages)`` float32."""
    choices = to_choices(archs, space)
    return space.ordinal(choices).reshape(len(choices), -1).astype(np.float32)


def onehot_names(space: SearchSpace = ANB_SPACE) -> list[str]:
    return [
        f"b{s}_{f}={v}"
        for s, spec in enumerate(space.stages)
        for f in FIELDS
        for v in spec.allowed(f)
    ]


def onehot(archs: Any, space: SearchSpace = ANB_SPACE) -> np.ndarray:
    """One-hot of every choice, ``(n, sum of radices)`` float32."""
    positions = space.ordinal(to_choices(archs, space))
    blocks = []
    for s, spec in enumerate(space.stages):
        for f, radix in enumerate(spec.radices):
            blocks.append(np.eye(radix, dtype=np.float32)[positions[:, s, f]])
    return np.concatenate(blocks, axis=1) if blocks else np.zeros((len(positions), 0), np.float32)


def feature_names(space: SearchSpace = ANB_SPACE) -> list[str]:
    names = ordinal_names(space)
    for name in COST_NAMES:
        names += [f"log_{name}_s{s}" for s in range(space.num_stages)]
    names += [f"depth_s{s}" for s in range(space.num_stages)]
    names += [f"log_{name}_total" for name in COST_NAMES] + ["depth_total"]
    return names


def features(archs: Any, space: SearchSpace = ANB_SPACE, resolution: int = 224) -> np.ndarray:
    """Ordinal choices plus analytic per-stage and total costs (logs), float32."""
    choices = to_choices(archs, space)
    table = cost_table(choices, space, resolution=resolution)
    parts = [ordinal(choices, space)]
    for name in COST_NAMES:
        parts.append(np.log1p(table.per_stage[name]))
    depth = choices[:, :, 2]
    parts.append(depth)
    parts.append(np.stack([np.log1p(table.total(name)) for name in COST_NAMES], axis=1))
    parts.append(depth.sum(axis=1, keepdims=True))
    return np.concatenate([p.astype(np.float32) for p in parts], axis=1)


ENCODERS: dict[str, tuple[Callable[..., np.ndarray], Callable[..., list[str]]]] = {
    "ordinal": (ordinal, ordinal_names),
    "onehot": (onehot, onehot_names),
    "features": (features, feature_names),
}


def encode(archs: Any, kind: str = "ordinal", space: SearchSpace = ANB_SPACE) -> np.ndarray:
    """Encode a batch with the named encoder (``ordinal``, ``onehot`` or ``features``)."""
    return _encoder(kind)[0](archs, space=space)


def encoding_names(kind: str = "ordinal", space: SearchSpace = ANB_SPACE) -> Sequence[str]:
    """Column names of the named encoder."""
    return _encoder(kind)[1](space)


def _encoder(kind: str):
    if kind not in ENCODERS:
        raise ValueError(f"unknown encoding {kind!r}; allowed encodings are {sorted(ENCODERS)}")
    return ENCODERS[kind]
