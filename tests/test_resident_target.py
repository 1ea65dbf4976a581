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
import re
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
from anb.collect_throughput.targets.resident import TargetClient
from anb.collect_throughput.timing.protocol import device_from_mapping
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
    from anb.collect_throughput.timing.inputs import make_inputs

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
from anb.collect_throughput.targets.resident import TargetClient
from anb.collect_throughput.timing.protocol import device_from_mapping
from anb.searchspace.space import ANB_SPACE
device = device_from_mapping({"name": "resident-a", "backend": "onnxruntime", "resolution": 32,
    "threads": 1, "latency": {"batch": 1}, "warmup": {"max_seconds": 1.0},
    "stopping": {"budget_seconds": 4, "min_reps": 10000, "max_reps": 100000, "rel_ci": 1e-9}},
    space=ANB_SPACE.name)
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
        # the orphaned run finishes its 4 s budget at most, then the board is free again
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
    from anb.collect_throughput.targets.remote import RemoteSpec

    with pytest.raises(ValueError, match="transport 'tcp://HOST:PORT' exactly with runtime "
                                         "'resident'"):
        RemoteSpec.from_mapping("b", {"transport": "tcp://h:1", "runtime": "onnxruntime"})
    with pytest.raises(ValueError, match="exactly with runtime 'resident'"):
        RemoteSpec.from_mapping("b", {"transport": "ssh://h", "runtime": "resident"})


# -- the handshake and the model payload, against a real server in this process ----------------
@contextmanager
def local_server(idle_timeout: float = 10.0, sample_interval: float = 0.1):
    """A TargetServer on 127.0.0.1 served by a thread of this process (so that mutation
    testing sees what it runs); yields its port."""
    import threading

    from anb.collect_throughput.board.server import TargetServer, serve

    target = TargetServer(("127.0.0.1", 0), TOKEN, max_payload=1000, idle_timeout=idle_timeout,
                          sample_interval=sample_interval)
    thread = threading.Thread(target=serve, args=(target,), daemon=True)
    thread.start()
    try:
        yield target.server_address[1]
    finally:
        target.shutdown()
        thread.join()
        assert target.socket.fileno() == -1  # serve() closed the listening socket


def _hello(port: int) -> tuple[socket.socket, str]:
    from anb.collect_throughput.board.server import read_frame

    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    hello, _ = read_frame(sock, 0)
    assert hello == {"type": "HELLO", "version": 1, "nonce": hello["nonce"], "size": 0}
    assert len(bytes.fromhex(hello["nonce"])) == 16
    return sock, hello["nonce"]


def _reply(sock: socket.socket) -> dict:
    from anb.collect_throughput.board.server import read_frame

    return read_frame(sock, 0)[0]


ALLOWED = "; allowed: the hex HMAC-SHA256 of the nonce"


@pytest.mark.parametrize("auth, problem", [
    ({"type": "AUTH"}, "mac=None is invalid" + ALLOWED),
    ({"type": "AUTH", "mac": ""}, "wrong token"),
    ({"type": "AUTH", "mac": 12345}, "mac=12345 is invalid" + ALLOWED),
    ({"type": "AUTH", "mac": ["a"]}, "mac=['a'] is invalid" + ALLOWED),
    ({"type": "AUTH", "mac": "é" * 64}, "wrong token"),  # compare_digest raises on non-ASCII
    ({"type": "AUTH", "mac": "right"}, ""),
    ({"type": "LOAD_MODEL", "mac": "right"}, "type='LOAD_MODEL' before AUTH; allowed: AUTH"),
])
def test_auth_refuses_a_missing_empty_or_non_string_mac(auth, problem):
    """Bug class: a handshake without a valid MAC let through, or one that crashes the
    connection's thread instead of answering; the server keeps serving either way."""
    from anb.collect_throughput.board.server import mac, send_frame

    with local_server() as port:
        sock, nonce = _hello(port)
        if auth.get("mac") == "right":
            auth = {**auth, "mac": mac(TOKEN, nonce)}
        send_frame(sock, auth)
        reply = _reply(sock)
        if problem:
            assert reply == {"type": "ERROR", "error": f"authentication failed: {problem}",
                             "size": 0}
            send_frame(sock, {"type": "STATS"})  # refused: the connection is closed
            with pytest.raises(ConnectionError):
                _reply(sock)
        else:
            assert reply == {"type": "OK", "version": 1, "size": 0}
        with _client(port, timeout=10) as client:
            assert client.stats() == {}


