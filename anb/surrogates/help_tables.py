"""HELP's latency tables and evaluation protocol (Lee et al., NeurIPS 2021): an external yardstick
for adapting to a new device (``benchmarks/help_transfer.py``).

The tables (``nasbench201_latency.csv.gz``, ``fbnet_latency.csv.gz``; see the ``SOURCE.md``
beside them) hold the latency in ms of every architecture on 27 devices. HELP's protocol, as its
``loader.py`` applies it: known devices are the meta-train and meta-valid columns; an unseen
(meta-test) device is seen only through 10 fixed reference architectures plus ``num_samples``
drawn at random from the training pool (rows ``0 .. N-1`` whose latency on the device ranks
between the 10th and 90th percentile of the pool); the query set is rows ``N .. N+999`` ranked
the same way inside that block (800 rows). Ranks come from a stable sort, so tied latencies
(whole-millisecond phone columns) keep row order. The random measurements are drawn from the
pool without the reference rows (HELP's draw may repeat one, measuring fewer designs).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from anb.records import new_record, perf_key, records_to_frame
from anb.searchspace.base import Space
from anb.searchspace.registry import get_space


@dataclass(frozen=True)
class Protocol:
    """One space's HELP setting: table file, pool size, device groups, reference rows."""

    space: str
    file: str
    pool_size: int
    meta_train: tuple[str, ...]
    meta_valid: tuple[str, ...]
    meta_test: tuple[str, ...]
    reference: tuple[int, ...]

    @property
    def known(self) -> tuple[str, ...]:
        """The devices a method may use in full (meta-train and meta-valid)."""
        return self.meta_train + self.meta_valid

    def split(self, on: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(known, unseen)`` devices: ``"test"`` is HELP's evaluation (known = meta-train +
        meta-valid, unseen = meta-test); ``"valid"`` the one to choose settings on (known =
        meta-train, unseen = meta-valid)."""
        if on == "test":
            return self.known, self.meta_test
        if on == "valid":
            return self.meta_train, self.meta_valid
        raise ValueError(f"unknown split {on!r}; allowed: 'test', 'valid'")

    def columns(self, families: tuple[str, ...]) -> tuple[str, ...]:
        """This space's table columns of the device ``families`` (keys of :data:`FAMILIES`),
        in table order."""
        return tuple(c for c in TABLE_COLUMNS[self.space] if family(c) in families)

    def splits(self, on: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """``(known, unseen)`` pairs: :meth:`split`'s one for ``"test"`` / ``"valid"``; for
        ``"lomo"`` (the second split to choose settings on) one per meta-train device, unseen,
        with every other meta-train and meta-valid device known."""
        if on == "lomo":
            return [(tuple(d for d in self.known if d != left), (left,))
                    for left in self.meta_train]
        if on in CROSS_FAMILY:
            known, unseen = CROSS_FAMILY[on]
            return [(self.columns(known), self.columns(unseen))]
        if on not in SPLITS:
            raise ValueError(f"unknown split {on!r}; allowed: {', '.join(map(repr, SPLITS))}")
        return [self.split(on)]


#: Device families of HELP's columns (a column is a name below, or a name plus ``_<batch>``).
#: The Titan X GPUs are a family of their own: the unseen devices of the split that settings
#: are chosen on (``family_valid``), never unseen in a reported cross-family split.
FAMILIES = {
    "gpu": ("1080ti", "2080ti", "titan_rtx", "titanxp"),
    "gpu_valid": ("titanx",),
    "cpu": ("gold_6226", "gold_6240", "silver_4114", "silver_4210r"),
    "mobile": ("essential_ph_1", "pixel2", "pixel3", "samsung_a50", "samsung_s7", "raspi4"),
    "accelerator": ("fpga", "eyeriss"),
}
#: Cross-family splits, name -> (known families, unseen families): a new device of a family
#: none of the known devices belongs to. ``family_valid`` is the one to choose settings on.
CROSS_FAMILY = {
    "mobile_cpu-gpu": (("mobile", "cpu"), ("gpu",)),
    "gpu-mobile_cpu": (("gpu",), ("mobile", "cpu")),
    "cpu_gpu-accelerator": (("cpu", "gpu"), ("accelerator",)),
    "family_valid": (("mobile", "cpu"), ("gpu_valid",)),
}
#: What :meth:`Protocol.splits` accepts: HELP's evaluation, the two to choose settings on, then
#: the cross-family splits.
SPLITS = ("test", "valid", "lomo", *CROSS_FAMILY)
#: The device columns of HELP's tables, in file order.
TABLE_COLUMNS = {
    "nasbench201": ("1080ti_1", "1080ti_256", "1080ti_32", "2080ti_1", "2080ti_256", "2080ti_32",
                    "essential_ph_1", "eyeriss", "fpga", "gold_6226", "gold_6240", "pixel2",
                    "pixel3", "raspi4", "samsung_a50", "samsung_s7", "silver_4114",
                    "silver_4210r", "titan_rtx_1", "titan_rtx_256", "titan_rtx_32", "titanx_1",
                    "titanx_256", "titanx_32", "titanxp_1", "titanxp_256", "titanxp_32"),
    "fbnet": ("1080ti_1", "1080ti_32", "1080ti_64", "2080ti_1", "2080ti_32", "2080ti_64",
              "essential_ph_1", "eyeriss", "fpga", "gold_6226", "gold_6240", "pixel2", "pixel3",
              "raspi4", "samsung_a50", "samsung_s7", "silver_4114", "silver_4210r",
              "titan_rtx_1", "titan_rtx_32", "titan_rtx_64", "titanx_1", "titanx_32",
              "titanx_64", "titanxp_1", "titanxp_32", "titanxp_64"),
}
_GPU_CPU = ("1080ti_1", "1080ti_32", "silver_4114", "silver_4210r", "samsung_a50", "pixel3",
            "essential_ph_1", "samsung_s7")
PROTOCOLS = {
    "nasbench201": Protocol(
        "nasbench201", "nasbench201_latency.csv.gz", 900,
        _GPU_CPU[:2] + ("1080ti_256",) + _GPU_CPU[2:],
        ("titanx_1", "titanx_32", "titanx_256", "gold_6240"),
        ("titan_rtx_256", "gold_6226", "fpga", "pixel2", "raspi4", "eyeriss"),
        (11982, 431, 55, 9, 14451, 8636, 9881, 13479, 6196, 1462)),
    "fbnet": Protocol(
        "fbnet", "fbnet_latency.csv.gz", 4000,
        _GPU_CPU[:2] + ("1080ti_64",) + _GPU_CPU[2:],
        ("titanx_1", "titanx_32", "titanx_64", "gold_6240"),
        ("fpga", "raspi4", "eyeriss"),
        (3328, 3790, 3313, 890, 3052, 2538, 1640, 2514, 457, 2100)),
}
QUERY_SIZE = 1000


def protocol(space: str) -> Protocol:
    if space not in PROTOCOLS:
        raise ValueError(f"HELP has no table of space {space!r}; allowed: {sorted(PROTOCOLS)}")
    return PROTOCOLS[space]


def family(column: str) -> str:
    """The :data:`FAMILIES` key of a HELP column (``titanx_32`` -> ``gpu_valid``)."""
    for name, devices in FAMILIES.items():
        if any(column == device or column.startswith(device + "_") for device in devices):
            return name
    raise ValueError(f"HELP column {column!r} has no device family; known devices: "
                     f"{sorted(d for ds in FAMILIES.values() for d in ds)}")


def device_name(column: str) -> str:
    """anb's device name of a HELP column (``1080ti_1`` -> ``1080ti-1``)."""
    return column.replace("_", "-")


