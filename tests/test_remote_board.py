"""Boards reached over a transport: a real sshd on 127.0.0.1 (another account, its own folder,
its own Python with numpy + onnxruntime) measured with the board runner; ADB command lines built
and parsed up to the ``adb`` binary (a stand-in script named as such); the board runner's rules
checked step for step against local measurement's; clear errors naming device and step."""
from __future__ import annotations

import ast
import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from anb.collect_throughput.board import RUNNER
from anb.collect_throughput.targets.remote import (
    OnnxRuntimeBoard,
    RemoteSpec,
    RemoteTarget,
    board_folder,
)
from anb.collect_throughput.timing import loop as timing
from anb.collect_throughput.timing import stats
from anb.collect_throughput.timing.protocol import StoppingRule, WarmupRule, device_from_mapping
from anb.collect_throughput.transports import TransportError, open_transport
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.board_helpers import board_config
from tests.realservers import free_port, missing_sshd, sshd_server

ARCH = Sampler(0, space=ANB_SPACE).sample(1)[0]
BOARD_VENV_PYTHON = "/var/lib/anb-board/venv/bin/python"  # made by scripts/ci/queue.sh


def _runner_module():
    spec = types.ModuleType("anb_board_runner")
    exec(compile(RUNNER.read_text(), str(RUNNER), "exec"), spec.__dict__)
    return spec


def _device(remote: dict, name: str = "board-a", budget: float = 0.6) -> object:
    return device_from_mapping({
        "kind": "remote", "name": name, "backend": "onnxruntime", "resolution": 32, "threads": 1,
        "latency": {"batch": 1}, "warmup": {"max_seconds": 2.0, "max_steps": 50},
        "stopping": {"budget_seconds": budget, "min_reps": 5}, "remote": remote},
        space=ANB_SPACE.name)


@pytest.fixture(scope="module")
def ssh_board():
    reason = missing_sshd()
    if reason:
        pytest.skip(reason)
    with sshd_server() as board:
        yield board


@pytest.fixture(scope="module")
def board_python(ssh_board):
    if os.geteuid() != 0:
        return sys.executable  # the board is this user
    if not Path(BOARD_VENV_PYTHON).exists():
        pytest.skip(f"{BOARD_VENV_PYTHON} missing: run scripts/ci/queue.sh (it sets up the "
                    "board account's Python with numpy + onnxruntime)")
    return BOARD_VENV_PYTHON


def _leftovers(workdir: Path) -> list[Path]:
    """What a measurement left on the board besides the board's lock file."""
    return [p for p in workdir.iterdir() if p.name != ".board.lock"]


def _ssh_remote(board, python, **extra):
    return {"transport": board.url, "python": python, "workdir": str(board.board_dir),
            "identity": str(board.identity), "known_hosts": str(board.known_hosts),
            "connect_timeout": 5, **extra}


# -- the board runner -------------------------------------------------------------------------
class ScriptedClock:
    """Reads scripted step durations (the same list for both loops)."""

    def __init__(self, durations):
        self.durations, self.i, self.t = durations, 0, 0.0

    def start(self):
        self.t = 0.0

    def stop(self):
        return self.t

    def step(self):
        self.t += self.durations[self.i % len(self.durations)]
        self.i += 1


@pytest.mark.parametrize("seed,noise,drift", [(0, 0.03, 0.0), (1, 0.3, 0.0), (2, 0.05, 0.5),
                                              (3, 0.04, 3.0), (4, 0.06, 1.0)])
