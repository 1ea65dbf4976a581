"""XGBoost members as numpy node tables: prediction without xgboost, and fast small batches.

A :class:`TreeTable` is one booster's trees read from XGBoost's own JSON model (no code) into
flat arrays, stored as ``.npz`` (``allow_pickle=False``): the query install predicts with it,
and a packaged benchmark ships its members in that form. :class:`PackedForest` walks the trees
of many tables at once, level by level: calling a native booster costs tens of microseconds of
fixed overhead, paid once per member on every query, so small batches take this path even
where xgboost is installed (large ones go to the native predictor there, every batch to this
path where it is not).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from anb.io import atomic_write

#: Objectives whose prediction is the raw margin (the sum of leaves plus the base score).
IDENTITY_OBJECTIVES = ("reg:squarederror", "reg:absoluteerror", "reg:pseudohubererror")
#: Rows x trees walked at once (rows within MIN_ROWS..MAX_ROWS): the block's bit matrices
#: stay in cache.
BLOCK = 1 << 18
MIN_ROWS, MAX_ROWS = 8, 4096
#: Levels whose path is chosen by bitwise selects over whole rows of split bits (2^level - 1
#: selects each); deeper levels gather bit by bit, which is cheaper from about this depth on.
SELECT_LEVELS = 4
#: Deepest complete layout :class:`PackedForest` builds (2^12 leaves per tree).
MAX_COMPLETE_LEAVES = 1 << 12
_ARRAYS = ("feat", "thr", "left", "right", "value", "roots")


@dataclass(frozen=True)
class TreeTable:
    """The trees of one booster as node arrays; child indices are positions in the table and
    leaves point to themselves (so walking past a leaf is a no-op)."""

    feat: np.ndarray   # split feature (0 at leaves), int32
    thr: np.ndarray    # split threshold: go left when x < thr, float32
    left: np.ndarray   # int32
    right: np.ndarray  # int32
    value: np.ndarray  # leaf value (0 at inner nodes), float32
    roots: np.ndarray  # first node of each tree, int32
    base: float        # base score added to the sum of leaves
    depth: int         # steps from a root to its deepest leaf
    n_features: int

    @classmethod
    def from_xgboost_json(cls, raw: bytes | str) -> TreeTable:
        """Read an XGBoost JSON model (``Booster.save_raw("json")`` or a saved ``.json``).

        Raises ValueError for models this table cannot reproduce (categorical splits,
        several outputs, a non-identity objective)."""
        learner = json.loads(raw)["learner"]
        objective = learner["objective"]["name"]
        if objective not in IDENTITY_OBJECTIVES:
            raise ValueError(f"XGBoost objective {objective!r} cannot be compiled; allowed: "
                             f"{list(IDENTITY_OBJECTIVES)}")
        param = learner["learner_model_param"]
        if int(param.get("num_target", "1")) != 1 or int(param.get("num_class", "0")) != 0:
            raise ValueError("XGBoost models with several outputs cannot be compiled")
        feat, thr, left, right, value, roots = [], [], [], [], [], []
        offset, depth = 0, 0
        for tree in learner["gradient_booster"]["model"]["trees"]:
            if any(tree.get("split_type", [])):
                raise ValueError("XGBoost models with categorical splits cannot be compiled")
            lc = np.asarray(tree["left_children"], dtype=np.int64)
            rc = np.asarray(tree["right_children"], dtype=np.int64)
            leaf = lc < 0
            own = np.arange(len(lc))
            cond = np.asarray(tree["split_conditions"], dtype=np.float32)
            left.append(np.where(leaf, own, lc) + offset)
            right.append(np.where(leaf, own, rc) + offset)
            feat.append(np.where(leaf, 0, np.asarray(tree["split_indices"], dtype=np.int64)))
            thr.append(cond)
            value.append(np.where(leaf, cond, np.float32(0)))
            roots.append(offset)
            depth = max(depth, _depth(lc, rc))
            offset += len(lc)
        return cls(feat=_cat(feat, "int32"), thr=_cat(thr, "float32"),
                   left=_cat(left, "int32"), right=_cat(right, "int32"),
                   value=_cat(value, "float32"), roots=np.asarray(roots, dtype=np.int32),
                   base=float(param["base_score"].strip("[]")), depth=depth,
                   n_features=int(param["num_feature"]))

    # ------------------------------------------------------------ persistence
    def arrays(self) -> dict[str, np.ndarray]:
        """The table as named arrays (what :meth:`save` writes)."""
        return {**{k: getattr(self, k) for k in _ARRAYS},
                "scalars": np.array([self.base, self.depth, self.n_features], dtype=np.float64)}

    def save(self, path: Path) -> None:
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as handle:
                np.savez(handle, **self.arrays())  # type: ignore[arg-type]  # plain arrays

        atomic_write(path, write)

    @classmethod
    def load(cls, path: Path) -> TreeTable:
        """Read a table written by :meth:`save` (no pickle); ValueError if it is malformed."""
        with np.load(path, allow_pickle=False) as data:
            missing = sorted(set(_ARRAYS + ("scalars",)) - set(data.files))
            if missing:
                raise ValueError(f"{str(path)!r} is not a tree table: no {missing}")
            arrays = {k: data[k] for k in _ARRAYS}
            base, depth, n_features = data["scalars"].tolist()
        n = len(arrays["feat"])
        shapes = {len(arrays[k]) for k in ("thr", "left", "right", "value")}
        links = np.concatenate([arrays["left"], arrays["right"], arrays["roots"]])
        if shapes != {n} or (links.size and not (0 <= links.min() and links.max() < n)) \
                or (n and not 0 <= arrays["feat"].min() <= arrays["feat"].max() < n_features):
            raise ValueError(f"{str(path)!r} is not a valid tree table (inconsistent arrays)")
        return cls(**arrays, base=float(base), depth=int(depth), n_features=int(n_features))

    # ------------------------------------------------------------ prediction
    @property
    def n_trees(self) -> int:
        return len(self.roots)

    @cached_property
    def _packed(self) -> PackedForest:
        return PackedForest([self])

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The booster's prediction for every row of ``X``."""
        return self._packed.predict(X)[:, 0]


