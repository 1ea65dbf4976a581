"""XGBoost members compiled to numpy node tables predict what the native boosters predict, from a
saved ``.npz`` or straight from the XGBoost JSON, and malformed tables are refused."""
from __future__ import annotations

import json

import numpy as np
import pytest

from anb.searchspace.sampler import sample
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, artifact, fit_benchmark, prepare
from anb.surrogates.benchmark import SMALL_BATCH
from anb.surrogates.compiled import TreeTable
from anb.surrogates.compiled_forest import PackedForest
from anb.surrogates.estimators import TABLE_SUFFIX, XGBoostFamily

pytestmark = pytest.mark.slow  # real training / fitting / searches: over 2 s each

#: Every family a table compiles (boosted trees, a random forest) beside one it leaves as it is.
CONFIG = {"targets": ["val_top1", "throughput_zcu102", "latency_zcu102"], "layer_cost": True,
          "hole_folds": 0,
          "default": {"family": "xgboost", "params": {"n_estimators": 60, "max_depth": 4},
                      "n_members": 2},
          "per_target": {
              "val_top1": {"family": ["xgboost", "svr"], "n_members": 2,
                           "params": [{"n_estimators": 60, "max_depth": 4}, {"C": 3.0}]},
              "latency_zcu102": {"family": "random_forest", "n_members": 1,
                                 "params": {"n_estimators": 30, "max_depth": 6}}}}


@pytest.fixture(scope="module")
def native_and_compiled(dataset_tarball, tmp_path_factory):
    """The same fitted benchmark saved natively and compiled, both loaded back."""
    root = tmp_path_factory.mktemp("compiled")
    config = FitConfig.from_dict(CONFIG)
    bench = fit_benchmark(prepare(dataset_tarball, config.targets,
                                  space=ANB_SPACE), config, progress=False)
    artifact.save(bench, root / "native")
    artifact.save(bench, root / "compiled", compiled=True)
    return artifact.load(root / "native"), artifact.load(root / "compiled"), root


def test_compiled_artifact_holds_tables_not_xgboost_models(native_and_compiled):
    _, compiled, root = native_and_compiled
    manifest = artifact.read_manifest(root / "compiled")
    files = {t: spec["files"] for t, spec in manifest["targets"].items()}
    assert files == {"val_top1": ["val_top1.m0.npz", "val_top1.m1.npz"],
                     "throughput_zcu102": ["throughput_zcu102.m0.npz", "throughput_zcu102.m1.npz"],
                     "latency_zcu102": ["latency_zcu102.m0.npz"]}
    members = [m for model in compiled.models.values() for m in model.members_]
    assert [type(m).__name__ for m in members] == ["XGBoostFamily", "SVRFamily", "XGBoostFamily",
                                                   "XGBoostFamily", "RandomForestFamily"]
    assert all(m.booster_ is None for m in members if isinstance(m, XGBoostFamily))
    assert manifest["support"] and manifest["feature_schema"]["layer_cost"]


def test_compiled_predictions_equal_the_native_ones(native_and_compiled):
    """Small batches take the same table walk either way: identical. Large ones go to the
    native predictor for the native artifact, whose float32 sums differ in the last bits."""
    native, compiled, _ = native_and_compiled
    archs = sample(600, seed=3, space=ANB_SPACE)
    small = archs[:SMALL_BATCH]
    assert compiled.query(small).equals(native.query(small))
    got, want = compiled.query(archs), native.query(archs)
    assert got["arch"].tolist() == want["arch"].tolist()
    assert got["ood_reason"].tolist() == want["ood_reason"].tolist()
    for column in [c for c in want.columns if want[c].dtype.kind == "f"]:
        np.testing.assert_allclose(got[column], want[column], rtol=1e-5, atol=0, err_msg=column)


def test_members_predict_from_json_and_npz_alike(native_and_compiled, tmp_path):
    """A table read from the XGBoost JSON (the query install's way to load an ``anb fit``
    artifact) is the table saved as ``.npz``; both predict what the booster predicts."""
    native, _, root = native_and_compiled
    X = native.builder.transform(native.choices(sample(300, seed=4, space=ANB_SPACE)))
    for stem in ("throughput_zcu102.m0", "latency_zcu102.m0"):
        booster = XGBoostFamily.load(root / "native" / f"{stem}.json", {}).booster_
        from_json = TreeTable.from_xgboost_json((root / "native" / f"{stem}.json").read_bytes())
        from_npz = TreeTable.load(root / "compiled" / f"{stem}{TABLE_SUFFIX}")
        np.testing.assert_array_equal(from_json.predict(X), from_npz.predict(X))
        np.testing.assert_allclose(from_npz.predict(X),
                                   booster.inplace_predict(X.astype(np.float32)),
                                   rtol=1e-5, atol=1e-6)  # float32 sums: the last bits