def test_a_pre_auth_frame_is_small_and_refused_before_it_is_read():
    """Bug class: an unauthenticated peer making the server read (and hold) a large header or
    any payload. A header of exactly the limit passes."""
    from anb.collect_throughput.board.server import MAX_AUTH_HEADER, mac, send_frame

    with local_server() as port:
        sock, _ = _hello(port)
        sock.sendall(struct.pack(">I", MAX_AUTH_HEADER + 1))  # the header never follows
        assert _reply(sock) == {"type": "ERROR", "size": 0, "error": (
            f"malformed message: header of {MAX_AUTH_HEADER + 1} bytes exceeds the limit of "
            f"{MAX_AUTH_HEADER}")}
        with pytest.raises(ConnectionError):  # and the connection closed
            _reply(sock)
        sock, nonce = _hello(port)
        body = json.dumps({"type": "AUTH", "mac": mac(TOKEN, nonce), "size": 10}).encode()
        sock.sendall(struct.pack(">I", len(body)) + body)  # the 10 bytes never follow
        assert _reply(sock)["error"] == \
            "malformed message: payload of 10 bytes exceeds the limit of 0"
        sock, nonce = _hello(port)  # exactly MAX_AUTH_HEADER bytes: accepted
        body = json.dumps({"type": "AUTH", "mac": mac(TOKEN, nonce)}).encode()
        sock.sendall(struct.pack(">I", MAX_AUTH_HEADER) + body.ljust(MAX_AUTH_HEADER))
        assert _reply(sock)["type"] == "OK"
        send_frame(sock, {"type": "BYE"})
        assert _reply(sock)["type"] == "OK"


def test_the_handshake_must_end_within_the_idle_timeout():
    """Bug class: a peer that trickles its AUTH a byte at a time holding a server thread for
    ever (each byte restarting the idle timeout)."""
    from anb.collect_throughput.board.server import HEADER, mac

    with local_server(idle_timeout=1.0) as port:
        sock, nonce = _hello(port)
        body = json.dumps({"type": "AUTH", "mac": mac(TOKEN, nonce)}).encode()
        frame = HEADER.pack(len(body)) + body
        try:
            for i in range(len(frame)):  # ~3 s in all, each byte well within the timeout
                sock.sendall(frame[i:i + 1])
                time.sleep(3.0 / len(frame))
        except OSError:
            pass  # the server dropped us part-way
        with pytest.raises(OSError):  # ConnectionError: no OK comes back
            _reply(sock)


def test_a_corrupted_model_is_refused_though_its_header_hash_is_right():
    """Bug class: the server trusting the header's sha256 instead of hashing what arrived."""
    import hashlib

    from anb.collect_throughput.board.server import send_frame

    model = b"an onnx model's bytes"
    digest = hashlib.sha256(model).hexdigest()
    with local_server() as port:
        sock = _raw_session(port)
        send_frame(sock, {"type": "LOAD_MODEL", "sha256": digest}, b"an onnx model's bytez")
        got = hashlib.sha256(b"an onnx model's bytez").hexdigest()
        assert _reply(sock)["error"] == (f"malformed message: model sha256 {got} does not "
                                         f"match the header's {digest!r}")
        sock = _raw_session(port)
        send_frame(sock, {"type": "LOAD_MODEL", "sha256": digest}, model)
        assert _reply(sock) == {"type": "OK", "sha256": digest, "size": 0}


def test_the_client_gives_up_on_a_peer_that_never_answers_the_handshake():
    """Bug class: the client waiting for ever on a port that accepts TCP and says nothing."""
    with socket.create_server(("127.0.0.1", 0)) as peer:  # the kernel accepts; nobody answers
        port = peer.getsockname()[1]
        with pytest.raises(TransportError) as err:
            TargetClient("resident-a", "127.0.0.1", port, TOKEN, connect_timeout=0.5)
    assert (err.value.step, err.value.kind) == ("connect", "timeout")
    assert "no reply from" in str(err.value)


