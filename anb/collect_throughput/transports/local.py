"""``local://``: the board is this machine (commands run directly, files are copied)."""
from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from anb.collect_throughput.transports import Transport


class LocalTransport(Transport):
    scheme = "local"

    def command(self, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def _copy(self, source: Path, target: Path, step: str) -> None:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        except OSError as err:
            raise self.error(step, f"copying {str(source)!r} to {str(target)!r}: {err}") from None

    def push(self, local: Path, remote: str, step: str = "push", timeout: float = 300) -> None:
        self._copy(Path(local), Path(remote), step)

    def pull(self, remote: str, local: Path, step: str = "pull", timeout: float = 300) -> None:
        self._copy(Path(remote), Path(local), step)
