"""Search with CPU measurement in the loop (onnxruntime on this CPU, for real): the evaluator's
cache, batches and budgets, the queue path through a real SQLite queue and worker, and
``anb search --measure`` end to end with surrogate accuracy."""
from __future__ import annotations

import functools
import json
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import anb
from anb.cli import app
from anb.nas.evaluators import analytic_evaluator, combined
from anb.nas.measured import BudgetExhausted, LocalMeasurer, MeasuredEvaluator, QueueMeasurer
from anb.nas.search import regularized_evolution
from anb.resources import RELEASED_DATASET as DATASET_TARBALL
from anb.searchspace.arch import archs_to_choices
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

DEVICE = Path(__file__).parent / "data" / "cpu-ort-32.toml"
KEY = "throughput_cpu-ort-32"


class CountingMeasurer(LocalMeasurer):
    """The real local measurer, counting how many batches it was handed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []

    def submit(self, archs):
        self.batches.append(len(archs))
        return super().submit(archs)


@pytest.mark.slow
def test_cache_batches_and_measurement_budget(tmp_path):
    archs = Sampler(3, space=ANB_SPACE).sample(6)
    measurer = CountingMeasurer(str(DEVICE), tmp_path)
    ev = MeasuredEvaluator(measurer, analytic_evaluator(32, space=ANB_SPACE), max_measurements=4)
    first = ev(archs_to_choices(archs[:2], space=ANB_SPACE), [KEY, "params"])
    assert measurer.batches == [2], "a batch is submitted at once"
    again = ev(archs_to_choices(archs[:3], space=ANB_SPACE), [KEY, "params"])
    assert measurer.batches == [2, 1] and ev.measured == 3, "cached architectures not re-measured"
    np.testing.assert_array_equal(again[KEY][:2], first[KEY])
    record = json.loads((tmp_path / "cpu-ort-32" / f"{archs[0].id}.json").read_text())
    assert first[KEY][0] == record["platform_perf"][KEY]["throughput_mean"]
    np.testing.assert_allclose(first["params"], analytic_evaluator(32, space=ANB_SPACE)(
        archs_to_choices(archs[:2], space=ANB_SPACE), ["params"])["params"])
    with pytest.raises(BudgetExhausted, match="4 measurements spent"):
        ev(archs_to_choices(archs[3:6], space=ANB_SPACE), [KEY])
    assert ev.measured == 4 and len(ev.log) == 2 + 3 + 1, "the measured one is logged"
    measurer.close()
    fresh = CountingMeasurer(str(DEVICE), tmp_path)
    ev2 = MeasuredEvaluator(fresh, analytic_evaluator(32, space=ANB_SPACE), max_measurements=1)
    ev2(archs_to_choices(archs[:4], space=ANB_SPACE), [KEY])
    assert fresh.batches == [] and ev2.measured == 0, "records on disk are the cache"
    fresh.close()


def test_hours_budget_and_failed_measurement(tmp_path):
    measurer = LocalMeasurer(str(DEVICE), tmp_path)
    ev = MeasuredEvaluator(measurer, analytic_evaluator(32, space=ANB_SPACE), max_hours=1e-9)
    with pytest.raises(BudgetExhausted, match="h of measurement spent"):
        ev(archs_to_choices(Sampler(4, space=ANB_SPACE).sample(2), space=ANB_SPACE), [KEY])
    assert ev.measured == 0 and not list(tmp_path.glob("*/*.json"))
    measurer.close()
    with pytest.raises(ValueError, match=r"max_measurements \(--max-measurements\) 0 is invalid"):
        MeasuredEvaluator(measurer, analytic_evaluator(32, space=ANB_SPACE), max_measurements=0)


@pytest.mark.slow
def test_queue_measurer_with_a_real_worker(tmp_path):
    from anb.collect_throughput.queue.stages import make_context
    from anb.jobs.queue import open_queue
    from anb.jobs.worker import Worker

    url = str(tmp_path / "queue.db")
    worker = Worker(open_queue(url), ["measure"], make_context(tmp_path / "store", None,
                                                               [str(DEVICE)]),
                    name="test-worker", poll_seconds=0.1)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    measurer = QueueMeasurer(url, str(DEVICE), [KEY], ANB_SPACE, poll_seconds=0.1)
    try:
        ev = MeasuredEvaluator(measurer, analytic_evaluator(32, space=ANB_SPACE))
        archs = Sampler(5, space=ANB_SPACE).sample(2)
        values = ev(archs_to_choices(archs, space=ANB_SPACE), [KEY])[KEY]
        assert (values > 0).all() and ev.measured == 2
        jobs = open_queue(url).jobs()
        assert [j.state for j in jobs] == ["done", "done"]
        assert sorted(j.result["values"][KEY] for j in jobs) == sorted(values)
    finally:
        worker.stop.set()
        measurer.close()
        thread.join()


@pytest.fixture(scope="module")
def accuracy_benchmark(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    config = folder / "tiny.json"
    # no internal hold-outs: the search reads predicted means only
    config.write_text(json.dumps({"hole_folds": 0, "default": {
        "family": "xgboost", "n_members": 1, "params": {"n_estimators": 60,
                                                        "learning_rate": 0.2}}}))
    result = CliRunner().invoke(app, ["fit", str(DATASET_TARBALL), "--out", str(folder / "b"),
                                      "--config", str(config), "--targets", "val_top1"])
    assert result.exit_code == 0, result.output
    return folder / "b"


@pytest.mark.slow
def test_search_measure_end_to_end(tmp_path, accuracy_benchmark):
    from anb.surrogates import load

    out = tmp_path / "search"
    result = CliRunner().invoke(app, [
        "search", "--benchmark", str(accuracy_benchmark), "--measure", str(DEVICE),
        "-o", "val_top1:max", "-o", f"{KEY}:max", "--algorithm", "random", "--budget", "200",
        "--max-measurements", "6", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "6 measurements" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["measurements"] == 6 and summary["stopped"] == "6 measurements spent"
    assert summary["anb_version"] == anb.__version__
    history = pd.read_csv(out / "history.csv")
    measurements = out / "measurements" / "cpu-ort-32"
    assert len(history) == 6 and len(list(measurements.glob("*.json"))) == 6
    for row in history.itertuples():
        record = json.loads((measurements / f"{row.arch_id}.json").read_text())
        assert history.loc[row.Index, KEY] == record["platform_perf"][KEY]["throughput_mean"]
    predicted = load(accuracy_benchmark).query(list(history["arch"]), metrics=["val_top1"])
    np.testing.assert_allclose(history["val_top1"], predicted["val_top1"], rtol=1e-6)
    front = pd.read_csv(out / "pareto.csv")
    scores = history[["val_top1", KEY]].to_numpy()
    dominated = [any((o >= s).all() and (o > s).any() for o in scores) for s in scores]
    assert sorted(front["arch_id"]) == sorted(history.loc[~np.array(dominated), "arch_id"])


def test_search_measure_rejects_unused_device(tmp_path):
    result = CliRunner().invoke(app, ["search", "--measure", str(DEVICE), "-o", "params:min",
                                      "--budget", "4", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "no objective or constraint uses its metrics" in result.output


@pytest.mark.slow
def test_evolution_with_measurement_in_the_loop(tmp_path):
    from anb.nas.measured import search_measured

    algo = functools.partial(regularized_evolution, population=4, sample=2, batch=2)
    s = search_measured(algo, combined(None, resolution=32, space=ANB_SPACE), str(DEVICE), None,
                        [f"{KEY}:max", "params:min"], ["params<=6"], 8, 0, tmp_path)
    assert s["stopped"] == "evaluation budget" and s["evaluations"] == 8
    assert s["measurements"] + s["cache_hits"] == 8 and s["pareto_size"] >= 1
    assert all(p["params"] <= 6 for p in s["pareto"])


@pytest.mark.slow
def test_supported_only_reaches_the_measured_search(tmp_path, monkeypatch):
    """`anb search --measure ... --supported-only` restricts the search like the surrogate-only
    one (it was silently dropped with --measure)."""
    from anb.nas import search

    seen = []

    def capture(problem, budget, seed, progress):
        seen.append(problem.supported_only)
        return search.random_search(problem, budget, seed=seed, progress=progress)

    monkeypatch.setitem(search.ALGORITHMS, "capture", capture)
    for flag in ([], ["--supported-only"]):
        result = CliRunner().invoke(app, ["search", "--measure", str(DEVICE), "-o", f"{KEY}:max",
                                          "--algorithm", "capture", "--budget", "2", "--out",
                                          str(tmp_path / str(len(flag))), *flag])
        assert result.exit_code == 0, result.output
    assert seen == [False, True]
    assert json.loads((tmp_path / "1" / "summary.json").read_text())["supported_only"] is True


class OneFailingMeasurer(LocalMeasurer):
    """The real local measurer, except that the board rejects one chosen architecture
    (a stand-in for a model the device refuses)."""

    def __init__(self, bad: str, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bad = bad

    def _measure(self, archs, futures):
        keep = [(a, f) for a, f in zip(archs, futures, strict=True) if a.id != self.bad]
        for arch, fut in zip(archs, futures, strict=True):
            if arch.id == self.bad:
                fut.set_exception(RuntimeError("step 'load' (rejected): model refused (stand-in)"))
        super()._measure([a for a, _ in keep], [f for _, f in keep])


def test_failed_measurement_is_the_worst_value_and_stays_off_the_front(tmp_path):
    from anb.nas.objectives import Objective

    archs = Sampler(6, space=ANB_SPACE).sample(3)
    params = analytic_evaluator(32, space=ANB_SPACE)(archs_to_choices(archs, ANB_SPACE),
                                                     ["params"])["params"]
    archs.insert(1, archs.pop(int(np.argmin(params))))  # the smallest fails: on the front if kept
    measurer = OneFailingMeasurer(archs[1].id, str(DEVICE), tmp_path)
    ev = MeasuredEvaluator(measurer, analytic_evaluator(32, space=ANB_SPACE))
    values = ev(archs_to_choices(archs, space=ANB_SPACE), [KEY, "params"])
    measurer.close()
    assert values[KEY][1] == 0.0 and values[KEY][0] > 0 and values[KEY][2] > 0
    assert ev.measured == 3 and "model refused" in ev.failed[archs[1].id]
    # a failed design is not measured again, and is never on the front
    ev(archs_to_choices(archs[1:2], space=ANB_SPACE), [KEY])
    assert ev.measured == 3
    s = ev.report(tmp_path / "report", [Objective.parse(f"{KEY}:max"),
                                        Objective.parse("params:min")])
    assert archs[1].id in s["failed"] and archs[1].id not in {p["arch_id"] for p in s["pareto"]}
    history = pd.read_csv(tmp_path / "report" / "history.csv")
    assert not history.loc[history["arch_id"] == archs[1].id, "measured"].any()


@pytest.mark.parametrize(("extra", "message"), [
    (["--max-hours", "-1"], "Invalid value for '--max-hours'"),
    (["--max-measurements", "0"], "Invalid value for '--max-measurements'"),
    (["-o", "nonsense:min"], "metric(s) ['nonsense'] need a surrogate benchmark"),
])
def test_search_measure_refuses_before_any_thread_folder_or_measurement(tmp_path, extra,
                                                                         message):
    """These hung (the measuring thread was never stopped) or measured a batch first."""
    out = tmp_path / "out"
    before = {t.name for t in threading.enumerate()}
    result = CliRunner().invoke(app, ["search", "--measure", str(DEVICE), "-o", f"{KEY}:max",
                                      "--budget", "4", "--out", str(out), *extra])
    assert result.exit_code == 2 and message in result.stderr
    assert not out.exists()
    assert {t.name for t in threading.enumerate()} - before == set()


def test_measured_search_stops_its_thread_on_any_error(tmp_path):
    """An error inside the search (here a metric the other evaluator refuses mid-run) ends the
    measuring thread instead of leaving the process hanging."""
    from anb.nas.measured import search_measured

    def failing(choices, metrics):
        raise RuntimeError("evaluator broke")

    def other(choices, metrics):  # answers the up-front check, then fails inside the search
        other.calls += 1
        if other.calls > 1:
            failing(choices, metrics)
        return {m: np.zeros(len(choices)) for m in metrics}

    other.calls = 0
    with pytest.raises(RuntimeError, match="evaluator broke"):
        search_measured(functools.partial(regularized_evolution, population=4, sample=2,
                                          batch=2), other, str(DEVICE), None,
                        [f"{KEY}:max", "params:min"], [], 8, 0, tmp_path)
    assert not [t for t in threading.enumerate() if t.name == "anb-measure"]
