"""Read offline wandb run folders (``offline-run-*/run-<id>.wandb``) with wandb's own protobufs.

The ``.wandb`` file is wandb's transaction log: a LevelDB-style log (32 KiB blocks, 7-byte
record headers: checksum, length, type FULL/FIRST/MIDDLE/LAST) after a 7-byte ``:W&B`` file
header; each payload is a ``wandb.proto.wandb_internal_pb2.Record``. wandb >= 0.18 ships no
Python reader for it, so the framing is decoded here and the payloads by wandb's classes.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HEADER = struct.Struct("<4sHB")
_RECORD = struct.Struct("<IHB")
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _payloads(data: bytes, path: Path) -> Iterator[bytes]:
    ident, magic, _version = _HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{str(path)!r} is not a wandb transaction log (bad header)")
    pos, parts = _HEADER.size, []
    while pos + _RECORD.size <= len(data):
        if _BLOCK - pos % _BLOCK < _RECORD.size:  # block trailer padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, length, kind = _RECORD.unpack_from(data, pos)
        pos += _RECORD.size
        if kind == 0 and length == 0:
            continue
        chunk = data[pos:pos + length]
        if len(chunk) < length:  # truncated tail of a killed run
            break
        pos += length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            parts = [chunk]
        elif kind == _MIDDLE:
            parts.append(chunk)
        elif kind == _LAST:
            yield b"".join(parts + [chunk])
            parts = []


@dataclass
class OfflineRun:
    """What an offline run folder holds: config, history, final summary, exit, artifacts."""

    path: Path
    run_id: str = ""
    project: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    artifacts: list[dict[str, Any]] = field(default_factory=list)


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _nested(item: Any) -> list[str]:
    return list(item.nested_key) if item.nested_key else [item.key]


def read_run(run_file: Path) -> OfflineRun:
    """Decode one ``run-<id>.wandb`` file."""
    from wandb.proto import wandb_internal_pb2 as pb

    run = OfflineRun(path=run_file.parent)
    for payload in _payloads(run_file.read_bytes(), run_file):
        record = pb.Record()  # type: ignore[attr-defined]  # wandb picks the module at run time
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.project = record.run.run_id, record.run.project
            for item in record.run.config.update:
                run.config[item.key] = _value(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                run.config[item.key] = _value(item.value_json)
        elif kind == "history":
            run.history.append({_nested(i)[0]: _value(i.value_json) for i in record.history.item})
        elif kind == "summary":
            for item in record.summary.update:
                run.summary[_nested(item)[0]] = _value(item.value_json)
        elif kind == "exit":
            run.exit_code = int(record.exit.exit_code)
        elif kind == "artifact":
            art = record.artifact
            run.artifacts.append({
                "name": art.name, "type": art.type, "metadata": _value(art.metadata or "{}"),
                "files": {e.path: e.local_path for e in art.manifest.contents}})
    for key, value in list(run.config.items()):  # wandb stores config values as {"value": v}
        if isinstance(value, dict) and set(value) == {"value"}:
            run.config[key] = value["value"]
    run.config.pop("_wandb", None)
    return run


def find_runs(root: Path) -> list[Path]:
    """Every offline run log under ``root`` (sorted)."""
    return sorted(root.rglob("offline-run-*/run-*.wandb"))
