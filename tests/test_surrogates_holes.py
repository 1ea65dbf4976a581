"""Holes in the training data: an architecture using a choice or combination the training data
lack (or hold fewer than ``MIN_COUNT`` times) is flagged, the combination is named in
``ood_reason``, and its std widens by what internal hold-outs learned (MnasNet and NB201)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import kendalltau

from anb.resources import HELP_DIR as HELP
from anb.resources import RELEASED_DATASET as TARBALL
from anb.searchspace import get_space
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, TargetConfig, fit_benchmark, intervals, load, prepare, save
from anb.surrogates import help_tables as ht
from anb.surrogates.benchmark import flag_extrapolation
from anb.surrogates.ensemble import TargetSurrogate
from anb.surrogates.fit import Prepared, to_model_space
from anb.surrogates.layer_cost import LayerCostModel, layer_design, saturate
from anb.surrogates.uncertainty.holes import (
    COST_SHARE,
    EDGE_SHARE,
    HOLE_SHARE,
    cost_extremes,
    edge_extremes,
    hole_folds,
    hole_std,
    unit_folds,
)
from anb.surrogates.uncertainty.support import MIN_COUNT, Support
from anb.surrogates.uncertainty.terms import StdTerms, widened_std

TARGETS = ["val_top1", "throughput_a100"]
SMALL = TargetConfig("xgboost", {"n_estimators": 300, "learning_rate": 0.1, "n_jobs": 1}, 2)


def _without(prepared: Prepared, hole: np.ndarray) -> Prepared:
    masks = {"train": prepared.masks["train"] & ~hole, "val": prepared.masks["val"] & ~hole,
             "test": np.zeros(len(hole), dtype=bool)}
    return Prepared(prepared.frame, prepared.choices, masks, prepared.labels, prepared.space)


def _scores(bench, prepared: Prepared, rows: np.ndarray, target: str) -> tuple[float, float,
                                                                             float]:
    """90 % coverage and sharpness (median std / median |error|) in model space, and the
    coverage the std would have without the hole widening."""
    choices = prepared.choices[rows]
    ood = bench.ood(choices)
    lab = prepared.labels[target]
    ok = lab.present[rows]
    y = to_model_space(target, lab.values[rows][ok])
    mean, std = (a[ok] for a in bench.predict_transformed(choices, [target], ood)[target])
    _, plain = bench.predict_transformed(choices, [target], {**ood, "ood_hole": 0 * std})[target]
    sharp = float(np.median(std) / np.median(np.abs(y - mean)))
    return (intervals.coverage(y, mean, std, log=False), sharp,
            intervals.coverage(y, mean, plain[ok], log=False))


def _only(prepared: Prepared, targets: list[str]) -> Prepared:
    """``prepared`` with the labels of ``targets`` alone (a fit fits every prepared target)."""
    return Prepared(prepared.frame, prepared.choices, prepared.masks,
                    {t: prepared.labels[t] for t in targets}, prepared.space)


@pytest.fixture(scope="module")
def released():
    """The released data with every target, read once for the module (the rows, choices and
    split do not depend on the targets picked)."""
    return prepare(TARBALL, space=ANB_SPACE)


@pytest.fixture(scope="module")
def mnasnet(released):
    return _only(released, TARGETS)


@pytest.mark.slow
@pytest.mark.statistical
def test_mnasnet_stage6_e6k5_hole_is_flagged_named_and_covered(mnasnet):
    """Every architecture whose stage 6 is e6 k5 (876) left out of the fit: each is flagged,
    the reason names block 6's e6 with k5, top-1 is predicted within the issue's 1 pp (measured
    0.33 pp: the layer-cost back-off to the parts and the slot's sibling units; the one-hot
    base was 6.1 pp off), and the widened std covers the labels (measured 0.95) beyond what
    the plain std covers (0.88; 0.65 before the sibling effects, none before the back-off).
    Predicted this well, the hole needs less widening than the internal folds' harder holes
    taught: sharpness 2.18 with this small config (1.8 with the default one in
    benchmarks/shift.py), over the issue's 2."""
    c = mnasnet.choices
    hole = (c[:, 6, 0] == 6) & (c[:, 6, 1] == 5)
    bench = fit_benchmark(_without(mnasnet, hole), FitConfig(targets=TARGETS, default=SMALL,
                                                             per_target={}), progress=False)
    frame = bench.query(c[hole])
    assert frame["ood"].all()
    assert frame["ood_reason"].str.startswith("block6_e=6 with block6_k=5 unseen in training")\
        .all()
    assert frame["ood_reason"].str.contains("s6_first unit block6_e=6 block6_k=5").all()
    coverage, sharpness, plain = _scores(bench, mnasnet, hole, "val_top1")
    top1 = mnasnet.labels["val_top1"].values[hole]
    assert np.mean(np.abs(frame["val_top1"].to_numpy() - top1)) < 0.5
    assert 0.85 <= coverage <= 0.96 and coverage > plain + 0.04 and sharpness <= 2.5
    # the hole term grows with the part of the predicted cost that rests on the holed units
    target = "throughput_a100"
    ood = bench.ood(c[hole])
    _, wide = bench.predict_transformed(c[hole], [target], ood)[target]
    _, bare = bench.predict_transformed(c[hole], [target], {**ood, "ood_hole": 0 * wide})[target]
    share = bench.hole_measure(ood, target)
    assert bench.support.hole_std_[target] > 0 and share.max() > 2 * share.min() > 0
    np.testing.assert_allclose(np.sqrt(wide**2 - bare**2),
                               bench.support.hole_std_[target] * share, rtol=1e-5)
    inside = bench.query(c[mnasnet.masks["val"] & ~hole])
    assert inside["ood"].mean() < 0.05
    assert (inside["ood_reason"] == "").sum() == (~inside["ood"]).sum()


