"""``train_time`` (seconds of the proxified training) as a surrogate target on the released data:
``anb fit --targets train_time``, a query with std and noise, and the test split against the
plain baseline."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.nas.objectives import Objective
from anb.resources import RELEASED_DATASET as TARBALL
from anb.searchspace import Sampler
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import load, prepare, read_manifest
from anb.surrogates.baseline import evaluate_baselines
from anb.surrogates.data import target_columns, transform_for
from anb.surrogates.fit import evaluate

pytestmark = pytest.mark.slow  # real training / fitting / searches: over 2 s each

runner = CliRunner()


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tt")
    config = folder / "small.json"
    config.write_text(json.dumps({"hole_folds": 0, "default": {
        "family": "xgboost", "n_members": 2, "params": {"n_estimators": 300,
                                                        "learning_rate": 0.1}}}))
    out = folder / "bench"
    result = runner.invoke(app, ["fit", str(TARBALL), "--out", str(out), "--config", str(config),
                                 "--targets", "train_time,throughput_3090"])
    assert result.exit_code == 0, result.output
    return out


def test_train_time_is_a_default_target_in_seconds_modelled_in_log(released_frame):
    assert target_columns(released_frame)[-1] == "train_time"
    assert transform_for("train_time") == "log"
    assert Objective.parse("train_time") == Objective("train_time", maximise=False)


def test_fit_and_query_train_time_with_std_and_noise(fitted):
    bench = load(fitted)
    assert bench.metrics == ["train_time", "throughput_3090"]
    assert bench.devices == ["3090"]  # train_time is no device ("time")
    assert read_manifest(fitted)["targets"]["train_time"]["n_train"] > 3000
    archs = Sampler(seed=5, space=ANB_SPACE).sample(20)
    frame = bench.query(archs, "train_time")
    assert list(frame.columns[:3]) == ["arch", "train_time", "train_time_std"]
    assert (frame["train_time_std"] > 0).all()
    # seconds on 4x RTX 3090, as the released records hold it (their median is ~1900 s)
    assert 500 < frame["train_time"].median() < 5000
    one = bench.query(archs, "train_time", noise=True, seed=1)["train_time"].to_numpy()
    same = bench.query(archs, "train_time", noise=True, seed=1)["train_time"].to_numpy()
    other = bench.query(archs, "train_time", noise=True, seed=2)["train_time"].to_numpy()
    assert np.array_equal(one, same) and not np.allclose(one, other)
    assert not np.allclose(one, frame["train_time"].to_numpy())
    # noise in log space from the architectures trained twice: a few %, not seconds
    assert 0.0 < bench.models["train_time"].std_terms_.observation_std < 0.5
    assert np.all(np.abs(np.log(one / frame["train_time"].to_numpy())) < 2.0)


def test_query_cli_lists_train_time(fitted):
    archs = [str(a) for a in Sampler(seed=4, space=ANB_SPACE).sample(3)]
    result = runner.invoke(app, ["query", str(fitted), "-"], input="\n".join(archs) + "\n")
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert {"train_time", "train_time_std"} <= set(frame.columns)


@pytest.mark.slow
def test_train_time_beats_the_plain_baseline_on_test(fitted):
    prepared = prepare(TARBALL, ["train_time"], space=ANB_SPACE)
    ours = evaluate(load(fitted), prepared, "test").loc["train_time"]
    base = evaluate_baselines(prepared, ["train_time"], families=("xgboost",)).loc[
        ("train_time", "xgboost")]
    assert ours["n"] == 512
    assert ours["kendall_tau"] > base["kendall_tau"] and ours["r2"] > base["r2"]
