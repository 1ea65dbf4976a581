"""XGBoost members as numpy node tables: prediction without xgboost, and fast small batches.

A :class:`TreeTable` is one booster's trees read from XGBoost's own JSON model (no code) into
flat arrays, stored as ``.npz`` (``allow_pickle=False``): the query install predicts with it,
and a packaged benchmark ships its members in that form.
:class:`~anb.surrogates.compiled_forest.PackedForest` walks the trees of many tables at once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from anb.io import atomic_write
from anb.surrogates.compiled_forest import PackedForest

#: Objectives whose prediction is the raw margin (the sum of leaves plus the base score).
IDENTITY_OBJECTIVES = ("reg:squarederror", "reg:absoluteerror", "reg:pseudohubererror")
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


def _cat(parts: list[np.ndarray], dtype: str) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    depth, frontier = 0, [0]
    while frontier:
        frontier = [c for i in frontier for c in (left[i], right[i]) if c >= 0]
        depth += bool(frontier)
    return depth
