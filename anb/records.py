"""The per-architecture record: the data contract every stage reads and writes.

A record has the released dataset's JSON shape plus optional provenance::

    {"architecture": {"block0_e": 4, ..., "block6_se": false},
     "metrics": {"val_top1": 62.05, "val_top5": 84.35, "train_time": 1560.6},
     "model_info": {"macs": 369.019616, "params": 4.042824},
     "platform_perf": {"throughput_a100": {"throughput_mean": 11102.8, "throughput_std": 1.7},
                       "latency_zcu102": {"latency_mean": 4.96, "latency_std": null}, ...},
     "quality": {"cpu-int8": {"top1": 92.9, "top5": 100.0, "top1_agreement": 0.993, ...}},
     "provenance": {...}, "format_version": 1}

``format_version`` (:mod:`anb.formats`) is the version of this shape; records written before
it (the released dataset's) hold none and read as version 1.

``quality`` (optional) is the trained network's quality on a device, by device name
(:mod:`anb.collect_throughput.quantization.quality`): ``top1`` / ``top5`` (%) against the labels of
an image folder, ``host_top1`` / ``host_top5`` of the fp32 model on the host, ``top1_agreement``
(0-1) and ``logits_cosine_mean`` / ``logits_cosine_min`` against the host's outputs, ``images``,
``dataset``, ``model``, ``backend``, ``precision`` (and ``quantization`` for int8 models).

A learning curve, when the trainer kept one (``trainval.curve = true``), is in ``metrics`` as
``val_top1_epoch_<i>``: the validation top-1 after epoch ``i`` (1-based), one key per epoch. The
released records have none.

A record of a space other than the default ``anb-mnasnet`` names it in a top-level ``"space"``
field, and its ``architecture`` holds that space's record keys (``Space.record_keys``).

The flat table form (CSV / Parquet / DataFrame) has one row per record with columns
``space``, ``arch_id``, ``arch``, the space's record keys (``block{i}_{e,k,l,se}``),
``val_top1``, ``val_top5``, ``train_time``, ``val_top1_epoch_<i>`` (a curve, when held),
``macs``, ``params``, ``<kind>_<device>`` (mean)
and ``<kind>_<device>_std`` for every ``platform_perf`` entry, ``val_top1_<device>``,
``val_top5_<device>`` and ``top1_agreement_<device>`` for every ``quality`` entry, ``source``
(the record's file name) and ``provenance`` (JSON text).

Every reader of an architecture table takes the architecture of a row from either an ``arch``
string column (what ``anb query`` and a search's ``pareto.csv`` write) or the record-key
columns, through :func:`table_archs`. Mixing spaces is refused with a message naming both.
"""
from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anb.extras import require
from anb.formats import VERSION_FIELD, NewerFormat, check, stamp
from anb.io import atomic_write_json, parse_json, read_csv, read_json, read_text, sha256_file
from anb.searchspace.base import Space
from anb.searchspace.registry import DEFAULT_SPACE, SpaceMismatch, check_same_space

METRIC_KEYS = ("val_top1", "val_top5", "train_time")
MODEL_INFO_KEYS = ("macs", "params")
PERF_KINDS = ("throughput", "latency")
REFERENCE_DEVICES = {
    "throughput": ("a100", "3090", "tpuv2", "tpuv3", "zcu102", "vck190"),
    "latency": ("zcu102", "vck190"),
}
_PERF_KEY = re.compile(r"(throughput|latency)_([A-Za-z0-9.\-]+)")
#: A learning-curve metric: validation top-1 after epoch ``i`` (1-based).
CURVE_PREFIX = "val_top1_epoch_"
_CURVE_KEY = re.compile(r"val_top1_epoch_([1-9][0-9]*)")
#: JSON files anb writes beside records (reports, manifests): a folder's are not records.
MERGE_REPORT = "merge_report.json"
NOT_RECORDS = frozenset({MERGE_REPORT, "manifest.json", "summary.json"})
#: Flat-table column prefix -> field of a ``quality`` entry (column ``<prefix>_<device>``).
QUALITY_COLUMNS = {"val_top1": "top1", "val_top5": "top5", "top1_agreement": "top1_agreement"}
_QUALITY_COLUMN = re.compile(r"(val_top1|val_top5|top1_agreement)_([A-Za-z0-9.\-]+)")
#: File suffixes read as a flat table (:func:`read_table`).
TABLE_SUFFIXES = (".csv", ".parquet", ".pq")


