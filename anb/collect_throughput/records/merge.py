"""``anb merge``: join accuracy records and device results by architecture id.

Every accuracy record (duplicates of an architecture included, as in the released dataset) keeps
its own ``platform_perf`` entries and gets those measured for its architecture. A key measured
twice with different means, or measured for a key the accuracy record already holds with a
different mean, is a conflict; ``on_conflict`` decides: ``keep-existing`` (first seen: the
accuracy record, then result folders in the order given), ``replace`` (last seen wins) or
``error``. Gaps are the
(architecture, key) pairs some architectures have and others lack; device results with no
accuracy record are kept as records without metrics (with the analytic ``model_info``, MACs and
params) and listed as ``device_only``.

A device's ``quality`` entry (the trained network's top-1 on the device,
:mod:`anb.collect_throughput.quantization.quality`) is carried the same way under the key
``val_top1_<device>`` (its ``top1`` compared for conflicts and gaps), into the record's ``quality``
section and the table's ``val_top1_<device>`` column.

Every measured entry carries its protocol fingerprint; a key whose results were taken under
more than one protocol is refused (:class:`MixedProtocols`, naming both and how they differ)
unless ``allow_mixed_protocols``; the fingerprints of each key are in the report. Anchor
sessions found in the result folders (``anchors.jsonl``) are summarised per key as
``anchor_drift`` (see :func:`anb.collect_throughput.records.anchors.anchor_drift`). A file that is
not a readable, valid record (truncated, not UTF-8) is listed in ``skipped`` and the rest merge.

A merge is of one search space (``space``, default ``anb-mnasnet``): a record of another space,
accuracy or device result, stops it with an error naming both spaces
(:class:`~anb.searchspace.registry.SpaceMismatch`).
"""
from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from anb.collect_throughput.records.anchors import ANCHOR_FILE, anchor_drift, read_anchor_rows
from anb.collect_throughput.timing.protocol import entry_fingerprint, protocol_difference
from anb.extras import require
from anb.formats import stamp
from anb.io import atomic_write_json
from anb.outputs import Kind, check_folder, has_files, replace_folder
from anb.records import (
    MERGE_REPORT,
    load_records,
    model_info,
    new_record,
    read_records,
    records_to_frame,
    validate_record,
)
from anb.searchspace.base import Space
from anb.version import __version__

ON_CONFLICT = ("keep-existing", "replace", "error")
#: The output folder ``anb merge`` writes (see :mod:`anb.outputs`).
OUTPUT = Kind("merge", "an anb merge output", has_files(MERGE_REPORT), replaceable=True)


@dataclass
class MergeReport:
    space: str
    accuracy_records: int = 0
    device_records: int = 0
    merged_records: int = 0
    duplicate_accuracy_archs: list[str] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    gaps: dict[str, int] = field(default_factory=dict)
    gap_archs: dict[str, list[str]] = field(default_factory=dict)
    device_only: list[str] = field(default_factory=list)
    keys_added: list[str] = field(default_factory=list)
    protocols: dict[str, list[str]] = field(default_factory=dict)
    anchor_drift: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)  # unreadable / invalid files

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class MergeConflict(ValueError):
    """Two sources disagree on one (architecture, key) and ``on_conflict='error'``."""


class MixedProtocols(ValueError):
    """One key's results were measured under different protocols."""


def check_protocols(results: list[dict], allow_mixed: bool = False) -> dict[str, list[str]]:
    """The protocol fingerprints of each key in ``results``; raise :class:`MixedProtocols`
    when a key has more than one unless ``allow_mixed``."""
    seen: dict[str, dict[str, tuple[dict, str]]] = {}
    for record in results:
        for key, entry in (record.get("platform_perf") or {}).items():
            fp = entry_fingerprint(entry) or "unrecorded"
            seen.setdefault(key, {}).setdefault(fp, (entry, str(record.get("source", "results"))))
    for key, found in seen.items():
        if len(found) > 1 and not allow_mixed:
            (fa, (ea, sa)), (fb, (eb, sb)) = list(found.items())[:2]
            recorded = isinstance(ea.get("protocol"), dict) and isinstance(eb.get("protocol"), dict)
            detail = (protocol_difference(ea["protocol"], eb["protocol"]) if recorded
                      else "a protocol is not recorded")
            raise MixedProtocols(
                f"{key} was measured under {len(found)} protocols: {fa} (e.g. {sa}) and {fb} "
                f"(e.g. {sb}): {detail}; merge them into separate outputs or pass "
                "--allow-mixed-protocols")
    return {key: sorted(found) for key, found in seen.items()}


