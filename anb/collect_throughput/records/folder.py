"""A results folder of ``anb measure`` and the queue's workers: ``<out>/<device>/<arch_id>.json``,
one per-architecture record per device, written atomically; a stored result is reused only
under the same protocol fingerprint, and a folder holds one search space's records."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from anb.collect_throughput.timing.protocol import (
    Protocol,
    entry_fingerprint,
    protocol_difference,
)
from anb.io import read_json
from anb.outputs import Kind
from anb.searchspace.registry import DEFAULT_SPACE, check_same_space


def _holds_results(folder: Path) -> bool:
    """A results folder written before anb's output marker: device folders of JSON records."""
    devices = [p for p in folder.iterdir() if not p.name.startswith(".")]
    return bool(devices) and all(
        d.is_dir() and any(d.glob("*.json")) and all(
            f.name.startswith(".") or f.suffix in (".json", ".jsonl") for f in d.iterdir())
        for d in devices)


#: The results folder ``anb measure`` (and the queue's workers) write (see :mod:`anb.outputs`).
RESULTS = Kind("measure", "anb measure results", _holds_results)


def result_path(out: str | Path, device: str, arch: Any) -> Path:
    return Path(out) / device / f"{arch.id}.json"


def record_space(record: dict) -> str:
    """The search space a record names (the default when it names none)."""
    return str(record.get("space", DEFAULT_SPACE))


def check_results_space(out: str | Path, device: str, space: str) -> None:
    """Refuse to add ``space``'s records to a device folder holding another space's: every
    run checks, so one stored record tells the folder's space."""
    folder = Path(out) / device
    stored = next((p for p in sorted(folder.glob("*.json")) if not p.name.startswith(".")),
                  None) if folder.is_dir() else None
    if stored is not None:
        check_same_space(space, record_space(read_json(stored)), f"results folder {folder}")


def read_result(path: Path) -> dict | None:
    """The stored record at ``path`` (None if absent)."""
    if not path.exists():
        return None
    return read_json(path)


class ProtocolMismatch(ValueError):
    """A stored result was measured under another protocol than this run's."""


def stored_matches(entry: dict | None, protocol: Protocol, where: Path) -> bool:
    """True when ``entry`` holds ``protocol``'s result; False when absent; raise
    :class:`ProtocolMismatch` when it was measured under another protocol (never reused)."""
    if entry is None:
        return False
    found = entry_fingerprint(entry)
    if found == protocol.fingerprint:
        return True
    detail = (protocol_difference(entry["protocol"], protocol.as_dict())
              if isinstance(entry.get("protocol"), dict) else "no protocol recorded")
    raise ProtocolMismatch(
        f"{where}: {protocol.key} was measured under protocol {found} and this run's is "
        f"{protocol.fingerprint} ({detail}); measure into another --out, or delete that entry")


def remove_work_files(workdir: Path, arch: Any) -> None:
    """Delete the intermediate files (exported models) of ``arch`` in ``workdir``."""
    for path in Path(workdir).glob(f"{arch.id}_*"):
        if path.is_file():
            path.unlink()

