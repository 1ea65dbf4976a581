"""``anb fit`` / ``anb evaluate`` / ``anb query`` and HPO on the real dataset (tiny budgets)."""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.searchspace import EFFICIENTNET_B0, Sampler
from anb.surrogates import read_manifest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "anb"
TARBALL = DATA / "anb_dataset_jsons.tar.gz"
pytestmark = pytest.mark.skipif(not TARBALL.exists(), reason="released dataset not available")
runner = CliRunner()


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    config = folder / "tiny.json"
    config.write_text(json.dumps({"default": {"family": "xgboost", "n_members": 2, "params": {
        "n_estimators": 60, "learning_rate": 0.2}}}))
    out = folder / "bench"
    result = runner.invoke(app, ["fit", str(TARBALL), "--out", str(out), "--config", str(config),
                                 "--targets", "throughput_a100,latency_vck190",
                                 "--hpo-seconds", "4"])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_fit_writes_artifact_with_hpo_settings_and_metrics(fitted):
    out, output = fitted
    assert "test split" in output and "throughput_a100" in output
    manifest = read_manifest(out)
    assert list(manifest["targets"]) == ["throughput_a100", "latency_vck190"]
    tuned = manifest["fit_config"]["per_target"]["throughput_a100"]["params"]
    assert {"max_depth", "learning_rate"} <= set(tuned) and tuned["n_estimators"] == 60
    assert manifest["hpo"]["library"] == "optuna"
    assert manifest["targets"]["latency_vck190"]["n_missing"] == 2
    assert manifest["targets"]["throughput_a100"]["metrics"]["test"]["kendall_tau"] > 0.95


def test_query_from_stdin_and_file_writes_csv(fitted, tmp_path):
    out, _ = fitted
    archs = [str(a) for a in Sampler(seed=4).sample(5)]
    result = runner.invoke(app, ["query", str(out), "-"], input="\n".join(archs) + "\n")
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.output))
    assert list(frame.columns) == ["arch", "throughput_a100", "throughput_a100_std",
                                   "latency_vck190", "latency_vck190_std", "ood", "ood_distance",
                                   "ood_cost"]
    assert frame["arch"].tolist() == archs and (frame["throughput_a100"] > 1000).all()
    records = tmp_path / "archs.json"
    records.write_text(json.dumps([{"architecture": EFFICIENTNET_B0.to_anb_dict()}]))
    csv = tmp_path / "pred.csv"
    result = runner.invoke(app, ["query", str(out), str(records), "--metrics", "latency_vck190",
                                 "--noise", "--seed", "3", "-o", str(csv)])
    assert result.exit_code == 0, result.output
    assert list(pd.read_csv(csv).columns) == ["arch", "latency_vck190", "latency_vck190_std",
                                              "ood", "ood_distance", "ood_cost"]


def test_query_errors_exit_nonzero_with_one_line(fitted):
    out, _ = fitted
    result = runner.invoke(app, ["query", str(out), "-", "--metrics", "throughput_h100"],
                           input=str(EFFICIENTNET_B0) + "\n")
    assert result.exit_code != 0 and "unknown metric 'throughput_h100'" in result.output
    result = runner.invoke(app, ["query", str(out), "-"], input="e2k3l1se-nonsense\n")
    assert result.exit_code != 0 and result.output.startswith("error:")


def test_evaluate_writes_report_and_comparison(fitted, tmp_path):
    out, _ = fitted
    report = tmp_path / "report"
    result = runner.invoke(app, ["evaluate", str(out), str(TARBALL), "--report", str(report)])
    assert result.exit_code == 0, result.output
    assert "comparison" in result.output and "ref_lightgbm_tau" in result.output
    assert (report / "parity_throughput_a100.png").stat().st_size > 1000
    comparison = pd.read_csv(report / "comparison.csv", index_col=0)
    assert comparison.loc["latency_vck190", "tau_goal"] == 0.99


def test_fit_rejects_bad_config(tmp_path):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"default": {"family": "catboost"}}))
    result = runner.invoke(app, ["fit", str(TARBALL), "--out", str(tmp_path / "x"),
                                 "--config", str(config)])
    assert result.exit_code != 0 and "unknown model family 'catboost'" in result.output
    assert not (tmp_path / "x").exists()
