"""``anb pipeline`` end to end at small sizes: every stage runs for real (trainer, onnxruntime
timing, merge, surrogate fit on the released dataset, NSGA-II) and a rerun resumes."""
import json
import os
import subprocess
import sys

import pytest

from anb.records import load_records
from anb.resources import RELEASED_DATASET as DATASET_TARBALL
from anb.surrogates import load

SMALL = ["--num-archs", "2", "--train-set", "trainval.epochs=1",
         "--train-set", "trainval.eval_epochs=1", "--train-set", "trainval.max_steps=2",
         "--measure-budget", "0.1", "--no-baseline", "--search-budget", "150"]
SURROGATE_CONFIG = {"targets": ["val_top1", "throughput_zcu102"],
                    "default": {"family": "xgboost", "n_members": 2,
                                "params": {"n_estimators": 40, "max_depth": 3}}}


def run_pipeline(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "anb", "pipeline", *args],
                          capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture(scope="module")
def surrogate_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "tiny.json"
    path.write_text(json.dumps(SURROGATE_CONFIG))
    return path


@pytest.mark.slow
def test_pipeline_builds_a_benchmark_and_resumes(tmp_path, surrogate_config):
    out = tmp_path / "out"
    args = ["--out", str(out), "--released", str(DATASET_TARBALL),
            "--surrogate-config", str(surrogate_config), *SMALL]
    first = run_pipeline(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    summary = json.loads((out / "SUMMARY.json").read_text())
    archs = summary["archs"]
    assert len(archs) == 2 and (out / "space" / "archs.txt").read_text().split() == archs

    # one dataset, in the released records' shape, joins accuracy and this CPU's speed
    records = load_records(out / "dataset" / "records")
    assert sorted(r["provenance"]["arch"] for r in records) == sorted(archs)
    for record in records:
        assert 0 <= record["metrics"]["val_top1"] <= 100
        for key in ("latency_cpu-ort", "throughput_cpu-ort"):
            kind = key.split("_")[0]
            assert record["platform_perf"][key][f"{kind}_mean"] > 0
    assert summary["throughput"]["merge"]["gaps"] == {}

    bench = load(out / "surrogates" / "model")
    assert set(bench.metrics) == {"val_top1", "throughput_zcu102"}
    assert "kendall_tau" in (out / "surrogates" / "evaluation.md").read_text()
    assert (out / "surrogates" / "report").is_dir()
    assert summary["search"]["evaluations"] == 150 and summary["search"]["pareto_size"] >= 1
    front = (out / "search" / "pareto.csv").read_text().splitlines()
    assert len(front) == summary["search"]["pareto_size"] + 1

    manifest_time = (out / "surrogates" / "model" / "manifest.json").stat().st_mtime_ns
    second = run_pipeline(*args)
    assert second.returncode == 0, second.stdout + second.stderr
    again = json.loads((out / "SUMMARY.json").read_text())
    assert again["throughput"]["measured"] == [] and len(again["throughput"]["reused"]) == 2
    assert "'done': 2" in second.stdout and "'trained': 0" in second.stdout
    assert "reusing" in second.stdout
    assert (out / "surrogates" / "model" / "manifest.json").stat().st_mtime_ns == manifest_time


@pytest.mark.slow
def test_pipeline_without_the_released_dataset_stops_after_the_dataset(tmp_path):
    out = tmp_path / "out"
    result = run_pipeline("--out", str(out), "--released", str(tmp_path / "absent.tar.gz"),
                          *SMALL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "surrogates: skipped" in result.stdout
    summary = json.loads((out / "SUMMARY.json").read_text())
    assert summary["surrogates"] is None and "search" not in summary
    assert len(load_records(out / "dataset" / "records")) == 2


@pytest.mark.parametrize("args, message", [
    (["--train-set", "epochs3"], "--train-set 'epochs3' is malformed"),
    (["--surrogate-config", "nope.json"], "--surrogate-config 'nope.json': no such file"),
    (["--train-set", "trainval.epochs=0"], "trainval.epochs"),
])
@pytest.mark.slow
def test_pipeline_bad_input_is_a_clear_error(tmp_path, args, message):
    result = run_pipeline("--out", str(tmp_path / "out"), *SMALL, *args)
    assert result.returncode == 2
    assert message in " ".join((result.stdout + result.stderr).split())
