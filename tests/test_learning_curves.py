"""Learning curves end to end on the digits task: the real trainer with ``trainval.curve`` keeps
the validation top-1 of every epoch, ``anb export`` writes it (``val_top1_epoch_<i>``), ``anb
fit`` fits one target per epoch, and the Syne Tune blackbox exposes the epochs as fidelities."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_accuracy.config import load_config, recipe_hash, recipe_identity
from anb.collect_accuracy.train import main
from anb.records import frame_to_records, load_dataset
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import load, read_manifest
from tests.trainer_helpers import CONFIG

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
EPOCHS = 3
#: Architectures trained: four to fit on, one to validate, one to test.
MODELS = 6
CURVE = [f"val_top1_epoch_{i}" for i in range(1, EPOCHS + 1)]
TINY = ["--num_models", str(MODELS), "--epochs", str(EPOCHS), "--eval_epochs", "1",
        "--max_steps", "2", "--batch_size", "16", "--max_val_steps", "1",
        "--val_batch_size", "60", "--progress", "false", "--seed", "3"]
runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("curves")
    assert main(["--config", str(CONFIG), "--folder", str(folder), "--curve", "true",
                 *TINY]) == 0
    return folder


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "ds.csv"
    result = runner.invoke(app, ["export", "--out", str(out), "--local", str(trained)])
    assert result.exit_code == 0, result.output
    return out


def test_curve_joins_the_recipe_identity_only_when_set():
    config = load_config(CONFIG)
    with_curve = load_config(CONFIG, ["--trainval.curve", "true"])
    assert "curve" not in recipe_identity(config, 1)["trainval"]
    assert recipe_identity(with_curve, 1)["trainval"]["curve"] is True
    assert recipe_hash(with_curve, 1) != recipe_hash(config, 1)


def test_records_hold_every_epoch_and_keep_the_best_of_the_last(trained):
    records = [json.loads(p.read_text()) for p in sorted((trained / "records").glob("*.json"))]
    assert len(records) == MODELS
    for record in records:
        history = record["provenance"]["val_history"]
        assert [h["epoch"] for h in history] == list(range(EPOCHS))
        metrics = record["metrics"]
        assert [metrics[k] for k in CURVE] == [h["val_top1"] for h in history]
        # eval_epochs = 1: the stored accuracy is the last epoch's, not the curve's best
        assert metrics["val_top1"] == metrics[CURVE[-1]]
        assert record["provenance"]["best_epoch"] == EPOCHS - 1


def test_export_writes_the_curve_and_it_round_trips(exported):
    frame = pd.read_csv(exported)
    assert set(CURVE) <= set(frame.columns) and frame[CURVE].notna().all().all()
    back = load_dataset(exported, space=ANB_SPACE)
    assert np.allclose(back[CURVE].to_numpy(), frame[CURVE].to_numpy())
    again = frame_to_records(back, space=ANB_SPACE)
    assert [r["metrics"][CURVE[0]] for r in again] == back[CURVE[0]].tolist()


def test_fit_is_an_epoch_fidelity_surrogate_and_syne_tune_sees_the_epochs(exported, tmp_path):
    frame = pd.read_csv(exported)
    split = tmp_path / "split"
    split.mkdir()
    names = [Path(s.split(":", 1)[1]).name for s in frame["source"]]
    for part, rows in (("train", names[:4]), ("val", names[4:5]), ("test", names[5:])):
        (split / f"{part}_paths.json").write_text(json.dumps(rows))
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({"hole_folds": 0, "layer_cost": False, "default": {
        "family": "xgboost", "n_members": 2, "params": {"n_estimators": 20}}, "per_target": {}}))
    out = tmp_path / "bench"
    result = runner.invoke(app, ["fit", str(exported), "--out", str(out), "--config",
                                 str(config), "--split-dir", str(split)])
    assert result.exit_code == 0, result.output
    assert list(read_manifest(out)["targets"]) == ["val_top1", *CURVE, "train_time"]

    from anb.integrations.syne_tune import ELAPSED_TIME, AnbBlackbox

    bench = load(out)
    bb = AnbBlackbox(bench, objectives=["val_top1", "train_time"], noise=False)
    assert bb.fidelity_values.tolist() == [1, 2, 3]
    assert "val_top1_epoch_1" not in bb.objectives_names
    config_ = {k: d.sample(random_state=np.random.RandomState(0))
               for k, d in bb.configuration_space.items()}
    rows = bb(config_)
    assert rows.shape == (EPOCHS, len(bb.objectives_names))
    names_ = bb.objectives_names
    query = bench.query(_arch(bench, config_))
    top1 = rows[:, names_.index("val_top1")]
    assert np.allclose(top1[:-1], [query[c][0] for c in CURVE[:-1]])
    assert top1[-1] == pytest.approx(query["val_top1"][0])  # the last: the benchmark's own
    elapsed = rows[:, names_.index(ELAPSED_TIME)]
    assert np.allclose(elapsed, query["train_time"][0] * np.arange(1, EPOCHS + 1) / EPOCHS)
    assert bb(config_, fidelity=2)["val_top1"] == pytest.approx(query[CURVE[1]][0])


def _arch(bench, config: dict) -> list:
    return [bench.space.arch({k: (v == "True") if k.endswith("_se") else v
                              for k, v in config.items()})]