def test_board_runner_decides_like_local_measurement(seed, noise, drift):
    runner = _runner_module()
    rng = np.random.default_rng(seed)
    k = np.arange(20000)
    durations = list(1e-3 * (1 + drift * np.exp(-k / 5))  # slow first steps settling
                     * np.exp(noise * rng.standard_normal(k.size)))
    warmup = WarmupRule(min_steps=3, window=3, tolerance=0.05, max_steps=60, max_seconds=1e9)
    stopping = StoppingRule(min_reps=5, max_reps=300, rel_ci=0.01, budget_seconds=1e9,
                            min_rep_seconds=0.0035)
    local_clock, board_clock = ScriptedClock(durations), ScriptedClock(durations)
    local = timing.run_loop(local_clock.step, local_clock, warmup, stopping)
    board = runner.run_loop(board_clock.step, board_clock, dataclasses.asdict(warmup),
                            dataclasses.asdict(stopping))
    assert board["warmup_times_s"] == local.warmup_times
    assert board["warmup_stop_reason"] == local.extra["warmup_stop_reason"]
    assert board["inner"] == local.inner
    assert board["times_s"] == local.times
    assert board["stop_reason"] == local.stop_reason
    assert local_clock.i == board_clock.i
    assert len(local.times) > stopping.min_reps  # the rule, not the minimum, ended it


def test_board_runner_warmup_runs_at_least_its_minimum_steps():
    """Catches: the board runner's warm-up ignoring its minimum step count (constant times
    are stable from the second step; min_steps=7 must still run exactly 7)."""
    runner = _runner_module()
    clock = ScriptedClock([1e-3] * 50)
    rule = dataclasses.asdict(WarmupRule(min_steps=7, window=1, max_seconds=1e9))
    times, reason = runner.warm_up(clock.step, clock, rule)
    assert (reason, len(times)) == ("stable", 7)


def test_board_runner_statistics_equal_the_hosts():
    runner = _runner_module()
    for p in (1e-9, 0.01, 0.3, 0.5, 0.8, 0.975, 0.995, 1 - 1e-9):
        assert runner.normal_quantile(p) == pytest.approx(NormalDist().inv_cdf(p), abs=1e-12)
    for df in (1, 4, 30):
        assert runner.t_quantile(0.975, df) == pytest.approx(stats.t_quantile(0.975, df),
                                                             rel=1e-12)
    values = list(np.random.default_rng(0).lognormal(0, 0.2, 25))
    assert runner.relative_ci(values, 0.1, 0.95) == pytest.approx(
        stats.relative_ci(values, 0.1, 0.95), rel=1e-12)


