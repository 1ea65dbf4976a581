"""The Pareto follow-up for real: ``anb retrain`` (the full recipe's tiny digits variant),
``anb measure`` on this CPU, ``anb front-report`` joining them with what the search predicted."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.searchspace.arch import as_arch
from anb.searchspace.space import ANB_SPACE

DEVICE = Path(__file__).parent / "data" / "cpu-ort-32.toml"
KEY = "throughput_cpu-ort-32"
ARCHS = ["e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1",
         "e1k3l1-e6k3l2-e6k5l2-e6k3l3-e6k5l1-e6k5l4-e6k3l1",
         "e6k5l1se-e6k5l2se-e6k5l2se-e6k5l3se-e6k5l3se-e6k5l4se-e6k5l1se"]
runner = CliRunner()


def _search_folder(folder: Path) -> Path:
    """What a two-objective search leaves (pareto.csv + summary.json)."""
    folder.mkdir()
    pd.DataFrame({"arch": ARCHS, "arch_id": [as_arch(a, ANB_SPACE).id for a in ARCHS],
                  "val_top1": [70.0, 75.0, 78.0], KEY: [3000.0, 1500.0, 400.0]}
                 ).to_csv(folder / "pareto.csv", index=False)
    (folder / "summary.json").write_text(json.dumps({"objectives": ["val_top1:max",
                                                                    f"{KEY}:max"]}))
    return folder


@pytest.mark.slow
def test_retrain_measure_and_front_report(tmp_path):
    search = _search_folder(tmp_path / "search")
    result = runner.invoke(app, ["retrain", str(search / "pareto.csv"), "--out",
                                 str(tmp_path / "rt"), "--config", "digits_full_tiny.ini",
                                 # passed to the trainer: a short run
                                 "--trainval.max_steps", "4", "--trainval.max_val_steps", "1"])
    assert result.exit_code == 0, result.output
    trained = pd.read_csv(tmp_path / "rt" / "accuracy.csv").set_index("arch_id")
    assert sorted(trained.index) == sorted(as_arch(a, ANB_SPACE).id for a in ARCHS)
    assert (tmp_path / "rt" / "archs.txt").read_text().split() == ARCHS
    result = runner.invoke(app, ["measure", str(DEVICE),
                                 "--archs", str(tmp_path / "rt" / "archs.txt"),
                                 "--out", str(tmp_path / "m"), "--no-progress"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["front-report", str(search), "--out", str(tmp_path / "rep"),
                                 "--accuracy", str(tmp_path / "rt" / "accuracy.csv"),
                                 "--measured", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "rep" / "front_report.csv").set_index("arch_id")
    for arch_id, row in table.iterrows():
        record = json.loads((tmp_path / "m" / "cpu-ort-32" / f"{arch_id}.json").read_text())
        assert row[f"{KEY}_measured"] == record["platform_perf"][KEY]["throughput_mean"]
        assert row["val_top1_measured"] == trained.loc[arch_id, "val_top1"]
    scores = table[["val_top1_measured", f"{KEY}_measured"]].to_numpy()
    off = [any((o >= s).all() and (o > s).any() for o in scores) for s in scores]
    assert table["falls_off"].tolist() == off
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["complete"] == 3 and sorted(summary["falls_off"]) == sorted(
        table.loc[np.array(off), "arch"])
    assert "val_top1_kendall_tau" in summary
    assert "plotly" in (tmp_path / "rep" / "front_report.html").read_text()[:5000].lower()


def test_front_report_without_measurements_marks_designs_missing(tmp_path):
    search = _search_folder(tmp_path / "search")
    result = runner.invoke(app, ["front-report", str(search), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["complete"] == 0 and summary["falls_off"] == [] and len(summary["missing"]) == 3


def test_front_report_with_an_analytic_objective(tmp_path):
    """`params:min` is counted from the architecture: the report takes the search's (exact)
    value as measured and recomputes the front on it (an IndexError traceback before)."""
    search = tmp_path / "search"
    search.mkdir()
    ids = [as_arch(a, ANB_SPACE).id for a in ARCHS]
    pd.DataFrame({"arch": ARCHS, "arch_id": ids, KEY: [3000.0, 1500.0, 400.0],
                  "params": [1.0, 3.0, 5.0]}).to_csv(search / "pareto.csv", index=False)
    (search / "summary.json").write_text(json.dumps({"objectives": [f"{KEY}:max",
                                                                    "params:min"]}))
    folder = tmp_path / "m" / "cpu-ort-32"  # what `anb measure` writes, per architecture
    folder.mkdir(parents=True)
    for arch_id, value in zip(ids, [1000.0, 2000.0, 300.0], strict=True):
        (folder / f"{arch_id}.json").write_text(json.dumps(
            {"platform_perf": {KEY: {"throughput_mean": value}}}))
    result = runner.invoke(app, ["front-report", str(search), "--out", str(tmp_path / "rep"),
                                 "--measured", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "rep" / "front_report.csv")
    assert table["params_measured"].tolist() == [1.0, 3.0, 5.0]
    assert table[f"{KEY}_measured"].tolist() == [1000.0, 2000.0, 300.0]
    assert table["falls_off"].tolist() == [False, False, True]  # the third is dominated
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["complete"] == 3 and summary["exact"] == ["params"]
    assert summary["falls_off"] == [ARCHS[2]] and "params_kendall_tau" not in summary
    assert f"{KEY}_kendall_tau" in summary


def test_bad_inputs(tmp_path):
    result = runner.invoke(app, ["retrain", str(tmp_path / "nope.csv"), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "does not exist" in result.output
    bad = tmp_path / "bad.csv"
    bad.write_text("name\nx\n")
    result = runner.invoke(app, ["retrain", str(bad), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "has no architecture: give an 'arch' column" in result.output
    result = runner.invoke(app, ["retrain", str(_search_folder(tmp_path / "s") / "pareto.csv"),
                                 "--out", str(tmp_path), "--config", "nope.ini"])
    assert result.exit_code == 2 and "no shipped config accuracy/'nope.ini'" in result.output


def test_retrain_that_trains_nothing_claims_no_accuracy_file(tmp_path):
    """The full recipe without ImageNet: the trainer refuses, so nothing is exported and the
    command must not point at an accuracy.csv it did not write."""
    out = tmp_path / "rt"
    result = runner.invoke(app, ["retrain", str(_search_folder(tmp_path / "s") / "pareto.csv"),
                                 "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert not (out / "accuracy.csv").exists()
    assert "accuracy ->" not in result.output and "no accuracy written" in result.output
    one = tmp_path / "one"
    _search_folder(one)
    (one / "summary.json").write_text(json.dumps({"objectives": ["val_top1:max"]}))
    result = runner.invoke(app, ["front-report", str(one), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "needs a two-objective search" in result.output


@pytest.mark.parametrize(("extra", "message"), [
    (["--measured", "missing"], "--measured 'MISSING' is not a folder"),
    (["--measured", "EMPTY"], f"--measured 'EMPTY' holds no records of the search's speed "
                              f"objectives ['{KEY}']"),
    (["--accuracy-metric", "bogus"], "--accuracy-metric 'bogus' is not an objective of the "
                                     f"search; its objectives: ['val_top1', '{KEY}']"),
    (["--accuracy", "EMPTY"], "--accuracy 'EMPTY' holds no 'val_top1' records"),
], ids=["measured-missing", "measured-empty", "unknown-accuracy-metric", "accuracy-empty"])
def test_front_report_refuses_sources_it_cannot_use(tmp_path, extra, message):
    """A --measured that is no measure folder of the search's speed objective, an accuracy
    metric that is no objective, an empty accuracy dataset: one error, no report (the report
    was written with nothing measured and exit 0)."""
    search = _search_folder(tmp_path / "s")
    (tmp_path / "empty").mkdir()
    paths = {"EMPTY": str(tmp_path / "empty"), "missing": str(tmp_path / "missing")}
    argv = [paths.get(a, a) for a in extra]
    result = runner.invoke(app, ["front-report", str(search), "--out", str(tmp_path / "o"),
                                 *argv])
    want = message.replace("EMPTY", str(tmp_path / "empty")).replace(
        "MISSING", str(tmp_path / "missing"))
    assert result.exit_code == 2 and f"error: {want}" in " ".join(result.output.split()), \
        result.output
    assert not (tmp_path / "o").exists()