def is_perf_metric(name: str) -> bool:
    """Whether ``name`` is a device-speed metric (``throughput_<device>``, ``latency_<device>``)."""
    return name.startswith(tuple(f"{kind}_" for kind in PERF_KINDS))


def perf_key(kind: str, device: str) -> str:
    """``platform_perf`` key (and flat mean column) for a metric kind on a device."""
    if kind not in PERF_KINDS:
        raise ValueError(f"unknown metric kind {kind!r}; allowed kinds are {list(PERF_KINDS)}")
    if not re.fullmatch(r"[A-Za-z0-9.\-]+", device):
        raise ValueError(f"device name {device!r} may only hold letters, digits, '.' and '-'")
    return f"{kind}_{device}"


def validate_record(record: Mapping[str, Any], where: str = "record",
                    *, space: Space) -> Any:
    """Check a record's shape; return its architecture. Errors name the field and value."""
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    check("record", record.get(VERSION_FIELD), where)
    check_same_space(space.name, str(record.get("space", DEFAULT_SPACE)), where)
    if "architecture" not in record:
        raise ValueError(f"{where}: missing field 'architecture'")
    if not isinstance(record["architecture"], Mapping):
        raise ValueError(f"{where}: field 'architecture' must be an object of "
                         f"{space.record_keys()[0]} ... keys, got "
                         f"{type(record['architecture']).__name__}")
    try:
        arch = space.arch(dict(record["architecture"]))
    except ValueError as err:
        raise ValueError(f"{where}: field 'architecture': {err}") from None
    for section in ("metrics", "model_info", "platform_perf", "quality", "provenance"):
        if section in record and record[section] is not None and not isinstance(
            record[section], Mapping
        ):
            raise ValueError(f"{where}: field '{section}' must be an object, "
                             f"got {type(record[section]).__name__}")
    for key, entry in (record.get("platform_perf") or {}).items():
        match = _PERF_KEY.fullmatch(key)
        if not match:
            raise ValueError(f"{where}: platform_perf key {key!r} is not "
                             "'throughput_<device>' or 'latency_<device>'")
        if not isinstance(entry, Mapping) or f"{match.group(1)}_mean" not in entry:
            raise ValueError(f"{where}: platform_perf.{key} must hold '{match.group(1)}_mean'")
    for device, entry in (record.get("quality") or {}).items():
        if not re.fullmatch(r"[A-Za-z0-9.\-]+", str(device)):
            raise ValueError(f"{where}: quality key {device!r} is not a device name (letters, "
                             "digits, '.' and '-')")
        if not isinstance(entry, Mapping) or not isinstance(entry.get("top1"), (int, float)):
            raise ValueError(f"{where}: quality.{device} must be an object holding a number "
                             "'top1'")
    return arch


def model_info(arch: Any, space: Space) -> dict[str, float]:
    """The analytic ``model_info`` of an architecture as the released records hold it: MACs
    and params in millions on the space's task (224 px and 1000 classes for MnasNet)."""
    table = space.cost_table(space.to_choices([arch]))
    return {"macs": round(int(table.total("macs")[0]) / 1e6, 6),
            "params": round(int(table.total("params")[0]) / 1e6, 6)}


def new_record(arch: Any, space: Space) -> dict[str, Any]:
    """A record skeleton for ``arch``: its architecture mapping, its space when it is not
    the default (released-format records stay as they were) and its format version."""
    record: dict[str, Any] = {} if space.name == DEFAULT_SPACE else {"space": space.name}
    record["architecture"] = space.to_record(arch)
    return {**record, **stamp("record")}


def detect_space(data: str | Path | pd.DataFrame) -> str | None:
    """The space a dataset names (a table's ``space`` column, or the first record's ``space``
    field; released-format records name none, meaning the default), without reading it all;
    None when the input names none or cannot be read (the reader then reports why)."""
    if isinstance(data, pd.DataFrame):
        names: Any = (data["space"].dropna().astype(str).unique() if "space" in data.columns
                      else [])
        return str(names[0]) if len(names) else None
    path = Path(data)
    try:
        if path.is_dir():
            first_file = next(iter(_record_files(path)), None)
            return _space_of(read_json(first_file)) if first_file else None
        if path.suffix in TABLE_SUFFIXES:
            return detect_space(read_table(path))
        if path.suffix == ".jsonl":
            first = next((line for line in read_text(path).splitlines() if line.strip()), "")
            return _space_of(parse_json(first, str(path)) if first else None)
        if path.suffix == ".json":
            data = read_json(path)
            return _space_of(data[0] if isinstance(data, list) and data else data)
    except (ValueError, OSError):
        return None
    return None