def test_board_runner_is_self_contained_python37():
    source = RUNNER.read_text()
    tree = ast.parse(source, feature_version=(3, 7))  # no walrus, no match, no 3.8+ syntax
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
        elif isinstance(node, (ast.AnnAssign, ast.arg)) and getattr(node, "annotation", None):
            pytest.fail(f"annotation at line {node.lineno}: keep the runner 3.7-clean")
    stdlib = {"fcntl", "json", "math", "os", "platform", "resource", "socket", "subprocess",
              "sys", "threading", "time", "traceback"}
    assert imported == stdlib | {"numpy", "tvm"}  # runtimes by name: load_runtime
    assert "from __future__" not in source
    # library calls too (ast only sees syntax): vermin, as for fpga_code/
    proc = subprocess.run([str(Path(sys.executable).with_name("vermin")), "--target=3.7",
                           "--no-tips", "--violations", str(RUNNER)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_board_runner_peak_rss_catches_a_spike_between_samples():
    """Bug class: a peak RSS read from samples alone (or the process-lifetime ru_maxrss): a
    300 MB buffer held for less than one sampling interval must show in the peak, and memory
    the process held before the run must not."""
    runner = _runner_module()
    before = np.ones(200 * 2 ** 20 // 8)  # held before the run, freed before it starts
    del before
    sampler = runner.Sampler(interval=30.0, gpu=False)
    sampler.start()
    start = runner.rss_bytes()
    spike = np.ones(300 * 2 ** 20 // 8)  # touched: resident
    del spike
    stats = sampler.stop()
    assert stats["peak_rss_source"] == "VmHWM"
    assert len(stats["samples"]) == 1  # only the closing sample, after the spike
    assert stats["samples"][0]["rss_bytes"] < start + 100 * 2 ** 20
    assert stats["peak_rss_bytes"] >= start + 290 * 2 ** 20
    assert stats["peak_rss_bytes"] < start + 400 * 2 ** 20  # not the earlier 200 MB on top


def test_board_runner_sampler_keeps_a_bounded_record():
    runner = _runner_module()
    sampler = runner.Sampler(interval=0.005, gpu=False, max_samples=8)
    sampler.start()
    time.sleep(0.3)
    stats = sampler.stop()
    assert 4 <= len(stats["samples"]) <= 8
    assert stats["interval_s"] > 0.005  # doubled each time the record was halved
    times = [s["t"] for s in stats["samples"]]
    assert times == sorted(times) and times[-1] >= 0.25
    assert stats["mean_process_cpu_percent"] is not None


# -- SSH: a real sshd plays the board ---------------------------------------------------------
@pytest.mark.slow
def test_ssh_board_measures_with_the_board_runner(ssh_board, board_python, tmp_path):
    from anb.collect_throughput.records.merge import merge
    from anb.collect_throughput.timing.result import arch_record
    from anb.io import atomic_write_json

    device = _device(_ssh_remote(ssh_board, board_python))
    (m,) = RemoteTarget(device).measurements(ARCH, tmp_path / "store")
    env = m.environment
    assert env["python_executable"] == board_python
    assert env["libraries"]["onnxruntime"] and env["libraries"]["numpy"]
    assert env["ort_providers"] == ["CPUExecutionProvider"]
    assert env["transport"] == ssh_board.url and env["device_name"] == "board-a"
    assert m.stop_reason in ("converged", "budget", "max_reps") and len(m.times_s) >= 3
    assert m.inner >= 1 and m.protocol["stopping"]["budget_seconds"] == 0.6
    assert _leftovers(ssh_board.board_dir) == []  # cleaned up
    # The same per-architecture record as local measurement, merged the same way.
    results = tmp_path / "results"
    atomic_write_json(results / "board-a" / f"{ARCH.id}.json",
                      arch_record(ARCH, [m], space=ANB_SPACE))
    report = merge(None, [results], tmp_path / "merged", space=ANB_SPACE)
    assert report.device_records == 1
    merged = json.loads(next((tmp_path / "merged" / "records").glob("*.json")).read_text())
    entry = merged["platform_perf"]["latency_board-a"]
    assert entry["unit"] == "ms" and entry["latency_mean"] == pytest.approx(m.value)


@pytest.mark.slow
def test_ssh_errors_name_device_and_step(ssh_board, board_python, tmp_path):
    closed = _device({**_ssh_remote(ssh_board, board_python),
                      "transport": f"ssh://{ssh_board.user}@127.0.0.1:{free_port()}"})
    with pytest.raises(TransportError) as err:
        RemoteTarget(closed).measurements(ARCH, tmp_path)
    assert (err.value.device, err.value.step, err.value.kind) == ("board-a", "connect",
                                                                  "unreachable")
    assert err.value.transient
    wrong_key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)],
                   check=True)
    with pytest.raises(TransportError) as err:
        RemoteTarget(_device(_ssh_remote(ssh_board, board_python, identity=str(wrong_key)))
                     ).measurements(ARCH, tmp_path)
    assert (err.value.step, err.value.kind) == ("connect", "auth")
    assert "Permission denied" in str(err.value) and "'board-a'" in str(err.value)
    assert not err.value.transient
    # A board whose Python has no numpy/onnxruntime (Debian's own python3).
    with pytest.raises(TransportError) as err:
        RemoteTarget(_device(_ssh_remote(ssh_board, "/usr/bin/python3"))).measurements(
            ARCH, tmp_path)
    assert (err.value.step, err.value.kind) == ("import_runtime", "missing")
    assert "No module named" in str(err.value) and "/usr/bin/python3" in str(err.value)
    # No such interpreter at all.
    with pytest.raises(TransportError) as err:
        RemoteTarget(_device(_ssh_remote(ssh_board, "python3.99"))).measurements(ARCH, tmp_path)
    assert (err.value.step, err.value.kind) == ("run", "missing")
    assert "'python3.99' not found" in str(err.value)
    # A model the board rejects.
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not an onnx model")
    spec = RemoteSpec.from_mapping("board-a", _ssh_remote(ssh_board, board_python))
    device = _device(_ssh_remote(ssh_board, board_python))
    with pytest.raises(TransportError) as err:
        with board_folder(spec.open("board-a"), spec) as folder:
            OnnxRuntimeBoard().measure(folder, ARCH, device.protocols[0], junk)
    assert (err.value.step, err.value.kind) == ("load_model", "rejected")
    assert "rejected the model" in str(err.value)
    assert _leftovers(ssh_board.board_dir) == []


HUNG_BOARD = """#!/bin/sh
# Stand-in for a board that hangs: it takes the runner's place and never answers.
echo $$ > "{pidfile}"
exec sleep 300
"""


@pytest.mark.slow
def test_hung_board_times_out_and_is_cleaned_up(ssh_board, board_python, tmp_path):
    hung = ssh_board.board_dir.parent / "hung-board-python"
    pidfile = ssh_board.board_dir.parent / "hung.pid"
    hung.write_text(HUNG_BOARD.format(pidfile=pidfile))
    hung.chmod(0o755)
    pidfile.touch()
    pidfile.chmod(0o666)
    device = _device(_ssh_remote(ssh_board, str(hung), timeout=3))
    began = time.monotonic()
    with pytest.raises(TransportError) as err:
        RemoteTarget(device).measurements(ARCH, tmp_path)
    assert time.monotonic() - began < 30
    assert (err.value.device, err.value.step, err.value.kind) == ("board-a", "run", "timeout")
    assert "no answer within 3 s" in str(err.value)
    pid = int(pidfile.read_text())
    for _ in range(50):  # the hung process was killed on the board, its folder removed
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()
    assert _leftovers(ssh_board.board_dir) == []


# -- ADB: command lines up to the adb binary ----------------------------------------------------
ADB_STAND_IN = """#!/bin/sh
# Stand-in for the adb binary (no Android device here): logs its command line, plays a device
# whose filesystem is this machine's, and answers like adb for offline/unauthorized serials.
printf '%s\\n' "$*" >> "{log}"
[ "$1" = "-s" ] || {{ echo "adb: usage: -s SERIAL expected" >&2; exit 1; }}
serial=$2; shift 2
case "$serial" in
  offline-*) echo "error: device offline" >&2; exit 1;;
  locked-*) echo "error: device unauthorized." >&2; exit 1;;
  missing-*) echo "error: device '$serial' not found" >&2; exit 1;;
esac
case "$1" in
  shell) shift; exec sh -c "$*";;
  push) mkdir -p "$(dirname "$3")" && cp "$2" "$3" && echo "$2: 1 file pushed.";;
  pull) cp "$2" "$3" 2>/dev/null || {{
          echo "adb: error: failed to stat remote object '$2': No such file or directory" >&2
          exit 1; }};;
  *) echo "adb: unknown command $1" >&2; exit 1;;
esac
"""


@pytest.fixture
def adb(tmp_path):
    path = tmp_path / "bin" / "adb"
    path.parent.mkdir()
    log = tmp_path / "adb.log"
    path.write_text(ADB_STAND_IN.format(log=log))
    path.chmod(0o755)
    return path, log


def test_adb_command_lines(adb, tmp_path):
    path, log = adb
    t = open_transport("adb://R5CT1234", "phone", {"adb": str(path)})
    assert t.command(["python3", "/data/local/tmp/anb/runner.py", "a b"]) == [
        str(path), "-s", "R5CT1234", "shell", "python3 /data/local/tmp/anb/runner.py 'a b'"]
    assert t.run(["echo", "hello world"], "probe", 10).stdout == "hello world\n"
    src = tmp_path / "model.onnx"
    src.write_bytes(b"\x08\x07")
    t.push(src, str(tmp_path / "dev" / "m.onnx"))
    t.pull(str(tmp_path / "dev" / "m.onnx"), tmp_path / "back.onnx")
    assert (tmp_path / "back.onnx").read_bytes() == b"\x08\x07"
    assert log.read_text().splitlines() == [
        "-s R5CT1234 shell echo 'hello world'",
        f"-s R5CT1234 push {src} {tmp_path / 'dev' / 'm.onnx'}",
        f"-s R5CT1234 pull {tmp_path / 'dev' / 'm.onnx'} {tmp_path / 'back.onnx'}"]
    assert t.run(["sh", "-c", "exit 7"], "probe", 10, check=False).returncode == 7
    with pytest.raises(TransportError) as err:
        t.pull(str(tmp_path / "nothing"), tmp_path / "x")
    assert (err.value.step, err.value.kind) == ("pull", "command")
    for serial, kind in (("offline-1", "unreachable"), ("locked-1", "auth"),
                         ("missing-1", "unreachable")):
        with pytest.raises(TransportError) as err:
            open_transport(f"adb://{serial}", "phone", {"adb": str(path)}).run(["true"], "connect",
                                                                                10)
        assert (err.value.device, err.value.step, err.value.kind) == ("phone", "connect", kind)
    with pytest.raises(TransportError, match="'nope-adb' is not installed"):
        open_transport("adb://X", "phone", {"adb": "nope-adb"}).run(["true"], "connect", 10)


def test_adb_board_measures_through_the_stand_in(adb, tmp_path):
    path, log = adb
    device = _device({"transport": "adb://R5CT1234", "adb": str(path), "python": sys.executable,
                      "workdir": str(tmp_path / "data-local-tmp")}, name="phone", budget=0.3)
    (m,) = RemoteTarget(device).measurements(ARCH, tmp_path / "store")
    assert m.environment["transport"] == "adb://R5CT1234" and len(m.times_s) >= 3
    lines = log.read_text().splitlines()
    assert lines[0].startswith(f"-s R5CT1234 shell mkdir -p {tmp_path}/data-local-tmp/job-")
    assert [ln.split()[2] for ln in lines[1:5]] == ["push"] * 4
    assert lines[5].startswith("-s R5CT1234 shell sh -c 'cd ") and "runner.py" in lines[5]
    assert lines[6].split()[2] == "pull" and lines[-1].split()[3:5] == ["rm", "-rf"]
    assert _leftovers(tmp_path / "data-local-tmp") == []


# -- config -----------------------------------------------------------------------------------
def test_remote_config_errors_are_clear():
    base = {"transport": "ssh://pi@rpi:22"}
    assert RemoteSpec.from_mapping("pi", base).runtime == "onnxruntime"
    with pytest.raises(ValueError, match=r"remote.tranport='x' is unknown"):
        RemoteSpec.from_mapping("pi", {**base, "tranport": "x"})
    with pytest.raises(ValueError, match="remote.transport is missing"):
        RemoteSpec.from_mapping("pi", {})
    with pytest.raises(ValueError, match=r"remote.timeout=0 is invalid"):
        RemoteSpec.from_mapping("pi", {**base, "timeout": 0})
    with pytest.raises(ValueError, match=r"remote.runtime='snpe' is invalid"):
        RemoteSpec.from_mapping("pi", {**base, "runtime": "snpe"})
    with pytest.raises(ValueError, match=r"transport='ftp://x' is invalid; allowed: adb://"):
        open_transport("ftp://x", "pi")
    with pytest.raises(ValueError, match="adb://SERIAL"):
        open_transport("adb://", "phone")
    t = open_transport("ssh://pi@rpi.lab:2222", "pi", {"identity": "/k", "connect_timeout": 7})
    assert t.command(["echo", "a b"])[-3:] == ["pi@rpi.lab", "--", "echo 'a b'"]
    assert ["-p", "2222"] == t.command([])[1:3] and "ConnectTimeout=7" in t.command([])
    assert "BatchMode=yes" in t.command([]) and "/k" in t.command([])


@pytest.mark.slow
def test_anb_measure_runs_a_remote_device_on_its_board(tmp_path):
    from typer.testing import CliRunner

    from anb.cli import app

    config = board_config(tmp_path, "bench-board", {
        "transport": "local://", "python": sys.executable, "workdir": str(tmp_path / "board")})
    # ARCH is its own anchor: the anchor block runs on the board without exporting and timing
    # the default anchors (the largest network of the space among them)
    result = CliRunner().invoke(app, ["measure", str(config), "--archs", str(ARCH), "--out",
                                      str(tmp_path / "out"), "--anchors", str(ARCH),
                                      "--no-progress"])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "out" / "bench-board" / f"{ARCH.id}.json").read_text())
    env = record["platform_perf"]["latency_bench-board"]["environment"]
    assert (env["transport"], env["python_executable"]) == ("local://", sys.executable)
    import anb

    assert env["anb_version"] == record["provenance"]["throughput"]["anb_version"] == \
        anb.__version__
    # the runner's utilisation while the model ran reaches the record
    entry = record["platform_perf"]["latency_bench-board"]
    samples = entry["utilisation"]["samples"]
    assert samples and all(s["process_cpu_percent"] is not None for s in samples)
    assert entry["peak_rss_bytes"] == entry["utilisation"]["peak_rss_bytes"] >= \
        max(s["rss_bytes"] for s in samples) > 0
    assert _leftovers(tmp_path / "board") == []
    config.write_text(config.read_text().replace('"local://"', f'"ssh://pi@127.0.0.1:{free_port()}"'))
    result = CliRunner().invoke(app, ["measure", str(config), "--archs", str(ARCH), "--out",
                                      str(tmp_path / "out2"), "--no-progress"])
    assert result.exit_code == 2
    assert "device 'bench-board', step 'connect' (unreachable)" in result.output