def _help_nb201(device: str) -> Prepared:
    """HELP's NAS-Bench-201 latencies on one device, split at random."""
    space = get_space("nasbench201")
    frame = ht.to_frame(ht.read_table(HELP, "nasbench201"), space, [device])
    return prepare(frame, space=space, split="random")


@pytest.mark.slow
@pytest.mark.statistical
def test_nb201_edge_op_hole_is_flagged_named_and_covered():
    """HELP's NAS-Bench-201 latencies with edge 2<-1's skip_connect left out: flagged, named,
    covered; the rest of the space stays in distribution."""
    prepared = _help_nb201("1080ti_1")
    space, target = prepared.space, next(iter(prepared.labels))
    hole = space.positions(prepared.choices)[:, 2] == 1
    bench = fit_benchmark(_without(prepared, hole), FitConfig(default=SMALL, per_target={}),
                          progress=False)
    out = bench.query(prepared.choices[hole])
    assert out["ood"].all()
    # the hole first; where the latency's layer-cost estimate also leaves its range, that next
    assert out["ood_reason"].str.match(r"edge_2_1=skip_connect unseen in training(;|$)").all()
    coverage, sharpness, _ = _scores(bench, prepared, hole, target)
    assert coverage >= 0.85 and sharpness <= 2
    assert bench.query(prepared.choices[prepared.masks["val"] & ~hole])["ood"].mean() < 0.05


def test_a_rare_pair_is_named_with_its_count_and_widens_in_proportion():
    """Block 0's e=6 with k=5 seen twice: flagged (below MIN_COUNT), named with its count,
    ``ood_hole`` 1 - 2/MIN_COUNT; a common architecture is neither flagged nor named."""
    space = get_space("anb-mnasnet")
    rng = np.random.default_rng(0)
    common = space.from_positions(rng.integers(0, space.radices(), size=(400, 28)))
    common[:, 0, :2] = [4, 3]  # block 0 always e4 k3 ...
    rare = np.repeat(common[:1], 2, axis=0)
    rare[:, 0, :2] = [6, 5]  # ... but twice e6 k5
    support = Support(space).fit(np.concatenate([common, rare]))
    score = support.score(np.concatenate([common[:1], rare[:1]]))
    assert score["ood"].tolist() == [False, True] and score["ood_reason"][0] == ""
    assert score["ood_reason"][1] == ("block0_e=6 seen 2x in training; "
                                      "block0_k=5 seen 2x in training")
    assert score["ood_hole"][1] == pytest.approx(1 - 2 / MIN_COUNT)
    support = support.with_stds({"t": 3.0}, {})
    X = np.random.default_rng(0).normal(size=(40, 3))
    model = TargetSurrogate("xgboost", {"n_estimators": 2}, 2).fit(X, X[:, 0])
    assert model.std_terms_.cost_std == 0.0  # no cost term: the hole term alone widens
    measures = {**score, "hole": score["ood_hole"], "excess": np.zeros(2), "reach": np.zeros(2)}
    wide = widened_std(model.std_terms_, support, "t", np.array([0.4, 0.4]), measures)
    assert wide[0] == 0.4 and wide[1] == pytest.approx(np.hypot(0.4, 3.0 * (1 - 2 / MIN_COUNT)))


def test_hole_std_is_the_smallest_that_covers_the_level():
    """Rows' needed extra std sqrt((|e|/z)^2 - std^2): the 9th smallest of 10 covers 90 %."""
    z = 1.6448536269514722
    errors = z * np.array([1.0, 2.0, 3.0, 5.0, 0.5, 0.0, 1.0, 1.0, 1.0, 13.0])
    std = np.ones(10)
    needed = np.sqrt(np.maximum((errors / z) ** 2 - 1, 0))
    assert hole_std(errors, std, np.ones(10)) == pytest.approx(np.sort(needed)[8])
    assert hole_std(errors, std, np.full(10, 0.5)) == pytest.approx(2 * np.sort(needed)[8])
    assert hole_std(errors, std, np.zeros(10)) == 0.0
    assert hole_std(0.1 * errors[:9], std[:9], np.ones(9)) == 0.0  # covered already


