"""Many tree tables walked at once in numpy: the query install's XGBoost predictor.

Calling a native booster costs tens of microseconds of fixed overhead, paid once per member on
every query, so small batches take this path even where xgboost is installed (large ones go to
the native predictor there, every batch to this path where it is not). It only reads
:class:`~anb.surrogates.compiled.TreeTable` s, so it decides nothing a fit stores (it is not
part of the packaged benchmark's fitting-code key).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: compiled imports this module
    from anb.surrogates.compiled import TreeTable

#: Most rows walked at once (a smaller batch: rounded up to a multiple of 64, one word of
#: packed bits per split and tree). The block's bit matrix (splits x rows) and leaf positions
#: (trees x rows) stay in cache for the packaged forests (8,146 splits, 6,967 trees: 2 MB of
#: comparisons, 1.8 MB of positions); 128, 256, 512 and 1,024 rows were within the noise of
#: each other on 2 shared cores (the packaged 10k walk 0.46-0.56 s CPU).
ROWS = 256
#: Batches up to this many rows walk each tree's nodes directly (a few gathers per level):
#: packing bits pays from about a word of rows (one row: 0.2 ms against 1.4 ms).
TINY = 8
#: Levels whose path is chosen by bitwise selects over whole rows of packed split bits
#: (2^level - 1 selects each); deeper levels gather bit by bit, which is cheaper from about
#: this depth on.
SELECT_LEVELS = 4
#: Deepest complete layout :class:`PackedForest` builds (2^12 leaves per tree).
MAX_COMPLETE_LEAVES = 1 << 12
#: Forests at most this deep sum their trees two at a time from one table per pair (a pair's
#: leaf code fits a byte: 2^(2 depth) values).
PAIR_DEPTH = 4


class PackedForest:
    """The trees of many tables in one table; :meth:`predict` returns ``(n, n_tables)``.

    Each tree is laid out as a complete binary tree of the deepest tree's depth (a leaf above
    that depth becomes a split over copies of itself), so a node's children are ``2i + 1`` and
    ``2i + 2``. A block of :data:`ROWS` rows is walked feature-major: every distinct split
    (feature, threshold) of the forest is compared once per row, and the go-right bits are
    packed 64 rows to a word, one row of words per split. The first :data:`SELECT_LEVELS`
    levels pick each tree's path from whole rows of those words with bitwise selects; deeper
    levels gather the bits element by element. The leaf positions then index the leaf values:
    in forests up to :data:`PAIR_DEPTH` deep, two trees of one booster at a time, from a table
    of the pair's summed leaves (half the gathers; the sums differ from tree-by-tree ones by a
    rounding, under 1e-15 relative). Each booster's trees are summed in their order. Batches
    of at most :data:`TINY` rows walk each tree's nodes directly instead.
    ``benchmarks/packaged_load.py`` times it against one numpy pass over the same arrays."""

    def __init__(self, tables: Sequence[TreeTable]) -> None:
        self.depth = max((t.depth for t in tables), default=0)
        if 2 ** self.depth > MAX_COMPLETE_LEAVES:
            raise ValueError(f"trees of depth {self.depth} cannot be packed (at most "
                             f"{MAX_COMPLETE_LEAVES.bit_length() - 1} levels)")
        layouts = [_complete(t, self.depth) for t in tables]
        inner, leaves = 2 ** self.depth - 1, 2 ** self.depth
        self.n_trees = sum(t.n_trees for t in tables)
        self.n_boosters = len(tables)
        self.base = np.array([t.base for t in tables])
        feat = _cat([lay[0] for lay in layouts], "int32").reshape(self.n_trees, inner)
        thr = _cat([lay[1] for lay in layouts], "float32").reshape(self.n_trees, inner)
        key = (feat.astype(np.uint64) << np.uint64(32)) | thr.view(np.uint32).astype(np.uint64)
        unique, split = np.unique(key.ravel(), return_inverse=True)
        #: Each distinct split's threshold, ``(splits, 1)``: a row goes right unless
        #: x < threshold (NaN goes right). The splits are sorted by feature.
        self.split_thr = (unique & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(
            np.float32)[:, None]
        #: Each distinct split's feature.
        self.split_feat = (unique >> np.uint64(32)).astype(np.intp)
        features, first = np.unique(self.split_feat, return_index=True)
        bounds = np.append(first, len(unique)).tolist()
        #: ``(feature, first split, end)`` of each feature some split reads.
        self.feature_splits = list(zip(features.tolist(), bounds[:-1], bounds[1:], strict=True))
        split = split.reshape(self.n_trees, inner).astype(np.intp)
        #: Per level, ``(2^level, trees)``: the split of each node of that level, left to right.
        self.level_splits = [np.ascontiguousarray(split[:, 2 ** d - 1:2 ** (d + 1) - 1].T)
                             for d in range(self.depth)]
        self.select_levels = min(self.depth, SELECT_LEVELS)
        values = _cat([lay[2] for lay in layouts], "float64").reshape(self.n_trees, leaves)
        counts = np.array([t.n_trees for t in tables], dtype=np.intp)
        self.paired = self.depth <= PAIR_DEPTH
        if self.paired:
            first_tree, second_tree, counts = _pairs(counts)
            #: Trees summed together (a booster's odd last tree with itself).
            self.pair = (first_tree, second_tree)
            alone = (first_tree == second_tree)[:, None]  # + 0.0: its own leaf, exactly
            second_values = np.where(alone, 0.0, values[second_tree])
            values = (values[first_tree][:, :, None] + second_values[:, None, :]).reshape(
                len(first_tree), leaves * leaves)
        #: The leaf values (of a pair's leaf codes when paired), one row per tree or pair.
        self.value = values.ravel()
        self.leaf_offset = (np.arange(len(values), dtype=np.intp) * values.shape[1])[:, None]
        ends = np.cumsum(counts)
        #: Rows of :attr:`value` (trees or pairs) of each booster.
        self.booster_rows = list(zip((ends - counts).tolist(), ends.tolist(), strict=True))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Raw margin of every table for every row, ``(n, n_tables)`` float64."""
        X = np.asarray(X, dtype=np.float32)
        out = np.zeros((len(X), self.n_boosters))
        if self.n_trees and len(X) <= TINY:
            position = self._paths(X)
            if self.paired:
                position = (position[self.pair[0]] << self.depth) | position[self.pair[1]]
            self._gather(position, out)
        elif self.n_trees:
            width = min(ROWS, -(-len(X) // 64) * 64)  # a small batch: one word of rows
            for start in range(0, len(X), width):
                block = X[start:start + width]
                columns = np.zeros((X.shape[1], width), dtype=np.float32)
                columns[:, :len(block)] = block.T
                self._sum_leaves(columns, out[start:start + width])
        return out + self.base

    def _sum_leaves(self, columns: np.ndarray, out: np.ndarray) -> None:
        """Each booster's sum of leaf values for the rows of ``columns`` (features x a multiple
        of 64 rows), into ``out`` (its first rows)."""
        width = columns.shape[1]
        left = np.empty((len(self.split_thr), width), dtype=bool)
        for feature, first, end in self.feature_splits:
            np.less(columns[feature], self.split_thr[first:end], out=left[first:end])
        right = np.packbits(left, axis=1, bitorder="little")
        np.invert(right, out=right)
        words = right.view(np.uint64)  # (splits, width / 64): bit i of word j is row 64 j + i
        path: list[np.ndarray] = []  # the go-right bits of each level so far, (trees, words)
        for level in range(self.select_levels):
            nodes = [np.take(words, ids, axis=0) for ids in self.level_splits[level]]
            for bit in reversed(path):  # pairs of nodes differ in the latest bit first
                nodes = [a ^ (bit & (a ^ b)) for a, b in zip(nodes[::2], nodes[1::2],
                                                            strict=True)]
            path.append(nodes[0])
        # the node's place within its level, a byte per tree and row; shifted eight bytes at
        # a time (no bit crosses a byte: a position has at most 2 PAIR_DEPTH bits)
        position = np.zeros((self.n_trees, width), dtype=np.uint8)
        eights = position.view(np.uint64)
        for bit in path:
            eights <<= np.uint64(1)
            eights |= np.unpackbits(bit.view(np.uint8), axis=1,
                                    bitorder="little").view(np.uint64)
        if self.depth > self.select_levels:
            position = self._walk(position.astype(np.intp), ~left)
        elif self.paired:
            first, second = position[self.pair[0]], position[self.pair[1]]
            eights = first.view(np.uint64)
            eights <<= np.uint64(self.depth)
            eights |= second.view(np.uint64)
            position = first
        self._gather(position, out)

    def _gather(self, position: np.ndarray, out: np.ndarray) -> None:
        """Each booster's sum of the leaf values at ``position`` (leaf or pair code per tree or
        pair and row), into ``out`` (as many rows as it has)."""
        n = len(out)
        for booster, (first, end) in enumerate(self.booster_rows):
            index = position[first:end, :n] + self.leaf_offset[first:end]
            np.take(self.value, index).sum(axis=0, out=out[:, booster])

    def _paths(self, X: np.ndarray) -> np.ndarray:
        """Each tree's leaf position for each row of a small batch, ``(trees, rows)``: its
        nodes walked level by level (right unless x < threshold, as the packed walk)."""
        position = np.zeros((self.n_trees, len(X)), dtype=np.intp)
        tree = np.arange(self.n_trees, dtype=np.intp)[:, None]
        row = np.arange(len(X))
        for level in range(self.depth):
            split = np.take(self.level_splits[level], position * self.n_trees + tree)
            position <<= 1
            position |= ~(X[row, self.split_feat[split]] < self.split_thr[split, 0])
        return position

    def _walk(self, position: np.ndarray, right: np.ndarray) -> np.ndarray:
        """The levels below :data:`SELECT_LEVELS`, one bit gathered per tree and row."""
        flat_bits = right.view(np.uint8).ravel()
        width = right.shape[1]
        column = np.arange(width, dtype=np.intp)
        tree = np.arange(self.n_trees, dtype=np.intp)[:, None]
        for level in range(self.select_levels, self.depth):
            split = np.take(self.level_splits[level], position * self.n_trees + tree)
            position <<= 1
            position |= np.take(flat_bits, split * width + column)
        return position


def _pairs(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trees summed two at a time: within each booster (``counts`` trees each, in order)
    trees ``2i`` and ``2i + 1``, an odd last one with itself; and the pairs per booster."""
    first, second = [], []
    start = 0
    for count in counts.tolist():
        trees = np.arange(start, start + count)
        first.append(trees[::2])
        second.append(np.append(trees[1::2], trees[-1:]) if count % 2 else trees[1::2])
        start += count
    return _cat(first, "intp"), _cat(second, "intp"), (counts + 1) // 2


def _complete(table: TreeTable, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``table``'s trees as complete trees of ``depth``: split features and thresholds
    ``(trees * (2^depth - 1),)`` and leaf values ``(trees * 2^depth,)`` in heap order. Built
    level by level for all trees at once: a leaf points to itself, so above the bottom it
    fills both its children's places (a split that always goes left, x < inf)."""
    feat, thr = [], []
    nodes = table.roots.astype(np.intp)[:, None]  # (trees, 2^level): the table's node at each
    for _ in range(depth):
        leaf = table.left[nodes] == nodes
        feat.append(np.where(leaf, 0, table.feat[nodes]))
        thr.append(np.where(leaf, np.float32(np.inf), table.thr[nodes]))
        nodes = np.stack([table.left[nodes], table.right[nodes]], axis=2).reshape(
            len(nodes), 2 * nodes.shape[1])
    value = table.value[nodes].astype(np.float64)
    if not depth:
        return np.zeros(0, np.int32), np.zeros(0, np.float32), value.ravel()
    return (np.concatenate(feat, axis=1).astype(np.int32).ravel(),
            np.concatenate(thr, axis=1).astype(np.float32).ravel(), value.ravel())


def _cat(parts: list[np.ndarray], dtype: str) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)