def _record_files(folder: Path) -> list[Path]:
    """The record JSON files under ``folder`` (recursive, sorted; hidden files and anb's
    reports left out)."""
    return [f for f in sorted(folder.rglob("*.json"))
            if not f.name.startswith(".") and f.name not in NOT_RECORDS]


def _space_of(record: Any) -> str | None:
    if isinstance(record, Mapping):
        return str(record.get("space", DEFAULT_SPACE))
    return None


def _sort_key(name: str) -> tuple:
    digits = re.findall(r"\d+", name)
    return (int(digits[-1]) if digits else -1, name)


def read_records(path: str | Path, space: Space
                 ) -> tuple[list[dict], list[tuple[str, str]]]:
    """Read records like :func:`load_records`, keeping going past bad ones: returns the valid
    records and ``(where, why)`` for each file or record that is unreadable (not UTF-8, not
    JSON) or invalid. An input that cannot be read at all (missing, unknown form, a damaged
    archive or table) raises ValueError / FileNotFoundError naming it, a record of another
    search space :class:`~anb.searchspace.registry.SpaceMismatch` (spaces are never mixed),
    and a record or merge output of a newer format :class:`~anb.formats.NewerFormat`."""
    checked, bad = _read_checked(path, space)
    return [record for record, _ in checked], bad


def _read_checked(path: str | Path, space: Space
                  ) -> tuple[list[tuple[dict, Any]], list[tuple[str, str]]]:
    """:func:`read_records` with each valid record's architecture (validated once)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset path {str(path)!r} does not exist")
    check_merge_report(path if path.is_dir() else path.parent)
    named: list[tuple[str, str, Any]] = []  # (record name, where for errors, parsed JSON)
    bad: list[tuple[str, str]] = []

    def parse(name: str, where: str, text: str | bytes) -> None:
        try:
            named.append((name, where, parse_json(text, where)))
        except ValueError as err:
            bad.append((where, str(err).removeprefix(f"{where}: ")))

    if path.is_dir():
        for file in _record_files(path):
            parse(file.name, str(file), file.read_bytes())
    elif path.name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(path) as archive:
                for member in archive.getmembers():
                    name = Path(member.name).name
                    if member.isfile() and name.endswith(".json") and not name.startswith("."):
                        handle = archive.extractfile(member)
                        assert handle is not None  # a regular file member always has one
                        parse(name, f"{path}:{member.name}", handle.read())
        except (tarfile.TarError, EOFError, OSError) as err:
            if isinstance(err, FileNotFoundError):
                raise
            raise ValueError(f"{path}: not a readable tar archive ({err})") from None
    elif path.suffix == ".jsonl":
        for line_no, line in enumerate(read_text(path).splitlines(), 1):
            if line.strip():
                parse(f"{path.name}:{line_no}", f"{path}:{line_no}", line)
    elif path.suffix == ".json":
        data = read_json(path)
        items = data if isinstance(data, list) else [data]
        named += [(path.name if len(items) == 1 else f"{path.name}:{i}",
                   str(path) if len(items) == 1 else f"{path}:{i}", r)
                  for i, r in enumerate(items)]
    elif path.suffix in TABLE_SUFFIXES:
        frame = read_table(path)
        rows = frame_to_records(frame, space, repr(str(path)))
        named += [(f"{path.name}:row_{i}", f"{path}:row_{i}", r) for i, r in enumerate(rows)]
    else:
        raise ValueError(f"cannot read records from {str(path)!r}; give a folder of JSON files, "
                         "a .tar.gz of them, a .json, .jsonl, .csv or .parquet file")
    named.sort(key=lambda item: _sort_key(item[0]))
    checked = []
    for name, where, record in named:
        try:
            arch = validate_record(record, where=where, space=space)
        except (SpaceMismatch, NewerFormat):
            raise
        except ValueError as err:
            bad.append((where, str(err).removeprefix(f"{where}: ")))
            continue
        checked.append(({**record, "source": record.get("source", name)}, arch))
    return checked, bad


def load_records(path: str | Path, space: Space) -> list[dict]:
    """Read records from a ``.tar.gz`` of JSON files, a folder (searched recursively),
    a ``.json`` file (one record or a list), a ``.jsonl`` file or a flat table (``.csv`` /
    ``.parquet``, as ``anb export`` and ``anb merge`` write). Each record gets ``source`` = its
    file name (a table row keeps its own ``source``). Records are validated; order is by the
    number in the name. A bad record raises ValueError naming its file (and how many more are
    bad); :func:`read_records` skips them instead.
    """
    return [record for record, _ in _load_checked(path, space)]


def _load_checked(path: str | Path, space: Space) -> list[tuple[dict, Any]]:
    """:func:`load_records` with each record's architecture (validated once)."""
    checked, bad = _read_checked(path, space)
    if bad:
        where, why = bad[0]
        more = f" (and {len(bad) - 1} more bad record(s))" if len(bad) > 1 else ""
        raise ValueError(f"{where}: {why}{more}")
    return checked


