"""A board that keeps its runtime resident: the self-contained target server
(``anb/collect_throughput/board/server.py``, run here from a folder holding only it and the board
runner, with ``anb`` made unimportable as on a board) and the host's client, for real on the
loopback address: measurement under the protocol's rules, outputs equal to local onnxruntime's,
utilisation statistics, the token, malformed and oversized messages, a client killed mid-run
and a server killed mid-run."""
from __future__ import annotations

import ast
import dataclasses
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from anb.collect_throughput.board import RUNNER
from anb.collect_throughput.protocol import device_from_mapping
from anb.collect_throughput.resident import TargetClient
from anb.collect_throughput.transports import TransportError
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.board_helpers import board_config

SERVER = RUNNER.with_name("server.py")
TOKEN = b"0123456789abcdef-test-token"
ARCH = Sampler(0, space=ANB_SPACE).sample(1)[0]
pytestmark = pytest.mark.timeout(300)


def _protocol(budget: float = 0.4):
    device = device_from_mapping({
        "name": "resident-a", "backend": "onnxruntime", "resolution": 32, "threads": 1,
        "latency": {"batch": 1}, "warmup": {"max_seconds": 2.0, "max_steps": 50, "min_steps": 7},
        "stopping": {"budget_seconds": budget, "min_reps": 5}}, space=ANB_SPACE.name)
    return device.protocols[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    from anb.collect_throughput.backends import get_backend

    protocol = _protocol()
    path, _ = get_backend("onnxruntime").model_path(ARCH, protocol,
                                                    tmp_path_factory.mktemp("model"))
    return Path(path)


@contextmanager
def server(tmp_path: Path, *extra: str):
    """The server from a board-like folder (server.py + runner.py only, ``anb`` unimportable);
    yields (process, port)."""
    board = tmp_path / "board"
    board.mkdir(exist_ok=True)
    for path in (SERVER, RUNNER):
        shutil.copy(path, board / path.name)
    blocker = tmp_path / "no-anb" / "anb"
    blocker.mkdir(parents=True, exist_ok=True)
    (blocker / "__init__.py").write_text("raise ImportError('no anb on the board')\n")
    token = tmp_path / "token"
    token.write_bytes(TOKEN + b"\n")
    env = {**os.environ, "PYTHONPATH": str(blocker.parent)}
    proc = subprocess.Popen([sys.executable, str(board / "server.py"), "--port", "0",
                             "--token-file", str(token), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=board)
    try:
        line = proc.stdout.readline()
        assert "listening on" in line, line + proc.stderr.read()
        yield proc, int(line.rsplit(":", 1)[1])
    finally:
        proc.kill()
        proc.wait()


def _client(port: int, token: bytes = TOKEN, timeout: float = 60) -> TargetClient:
    return TargetClient("resident-a", "127.0.0.1", port, token, timeout=timeout)


def _inputs(protocol) -> np.ndarray:
    from anb.collect_throughput.inputs import make_inputs

    return np.stack(make_inputs(protocol, ARCH))


def test_server_is_self_contained_python37():
    """Bug class: the server picks up a dependency or syntax the board's Python 3.7 lacks."""
    source = SERVER.read_text()
    tree = ast.parse(source, feature_version=(3, 7))
    for node in ast.walk(tree):
        if isinstance(node, (ast.AnnAssign, ast.arg)) and getattr(node, "annotation", None):
            pytest.fail(f"annotation at line {node.lineno}: keep the server 3.7-clean")
    proc = subprocess.run([str(Path(sys.executable).with_name("vermin")), "--target=3.7-",
                           "--no-tips", "--violations", str(SERVER)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_board_times_under_the_protocol_and_reports_utilisation(tmp_path, model):
    import onnxruntime as ort

    protocol = _protocol()
    inputs = _inputs(protocol)
    with server(tmp_path, "--sample-interval", "0.05") as (_, port), _client(port) as client:
        digest = client.load_model(model)
        client.send_inputs(inputs)
        result = client.time(protocol)
        stats = client.stats()
        outputs = client.outputs()
    assert result["ok"] and digest == __import__("hashlib").sha256(model.read_bytes()).hexdigest()
    # warm-up and stopping: the protocol's own rules, run on the board
    assert len(result["warmup_times_s"]) >= protocol.warmup.min_steps
    assert result["stop_reason"] in ("converged", "budget", "max_reps")
    n = len(result["times_s"])
    assert n >= 3 and (n >= protocol.stopping.min_reps or result["stop_reason"] == "budget")
    assert result["inner"] >= 1
    assert result["environment"]["libraries"]["onnxruntime"] == ort.__version__
    # statistics sampled while the board timed: one sample per interval, peak = max of samples
    samples = stats["samples"]
    assert len(samples) >= int(result["elapsed_seconds"] / 0.05) // 2
    # the peak: the kernel's high-water mark over the run, never below a sample
    assert stats["peak_rss_bytes"] >= max(s["rss_bytes"] for s in samples) > 0
    assert stats["peak_rss_source"] == "VmHWM"
    assert all(s["process_cpu_percent"] is not None for s in samples)
    # outputs: the board's onnxruntime gives what this host's gives for the same file
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    local = np.stack([session.run(None, {name: b})[0] for b in inputs])
    np.testing.assert_array_equal(outputs, local)
    assert set(client.round_trips) >= {"load_model", "inputs", "run", "stats", "outputs"}


@pytest.mark.slow
def test_a_wrong_token_is_refused_and_the_server_keeps_serving(tmp_path, model):
    with server(tmp_path) as (_, port):
        with pytest.raises(TransportError) as err:
            _client(port, token=b"not-the-token-at-all")
        assert err.value.kind == "auth" and "wrong token" in str(err.value)
        assert not err.value.transient
        with _client(port) as client:  # the right token still works
            assert client.load_model(model)


def _raw_session(port: int) -> socket.socket:
    """A hand-driven connection, authenticated with the right token."""
    from anb.collect_throughput.board.server import mac, read_frame, send_frame

    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    hello, _ = read_frame(sock, 0)
    send_frame(sock, {"type": "AUTH", "mac": mac(TOKEN, hello["nonce"])})
    assert read_frame(sock, 0)[0]["type"] == "OK"
    return sock


@pytest.mark.slow
def test_malformed_and_oversized_messages_get_an_error(tmp_path, model):
    from anb.collect_throughput.board.server import read_frame

    with server(tmp_path, "--max-payload", "1000") as (_, port):
        sock = _raw_session(port)  # a header that is not JSON
        sock.sendall(struct.pack(">I", 5) + b"{oops")
        reply, _ = read_frame(sock, 0)
        assert reply["type"] == "ERROR" and "malformed message: header is not JSON" in \
            reply["error"]
        sock = _raw_session(port)  # a header length over the limit, refused before reading
        sock.sendall(struct.pack(">I", 10 ** 9))
        reply, _ = read_frame(sock, 0)
        assert "header of 1000000000 bytes exceeds the limit" in reply["error"]
        sock = _raw_session(port)  # an unknown request
        body = json.dumps({"type": "FORMAT_DISK"}).encode()
        sock.sendall(struct.pack(">I", len(body)) + body)
        assert "type='FORMAT_DISK' is unknown" in read_frame(sock, 0)[0]["error"]
        with _client(port) as client, pytest.raises(TransportError) as err:
            client.load_model(model)  # larger than --max-payload 1000
        assert f"payload of {model.stat().st_size} bytes exceeds the limit of 1000" in \
            str(err.value)


CLIENT = """
import sys, numpy as np
from anb.collect_throughput.resident import TargetClient
from anb.collect_throughput.protocol import device_from_mapping
from anb.searchspace.space import ANB_SPACE
device = device_from_mapping({"name": "resident-a", "backend": "onnxruntime", "resolution": 32,
    "threads": 1, "latency": {"batch": 1}, "warmup": {"max_seconds": 1.0},
    "stopping": {"budget_seconds": 8, "min_reps": 10000, "max_reps": 100000, "rel_ci": 1e-9}})
client = TargetClient("resident-a", "127.0.0.1", int(sys.argv[1]), sys.argv[3].encode())
client.load_model(sys.argv[2])
client.send_inputs(np.load(sys.argv[4]))
print("running", flush=True)
client.time(device.protocols[0])
"""


@pytest.mark.slow
def test_the_server_survives_a_client_killed_mid_run(tmp_path, model):
    protocol = _protocol(budget=0.3)
    np.save(tmp_path / "inputs.npy", _inputs(protocol))
    with server(tmp_path) as (proc, port):
        victim = subprocess.Popen([sys.executable, "-c", CLIENT, str(port), str(model),
                                   TOKEN.decode(), str(tmp_path / "inputs.npy")],
                                  stdout=subprocess.PIPE, text=True)
        assert victim.stdout.readline().strip() == "running"
        time.sleep(1.0)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        # the orphaned run finishes its 8 s budget at most, then the board is free again
        with _client(port, timeout=120) as client:
            client.load_model(model)
            client.send_inputs(_inputs(protocol))
            assert client.time(protocol)["ok"]
        assert proc.poll() is None


@pytest.mark.slow
def test_a_server_killed_mid_run_is_a_transient_error(tmp_path, model):
    protocol = _protocol(budget=30)
    with server(tmp_path) as (proc, port):
        client = _client(port)
        client.load_model(model)
        client.send_inputs(_inputs(protocol))
        killer = subprocess.Popen(["sh", "-c", f"sleep 1.5; kill -9 {proc.pid}"])
        with pytest.raises(TransportError) as err:
            client.time(dataclasses.replace(protocol, stopping=dataclasses.replace(
                protocol.stopping, min_reps=10 ** 5, max_reps=10 ** 6, rel_ci=1e-9)))
        killer.wait()
    assert err.value.kind == "unreachable" and err.value.transient
    assert err.value.step == "run" and "went away" in str(err.value)
    with pytest.raises(TransportError) as err:
        _client(port)
    assert err.value.kind == "unreachable"


@pytest.mark.slow
def test_anb_measure_runs_a_resident_board_and_records_its_statistics(tmp_path):
    """Bug class: the resident runtime dropping what the board sampled (utilisation, peak RSS)
    or the host's round trip, or a measure that ignores the token and still connects."""
    from typer.testing import CliRunner

    from anb.cli import app

    with server(tmp_path) as (_, port):
        config = board_config(tmp_path, "resident-board", {
            "transport": f"tcp://127.0.0.1:{port}", "runtime": "resident",
            "token_file": str(tmp_path / "token")})
        result = CliRunner().invoke(app, ["measure", str(config), "--archs", str(ARCH), "--out",
                                          str(tmp_path / "out"), "--no-progress"])
        assert result.exit_code == 0, result.output
        record = json.loads((tmp_path / "out" / "resident-board" / f"{ARCH.id}.json")
                            .read_text())
        entry = record["platform_perf"]["latency_resident-board"]
        assert entry["environment"]["transport"] == f"tcp://127.0.0.1:{port}"
        assert entry["environment"]["board_runtime"] == "resident"
        stats = entry["utilisation"]  # the measurement's extra fields sit in its entry
        assert entry["peak_rss_bytes"] == stats["peak_rss_bytes"] >= \
            max(s["rss_bytes"] for s in stats["samples"]) > 0
        assert entry["round_trip_s"]["run"] >= entry["elapsed_seconds"]
        (tmp_path / "token").write_bytes(b"another-token-of-16+-bytes")
        result = CliRunner().invoke(app, ["measure", str(config), "--archs", str(ARCH), "--out",
                                          str(tmp_path / "out2"), "--no-progress"])
        assert result.exit_code == 2
        assert "device 'resident-board', step 'connect' (auth)" in result.output


def test_resident_config_errors_are_clear():
    from anb.collect_throughput.remote import RemoteSpec

    with pytest.raises(ValueError, match="transport 'tcp://HOST:PORT' exactly with runtime "
                                         "'resident'"):
        RemoteSpec.from_mapping("b", {"transport": "tcp://h:1", "runtime": "onnxruntime"})
    with pytest.raises(ValueError, match="exactly with runtime 'resident'"):
        RemoteSpec.from_mapping("b", {"transport": "ssh://h", "runtime": "resident"})
