"""``anb fit`` / ``anb evaluate`` / ``anb query`` and HPO on the real dataset (tiny budgets)."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.resources import RELEASED_DATASET as TARBALL
from anb.searchspace import EFFICIENTNET_B0, Sampler
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import read_manifest

runner = CliRunner()


@pytest.fixture(scope="module")

def fitted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    config = folder / "tiny.json"
    # no internal hold-outs: these tests read the artifact, its columns and reports
    config.write_text(json.dumps({"hole_folds": 0, "default": {
        "family": "xgboost", "n_members": 2, "params": {"n_estimators": 60,
                                                        "learning_rate": 0.2}}}))
    out = folder / "bench"
    result = runner.invoke(app, ["fit", str(TARBALL), "--out", str(out), "--config", str(config),
                                 "--targets", "throughput_a100,latency_vck190",
                                 "--hpo-seconds", "4"])
    assert result.exit_code == 0, result.output
    return out, result.output


@pytest.mark.slow
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
    archs = [str(a) for a in Sampler(seed=4, space=ANB_SPACE).sample(5)]
    result = runner.invoke(app, ["query", str(out), "-"], input="\n".join(archs) + "\n")
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert list(frame.columns) == ["arch", "throughput_a100", "throughput_a100_std",
                                   "latency_vck190", "latency_vck190_std", "ood", "ood_distance",
                                   "ood_cost", "ood_reason"]
    assert frame["arch"].tolist() == archs and (frame["throughput_a100"] > 1000).all()
    records = tmp_path / "archs.json"
    records.write_text(json.dumps([{"architecture": EFFICIENTNET_B0.to_anb_dict()}]))
    csv = tmp_path / "pred.csv"
    result = runner.invoke(app, ["query", str(out), str(records), "--metrics", "latency_vck190",
                                 "--noise", "--seed", "3", "-o", str(csv)])
    assert result.exit_code == 0, result.output
    assert list(pd.read_csv(csv).columns) == ["arch", "latency_vck190", "latency_vck190_std",
                                              "ood", "ood_distance", "ood_cost", "ood_reason"]


def test_query_errors_exit_nonzero_with_one_line(fitted):
    out, _ = fitted
    result = runner.invoke(app, ["query", str(out), "-", "--metrics", "throughput_h100"],
                           input=str(EFFICIENTNET_B0) + "\n")
    assert result.exit_code != 0 and "unknown metric 'throughput_h100'" in result.output
    result = runner.invoke(app, ["query", str(out), "-"], input="e2k3l1se-nonsense\n")
    assert result.exit_code != 0 and result.output.startswith("error:")


def test_query_takes_one_architecture_string_as_its_argument(fitted, tmp_path):
    """``anb query BENCH ARCH``: an argument that is no file but an architecture of the space
    is answered as that one architecture, as from a file; one that is neither names both
    readings; an unknown benchmark is named before the architectures are read."""
    out, _ = fitted
    arch = str(EFFICIENTNET_B0)
    literal = runner.invoke(app, ["query", str(out), arch])
    assert literal.exit_code == 0, literal.output
    (tmp_path / "one.txt").write_text(arch + "\n")
    from_file = runner.invoke(app, ["query", str(out), str(tmp_path / "one.txt")])
    assert literal.stdout == from_file.stdout and arch in literal.stdout
    result = runner.invoke(app, ["query", str(out), str(tmp_path / "missing.txt")])
    assert result.exit_code == 2
    assert f"'{tmp_path / 'missing.txt'}' is neither a file nor an architecture of space " \
        "anb-mnasnet: architecture string" in result.output
    result = runner.invoke(app, ["query", str(tmp_path / "nobench"), arch])
    assert result.exit_code == 2 and "unknown packaged benchmark" in result.output


@pytest.mark.slow
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


@pytest.mark.slow
def test_query_output_is_read_by_fit_merge_and_front_report(fitted, tmp_path):
    """`anb query` writes an 'arch' column; every table reader takes it (one convention)."""
    from anb.records import load_dataset
    from anb.searchspace import Arch

    out, _ = fitted
    archs = [str(a) for a in Sampler(seed=8, space=ANB_SPACE).sample(120)]
    pred = tmp_path / "pred.csv"
    result = runner.invoke(app, ["query", str(out), "-", "-o", str(pred)],
                           input="\n".join(archs) + "\n")
    assert result.exit_code == 0, result.output
    table = pd.read_csv(pred)
    assert table.columns[0] == "arch" and table["arch"].tolist() == archs

    config = out.parent / "tiny.json"
    refit = tmp_path / "refit"
    result = runner.invoke(app, ["fit", str(pred), "--out", str(refit), "--config", str(config),
                                 "--targets", "throughput_a100", "--split", "random"])
    assert result.exit_code == 0, result.output
    assert read_manifest(refit)["training_data"]["n_records"] == 120

    results = tmp_path / "results"
    results.mkdir()
    for arch in (Arch.from_string(archs[0], ANB_SPACE), EFFICIENTNET_B0):
        (results / f"{arch.id}.json").write_text(json.dumps({
            "architecture": arch.to_anb_dict(),
            "platform_perf": {"throughput_cpu-x": {"throughput_mean": 50.0}}}))
    merged = tmp_path / "merged"
    result = runner.invoke(app, ["merge", str(results), "--accuracy", str(pred), "--out",
                                 str(merged)])
    assert result.exit_code == 0, result.output
    frame = load_dataset(merged / "records", space=ANB_SPACE).set_index("arch")
    assert len(frame) == 121
    np.testing.assert_allclose(frame.loc[archs, "throughput_a100"], table["throughput_a100"],
                               rtol=1e-5)
    assert frame.loc[archs[0], "throughput_cpu-x"] == 50.0
    assert frame.loc[str(EFFICIENTNET_B0), ["macs", "params"]].tolist() == [415.145024, 5.288548]

    search = tmp_path / "search"
    result = runner.invoke(app, ["search", "--benchmark", str(out), "-o", "throughput_a100",
                                 "-o", "latency_vck190", "--budget", "30", "--out", str(search)])
    assert result.exit_code == 0, result.output
    front = pd.read_csv(search / "pareto.csv")
    front_pred = tmp_path / "front_pred.csv"
    result = runner.invoke(app, ["query", str(out), str(search / "pareto.csv"), "-o",
                                 str(front_pred)])
    assert result.exit_code == 0, result.output
    report = tmp_path / "report"
    result = runner.invoke(app, ["front-report", str(search), "--out", str(report), "--accuracy",
                                 str(front_pred), "--accuracy-metric", "throughput_a100"])
    assert result.exit_code == 0, result.output
    measured = pd.read_csv(report / "front_report.csv")["throughput_a100_measured"]
    np.testing.assert_allclose(measured, front["throughput_a100"], rtol=1e-5)
