"""How the host reaches a board: run a command there, push a file to it, pull one back.

A transport is named by a URL: ``local://`` (this machine), ``ssh://user@host:port`` (OpenSSH),
``adb://SERIAL`` (Android Debug Bridge). One file per transport (``local.py``, ``ssh.py``,
``adb.py``); another scheme is a :class:`Transport` subclass named in
:data:`~anb.collect_throughput.registries.TRANSPORTS` (``register(scheme, target)`` or an
``anb.transports`` entry point). Every failure is a :class:`TransportError`
naming the device and the step (``connect``, ``push``, ``run``, ``pull``, ``cleanup``...) and its
kind: ``unreachable`` and ``timeout`` are transient (worth a retry), ``auth``, ``missing`` and
``command`` are not.
"""
from __future__ import annotations

import os
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from anb.collect_throughput.registries import TRANSPORTS
from anb.jobs.errors import JobError

KINDS = ("unreachable", "auth", "timeout", "missing", "rejected", "command")
TRANSIENT = ("unreachable", "timeout")


class TransportError(JobError):
    """A step on a board failed; ``kind`` is one of :data:`KINDS` (:data:`TRANSIENT` ones are
    worth a retry)."""

    def __init__(self, device: str, step: str, message: str, kind: str = "command"):
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} is invalid; allowed: {list(KINDS)}")
        self.device, self.step, self.kind, self.message = device, step, kind, message
        super().__init__(f"device {device!r}, step {step!r} ({kind}): {message}")

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


def execute(argv: Sequence[str], timeout: float, stdin: bytes | None = None,
            ) -> tuple[int, bytes, bytes]:
    """Run ``argv`` locally in its own process group; on timeout kill the group and raise
    :class:`subprocess.TimeoutExpired`."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE if stdin is not None else
                            subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, out, err


class Transport(ABC):
    """Reach one board. ``device`` names it in errors; ``options`` come from the device
    config's ``[remote]`` table (e.g. ``identity``, ``known_hosts``, ``connect_timeout``)."""

    scheme: str = ""

    def __init__(self, url: str, device: str, options: Mapping[str, Any] | None = None):
        self.url, self.device, self.options = url, device, dict(options or {})
        self.connect_timeout = float(self.options.get("connect_timeout", 10))

    def error(self, step: str, message: str, kind: str = "command") -> TransportError:
        return TransportError(self.device, step, message, kind)

    @abstractmethod
    def command(self, argv: Sequence[str]) -> list[str]:
        """The local command line that runs ``argv`` on the board."""

    def classify(self, returncode: int, stderr: str) -> str | None:
        """The error kind of a failed local command (None: the remote command itself failed)."""
        return None

    def _local(self, argv: Sequence[str], step: str, timeout: float,
               stdin: bytes | None = None) -> tuple[int, bytes, str]:
        try:
            rc, out, err = execute(argv, timeout, stdin)
        except subprocess.TimeoutExpired:
            raise self.error(step, f"no answer within {timeout:g} s (board hung or too slow); "
                             f"command: {' '.join(argv[-1:])}", "timeout") from None
        except FileNotFoundError:
            raise self.error(step, f"{argv[0]!r} is not installed on this host", "missing"
                             ) from None
        text = err.decode(errors="replace").strip()
        if rc != 0:
            kind = self.classify(rc, text)
            if kind is not None:
                raise self.error(step, text or f"exit status {rc}", kind)
        return rc, out, text

    def run(self, argv: Sequence[str], step: str, timeout: float, check: bool = True,
            ) -> CommandResult:
        """Run ``argv`` on the board; with ``check`` a non-zero exit raises."""
        rc, out, err = self._local(self.command(argv), step, timeout)
        result = CommandResult(rc, out.decode(errors="replace"), err)
        if check and rc != 0:
            raise self.error(step, f"{' '.join(argv)} exited {rc}: {err or result.stdout}")
        return result

    @abstractmethod
    def push(self, local: Path, remote: str, step: str = "push", timeout: float = 300) -> None:
        """Copy the local file ``local`` to ``remote`` on the board."""

    @abstractmethod
    def pull(self, remote: str, local: Path, step: str = "pull", timeout: float = 300) -> None:
        """Copy ``remote`` on the board to the local file ``local``."""


def register(scheme: str, target: str) -> None:
    """Add a transport: ``register("serial", "mypkg.serial:SerialTransport")``."""
    TRANSPORTS.register(scheme, target)


def check_url(url: str, device: str) -> str:
    """``url``'s scheme; ValueError naming it unless a registered transport takes it."""
    scheme = urlsplit(url).scheme
    if scheme not in TRANSPORTS or "://" not in url:
        raise ValueError(f"device {device!r}: transport={url!r} is invalid; allowed: "
                         + ", ".join(f"{s}://..." for s in TRANSPORTS.names()))
    return scheme


def open_transport(url: str, device: str, options: Mapping[str, Any] | None = None,
                   ) -> Transport:
    """The transport for ``url`` (see module docstring)."""
    scheme = check_url(url, device)
    cls = TRANSPORTS.load(scheme, "transport")
    if not (isinstance(cls, type) and issubclass(cls, Transport)):
        raise ValueError(f"{TRANSPORTS.where(scheme)} names {cls!r}, not a Transport subclass")
    return cls(url, device, options)


__all__ = ["CommandResult", "Transport", "TransportError", "execute", "open_transport",
           "register"]