def test_cost_extremes_alternate_the_most_and_the_fewest_macs():
    log_macs = np.random.default_rng(0).normal(size=400)
    folds = cost_extremes(log_macs, 3)
    k = round(COST_SHARE * 400)
    assert [int(f.sum()) for f in folds] == [k, k, k]
    top, bottom = np.sort(log_macs)[-k:], np.sort(log_macs)[:k]
    np.testing.assert_array_equal(np.sort(log_macs[folds[0]]), top)
    np.testing.assert_array_equal(np.sort(log_macs[folds[1]]), bottom)
    np.testing.assert_array_equal(folds[2], folds[0])


def test_edge_extremes_are_a_targets_highest_and_lowest_labels():
    values = np.random.default_rng(0).normal(size=400)
    present = np.arange(400) >= 40  # no label in the first 40 rows
    mask = edge_extremes(values, present)
    k = round(EDGE_SHARE * 360)  # at each end
    order = np.flatnonzero(present)[np.argsort(values[present])]
    np.testing.assert_array_equal(np.flatnonzero(mask), np.sort(np.r_[order[:k], order[-k:]]))


def test_edge_excess_is_the_mean_past_the_label_quantiles():
    model = TargetSurrogate("xgboost", {"n_estimators": 5, "n_jobs": 1}, 1)
    model.fit(np.zeros((101, 2)), np.linspace(0.0, 1.0, 101))
    assert model.edge_range_ == pytest.approx((0.05, 0.95))
    mean = np.array([-0.1, 0.05, 0.5, 0.97, 2.0])
    np.testing.assert_allclose(model.edge_excess(mean), [-0.15, 0.0, 0.0, 0.02, 1.05], atol=1e-12)
    assert model.edge_width(mean).tolist() == [0.0] * 5  # nothing learned: no term
    model.fit(np.zeros((101, 2)), np.linspace(0.0, 1.0, 101),
              std_terms=StdTerms(edge_std=(2.0, 0.5)))  # below, above
    np.testing.assert_allclose(model.edge_width(mean), [0.3, 0.0, 0.0, 0.01, 0.525], atol=1e-12)
    # no further than the hold-outs it was learned on reached
    capped = StdTerms(edge_std=(2.0, 0.5), edge_cap=(0.1, 0.5))
    np.testing.assert_allclose(capped.edge_width(model.edge_excess(mean)),
                               [0.2, 0.0, 0.0, 0.01, 0.25], atol=1e-12)


@pytest.mark.slow
def test_own_top_decile_is_covered_by_the_edge_std(released):
    """Bug class: a region selected on the outcome. With the fastest 10 % on the 3090 left out,
    their truth lies beyond every label the fit saw while their layer-cost estimate mostly does
    not, so no feature-based widening saw them: 90 % coverage 0.26 in ``benchmarks/shift.py``
    (top family). Predicted past the training labels' edge, the std grows by the edge std the
    edge fold learned above the edge (measured here: coverage 0.27 without it, 0.83 with it)."""
    target = "throughput_3090"
    prepared = _only(released, [target])
    lab = prepared.labels[target]
    seen = (prepared.masks["train"] | prepared.masks["val"]) & lab.present
    cut = np.quantile(lab.values[seen], 0.9)
    top = seen & (lab.values > cut)
    bench = fit_benchmark(_without(prepared, top), FitConfig(targets=[target], default=SMALL,
                                                             per_target={}), progress=False)
    model = bench.models[target]
    learned = model.std_terms_
    assert list(learned.edge_std) == bench.info["targets"][target]["edge_std"]
    assert list(learned.edge_cap) == bench.info["targets"][target]["edge_cap"]
    assert learned.edge_std[1] > 0
    rows = prepared.choices[top]
    y = to_model_space(target, lab.values[top])
    mean, std = bench.predict_transformed(rows, [target])[target]
    assert (model.edge_excess(mean) > 0).mean() > 0.7
    model.std_terms_ = replace(learned, edge_std=(0.0, 0.0))  # what if none were learned
    _, plain = bench.predict_transformed(rows, [target])[target]
    model.std_terms_ = learned
    np.testing.assert_allclose(std, np.hypot(plain, learned.edge_std[1] * np.minimum(
        model.edge_excess(mean), learned.edge_cap[1])))
    assert intervals.coverage(y, mean, plain, log=False) < 0.5
    assert intervals.coverage(y, mean, std, log=False) >= 0.8
    # in distribution (the test rows up to the cut) the intervals barely move
    rest = prepared.masks["test"] & lab.present & (lab.values <= cut)
    wide = bench.predict_transformed(prepared.choices[rest], [target])[target][1]
    model.std_terms_ = replace(learned, edge_std=(0.0, 0.0))
    narrow = bench.predict_transformed(prepared.choices[rest], [target])[target][1]
    model.std_terms_ = learned
    assert np.mean(wide > narrow) < 0.1


