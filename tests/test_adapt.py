"""``anb adapt`` / ``anb.surrogates.adapt.api``: a new device from a few measurements.

The "new device" is latency_zcu102 of the released dataset, hidden from a small base surrogate
fitted on the other 7 device columns (published train split); its measured values come from the
dataset itself, written to a CSV as a user would.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau
from typer.testing import CliRunner

import anb
from anb import resources
from anb.cli import app
from anb.searchspace.arch import Arch
from anb.searchspace.space import ANB_SPACE
from anb.surrogates.adapt.api import adapt, read_measured, suggest
from anb.surrogates.adapt.choice import choose
from anb.surrogates.adapt.model import (
    BLENDS,
    CHOICE_RULE,
    STD_FACTOR,
    AdaptedModel,
    BenchmarkKnown,
    _basis,
    _nnls,
    _ridge,
    load_adapted,
    op_components,
)
from anb.surrogates.fit import prepare

HIDDEN = "latency_zcu102"
runner = CliRunner()


@pytest.fixture(scope="module")
def data():
    return prepare(resources.RELEASED_DATASET, space=ANB_SPACE)


@pytest.fixture(scope="module")
def base(tmp_path_factory, data):
    """A small surrogate of the 7 other devices (60 trees each)."""
    folder = tmp_path_factory.mktemp("adapt")
    config = folder / "tiny.json"
    config.write_text(json.dumps({"layer_cost_trim": 3.0, "default": {
        "family": "xgboost", "n_members": 1, "params": {"n_estimators": 60,
                                                        "learning_rate": 0.2}}}))
    others = [t for t in data.labels if t.startswith(("throughput_", "latency_")) and t != HIDDEN]
    out = folder / "base"
    result = runner.invoke(app, ["fit", str(resources.RELEASED_DATASET), "--out", str(out),
                                 "--config", str(config), "--targets", ",".join(others)])
    assert result.exit_code == 0, result.output
    return out


def _rows(data, part: str, n: int, seed: int) -> np.ndarray:
    lab = data.labels[HIDDEN]
    pool = np.flatnonzero(lab.present & data.masks[part])
    return np.random.default_rng(seed).choice(pool, n, replace=False) if n else pool


def _write_csv(path: Path, data, rows: np.ndarray) -> Path:
    frame = pd.DataFrame({"arch": data.frame["arch"].to_numpy()[rows],
                          HIDDEN: data.labels[HIDDEN].values[rows]})
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def adapted(tmp_path_factory, data, base, statistical_seed):
    folder = tmp_path_factory.mktemp("adapted")
    csv = _write_csv(folder / "my.csv", data, _rows(data, "train", 20, statistical_seed))
    out = folder / "model"
    result = runner.invoke(app, ["adapt", "--device", "zcu102", "--measured", str(csv),
                                 "--base", str(base), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return csv, out


@pytest.mark.slow
@pytest.mark.statistical
def test_adapt_beats_from_scratch_on_held_out_device(adapted, data, statistical_seed):
    """Transfer is what makes 20 points enough: XGBoost on the same 20 points ranks far worse
    (the base's throughput_zcu102, the same board, is not transferred from: tau 0.911).
    "Far worse" in misordered pairs, ``(1 - tau) / 2``: the adapted model's are at most a third
    of XGBoost's (seeds 0-4: 0.15-0.24 of them; an absolute margin of 0.3 in tau failed at
    seeds 2 and 3, where XGBoost's draw ranks 0.61)."""
    import xgboost as xgb

    from anb.surrogates.features import FeatureBuilder

    csv, out = adapted
    bench = load_adapted(out)
    test = _rows(data, "test", 0, 0)
    truth = data.labels[HIDDEN].values[test]
    pred = bench.query(data.choices[test], [HIDDEN])[HIDDEN].to_numpy()
    tau = kendalltau(pred, truth)[0]
    train = _rows(data, "train", 20, statistical_seed)
    X = FeatureBuilder("features", space=ANB_SPACE).transform(data.choices)
    scratch = xgb.XGBRegressor(n_estimators=300, max_depth=3, learning_rate=0.05, n_jobs=1).fit(
        X[train], np.log(data.labels[HIDDEN].values[train])).predict(X[test])
    scratch_tau = kendalltau(scratch, truth)[0]
    assert tau > 0.9 and (1 - tau) / 2 <= (1 - scratch_tau) / 2 / 3, (tau, scratch_tau)


@pytest.mark.statistical
def test_interval_covers_about_90_percent_of_test_labels(adapted, data):
    _, out = adapted
    test = _rows(data, "test", 0, 0)
    bench = load_adapted(out)
    mean, std, _ = bench.predict_adapted(data.choices[test], HIDDEN)
    inside = np.abs(np.log(data.labels[HIDDEN].values[test]) - mean) <= 1.645 * std
    # one draw of 20: 0.969 before the board prior joined the additive model, 0.971 with it,
    # 0.984 with the std scoring the blend choice out of fold and the t quantile (1.05 at
    # n = 20), 0.994 with the rank choice from 20 rows (its std scores that choice out of fold;
    # 8 draws of 20 scored on the validation rows: mean 0.915) (the whole-board benchmark's
    # 10-draw mean for this metric at n = 20: 0.902), 0.996 with the rank regime's std
    # multiplier (1.05, adapt_calibration.py) and the fallback ratio; 1.000 with the anchored
    # own model joining from 20 rows (adapt.anchored: its spread about the blend widens this
    # draw's std; the whole-board benchmark's 10-draw mean for this metric at n = 20: 0.937),
    # so one draw bounds it from below only
    assert 0.85 <= inside.mean(), inside.mean()
    assert np.allclose(bench.query(data.choices[test], [HIDDEN])[HIDDEN], np.exp(mean))


def test_artifact_is_checksummed_and_queryable_beside_base_metrics(adapted, data, base,
                                                                   tmp_path):
    import shutil

    _, out = adapted
    bench = load_adapted(out)
    arch = str(Arch.from_choices(data.choices[0], ANB_SPACE))
    frame = bench.query([arch])
    assert list(frame.columns[:3]) == ["arch", "latency_vck190", "latency_vck190_std"]
    assert frame["arch"].tolist() == [arch]
    assert list(frame.columns[-7:]) == [HIDDEN, f"{HIDDEN}_std", f"{HIDDEN}_ood", "ood",
                                        "ood_distance", "ood_cost", "ood_reason"]
    assert len(bench.metrics) == 8 and HIDDEN in bench.metrics
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["targets"][HIDDEN]["n_points"] == 20
    # adapting zcu102 hides the whole board: the base's throughput_zcu102 is no known device
    assert manifest["targets"][HIDDEN]["known"] == [
        t for t in bench.base.metrics if t not in ("val_top1", "throughput_zcu102")]
    assert manifest["anb_version"] == anb.__version__
    copy = shutil.copytree(out, tmp_path / "copy")
    assert load_adapted(copy, base).query([arch]).equals(frame)
    weights = copy / "adapted.npz"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(ValueError, match="corrupted or tampered"):
        load_adapted(copy, base)


def test_suggest_returns_k_distinct_unmeasured_archs(adapted, base):
    csv, _ = adapted
    result = runner.invoke(app, ["adapt", "--device", "zcu102", "--measured", str(csv),
                                 "--base", str(base), "--suggest", "6", "--candidates", "500"])
    assert result.exit_code == 0, result.output
    lines = result.output.split()
    measured = set(pd.read_csv(csv)["arch"])
    assert len(lines) == 6 and len(set(lines)) == 6 and not set(lines) & measured
    assert all(str(Arch.from_string(a, ANB_SPACE)) == a for a in lines)
    # the suggestion spreads over what is already known: it never repeats a measured design
    again = suggest(base, 6, csv, "zcu102", n_candidates=500)
    assert again == lines


@pytest.mark.parametrize("content, message", [
    ("arch,latency_zcu102\n{a},4.0\n{a},5.0\n", "needs at least 5|at least 5"),
    ("arch,latency_myboard\n{a},4.0\n", r"unknown device 'zcu102'.*latency_myboard"),
    ("arch,latency_zcu102\n{a},4.0\n{a},\n{a},3\n{a},3\n{a},3\n",
     r"row 2 .*column 'latency_zcu102' has nan; every measured architecture needs a positive"),
    ("arch,latency_zcu102\n{a},4.0\n{bad},4.0\n{a},3\n{a},3\n{a},3\n",
     r"row 2: architecture .* is outside the search space .*field 'l' has value 5; "
     r"allowed values are \[1, 2, 3, 4\]"),
])
def test_bad_measured_input_exits_with_clear_error_and_writes_nothing(tmp_path, base, content,
                                                                      message):
    a = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"
    bad = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l5se-e6k3l1se"
    csv = tmp_path / "m.csv"
    csv.write_text(content.format(a=a, bad=bad))
    out = tmp_path / "model"
    result = runner.invoke(app, ["adapt", "--device", "zcu102", "--measured", str(csv),
                                 "--base", str(base), "--out", str(out)])
    assert result.exit_code == 2
    assert __import__("re").search(message, result.output), result.output
    assert not out.exists() and not list(tmp_path.glob(".model*"))


def test_fit_rejects_non_device_target_and_too_few_points():
    ops = np.ones((3, 8))
    with pytest.raises(ValueError, match="at least 5 measured architectures"):
        AdaptedModel.fit("latency_x", ["a"], np.zeros((3, 1)), ops, np.ones(3), space=ANB_SPACE)
    with pytest.raises(ValueError, match="'val_top1' is not a device metric"):
        AdaptedModel.fit("val_top1", ["a"], np.zeros((6, 1)), np.ones((6, 8)), np.ones(6),
                         space=ANB_SPACE)


def _synthetic_device(n: int, seed: int):
    """Known-device log costs, op totals and a new device's latencies made from them."""
    rng = np.random.default_rng(seed)
    known_log = rng.normal(0.0, 0.3, (n, 3))
    ops = rng.uniform(1.0, 5.0, (n, 4))
    latency = np.exp(known_log @ [0.5, 0.3, 0.0] + rng.normal(0.0, 0.05, n)) + 0.1 * ops[:, 0]
    return known_log, ops, latency


def test_leave_one_out_errors_set_the_blend_and_its_rmse():
    """The blend weight and ``loo_rmse`` come from leave-one-out residuals by default and from
    in-sample ones with ``leave_one_out=False``; the fitted parts are the same either way."""
    known_log, ops, latency = _synthetic_device(40, 0)
    loo = AdaptedModel.fit("latency_x", ["a", "b", "c"], known_log, ops, latency, space=ANB_SPACE)
    fast = AdaptedModel.fit("latency_x", ["a", "b", "c"], known_log, ops, latency,
                            leave_one_out=False, space=ANB_SPACE)
    np.testing.assert_array_equal(loo.ridge_coef, fast.ridge_coef)
    np.testing.assert_array_equal(loo.nnls_weights, fast.nnls_weights)
    in_sample = fast.predict_log_cost(known_log, ops)[0] - np.log(latency)
    assert fast.loo_rmse == pytest.approx(float(np.sqrt(np.mean(in_sample**2))))
    # each left-out row predicted by the two parts refitted without it (same shrinkage)
    y = np.log(latency)
    held = np.empty((len(y), 2))
    for i in range(len(y)):
        rest = np.arange(len(y)) != i
        coef, intercept = _ridge(known_log[rest], y[rest], loo.ridge_alpha)
        weights = _nnls(_basis(known_log[rest], ops[rest], loo.known_scale, loo.op_scale),
                        np.exp(y[rest] - loo.level))
        held[i] = (known_log[i] @ coef + intercept, loo.level + np.log(
            _basis(known_log[i:i + 1], ops[i:i + 1], loo.known_scale, loo.op_scale)[0] @ weights))
    rmse = {b: float(np.sqrt(np.mean((held @ [b, 1 - b] - y) ** 2))) for b in BLENDS}
    assert loo.blend == min(rmse, key=rmse.__getitem__)
    # the std's error scores the choice out of fold: row i under the weight the rule picks
    # without it (choice.choose on these held-out errors, the hold included; the additive
    # model the fallback)
    blended = np.column_stack([held @ [b, 1 - b] - y for b in BLENDS])
    picked = choose(blended, np.zeros((len(y), 0)), y, BLENDS.index(0.0), CHOICE_RULE)
    assert BLENDS[picked.column] == loo.blend and loo.loo_rmse == pytest.approx(picked.rmse)
    assert loo.loo_rmse >= rmse[loo.blend] > fast.loo_rmse


def test_read_measured_accepts_anb_measure_records(tmp_path, data):
    """A results folder as 'anb measure' writes it (records with platform_perf) reads too."""
    rows = _rows(data, "train", 6, 1)
    for i in rows:
        arch = Arch.from_choices(data.choices[i], ANB_SPACE)
        record = {"architecture": arch.to_anb_dict(), "platform_perf": {
            "latency_myboard": {"latency_mean": float(data.labels[HIDDEN].values[i]),
                                "latency_std": 0.0}}}
        (tmp_path / f"{arch.id}.json").write_text(json.dumps(record))
    measured = read_measured(tmp_path, "myboard", space=ANB_SPACE)
    assert measured.target == "latency_myboard" and len(measured.values) == 6
    assert sorted(measured.values) == sorted(data.labels[HIDDEN].values[rows])


def test_python_adapt_matches_the_command(adapted, base, data, tmp_path):
    csv, out = adapted
    bench, model = adapt("zcu102", csv, base, tmp_path / "model")
    archs = data.choices[:5]
    assert model.target == HIDDEN and model.n_points == 20 and len(model.known) == 6
    pd.testing.assert_frame_equal(bench.query(archs), load_adapted(out).query(archs))
    unsaved, same = adapt("zcu102", csv, base)
    assert unsaved is None and same.blend == model.blend


def test_submit_queues_a_measure_job_per_suggested_arch(base, tmp_path):
    from anb.jobs.queue import open_queue

    queue = tmp_path / "queue.db"
    args = ["adapt", "--device", "cpu-ort", "--base", str(base), "--suggest", "4",
            "--candidates", "300", "--submit", "--queue", str(queue)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    archs = [line for line in result.stdout.split() if line.startswith("e")]
    with open_queue(str(queue)) as q:
        jobs = q.jobs(state="queued")
    assert sorted(j.arch for j in jobs) == sorted(archs) and len(archs) == 4
    assert {(j.device, j.stage) for j in jobs} == {("cpu-ort", "measure")}
    assert jobs[0].payload["device_config"]["backend"] == "onnxruntime"
    again = runner.invoke(app, args)
    assert "queued 0 measure job(s) on cpu-ort (4 already in the queue)" in again.output


def test_submit_needs_a_device_config_and_suggest(base, tmp_path):
    result = runner.invoke(app, ["adapt", "--device", "myboard", "--base", str(base),
                                 "--suggest", "2", "--candidates", "100", "--submit",
                                 "--queue", str(tmp_path / "q.db")])
    assert result.exit_code == 2 and "device='myboard' is invalid; allowed: a TOML file, a " \
        "shipped protocol config [" in result.output, result.output
    result = runner.invoke(app, ["adapt", "--device", "cpu-ort", "--base", str(base),
                                 "--submit"])
    assert result.exit_code == 2 and "give --suggest K" in result.output


def test_suggest_never_returns_measured_or_duplicate_candidates(base, data):
    """A pool made mostly of measured architectures (and repeats): only the others come back."""
    from anb.surrogates.adapt.model import BenchmarkKnown
    from anb.surrogates.adapt.select import suggest as select_next
    from anb.surrogates.artifact import load

    known = BenchmarkKnown(load(base))
    measured = data.choices[:30]
    fresh = data.choices[30:34]
    pool = np.concatenate([measured, fresh, fresh, measured])
    picked = select_next(known, 4, measured, pool=pool, space=ANB_SPACE)
    key = lambda rows: sorted(map(str, ANB_SPACE.archs_from_choices(rows)))  # noqa: E731
    assert key(picked) == key(fresh)


def test_out_of_range_architectures_are_flagged_with_wider_std(base, data):
    """Adapted on the 20 fastest-on-known-devices train architectures, the slowest test ones lie
    outside the measured range: they carry the flag and a std widened by how far outside they
    are."""
    from anb.surrogates.adapt.model import BenchmarkKnown, op_components
    from anb.surrogates.artifact import load

    known = BenchmarkKnown(load(base), exclude=[HIDDEN])
    train, test = _rows(data, "train", 0, 0), _rows(data, "test", 0, 0)
    K_train = known.log_costs(data.choices[train])
    rows = train[np.argsort(K_train.mean(1))[:200:10]]
    model = AdaptedModel.fit(HIDDEN, known.targets, known.log_costs(data.choices[rows]),
                             op_components(data.choices[rows], space=ANB_SPACE),
                             data.labels[HIDDEN].values[rows], space=ANB_SPACE)
    mean, std, ood = model.predict(known.log_costs(data.choices[test]),
                                   op_components(data.choices[test], space=ANB_SPACE))
    assert 0 < ood.sum() < len(test)
    from dataclasses import replace

    unbounded = replace(model, lo=np.full_like(model.lo, -1e9),
                        hi=np.full_like(model.hi, 1e9))
    same_mean, plain_std, none = unbounded.predict(known.log_costs(data.choices[test]),
                                                   op_components(data.choices[test],
                                                                 space=ANB_SPACE))
    assert not none.any() and np.allclose(same_mean, mean)
    assert np.all(std[ood] >= 1.1 * plain_std[ood]) and np.allclose(std[~ood], plain_std[~ood],
                                                                      rtol=0.11)


THROUGHPUT = "throughput_a100"


@pytest.fixture(scope="module")
def throughput_csv(tmp_path_factory, data, statistical_seed):
    """20 train architectures of throughput_a100, beside a latency_a100 column (both kinds)."""
    rows = np.random.default_rng(3 + statistical_seed).choice(
        np.flatnonzero(data.labels[THROUGHPUT].present & data.masks["train"]), 20, replace=False)
    values = data.labels[THROUGHPUT].values[rows]
    csv = tmp_path_factory.mktemp("a100") / "a100.csv"
    pd.DataFrame({"arch": data.frame["arch"].to_numpy()[rows], THROUGHPUT: values,
                  "latency_a100": 1000.0 / values}).to_csv(csv, index=False)
    return csv, rows


def test_few_measurements_say_the_transfer_alone_predicts(base, data, tmp_path):
    """Below CHOICE_MIN_POINTS rows ``anb adapt`` says that the additive transfer alone
    predicts and how many rows a device unlike the known ones needs; from there it does not."""
    from anb.surrogates.adapt.model import CHOICE_MIN_POINTS

    said = f"below {CHOICE_MIN_POINTS} measurements the known devices' additive transfer"
    for n, expected in ((CHOICE_MIN_POINTS - 1, True), (CHOICE_MIN_POINTS, False)):
        csv = _write_csv(tmp_path / f"m{n}.csv", data, _rows(data, "train", n, 1))
        result = runner.invoke(app, ["adapt", "--device", "zcu102", "--measured", str(csv),
                                     "--base", str(base), "--out", str(tmp_path / f"o{n}")])
        assert result.exit_code == 0, result.output
        assert (said in result.output) is expected, result.output
        model = load_adapted(tmp_path / f"o{n}").models[HIDDEN]
        assert model.n_points == n


def test_file_with_both_kinds_needs_metric(throughput_csv, base, tmp_path):
    csv, _ = throughput_csv
    out = tmp_path / "model"
    result = runner.invoke(app, ["adapt", "--device", "a100", "--measured", str(csv),
                                 "--base", str(base), "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert "has both ['throughput_a100', 'latency_a100']; choose one with " in result.output
    assert "--metric throughput|latency" in result.output, result.output
    with pytest.raises(ValueError, match="choose one with metric='throughput' or "
                                         "metric='latency'"):
        adapt("a100", csv, base)  # the Python API names its own argument
    with pytest.raises(ValueError, match="unknown metric 'speed'"):
        read_measured(csv, "a100", "speed", space=ANB_SPACE)
    result = runner.invoke(app, ["adapt", "--device", "a100", "--measured", str(csv),
                                 "--base", str(base), "--out", str(out), "--metric",
                                 "throughput"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("throughput_a100: adapted from 20 measured architectures")
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["targets"]) == [THROUGHPUT]


@pytest.mark.statistical
def test_throughput_target_ranks_test_split_and_keeps_its_sign(throughput_csv, base, data):
    """throughput_a100 adapted from 20 train points (--metric throughput through the Python API):
    test-split tau well above XGBoost from scratch on the same points, and the direction is
    throughput's: larger predicted value = faster design, the smallest design beats the largest."""
    import xgboost as xgb

    from anb.surrogates.features import FeatureBuilder

    csv, rows = throughput_csv
    unsaved, model = adapt("a100", csv, base, metric="throughput")
    assert unsaved is None and model.target == THROUGHPUT and THROUGHPUT not in model.known
    latency_model = adapt("a100", csv, base, metric="latency")[1]
    assert latency_model.target == "latency_a100"
    from anb.surrogates.adapt.model import BenchmarkKnown, op_components
    from anb.surrogates.artifact import load

    known = BenchmarkKnown(load(base), exclude=[THROUGHPUT])
    assert known.targets == model.known
    test = np.flatnonzero(data.labels[THROUGHPUT].present & data.masks["test"])
    truth = data.labels[THROUGHPUT].values[test]
    mean, std, _ = model.predict(known.log_costs(data.choices[test]),
                                 op_components(data.choices[test], space=ANB_SPACE),
                                 **model.design_inputs(data.choices[test], ANB_SPACE))
    tau = kendalltau(mean, truth)[0]
    X = FeatureBuilder("features", space=ANB_SPACE).transform(data.choices)
    scratch = xgb.XGBRegressor(n_estimators=300, max_depth=3, learning_rate=0.05, n_jobs=1).fit(
        X[rows], np.log(data.labels[THROUGHPUT].values[rows])).predict(X[test])
    scratch_tau = kendalltau(scratch, truth)[0]
    assert tau > 0.95 and tau > scratch_tau + 0.15, (tau, scratch_tau)
    # model space is log(throughput): its exp is on the measured scale, not its inverse
    assert abs(np.median(mean) - np.median(np.log(truth))) < 0.3
    inside = np.abs(np.log(truth) - mean) <= 1.645 * std
    assert 0.8 <= inside.mean() <= 0.99, inside.mean()
    # the latency model of the same file (1000 / throughput) ranks the other way round; it
    # never transfers from the same board's throughput_a100 the base knows: 6 known devices
    lat_known = BenchmarkKnown(load(base), exclude=["latency_a100", THROUGHPUT])
    assert lat_known.targets == latency_model.known and len(latency_model.known) == 6
    assert model.known == latency_model.known
    lat_mean, _, _ = latency_model.predict(
        lat_known.log_costs(data.choices[test]), op_components(data.choices[test], space=ANB_SPACE),
        **latency_model.design_inputs(data.choices[test], ANB_SPACE))
    assert kendalltau(lat_mean, truth)[0] < -0.9

    small = [[min(spec.allowed(f)) for f in ("e", "k", "l", "se")] for spec in ANB_SPACE.stages]
    large = [[max(spec.allowed(f)) for f in ("e", "k", "l", "se")] for spec in ANB_SPACE.stages]
    both = np.array([small, large], dtype=np.int64)  # the smallest and the largest design
    fast, slow = model.predict(known.log_costs(both), op_components(both, space=ANB_SPACE),
                               **model.design_inputs(both, ANB_SPACE))[0]
    assert fast > slow + 0.5, (fast, slow)


@pytest.mark.slow
def test_adapted_folder_is_a_benchmark_everywhere(adapted, base, data, tmp_path):
    """anb.load, anb.surrogates.load, `anb query` and `anb search --benchmark` all take it."""
    import anb.surrogates

    _, out = adapted
    archs = [str(Arch.from_choices(c, ANB_SPACE)) for c in data.choices[:6]]
    reference = load_adapted(out).query(archs)
    for loaded in (anb.load(out), anb.surrogates.load(out), anb.load(str(out))):
        pd.testing.assert_frame_equal(loaded.query(archs), reference)
    assert reference["arch"].tolist() == archs
    assert reference["ood"].dtype == bool and (reference[f"{HIDDEN}_std"] > 0).all()

    result = runner.invoke(app, ["query", str(out), "-"], input="\n".join(archs) + "\n")
    assert result.exit_code == 0, result.output
    printed = pd.read_csv(__import__("io").StringIO(result.stdout))
    assert list(printed.columns) == list(reference.columns)
    np.testing.assert_allclose(printed[HIDDEN], reference[HIDDEN], rtol=1e-5)

    noisy = load_adapted(out).query(archs, [HIDDEN], noise=True, seed=3)
    assert noisy.equals(load_adapted(out).query(archs, [HIDDEN], noise=True, seed=3))
    assert not np.allclose(noisy[HIDDEN], reference[HIDDEN])
    np.testing.assert_allclose(noisy[f"{HIDDEN}_std"], reference[f"{HIDDEN}_std"])

    search = tmp_path / "search"
    result = runner.invoke(app, ["search", "--benchmark", str(out), "-o", f"{HIDDEN}:min",
                                 "-o", "throughput_a100", "--budget", "40", "--out", str(search)])
    assert result.exit_code == 0, result.output
    best = json.loads((search / "summary.json").read_text())["best"]
    assert best[HIDDEN] == pytest.approx(
        float(load_adapted(out).query([best["arch"]], [HIDDEN])[HIDDEN].iloc[0]), rel=1e-9)


def test_an_adapted_folder_is_not_a_base_to_adapt_on(adapted, tmp_path):
    csv, out = adapted
    with pytest.raises(ValueError, match="is an adapted surrogate; adapt on the surrogate"):
        adapt("zcu102", csv, out, tmp_path / "again")


def test_repeated_measurements_of_a_design_are_averaged(base, data, tmp_path):
    """8 rows of one design plus 19 others: 20 designs, fitted as on the averaged rows."""
    rows = _rows(data, "train", 20, 3)
    frame = pd.DataFrame({"arch": data.frame["arch"].to_numpy()[rows],
                          HIDDEN: data.labels[HIDDEN].values[rows]})
    repeats = frame.iloc[[0]].loc[[0] * 8].assign(**{HIDDEN: frame[HIDDEN][0] * np.linspace(
        0.9, 1.1, 8) + 0.3})
    with_repeats = pd.concat([frame.iloc[:5], repeats, frame.iloc[5:]], ignore_index=True)
    averaged = frame.copy()
    averaged.loc[0, HIDDEN] = np.mean(np.r_[frame[HIDDEN][0], repeats[HIDDEN]])
    with_repeats.to_csv(tmp_path / "repeats.csv", index=False)
    averaged.to_csv(tmp_path / "averaged.csv", index=False)

    result = runner.invoke(app, ["adapt", "--device", "zcu102", "--measured",
                                 str(tmp_path / "repeats.csv"), "--base", str(base), "--out",
                                 str(tmp_path / "model")])
    assert result.exit_code == 0, result.output
    assert "adapted from 20 measured architectures (28 measurements, repeats averaged)" in \
        result.output
    _, fitted = adapt("zcu102", tmp_path / "repeats.csv", base)
    _, reference = adapt("zcu102", tmp_path / "averaged.csv", base)
    assert fitted.n_points == reference.n_points == 20
    for key, value in reference.arrays().items():
        np.testing.assert_allclose(fitted.arrays()[key], value, rtol=1e-12, err_msg=key)
    for key, value in reference.scalars().items():
        assert fitted.scalars()[key] == (pytest.approx(value) if isinstance(value, float)
                                         else value), key
    measured = json.loads((tmp_path / "model" / "manifest.json").read_text())["measured"]
    values = np.r_[frame[HIDDEN][0], repeats[HIDDEN]]
    assert measured["n"] == 20 and measured["rows"] == 28
    assert measured["repeated"] == [{"arch": frame["arch"][0], "n": 9,
                                     "mean": pytest.approx(values.mean()),
                                     "std": pytest.approx(values.std(ddof=1))}]

    few = pd.concat([repeats, frame.iloc[1:4]], ignore_index=True)
    few.to_csv(tmp_path / "few.csv", index=False)
    with pytest.raises(ValueError,
                       match=r"holds 4 distinct measured architectures of "
                             r"'latency_zcu102' \(11 rows\); adapting needs at least 5"):
        read_measured(tmp_path / "few.csv", "zcu102", space=ANB_SPACE)


def test_known_devices_transfer_their_compute_bound_sums_not_their_floors(base, data):
    """Bug class: a known device's saturating base (the VCK190's host ceiling) handed to the
    adaptation capped, so the transfer lost the compute-bound order of the fastest networks
    (test-split coverage of the adapted ZCU102 latency 0.973, over the 0.97 this file allows).
    The known devices give their additive sums without the floor."""
    from anb.surrogates.adapt.model import BenchmarkKnown

    bench = anb.load(base)
    layer_cost = bench.builder.layer_cost
    assert layer_cost.saturates("throughput_vck190")
    known = BenchmarkKnown(bench, exclude=["latency_zcu102", "throughput_zcu102"])
    fast = data.choices[:200]
    column = known.log_costs(fast)[:, known.targets.index("throughput_vck190")]
    vck = layer_cost.targets_.index("throughput_vck190")
    np.testing.assert_array_equal(
        column, -layer_cost.transform(fast, saturated=False)[:, vck])
    assert not np.allclose(column, -layer_cost.transform(fast)[:, vck])


def _zcu102_board(base, data, rows: np.ndarray):
    """Known-device log costs (the whole ZCU102 hidden) and op totals over all rows, and the
    hidden latency's values on ``rows``."""
    from anb.surrogates.adapt.model import BenchmarkKnown, device_metrics, op_components

    known = BenchmarkKnown(anb.load(base), exclude=device_metrics(HIDDEN))
    return (known, known.log_costs(data.choices), op_components(data.choices, space=ANB_SPACE),
            data.labels[HIDDEN].values[rows])


def test_the_own_layer_model_is_scored_out_of_fold_and_joins_the_blend(base, data,
                                                                       monkeypatch):
    """Given the measured choices (from OWN_MIN_POINTS of them), the device's own per-layer
    model is a third part: its out-of-fold errors (each row predicted by the model refitted
    without its fold) enter the choice of the blend weights and ``loo_rmse``, and the mean is the
    weighted parts. (The plain own model: the ZCU102's anchored one, from 20 rows, is
    tests/test_anchored.py's.)"""
    from anb.surrogates.adapt import anchored

    monkeypatch.setattr(anchored, "MIN_POINTS", 10**6)
    from anb.surrogates.adapt.board_prior import COMPONENTS
    from anb.surrogates.adapt.choice import selected_rmse
    from anb.surrogates.adapt.embed import EmbedModel, arch_features
    from anb.surrogates.adapt.model import (
        OWN_FOLDS,
        OWN_MIN_POINTS,
        _additive,
        _blend_grid,
        _fit_own,
        loo_residuals,
    )

    rows = _rows(data, "train", OWN_MIN_POINTS, 4)
    known, K, ops, values = _zcu102_board(base, data, rows)
    model = AdaptedModel.fit(HIDDEN, known.targets, K[rows], ops[rows], values,
                             choices=data.choices[rows], space=ANB_SPACE)
    assert model.has_own and len(_blend_grid(True)) == 15
    fewer = AdaptedModel.fit(HIDDEN, known.targets, K[rows[1:]], ops[rows[1:]], values[1:],
                             choices=data.choices[rows[1:]], space=ANB_SPACE)
    assert not fewer.has_own and fewer.own_log_cost(data.choices[rows], ANB_SPACE) is None
    y = np.log(values)
    space = anb.load(base).space
    # the ZCU102's analytic prior extends the op totals (anb.surrogates.adapt.board_prior)
    prior = model.prior_parts(data.choices, ANB_SPACE)
    assert model.board_prior == "zcu102" and prior is not None
    ops = np.concatenate([ops, prior], axis=1)
    own = np.empty(len(rows))  # 20 folds: row i held out with every row j = i mod 20
    for k in range(OWN_FOLDS):
        held = np.arange(len(rows)) % OWN_FOLDS == k
        own[held] = _fit_own(HIDDEN, data.choices[rows[~held]], values[~held], space).transform(
            data.choices[rows[held]], space)[:, 0] - y[held]  # model space: log latency
    features, block = arch_features(space, data.choices[rows])
    embed = EmbedModel.fit(K[rows], features, block, y)[1]
    parts = np.column_stack([loo_residuals(K[rows], ops[rows], y, model.ridge_alpha,
                                           model.known_scale, model.op_scale, model.level), own,
                             embed])
    rmse = {(r, o, e): float(np.sqrt(np.mean((parts @ [r, 1 - r - o - e, o, e]) ** 2)))
            for r, o, e in _blend_grid(True, True)}
    chosen = (model.blend, model.own_blend, model.embed_blend)
    assert chosen == min(rmse, key=rmse.__getitem__)
    assert model.transfer_rmse == pytest.approx(rmse[chosen])
    assert model.loo_rmse == pytest.approx(selected_rmse(np.column_stack(
        [parts @ [r, 1 - r - o - e, o, e] for r, o, e in _blend_grid(True, True)])))
    test = _rows(data, "test", 0, 0)[:50]
    ridge = K[test] @ model.ridge_coef + model.ridge_intercept
    additive = _additive(K[test], ops[test], model.known_scale, model.op_scale,
                         model.nnls_weights, model.level)
    own_test = model.own_log_cost(data.choices[test], ANB_SPACE)
    test_features = arch_features(space, data.choices[test])[0]
    embed_test = model.embed.log_cost(K[test], test_features)
    mean = model.predict_log_cost(K[test], ops[test, :-len(COMPONENTS)], own_test,
                                  prior=prior[test], features=test_features)[0]
    np.testing.assert_allclose(mean, model.blend * ridge + model.own_blend * own_test
                               + model.embed_blend * embed_test
                               + (1 - model.blend - model.own_blend - model.embed_blend)
                               * additive, rtol=1e-9)
    with pytest.raises(ValueError, match="needs the own model's log costs"):
        model.predict_log_cost(K[test], ops[test, :-len(COMPONENTS)], prior=prior[test],
                               features=test_features)


@pytest.mark.slow
def test_a_whole_new_board_ranks_better_from_its_own_layers_as_measurements_grow(base, data):
    """The transfer alone plateaus for a board no known device stands in for (its ceiling on
    every train label: tau about 0.92 on the ZCU102); from 100 measured architectures the
    board's own per-layer model lifts the blend well past it (validation split of
    benchmarks/new_device.py --protocol board)."""
    rows = _rows(data, "train", 100, 5)
    test = _rows(data, "test", 0, 0)
    known, K, ops, values = _zcu102_board(base, data, rows)
    truth = data.labels[HIDDEN].values[test]
    with_own = AdaptedModel.fit(HIDDEN, known.targets, K[rows], ops[rows], values,
                                choices=data.choices[rows], space=ANB_SPACE)
    transfer = AdaptedModel.fit(HIDDEN, known.targets, K[rows], ops[rows], values, space=ANB_SPACE)
    tau_own = kendalltau(with_own.predict_log_cost(
        K[test], ops[test], **with_own.design_inputs(data.choices[test], ANB_SPACE))[0],
        truth)[0]
    tau_transfer = kendalltau(transfer.predict_log_cost(K[test], ops[test])[0], truth)[0]
    assert with_own.own_blend > 0
    assert tau_own > tau_transfer + 0.02, (tau_own, tau_transfer)


def test_the_std_widens_by_the_weighted_disagreement_of_the_blended_models(base, data):
    """Half-way between two models their disagreement adds half their gap; a model with all
    the weight adds none (its own held-out error is the whole std)."""
    from dataclasses import replace

    rows = _rows(data, "train", 20, 6)
    known, K, ops, values = _zcu102_board(base, data, rows)
    model = AdaptedModel.fit(HIDDEN, known.targets, K[rows], ops[rows], values, space=ANB_SPACE)
    test = _rows(data, "test", 0, 0)[:50]
    wide = replace(model, lo=np.full_like(model.lo, -1e9), hi=np.full_like(model.hi, 1e9))
    ridge = K[test] @ model.ridge_coef + model.ridge_intercept
    additive = replace(wide, blend=0.0).predict_log_cost(K[test], ops[test])[0]
    half = replace(wide, blend=0.5).predict_log_cost(K[test], ops[test])[1]
    np.testing.assert_allclose(half, model.std_factor * np.sqrt(
        model.loo_rmse**2 + (0.5 * (ridge - additive)) ** 2))
    for blend in (0.0, 1.0):
        np.testing.assert_allclose(replace(wide, blend=blend).predict_log_cost(
            K[test], ops[test])[1], model.std_factor * model.loo_rmse)


def adapted_choices(adapted) -> list[np.ndarray]:
    """The choices of the architectures the ``adapted`` fixture measured."""
    frame = pd.read_csv(adapted[0])
    return [Arch.from_string(a, ANB_SPACE).to_choices() for a in frame["arch"][:3]]


def test_an_adapted_folder_of_format_1_still_reads(adapted, tmp_path):
    """Folders written before the own model (format 1: no own weights) load and predict
    from their transfer parts alone."""
    import hashlib
    import shutil

    from anb.surrogates.adapt.model import WEIGHTS_FILE, _digest

    _, out = adapted
    old = shutil.copytree(out, tmp_path / "old", symlinks=True)
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["base"]["path"] = os.path.relpath(
        (out.parent / manifest["base"]["path"]).resolve(), tmp_path)
    with np.load(old / WEIGHTS_FILE) as data:
        arrays = {k: data[k] for k in data.files
                  if not k.endswith(".own_weights") and ".embed_" not in k}
    np.savez(old / WEIGHTS_FILE, **arrays)
    for scalars in manifest["targets"].values():
        del scalars["own_blend"], scalars["own_floor"]
        del scalars["embed_blend"], scalars["embed_intercept"]
        scalars["blend"] = 0.5
    manifest["format_version"] = 1
    manifest["files"][WEIGHTS_FILE] = hashlib.sha256((old / WEIGHTS_FILE).read_bytes()
                                                     ).hexdigest()
    manifest["manifest_sha256"] = _digest(manifest)
    (old / "manifest.json").write_text(json.dumps(manifest))
    model = load_adapted(old).models[HIDDEN]
    assert not model.has_own and model.own_blend == 0.0
    frame = load_adapted(old).query([str(Arch.from_choices(choice, ANB_SPACE))
                                     for choice in adapted_choices(adapted)])
    assert (frame[HIDDEN] > 0).all()


def test_an_adapted_folder_keeps_its_own_layer_model(base, data, tmp_path):
    """From OWN_MIN_POINTS measurements the folder ``anb adapt`` writes holds the own model
    (format 2): loaded back, it predicts exactly what the fitted model did."""
    from anb.formats import current
    from anb.surrogates.adapt.model import OWN_MIN_POINTS

    csv = _write_csv(tmp_path / "many.csv", data, _rows(data, "train", OWN_MIN_POINTS, 7))
    result = runner.invoke(app, ["adapt", "--device", "zcu102", "--measured", str(csv),
                                 "--base", str(base), "--out", str(tmp_path / "model")])
    assert result.exit_code == 0, result.output
    bench = load_adapted(tmp_path / "model")
    model = bench.models[HIDDEN]
    manifest = json.loads((tmp_path / "model" / "manifest.json").read_text())
    assert manifest["format_version"] == current("adapted") == 4 and model.has_own
    fitted = adapt("zcu102", csv, base)[1]
    np.testing.assert_array_equal(model.own_weights, fitted.own_weights)
    assert (model.own_floor, model.own_blend, model.blend, model.embed_blend) == (
        fitted.own_floor, fitted.own_blend, fitted.blend, fitted.embed_blend)
    assert fitted.embed is not None and model.embed is not None
    np.testing.assert_array_equal(model.embed.coef, fitted.embed.coef)
    test = _rows(data, "test", 0, 0)[:64]
    mean, std, _ = bench.predict_adapted(data.choices[test], HIDDEN)
    from anb.surrogates.adapt.model import BenchmarkKnown, device_metrics, op_components

    known = BenchmarkKnown(bench.base, exclude=device_metrics(HIDDEN))
    choices = data.choices[test]
    expected = fitted.predict(known.log_costs(choices), op_components(choices, space=ANB_SPACE),
                              **fitted.design_inputs(choices, ANB_SPACE))
    np.testing.assert_allclose(mean, expected[0], rtol=1e-12)
    np.testing.assert_allclose(std, expected[1], rtol=1e-12)
    np.testing.assert_allclose(bench.query(data.choices[test], [HIDDEN])[HIDDEN], np.exp(mean))


def test_best_proxy_picks_the_cost_the_device_follows_out_of_fold():
    from anb.searchspace.registry import get_space
    from anb.surrogates.adapt.proxy import (
        PROXY_NAMES,
        analytic_proxies,
        best_proxy,
        loo_residuals,
    )

    space = get_space("nasbench201")
    choices = space.choices_from_index(np.arange(0, 15625, 125))
    proxies = analytic_proxies(space, choices)
    assert tuple(proxies) == PROXY_NAMES
    # layer count: blocks with MACs (conv or pool), at most the six edges (stem/head are fixed)
    assert proxies["layers"].max() <= 6 and proxies["layers"].min() == 0
    rng = np.random.default_rng(0)
    y = 0.5 + 0.7 * np.log(np.maximum(proxies["activations"], 1)) + rng.normal(0, 0.01, 125)
    rows = np.arange(20)
    name, fitted = best_proxy(proxies, rows, y[rows])
    assert name == "activations"
    assert np.abs(fitted - y).max() < 0.05
    # the closed-form leave-one-out error equals refitting without each point
    x = np.log(proxies["macs"][rows])
    refits = [np.polyval(np.polyfit(np.delete(x, i), np.delete(y[rows], i), 1), x[i]) - y[i]
              for i in range(20)]
    np.testing.assert_allclose(loo_residuals(x, y[rows]), refits, rtol=1e-9)
    assert np.mean(loo_residuals(x, y[rows]) ** 2) == pytest.approx(np.mean(np.square(refits)))
    assert (loo_residuals(np.ones(5), np.arange(5.0)) == float("inf")).all()


def test_a_proxy_that_beats_the_transfer_out_of_fold_predicts(base, data, tmp_path):
    """Never worse than simple: a device whose latency follows the parameter count (times
    2 % noise: weight-streaming bound, unlike every known device), measured on
    CHOICE_MIN_POINTS architectures (too few for the richer parts to beat a 2-parameter line
    out of fold), is
    predicted by that line, chosen on the leave-one-out error, with that error as its std; the
    transfer alone ranks it worse. On latency_zcu102 the transfer wins (the adapted fixture)."""
    from dataclasses import replace

    from anb.searchspace.space import ANB_SPACE
    from anb.surrogates.adapt.model import CHOICE_MIN_POINTS
    from anb.surrogates.adapt.proxy import analytic_proxies

    rng = np.random.default_rng(5)
    params = analytic_proxies(ANB_SPACE, data.choices)["params"]
    latency = 1e-5 * params * np.exp(0.02 * rng.standard_normal(len(params)))
    rows = _rows(data, "train", CHOICE_MIN_POINTS, 3)
    csv = tmp_path / "params.csv"
    pd.DataFrame({"arch": data.frame["arch"].to_numpy()[rows],
                  "latency_paramsbox": latency[rows]}).to_csv(csv, index=False)
    result = runner.invoke(app, ["adapt", "--device", "paramsbox", "--measured", str(csv),
                                 "--base", str(base), "--out", str(tmp_path / "model")])
    assert result.exit_code == 0, result.output
    assert "latency_paramsbox: the params proxy predicts" in result.output
    bench = load_adapted(tmp_path / "model")
    model = bench.models["latency_paramsbox"]
    assert model.proxy == "params" and model.proxy_rmse < model.transfer_rmse
    # the choice among proxies scored out of fold: never below the winner's own error (equal,
    # to rounding, when every fold picks the same proxy)
    assert model.loo_rmse >= model.proxy_rmse * (1 - 1e-12)
    test = _rows(data, "test", 0, 0)
    mean, std, _ = bench.predict_adapted(data.choices[test], "latency_paramsbox")
    x = np.log(params[test])
    np.testing.assert_allclose(mean, model.proxy_coef[0] + model.proxy_coef[1] * x)
    assert np.all(std >= model.loo_rmse) and abs(model.proxy_coef[1] - 1.0) < 0.05
    truth = np.log(latency[test])
    transfer = replace(model, proxy="")
    from anb.surrogates.adapt.model import BenchmarkKnown, device_metrics, op_components

    known = BenchmarkKnown(bench.base, exclude=device_metrics("latency_paramsbox"))
    K = known.log_costs(data.choices[test])
    ops = op_components(data.choices[test], ANB_SPACE)
    transfer_mean = transfer.predict_log_cost(K, ops, **transfer.design_inputs(
        data.choices[test], ANB_SPACE))[0]
    assert kendalltau(mean, truth)[0] > kendalltau(transfer_mean, truth)[0] + 0.02
    assert np.sqrt(np.mean((mean - truth) ** 2)) < np.sqrt(np.mean((transfer_mean - truth) ** 2))


def test_below_choice_min_points_the_additive_transfer_predicts_alone(base, data):
    """Under CHOICE_MIN_POINTS rows no out-of-fold choice is made (at 5 rows it is noise):
    the parameter-bound device of the test above, whose proxy wins from CHOICE_MIN_POINTS
    rows, is predicted by the additive transfer alone even though the proxy's leave-one-out
    error is lower; the std is the transfer's error."""
    from anb.surrogates.adapt.interval import error_scale
    from anb.surrogates.adapt.model import (
        CHOICE_MIN_POINTS,
        choice_std_factor,
        small_sample_factor,
    )
    from anb.surrogates.adapt.proxy import analytic_proxies

    rng = np.random.default_rng(5)
    params = analytic_proxies(ANB_SPACE, data.choices)["params"]
    latency = 1e-5 * params * np.exp(0.02 * rng.standard_normal(len(params)))
    rows = _rows(data, "train", CHOICE_MIN_POINTS, 3)
    known = BenchmarkKnown(anb.load(base))
    K, ops = known.log_costs(data.choices), op_components(data.choices, ANB_SPACE)

    def fit(n):
        return AdaptedModel.fit("latency_paramsbox", known.targets, K[rows[:n]], ops[rows[:n]],
                                latency[rows[:n]], choices=data.choices[rows[:n]],
                                space=ANB_SPACE)

    assert fit(CHOICE_MIN_POINTS).proxy == "params"
    few = fit(CHOICE_MIN_POINTS - 1)
    assert few.proxy == "" and (few.blend, few.own_blend, few.embed_blend) == (0.0, 0.0, 0.0)
    assert few.loo_rmse == pytest.approx(few.transfer_rmse) and few.loo_rmse > few.proxy_rmse
    shrunk = error_scale(few.loo_rmse, np.log(latency[rows[:CHOICE_MIN_POINTS - 1]]))
    assert few.std_factor == pytest.approx(STD_FACTOR
                                           * small_sample_factor(CHOICE_MIN_POINTS - 1)
                                           * choice_std_factor(CHOICE_MIN_POINTS - 1)
                                           * shrunk / few.loo_rmse)


def test_the_std_is_widened_by_the_t_quantile_of_its_sample_size():
    """The std of a fit on n rows is its leave-one-out error times Student's t quantile (n - 1
    degrees of freedom) over the normal one for the 90 % interval, times the multiplier of
    the choice's regime (:func:`choice_std_factor`) and the shrinkage of that error below
    CHOICE_MIN_POINTS rows (tests/test_adapt_interval.py). On 40 draws of 5 rows of a device the
    transfer explains up to 5 % noise, the t part alone leaves fewer draws covering fresh
    rows below 0.85 (4 against 10 without it) and coverage nearer 0.9 on average. In-sample
    fits (thousands of rows) keep the plain factor."""
    from scipy.stats import t

    from anb.surrogates.adapt.interval import error_scale
    from anb.surrogates.adapt.model import choice_std_factor, small_sample_factor
    from anb.surrogates.intervals import z_value

    assert small_sample_factor(5) == pytest.approx(t.ppf(0.95, 4) / z_value(0.9))
    assert small_sample_factor(10) == pytest.approx(t.ppf(0.95, 9) / z_value(0.9))

    def device(n, seed):
        rng = np.random.default_rng(seed)
        known_log = rng.normal(0.0, 0.3, (n, 3))
        ops = rng.uniform(1.0, 5.0, (n, 4))
        return known_log, ops, np.exp(known_log @ [0.5, 0.3, 0.0] + rng.normal(0.0, 0.05, n))

    fresh_known, fresh_ops, fresh = device(4000, 99)
    widened, plain = [], []
    for seed in range(40):
        rows = device(5, seed)
        model = AdaptedModel.fit("latency_x", ["a", "b", "c"], *rows, space=ANB_SPACE)
        shrunk = error_scale(model.loo_rmse, np.log(rows[2])) / model.loo_rmse
        assert model.std_factor == pytest.approx(STD_FACTOR * small_sample_factor(5)
                                                 * choice_std_factor(5) * shrunk)
        mean, std, _ = model.predict_log_cost(fresh_known, fresh_ops)
        error = np.abs(mean - np.log(fresh))
        std = std / (choice_std_factor(5) * shrunk)  # the t part alone
        widened.append(np.mean(error <= z_value() * std))
        plain.append(np.mean(error <= z_value() * std / small_sample_factor(5)))
    widened, plain = np.array(widened), np.array(plain)
    assert np.sum(widened < 0.85) < np.sum(plain < 0.85)
    assert np.mean(np.abs(widened - 0.9)) < np.mean(np.abs(plain - 0.9))
    in_sample = AdaptedModel.fit("latency_x", ["a", "b", "c"], *device(40, 0),
                                 leave_one_out=False, space=ANB_SPACE)
    assert in_sample.std_factor == STD_FACTOR


def test_the_std_multiplier_follows_the_regime_of_the_choice():
    """One multiplier per regime of the out-of-fold choice: none made (below
    CHOICE_MIN_POINTS rows), squared error, rank agreement (below OWN_MIN_POINTS); 1 from
    there, where STD_FACTOR was chosen."""
    from anb.surrogates.adapt.model import (
        CHOICE_MIN_POINTS,
        CHOICE_STD_FACTORS,
        OWN_MIN_POINTS,
        RANK_MIN_POINTS,
        choice_std_factor,
    )

    no_choice, squared_error, rank = CHOICE_STD_FACTORS
    assert [choice_std_factor(n) for n in (5, CHOICE_MIN_POINTS - 1)] == [no_choice] * 2
    assert [choice_std_factor(n) for n in (CHOICE_MIN_POINTS, RANK_MIN_POINTS - 1)] == [
        squared_error] * 2
    assert [choice_std_factor(n) for n in (RANK_MIN_POINTS, OWN_MIN_POINTS - 1)] == [rank] * 2
    assert choice_std_factor(OWN_MIN_POINTS) == choice_std_factor(500) == 1.0
    assert len({no_choice, squared_error, rank, 1.0}) == 4


def test_the_transfer_wins_where_it_is_better_out_of_fold(adapted):
    _, out = adapted
    model = load_adapted(out).models[HIDDEN]
    assert model.proxy == "" and model.transfer_rmse < model.proxy_rmse
    assert model.loo_rmse >= model.transfer_rmse - 1e-12  # the choice scored out of fold


def test_a_choice_is_scored_by_what_wins_without_each_row():
    """Two candidates' out-of-fold errors: B wins overall, but without row 0 (A's one miss)
    A wins there, so row 0 is scored by A's error; a candidate with a non-finite error is no
    candidate."""
    from anb.surrogates.adapt.choice import selected_rmse

    a = np.array([0.5, 0.0, 0.0, 0.0])
    b = np.array([0.1, 0.2, 0.2, 0.2])
    # without row 0: A 0 < B 0.12; without any other row: B (0.09) < A (0.25)
    expected = np.sqrt(np.mean([0.5**2, 0.2**2, 0.2**2, 0.2**2]))
    assert selected_rmse(np.column_stack([a, b])) == pytest.approx(expected)
    assert expected > np.sqrt(np.mean(b**2))  # above the winner's own error
    assert selected_rmse(np.column_stack([a, np.full(4, np.inf)])) == pytest.approx(
        np.sqrt(np.mean(a**2)))


def test_the_rank_choice_follows_the_order_not_the_squared_error():
    """From RANK_MIN_POINTS rows candidates compete on the Spearman correlation of their
    held-out predictions: B (3 y: every row in order, large error) beats A (y -/+ 0.6: small
    error, neighbours swapped), which squared error picks; within the margin the least
    squared error wins (C: one pair swapped, no other error); a non-finite column is no
    candidate; the choice's error scores each row under the column picked without it."""
    from scipy.stats import spearmanr

    from anb.surrogates.adapt.choice import (
        ChoiceRule,
        choose,
        rank_agreement,
        rank_choice,
        selected_rmse,
    )

    y = np.arange(10.0)
    a = np.where(np.arange(10) % 2 == 0, 0.6, -0.6)
    b = 2 * y
    c = np.zeros(10)
    c[[4, 5]] = [0.6, -0.6]  # one pair of neighbours swapped
    residuals = np.column_stack([a, b, c, np.full(10, np.nan)])
    score = rank_agreement(residuals, y)
    np.testing.assert_allclose(score[:3], [spearmanr(y + r, y)[0] for r in (a, b, c)])
    assert score[3] == -np.inf and score[1] == pytest.approx(1.0)
    assert 1.0 - 0.05 < score[2] < 1.0 and score[0] < 1.0 - 0.05
    assert selected_rmse(residuals[:, :2]) == pytest.approx(0.6)  # squared error: A
    assert rank_choice(residuals, y, margin=0.0) == 1
    assert rank_choice(residuals, y, margin=0.05) == 2
    assert rank_choice(residuals[:, [0, 1, 3]], y, margin=0.05) == 1
    picks = [rank_choice(np.delete(residuals, i, 0), np.delete(y, i), 0.0) for i in range(10)]
    assert picks[0] == 1 and picks[4] == picks[5] == 2  # without a swapped row C ties B
    expected = np.sqrt(np.mean([residuals[i, p] ** 2 for i, p in enumerate(picks)]))
    by_rank = ChoiceRule(choice_min=2, rank_from=2, rank_below=100, margin=0.0)
    picked = choose(residuals, np.zeros((10, 0)), y, 0, by_rank)
    assert picked.column == 1 and picked.rmse == pytest.approx(expected)
    with pytest.raises(ValueError, match="no candidate"):
        rank_choice(np.full((10, 2), np.inf), y, 0.0)
