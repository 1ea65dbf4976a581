"""``adb://SERIAL``: Android Debug Bridge (phones, Qualcomm dev kits on USB).

Command lines: ``adb -s SERIAL shell '<cmd>'``, ``adb -s SERIAL push LOCAL REMOTE``,
``adb -s SERIAL pull REMOTE LOCAL``. Option ``adb`` names the binary (default ``adb`` on
PATH). ``adb shell`` returns the remote exit status (shell protocol v2); adb's own errors
("device 'X' not found", "device offline", "device unauthorized") are told apart.
"""
from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from anb.collect_throughput.transports import Transport

_UNREACHABLE = ("not found", "no devices", "offline", "device still connecting",
                "cannot connect", "connection refused", "closed")
_AUTH = ("unauthorized", "insufficient permissions")


class AdbTransport(Transport):
    scheme = "adb"

    def __init__(self, url, device, options=None):
        super().__init__(url, device, options)
        serial = urlsplit(url).netloc
        if not serial:
            raise ValueError(f"device {device!r}: transport={url!r} is invalid; allowed: "
                             "adb://SERIAL (see 'adb devices')")
        self.serial = serial
        self.base = [str(self.options.get("adb", "adb")), "-s", serial]

    def command(self, argv: Sequence[str]) -> list[str]:
        return [*self.base, "shell", shlex.join(argv)]

    def classify(self, returncode: int, stderr: str) -> str | None:
        low = stderr.lower()
        if not low.startswith(("error:", "adb: error:", "adb:")):
            return None  # the remote command failed, not adb
        if any(s in low for s in _AUTH):
            return "auth"
        if any(s in low for s in _UNREACHABLE):
            return "unreachable"
        return None

    def push(self, local: Path, remote: str, step: str = "push", timeout: float = 300) -> None:
        rc, _, err = self._local([*self.base, "push", str(local), remote], step, timeout)
        if rc != 0:
            raise self.error(step, f"adb push {str(local)!r} {remote!r}: {err}")

    def pull(self, remote: str, local: Path, step: str = "pull", timeout: float = 300) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        rc, _, err = self._local([*self.base, "pull", remote, str(local)], step, timeout)
        if rc != 0:
            raise self.error(step, f"adb pull {remote!r} {str(local)!r}: {err}")