@pytest.mark.slow
def test_cost_extreme_is_covered_without_an_absurd_std(mnasnet):
    """Bug class: the cost-excess term left at the target's MACs trend, which the layer-cost
    base already follows: on the architectures with the 15 % most params left out, the A100
    std was 90x the error in ``benchmarks/shift.py`` (coverage 1.00). The learned cost std
    (internal cost-extreme hold-outs) covers them at a sharpness under 3 (measured: coverage
    0.97, sharpness 2.3)."""
    params = mnasnet.space.cost_table(mnasnet.choices).total("params")
    seen = mnasnet.masks["train"] | mnasnet.masks["val"]
    far = seen & (params > np.quantile(params[seen], 0.85))
    bench = fit_benchmark(_without(mnasnet, far), FitConfig(targets=TARGETS, default=SMALL,
                                                            per_target={}), progress=False)
    model = bench.models["throughput_a100"]
    assert model.std_terms_.cost_std == bench.info["targets"]["throughput_a100"]["cost_std"]
    coverage, sharpness, _ = _scores(bench, mnasnet, far, "throughput_a100")
    assert coverage >= 0.85 and sharpness < 3


def test_hole_folds_take_whole_units_and_about_the_share(mnasnet):
    seen = mnasnet.masks["train"] | mnasnet.masks["val"]
    choices = mnasnet.choices[seen]
    folds = hole_folds(choices, mnasnet.space, 3, seed=0)
    units = mnasnet.space.cost_units(choices)
    assert len(folds) == 3
    for fold in folds:
        assert HOLE_SHARE <= fold.mean() <= 2 * HOLE_SHARE
        # the rows kept never use a unit the fold removed from a slot it cut
        cut = {(s, u) for s in range(units.units.shape[1])
               for u in np.unique(units.units[fold, s])
               if not ((units.units[~fold, s] == u) & (units.counts[~fold, s] > 0)).any()}
        assert cut and all(((units.units[fold, s] == u) & (units.counts[fold, s] > 0)).any()
                           for s, u in cut)
    assert not np.array_equal(folds[0], folds[1])


def test_support_file_versions(tmp_path, mnasnet):
    """Version 3 keeps counts, the units seen and the hole and unit stds; a version-2 file (no
    units seen) has no ``ood_unit`` and a version-1 file (no hole tables) flags as it did; an
    unknown version is refused by name."""
    space = mnasnet.space
    train = mnasnet.choices[mnasnet.masks["train"]]
    no_se = train[(train[:, :, 3] == 0).all(axis=1)]
    support = Support(space).fit(no_se)
    support = support.with_stds({"val_top1": 2.5}, {"val_top1": 1.5})
    support.save(tmp_path / "s.npz")
    again = Support.load(tmp_path / "s.npz", space)
    assert again.hole_std_ == {"val_top1": 2.5} and again.min_count == support.min_count
    assert again.unit_std_ == {"val_top1": 1.5} and len(again.unseen_units()) == 6
    np.testing.assert_array_equal(again.counts_, support.counts_)
    with_se = mnasnet.choices[(mnasnet.choices[:, :, 3] == 1).any(axis=1)][:5]
    assert again.score(with_se)["ood_unit"].all()
    with np.load(tmp_path / "s.npz") as data:
        v2 = {k: data[k] for k in data.files if not k.startswith("unit_")}
        old = {k: data[k] for k in ("positions", "reference", "cost_low", "cost_high")}
    np.savez(tmp_path / "v2.npz", **{**v2, "version": 2})
    v2_support = Support.load(tmp_path / "v2.npz", space)
    assert v2_support.slot_counts_ is None and not v2_support.score(with_se)["ood_unit"].any()
    np.savez(tmp_path / "old.npz", **old)
    hole = mnasnet.choices[(mnasnet.choices[:, 6, 0] == 6) & (mnasnet.choices[:, 6, 1] == 5)]
    v1 = Support.load(tmp_path / "old.npz", space)
    assert v1.counts_ is None and not v1.score(hole[:5])["ood_hole"].any()
    np.savez(tmp_path / "new.npz", **old, version=9)
    with pytest.raises(ValueError, match="support format version 9 is not supported"):
        Support.load(tmp_path / "new.npz", space)


