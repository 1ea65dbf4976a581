#!/usr/bin/env python3
"""anb target server: keeps a runtime resident on a board and measures models the host sends.

Self-contained like ``runner.py`` beside it (Python >= 3.7, numpy and the runtimes it is asked
for: onnxruntime, OpenVINO, the TVM runtime; no ``anb``):
copy both files to the board and start::

    python3 server.py --port 7341 --token-file ~/.anb-token [--host 0.0.0.0]

The host (``anb.collect_throughput.targets.resident``) speaks a small message protocol over TCP.
Every message is a frame: a 4-byte big-endian header length, a JSON header, then ``header["size"]``
payload bytes (0 when absent). The server opens with ``HELLO {nonce}``; the client answers
``AUTH {mac}``, the HMAC-SHA256 of the nonce under the shared token, so the token never crosses
the network and no other host can load a model. Requests, each answered ``OK`` or
``ERROR {error}``:

- ``LOAD_MODEL {sha256, suffix}`` (payload: the model file, its ``sha256`` checked; ``suffix``
  ``.onnx``, the default, or ``.so``: a TVM library)
- ``INPUTS`` (payload: a ``.npy`` array of input batches)
- ``RUN {mode, runtime, openvino_config, threads, clock, warmup, stopping}``: ``time`` times
  inference on the board under the host's warm-up and stopping rules (runner.py's loop, with the
  ``runtime`` named, default onnxruntime); ``outputs`` computes outputs
- ``OUTPUTS`` (reply payload: the last ``outputs`` run's ``.npy``)
- ``STATS``: CPU utilisation, memory (RSS) and, where ``nvidia-smi`` answers, GPU utilisation,
  sampled while the last run ran (runner.py's Sampler)
- ``BYE``

Limits: a header over 64 KiB or a payload over ``--max-payload`` is refused before it is read;
before ``AUTH`` succeeds a frame may hold a header of 1 KiB and no payload, and the handshake
must end within ``--idle-timeout`` seconds; a client silent for ``--idle-timeout`` seconds is
dropped. One measurement runs at a time (a
lock, released when a client disconnects or dies mid-run); a malformed message gets ``ERROR``
and its connection closes; the server keeps serving.
"""
import argparse
import hashlib
import hmac
import io
import json
import os
import shutil
import socket
import socketserver
import struct
import sys
import tempfile
import threading
import time
from typing import cast

try:  # on the host (tests, the client's framing imports)
    from anb.collect_throughput.board import runner
except ImportError:  # on the board: the sibling file, found beside this script
    import runner  # type: ignore[no-redef,import-not-found]

VERSION = 1
MAX_HEADER = 64 * 1024
#: Largest header before authentication (an ``AUTH`` frame is about 100 bytes; no payload).
MAX_AUTH_HEADER = 1024
HEADER = struct.Struct(">I")
MODEL_SUFFIXES = (".onnx", ".so")
#: The defaults of the server's options (``--port`` etc.).
PORT, MAX_PAYLOAD, IDLE_TIMEOUT, SAMPLE_INTERVAL = 7341, 1 << 30, 120.0, 0.1


class ProtocolError(Exception):
    """A message that breaks the protocol; the connection closes after the ERROR reply."""


# -- framing (the host's client uses the same layout) -------------------------------------------
def read_exact(sock, n, deadline=None):
    """``n`` bytes from ``sock``; with a ``deadline`` (``time.monotonic()``), all of them by
    then (``socket.timeout`` otherwise), however slowly the peer trickles them."""
    chunks, left = [], n
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("the message did not arrive in time")
            sock.settimeout(remaining)
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send_frame(sock, header, payload=b""):
    header = dict(header, size=len(payload))
    data = json.dumps(header).encode()
    sock.sendall(HEADER.pack(len(data)) + data + payload)