def test_the_connect_timeout_bounds_the_whole_handshake():
    """Bug class: a peer that trickles its HELLO a byte at a time keeping the client waiting
    past its connect timeout (each byte restarting a per-read timeout)."""
    import threading

    stop = threading.Event()

    def trickle(peer: socket.socket) -> None:
        conn, _ = peer.accept()
        with conn:
            conn.sendall(struct.pack(">I", 1000))  # a HELLO of 1000 bytes, sent slowly
            for _ in range(40):  # 8 s at most
                if stop.wait(0.2):
                    return
                try:
                    conn.sendall(b" ")
                except OSError:
                    return

    with socket.create_server(("127.0.0.1", 0)) as peer:
        thread = threading.Thread(target=trickle, args=(peer,), daemon=True)
        thread.start()
        try:
            with pytest.raises(TransportError) as err:
                TargetClient("resident-a", "127.0.0.1", peer.getsockname()[1], TOKEN,
                             connect_timeout=1.0)
        finally:
            stop.set()
            thread.join()
    # without the deadline the client reads on until the peer hangs up: "unreachable"
    assert (err.value.step, err.value.kind) == ("connect", "timeout")


@contextmanager
def _peer(answer: bytes | None):
    """A TCP peer on 127.0.0.1 that sends ``answer`` to whoever connects and hangs up
    (None: hangs up at once); yields its port."""
    import threading

    with socket.create_server(("127.0.0.1", 0)) as peer:
        def serve() -> None:
            conn, _ = peer.accept()
            with conn:
                if answer:
                    conn.sendall(answer)
                    conn.recv(1)  # until the client hangs up

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        yield peer.getsockname()[1]
        thread.join(timeout=10)


def _frame(header: dict) -> bytes:
    body = json.dumps(header).encode()
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("answer, kind, message", [
    (None, "unreachable", "the target server at {url} went away: the peer closed the "
                          "connection"),
    (struct.pack(">I", 5) + b"{oops", "rejected",
     "malformed reply: header is not JSON: Expecting property name enclosed in double quotes: "
     "line 1 column 2 (char 1)"),
    (_frame({"type": "HELLO"}), "rejected", "{url} is not an anb target server"),
    (_frame({"type": "WELCOME", "nonce": "abc"}), "rejected", "{url} is not an anb target "
                                                              "server"),
])
def test_the_client_names_each_handshake_failure(answer, kind, message):
    """Bug class: a handshake failure reported under the wrong step or kind (the retry logic
    reads the kind: only ``unreachable`` is transient)."""
    with _peer(answer) as port, pytest.raises(TransportError) as err:
        TargetClient("resident-a", "127.0.0.1", port, TOKEN, connect_timeout=10)
    url = f"tcp://127.0.0.1:{port}"
    assert (err.value.device, err.value.step, err.value.kind) == ("resident-a", "connect", kind)
    assert err.value.message == message.format(url=url)


def test_the_client_reports_a_closed_port_and_a_wrong_token():
    from tests.realservers import free_port

    port = free_port()
    with pytest.raises(TransportError) as err:
        TargetClient("resident-a", "127.0.0.1", port, TOKEN, connect_timeout=10)
    assert (err.value.step, err.value.kind) == ("connect", "unreachable")
    assert err.value.message.startswith(f"cannot reach tcp://127.0.0.1:{port}: ")
    with local_server() as port:
        with pytest.raises(TransportError) as err:
            TargetClient("resident-a", "127.0.0.1", port, b"another token, 16+ bytes")
        assert (err.value.step, err.value.kind) == ("connect", "auth")
        assert err.value.message == "authentication failed: wrong token"
        with TargetClient("resident-a", "127.0.0.1", port, TOKEN, timeout=42) as client:
            assert client.sock.gettimeout() == 42  # the handshake's deadline is lifted
        with TargetClient("resident-a", "127.0.0.1", port, TOKEN) as client:
            assert client.sock.gettimeout() == 900  # the documented default