@pytest.mark.slow
def test_artifact_round_trip_keeps_the_learned_widening(mnasnet, tmp_path):
    bench = fit_benchmark(mnasnet, FitConfig(targets=["val_top1"], default=SMALL,
                                             per_target={}), progress=False)
    assert bench.support.hole_std_["val_top1"] > 0
    assert bench.info["targets"]["val_top1"]["hole_std"] == bench.support.hole_std_["val_top1"]
    again = load(save(bench, tmp_path / "b"))
    assert again.support.hole_std_ == bench.support.hole_std_
    assert again.models["val_top1"].std_terms_ == bench.models["val_top1"].std_terms_
    assert bench.models["val_top1"].std_terms_.cost_std > 0
    assert again.models["val_top1"].edge_range_ == bench.models["val_top1"].edge_range_
    c = mnasnet.choices[:50]
    # as if each were in a hole on which all of its prediction rests
    forced = {**bench.ood(c), "ood_hole": np.ones(50), "ood_hole_share": np.ones((50, 1))}
    a = bench.predict_transformed(c, ["val_top1"], forced)["val_top1"][1]
    b = again.predict_transformed(c, ["val_top1"], forced)["val_top1"][1]
    plain = bench.predict_transformed(c, ["val_top1"], {**forced, "ood_hole": np.zeros(50)})
    np.testing.assert_allclose(a, b)
    assert np.all(a > plain["val_top1"][1])


@pytest.mark.slow
def test_top_decile_of_a_device_metric_is_extrapolated_and_flagged(mnasnet):
    """Bug class: the layer-cost base clipped to its training range. With the fastest 10 % on
    the A100 left out, every one of them got the training maximum's prediction: Kendall tau
    within them -0.21 and MAPE 16 % in ``benchmarks/shift.py`` (top family). Unclipped, the
    base follows the per-layer costs beyond the range (measured here: tau 0.98, MAPE 1.2 %),
    and an architecture whose base lies beyond it is flagged with the target named."""
    lab = mnasnet.labels["throughput_a100"]
    seen = (mnasnet.masks["train"] | mnasnet.masks["val"]) & lab.present
    top = seen & (lab.values > np.quantile(lab.values[seen], 0.9))
    # no internal hold-outs: the means, the flags and the reach do not rest on them (the reach
    # std is set below)
    bench = fit_benchmark(_without(mnasnet, top), FitConfig(targets=TARGETS, default=SMALL,
                                                            per_target={}, hole_folds=0),
                          progress=False)
    frame = bench.query(mnasnet.choices[top], ["throughput_a100"])
    y, pred = lab.values[top], frame["throughput_a100"].to_numpy()
    assert kendalltau(y, pred)[0] > 0.9
    assert np.mean(np.abs(pred - y) / y) < 0.03
    assert frame["ood"].mean() >= 0.9
    named = frame["ood_reason"].str.contains("throughput_a100 layer-cost estimate")
    assert named.mean() >= 0.9
    inside = bench.query(mnasnet.choices[mnasnet.masks["train"] & ~top], ["throughput_a100"])
    assert not inside["ood_reason"].str.contains("layer-cost estimate").any()
    # beyond the A100's range, the other targets widen by their reach std
    rows = mnasnet.choices[top & mnasnet.labels["val_top1"].present]
    X = bench.builder.transform(rows)
    reach = bench.reach(X)
    a100 = bench.models["throughput_a100"]
    np.testing.assert_allclose(reach, np.maximum(
        a100.base_excess(X) / a100.base_span(),
        bench.models["val_top1"].base_excess(X) / bench.models["val_top1"].base_span()))
    assert (reach > 0).mean() >= 0.9
    model = bench.models["val_top1"]
    learned = model.std_terms_
    model.std_terms_ = replace(learned, reach_std=0.0)  # what if it were 0, or 0.5
    plain = bench.predict_transformed(rows, ["val_top1"])["val_top1"][1]
    model.std_terms_ = replace(learned, reach_std=0.5)
    wide = bench.predict_transformed(rows, ["val_top1"])["val_top1"][1]
    model.std_terms_ = learned
    np.testing.assert_allclose(wide, np.hypot(plain, 0.5 * reach), rtol=1e-9)
    # and a query of top-1 alone is flagged where it is widened, naming the A100's estimate
    alone = bench.query(rows, ["val_top1"])
    np.testing.assert_array_equal(alone["ood"].to_numpy() | (reach == 0), True)
    beyond = a100.base_excess(X) / a100.base_span() == reach
    assert alone["ood_reason"][(reach > 0) & beyond].str.contains(
        "throughput_a100 layer-cost estimate").all()