def read_frame(sock, max_payload, max_header=MAX_HEADER, deadline=None):
    """One frame's (header, payload); sizes over ``max_header`` / ``max_payload`` are refused
    before they are read (:class:`ProtocolError`); ``deadline``: see :func:`read_exact`."""
    (length,) = HEADER.unpack(read_exact(sock, HEADER.size, deadline))
    if length > max_header:
        raise ProtocolError("header of %d bytes exceeds the limit of %d" % (length, max_header))
    try:
        header = json.loads(read_exact(sock, length, deadline).decode())
    except ValueError as err:
        raise ProtocolError("header is not JSON: %s" % err) from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ProtocolError("header must be an object with a string 'type'")
    size = header.get("size", 0)
    if not isinstance(size, int) or size < 0:
        raise ProtocolError("size=%r is invalid; allowed: a byte count >= 0" % (size,))
    if size > max_payload:
        raise ProtocolError("payload of %d bytes exceeds the limit of %d" % (size, max_payload))
    return header, read_exact(sock, size, deadline) if size else b""


def mac(token, nonce):
    return hmac.new(token, nonce.encode(), hashlib.sha256).hexdigest()


def auth_problem(header, expected):
    """What is wrong with an ``AUTH`` frame whose right ``mac`` is ``expected`` ("" if
    nothing): compared as bytes in constant time (a non-ASCII str would make
    ``compare_digest`` raise)."""
    if header["type"] != "AUTH":
        return "type=%r before AUTH; allowed: AUTH" % header["type"]
    given = header.get("mac")
    if not isinstance(given, str):
        return "mac=%r is invalid; allowed: the hex HMAC-SHA256 of the nonce" % (given,)
    if not hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
        return "wrong token"
    return ""


