"""Seeded, shardable sampling without replacement.

The stream of a seed is a keyed pseudo-random permutation of the space's index range (a
Feistel network with cycle walking), so it never repeats an architecture. Shard ``(i, k)``
takes stream positions ``i, i + k, i + 2k, ...``: shards of one seed are disjoint and,
interleaved, give back the unsharded stream. Everything is integer arithmetic on
``uint64`` seeded by SHA-256, hence identical on every machine and Python version.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from anb.searchspace.base import Space

_ROUNDS = 6
_ID_RE = re.compile(r"[0-9a-f]{16}")
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
#: beyond this many architectures indices are Python ints (numpy ``object`` arrays)
BIG_SPACE = 2**62


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class Permutation:
    """A keyed bijection on ``range(size)``, evaluated on numpy arrays.

    Spaces beyond 2**62 architectures (FBNet, OFA) get Python-int (``object``) arrays out;
    the two Feistel halves stay ``uint64`` either way, so small spaces are unchanged.
    """

    def __init__(self, size: int, seed: int):
        if size < 2:
            raise ValueError(f"permutation size must be >= 2, got {size}")
        self.size = size
        self.big = size > BIG_SPACE
        self.half = max(1, (int(size - 1).bit_length() + 1) // 2)
        digest = hashlib.sha256(f"anb-sampler:{int(seed)}".encode()).digest()
        self.keys = [
            np.uint64(int.from_bytes(hashlib.sha256(digest + bytes([r])).digest()[:8], "little"))
            for r in range(_ROUNDS)
        ]

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        half = np.uint64(self.half)
        mask = np.uint64((1 << self.half) - 1)
        if self.big:
            left = (x >> self.half).astype(np.uint64)
            right = (x & ((1 << self.half) - 1)).astype(np.uint64)
        else:
            left, right = x >> half, x & mask
        for key in self.keys:
            left, right = right, left ^ (_mix(right ^ key) & mask)
        if self.big:
            return (left.astype(object) << self.half) | right.astype(object)
        return (left << half) | right

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        x = np.asarray(positions, dtype=object if self.big else np.uint64)
        out = self._feistel(x)
        limit = self.size if self.big else np.uint64(self.size)
        outside = np.asarray(out >= limit, dtype=bool)
        while outside.any():  # cycle walking: stays a bijection on range(size)
            out[outside] = self._feistel(out[outside])
            outside = np.asarray(out >= limit, dtype=bool)
        return out if self.big else out.astype(np.int64)


def parse_shard(shard: tuple[int, int] | str | None) -> tuple[int, int]:
    """Accept ``(i, k)`` or ``"i/k"``; validate ``0 <= i < k``."""
    if shard is None:
        return 0, 1
    if isinstance(shard, str):
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", shard)
        if not match:
            raise ValueError(f"shard {shard!r} is malformed; expected 'i/k' like '0/4'")
        shard = (int(match.group(1)), int(match.group(2)))
    i, k = shard
    if k < 1 or not 0 <= i < k:
        raise ValueError(f"shard ({i}, {k}) is invalid; need k >= 1 and 0 <= i < k")
    return int(i), int(k)


def _excluded_keys(exclude: Iterable[Any], space: Space) -> tuple[np.ndarray, set[str]]:
    archs, ids = [], set()
    for item in exclude:
        if isinstance(item, str) and _ID_RE.fullmatch(item):
            ids.add(item)
        else:
            archs.append(item)
    indices: Any = space.index_from_choices(space.to_choices(archs)) if archs else []
    return np.asarray(indices, dtype=object if space.size() > BIG_SPACE else np.int64), ids


class Sampler:
    """Deterministic uniform sampling without replacement from a space.

    ``sample_indices(n, shard=(i, k), exclude=...)`` returns the first ``n`` architecture
    indices of shard ``i`` of ``k`` of this seed's stream, skipping excluded architectures
    (given as Arch, strings, dicts or 16-hex-digit ids).
    """

    def __init__(self, seed: int = 0, *, space: Space | str, chunk: int = 65536):
        self.seed = int(seed)
        if isinstance(space, str):  # a registered name (unknown ones are refused, named)
            from anb.searchspace.registry import get_space

            space = get_space(space)
        if not isinstance(space, Space):
            raise TypeError(f"space {space!r} is not a search space; allowed: a Space or the "
                            "name of a registered one (`anb space list`)")
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk {chunk!r} is invalid; allowed: a positive integer")
        self.space = space
        self.chunk = chunk
        self.permutation = Permutation(space.size(), self.seed)

    def stream(self, start: int, stop: int) -> np.ndarray:
        """Architecture indices at stream positions ``start..stop-1`` (unsharded)."""
        stop = min(stop, self.space.size())
        return self.permutation(np.arange(start, stop, dtype=np.uint64))

    def shard_size(self, shard: tuple[int, int] | str | None = None) -> int:
        """How many architectures shard ``shard`` of the stream holds."""
        i, k = parse_shard(shard)
        return max(0, (self.space.size() - i + k - 1) // k)

    def check_size(self, n: int, shard: tuple[int, int] | str | None = None) -> None:
        """Refuse ``n`` below 0 or beyond what the shard holds (the stream never repeats)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        available = self.shard_size(shard)
        if n > available:
            i, k = parse_shard(shard)
            part = "" if k == 1 else f", {available:,} of them in shard {i}/{k}"
            raise ValueError(f"cannot sample {n:,} architectures: the space {self.space.name!r} "
                             f"holds {self.space.size():,}{part}, and sampling never repeats one")

    def iter_indices(
        self,
        n: int,
        shard: tuple[int, int] | str | None = None,
        exclude: Iterable[Any] = (),
    ) -> Iterator[np.ndarray]:
        """:meth:`sample_indices` in chunks of at most ``chunk`` indices (bounded memory)."""
        self.check_size(n, shard)
        i, k = parse_shard(shard)
        excluded_index, excluded_ids = _excluded_keys(exclude, self.space)
        have, step = 0, 0
        total = self.space.size()
        while have < n:
            first = i + step * self.chunk * k
            if first >= total:
                break
            positions = np.arange(first, min(first + self.chunk * k, total), k, dtype=np.uint64)
            candidates = self.permutation(positions)
            if excluded_index.size:
                excluded = set(excluded_index.tolist())
                candidates = candidates[[c not in excluded for c in candidates.tolist()]]
            if excluded_ids:
                keep = [a.id not in excluded_ids for a in self._archs(candidates)]
                candidates = candidates[np.asarray(keep, dtype=bool)]
            candidates = candidates[: n - have]
            have += candidates.size
            step += 1
            if candidates.size:
                yield candidates

    def sample_indices(
        self,
        n: int,
        shard: tuple[int, int] | str | None = None,
        exclude: Iterable[Any] = (),
    ) -> np.ndarray:
        taken = list(self.iter_indices(n, shard, exclude))
        return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)

    def iter_sample(self, n: int, **kwargs: Any) -> Iterator[Any]:
        """Like :meth:`sample`, one architecture at a time (bounded memory for any ``n``)."""
        for indices in self.iter_indices(n, **kwargs):
            yield from self._archs(indices)

    def sample_choices(self, n: int, **kwargs: Any) -> np.ndarray:
        """Like :meth:`sample_indices`, as a choices array of the space."""
        return self.space.choices_from_index(self.sample_indices(n, **kwargs))

    def sample(self, n: int, **kwargs: Any) -> list[Any]:
        """Like :meth:`sample_indices`, as architecture objects of the space."""
        return self._archs(self.sample_indices(n, **kwargs))

    def _archs(self, indices: np.ndarray) -> list[Any]:
        return self.space.archs_from_choices(self.space.choices_from_index(indices))


def sample(
    n: int,
    seed: int = 0,
    shard: tuple[int, int] | str | None = None,
    exclude: Iterable[Any] = (),
    *, space: Space,
) -> list[Any]:
    """The first ``n`` architectures of shard ``shard`` of seed ``seed``'s stream."""
    return Sampler(seed, space=space).sample(n, shard=shard, exclude=exclude)