def test_base_excess_is_the_distance_beyond_the_training_range():
    model = TargetSurrogate("xgboost", {"n_estimators": 5, "n_jobs": 1}, 1, base_column=0)
    X = np.column_stack([np.linspace(1.0, 2.0, 50), np.zeros(50)])
    model.fit(X, X[:, 0])
    probe = np.array([[0.5, 0.0], [1.5, 0.0], [2.25, 0.0]])
    np.testing.assert_allclose(model.base_excess(probe), [0.5, 0.0, 0.25])
    np.testing.assert_allclose(model._base(probe), probe[:, 0])  # not clipped
    ood = {"ood": np.array([False, False, True]),
           "ood_reason": np.array(["", "", "params 0.10 log units above the training range"],
                                  dtype=object)}
    out = flag_extrapolation(ood, {"latency_x": model.base_excess(probe)}, {"latency_x": "log"},
                             {"latency_x": model.base_span()})
    assert out["ood"].tolist() == [True, False, True]
    assert out["ood_reason"][0] == ("latency_x layer-cost estimate 0.50 log units beyond its "
                                    "training range")
    assert out["ood_reason"][2].startswith("params 0.10 log units above the training range; "
                                           "latency_x layer-cost estimate 0.25")


def test_the_reason_names_the_target_furthest_out_relative_to_its_range():
    """Percentage points and log units are compared as shares of each target's range."""
    ood = {"ood": np.zeros(1, dtype=bool), "ood_reason": np.array([""], dtype=object)}
    excess = {"val_top1": np.array([0.5]), "latency_x": np.array([0.2])}
    transforms = {"val_top1": "identity", "latency_x": "log"}
    out = flag_extrapolation(ood, excess, transforms, {"val_top1": 10.0, "latency_x": 1.0})
    assert out["ood_reason"][0] == ("latency_x layer-cost estimate 0.20 log units beyond its "
                                    "training range")
    out = flag_extrapolation(ood, excess, transforms, {"val_top1": 2.0, "latency_x": 1.0})
    assert out["ood_reason"][0].startswith("val_top1 layer-cost estimate 0.50 beyond")


@pytest.fixture(scope="module")
def no_se(released):
    """The released data's TPU v3 and ZCU102 throughput, and who has squeeze-excite."""
    prepared = _only(released, ["throughput_tpuv3", "throughput_zcu102"])
    return prepared, (prepared.choices[:, :, 3] == 1).any(axis=1)


def _fit_without_se(no_se, target: str, hole_folds: int | None = None):
    """Fitted on ``target`` alone without squeeze-excite (``hole_folds``: the config's
    internal hold-outs, by default the packaged config's)."""
    prepared, has_se = no_se
    config = FitConfig(default=SMALL, per_target={})
    if hole_folds is not None:
        config = replace(config, hole_folds=hole_folds)
    bench = fit_benchmark(_without(_only(prepared, [target]), has_se), config, progress=False)
    rows = has_se & prepared.labels[target].present
    y = np.log(prepared.labels[target].values[rows])
    return bench, prepared.choices[rows], y


@pytest.mark.slow
def test_a_unit_unseen_in_every_slot_widens_by_its_share_of_the_layers(no_se):
    """Bug class: a unit no training architecture holds in any slot (squeeze-excite, when a
    first campaign had none) widened like any rare combination, though the layer-cost model
    knows only its analytic costs: trained without SE, the TPU v3 throughput of the
    architectures with SE was covered at 0.42 in ``benchmarks/shift.py`` (no-SE family).
    Whole-unit folds learn a std per unit of ``ood_unit``, the share of the layers in such
    units: coverage 0.93 with it alone, 0.14 without it or the prior for SE's own work (below),
    0.99 with both (sharpness 2.5)."""
    target = "throughput_tpuv3"
    prepared, has_se = no_se
    c = prepared.choices
    bench, choices, y = _fit_without_se(no_se, target)
    units = prepared.space.cost_units(c[~has_se])
    seen = set(np.unique(units.units[units.counts > 0]).tolist())
    assert bench.support.unseen_units().tolist() == sorted(set(range(12)) - seen)
    assert len(seen) == 6
    layers, se = choices[:, :, 2], choices[:, :, 3]
    ood = bench.ood(choices)
    np.testing.assert_allclose(ood["ood_unit"], (layers * se).sum(1) / layers.sum(1))
    assert not bench.ood(c[~has_se])["ood_unit"].any()
    unit_std = bench.support.unit_std_[target]
    assert unit_std > 0 and bench.info["targets"][target]["unit_std"] == unit_std
    mean, std = bench.predict_transformed(choices, [target], ood)[target]
    alone = {**ood, "ood_unmeasured": 0 * ood["ood_unmeasured"]}
    _, unit_only = bench.predict_transformed(choices, [target], alone)[target]
    _, narrow = bench.predict_transformed(choices, [target], {**alone, "ood_unit": 0 * std})[target]
    assert intervals.coverage(y, mean, unit_only, log=False) >= 0.85
    assert intervals.coverage(y, mean, narrow, log=False) < 0.6


