"""Vectorised sampling and mutation of architecture batches (raw choices arrays)."""
from __future__ import annotations

import numpy as np

from anb.searchspace.space import ANB_SPACE, SearchSpace


def random_choices(n: int, rng: np.random.Generator, space: SearchSpace = ANB_SPACE) -> np.ndarray:
    """``n`` uniform draws (with replacement) as a ``(n, stages, 4)`` array."""
    index = rng.integers(0, space.size(), size=n, dtype=np.int64)
    return space.choices_from_index(index)


def mutate(parents: np.ndarray, rng: np.random.Generator,
           space: SearchSpace = ANB_SPACE) -> np.ndarray:
    """Change exactly one choice of each parent to a different allowed value."""
    parents = np.asarray(parents, dtype=np.int64)
    children = parents.copy()
    n = len(parents)
    radices = np.array([spec.radices for spec in space.stages])  # (stages, 4)
    # only (stage, field) pairs with more than one value can change
    slots = np.argwhere(radices > 1)
    pick = slots[rng.integers(0, len(slots), size=n)]
    positions = space.ordinal(parents)
    for (stage, field) in np.unique(pick, axis=0):
        rows = np.nonzero((pick[:, 0] == stage) & (pick[:, 1] == field))[0]
        radix = radices[stage, field]
        shift = rng.integers(1, radix, size=rows.size)
        new_pos = (positions[rows, stage, field] + shift) % radix
        allowed = space.stages[stage].allowed(("e", "k", "l", "se")[field])
        table = np.array([int(v) for v in allowed])
        children[rows, stage, field] = table[new_pos]
    return children
