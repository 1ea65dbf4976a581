"""Vectorised sampling and mutation of architecture batches (choices arrays of any space)."""
from __future__ import annotations

import numpy as np

from anb.searchspace.base import Space


def random_choices(n: int, rng: np.random.Generator, space: Space) -> np.ndarray:
    """``n`` uniform draws (with replacement) over the space's distinct architectures."""
    size = space.size()
    if space.index_dtype() is object:
        index = np.array([int.from_bytes(rng.bytes(16), "little") % size for _ in range(n)],
                         dtype=object)
    else:
        index = rng.integers(0, size, size=n, dtype=np.int64)
    return space.choices_from_index(index)


def mutate(parents: np.ndarray, rng: np.random.Generator, space: Space) -> np.ndarray:
    """Change exactly one variable in effect of each parent to a different allowed value."""
    parents = np.asarray(parents, dtype=np.int64)
    positions = space.positions(parents)
    radices = space.radices()
    # only variables in effect with more than one value can change
    free = space.active(positions) & (radices > 1)[None, :]
    if not free.any(axis=1).all():
        raise ValueError(f"{space.name}: an architecture has no variable that can change")
    if (free == free[:1]).all():  # the same variables are free in every row
        slots = np.flatnonzero(free[0])
        pick = slots[rng.integers(0, len(slots), size=len(parents))]
    else:
        cumulative = (free / free.sum(axis=1, keepdims=True)).cumsum(axis=1)
        pick = (cumulative > rng.random(len(parents))[:, None]).argmax(axis=1)
    for variable in np.unique(pick):
        rows = np.nonzero(pick == variable)[0]
        radix = radices[variable]
        shift = rng.integers(1, radix, size=rows.size)
        positions[rows, variable] = (positions[rows, variable] + shift) % radix
    return space.from_positions(positions)


def crossover(first: np.ndarray, second: np.ndarray, rng: np.random.Generator,
              space: Space) -> np.ndarray:
    """Uniform crossover: each variable from either parent (result canonicalised)."""
    a, b = space.positions(first), space.positions(second)
    take = rng.random(a.shape) < 0.5
    return space.from_positions(np.where(take, a, b))
