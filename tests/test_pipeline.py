"""``anb pipeline`` end to end at small sizes: every stage runs for real (trainer, onnxruntime
timing, merge, surrogate fit on the released dataset, adaptation to the measured CPU, NSGA-II on
it, the HTML report), a rerun resumes, and bad input stops it before any work."""
import base64
import html.parser
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anb.pipeline_report import LEVEL
from anb.records import load_dataset, load_records
from anb.resources import RELEASED_DATASET as DATASET_TARBALL
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import load
from anb.surrogates.adapt.model import AdaptedBenchmark
from tests.browser import SCREENSHOTS, browser_available, open_page, serve
from tests.console_fixtures import run_console

SMALL = ["--num-archs", "2", "--num-measured", "6", "--train-set", "trainval.epochs=1",
         "--train-set", "trainval.eval_epochs=1", "--train-set", "trainval.max_steps=2",
         "--measure-budget", "0.1", "--no-baseline", "--search-budget", "150"]
SURROGATE_CONFIG = {"targets": ["val_top1", "throughput_zcu102"], "hole_folds": 0,
                    "default": {"family": "xgboost", "n_members": 2,
                                "params": {"n_estimators": 40, "max_depth": 3}}}


class Tables(html.parser.HTMLParser):
    """Every <table>'s cells (stdlib parser: the page is plain HTML)."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append("".join(self.cell))
            self.cell = None


def first_table(page: str) -> pd.DataFrame:
    """The page's first table, numbers and True/False parsed."""
    parser = Tables()
    parser.feed(page)
    head, *rows = parser.tables[0]
    frame = pd.DataFrame(rows, columns=head)
    for column in ("measured", "predicted", "lo", "hi"):
        frame[column] = frame[column].astype(float)
    for column in ("inside", "ood"):
        frame[column] = frame[column].map({"True": True, "False": False})
    return frame