def test_frames_are_checked_and_read_whole():
    """Bug class: the framing letting a malformed header through, joining chunks wrongly,
    or a deadline that fires early or never (read_frame on a real socket pair)."""
    from anb.collect_throughput.board.server import ProtocolError, read_exact, read_frame

    a, b = socket.socketpair()
    with a, b:
        a.settimeout(10)
        for raw, error in [
                (b"{oops", "header is not JSON: Expecting property name enclosed in double "
                           "quotes: line 1 column 2 (char 1)"),
                (b"[1]", "header must be an object with a string 'type'"),
                (b'{"type": 1}', "header must be an object with a string 'type'"),
                (b'{"type": "X", "size": -1}', "size=-1 is invalid; allowed: a byte count >= 0"),
                (b'{"type": "X", "size": "3"}',
                 "size='3' is invalid; allowed: a byte count >= 0")]:
            b.sendall(struct.pack(">I", len(raw)) + raw)
            with pytest.raises(ProtocolError) as err:
                read_frame(a, 100)
            assert str(err.value) == error
        payload = os.urandom((2 << 20) + 5)  # more than one recv's worth
        import threading

        sender = threading.Thread(target=b.sendall, args=(
            _frame({"type": "X", "size": len(payload)}) + payload + _frame({"type": "Y"}),))
        sender.start()  # the pair's buffer is smaller than the payload
        assert read_frame(a, len(payload), deadline=time.monotonic() + 30) == (
            {"type": "X", "size": len(payload)}, payload)
        assert read_frame(a, 0, deadline=time.monotonic() + 0.5) == ({"type": "Y"}, b"")
        sender.join()
        with pytest.raises(socket.timeout, match="^the message did not arrive in time$"):
            read_exact(a, 1, deadline=time.monotonic() - 1)
        b.close()
        with pytest.raises(ConnectionError, match="^the peer closed the connection$"):
            read_exact(a, 1)


def test_after_the_handshake_the_idle_timeout_applies_again():
    """Bug class: the handshake's deadline (or no timeout at all) left on an authenticated
    connection, so a silent client is never dropped."""
    with local_server(idle_timeout=1.0) as port:
        sock = _raw_session(port)
        with pytest.raises(ConnectionError):  # dropped after 1 s, well before our 10 s
            _reply(sock)


def test_the_mac_binds_the_nonce():
    """A MAC that ignored the nonce could be replayed on the next connection."""
    from anb.collect_throughput.board.server import mac
    assert mac(b"token", "nonce-1") != mac(b"token", "nonce-2")
    assert mac(b"token", "nonce-1") == mac(b"token", "nonce-1")


def test_a_frame_past_its_deadline_is_refused_by_the_deadline_not_the_socket():
    """read_frame passes its deadline to the first read: a silent peer past the deadline is
    refused by it (its message), not left to the socket's own timeout ("timed out")."""
    from anb.collect_throughput.board.server import read_frame
    ours, peer = socket.socketpair()
    with ours, peer:
        ours.settimeout(0.5)
        with pytest.raises(socket.timeout, match="did not arrive in time"):
            read_frame(ours, 1024, deadline=time.monotonic() - 1)


def test_load_model_keeps_the_suffix_asked_for_and_refuses_others():
    """LOAD_MODEL, in-process: the model is saved with the header's ``suffix``; another
    suffix is refused naming it and what is allowed."""
    import hashlib

    from anb.collect_throughput.board.server import Handler, ProtocolError, Session
    payload = b"compiled model"
    digest = hashlib.sha256(payload).hexdigest()
    session = Session()
    try:
        Handler.dispatch(None, session, {"type": "LOAD_MODEL", "sha256": digest,
                                         "suffix": ".so"}, payload)
        assert session.model.endswith("model.so")
        assert Path(session.model).read_bytes() == payload
        with pytest.raises(ProtocolError, match=r"^suffix='\.exe' is invalid; allowed: "
                                                r"\.onnx, \.so$"):
            Handler.dispatch(None, session, {"type": "LOAD_MODEL", "sha256": digest,
                                             "suffix": ".exe"}, payload)
    finally:
        session.close()


# -- RUN, the command line and the token, in this process ---------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A real ONNX model small enough for the in-process server's 1000-byte payload limit:
    y = relu(x) * 2 on one 1x2x3x3 batch."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["y"])]
    shape = [1, 2, 3, 3]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("tiny") / "tiny.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


TINY_INPUTS = np.linspace(-1, 1, 2 * 18, dtype=np.float32).reshape(2, 1, 2, 3, 3)


def _ask(sock: socket.socket, header: dict, payload: bytes = b"") -> dict:
    from anb.collect_throughput.board.server import send_frame

    send_frame(sock, header, payload)
    return _reply(sock)


def _closed(sock: socket.socket) -> bool:
    """True when the server has closed the connection (a further request gets no reply)."""
    from anb.collect_throughput.board.server import send_frame

    try:
        send_frame(sock, {"type": "STATS"})
        _reply(sock)
    except OSError:
        return True
    return False


