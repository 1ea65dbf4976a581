"""The host side of a board that keeps its runtime resident (``board/server.py`` runs there).

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
from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.board.server import ProtocolError, mac, read_frame, send_frame
from anb.collect_throughput.protocol import Protocol
from anb.collect_throughput.transports import TransportError

#: Largest reply the host accepts (outputs of a batch of images, well under this).
MAX_REPLY = 1 << 30


class TargetClient:
    """One authenticated connection to a target server (``tcp://host:port``)."""

    def __init__(self, device: str, host: str, port: int, token: bytes,
                 timeout: float = 900.0, connect_timeout: float = 10.0) -> None:
        self.device, self.url = device, f"tcp://{host}:{port}"
        self.timeout = timeout
        self.round_trips: dict[str, float] = {}
        try:
            self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as err:
            raise self.error("connect", f"cannot reach {self.url}: {err}", "unreachable") from None
        self.sock.settimeout(connect_timeout)
        hello = self._read("connect")
        if hello.get("type") != "HELLO" or not isinstance(hello.get("nonce"), str):
            self.close()
            raise self.error("connect", f"{self.url} is not an anb target server", "rejected")
        self._request("connect", {"type": "AUTH", "mac": mac(token, hello["nonce"])},
                      auth=True)
        self.sock.settimeout(timeout)

    def error(self, step: str, message: str, kind: str) -> TransportError:
        return TransportError(self.device, step, message, kind)

    def _read(self, step: str) -> dict[str, Any]:
        header, payload = self._frame(step)
        header["payload"] = payload
        return header

    def _frame(self, step: str) -> tuple[dict[str, Any], bytes]:
        try:
            return read_frame(self.sock, MAX_REPLY)
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
        self._request("load_model", {"type": "LOAD_MODEL", "sha256": digest}, data)
        return digest

    def send_inputs(self, batches: np.ndarray) -> None:
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(batches, dtype=np.float32))
        self._request("inputs", {"type": "INPUTS"}, buffer.getvalue())

    def time(self, protocol: Protocol) -> dict[str, Any]:
        """Time the loaded model on the loaded inputs under ``protocol``'s rules."""
        reply = self._request("run", {"type": "RUN", "mode": "time",
                                      "threads": protocol.threads, "clock": protocol.clock,
                                      "warmup": dataclasses.asdict(protocol.warmup),
                                      "stopping": dataclasses.asdict(protocol.stopping)})
        return dict(reply["result"])

    def outputs(self, threads: int = 1) -> np.ndarray:
        """The loaded model's outputs for every loaded input batch, computed on the board."""
        self._request("run", {"type": "RUN", "mode": "outputs", "threads": threads})
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
