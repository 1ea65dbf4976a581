"""Layer-cost model (robust trim), the SVR kernel and the pooled query path, on synthetic
data (no dataset needed, a few seconds)."""
from __future__ import annotations

import copy
import os
import re
from dataclasses import replace

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pandas as pd
import pytest

from anb import resources
from anb.searchspace import Sampler
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, TargetConfig, TargetSurrogate, fit_benchmark, prepare
from anb.surrogates.benchmark import SMALL_BATCH, SurrogateBenchmark
from anb.surrogates.estimators import SVRFamily
from anb.surrogates.features import FeatureBuilder
from anb.surrogates.layer_cost import LayerCostModel, layer_design


@pytest.fixture(scope="module")
def saturated():
    """Throughput = 1 / additive per-layer cost (1 % noise), except that 15 % of the
    architectures are held back by the host: measured 40 % slower than their compute cost."""
    rng = np.random.default_rng(0)
    choices = Sampler(seed=3, space=ANB_SPACE).sample_choices(3000)
    design = layer_design(choices, space=ANB_SPACE)
    weights = rng.uniform(0.5, 1.5, design.shape[1]) * 1e-5
    cost = design @ weights * rng.lognormal(0, 0.01, len(choices))
    slow = rng.random(len(choices)) < 0.15
    throughput = np.where(slow, 0.6, 1.0) / cost  # well below their compute-bound value
    accuracy = 60 + design @ rng.normal(0, 0.3, design.shape[1])
    present = np.ones(len(choices), dtype=bool)
    targets = {"throughput_x": (throughput, present), "val_top1": (accuracy, present)}
    return choices, design, weights, targets, slow


def test_trim_leaves_out_slow_outliers(saturated):
    choices, design, weights, targets, slow = saturated
    plain = LayerCostModel().fit(choices, targets, ANB_SPACE)
    trimmed = LayerCostModel(trim=3.0).fit(choices, targets, ANB_SPACE)
    # the saturated rows are left out (all of them clearly slow; few clean rows lost)
    assert plain.n_used_ == {"throughput_x": 3000, "val_top1": 3000}
    used = trimmed.n_used_["throughput_x"]
    assert 3000 - slow.sum() - 30 <= used <= 3000 - slow.sum()
    assert trimmed.n_used_["val_top1"] == 3000  # identity targets are never trimmed
    # the trimmed weights describe compute-bound cost; the plain fit is bent by the ceiling
    truth = design @ weights
    err_plain = np.abs(design @ plain.weights_[0] / truth - 1)[~slow]
    err_trim = np.abs(design @ trimmed.weights_[0] / truth - 1)[~slow]
    assert np.median(err_trim) < 0.01 < np.median(err_plain)
    np.testing.assert_allclose(trimmed.weights_[1], plain.weights_[1])


def test_trim_round_trips_through_save_and_load(saturated, tmp_path):
    choices, _, _, targets, _ = saturated
    for trim in (2.5, None):
        model = LayerCostModel(trim=trim).fit(choices, targets, ANB_SPACE)
        model.save(tmp_path / "lc.npz")
        loaded = LayerCostModel.load(tmp_path / "lc.npz", space=ANB_SPACE)
        assert loaded.trim == trim and loaded.targets_ == model.targets_
        np.testing.assert_array_equal(loaded.transform(choices[:50]), model.transform(choices[:50]))


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "3", True])
def test_bad_trim_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="layer-cost trim must be a positive number"):
        LayerCostModel(trim=bad)
    with pytest.raises(ValueError, match="layer-cost trim must be a positive number"):
        FitConfig.from_dict({"layer_cost_trim": bad})


def test_config_reads_trim():
    assert FitConfig.from_dict({"layer_cost_trim": 3}).layer_cost_trim == 3
    assert FitConfig.from_dict({}).layer_cost_trim == FitConfig().layer_cost_trim == 2.0


def test_gathered_transform_equals_the_design_product(saturated):
    choices, _, _, targets, _ = saturated
    model = LayerCostModel(trim=3.0).fit(choices, targets, ANB_SPACE)
    other = Sampler(seed=4, space=ANB_SPACE).sample_choices(500)
    cost = layer_design(other, space=ANB_SPACE) @ model.weights_.T
    np.testing.assert_allclose(model._cost(ANB_SPACE.cost_units(other)), cost, rtol=1e-12)


