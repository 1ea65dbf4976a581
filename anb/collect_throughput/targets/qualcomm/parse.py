"""Parsers for the SDK tools' outputs (formats as printed by SNPE / QNN)."""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

_THROUGHPUT = re.compile(r"Total throughput:\s*([0-9.eE+-]+)\s*infs/sec")


class ParseError(RuntimeError):
    """A tool's output did not have the documented format."""


def parse_throughput(stdout: str, tool: str = "snpe-throughput-net-run") -> float:
    """Inferences per second from ``snpe-throughput-net-run`` / ``qnn-throughput-net-run``
    (the ``Total throughput: X infs/sec`` line)."""
    match = _THROUGHPUT.search(stdout)
    if match is None:
        tail = stdout.strip().splitlines()[-3:]
        raise ParseError(f"{tool}: no 'Total throughput: <x> infs/sec' line in its output "
                         f"(last lines: {tail})")
    value = float(match.group(1))
    if not value > 0:
        raise ParseError(f"{tool}: throughput {value} is not positive")
    return value


def parse_diagview_csv(text: str) -> tuple[dict[str, float], pd.DataFrame]:
    """``snpe-diagview --csv_format_version 2`` output -> (totals in us, per-layer table).

    Version 2 rows are ``Message Name,Layer Id,Layer Name,Layer Type,Time,Unit,Runtime``;
    rows without a layer id are whole-network statistics (``Init``,
    ``Avg Total Inference Time``, ``Total Inference Time``...), the rest per-layer times. Times
    are converted to microseconds.
    """
    reader = csv.DictReader(io.StringIO(text))
    needed = {"Message Name", "Layer Id", "Layer Name", "Layer Type", "Time", "Unit", "Runtime"}
    if reader.fieldnames is None or not needed <= set(reader.fieldnames):
        raise ParseError(f"snpe-diagview CSV: header {reader.fieldnames} lacks "
                         f"{sorted(needed - set(reader.fieldnames or []))}; was it written with "
                         "--csv_format_version 2?")
    scale = {"us": 1.0, "ms": 1e3, "s": 1e6, "ns": 1e-3, "cycles": float("nan")}
    totals: dict[str, float] = {}
    rows = []
    for n, row in enumerate(reader, start=2):
        unit = row["Unit"].strip().lower()
        if unit not in scale:
            raise ParseError(f"snpe-diagview CSV line {n}: unit {row['Unit']!r} is not one of "
                             f"{sorted(scale)}")
        value = float(row["Time"]) * scale[unit]
        if row["Layer Id"].strip() == "":
            totals[row["Message Name"].strip()] = value
        else:
            rows.append({"layer_id": int(row["Layer Id"]), "layer": row["Layer Name"].strip(),
                         "type": row["Layer Type"].strip(), "time_us": value,
                         "runtime": row["Runtime"].strip()})
    if not rows:
        raise ParseError("snpe-diagview CSV has no per-layer rows (run with a profiling level "
                         "of 'detailed' or higher)")
    table = pd.DataFrame(rows).groupby(["layer_id", "layer", "type", "runtime"], as_index=False,
                                        sort=False)[["time_us"]].mean()
    return totals, table.sort_values("layer_id", kind="stable").reset_index(drop=True)


_DLC_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|")
_ENCODING = re.compile(r"bitwidth\s+(\d+)\s*,\s*min\s+([-0-9.eE+]+)\s*,\s*max\s+([-0-9.eE+]+)"
                       r"(?:\s*,\s*scale\s+([-0-9.eE+]+))?(?:\s*,\s*offset\s+([-0-9.eE+]+))?")


def parse_dlc_info(stdout: str) -> pd.DataFrame:
    """``snpe-dlc-info -i model.dlc`` -> one row per layer (id, name, type, output encoding).

    The layer table has
    ``| Id | Name | Type | Inputs | Outputs | Out Dims | Runtimes | Parameters |``
    rows; a quantized model's parameter cell lists encodings as
    ``bitwidth B, min m, max M, scale s, offset o``; the first encoding of a layer is its
    output's. A float model gives empty encoding columns.
    """
    rows: list[dict] = []
    for line in stdout.splitlines():
        match = _DLC_ROW.match(line)
        if match:
            rows.append({"layer_id": int(match.group(1)), "layer": match.group(2),
                         "type": match.group(3), "bitwidth": np.nan, "min": np.nan,
                         "max": np.nan, "scale": np.nan, "offset": np.nan})
        enc = _ENCODING.search(line)
        if enc and rows and np.isnan(rows[-1]["bitwidth"]):
            b, lo, hi, s, o = enc.groups()
            rows[-1].update(bitwidth=int(b), min=float(lo), max=float(hi),
                            scale=float(s) if s else np.nan, offset=float(o) if o else np.nan)
    if not rows:
        raise ParseError("snpe-dlc-info: no layer table rows '| Id | Name | Type | ...' found")
    return pd.DataFrame(rows)


def read_raw(path: str | Path, shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    """A native raw tensor file as an array of ``shape`` (size checked)."""
    data = np.fromfile(path, dtype=dtype)
    if data.size != int(np.prod(shape)):
        raise ParseError(f"{path}: {data.size} {dtype} values, expected {int(np.prod(shape))} "
                         f"for shape {tuple(shape)}")
    return data.reshape(shape)