class PackedForest:
    """The trees of many tables in one table; :meth:`predict` returns ``(n, n_tables)``.

    Each tree is laid out as a complete binary tree of the deepest tree's depth (a leaf above
    that depth becomes a split over copies of itself), so a node's children are ``2i + 1`` and
    ``2i + 2``. A block of rows is walked feature-major (rows contiguous): every distinct split
    (feature, threshold) of the forest is evaluated once, giving a matrix of go-right bits, one
    row per split; the first :data:`SELECT_LEVELS` levels then pick each tree's path from whole
    rows of that matrix (copying a row costs a fraction of gathering its elements one by one)
    with bitwise selects, deeper levels gather the bits element by element, and the leaf
    position picks the leaf value. A 10,000-row query of every packaged member takes less than
    half the time of walking the nodes element by element (benchmarks/packaged_load.py)."""

    def __init__(self, tables: Sequence[TreeTable]) -> None:
        self.depth = max((t.depth for t in tables), default=0)
        if 2 ** self.depth > MAX_COMPLETE_LEAVES:
            raise ValueError(f"trees of depth {self.depth} cannot be packed (at most "
                             f"{MAX_COMPLETE_LEAVES.bit_length() - 1} levels)")
        layouts = [_complete(t, self.depth) for t in tables]
        inner, leaves = 2 ** self.depth - 1, 2 ** self.depth
        self.n_trees = sum(t.n_trees for t in tables)
        feat = _cat([lay[0] for lay in layouts], "int32").reshape(self.n_trees, inner)
        thr = _cat([lay[1] for lay in layouts], "float32").reshape(self.n_trees, inner)
        key = (feat.astype(np.uint64) << np.uint64(32)) | thr.view(np.uint32).astype(np.uint64)
        unique, split = np.unique(key.ravel(), return_inverse=True)
        #: Feature and threshold of each distinct split: a row goes right unless x < threshold
        #: (NaN goes right).
        self.split_feat = (unique >> np.uint64(32)).astype(np.intp)
        self.split_thr = (unique & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(
            np.float32)[:, None]
        split = split.reshape(self.n_trees, inner).astype(np.intp)
        #: Per level, ``(2^level, trees)``: the split of each node of that level, left to right.
        self.level_splits = [np.ascontiguousarray(split[:, 2 ** d - 1:2 ** (d + 1) - 1].T)
                             for d in range(self.depth)]
        self.select_levels = min(self.depth, SELECT_LEVELS)
        self.value = _cat([lay[2] for lay in layouts], "float64")  # (trees * 2^depth,)
        self.leaf_offset = (np.arange(self.n_trees, dtype=np.intp) * leaves)[:, None]
        self.starts = np.cumsum([0] + [t.n_trees for t in tables[:-1]]).astype(np.intp)
        self.base = np.array([t.base for t in tables])
        self.n_boosters = len(tables)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Raw margin of every table for every row, ``(n, n_tables)`` float64."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        out = np.zeros((len(X), self.n_boosters))
        if self.n_trees:
            rows = min(MAX_ROWS, max(MIN_ROWS, BLOCK // self.n_trees))
            for start in range(0, len(X), rows):
                leaf = self._leaf_values(np.ascontiguousarray(X[start:start + rows].T))
                out[start:start + rows] = np.add.reduceat(leaf, self.starts, axis=0).T
        return out + self.base

    def _leaf_values(self, columns: np.ndarray) -> np.ndarray:
        """The leaf value of every tree for every column of ``columns`` (features x rows):
        ``(trees, rows)``."""
        n = columns.shape[1]
        right = np.less(np.take(columns, self.split_feat, axis=0), self.split_thr)
        np.logical_not(right, out=right)
        bits = right.view(np.uint8)  # (splits, rows)
        path: list[np.ndarray] = []  # the go-right bit of each level so far, (trees, rows)
        for level in range(self.select_levels):
            nodes = [np.take(bits, ids, axis=0) for ids in self.level_splits[level]]
            for bit in reversed(path):  # pairs of nodes differ in the latest bit first
                nodes = [a ^ (bit & (a ^ b)) for a, b in zip(nodes[::2], nodes[1::2],
                                                            strict=True)]
            path.append(nodes[0])
        position = path[0] if path else np.zeros((self.n_trees, n), dtype=np.uint8)
        for bit in path[1:]:  # the node's place within its level
            position = (position << 1) | bit
        if self.depth > self.select_levels:
            position = self._walk(position.astype(np.intp), bits)
        return np.take(self.value, position + self.leaf_offset)

    def _walk(self, position: np.ndarray, bits: np.ndarray) -> np.ndarray:
        """The levels below :data:`SELECT_LEVELS`, one bit gathered per tree and row."""
        n = bits.shape[1]
        column = np.arange(n, dtype=np.intp)
        flat_bits = bits.ravel()
        tree = np.arange(self.n_trees, dtype=np.intp)[:, None]
        for level in range(self.select_levels, self.depth):
            split = np.take(self.level_splits[level], position * self.n_trees + tree)
            position <<= 1
            position |= np.take(flat_bits, split * n + column)
        return position


def _complete(table: TreeTable, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``table``'s trees as complete trees of ``depth``: split features and thresholds
    ``(trees * (2^depth - 1),)`` and leaf values ``(trees * 2^depth,)`` in heap order."""
    inner, leaves = 2 ** depth - 1, 2 ** depth
    feat = np.zeros((table.n_trees, inner), dtype=np.int32)
    thr = np.full((table.n_trees, inner), np.inf, dtype=np.float32)  # x < inf: always left
    value = np.zeros((table.n_trees, leaves), dtype=np.float64)
    for tree, root in enumerate(table.roots):
        stack = [(int(root), 0)]  # (node in the table, heap position)
        while stack:
            node, pos = stack.pop()
            if pos >= inner:
                value[tree, pos - inner] = table.value[node]
            elif table.left[node] == node:  # a leaf above the bottom: both sides keep it
                stack += [(node, 2 * pos + 1), (node, 2 * pos + 2)]
            else:
                feat[tree, pos], thr[tree, pos] = table.feat[node], table.thr[node]
                stack += [(int(table.left[node]), 2 * pos + 1),
                          (int(table.right[node]), 2 * pos + 2)]
    return feat.ravel(), thr.ravel(), value.ravel()


def _cat(parts: list[np.ndarray], dtype: str) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    depth, frontier = 0, [0]
    while frontier:
        frontier = [c for i in frontier for c in (left[i], right[i]) if c >= 0]
        depth += bool(frontier)
    return depth
