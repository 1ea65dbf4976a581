"""The packed forest (packed bit selects, then a bit-by-bit walk below SELECT_LEVELS; trees
summed in pairs up to PAIR_DEPTH) predicts what walking each tree's node pointers predicts:
random trees of every depth the packing takes, several tables of different depths at once, NaN
and infinite inputs, batches that span several row blocks, and the shipped benchmark's own
trees (its SVR member's kernel against the direct distances too)."""
from __future__ import annotations

import numpy as np
import pytest

from anb import resources
from anb.searchspace.sampler import Sampler
from anb.surrogates import artifact, compiled_forest
from anb.surrogates.compiled import TreeTable
from anb.surrogates.compiled_forest import PackedForest
from anb.surrogates.estimators import SVRFamily, XGBoostFamily

N_FEATURES = 6


def _random_table(rng: np.random.Generator, n_trees: int, max_depth: int) -> TreeTable:
    """Trees grown at random (a node splits with probability 0.8 above ``max_depth``), with
    thresholds drawn from a few values so that splits repeat across trees."""
    feat, thr, left, right, value, roots = [], [], [], [], [], []
    depth = 0

    def grow(level: int) -> int:
        nonlocal depth
        node = len(feat)
        feat.append(0), thr.append(0.0), left.append(node), right.append(node)
        value.append(0.0)
        if level < max_depth and (level == 0 or rng.random() < 0.8):
            feat[node] = int(rng.integers(N_FEATURES))
            thr[node] = float(rng.choice([-1.0, -0.25, 0.0, 0.5, 1.5]))
            left[node] = grow(level + 1)
            right[node] = grow(level + 1)
        else:
            value[node] = float(rng.normal())
            depth = max(depth, level)
        return node

    for _ in range(n_trees):
        roots.append(grow(0) if max_depth else len(feat))
        if not max_depth:
            feat.append(0), thr.append(0.0), left.append(roots[-1]), right.append(roots[-1])
            value.append(float(rng.normal()))
    return TreeTable(feat=np.array(feat, np.int32), thr=np.array(thr, np.float32),
                     left=np.array(left, np.int32), right=np.array(right, np.int32),
                     value=np.array(value, np.float32), roots=np.array(roots, np.int32),
                     base=float(rng.normal()), depth=depth, n_features=N_FEATURES)


def _pointer_walk(table: TreeTable, X: np.ndarray) -> np.ndarray:
    """Each tree walked through its child pointers: left when x < threshold (NaN goes right)."""
    X = X.astype(np.float32)
    total = np.full(len(X), table.base)
    for root in table.roots:
        node = np.full(len(X), root)
        for _ in range(table.depth):
            goes_left = X[np.arange(len(X)), table.feat[node]] < table.thr[node]
            node = np.where(goes_left, table.left[node], table.right[node])
        total += table.value[node]
    return total


@pytest.mark.parametrize("depths", [(0,), (1,), (3,), (4,), (2, 4, 1), (5,), (7, 3)])
def test_the_packed_forest_predicts_the_pointer_walk(depths, monkeypatch):
    """Depths up to SELECT_LEVELS take only the selects; deeper ones the walk as well."""
    monkeypatch.setattr(compiled_forest, "ROWS", 64)  # several row blocks per batch
    rng = np.random.default_rng(sum(depths))
    tables = [_random_table(rng, int(rng.integers(1, 30)), d) for d in depths]
    X = rng.choice([-2.0, -1.0, -0.25, 0.0, 0.3, 0.5, 1.5, 2.0], size=(300, N_FEATURES))
    X[rng.random(X.shape) < 0.05] = np.nan
    X[rng.random(X.shape) < 0.02] = np.inf
    forest = PackedForest(tables)
    packed = forest.predict(X)
    tiny = forest.predict(X[:compiled_forest.TINY])  # each tree's nodes walked directly
    assert packed.shape == (len(X), len(tables))
    for i, table in enumerate(tables):
        want = _pointer_walk(table, X)
        np.testing.assert_allclose(packed[:, i], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tiny[:, i], want[:len(tiny)], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(table.predict(X[:7]), want[:7], rtol=1e-12, atol=1e-12)


def test_an_empty_forest_predicts_its_base_scores():
    table = TreeTable(feat=np.zeros(0, np.int32), thr=np.zeros(0, np.float32),
                      left=np.zeros(0, np.int32), right=np.zeros(0, np.int32),
                      value=np.zeros(0, np.float32), roots=np.zeros(0, np.int32), base=0.75,
                      depth=0, n_features=N_FEATURES)
    assert PackedForest([table]).predict(np.zeros((3, N_FEATURES))).tolist() == [[0.75]] * 3
    # beside a table of trees: its column is still its base score
    trees = _random_table(np.random.default_rng(3), 5, 3)
    X = np.random.default_rng(4).normal(size=(9, N_FEATURES))
    both = PackedForest([table, trees]).predict(X)
    assert both[:, 0].tolist() == [0.75] * 9
    np.testing.assert_allclose(both[:, 1], _pointer_walk(trees, X), rtol=1e-12, atol=1e-12)


def test_the_packaged_members_fast_paths_predict_what_the_fitted_members_do():
    """The shipped benchmark's own trees (21 boosters, 6,967 trees, paired) walked packed
    against each tree's pointers, and its SVR member's blocked float64 kernel against the
    direct distances (libsvm's form): the same numbers to 1e-12 / 1e-9 relative."""
    bench = artifact.load(resources.SHIPPED_DIR)
    choices = Sampler(seed=11, space=bench.space).sample_choices(300)
    X = bench.builder.transform(choices)
    members = [m for model in bench.models.values() for m in model.members_]
    tables = [m.table() for m in members if isinstance(m, XGBoostFamily)]
    packed = PackedForest(tables)
    assert packed.paired and packed.n_trees > 1000
    got = packed.predict(X)
    tiny = np.concatenate([packed.predict(X[i:i + 3]) for i in range(0, 30, 3)])
    for i, table in enumerate(tables):
        want = _pointer_walk(table, X)
        np.testing.assert_allclose(got[:, i], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tiny[:, i], want[:30], rtol=1e-12, atol=1e-12)
    svr = next(m for m in members if isinstance(m, SVRFamily))
    Z = (X.astype(np.float64) - svr.x_mean_) / svr.x_scale_
    squared = ((Z[:, None, :] - svr.support_[None]) ** 2).sum(axis=2)
    want = (np.exp(-svr.gamma_ * squared) @ svr.dual_ + svr.intercept_) * svr.y_scale_ \
        + svr.y_mean_
    np.testing.assert_allclose(svr.predict(X), want, rtol=1e-9, atol=0)
