"""Devices as plug-ins, and every device config through ``anb measure``.

``tests/plugins/anb_tiny_device`` is pip-installed into a folder of its own and found only
through its entry points (``anb.backends``, ``anb.runtimes``, ``anb.transports``,
``anb.devices``), in fresh processes: its back-end measures through ``anb measure``, the queue
(``anb queue submit`` + ``anb worker``) and ``anb search --measure`` (these commands one after
another in one interpreter, through the console entry's wrapper); its board runtime and
transport measure a ``[remote]`` board (this machine) from the ``anb`` console. The registries
themselves, and the errors ``anb measure`` gives for each kind of config (without the
plug-in), are checked in this process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from anb.cli import app
from anb.cli_support import run
from anb.collect_throughput import registries
from anb.collect_throughput.timing.protocol import Protocol
from anb.searchspace.arch import as_arch
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.console_fixtures import run_console
from tests.console_process import ConsoleProcess
from tests.plugin_helpers import pip_install

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "tests" / "plugins" / "anb_tiny_device"
ARCHS = [str(a) for a in Sampler(11, space=ANB_SPACE).sample(2)]
FAST = ["--no-progress", "--anchors", "none"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The plug-in installed with pip into a folder of its own (no anb file touched)."""
    return pip_install(PLUGIN, tmp_path_factory.mktemp("site"))


