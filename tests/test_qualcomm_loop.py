"""A Qualcomm SNPE device in the measurement loop: ``anb search --measure <qualcomm config>``
here, and the queue worker's ``measure`` stage for a Qualcomm device (records published once;
tool missing, tool error and no device ending as the worker does for any device).

As in ``tests/test_qualcomm.py`` the SDK tools are STAND-INS (tests/standins/snpe/) and the
board is this machine through the ``local://`` transport (an ``adb`` stand-in with no board
attached for "no device"); 32 px models, 1 s throughput runs (0.2 s of the stand-in's time).
"""
from __future__ import annotations

import functools
import json
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_throughput.targets.base import MeasureTarget
from anb.collect_throughput.targets.devices import as_target, load_target
from anb.jobs.queue import JobSpec, open_queue
from anb.searchspace.arch import as_arch
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.qualcomm_helpers import STANDIN_SECOND, STANDINS

KEYS = ("throughput_qc-32", "latency_qc-32")
CONFIG = """# a small SNPE DSP config for tests: the board is this machine (local://)
name = "{name}"
sdk = "snpe"
runtime = "dsp"
transport = "{transport}"
remote_dir = "{board}"
resolution = 32
duration = 1
perf_profile = "balanced"
latency_inputs = 2
repeats = 2

[quantization]
calibration_images = 4
act_bitwidth = {act_bitwidth}
"""


def qualcomm_config(folder: Path, name: str = "qc-32", transport: str = "local://",
                    act_bitwidth: int = 8, perf_profile: str = "balanced") -> Path:
    path = folder / f"{name}.toml"
    path.write_text(CONFIG.format(name=name, transport=transport, board=folder / "board",
                                  act_bitwidth=act_bitwidth).replace(
        '"balanced"', f'"{perf_profile}"'))
    return path


def _path(*first: Path) -> str:
    return ":".join([*map(str, first), str(Path(sys.executable).parent), "/usr/bin", "/bin"])


@pytest.fixture
def sdk_path(monkeypatch):
    """The SNPE stand-ins first on PATH (with this interpreter's python3), a throughput
    second of theirs 0.2 s long."""
    monkeypatch.setenv("PATH", _path(STANDINS))
    monkeypatch.delenv("SNPE_ROOT", raising=False)
    monkeypatch.delenv("ANB_STANDIN_SNPE_RUNTIMES", raising=False)
    monkeypatch.setenv("ANB_STANDIN_SNPE_SECOND", STANDIN_SECOND)


def _record(folder: Path, arch_id: str) -> dict:
    return json.loads((folder / "qc-32" / f"{arch_id}.json").read_text())


def test_a_qualcomm_config_is_a_measurement_target(tmp_path):
    target = load_target(qualcomm_config(tmp_path), space=ANB_SPACE.name)
    assert (target.name, target.keys) == ("qc-32", KEYS)
    assert type(target).__name__ == "QualcommTarget"
    assert isinstance(target, MeasureTarget) and as_target(target) is target  # as is
    assert load_target("snpe-dsp", {"duration": 5}, space=ANB_SPACE.name).config.duration == 5
    assert type(load_target("cpu-ort", space=ANB_SPACE.name)).__name__ == "LocalTarget"
    with pytest.raises(ValueError, match="sdk='qnn' cannot be measured"):
        load_target("qnn-htp", space=ANB_SPACE.name)


