"""XGBoost members flattened into numpy arrays for low-latency prediction of small batches.

Calling a booster costs tens of microseconds of fixed overhead per call; a benchmark with
9 targets x 5 members pays it 45 times per query. Here every tree of every member is packed
into one node table (read from the boosters' own JSON, no code) and a batch walks all trees at
once, level by level. Large batches go to the native predictor instead, which is faster there.
"""
from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np


class PackedForest:
    """All trees of many XGBoost boosters; :meth:`predict` returns ``(n, n_boosters)``."""

    def __init__(self, boosters: Sequence) -> None:
        feat, thr, left, right, value, roots, owner = [], [], [], [], [], [], []
        self.base = np.zeros(len(boosters))
        offset, depth = 0, 0
        for b, booster in enumerate(boosters):
            learner = json.loads(bytes(booster.save_raw("json")))["learner"]
            self.base[b] = float(learner["learner_model_param"]["base_score"].strip("[]"))
            for tree in learner["gradient_booster"]["model"]["trees"]:
                lc = np.asarray(tree["left_children"], dtype=np.int64)
                rc = np.asarray(tree["right_children"], dtype=np.int64)
                leaf = lc < 0
                n = len(lc)
                # leaves point to themselves so extra steps are no-ops
                left.append(np.where(leaf, np.arange(n), lc) + offset)
                right.append(np.where(leaf, np.arange(n), rc) + offset)
                feat.append(np.where(leaf, 0, np.asarray(tree["split_indices"], dtype=np.int64)))
                cond = np.asarray(tree["split_conditions"], dtype=np.float32)
                thr.append(cond)
                value.append(np.where(leaf, cond, 0.0))
                roots.append(offset)
                owner.append(b)
                depth = max(depth, _depth(lc, rc))
                offset += n
        self.feat = np.concatenate(feat) if feat else np.zeros(0, np.int64)
        self.thr = np.concatenate(thr) if thr else np.zeros(0, np.float32)
        self.left = np.concatenate(left) if left else np.zeros(0, np.int64)
        self.right = np.concatenate(right) if right else np.zeros(0, np.int64)
        self.value = np.concatenate(value) if value else np.zeros(0)
        self.roots = np.asarray(roots, dtype=np.int64)
        owner_arr = np.asarray(owner, dtype=np.int64)
        self.starts = np.searchsorted(owner_arr, np.arange(len(boosters)))
        self.depth = depth
        self.n_boosters = len(boosters)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Raw margin of every booster for every row, ``(n, n_boosters)`` float64."""
        X = np.asarray(X, dtype=np.float32)
        node = np.broadcast_to(self.roots, (len(X), len(self.roots))).copy()
        rows = np.arange(len(X))[:, None]
        for _ in range(self.depth):
            go_left = X[rows, self.feat[node]] < self.thr[node]
            node = np.where(go_left, self.left[node], self.right[node])
        return np.add.reduceat(self.value[node], self.starts, axis=1) + self.base


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    depth, frontier = 0, [0]
    while frontier:
        frontier = [c for i in frontier for c in (left[i], right[i]) if c >= 0]
        depth += bool(frontier)
    return depth