QUALITY_PREFIX = "val_top1_"
"""Merge key of a device's quality entry: ``val_top1_<device>``."""


def _mean(entry: dict, key: str) -> float | None:
    field = "top1" if key.startswith(QUALITY_PREFIX) else f"{key.split('_', 1)[0]}_mean"
    value = entry.get(field)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _same(a: dict, b: dict, key: str) -> bool:
    x, y = _mean(a, key), _mean(b, key)
    if x is None or y is None:
        return x is y
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def _entries(record: dict) -> list[tuple[str, dict]]:
    """A record's mergeable entries by key: ``platform_perf``'s, and each ``quality`` entry as
    ``val_top1_<device>``."""
    return [*(record.get("platform_perf") or {}).items(),
            *((f"{QUALITY_PREFIX}{device}", entry)
              for device, entry in (record.get("quality") or {}).items())]


def _put(record: dict, key: str, entry: dict) -> None:
    """Set the entry of ``key`` (see :func:`_entries`) in ``record``."""
    if key.startswith(QUALITY_PREFIX):
        record.setdefault("quality", {})[key.removeprefix(QUALITY_PREFIX)] = entry
    else:
        record["platform_perf"][key] = entry


def _arch_id(record: dict, space: Space) -> str:
    return validate_record(record, where=str(record.get("source", "record")), space=space).id


def merge_records(accuracy: list[dict], results: Iterable[dict], on_conflict: str = "keep-existing",
                  allow_mixed_protocols: bool = False, *, space: Space,
                  ) -> tuple[list[dict], MergeReport]:
    """Merge records of ``space`` in memory; return (merged records, report). Inputs are not
    modified."""
    if on_conflict not in ON_CONFLICT:
        raise ValueError(f"on_conflict={on_conflict!r} is invalid; allowed: {list(ON_CONFLICT)}")
    results = list(results)
    report = MergeReport(space=space.name, accuracy_records=len(accuracy))
    report.protocols = check_protocols(results, allow_mixed_protocols)
    measured: dict[str, dict[str, tuple[dict, str]]] = {}
    templates: dict[str, dict] = {}

    def add(arch_id: str, key: str, entry: dict, source: str) -> None:
        held = measured.setdefault(arch_id, {})
        if key in held and not _same(held[key][0], entry, key):
            report.conflicts.append({
                "arch_id": arch_id, "key": key, "sources": [held[key][1], source],
                "values": [_mean(held[key][0], key), _mean(entry, key)],
                "kept": source if on_conflict == "replace" else held[key][1]})
            if on_conflict == "replace":
                held[key] = (entry, source)
        elif key not in held:
            held[key] = (entry, source)

    seen: dict[str, int] = {}
    ids = [_arch_id(record, space) for record in accuracy]
    for arch_id in ids:
        seen[arch_id] = seen.get(arch_id, 0) + 1
    report.duplicate_accuracy_archs = sorted(a for a, n in seen.items() if n > 1)
    released_keys = {k for r in accuracy for k, _ in _entries(r)}
    for record in results:
        report.device_records += 1
        arch_id = _arch_id(record, space)
        templates.setdefault(arch_id, record)
        for key, entry in _entries(record):
            add(arch_id, key, entry, str(record.get("source", "results")))

    merged = []
    for arch_id, record in zip(ids, accuracy, strict=True):
        out = copy.deepcopy(record)
        out.setdefault("platform_perf", {})
        held = dict(_entries(out))
        for key, (entry, source) in measured.get(arch_id, {}).items():
            if key in held and not _same(held[key], entry, key):
                report.conflicts.append({
                    "arch_id": arch_id, "key": key,
                    "sources": [str(record.get("source", "accuracy")), source],
                    "values": [_mean(held[key], key), _mean(entry, key)],
                    "kept": source if on_conflict == "replace" else str(record.get("source"))})
                if on_conflict != "replace":
                    continue
            _put(out, key, copy.deepcopy(entry))
        merged.append(out)
    if report.conflicts and on_conflict == "error":
        first = report.conflicts[0]
        raise MergeConflict(f"{len(report.conflicts)} conflict(s); first: architecture "
                            f"{first['arch_id']} key {first['key']!r} is {first['values'][0]} in "
                            f"{first['sources'][0]} and {first['values'][1]} in "
                            f"{first['sources'][1]}")
    for arch_id in sorted(set(templates) - set(seen)):
        report.device_only.append(arch_id)
        arch = space.arch(templates[arch_id]["architecture"])
        only = {**new_record(arch, space), "metrics": {},
                "model_info": model_info(arch, space), "source": f"{arch_id}.json",
                "platform_perf": {}}
        for key, (entry, _) in measured[arch_id].items():
            _put(only, key, copy.deepcopy(entry))
        merged.append(only)
        ids.append(arch_id)
    held_by = [dict(_entries(r)) for r in merged]
    all_keys = sorted({k for held in held_by for k in held})
    report.keys_added = sorted(set(all_keys) - released_keys)
    for key in all_keys:
        lacking = sorted({i for i, held in zip(ids, held_by, strict=True)
                          if _mean(held.get(key, {}), key) is None})
        if lacking:
            report.gaps[key] = len(lacking)
            report.gap_archs[key] = lacking
    report.merged_records = len(merged)
    return merged, report