def check_merge_report(folder: Path) -> None:
    """Check the format version of the merge output ``folder`` (its ``merge_report.json``,
    which also versions the tables beside it); a folder without one is not a merge output."""
    report = folder / MERGE_REPORT
    if report.is_file():
        data = read_json(report)
        check("merge", data.get(VERSION_FIELD) if isinstance(data, Mapping) else None,
              str(report))


def read_table(path: str | Path) -> pd.DataFrame:
    """A ``.csv`` or ``.parquet`` table (the ``arch`` column kept as text); a file that cannot
    be read is an error naming it."""
    path = Path(path)
    if path.suffix == ".csv":
        return read_csv(path, dtype={"arch": str})
    require("pyarrow", "fit", f"reading the Parquet table {path}")
    try:
        return pd.read_parquet(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: does not exist") from None
    except (ValueError, OSError) as err:  # pyarrow's parse errors are ValueErrors / OSErrors
        raise ValueError(f"{path}: not a readable parquet table ({err})") from None


def records_to_frame(records: Iterable[Mapping[str, Any]],
                     space: Space) -> pd.DataFrame:
    """Flatten records into the table form (see module docstring)."""
    return _to_frame([(record, validate_record(
        record, where=str(record.get("source", f"record {i}")), space=space))
        for i, record in enumerate(records)], space)


def _to_frame(checked: Iterable[tuple[Mapping[str, Any], Any]], space: Space) -> pd.DataFrame:
    """:func:`records_to_frame` of records validated already, each with its architecture."""
    rows = []
    for record, arch in checked:
        row: dict[str, Any] = {"space": space.name, "arch_id": arch.id, "arch": str(arch)}
        row.update(space.to_record(arch))
        metrics = record.get("metrics") or {}
        for key in METRIC_KEYS:
            row[key] = metrics.get(key)
        for key, value in metrics.items():
            if key not in METRIC_KEYS and (value is None or isinstance(value, (int, float))):
                row.setdefault(key, value)
        info = record.get("model_info") or {}
        for key in MODEL_INFO_KEYS:
            row[key] = info.get(key)
        for key, entry in (record.get("platform_perf") or {}).items():
            kind = key.split("_", 1)[0]
            row[key] = entry.get(f"{kind}_mean")
            row[f"{key}_std"] = entry.get(f"{kind}_std")
        for device, entry in (record.get("quality") or {}).items():
            for prefix, name in QUALITY_COLUMNS.items():
                row[f"{prefix}_{device}"] = entry.get(name)
        row["source"] = record.get("source")
        provenance = record.get("provenance")
        row["provenance"] = json.dumps(provenance, sort_keys=True) if provenance else None
        rows.append(row)
    frame = pd.DataFrame(rows)
    perf_columns = sorted(c for c in frame.columns if _PERF_KEY.fullmatch(c.removesuffix("_std")))
    for column in perf_columns:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    return frame


def curve_key(epoch: int) -> str:
    """The metric key of the validation top-1 after ``epoch`` (1-based)."""
    return f"{CURVE_PREFIX}{epoch}"


def curve_epochs(names: Iterable[str]) -> list[int]:
    """The epochs of the ``val_top1_epoch_<i>`` names among ``names``, ascending."""
    return sorted(int(m.group(1)) for m in map(_CURVE_KEY.fullmatch, names) if m)


def curve_columns(frame: pd.DataFrame) -> list[str]:
    """The learning-curve columns of a flat table, by epoch."""
    return [curve_key(e) for e in curve_epochs(frame.columns)]


def perf_columns(frame: pd.DataFrame) -> list[str]:
    """The mean columns ``<kind>_<device>`` present in a flat table."""
    return [c for c in frame.columns if _PERF_KEY.fullmatch(c) and not c.endswith("_std")]


def quality_columns(frame: pd.DataFrame) -> list[str]:
    """The quality columns (``val_top1_<device>``, ``val_top5_<device>``,
    ``top1_agreement_<device>``) present in a flat table (a device name holds no ``_``, so a
    learning-curve column ``val_top1_epoch_<i>`` is not one)."""
    return [c for c in frame.columns if _QUALITY_COLUMN.fullmatch(c)]


def block_columns(space: Space) -> list[str]:
    """The architecture columns of the flat table (the space's record keys; for MnasNet
    ``block{i}_{e,k,l,se}``)."""
    return space.record_keys()


def table_archs(frame: pd.DataFrame, where: str = "table",
                *, space: Space) -> list[Any]:
    """The architecture of each row of a table, from its ``arch`` string column or else its
    record-key columns. Errors name ``where``, the row (1-based) and the value; a ``space``
    column naming another space is refused."""
    if "space" in frame.columns:
        for found in frame["space"].dropna().astype(str).unique():
            check_same_space(space.name, found, where)
    blocks = block_columns(space)
    example = space.format(space.choices_from_index([0])[0])
    if "arch" in frame.columns:
        archs = []
        for i, text in enumerate(frame["arch"]):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{where} row {i + 1}: column 'arch' is empty; give an "
                                 f"architecture string like {example!r}")
            try:
                archs.append(space.arch(text.strip()))
            except ValueError as err:
                raise ValueError(f"{where} row {i + 1}: architecture {text!r} is outside the "
                                 f"search space {space.name!r}: {err}") from None
        return archs
    missing = [k for k in blocks if k not in frame.columns]
    if missing:
        raise ValueError(f"{where} has no architecture: give an 'arch' column of architecture "
                         f"strings or the columns {blocks[0]} ... {blocks[-1]} (missing "
                         f"{missing[:4]}{'...' if len(missing) > 4 else ''}; columns: "
                         f"{list(frame.columns)[:8]})")
    archs = []
    for i, row in enumerate(frame[blocks].to_dict("records")):
        try:
            archs.append(space.arch(row))
        except ValueError as err:
            raise ValueError(f"{where} row {i + 1}: {err}") from None
    return archs


