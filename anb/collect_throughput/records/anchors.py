"""Anchor architectures: the same reference networks re-measured at the start of every block.

EfficientNet-B0 and the two extremes of the space are measured under the run's protocol when a
job starts on a machine and again every ``anchor_every`` architectures. Each anchor session's
values go to ``<out>/<device>/anchors.jsonl`` (rewritten atomically; one line per anchor and
key) and every result entry measured after it names it (``anchor_session``), so a change of
machine speed between days or machines shows as a change of the anchors' values and can be
divided out. :func:`anchor_drift` summarises it per key; ``anb merge`` reports it.

Those three are ``anb-mnasnet`` architectures. Another space's default anchors are its two
corners, chosen the same way for any space (:func:`default_anchors`): every variable at its
first allowed value, and every variable at its last (e.g. all ``none`` and all
``avg_pool_3x3`` cells in ``nasbench201``; the smallest and the largest network at 128 and
224 px in ``ofa-mbv3``).
"""
from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anb.io import atomic_write_text
from anb.searchspace.arch import EFFICIENTNET_B0, Arch
from anb.searchspace.base import Space
from anb.searchspace.registry import DEFAULT_SPACE
from anb.searchspace.space import ANB_SPACE

SMALLEST = Arch.from_string("-".join(["e1k3l1"] * 7), space=ANB_SPACE)
LARGEST = Arch.from_string("e6k5l3se-e6k5l3se-e6k5l3se-e6k5l3se-e6k5l3se-e6k5l4se-e6k5l3se",
                           space=ANB_SPACE)
ANCHORS: tuple[Arch, ...] = (EFFICIENTNET_B0, SMALLEST, LARGEST)
ANCHOR_FILE = "anchors.jsonl"


def default_anchors(space: Space) -> tuple[Any, ...]:
    """:data:`ANCHORS` for ``anb-mnasnet``; for another space its two corners (every variable
    at its first allowed value, then every one at its last)."""
    if space.name == DEFAULT_SPACE:
        return ANCHORS
    corners = np.stack([np.zeros(len(space.variables), dtype=np.int64), space.radices() - 1])
    return tuple(space.archs_from_choices(space.from_positions(corners)))


def parse_anchors(spec: str, space: Space) -> tuple[Any, ...]:
    """``default`` (:func:`default_anchors`), ``none``, or comma-separated architecture
    strings of ``space``."""
    from anb.collect_throughput.arch_lists import split_arch_list

    if spec == "default":
        return default_anchors(space)
    if spec == "none":
        return ()
    archs = tuple(split_arch_list(spec, space, "--anchors"))
    if not archs:
        raise ValueError(f"--anchors {spec!r} is invalid; allowed: 'default', 'none' or "
                         "comma-separated architecture strings")
    return archs


def new_session_id() -> str:
    return (f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{socket.gethostname()}-"
            f"{uuid.uuid4().hex[:6]}")


def anchor_path(out: str | Path, device: str) -> Path:
    return Path(out) / device / ANCHOR_FILE


def read_anchor_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_anchor_rows(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Add ``rows`` to the anchor file (temp file then rename: never half-written)."""
    lines = [json.dumps(r) for r in read_anchor_rows(path) + list(rows)]
    atomic_write_text(path, "\n".join(lines) + "\n")


def anchor_rows(session: str, position: int, measurements: Sequence[Any]) -> list[dict]:
    """One row per anchor measurement (``position``: the shard index the session preceded)."""
    return [{"session": session, "position": position, "host": socket.gethostname(),
             "arch": m.arch, "arch_id": m.arch_id, "key": m.key, "value": m.value,
             "cv": m.cv, "measured_at": m.measured_at,
             "protocol_fingerprint": m.to_perf_entry()["protocol_fingerprint"]}
            for m in measurements]


def anchor_drift(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per key: each session's speed relative to the first session (median over anchors of
    value / first value; throughput > 1 and latency < 1 mean faster) and the largest change.

    ``correction`` is the factor to divide that session's values by to bring them to the first
    session's machine speed.
    """
    out: dict[str, dict[str, Any]] = {}
    for key in sorted({r["key"] for r in rows}):
        mine = [r for r in rows if r["key"] == key]
        sessions = sorted({r["session"] for r in mine},
                          key=lambda s: min(r["measured_at"] for r in mine if r["session"] == s))
        first = {r["arch_id"]: r["value"] for r in mine if r["session"] == sessions[0]}
        summary = []
        for s in sessions:
            ratios = [r["value"] / first[r["arch_id"]] for r in mine
                      if r["session"] == s and first.get(r["arch_id"])]
            host = next(r["host"] for r in mine if r["session"] == s)
            ratio = float(np.median(ratios)) if ratios else float("nan")
            summary.append({"session": s, "host": host, "anchors": len(ratios),
                            "ratio_to_first": ratio, "correction": ratio})
        finite = [abs(x["ratio_to_first"] - 1) for x in summary if np.isfinite(x["ratio_to_first"])]
        out[key] = {"sessions": summary, "max_drift": max(finite) if finite else 0.0,
                    "fingerprints": sorted({r["protocol_fingerprint"] for r in mine})}
    return out