def test_requests_out_of_order_are_refused_and_the_session_goes_on(tiny_model, tmp_path,
                                                                   monkeypatch):
    """Bug class: RUN without a model or inputs, or OUTPUTS before an outputs run, crashing
    the connection or answering without the step and kind the host's retry logic reads."""
    import hashlib

    model = tiny_model.read_bytes()
    load = {"type": "LOAD_MODEL", "sha256": hashlib.sha256(model).hexdigest()}
    before = {"type": "ERROR", "step": "run", "kind": "command", "size": 0,
              "error": "LOAD_MODEL and INPUTS come before RUN"}
    monkeypatch.chdir(tmp_path)  # the session's files go to its own folder, never here
    with local_server(sample_interval=0.25) as port:
        sock = _raw_session(port)
        assert _ask(sock, {"type": "RUN", "mode": "outputs"}) == before
        assert _ask(sock, {"type": "OUTPUTS"}) == {
            "type": "ERROR", "step": "outputs", "kind": "command", "size": 0,
            "error": "no outputs: RUN mode=outputs first"}
        assert _ask(sock, load, model)["type"] == "OK"
        assert _ask(sock, {"type": "RUN", "mode": "outputs"}) == before  # inputs still missing
        assert _ask(sock, {"type": "INPUTS"}, _npy(TINY_INPUTS)) == {
            "type": "OK", "shape": [2, 1, 2, 3, 3], "size": 0}
        assert _ask(sock, {"type": "STATS"}) == {"type": "OK", "stats": {}, "size": 0}
        assert _ask(sock, {"type": "RUN", "mode": "outputs", "runtime": "abacus"}) == {
            "type": "ERROR", "step": "job", "kind": "command", "size": 0,
            "error": "runtime='abacus' is invalid; allowed: onnxruntime, openvino, tvm"}
        reply = _ask(sock, {"type": "RUN", "mode": "outputs"})  # defaults: onnxruntime, 1 thread
        assert reply["type"] == "OK" and "outputs" not in reply["result"]
        assert reply["result"]["ok"] is True
        environment = reply["result"]["environment"]
        assert environment["runtime"] == "onnxruntime"
        assert environment["ort_intra_op_threads"] == 1
        assert "utilisation" not in reply["result"]  # it went to STATS
        stats = _ask(sock, {"type": "STATS"})["stats"]
        assert stats["samples"] and stats["interval_s"] == 0.25  # the server's own setting
        protocol = _protocol(budget=0.1)
        rules = {"warmup": dataclasses.asdict(protocol.warmup),
                 "stopping": dataclasses.asdict(protocol.stopping)}
        assert _ask(sock, {"type": "RUN", **rules})["result"]["times_s"]  # the wall clock
        assert _ask(sock, {"type": "RUN", "clock": "sundial", **rules}) == {
            "type": "ERROR", "step": "job", "kind": "command", "size": 0,
            "error": "clock='sundial' is invalid; allowed: wall, cpu"}
        reply = _ask(sock, {"type": "RUN", "mode": "outputs", "threads": 2})
        assert reply["result"]["environment"]["ort_intra_op_threads"] == 2
        # the runtime and its settings named by the host reach the board's runner
        reply = _ask(sock, {"type": "RUN", "mode": "outputs", "runtime": "openvino",
                            "openvino_config": {"INFERENCE_NUM_THREADS": 1}})
        environment = reply["result"]["environment"]
        assert environment["runtime"] == "openvino"
        assert {k: str(v) for k, v in environment["openvino_settings"].items()} == {
            "INFERENCE_NUM_THREADS": "1"}
        assert _ask(sock, {"type": "BYE"}) == {"type": "OK", "size": 0}
        assert _closed(sock)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("request_, error", [
    ({"type": "RUN", "mode": "fast"}, "mode='fast' is invalid; allowed: time, outputs"),
    ({"type": "RUN"}, "RUN mode=time needs 'warmup' and 'stopping' objects"),
    ({"type": "RUN", "warmup": {}, "stopping": None},
     "RUN mode=time needs 'warmup' and 'stopping' objects"),
    ({"type": "RUN", "warmup": [], "stopping": {}},
     "RUN mode=time needs 'warmup' and 'stopping' objects"),
    ({"type": "INPUTS", "payload": b"not an array"}, "inputs are not a .npy array: "),
    ({"type": "INPUTS", "payload": _npy(np.array([{"a": 1}], dtype=object))},  # a pickle
     "inputs are not a .npy array: Object arrays cannot be loaded when allow_pickle=False"),
    ({"type": "FORMAT_DISK"},
     "type='FORMAT_DISK' is unknown; allowed: LOAD_MODEL, INPUTS, RUN, OUTPUTS, STATS, BYE"),
])
def test_a_malformed_run_or_inputs_gets_an_error_and_the_connection_closes(
        tiny_model, request_, error):
    import hashlib

    model = tiny_model.read_bytes()
    with local_server() as port:
        sock = _raw_session(port)
        _ask(sock, {"type": "LOAD_MODEL", "sha256": hashlib.sha256(model).hexdigest()}, model)
        if request_["type"] == "RUN":
            _ask(sock, {"type": "INPUTS"}, _npy(TINY_INPUTS))
        header = {k: v for k, v in request_.items() if k != "payload"}
        reply = _ask(sock, header, request_.get("payload", b""))
        assert reply == {"type": "ERROR", "size": 0, "error": reply["error"]}
        assert reply["error"].startswith("malformed message: " + error)
        assert _closed(sock)


