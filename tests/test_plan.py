"""``anb plan``: the acquisition beats random picks on a small seeded simulation, a plan
round-trips through the trainer's ``model.archs`` and ``anb queue submit``, bad input is one
error line with nothing written, and another space (NAS-Bench-201) plans too."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anb.searchspace.registry import get_space
from anb.searchspace.space import ANB_SPACE
from anb.surrogates.plan import (
    MODEL_ERROR,
    Collected,
    PlanConfig,
    greedy_batch,
    make_plan,
    quality,
    suggest_stop,
)
from tests.conftest import REPO
from tests.console_fixtures import run_console

pytestmark = pytest.mark.slow  # real training / fitting / searches: over 2 s each


def _script():
    name = "anb_benchmarks_active_collection"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, REPO / "benchmarks" / "active_collection.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _anb(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``anb args`` through the console entry's wrapper, in this process
    (tests/console_fixtures.py: the command's work without an interpreter's start-up)."""
    return run_console(list(args), Path(cwd or Path.cwd()))


@pytest.fixture(scope="module")
def sample(released_frame):
    """300 released records (a seeded draw) as a CSV dataset."""
    return released_frame.sample(300, random_state=0).reset_index(drop=True)


@pytest.fixture(scope="module")
def sample_csv(sample, tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "collected.csv"
    sample.to_csv(path, index=False)
    return path


def test_acquisition_beats_random_at_equal_gpu_hours(released_frame):
    """Seeded pool simulation on the train split (scored on val): from 60 random architectures,
    two batches of 60 picked by the plan reach a higher top-1 tau per GPU-hour spent than random
    batches; each point is tau at the GPU-hours the other strategy spent (linear in between)."""
    from anb.surrogates.data import frame_choices
    from anb.surrogates.fit import prepare

    bench = _script()
    prep = prepare(released_frame, space=ANB_SPACE)
    data = Collected.from_frame(prep.frame, frame_choices(prep.frame,
                                                          space=ANB_SPACE), ["val_top1"])
    hours = np.exp(data.y["train_time"]) * 4 / 3600
    pool = np.flatnonzero(prep.masks["train"])[:1500]
    scored = np.flatnonzero(prep.masks["val"])
    config = PlanConfig(batch=60, members=3)
    curves = {}
    for strategy in ("random", "active"):
        runs = [bench.simulate(data, hours, pool, scored, prep.space, ["val_top1"], strategy,
                               config, 60, 2, seed) for seed in (0, 1)]
        curves[strategy] = (np.mean([[r["gpu_hours"] for r in run] for run in runs], 0),
                            np.mean([[r["tau"]["val_top1"] for r in run] for run in runs], 0))
    (h_r, t_r), (h_a, t_a) = curves["random"], curves["active"]
    assert h_a[-1] < h_r[-1]  # cost-aware: the same count costs fewer GPU-hours
    assert t_a[-1] > np.interp(h_a[-1], h_r, t_r)  # measured: 0.863 vs 0.800


def test_planner_corrects_a_space_base_for_accuracy(released_frame):
    """Top-1 corrects a Gaussian process on the space's features, training time a ridge on
    them, device targets the layer-cost model; at 200 architectures the base lifts top-1 tau on
    val well above bare trees (measured: 0.886 vs 0.817; the GP alone 0.886, a ridge 0.873)."""
    from scipy.stats import kendalltau

    from anb.surrogates.data import frame_choices
    from anb.surrogates.ensemble import TargetSurrogate
    from anb.surrogates.fit import prepare
    from anb.surrogates.plan import PlanModel

    prep = prepare(released_frame, space=ANB_SPACE)
    data = Collected.from_frame(prep.frame, frame_choices(prep.frame, space=ANB_SPACE),
                                ["val_top1", "throughput_zcu102"])
    rows = np.random.default_rng(0).choice(np.flatnonzero(prep.masks["train"]), 200, False)
    val = np.flatnonzero(prep.masks["val"])
    model = PlanModel(PlanConfig(), prep.space).fit(data.subset(rows))
    assert sorted(model.linear) == ["train_time", "val_top1"]
    X = model.builder.transform(data.choices).astype(np.float64)
    space_features = X[:, :model.n_space]
    base = model.linear["val_top1"].predict(space_features)
    assert model.models["val_top1"].base_column == X.shape[1]
    with_base = model.members(data.choices[val])["val_top1"].mean(1)
    bare = TargetSurrogate("xgboost", PlanConfig().params, PlanConfig().members, bootstrap=True,
                           random_state=0).fit(X[rows], data.y["val_top1"][rows])
    y = data.y["val_top1"][val]
    tau_base, tau_bare = kendalltau(y, with_base)[0], kendalltau(y, bare.predict(X[val]))[0]
    assert tau_base > tau_bare + 0.02
    assert kendalltau(y, base[val])[0] > tau_bare  # the GP alone already ranks better


def test_ridge_based_targets_are_fitted_on_normal_scores(released_frame):
    """Top-1 is fitted on its normal scores: a strictly increasing distortion of the labels (a
    long tail stretched) leaves the predicted ranking exactly as it was, and the predictions
    come back in label units."""
    from anb.surrogates.data import frame_choices
    from anb.surrogates.fit import prepare
    from anb.surrogates.plan import PlanModel

    prep = prepare(released_frame, space=ANB_SPACE)
    data = Collected.from_frame(prep.frame, frame_choices(prep.frame, space=ANB_SPACE),
                                ["val_top1", "throughput_zcu102"])
    rows = np.random.default_rng(0).choice(np.flatnonzero(prep.masks["train"]), 150, False)
    val = np.flatnonzero(prep.masks["val"])[:300]
    sub = data.subset(rows)
    y = sub.y["val_top1"]
    stretch = np.exp(4 * (y - y.min()) / y.std())
    stretched = Collected(sub.choices, {**sub.y, "val_top1": stretch})
    plain = PlanModel(PlanConfig(), prep.space).fit(sub)
    assert sorted(plain.scores) == ["train_time", "val_top1"]
    pred = plain.members(data.choices[val])["val_top1"]
    pred_stretched = PlanModel(PlanConfig(), prep.space).fit(stretched).members(
        data.choices[val])["val_top1"]
    order = np.argsort(pred, axis=0, kind="stable")  # each member's ranking
    assert (order == np.argsort(pred_stretched, axis=0, kind="stable")).all()
    assert abs(np.median(pred) - np.median(y)) < 0.5 * y.std()  # label units, not scores


def test_normal_scores_round_trip_and_keep_order():
    """Labels map to normal scores and back exactly; past either end the map goes on with the
    outer tenth's slope, so predictions beyond the labels stay ordered (no clipped ties)."""
    from scipy.stats import norm

    from anb.surrogates.plan import NormalScores

    y = np.array([3.0, 1.0, 2.0, 2.0, 10.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 0.5])
    s = NormalScores().fit(y)
    z = s.transform(y)
    np.testing.assert_allclose(s.inverse(z), y)
    assert z[2] == z[3] and z[4] == z.max()
    np.testing.assert_allclose(np.sort(np.unique(z))[0], norm.ppf(0.5 / 12))
    grid = np.linspace(z.min() - 2, z.max() + 2, 200)
    assert (np.diff(s.inverse(grid)) > 0).all()
    high = s.z[-2:]
    slope = (s.labels[-1] - s.labels[-2]) / (high[1] - high[0])
    np.testing.assert_allclose(s.inverse(np.array([s.z[-1] + 1.0])), s.labels[-1] + slope)


def test_greedy_batch_spreads_and_keeps_the_budget():
    """The penalty moves the second pick away from the first's twin; the budget stops early."""
    Z = np.array([[0.0, 0.0], [0.01, 0.0], [5.0, 5.0], [9.0, 9.0]])
    score = np.array([1.0, 0.99, 0.5, 0.1])
    assert greedy_batch(score, np.ones(4), Z, 2, None, 1.0).tolist() == [0, 2]
    assert greedy_batch(score, np.ones(4), Z, 2, None, 0.0).tolist() == [0, 1]
    assert greedy_batch(score, np.array([1.0, 1.0, 3.0, 1.0]), Z, 3, 2.0, 1.0).tolist() == [0]


def test_stopping_signal_tracks_the_data(sample):
    """More data: a higher estimate; the gain shrinks; a large min_gain says stop."""
    space = get_space("anb-mnasnet")
    from anb.surrogates.data import frame_choices

    data = Collected.from_frame(sample, frame_choices(sample, space), ["val_top1"])
    config = PlanConfig(members=2)
    small = quality(data.subset(np.arange(60)), config, space, ["val_top1"])["val_top1"]
    big = quality(data, config, space, ["val_top1"])["val_top1"]
    assert big.n == 300 and small.n == 60
    assert big.tau > small.tau and big.cv_tau > big.half_tau
    floor = MODEL_ERROR * (1 - big.tau)  # the model error; the bootstrap adds to it
    assert floor < big.tau_std < np.hypot(floor, 0.05) and small.tau_std > big.tau_std
    assert suggest_stop({"val_top1": big}, PlanConfig(min_gain=1.0))
    assert not suggest_stop({"val_top1": big}, PlanConfig(min_gain=0.0))


def test_stopping_signal_std_is_the_sampling_std_of_kendall_tau():
    """Bug class: an std that reflects fold-to-fold agreement, not what a sample of n rows can
    say about tau. Bivariate normal rows with correlation rho: Kendall tau's asymptotic variance
    is (4 / n) (1/9 - (4 / pi^2) arcsin(rho / 2)^2) (Kendall and Gibbons, Rank Correlation
    Methods, ch. 10)."""
    from anb.surrogates.plan import bootstrap_std

    rng = np.random.default_rng(0)
    for rho, n in ((0.9, 400), (0.6, 1000)):
        x = rng.standard_normal(n)
        y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal(n)
        expected = np.sqrt(4 / n * (1 / 9 - 4 / np.pi**2 * np.arcsin(rho / 2) ** 2))
        assert bootstrap_std(y, x, seed=1) == pytest.approx(expected, rel=0.15)


def test_population_estimate_follows_the_noise_of_the_predicted_value():
    """Bug classes: residuals pooled regardless of the predicted value, or the collected rows'
    own spread standing in for the population's. Noise is large for low predictions and small
    for high ones; the collected rows sit mostly low (as picks of uncertain architectures
    would). The estimate must match the population's tau, which pooling the residuals misses."""
    from scipy.stats import kendalltau

    from anb.surrogates.plan import population_tau

    rng = np.random.default_rng(0)

    def noise(mu):
        return rng.standard_normal(len(mu)) * np.where(mu < 0.5, 0.3, 0.02)

    population = rng.uniform(0, 1, 3000)
    truth = kendalltau(population, population + noise(population))[0]
    collected = np.concatenate([rng.uniform(0, 0.5, 320), rng.uniform(0.5, 1, 80)])
    residuals = noise(collected)
    estimate, std = population_tau(population, collected, residuals, seed=1, draws=40)
    pooled, _ = population_tau(population, collected, residuals, seed=1, draws=40, bins=1)
    assert estimate == pytest.approx(truth, abs=0.02)  # measured: 0.709 vs 0.702 (pooled 0.552)
    assert pooled < truth - 0.1
    assert 0 < std < 0.03


def test_plan_round_trips_through_train_and_queue(sample_csv, sample, tmp_path):
    """archs.csv is what `anb train --model.archs` and `anb queue submit --archs` take; the plan
    records seed, acquisition, model and the stopping signal; nothing collected is proposed."""
    from anb.collect_accuracy.config import load_config
    from anb.collect_accuracy.train import architectures
    from anb.jobs.queue import open_queue
    from anb.searchspace.space import ANB_SPACE

    out = tmp_path / "plan"
    run = _anb("plan", str(sample_csv), "--out", str(out), "--batch", "12", "--pool", "400",
               "--targets", "val_top1,throughput_zcu102", "--seed", "3")
    assert run.returncode == 0, run.stderr
    assert "val_top1: estimated test Kendall tau" in run.stdout and "suggested:" in run.stdout
    table = pd.read_csv(out / "archs.csv")
    info = json.loads((out / "plan.json").read_text())
    assert len(table) == 12 and table["arch"].is_unique
    assert not set(table["arch"]) & set(sample["arch"])
    assert info["seed"] == 3 and info["config"]["acquisition"] == "kmeans"
    assert info["model"]["space_bases"]["others"]["estimator"] == "ridge"  # the model is on record
    assert set(info["quality"]) == {"val_top1", "throughput_zcu102"}
    assert [r["arch"] for r in info["batch"]] == table["arch"].tolist()
    assert (table["gpu_hours"] > 0.5).all() and (table["pred_throughput_zcu102"] > 1).all()

    config = load_config(overrides=["--model.archs", str(out / "archs.csv")])
    assert [str(a) for a in architectures(config, ANB_SPACE)] == table["arch"].tolist()

    queue = tmp_path / "q.db"
    run = _anb("queue", "submit", "--archs", str(out / "archs.csv"), "--device", "cpu-ort",
               "--queue", str(queue))
    assert run.returncode == 0, run.stderr
    with open_queue(str(queue)) as q:
        assert sorted(j.arch for j in q.jobs(limit=100)) == sorted(table["arch"])


@pytest.mark.parametrize("args, message", [
    (["--targets", "val_top9"], "unknown target 'val_top9'"),
    (["--batch", "0"], "Invalid value for '--batch'"),
    (["--acquisition", "magic"], "unknown acquisition 'magic'"),
    (["--acquisition", "coverage", "--gpu-hours", "5"], "a GPU-hour budget needs"),
])
def test_bad_input_is_one_error_and_writes_nothing(sample_csv, tmp_path, args, message):
    out = tmp_path / "plan"
    run = _anb("plan", str(sample_csv), "--out", str(out), "--pool", "50", *args)
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(("error:", "Error:"))
    assert "Traceback" not in run.stderr and not out.exists()


def test_missing_dataset_and_foreign_folder_are_refused(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    run = _anb("plan", "--out", str(foreign), "--pool", "50")
    assert run.returncode == 2 and "notes.txt" in run.stderr
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    run = _anb("plan", str(tmp_path / "none.csv"), "--out", str(tmp_path / "p"))
    assert run.returncode == 2 and "none.csv" in run.stderr and not (tmp_path / "p").exists()


def test_nasbench201_plans_from_nothing_and_from_data():
    """Another space: a space-filling first batch, then a model-based one that avoids what is
    collected and learns a synthetic device metric."""
    space = get_space("nasbench201")
    first = make_plan(None, space, PlanConfig(batch=30), n_candidates=800)
    assert len(first.choices) == 30 and first.quality == {}
    assert len(np.unique(space.index_from_choices(first.choices))) == 30
    macs = space.cost_table(first.choices).total("macs")
    frame = pd.DataFrame({"space": space.name,
                          "arch": [str(a) for a in space.archs_from_choices(first.choices)],
                          "throughput_fake": 1e3 / (1 + macs)})
    second = make_plan(frame, space, PlanConfig(batch=10, members=2), ["throughput_fake"],
                       n_candidates=800)
    assert len(second.choices) == 10
    assert not set(space.index_from_choices(second.choices).tolist()) & set(
        space.index_from_choices(first.choices).tolist())
    assert second.quality["throughput_fake"].cv_tau > 0.5


def test_kernel_base_past_its_row_cap_fits_a_subset_and_stays_out_of_sample(monkeypatch):
    """Past ``KERNEL_FIT_ROWS`` the Gaussian process fits a random subset (its memory grows as
    n**2): those rows get the closed-form leave-one-out prediction (equal to refitting without
    the row, the kernel fixed), the others its plain prediction, and predictions come in
    chunks of ``KERNEL_PREDICT_ROWS`` equal to one call."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    from anb.surrogates import plan

    monkeypatch.setattr(plan, "KERNEL_FIT_ROWS", 60)
    monkeypatch.setattr(plan, "KERNEL_PREDICT_ROWS", 7)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=100)
    base = plan.KernelBase().fit(X, y)
    Z = base.scaler_.transform(X)
    fitted = np.sort(np.random.default_rng(0).permutation(100)[:60])
    rest = np.setdiff1d(np.arange(100), fitted)
    np.testing.assert_array_equal(base.gp_.X_train_, Z[fitted])
    np.testing.assert_allclose(base.loo_[rest], base.gp_.predict(Z[rest]), rtol=1e-9)
    np.testing.assert_allclose(base.predict(X), base.gp_.predict(Z), rtol=1e-9)
    mean, std = y[fitted].mean(), y[fitted].std()
    for i in fitted[:3]:
        keep = fitted[fitted != i]
        refit = GaussianProcessRegressor(base.gp_.kernel_, optimizer=None).fit(
            Z[keep], (y[keep] - mean) / std)
        assert base.loo_[i] == pytest.approx(refit.predict(Z[[i]])[0] * std + mean, rel=1e-6)
