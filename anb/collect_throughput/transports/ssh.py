"""``ssh://user@host:port``: OpenSSH's ``ssh`` client, non-interactive (keys only).

Options (device config ``[remote]``): ``identity`` (private key file), ``known_hosts`` (file;
host keys are then checked strictly), ``connect_timeout`` (s), ``ssh_options`` (extra ``-o``
settings, e.g. ``["ProxyJump=gateway"]``). Files travel as ``cat`` over the connection, so the
board needs nothing but a POSIX shell. ``ssh`` exits 255 on its own errors; their message
tells an unreachable host from a refused key.
"""
from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from anb.collect_throughput.transports import Transport
from anb.io import atomic_write_bytes

_UNREACHABLE = ("connection refused", "timed out", "no route to host", "could not resolve",
                "network is unreachable", "connection closed", "connection reset",
                "kex_exchange_identification", "broken pipe", "not responding")
_AUTH = ("permission denied", "host key verification failed", "too many authentication",
         "no matching host key", "remote host identification has changed")


class SshTransport(Transport):
    scheme = "ssh"

    def __init__(self, url, device, options=None):
        super().__init__(url, device, options)
        parts = urlsplit(url)
        if not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"device {device!r}: transport={url!r} is invalid; allowed: "
                             "ssh://[user@]host[:port]")
        self.host, self.user = parts.hostname, parts.username
        self.port = parts.port or 22
        self.base = ["ssh", "-p", str(self.port), "-o", "BatchMode=yes",
                     "-o", f"ConnectTimeout={int(self.connect_timeout)}",
                     "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
                     "-o", "LogLevel=ERROR"]
        if self.options.get("identity"):
            self.base += ["-i", str(Path(self.options["identity"]).expanduser()),
                          "-o", "IdentitiesOnly=yes"]
        if self.options.get("known_hosts"):
            known_hosts = Path(self.options["known_hosts"]).expanduser()
            self.base += ["-o", f"UserKnownHostsFile={known_hosts}",
                          "-o", "StrictHostKeyChecking=yes"]
        for option in self.options.get("ssh_options", []):
            self.base += ["-o", str(option)]
        self.destination = f"{self.user}@{self.host}" if self.user else self.host

    def command(self, argv: Sequence[str]) -> list[str]:
        return [*self.base, self.destination, "--", shlex.join(argv)]

    def classify(self, returncode: int, stderr: str) -> str | None:
        if returncode != 255:
            return None
        low = stderr.lower()
        if any(s in low for s in _AUTH):
            return "auth"
        if any(s in low for s in _UNREACHABLE):
            return "unreachable"
        return "unreachable" if not low else None

    def push(self, local: Path, remote: str, step: str = "push", timeout: float = 300) -> None:
        data = Path(local).read_bytes()
        rc, _, err = self._local(self.command(["sh", "-c", f"cat > {shlex.quote(remote)}"]),
                                 step, timeout, stdin=data)
        if rc != 0:
            raise self.error(step, f"writing {remote!r} on the board: {err}")

    def pull(self, remote: str, local: Path, step: str = "pull", timeout: float = 300) -> None:
        rc, out, err = self._local(self.command(["cat", remote]), step, timeout)
        if rc != 0:
            raise self.error(step, f"reading {remote!r} on the board: {err}")
        atomic_write_bytes(local, out)
