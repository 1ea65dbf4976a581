"""Failed trainings of an architecture, kept in ``<folder>/failed/<arch_id>/``.

Each failure is one JSON file ``<job_id>.rank<r>.json`` (the error, its traceback tail, when),
written by the rank that raised it, so a failure on any rank is counted even when the job ends
with it. The attempts of an architecture are the distinct jobs that failed on it; after
``model.max_attempts`` it is given up (and listed by ``anb export``). A success removes them.
"""
from __future__ import annotations

import json
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

from anb.io import atomic_write_json
from anb.searchspace.arch import Arch


def folder_of(folder: Path, arch_id: str) -> Path:
    return Path(folder) / "failed" / arch_id


def record(folder: Path, arch: Arch, job_id: str, rank: int, err: BaseException,
           extra: dict[str, Any]) -> Path:
    """Write one failure of ``arch``."""
    tail = "".join(traceback.format_exception(type(err), err, err.__traceback__)[-3:])
    return atomic_write_json(folder_of(folder, arch.id) / f"{job_id}.rank{rank}.json", {
        "architecture": arch.to_anb_dict(), "arch": str(arch), "arch_id": arch.id,
        "status": "failed", "job_id": job_id, "rank": rank,
        "error": f"{type(err).__name__}: {err}"[:2000], "traceback": tail[-4000:],
        "failed_at": time.time(), **extra})


def entries(folder: Path, arch_id: str) -> list[dict[str, Any]]:
    """The readable failure files of ``arch_id`` (oldest first)."""
    out = []
    for path in sorted(folder_of(folder, arch_id).glob("*.json")):
        try:
            out.append({**json.loads(path.read_text()), "path": str(path)})
        except (OSError, ValueError):
            out.append({"arch_id": arch_id, "error": "unreadable failure file",
                        "job_id": path.name, "path": str(path), "failed_at": 0.0})
    return sorted(out, key=lambda e: e.get("failed_at", 0.0))


def attempts(folder: Path, arch_id: str) -> int:
    """Failed attempts so far: the distinct jobs that failed on ``arch_id``."""
    return len({e.get("job_id") for e in entries(folder, arch_id)})


def all_failed(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """``arch_id -> failures`` for every architecture with a failure."""
    root = Path(folder) / "failed"
    if not root.is_dir():
        return {}
    return {d.name: entries(folder, d.name) for d in sorted(root.iterdir()) if d.is_dir()}


def clear(folder: Path, arch_id: str) -> None:
    shutil.rmtree(folder_of(folder, arch_id), ignore_errors=True)