def test_malformed_tables_and_unsupported_models_are_refused(native_and_compiled, tmp_path):
    _, _, root = native_and_compiled
    table = TreeTable.load(root / "compiled" / "throughput_zcu102.m0.npz")
    arrays = table.arrays()
    arrays["left"] = arrays["left"].copy()
    arrays["left"][3] = len(arrays["left"]) + 7  # a child outside the table
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with pytest.raises(ValueError, match=r"bad.npz.*not a valid tree table"):
        TreeTable.load(bad)
    np.savez(bad, feat=arrays["feat"])
    with pytest.raises(ValueError, match=r"not a tree table: no \['left', 'right'"):
        TreeTable.load(bad)
    model = json.loads((root / "native" / "throughput_zcu102.m0.json").read_text())
    model["learner"]["objective"]["name"] = "reg:gamma"
    with pytest.raises(ValueError, match=r"objective 'reg:gamma' cannot be compiled"):
        TreeTable.from_xgboost_json(json.dumps(model))


def test_uneven_trees_pack_into_complete_layouts_and_walk_by_hand():
    """Leaves above the deepest level, a one-leaf tree, NaN (right, as XGBoost's tables have
    no default direction here) and two tables in one forest: each row's sum by hand."""
    # tree 0: x0 < 0.5 ? leaf 1.0 : (x1 < 2 ? leaf 2.0 : leaf 3.0); tree 1: leaf 5.0
    deep = TreeTable(feat=np.array([0, 0, 1, 0, 0, 0], np.int32),
                     thr=np.array([0.5, 0, 2.0, 0, 0, 0], np.float32),
                     left=np.array([1, 1, 3, 3, 4, 5], np.int32),
                     right=np.array([2, 1, 4, 3, 4, 5], np.int32),
                     value=np.array([0, 1.0, 0, 2.0, 3.0, 5.0], np.float32),
                     roots=np.array([0, 5], np.int32), base=0.25, depth=2, n_features=2)
    # one tree of depth 1: x1 < 0 ? -1 : 1
    shallow = TreeTable(feat=np.array([1, 0, 0], np.int32), thr=np.array([0.0, 0, 0], np.float32),
                        left=np.array([1, 1, 2], np.int32), right=np.array([2, 1, 2], np.int32),
                        value=np.array([0, -1.0, 1.0], np.float32), roots=np.array([0], np.int32),
                        base=0.0, depth=1, n_features=2)
    X = np.array([[0.0, 9.0], [1.0, 1.0], [1.0, 5.0], [np.nan, -3.0], [1.0, np.nan]])
    want_deep = 0.25 + 5.0 + np.array([1.0, 2.0, 3.0, 2.0, 3.0])  # NaN x0: right, x1=-3: left
    want_shallow = np.array([1.0, 1.0, 1.0, -1.0, 1.0])  # NaN x1: right
    got = PackedForest([deep, shallow]).predict(X)
    np.testing.assert_array_equal(got, np.stack([want_deep, want_shallow], axis=1))
    np.testing.assert_array_equal(deep.predict(X), want_deep)
    # more rows than one block of rows x trees: the blocks join up
    many = np.tile(X, (PackedForest([deep]).n_boosters * 30_000, 1))
    np.testing.assert_array_equal(deep.predict(many), np.tile(want_deep, 30_000))


def test_a_model_newer_than_the_installed_xgboost_is_read_as_a_table(tmp_path):
    """An older xgboost misreads a newer model (2.0 took 3.x's base score for 0.5: every
    packaged prediction e^0.5 too large), so such a model predicts from its tree table."""
    from anb import resources
    from anb.surrogates.estimators import installed_version

    model = json.loads((resources.SHIPPED_DIR / "train_time.m0.xgb.json").read_text())
    same, newer = tmp_path / "same.json", tmp_path / "newer.json"
    same.write_text(json.dumps(model))
    newer.write_text(json.dumps({**model, "version": [99, 0, 0]}))
    native, table = XGBoostFamily.load(same, {}), XGBoostFamily.load(newer, {})
    assert native.booster_ is not None and table.booster_ is None
    X = np.random.default_rng(0).normal(size=(300, table.table().n_features))
    np.testing.assert_allclose(table.predict(X), native.predict(X), rtol=1e-5, atol=1e-6)
    # a compiled table with a newer native model beside it keeps to the table
    (tmp_path / f"m{TABLE_SUFFIX}").write_bytes(
        (resources.SHIPPED_DIR / f"train_time.m0{TABLE_SUFFIX}").read_bytes())
    (tmp_path / "m.xgb.json").write_text(newer.read_text())
    compiled = XGBoostFamily.load(tmp_path / f"m{TABLE_SUFFIX}", {})
    np.testing.assert_array_equal(compiled.predict(X), table.predict(X))
    assert compiled.booster_ is None
    assert installed_version("3.1.0rc1") == (3, 1, 0) and installed_version("2.0") == (2, 0)