def frame_to_records(frame: pd.DataFrame, space: Space,
                     where: str = "table") -> list[dict]:
    """Inverse of :func:`records_to_frame` (missing values become null); the architecture
    comes from either table convention (:func:`table_archs`)."""
    records = []
    for arch, row in zip(table_archs(frame, where, space=space), frame.to_dict("records"),
                         strict=True):
        record = new_record(arch, space)
        record["metrics"] = {k: _clean(row.get(k)) for k in [*METRIC_KEYS, *curve_columns(frame)]
                             if k in row}
        record["model_info"] = {k: _clean(row.get(k)) for k in MODEL_INFO_KEYS if k in row}
        perf = {}
        for column in perf_columns(frame):
            kind = column.split("_", 1)[0]
            perf[column] = {f"{kind}_mean": _clean(row.get(column)),
                            f"{kind}_std": _clean(row.get(f"{column}_std"))}
        record["platform_perf"] = perf
        quality: dict[str, dict[str, Any]] = {}
        for column in quality_columns(frame):
            match = _QUALITY_COLUMN.fullmatch(column)
            assert match is not None  # quality_columns keeps matching names only
            value = _clean(row.get(column))
            if value is not None:
                quality.setdefault(match.group(2), {})[QUALITY_COLUMNS[match.group(1)]] = value
        if quality:
            record["quality"] = {d: e for d, e in quality.items() if "top1" in e}
        if _clean(row.get("provenance")):
            record["provenance"] = json.loads(row["provenance"])
        if _clean(row.get("source")):
            record["source"] = row["source"]
        records.append(record)
    return records


def _clean(value: Any) -> Any:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def load_dataset(path: str | Path, space: Space) -> pd.DataFrame:
    """Load any dataset form (tarball, folder, JSON, JSONL, CSV, Parquet) as the flat table
    (each record validated once). A file read before in this process, byte for byte the
    same, is not read again: its table is copied (:func:`_file_table`)."""
    path = Path(path)
    if not path.is_file():
        return _to_frame(_load_checked(path, space), space)
    check_merge_report(path.parent)
    return _file_table(path, sha256_file(path), space).copy()


@lru_cache(maxsize=4)
def _file_table(path: Path, sha256: str, space: Space) -> pd.DataFrame:
    """The table of the file ``path`` whose bytes hash to ``sha256`` (part of the key only:
    a changed file is read again); callers copy it."""
    return _to_frame(_load_checked(path, space), space)


def write_record(record: Mapping[str, Any], path: str | Path,
                 space: Space) -> Path:
    """Validate and atomically write one record as JSON (in the current format version)."""
    validate_record(record, where=str(path), space=space)
    return atomic_write_json(path, {**record, **stamp("record")})