def run_pipeline(*args: str) -> subprocess.CompletedProcess:
    """``anb pipeline args`` in this process through the console entry's wrapper
    (tests/console_fixtures.py): the run, without an interpreter's start-up."""
    return run_console(["pipeline", *args], Path.cwd(), {"OMP_NUM_THREADS": "1"})


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
    archs, measured = summary["archs"], summary["measured_archs"]
    assert len(archs) == 2 and len(measured) == 6 and measured[:2] == archs
    assert (out / "space" / "archs.txt").read_text().split() == measured

    # one dataset, in the released records' shape, joins accuracy and this CPU's speed
    dataset = load_dataset(out / "dataset" / "records", space=ANB_SPACE)
    assert sorted(dataset["arch"]) == sorted(measured)
    assert sorted(dataset.dropna(subset=["val_top1"])["arch"]) == sorted(archs)
    assert dataset["val_top1"].dropna().between(0, 100).all()
    assert (dataset["latency_cpu-ort"] > 0).all() and (dataset["throughput_cpu-ort"] > 0).all()
    assert summary["throughput"]["merge"]["gaps"] == {}
    assert len(summary["throughput"]["merge"]["device_only"]) == 4
    assert len(load_records(out / "dataset" / "records", space=ANB_SPACE)) == 6

    base = load(out / "surrogates" / "model")
    assert set(base.metrics) == {"val_top1", "throughput_zcu102"}
    assert "kendall_tau" in (out / "surrogates" / "evaluation.md").read_text()
    assert (out / "surrogates" / "report").is_dir()

    # the adapted benchmark is built from this run's measurements, on the fitted base
    adapted = load(out / "adapted")
    assert isinstance(adapted, AdaptedBenchmark)
    assert adapted.metrics == ["val_top1", "throughput_zcu102", "latency_cpu-ort"]
    assert adapted.info["measured"]["n"] == 6 and adapted.info["measured"]["file"] == "throughput"
    assert summary["adapted"] == {**summary["adapted"], "target": "latency_cpu-ort",
                                  "n_points": 6}
    mine = load_dataset(out / "throughput",
                        space=ANB_SPACE).groupby("arch")["latency_cpu-ort"].mean()
    assert sorted(mine.index) == sorted(measured)

    # the search ran on the adapted benchmark for the measured device
    assert summary["search"]["objectives"] == ["val_top1:max", "latency_cpu-ort:min"]
    assert summary["search"]["evaluations"] == 150 and summary["search"]["pareto_size"] >= 1
    front = pd.read_csv(out / "search" / "pareto.csv")
    assert len(front) == summary["search"]["pareto_size"]
    again = adapted.query(front["arch"].tolist())
    np.testing.assert_allclose(front["latency_cpu-ort"], again["latency_cpu-ort"], rtol=1e-9)

    # the report: measured vs predicted with intervals, a Pareto plot, the OOD flags
    page = (out / "report.html").read_text()
    assert "<script" not in page and "http" not in page
    table = first_table(page)
    assert sorted(table["arch"]) == sorted(measured)
    table = table.set_index("arch").loc[mine.index]
    np.testing.assert_allclose(table["measured"], mine.to_numpy(), rtol=1e-3)
    predicted = adapted.query(mine.index.tolist())
    mean, std = predicted["latency_cpu-ort"], predicted["latency_cpu-ort_std"]
    np.testing.assert_allclose(table["predicted"], mean, rtol=1e-3)
    sigma = np.sqrt(np.log1p((std / mean) ** 2))  # the log-normal's own 5 % / 95 % quantiles
    z = 1.6448536269514722
    assert LEVEL == 0.9
    np.testing.assert_allclose(table["hi"], mean * np.exp(z * sigma), rtol=1e-3)
    np.testing.assert_allclose(table["lo"], mean * np.exp(-z * sigma), rtol=1e-3)
    assert list(table["ood"]) == list(predicted["latency_cpu-ort_ood"])
    image = re.search(r'<img alt="Pareto front on cpu-ort" src="data:image/png;base64,([^"]+)"',
                      page)
    assert image and base64.b64decode(image.group(1)) == (out / "search" / "search.png"
                                                         ).read_bytes()
    assert f"Front ({len(front)} architectures, {int(front['ood'].sum())} flagged" in page
    # as a person sees it: rendered in Chromium, its plot loads, no console error
    if browser_available():
        with serve(out) as base:
            check = open_page(base + "report.html", SCREENSHOTS / "pipeline-report.png")
        assert "anb pipeline" in check.main_text and "Measured vs predicted" in check.main_text
        assert check.images >= 1 and check.broken_images == [], check.broken_images
        assert check.console_errors == [], check.console_errors

    manifest_time = (out / "surrogates" / "model" / "manifest.json").stat().st_mtime_ns
    second = run_pipeline(*args)
    assert second.returncode == 0, second.stdout + second.stderr
    again_summary = json.loads((out / "SUMMARY.json").read_text())
    assert again_summary["throughput"]["measured"] == []
    assert len(again_summary["throughput"]["reused"]) == 6
    assert "'done': 2" in second.stdout and "'trained': 0" in second.stdout
    assert "reusing" in second.stdout
    assert (out / "surrogates" / "model" / "manifest.json").stat().st_mtime_ns == manifest_time


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    (folder / "garbage.json").write_text("{not json")
    (folder / "unknown.json").write_text(json.dumps({"colour": "blue"}))
    (folder / "corrupt.tar.gz").write_bytes(DATASET_TARBALL.read_bytes()[:5000])
    return folder


@pytest.mark.parametrize("args, message", [
    (["--train-set", "epochs3"], "--train-set 'epochs3' is malformed"),
    (["--surrogate-config", "nope.json"], "--surrogate-config 'nope.json': no such file"),
    (["--surrogate-config", "{bad}/garbage.json"], "garbage.json: not valid JSON"),
    (["--surrogate-config", "{bad}/unknown.json"], "unknown config field(s) ['colour']"),
    (["--train-set", "trainval.epochs=0"], "trainval.epochs"),
    (["--device", "no-such-board"], "--device: device='no-such-board' is invalid"),
    (["--released", "{bad}/absent.tar.gz"], "absent.tar.gz': no such file"),
    (["--released", "{bad}/corrupt.tar.gz"], "corrupt.tar.gz' is not a readable dataset"),
    (["--num-measured", "4"], "--num-measured 4 is too small"),
])
def test_pipeline_bad_input_is_one_error_line_before_any_work(tmp_path, bad_files, args,
                                                              message):
    out = tmp_path / "out"
    args = [a.replace("{bad}", str(bad_files)) for a in args]
    # in this process through the console entry's wrapper (tests/console_fixtures.py): the
    # checks' work without an interpreter's start-up per case
    result = run_console(["pipeline", "--out", str(out), *SMALL, *args], tmp_path,
                         {"OMP_NUM_THREADS": "1"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not out.exists()