def test_the_board_times_and_computes_outputs_in_process(tiny_model):
    """The positive path through the host's client and a server thread of this process:
    timing under the protocol's rules, statistics, outputs equal to relu(x) * 2."""
    protocol = _protocol(budget=0.2)
    with local_server() as port, _client(port, timeout=60) as client:
        assert client.load_model(tiny_model)
        client.send_inputs(TINY_INPUTS)
        result = client.time(protocol)
        assert result["ok"] and result["stop_reason"] in ("converged", "budget", "max_reps")
        assert len(result["warmup_times_s"]) >= protocol.warmup.min_steps
        assert "utilisation" not in result
        assert client.stats()["samples"]
        outputs = client.outputs(threads=2)
    np.testing.assert_array_equal(outputs, np.maximum(TINY_INPUTS, 0) * 2)


def test_the_command_line_defaults_are_the_documented_ones(capsys):
    from anb.collect_throughput.board.server import options

    assert vars(options(["--token-file", "t"])) == {
        "host": "127.0.0.1", "port": 7341, "token_file": "t", "max_payload": 1 << 30,
        "idle_timeout": 120.0, "sample_interval": 0.1}
    assert vars(options(["--token-file", "t", "--host", "::1", "--port", "0", "--max-payload",
                         "10", "--idle-timeout", "5", "--sample-interval", "0.05"])) == {
        "host": "::1", "port": 0, "token_file": "t", "max_payload": 10, "idle_timeout": 5.0,
        "sample_interval": 0.05}
    with pytest.raises(SystemExit):  # argparse: --token-file is required
        options([])
    with pytest.raises(SystemExit):
        options(["--help"])
    usage = capsys.readouterr().out
    assert re.search(r"^anb target server \(see the module docstring\)$", usage, re.M)
    assert re.search(r"^  --port PORT +0: any free port$", usage, re.M)


def test_the_server_takes_its_settings_from_the_options(tmp_path):
    from anb.collect_throughput.board.server import options, server_from

    (tmp_path / "token").write_bytes(TOKEN)
    server = server_from(options([
        "--port", "0", "--token-file", str(tmp_path / "token"), "--max-payload", "10",
        "--idle-timeout", "5", "--sample-interval", "0.05"]))
    with server:
        assert server.server_address[0] == "127.0.0.1" and server.server_address[1] > 0
        assert (server.token, server.max_payload, server.idle_timeout,
                server.sample_interval) == (TOKEN, 10, 5.0, 0.05)


def test_the_token_is_read_stripped_from_a_user_path_and_16_bytes_at_least(tmp_path,
                                                                         monkeypatch):
    from anb.collect_throughput.board.server import read_token

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "token").write_bytes(b"  " + TOKEN + b"\n")
    assert read_token("~/token") == TOKEN
    (tmp_path / "token").write_bytes(b"0123456789abcdef\n")  # exactly 16 bytes: enough
    assert read_token("~/token") == b"0123456789abcdef"
    (tmp_path / "token").write_bytes(b"0123456789abcde \n")
    with pytest.raises(SystemExit) as err:
        read_token("~/token")
    assert str(err.value) == "error: the token in ~/token is shorter than 16 bytes"