def _env(site: Path, extra: dict | None = None) -> dict[str, str]:
    """A child's environment: ``site`` and the checkout on its path."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]),
            # the board runner's python3: this interpreter (numpy + onnxruntime)
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            **(extra or {})}


def _anb(args: list[str], cwd: Path, site: Path, env: dict | None = None
         ) -> subprocess.CompletedProcess:
    """``python -m anb args`` with ``site`` on its path; it must succeed."""
    done = subprocess.run([sys.executable, "-m", "anb", *args], cwd=cwd, env=_env(site, env),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"anb {' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done


def _anb_sequence(commands: list[list[str]], cwd: Path, site: Path
                  ) -> list[subprocess.CompletedProcess]:
    """``anb`` ``commands`` in turn in one fresh interpreter with ``site`` on its path (one
    start-up for them all); each must succeed."""
    with ConsoleProcess(_env(site)) as anb:
        runs = [anb.run(args, cwd) for args in commands]
    for one in runs:
        assert one.returncode == 0, f"{' '.join(one.args)}\n{one.stdout}\n{one.stderr}"
    return runs


def _perf(folder: Path, device: str, arch: str) -> dict:
    return json.loads((folder / device / f"{as_arch(arch, ANB_SPACE).id}.json").read_text())[
        "platform_perf"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_installed_back_end_measures_through_measure_queue_and_search(site, tmp_path):
    # without the package (this process) the names are unknown
    done = run_console(["measure", "tiny-cpu", "--archs", ARCHS[0], "--out", "r"], tmp_path)
    assert done.returncode == 2 and "device='tiny-cpu' is invalid" in done.stderr
    # 1. anb measure, twice; 2. the queue: submit carries the config's table, a worker
    # measures and publishes; 3. anb search --measure
    measure = ["measure", "tiny-cpu", "--archs", ",".join(ARCHS), "--out", "m", *FAST]
    _, again, *_ = _anb_sequence([
        measure, measure,
        ["queue", "submit", "--queue", "q.db", "--archs", ARCHS[0], "--device", "tiny-cpu",
         "--stages", "convert,measure"],
        ["worker", "--queue", "q.db", "--stages", "convert,measure", "--device", "tiny-cpu",
         "--store", "store", "--out", "w", "--idle-exit", "--poll", "0.1"],
        ["search", "--measure", "tiny-cpu", "-o", "throughput_tiny-cpu:max", "-o",
         "params:min", "--algorithm", "random", "--budget", "20", "--max-measurements", "2",
         "--seed", "1", "--out", "found"]], tmp_path, site)
    for arch in ARCHS:
        perf = _perf(tmp_path / "m", "tiny-cpu", arch)
        assert set(perf) == {"latency_tiny-cpu", "throughput_tiny-cpu"}
        for entry in perf.values():
            assert entry["protocol"]["backend"] == "tiny-ort"
            assert entry["environment"]["graph_optimization"] == "disabled"  # the plug-in ran
    assert "measured 0, skipped 2" in again.stdout
    perf = _perf(tmp_path / "w", "tiny-cpu", ARCHS[0])
    assert perf["throughput_tiny-cpu"]["environment"]["graph_optimization"] == "disabled"
    history = pd.read_csv(tmp_path / "found" / "history.csv")
    assert history["measured"].sum() == 2
    for row in history[history["measured"]].itertuples():
        perf = _perf(tmp_path / "found" / "measurements", "tiny-cpu", row.arch)
        assert perf["throughput_tiny-cpu"]["throughput_mean"] == row[
            list(history.columns).index("throughput_tiny-cpu") + 1]
        assert perf["throughput_tiny-cpu"]["protocol"]["backend"] == "tiny-ort"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_installed_runtime_and_transport_measure_a_board(site, tmp_path):
    log = tmp_path / "tiny.log"
    _anb(["measure", "tiny-board", "--archs", ARCHS[0], "--out", "b", *FAST], tmp_path, site,
         env={"ANB_TINY_LOG": str(log)})
    entry = _perf(tmp_path / "b", "tiny-board", ARCHS[0])["latency_tiny-board"]
    assert entry["environment"]["board_runtime"] == "tiny-board"
    assert entry["environment"]["transport"] == "tiny://"
    assert entry["latency_mean"] > 0
    assert "run" in log.read_text().split(), "the plug-in transport ran the board runner"


def test_registries_list_built_ins_and_refuse_unknown_names_naming_the_group():
    assert "onnxruntime" in registries.BACKENDS and "vart" in registries.BACKENDS
    assert registries.RUNTIMES.names()[:1] == ["onnxruntime"]
    assert {"local", "ssh", "adb"} <= set(registries.TRANSPORTS.names())
    with pytest.raises(ValueError, match=r"backend='npu' is invalid; allowed: \[.*'cuda'"):
        Protocol(device="x", backend="npu")
    with pytest.raises(ValueError, match=r"remote.runtime='npu' is invalid; allowed: "
                                         r"\['onnxruntime', 'openvino', 'resident', 'tvm'\] "
                                         r"\(more install as 'anb.runtimes'"):
        registries.RUNTIMES.load("npu")


def test_a_registered_back_end_is_valid_and_a_broken_one_is_named(monkeypatch):
    registry = registries.BACKENDS
    monkeypatch.setattr(registry, "_added", {})  # this test's registrations only
    assert "npu" not in registry
    registry.register("npu", "no_such_module:Npu")
    protocol = Protocol(device="x", backend="npu", precision="int8")  # its own precisions
    from anb.collect_throughput.backends import get_backend

    with pytest.raises(ValueError, match=r"backend 'npu' \('no_such_module:Npu'\) cannot be "
                                         "loaded: ModuleNotFoundError"):
        get_backend(protocol.backend)
    registry.register("npu", "anb.collect_throughput.timing.protocol:Protocol")
    with pytest.raises(ValueError, match="not an anb Backend subclass"):
        get_backend("npu")


def _measure_error(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        run(app, ["measure", *args, "--archs", ARCHS[0], "--out", "unused"])
    assert stop.value.code == 2
    return capsys.readouterr().err


def test_measure_errors_say_what_kind_of_config_was_given(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    no_kinds = tmp_path / "nokinds.toml"
    no_kinds.write_text('name = "x"\nbackend = "onnxruntime"\n')
    err = _measure_error([str(no_kinds)], capsys)
    assert err.startswith(f"error: device config {str(no_kinds)!r} (a device config of no "
                          "known kind): kind=None is invalid; allowed: one of ['fpga', "
                          "'local', 'qualcomm', 'remote'] (a config without kind loads only "
                          "when its tables show one kind")
    err = _measure_error(["no-such-device"], capsys)
    assert "device='no-such-device' is invalid; allowed: a TOML file, a shipped protocol " \
           "config [" in err and "a Qualcomm config ['qnn-htp', 'snpe-dsp'" in err
    qnn = _measure_error(["qnn-htp"], capsys)
    assert "sdk='qnn' cannot be measured" in qnn
    bad = tmp_path / "bad-qc.toml"
    bad.write_text('name = "q"\nsdk = "snpe"\nruntime = "npu"\n')
    err = _measure_error([str(bad)], capsys)
    assert f"device config {str(bad)!r} (a Qualcomm config (sdk = 'snpe')): runtime='npu' " \
           "is invalid" in err
    err = _measure_error(["snpe-dsp", "--batch", "4"], capsys)
    assert "override batch=4 is invalid; allowed: a Qualcomm config field" in err
    assert not (tmp_path / "unused").exists(), "nothing written"


@pytest.mark.slow
def test_measure_takes_a_qualcomm_config_by_name(tmp_path):
    """`anb measure snpe-dsp` (refused with "device='snpe-dsp' is invalid" before) reaches the
    device: here no board is attached, and the error names device and step."""
    # no SDK, no adb: the first step says so
    done = run_console(["measure", "snpe-dsp", "--archs", ARCHS[0], "--out", "o",
                        "--no-progress"], tmp_path, env={"PATH": str(Path(sys.executable).parent)})
    assert done.returncode == 2, done.stderr
    assert "device 'snpe-dsp', step " in done.stderr and "invalid" not in done.stderr