@pytest.mark.slow
def test_work_no_training_architecture_had_is_priced_and_covered(no_se, drop_idle_prior):
    """Trained without squeeze-excite, SE's own work had speed 0 and no std of its own: the
    ZCU102 throughput of the architectures with SE was off by 91 % (MAPE) and covered at 0.02
    in ``benchmarks/shift.py``'s no-SE family. SE's work now takes the median speed of the
    work seen and its units' share of the prediction widens by ``UNMEASURED_STD``. Measured
    here (small trees, this target alone): MAPE 49 % (was 91 %), coverage 0.78 (0.36 without
    the prior's term); in the no-SE family (packaged configuration) 0.97."""
    target = "throughput_zcu102"
    bench, choices, y = _fit_without_se(no_se, target)
    ood = bench.ood(choices)
    assert (ood["ood_unmeasured"][:, 0] > 0).all()
    mean, std = bench.predict_transformed(choices, [target], ood)[target]
    plain = {**ood, "ood_unmeasured": 0 * ood["ood_unmeasured"]}
    _, narrow = bench.predict_transformed(choices, [target], plain)[target]
    assert intervals.coverage(y, mean, std, log=False) >= 0.75
    assert intervals.coverage(y, mean, narrow, log=False) < 0.45
    drop_idle_prior()
    before, _, _ = _fit_without_se(no_se, target, hole_folds=0)  # its mean alone is compared
    old = before.predict_transformed(choices, [target])[target][0]
    mape = {name: np.mean(np.abs(np.exp(m - y) - 1)) for name, m in (("new", mean), ("old", old))}
    assert mape["new"] < 0.6 * mape["old"]


def test_an_op_unseen_on_every_nb201_edge_is_covered():
    """Bug class: a whole-unit fold capped at 80 % of the rows never runs on NAS-Bench-201 with
    one op unseen (each other op is on one of the 6 edges of 82 % of the architectures), so
    the unit std stayed 0: HELP's TITAN X latencies (batch 256) without avg_pool_3x3 covered
    the architectures holding it at 0.02. Now the folds run: coverage 1.0 (sharpness 3.7)."""
    prepared = _help_nb201("titanx_256")
    space, target = prepared.space, next(iter(prepared.labels))
    has_pool = (space.positions(prepared.choices) == 4).any(axis=1)
    rng = np.random.default_rng(0)
    train = np.zeros(len(has_pool), dtype=bool)
    train[rng.choice(np.flatnonzero(~has_pool), 1500, replace=False)] = True
    cut = rng.random(len(train)) < 0.8
    masks = {"train": train & cut, "val": train & ~cut, "test": np.zeros(len(train), bool)}
    sub = Prepared(prepared.frame, prepared.choices, masks, prepared.labels, space)
    assert len(unit_folds(prepared.choices[train], space)) == 4  # one per op still seen
    bench = fit_benchmark(sub, FitConfig(default=SMALL, per_target={}), progress=False)
    assert bench.support.unseen_units().tolist() == [4]
    assert bench.support.unit_std_[target] > 0
    held = has_pool & (rng.random(len(train)) < 0.1)
    coverage, _, _ = _scores(bench, prepared, held, target)
    assert coverage >= 0.85


def test_unit_folds_remove_every_row_holding_one_unit(mnasnet):
    seen = mnasnet.masks["train"] | mnasnet.masks["val"]
    choices = mnasnet.choices[seen]
    units = mnasnet.space.cost_units(choices)
    holds = (units.units[:, :, None] == np.arange(12)) & (units.counts[:, :, None] > 0)
    expected = [holds[:, :, u].any(axis=1) for u in range(12)]
    folds = unit_folds(choices, mnasnet.space)
    assert len(folds) == 12  # each unit is in 28-55 % of the architectures
    for fold, mask in zip(folds, expected, strict=True):
        np.testing.assert_array_equal(fold, mask)
    assert not unit_folds(choices[(choices[:, :, 3] == 0).all(axis=1)][:5], mnasnet.space)


def test_slot_rarity_marks_the_slots_whose_unit_the_training_data_lack(mnasnet):
    c = mnasnet.choices
    hole = (c[:, 6, 0] == 6) & (c[:, 6, 1] == 5)
    support = Support(mnasnet.space).fit(c[mnasnet.masks["train"] & ~hole])
    rarity = support.slot_rarity(c[hole])
    names = mnasnet.space.cost_units(c[:1]).slot_names
    s6 = [names.index("s6_first"), names.index("s6_later")]
    counts = mnasnet.space.cost_units(c[hole]).counts
    np.testing.assert_array_equal(rarity[:, s6], (counts[:, s6] > 0).astype(float))
    assert not np.delete(rarity, s6, axis=1).any()