def test_svr_kernel_predicts_what_the_fitted_svr_predicts(saturated):
    """The blocked float64 kernel (one matrix product per block) against scikit-learn's SVR
    fitted on the same standardised rows (libsvm's direct distances): equal to 1e-9 of the
    prediction, also for rows far outside the data and across several blocks."""
    from sklearn.svm import SVR

    choices, _, _, targets, _ = saturated
    X = FeatureBuilder("features", space=ANB_SPACE).transform(choices)
    y = np.log(targets["throughput_x"][0])
    svr = SVRFamily(C=3.0, epsilon=0.05).fit(X[:1000], y[:1000])
    fitted = SVR(C=3.0, epsilon=0.05, gamma=svr.gamma_).fit(
        (X[:1000] - svr.x_mean_) / svr.x_scale_, (y[:1000] - svr.y_mean_) / svr.y_scale_)
    Xq = X[1000:1600].copy()
    Xq[:5] *= 40  # far outside the data: every kernel value underflows to 0
    want = fitted.predict((Xq - svr.x_mean_) / svr.x_scale_) * svr.y_scale_ + svr.y_mean_
    assert len(Xq) > 2 * SVRFamily.CHUNK
    np.testing.assert_allclose(svr.predict(Xq), want, rtol=1e-9, atol=0)


def test_pooled_and_sequential_queries_agree(saturated):
    choices, _, _, targets, _ = saturated
    lc = LayerCostModel(trim=3.0).fit(choices[:2000], {k: (y[:2000], m[:2000])
                                                       for k, (y, m) in targets.items()}, ANB_SPACE)
    builder = FeatureBuilder("features", lc, space=ANB_SPACE)
    X = builder.transform(choices)
    models = {}
    for name, (y, _) in targets.items():
        y = np.log(y) if name.startswith("throughput") else y
        mixed = TargetSurrogate(["xgboost", "svr", "lightgbm"],
                                [{"n_estimators": 40}, {}, {"n_estimators": 40}], 3,
                                base_column=builder.column(f"lc_{name}"))
        models[name] = mixed.fit(X[:2000], y[:2000], X[2000:2500], y[2000:2500])
    transforms = {"throughput_x": "log", "val_top1": "identity"}
    pooled = SurrogateBenchmark(builder, models, transforms, n_jobs=2, space=ANB_SPACE)
    serial = SurrogateBenchmark(builder, models, transforms, n_jobs=1, space=ANB_SPACE)
    batch = choices[2500:]
    assert len(batch) > SMALL_BATCH
    a, b = pooled.query(batch), serial.query(batch)
    pd.testing.assert_frame_equal(a, b)
    columns = ["arch", "val_top1", "val_top1_std", "ood", "ood_distance", "ood_cost",
               "ood_reason"]
    pd.testing.assert_frame_equal(pooled.query(batch, "val_top1"), b[columns])
    # the small-batch path (packed trees) gives the same numbers
    pd.testing.assert_frame_equal(pooled.query(batch[:SMALL_BATCH]), a.iloc[:SMALL_BATCH],
                                  rtol=1e-5)
    # every batch without native boosters (the query install) takes the packed trees, the
    # other members on the pool meanwhile: the same frame as one thread gives
    compiled = {name: copy.copy(model) for name, model in models.items()}
    for model in compiled.values():
        model.members_ = [member.compiled() for member in model.members_]
    packed = [SurrogateBenchmark(builder, compiled, transforms, n_jobs=jobs,
                                 space=ANB_SPACE).query(batch) for jobs in (2, 1)]
    pd.testing.assert_frame_equal(*packed)
    pd.testing.assert_frame_equal(packed[0], a, rtol=1e-5)
    with pytest.raises(ValueError, match="n_jobs must be >= 1"):
        pooled.set_threads(0)


@pytest.mark.slow
def test_packaged_default_trim_is_the_cross_validated_one_and_fit_uses_it():
    """Catches: a default trim that is not the cross-validated one (default.json, or fit
    building the layer-cost model without the configured trim).

    The packaged config's trim is the value DEFAULTS.md records as chosen by CV (2.0, pinned),
    and a fit with that config leaves out exactly the rows a trim-2.0 layer-cost fit does."""
    config = FitConfig.from_file(resources.config_path("surrogates", "default.json"))
    record = (resources.config_path("surrogates", "DEFAULTS.md")).read_text()
    chosen = re.search(r"^\| `layer_cost_trim`.*\| \*\*([0-9.]+)[^|]*\|$", record, re.M)
    assert chosen is not None and config.layer_cost_trim == float(chosen.group(1)) == 2.0
    prepared = prepare(resources.RELEASED_DATASET, ["throughput_tpuv3"], space=ANB_SPACE)
    tiny = replace(config, per_target={},
                   default=TargetConfig("xgboost", {"n_estimators": 2, "n_jobs": 1}, 1))
    fitted = fit_benchmark(prepared, tiny, progress=False).builder.layer_cost
    assert fitted is not None and fitted.trim == 2.0
    train, lab = prepared.masks["train"], prepared.labels["throughput_tpuv3"]
    targets = {"throughput_tpuv3": (lab.values[train], lab.present[train])}
    expected = {t: LayerCostModel(trim=t, saturating=config.layer_cost_saturating).fit(
        prepared.choices[train], targets, ANB_SPACE).n_used_ for t in (2.0, 3.0)}
    assert fitted.n_used_ == expected[2.0] != expected[3.0]