@pytest.mark.timeout(60)
def test_main_serves_its_options_until_ctrl_c(tmp_path, monkeypatch):
    """``main`` in this process: it says where it listens at once (flushed, as a host reading
    its pipe needs), serves with the token and payload limit of its options, and Ctrl-C (a
    real SIGINT) ends it with status 0 and the port closed."""
    import threading

    from anb.collect_throughput.board.server import main

    (tmp_path / "token").write_bytes(TOKEN + b"\n")
    read_end, write_end = os.pipe()
    monkeypatch.setattr(sys, "stdout", open(write_end, "w"))  # a pipe: block-buffered
    seen = {}

    def use_it() -> None:
        with open(read_end) as pipe:
            seen["line"] = pipe.readline()
        port = int(seen["line"].rsplit(":", 1)[1])
        seen["port"] = port
        try:
            with _client(port, timeout=10) as client:
                seen["stats"] = client.stats()
            with _client(port, timeout=10) as client:
                client.load_model(tmp_path / "token")  # 28 bytes, over --max-payload 20
        except TransportError as err:
            seen["error"] = str(err)
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    # Python's own Ctrl-C handler, also where this process was started with SIGINT ignored
    # (a background job of a non-interactive shell)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        thread = threading.Thread(target=use_it, daemon=True)
        thread.start()
        assert main(["--port", "0", "--token-file", str(tmp_path / "token"),
                     "--max-payload", "20", "--idle-timeout", "5"]) == 0
        thread.join()
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.stdout.close()
    port = seen.pop("port")
    assert seen == {"line": f"anb target server listening on 127.0.0.1:{port}\n", "stats": {},
                    "error": f"device 'resident-a', step 'load_model' (rejected): malformed "
                             f"message: payload of {len(TOKEN) + 1} bytes exceeds the limit "
                             "of 20"}
    with pytest.raises(ConnectionRefusedError):  # the listening socket is closed
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_a_malformed_frame_after_the_handshake_gets_an_error_in_process():
    """The in-process twin of the slow subprocess test above (mutation runs skip slow tests):
    a header that is not JSON, or a payload over ``max_payload``, answered ERROR and closed."""
    with local_server() as port:
        sock = _raw_session(port)
        sock.sendall(struct.pack(">I", 5) + b"{oops")
        assert _reply(sock) == {"type": "ERROR", "size": 0, "error": (
            "malformed message: header is not JSON: Expecting property name enclosed in double "
            "quotes: line 1 column 2 (char 1)")}
        assert _closed(sock)
        sock = _raw_session(port)
        body = json.dumps({"type": "INPUTS", "size": 1001}).encode()  # the bytes never follow
        sock.sendall(struct.pack(">I", len(body)) + body)
        assert _reply(sock) == {"type": "ERROR", "size": 0, "error": (
            "malformed message: payload of 1001 bytes exceeds the limit of 1000")}
        assert _closed(sock)


def test_a_session_keeps_its_files_in_its_own_folder_and_removes_it(tmp_path, monkeypatch,
                                                                    tiny_model):
    """Bug class: a session's model and inputs left on the board's disk after it ends."""
    import hashlib
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = tiny_model.read_bytes()
    with local_server() as port:
        sock = _raw_session(port)
        _ask(sock, {"type": "LOAD_MODEL", "sha256": hashlib.sha256(model).hexdigest()}, model)
        (folder,) = tmp_path.iterdir()
        assert folder.name.startswith("anb-target-") and (folder / "model.onnx").exists()
        assert _ask(sock, {"type": "BYE"})["type"] == "OK"
        assert _closed(sock)  # the handler has returned, its session closed
    assert list(tmp_path.iterdir()) == []


def test_a_session_whose_folder_vanished_still_ends_quietly(tmp_path, monkeypatch, capsys):
    """Bug class: the clean-up failing (a board's tmp cleaner removed the folder first) and
    the handler thread ending in a traceback instead of a plain close."""
    import shutil
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with local_server() as port:
        sock = _raw_session(port)
        assert _ask(sock, {"type": "STATS"})["type"] == "OK"
        (folder,) = tmp_path.iterdir()
        shutil.rmtree(folder)
        assert _ask(sock, {"type": "BYE"})["type"] == "OK"
        assert _closed(sock)
    assert "Traceback" not in capsys.readouterr().err