def target(column: str) -> str:
    """anb's metric name of a HELP column (``latency_1080ti-1``)."""
    return perf_key("latency", device_name(column))


def read_table(folder: str | Path, space: str) -> pd.DataFrame:
    """HELP's table of ``space`` (rows in table order, ``index`` checked to be the row)."""
    path = Path(folder) / protocol(space).file
    if not path.exists():
        raise FileNotFoundError(f"HELP table {str(path)!r} does not exist (see SOURCE.md)")
    table = pd.read_csv(path)
    if not np.array_equal(table["index"].to_numpy(), np.arange(len(table))):
        raise ValueError(f"{str(path)!r}: column 'index' is not the row number 0..{len(table) - 1}")
    return table


def middle_rows(latency: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows whose latency ranks in ``[10 %, 90 %)`` of ``rows`` (HELP's outlier removal)."""
    order = rows[np.argsort(latency[rows], kind="stable")]
    return np.sort(order[int(len(rows) * 0.1):int(len(rows) * 0.9)])


def pool_rows(proto: Protocol, latency: np.ndarray) -> np.ndarray:
    """The training pool of a device: the middle 80 % of rows ``0 .. N-1``."""
    return middle_rows(latency, np.arange(proto.pool_size))


def query_rows(proto: Protocol, latency: np.ndarray) -> np.ndarray:
    """The query set of a device: the middle 80 % of rows ``N .. N+999``."""
    return middle_rows(latency, np.arange(proto.pool_size, proto.pool_size + QUERY_SIZE))


def measured_rows(proto: Protocol, latency: np.ndarray, n: int,
                  rng: np.random.Generator) -> np.ndarray:
    """The rows measured on an unseen device: the first ``min(n, 10)`` reference rows, then
    ``n - 10`` drawn from the pool (none a reference row)."""
    reference = np.array(proto.reference[:n])
    pool = np.setdiff1d(pool_rows(proto, latency), reference)
    extra = rng.choice(pool, max(n - len(reference), 0), replace=False)
    return np.concatenate([reference, extra])


def to_frame(table: pd.DataFrame, space: Space, columns: list[str] | tuple[str, ...]
             ) -> pd.DataFrame:
    """anb's table form of ``columns`` (HELP device columns) for every row (``source``
    ``help_<row>.json``)."""
    records = []
    for row, arch, values in zip(table["index"], table["arch"],
                                 table[list(columns)].to_numpy(dtype=np.float64), strict=True):
        record = new_record(space.arch(arch), space)
        record["platform_perf"] = {target(c): {"latency_mean": float(v), "latency_std": None}
                                   for c, v in zip(columns, values, strict=True)}
        record["source"] = f"help_{row}.json"
        records.append(record)
    return records_to_frame(records, space)


def choices(table: pd.DataFrame, space_name: str) -> np.ndarray:
    """The raw choices of every row of a HELP table."""
    return get_space(space_name).to_choices(list(table["arch"]))