@pytest.mark.slow
def test_search_measure_qualcomm_end_to_end(tmp_path, sdk_path):
    config = qualcomm_config(tmp_path)
    out = tmp_path / "search"
    result = CliRunner().invoke(app, [
        "search", "--measure", str(config), "-o", f"{KEYS[0]}:max", "-o", "params:min",
        "--algorithm", "random", "--budget", "40", "--max-measurements", "2", "--seed", "2",
        "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "qc-32 in the loop" in result.output and "2 measurements" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"] == "qc-32" and summary["measurements"] == 2
    assert summary["stopped"] == "2 measurements spent" and summary["failed"] == {}
    history = pd.read_csv(out / "history.csv")
    assert len(history) == 2 and history["measured"].all()
    records = out / "measurements"
    assert len(list((records / "qc-32").glob("*.json"))) == 2
    for row in history.itertuples():
        record = _record(records, row.arch_id)
        for key in KEYS:  # the values the search used are measure_qualcomm's records
            kind = key.split("_")[0]
            assert history.loc[row.Index, key] == record["platform_perf"][key][f"{kind}_mean"]
        entry = record["platform_perf"][KEYS[0]]
        assert entry["sdk"] == "snpe" and entry["runtime"] == "dsp" and entry["precision"] == "int8"
        assert (records / "qc-32" / entry["layers_file"]).is_file()
    assert summary["pareto_size"] >= 1
    assert not any((tmp_path / "board").iterdir()), "board folders removed"


@pytest.mark.slow
def test_worker_measures_qualcomm_jobs_for_a_search_through_the_queue(tmp_path, sdk_path,
                                                                      monkeypatch):
    import anb.jobs.worker as worker_module
    from anb.collect_throughput.queue.stages import make_context
    from anb.jobs.worker import Worker
    from anb.nas.evaluators import combined
    from anb.nas.measured import search_measured
    from anb.nas.search import random_search

    published: list[int] = []
    real_publish = worker_module.publish

    def counting_publish(job, result, out):
        published.append(job.id)
        return real_publish(job, result, out)

    monkeypatch.setattr(worker_module, "publish", counting_publish)
    config = qualcomm_config(tmp_path)
    url = str(tmp_path / "queue.db")
    results = tmp_path / "results"
    worker = Worker(open_queue(url), ["measure"],
                    make_context(tmp_path / "store", results, [str(config)]),
                    name="qc-worker", poll_seconds=0.1)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    search = functools.partial(search_measured, random_search, combined(None, resolution=32,
                                                                        space=ANB_SPACE),
                               str(config), url, [f"{KEYS[0]}:max", "params:min"], [], 20, 3,
                               max_measurements=2)
    try:
        first = search(out=tmp_path / "s1")
        again = search(out=tmp_path / "s2")  # the same candidates: the queue's jobs answer
    finally:
        worker.stop.set()
        thread.join()
    assert first["measurements"] == 2 and first["failed"] == {}
    jobs = open_queue(url).jobs()
    assert [(j.stage, j.device, j.state) for j in jobs] == [("measure", "qc-32", "done")] * 2
    assert sorted(published) == sorted(j.id for j in jobs), "each record published once"
    assert worker.stats.done == 2 and again["measurements"] == 2
    history = pd.read_csv(tmp_path / "s1" / "history.csv")
    for job in jobs:
        arch_id = as_arch(job.arch, ANB_SPACE).id
        record = _record(results, arch_id)
        assert record == job.result["record"]
        perf = record["platform_perf"]
        assert job.result["values"] == {KEYS[0]: perf[KEYS[0]]["throughput_mean"],
                                        KEYS[1]: perf[KEYS[1]]["latency_mean"]}
        row = history[history["arch_id"] == arch_id].iloc[0]
        assert row[KEYS[0]] == perf[KEYS[0]]["throughput_mean"]
        layers = pd.read_csv(results / "qc-32" / perf[KEYS[0]]["layers_file"])
        assert (layers["time_us"] > 0).all()
    assert sorted(p.name for p in (results / "qc-32").iterdir()) == sorted(
        f"{as_arch(j.arch, ANB_SPACE).id}{s}" for j in jobs for s in (".json", ".layers.csv"))
    assert pd.read_csv(tmp_path / "s2" / "history.csv")[KEYS[0]].tolist() == \
        history[KEYS[0]].tolist()


@pytest.mark.slow
def test_queue_jobs_on_qualcomm_devices_fail_naming_the_step(tmp_path, monkeypatch):
    from anb.collect_throughput.queue.stages import make_context
    from anb.jobs.worker import Worker

    arch = str(Sampler(7, space=ANB_SPACE).sample(1)[0])
    adb = tmp_path / "bin" / "adb"  # STAND-IN for adb with no board attached
    adb.parent.mkdir()
    adb.write_text("#!/bin/sh\necho \"adb: error: device 'qcs-devkit' not found\" >&2\nexit 1\n")
    adb.chmod(0o755)
    local = qualcomm_config(tmp_path)
    unplugged = qualcomm_config(tmp_path, "qc-adb", "adb://qcs-devkit")
    url = str(tmp_path / "q.db")
    ctx = make_context(tmp_path / "store", tmp_path / "results", [str(local), str(unplugged)])
    q = open_queue(url)
    # 1. the SDK is not installed: failed at once (a retry cannot help), naming the step
    monkeypatch.setenv("PATH", _path(adb.parent))
    monkeypatch.delenv("SNPE_ROOT", raising=False)
    q.submit([JobSpec(arch, "qc-32", "measure", max_attempts=3)])
    Worker(q, ["measure"], ctx, "w1", poll_seconds=0.1).run(idle_exit=True)
    missing, = q.jobs()
    assert (missing.state, missing.attempts) == ("failed", 1)
    assert missing.last_error.startswith(
        "device 'qc-32', step 'convert' (missing): ToolMissing: snpe-onnx-to-dlc")
    # 2. a tool error on the board (no DSP): failed at once; 3. no device: retried, then failed
    monkeypatch.setenv("PATH", _path(STANDINS, adb.parent))
    monkeypatch.setenv("ANB_STANDIN_SNPE_RUNTIMES", "cpu")
    q.retry([missing.id])
    q.submit([JobSpec(arch, "qc-adb", "measure", max_attempts=2)])
    stats = Worker(q, ["measure"], ctx, "w2", poll_seconds=0.1).run(idle_exit=True)
    jobs = {j.device: j for j in q.jobs()}
    assert (stats.failed, stats.retried, stats.done) == (2, 1, 0)
    tool_error = jobs["qc-32"]
    assert tool_error.state == "failed"
    assert tool_error.last_error.startswith("device 'qc-32', step 'throughput' (command): ")
    assert "Runtime DSP is not available" in tool_error.last_error
    no_device = jobs["qc-adb"]
    assert (no_device.state, no_device.attempts) == ("failed", 2)
    assert no_device.last_error.startswith("device 'qc-adb', step 'prepare' (unreachable): ")
    assert not (tmp_path / "results").exists(), "nothing published"
    q.close()


def test_queue_submit_takes_a_qualcomm_config(tmp_path):
    """`anb queue submit --device <qualcomm config> --stages measure` queues the device's jobs
    with its table, and an unknown device is a clear error naming the option."""
    url = str(tmp_path / "q.db")
    arch = str(Sampler(3, space=ANB_SPACE).sample(1)[0])
    result = CliRunner().invoke(app, ["queue", "submit", "--queue", url, "--archs", arch,
                                      "--device", str(qualcomm_config(tmp_path)),
                                      "--stages", "measure"])
    assert result.exit_code == 0, result.output
    with open_queue(url) as q:
        (job,) = q.jobs()
    assert (job.device, job.stage) == ("qc-32", "measure")
    assert job.payload["device_config"]["sdk"] == "snpe"
    result = CliRunner().invoke(app, ["queue", "submit", "--queue", url, "--archs", arch,
                                      "--device", "no-such-board", "--stages", "measure"])
    assert result.exit_code != 0 and "--device 'no-such-board'" in result.output


@pytest.mark.slow
def test_anb_measure_remeasures_a_qualcomm_result_taken_under_other_settings(tmp_path,
                                                                             sdk_path):
    """`anb measure <qualcomm config>`: a result under the same settings is skipped; changing
    act_bitwidth 8 -> 16, then perf_profile balanced -> burst, under the same device name
    measures again and replaces the stale record (never "measured" while keeping it)."""
    arch = str(Sampler(5, space=ANB_SPACE).sample(1)[0])
    record = tmp_path / "res" / "qc-32" / f"{as_arch(arch, ANB_SPACE).id}.json"

    def measure(**settings) -> tuple[str, dict]:
        config = qualcomm_config(tmp_path, **settings)
        result = CliRunner().invoke(app, ["measure", str(config), "--archs", arch, "--out",
                                          str(tmp_path / "res"), "--no-progress"])
        assert result.exit_code == 0, result.output
        return result.output, json.loads(record.read_text())["platform_perf"]

    out, first = measure()
    assert "qc-32: measured 1, skipped 0" in out
    assert first[KEYS[0]]["precision"] == "int8" and first[KEYS[0]]["throughput_std"] > 0
    out, again = measure()
    assert "measured 0, skipped 1" in out and again == first
    out, wider = measure(act_bitwidth=16)
    assert "measured 1, skipped 0" in out
    assert wider[KEYS[0]]["precision"] == "int16"
    assert wider[KEYS[0]]["protocol"]["quantization"]["act_bitwidth"] == 16
    for key in KEYS:
        assert wider[key]["protocol_fingerprint"] != first[key]["protocol_fingerprint"]
    layers = pd.read_csv(record.parent / wider[KEYS[0]]["layers_file"])
    assert (layers[layers["type"] == "Conv"]["bitwidth"] == 16).all()
    out, burst = measure(act_bitwidth=16, perf_profile="burst")
    assert "measured 1, skipped 0" in out and burst[KEYS[1]]["perf_profile"] == "burst"
    assert burst[KEYS[1]]["protocol_fingerprint"] != wider[KEYS[1]]["protocol_fingerprint"]


@pytest.mark.slow
def test_convert_stage_builds_the_dlc_on_a_boardless_host(tmp_path, sdk_path, monkeypatch):
    """`convert` runs the SDK's host tools on a worker with no board (its transport reaches
    none); `measure` on the board's worker then finds the DLC in the store: it measures with
    the converter and quantizer absent from its PATH."""
    from anb.collect_throughput.queue.stages import make_context, register_stages
    from anb.jobs.stages import chain
    from anb.jobs.worker import Worker

    register_stages()
    arch = str(Sampler(6, space=ANB_SPACE).sample(1)[0])
    config = qualcomm_config(tmp_path, transport="adb://no-board-here")
    (tmp_path / "board-host").mkdir()
    board_config = qualcomm_config(tmp_path / "board-host")
    url, store = str(tmp_path / "q.db"), tmp_path / "store"
    q = open_queue(url)
    q.submit([chain(arch, "qc-32", ["convert", "measure"])])
    stats = Worker(q, ["convert"], make_context(store, None, [str(config)]), "host",
                   poll_seconds=0.1).run(idle_exit=True)
    assert stats.done == 1
    converted = q.jobs()[0].result["models"][KEYS[0]]["model"]
    assert Path(converted).is_file() and Path(converted).is_relative_to(store)
    # the board's worker: no converter or quantizer on its PATH
    tools = tmp_path / "board-tools"
    tools.mkdir()
    for tool in STANDINS.iterdir():
        if tool.name not in ("snpe-onnx-to-dlc", "snpe-dlc-quantize"):
            (tools / tool.name).symlink_to(tool)
    monkeypatch.setenv("PATH", _path(tools))
    results = tmp_path / "results"
    stats = Worker(q, ["measure"], make_context(store, results, [str(board_config)]), "board",
                   poll_seconds=0.1).run(idle_exit=True)
    measured = [j for j in q.jobs() if j.stage == "measure"]
    assert stats.done == 1, measured[0].last_error
    perf = json.loads((results / "qc-32" / f"{as_arch(arch, ANB_SPACE).id}.json").read_text())[
        "platform_perf"]
    assert perf[KEYS[0]]["throughput_mean"] > 0 and perf[KEYS[1]]["latency_std"] is not None
    q.close()
