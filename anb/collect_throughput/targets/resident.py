"""The host side of a board that keeps its runtime resident (``board/server.py`` runs there).

A device config reaches it as a board runtime (see :mod:`.remote`)::

    kind = "remote"
    [remote]
    transport = "tcp://rpi4.lab:7341"
    runtime = "resident"
    token_file = "~/.anb/rpi4.token"   # the token the server was started with

:class:`TargetClient` speaks the server's message protocol over TCP (frames, HMAC handshake,
``LOAD_MODEL`` / ``INPUTS`` / ``RUN`` / ``OUTPUTS`` / ``STATS``; see the server's docstring):
the board times inference itself under the protocol's warm-up and stopping rules, the host adds
the round-trip time of each request, and the statistics (CPU, RSS, GPU) sampled during the run
come back with the result. Every failure is a
:class:`~anb.collect_throughput.transports.TransportError` naming the device and the step: an
unreachable or vanished server is ``unreachable`` (transient), a silent one ``timeout``, a
wrong token ``auth``, a refused model or message ``rejected``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from anb.collect_throughput.board.server import ProtocolError, mac, read_frame, send_frame
from anb.collect_throughput.targets.board_runtimes import OpenVinoBoard, TvmBoard
from anb.collect_throughput.targets.remote import BoardRuntime, OnnxRuntimeBoard, RemoteSpec
from anb.collect_throughput.timing.network import measured_resolution
from anb.collect_throughput.timing.protocol import Protocol
from anb.collect_throughput.timing.result import Measurement, utilisation_fields
from anb.collect_throughput.transports import TransportError
from anb.version import __version__

#: Largest reply the host accepts (outputs of a batch of images, well under this).
MAX_REPLY = 1 << 30


class TargetClient:
    """One authenticated connection to a target server (``tcp://host:port``):
    ``connect_timeout`` bounds connecting and the whole handshake together (a peer that
    accepts and then falls silent, or trickles bytes, is a ``timeout``), ``timeout`` each
    later reply."""

    def __init__(self, device: str, host: str, port: int, token: bytes,
                 timeout: float = 900.0, connect_timeout: float = 10.0) -> None:
        self.device, self.url = device, f"tcp://{host}:{port}"
        self.round_trips: dict[str, float] = {}
        self._deadline: float | None = time.monotonic() + connect_timeout
        try:
            self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as err:
            raise self.error("connect", f"cannot reach {self.url}: {err}", "unreachable") from None
        try:
            hello = self._read("connect")
            if hello.get("type") != "HELLO" or not isinstance(hello.get("nonce"), str):
                raise self.error("connect", f"{self.url} is not an anb target server",
                                 "rejected")
            self._request("connect", {"type": "AUTH", "mac": mac(token, hello["nonce"])},
                          auth=True)
        except TransportError:
            self.sock.close()
            raise
        self._deadline = None
        self.sock.settimeout(timeout)

    def error(self, step: str, message: str, kind: str) -> TransportError:
        return TransportError(self.device, step, message, kind)

    def _read(self, step: str) -> dict[str, Any]:
        header, payload = self._frame(step)
        header["payload"] = payload
        return header

    def _frame(self, step: str) -> tuple[dict[str, Any], bytes]:
        try:
            return read_frame(self.sock, MAX_REPLY, deadline=self._deadline)
        except TimeoutError:
            raise self.error(step, f"no reply from {self.url} within the timeout",
                             "timeout") from None
        except (ConnectionError, OSError) as err:
            raise self.error(step, f"the target server at {self.url} went away: {err}",
                             "unreachable") from None
        except ProtocolError as err:
            raise self.error(step, f"malformed reply: {err}", "rejected") from None

    def _request(self, step: str, header: dict[str, Any], payload: bytes = b"",
                 auth: bool = False) -> dict[str, Any]:
        began = time.perf_counter()
        try:
            send_frame(self.sock, header, payload)
        except OSError as err:
            # the server may have refused the message (e.g. over its size limit) and closed
            # before taking the rest of it: its ERROR reply is then already here
            try:
                reply = self._read(step)
            except TransportError:
                raise self.error(step, f"the target server at {self.url} went away: {err}",
                                 "unreachable") from None
        else:
            reply = self._read(step)
        self.round_trips[step] = time.perf_counter() - began
        if reply.get("type") != "OK":
            message = str(reply.get("error", reply))
            kind = "auth" if auth else reply.get("kind", "rejected")
            self.close()
            raise self.error(reply.get("step", step), message,
                             kind if kind in ("auth", "missing", "timeout") else "rejected")
        return reply

    def load_model(self, path: str | Path) -> str:
        data = Path(path).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        self._request("load_model", {"type": "LOAD_MODEL", "sha256": digest,
                                     "suffix": Path(path).suffix}, data)
        return digest

    def send_inputs(self, batches: np.ndarray) -> None:
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(batches, dtype=np.float32))
        self._request("inputs", {"type": "INPUTS"}, buffer.getvalue())

    def time(self, protocol: Protocol, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        """Time the loaded model on the loaded inputs under ``protocol``'s rules (``fields``:
        the runner's ``runtime`` and its job fields)."""
        reply = self._request("run", {"type": "RUN", "mode": "time", **(fields or {}),
                                      "threads": protocol.threads, "clock": protocol.clock,
                                      "warmup": dataclasses.asdict(protocol.warmup),
                                      "stopping": dataclasses.asdict(protocol.stopping)})
        return dict(reply["result"])

    def outputs(self, threads: int = 1, fields: dict[str, Any] | None = None) -> np.ndarray:
        """The loaded model's outputs for every loaded input batch, computed on the board."""
        self._request("run", {"type": "RUN", "mode": "outputs", "threads": threads,
                              **(fields or {})})
        reply = self._request("outputs", {"type": "OUTPUTS"})
        return np.load(io.BytesIO(reply["payload"]), allow_pickle=False)

    def stats(self) -> dict[str, Any]:
        """CPU, RSS and GPU utilisation sampled during the last run."""
        return dict(self._request("stats", {"type": "STATS"})["stats"])

    def close(self) -> None:
        try:
            send_frame(self.sock, {"type": "BYE"})
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> TargetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_token(path: str | Path, device: str) -> bytes:
    """The shared token (at least 16 bytes) from ``remote.token_file``."""
    file = Path(path).expanduser()
    try:
        token = file.read_bytes().strip()
    except OSError as err:
        raise ValueError(f"device {device!r}: remote.token_file={str(path)!r} cannot be read "
                         f"({err.strerror}); allowed: a file holding the board's token") from None
    if len(token) < 16:
        raise ValueError(f"device {device!r}: remote.token_file={str(path)!r} holds "
                         f"{len(token)} bytes; allowed: a token of at least 16 bytes")
    return token


class ResidentBoard(BoardRuntime):
    """A runtime kept resident on the board by ``board/server.py``, reached over TCP
    (``transport = "tcp://HOST:PORT"``, ``token_file``): onnxruntime, OpenVINO or TVM by the
    protocol's back-end, with the models of the runner's board runtime for it, plus
    round-trip times and the run's utilisation statistics."""

    name = "resident"

    def _board(self, protocol: Protocol) -> OnnxRuntimeBoard:
        """The runner's board runtime that takes ``protocol``'s back-end."""
        boards = (OnnxRuntimeBoard, OpenVinoBoard, TvmBoard)
        for cls in boards:
            if protocol.backend in cls.BACKENDS:
                return cls(self.spec)
        raise ValueError(f"device {protocol.device!r}: backend={protocol.backend!r} cannot run "
                         f"on a resident board; allowed: "
                         f"{[b for cls in boards for b in cls.BACKENDS]}")

    def _fields(self, protocol: Protocol) -> dict[str, Any]:
        board = self._board(protocol)
        return {"runtime": board.RUNNER_RUNTIME, **board.job_fields(protocol)}

    def check(self, protocol: Protocol) -> None:
        self._board(protocol).check(protocol)

    def model(self, arch: Any, protocol: Protocol, workdir: Path) -> tuple[Path, dict]:
        return self._board(protocol).model(arch, protocol, workdir)

    @contextmanager
    def connect(self, spec: RemoteSpec, device: str) -> Iterator[TargetClient]:
        url = urlsplit(spec.transport)
        if not url.hostname or not url.port:
            raise ValueError(f"device {device!r}: remote.transport={spec.transport!r} is "
                             "invalid; allowed: tcp://HOST:PORT")
        if "token_file" not in spec.options:
            raise ValueError(f"device {device!r}: remote.token_file is missing; allowed: a "
                             "file holding the token the board's server was started with")
        token = read_token(spec.options["token_file"], device)
        with TargetClient(device, url.hostname, url.port, token, timeout=spec.timeout,
                          connect_timeout=spec.connect_timeout) as client:
            yield client

    def measure(self, folder: Any, arch: Any, protocol: Protocol, model: Path,
                ) -> Measurement:
        from anb.collect_throughput.timing.inputs import make_inputs

        client: TargetClient = folder
        client.load_model(model)
        client.send_inputs(np.stack(make_inputs(protocol, arch)))
        result = client.time(protocol, self._fields(protocol))
        stats = client.stats()
        env = {**result["environment"], "anb_version": __version__,
               "device_name": protocol.device, "transport": client.url,
               "board_runtime": self.name}
        return Measurement(
            arch=str(arch), arch_id=arch.id, device=protocol.device, kind=protocol.kind,
            batch=protocol.batch, resolution=measured_resolution(protocol, arch),
            precision=protocol.precision, times_s=result["times_s"],
            warmup_times_s=result["warmup_times_s"], inner=result["inner"],
            stop_reason=result["stop_reason"], protocol=protocol.as_dict(), environment=env,
            extra={"warmup_stop_reason": result["warmup_stop_reason"], "warmup_compiles": 0,
                   "elapsed_seconds": result["elapsed_seconds"],
                   "board_timed_from": result["timed_from"], "board_timed_to": result["timed_to"],
                   "round_trip_s": dict(client.round_trips), **utilisation_fields(stats)})

    def outputs(self, folder: Any, protocol: Protocol, model: Path,
                images: np.ndarray) -> np.ndarray:
        client: TargetClient = folder
        batches = np.asarray(images, dtype=np.float32)[:, None]
        client.load_model(self._board(protocol).board_model(Path(model), protocol,
                                                            tuple(batches.shape[1:])))
        client.send_inputs(batches)
        return client.outputs(protocol.threads, self._fields(protocol)).reshape(len(images), -1)