def test_hole_share_is_the_part_of_the_prediction_resting_on_holed_units(mnasnet):
    """Log-space targets: the holed units' share of the predicted cost; accuracy: their
    contribution in percentage points (each weighted by its slot's rarity)."""
    train, labels = mnasnet.masks["train"], mnasnet.labels
    model = LayerCostModel().fit(
        mnasnet.choices[train],
        {t: (labels[t].values[train], labels[t].present[train]) for t in TARGETS},
        mnasnet.space)
    c = mnasnet.choices[:20]
    units = mnasnet.space.cost_units(c)
    rarity = np.zeros(units.counts.shape)
    rarity[:, 12], rarity[:, 0] = 1.0, 0.5
    share = model.hole_share(c, rarity)
    offsets = np.concatenate([[0], np.cumsum(units.widths)])
    for i, target in enumerate(model.targets_):
        weights = model.weights_[i]
        total = layer_design(c, mnasnet.space) @ weights  # time per image for throughput

        def part(s: int, weights: np.ndarray = weights) -> np.ndarray:
            return weights[offsets[s] + units.units[:, s]] * units.counts[:, s]

        held = part(12) + 0.5 * part(0)
        expected = np.abs(held) if target == "val_top1" else np.abs(held / total)
        np.testing.assert_allclose(share[:, i], expected, rtol=1e-10)


def test_under_a_floor_the_hole_share_is_what_the_saturated_time_moves(mnasnet):
    """Bug class: the hole share of a target with a floor taken from its additive sum, which
    overstates how much a prediction near the ceiling rests on the holed units. It is the
    first-order change of the predicted log time were those units' costs wrong by 100 %:
    checked by scaling them by 1 + 1e-6."""
    train, labels = mnasnet.masks["train"], mnasnet.labels
    target = "throughput_a100"
    model = LayerCostModel(trim=2.0, saturating=[target]).fit(
        mnasnet.choices[train], {target: (labels[target].values[train],
                                          labels[target].present[train])}, mnasnet.space)
    assert model.time_floor_[0] > 0
    values = np.where(labels[target].present, labels[target].values, 0.0)
    c = mnasnet.choices[np.argsort(-values)[:200]]  # the fastest: nearest the ceiling
    units = mnasnet.space.cost_units(c)
    rarity = np.zeros(units.counts.shape)
    rarity[:, 0], rarity[:, 3] = 1.0, 0.5
    share = model.hole_share(c, rarity)[:, 0]
    step = 1e-6
    moved = model._cost(units, 1.0 + step * rarity)[:, 0]
    time = saturate(model._cost(units)[:, 0], model.time_floor_[0], model.floor_power_[0])
    after = saturate(moved, model.time_floor_[0], model.floor_power_[0])
    np.testing.assert_allclose(share, np.abs(np.log(after / time)) / step, rtol=1e-4)
    additive = np.abs(model._cost(units, rarity)[:, 0] - model.weights_[0, -1]) \
        / model._cost(units)[:, 0]
    assert (share / additive).mean() < 0.92  # the sum's share overstates it (0.88 of it here)


@pytest.mark.slow
def test_top1_trained_without_se_answers_se_by_its_features_and_covers_it(released):
    """Bug class: a feature constant in training (the squeeze-excite bit, trained without
    any) was standardised by ``std + 1e-8``, so an SE architecture lay 1e8 from every support
    vector and the SVR member answered its intercept: in ``benchmarks/shift.py``'s no-SE
    family that member was 1.93 pp low against XGBoost's 1.02. Now both answer from the
    architecture's other features, and the interval still covers what no data without SE
    can say (what SE adds to accuracy)."""
    target = "val_top1"
    prepared = _only(released, [target])
    has_se = (prepared.choices[:, :, 3] == 1).any(axis=1)
    mixed = TargetConfig(["xgboost", "svr"], [SMALL.params, {"C": 3.0, "epsilon": 0.05}], 2)
    bench = fit_benchmark(_without(prepared, has_se),
                          FitConfig(default=mixed, per_target={}), progress=False)
    rows = has_se & prepared.labels[target].present
    choices, y = prepared.choices[rows], prepared.labels[target].values[rows]
    model = bench.models[target]
    assert model.member_family(1) == "svr"
    X = bench.builder.transform(choices)
    bits = [i for i, name in enumerate(bench.builder.names()) if name.endswith("_se")]
    assert len(bits) == ANB_SPACE.num_stages
    seen = X.copy()
    seen[:, bits] = bench.builder.transform(prepared.choices[~has_se][:1])[0, bits]
    svr = model.members_[1]
    np.testing.assert_allclose(svr.predict(X), svr.predict(seen), rtol=1e-6)
    mean, std = bench.predict_transformed(choices, [target])[target]
    assert intervals.coverage(y, mean, std, log=False) >= 0.85