def load_anchor_rows(paths: Iterable[str | Path]) -> list[dict]:
    """Anchor rows of every ``anchors.jsonl`` under the result folders."""
    rows: list[dict] = []
    for path in map(Path, paths):
        if path.is_dir():
            for file in sorted(path.rglob(ANCHOR_FILE)):
                rows += read_anchor_rows(file)
    return rows


def load_results(paths: Iterable[str | Path],
                 skipped: list[dict[str, str]] | None = None,
                 *, space: Space) -> list[dict]:
    """Per-architecture result records of ``space`` from ``anb measure`` output folders (or any
    record form). A bad record (not UTF-8, not JSON, invalid) is listed in ``skipped`` as
    ``{"file", "reason"}`` and the rest are read; without ``skipped`` it raises ValueError
    naming it. A record of another space is always an error naming both spaces."""
    records: list[dict] = []
    for path in paths:
        if skipped is None:
            records += load_records(path, space)
            continue
        found, bad = read_records(path, space)
        records += found
        skipped += [{"file": where, "reason": why} for where, why in bad]
    return records


def write_merged(records: list[dict], report: MergeReport, out: str | Path,
                 overwrite: bool = False, *, space: Space) -> Path:
    """Write ``out/records/*.json``, ``out/dataset.csv``, ``out/dataset.parquet`` and
    ``out/merge_report.json`` (whose ``format_version`` versions the folder and its tables;
    each record carries its own); a merge output there is replaced once the new one is complete
    (:func:`anb.outputs.replace_folder`: anything else is refused unless ``overwrite``)."""
    require("pyarrow", "measure", "writing the merged Parquet table")
    with replace_folder(out, OUTPUT, overwrite) as tmp:
        folder = tmp / "records"
        folder.mkdir()
        names: set[str] = set()
        for record in records:
            name = Path(str(record.get("source") or f"{_arch_id(record, space)}.json")).name
            if name in names or not name.endswith(".json"):
                name = f"{_arch_id(record, space)}_{len(names)}.json"
            names.add(name)
            body = {**{k: v for k, v in record.items() if k != "source"}, **stamp("record")}
            body["provenance"] = {**(body.get("provenance") or {}),
                                  "merge": {"anb_version": __version__}}
            (folder / name).write_text(json.dumps(body) + "\n")
        frame = records_to_frame(records, space)
        frame.to_csv(tmp / "dataset.csv", index=False)
        frame.to_parquet(tmp / "dataset.parquet", index=False)
        atomic_write_json(tmp / MERGE_REPORT, {"format": "anb-merge", **stamp("merge"),
                                               "anb_version": __version__, **report.as_dict()})
    return Path(out)


def merge(accuracy: str | Path | None, results: Iterable[str | Path], out: str | Path,
          on_conflict: str = "keep-existing", allow_mixed_protocols: bool = False,
          overwrite: bool = False, *, space: Space) -> MergeReport:
    """Load, merge and write records of ``space`` (see :func:`merge_records` and
    :func:`write_merged`)."""
    check_folder(out, OUTPUT, overwrite)
    if on_conflict not in ON_CONFLICT:  # the options before the sources are read
        raise ValueError(f"on_conflict={on_conflict!r} is invalid; allowed: {list(ON_CONFLICT)}")
    results = list(results)
    skipped: list[dict[str, str]] = []

    def read(path: str | Path) -> list[dict]:  # a source that holds nothing is a mistake
        seen = len(skipped)
        found = load_results([path], skipped, space=space)
        if not found and len(skipped) == seen:
            raise ValueError(f"{path}: holds no records (nothing to merge)")
        return found

    acc = read(accuracy) if accuracy else []
    measured = [record for path in results for record in read(path)]
    merged, report = merge_records(acc, measured, on_conflict, allow_mixed_protocols,
                                   space=space)
    report.skipped = skipped
    report.anchor_drift = anchor_drift(load_anchor_rows(results))
    write_merged(merged, report, out, overwrite, space=space)
    return report