def test_shipped_board_example_is_a_remote_device():
    from anb.collect_throughput.targets.remote import remote_spec
    from anb.collect_throughput.timing.protocol import load_device

    device = load_device("rpi4-ort", space=ANB_SPACE.name)
    spec = remote_spec(device)
    assert spec.transport.startswith("ssh://") and spec.runtime == "onnxruntime"
    assert {p.kind: p.batch for p in device.protocols} == {"latency": 1, "throughput": 8}


@pytest.mark.slow
def test_one_measurement_at_a_time_per_board(tmp_path):
    import threading

    device = _device({"transport": "local://", "python": sys.executable,
                      "workdir": str(tmp_path / "board")}, budget=1.0)
    OnnxRuntimeBoard().model(ARCH, device.protocols[0], tmp_path / "store")  # exported once
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        RemoteTarget(device).measurements(ARCH, tmp_path / "store")[0])) for _ in range(2)]
    lock = tmp_path / "board" / ".board.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:  # both runners queue behind this holder, however slow the host
        fcntl.flock(held, fcntl.LOCK_EX)
        for t in threads:
            t.start()
        time.sleep(3.0)  # long enough for both runners to start and block on the lock
    for t in threads:
        t.join()
    first, second = sorted(results, key=lambda m: m.extra["board_timed_from"])
    assert first.extra["board_timed_to"] <= second.extra["board_timed_from"]  # never overlapped
    # both waited for the holder (recorded), the second also for the first's measurement
    waits = [m.environment["board_lock_wait_s"] for m in (first, second)]
    assert 0.5 < waits[0] < waits[1]
    assert _leftovers(tmp_path / "board") == []