# -- the server --------------------------------------------------------------------------------
class Session:
    """One client's state: its folder, model, inputs, last outputs and statistics."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="anb-target-")
        self.model = self.inputs = self.outputs = None
        self.stats = {}

    def close(self):
        shutil.rmtree(self.folder, ignore_errors=True)


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        self.target = cast("TargetServer", self.server)
        sock = self.request
        sock.settimeout(self.target.idle_timeout)
        session = Session()
        try:
            if not self.authenticate(sock):
                return
            while True:
                try:
                    header, payload = read_frame(sock, self.target.max_payload)
                except ProtocolError as err:
                    send_frame(sock, {"type": "ERROR", "error": "malformed message: %s" % err})
                    return
                if header["type"] == "BYE":
                    send_frame(sock, {"type": "OK"})
                    return
                try:
                    reply, data = self.dispatch(session, header, payload)
                except runner.BoardError as err:
                    reply, data = {"type": "ERROR", "step": err.step, "kind": err.kind,
                                   "error": str(err)}, b""
                except ProtocolError as err:
                    send_frame(sock, {"type": "ERROR", "error": "malformed message: %s" % err})
                    return
                send_frame(sock, reply, data)
        except OSError:  # ConnectionError, socket.timeout
            return  # the client went away or fell silent: free the session
        finally:
            session.close()

    def authenticate(self, sock):
        """The HELLO/AUTH handshake: True once the client proved it holds the token. Before
        that a frame is small (:data:`MAX_AUTH_HEADER`, no payload) and the whole handshake
        ends within the idle timeout."""
        nonce = os.urandom(16).hex()
        send_frame(sock, {"type": "HELLO", "version": VERSION, "nonce": nonce})
        deadline = time.monotonic() + self.target.idle_timeout
        try:
            header, _ = read_frame(sock, 0, MAX_AUTH_HEADER, deadline)
        except ProtocolError as err:
            send_frame(sock, {"type": "ERROR", "error": "malformed message: %s" % err})
            return False
        sock.settimeout(self.target.idle_timeout)
        problem = auth_problem(header, mac(self.target.token, nonce))
        if problem:
            send_frame(sock, {"type": "ERROR", "error": "authentication failed: " + problem})
            return False
        send_frame(sock, {"type": "OK", "version": VERSION})
        return True

    def dispatch(self, session, header, payload):
        kind = header["type"]
        if kind == "LOAD_MODEL":
            digest = hashlib.sha256(payload).hexdigest()
            if header.get("sha256") != digest:
                raise ProtocolError("model sha256 %s does not match the header's %r"
                                    % (digest, header.get("sha256")))
            suffix = header.get("suffix", ".onnx")
            if suffix not in MODEL_SUFFIXES:
                raise ProtocolError("suffix=%r is invalid; allowed: %s"
                                    % (suffix, ", ".join(MODEL_SUFFIXES)))
            session.model = os.path.join(session.folder, "model" + suffix)
            with open(session.model, "wb") as handle:
                handle.write(payload)
            return {"type": "OK", "sha256": digest}, b""
        if kind == "INPUTS":
            np = runner.load_numpy()
            try:
                array = np.load(io.BytesIO(payload), allow_pickle=False)
            except ValueError as err:
                raise ProtocolError("inputs are not a .npy array: %s" % err) from None
            session.inputs = os.path.join(session.folder, "inputs.npy")
            np.save(session.inputs, array)
            return {"type": "OK", "shape": list(array.shape)}, b""
        if kind == "RUN":
            return self.run(session, header), b""
        if kind == "OUTPUTS":
            if session.outputs is None:
                raise runner.BoardError("outputs", "command", "no outputs: RUN mode=outputs first")
            with open(session.outputs, "rb") as handle:
                return {"type": "OK"}, handle.read()
        if kind == "STATS":
            return {"type": "OK", "stats": session.stats}, b""
        raise ProtocolError("type=%r is unknown; allowed: LOAD_MODEL, INPUTS, RUN, OUTPUTS, "
                            "STATS, BYE" % kind)

    def run(self, session, header):
        if session.model is None or session.inputs is None:
            raise runner.BoardError("run", "command", "LOAD_MODEL and INPUTS come before RUN")
        mode = header.get("mode", "time")
        if mode not in ("time", "outputs"):
            raise ProtocolError("mode=%r is invalid; allowed: time, outputs" % (mode,))
        job = {"mode": mode, "runtime": header.get("runtime", "onnxruntime"),
               "openvino_config": header.get("openvino_config"),
               "model": session.model, "inputs": session.inputs,
               "outputs": os.path.join(session.folder, "outputs.npy"),
               "threads": header.get("threads", 1), "clock": header.get("clock", "wall"),
               "warmup": header.get("warmup"), "stopping": header.get("stopping")}
        if mode == "time" and not (isinstance(job["warmup"], dict)
                                   and isinstance(job["stopping"], dict)):
            raise ProtocolError("RUN mode=time needs 'warmup' and 'stopping' objects")
        with self.target.busy:  # one measurement at a time on this board
            result = runner.run_job(dict(job, sample_interval=self.target.sample_interval))
        session.stats = result.pop("utilisation")
        if mode == "outputs":
            session.outputs = job["outputs"]
            result = {k: v for k, v in result.items() if k != "outputs"}
        return {"type": "OK", "result": result}


class TargetServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, token, max_payload=MAX_PAYLOAD, idle_timeout=IDLE_TIMEOUT,
                 sample_interval=SAMPLE_INTERVAL):
        socketserver.TCPServer.__init__(self, address, Handler)
        self.token, self.max_payload = token, max_payload
        self.idle_timeout, self.sample_interval = idle_timeout, sample_interval
        self.busy = threading.Lock()


def read_token(path):
    with open(os.path.expanduser(path), "rb") as handle:
        token = handle.read().strip()
    if len(token) < 16:
        raise SystemExit("error: the token in %s is shorter than 16 bytes" % path)
    return token


def options(argv=None):
    """The command line's options (``argv``: without the program name; None: ``sys.argv``)."""
    parser = argparse.ArgumentParser(description="anb target server (see the module docstring)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=PORT, help="0: any free port")
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--max-payload", type=int, default=MAX_PAYLOAD)
    parser.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT)
    parser.add_argument("--sample-interval", type=float, default=SAMPLE_INTERVAL)
    return parser.parse_args(argv)


def serve(server):
    """Serve until Ctrl-C or ``server.shutdown()``; the listening socket is closed either way."""
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def server_from(args):
    """The :class:`TargetServer` that :func:`options`' ``args`` ask for, bound and listening."""
    return TargetServer((args.host, args.port), read_token(args.token_file),
                        args.max_payload, args.idle_timeout, args.sample_interval)


def main(argv=None):
    server = server_from(options(argv))
    host, port = server.server_address  # AF_INET: (host, port)
    print("anb target server listening on %s:%d" % (host, port), flush=True)
    serve(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
