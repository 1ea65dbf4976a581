"""One-call workflows behind ``anb adapt``: read measurements, adapt, save; suggest what to measure.

>>> from anb.surrogates.adapt.api import adapt
>>> bench = adapt("myboard", "my.csv", base="models/anb", out="models/myboard")  # doctest: +SKIP
>>> bench.query(["e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"])  # +SKIP
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anb import resources
from anb.outputs import check_folder
from anb.records import PERF_KINDS, is_perf_metric
from anb.searchspace.base import Space
from anb.searchspace.registry import resolve_space
from anb.surrogates.adapt.model import (
    MIN_POINTS,
    OUTPUT,
    AdaptedBenchmark,
    AdaptedModel,
    BenchmarkKnown,
    device_metrics,
    load_adapted,
    op_components,
    save_adapted,
)
from anb.surrogates.adapt.select import suggest as _suggest


@dataclass(frozen=True)
class Measured:
    """A device's measurements, one row per distinct design: repeated measurements of a design
    are merged into their mean (``values``), their count (``repeats``) and their sample std
    (``spread``, NaN for a design measured once)."""

    target: str
    choices: np.ndarray
    values: np.ndarray
    repeats: np.ndarray
    spread: np.ndarray

    @property
    def rows(self) -> int:
        """Measurements read (before merging repeats)."""
        return int(self.repeats.sum())

    def summary(self, space: Space) -> dict[str, Any]:
        """What the adapted artifact records: designs, rows and each repeated design's spread."""
        archs = space.archs_from_choices(self.choices) if len(self.choices) else []
        repeated = np.nonzero(self.repeats > 1)[0]
        return {"n": int(len(self.values)), "rows": self.rows,
                "repeated": [{"arch": str(archs[i]),
                              "n": int(self.repeats[i]), "mean": float(self.values[i]),
                              "std": float(self.spread[i])} for i in repeated]}


def merge_repeats(target: str, choices: np.ndarray, values: np.ndarray) -> Measured:
    """One row per distinct design (first-seen order): mean, count and std of its values."""
    choices = np.asarray(choices, dtype=np.int64)
    flat = choices.reshape(len(choices), -1)
    _, first, group = np.unique(flat, axis=0, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    order = np.argsort(first)  # unique() sorts; keep the file's order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    group = rank[group]
    values = np.asarray(values, dtype=np.float64)
    count = np.bincount(group, minlength=len(order))
    mean = np.bincount(group, values, minlength=len(order)) / np.maximum(count, 1)
    square = np.bincount(group, (values - mean[group]) ** 2, minlength=len(order))
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.where(count > 1, np.sqrt(square / (count - 1)), np.nan)
    return Measured(target, choices[np.sort(first)], mean, count, spread)


def read_measured(path: str | Path, device: str, metric: str | None = None,
                  *, space: Space, min_points: int = MIN_POINTS) -> Measured:
    """A device's measurements from a table (an ``arch`` column or ``block{i}_*`` columns, and
    ``<metric>_<device>``) or from what ``anb measure`` wrote (a results folder or record JSON
    files); repeated designs are merged (:func:`merge_repeats`) and ``min_points`` counts
    distinct designs."""
    from anb.records import TABLE_SUFFIXES, load_dataset, read_table, table_archs

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"measured file {str(path)!r} does not exist")
    if metric is not None and metric not in PERF_KINDS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {list(PERF_KINDS)}")
    frame = read_table(path) if path.suffix in TABLE_SUFFIXES else load_dataset(path, space)
    wanted = [f"{k}_{device}" for k in ([metric] if metric else PERF_KINDS)]
    present = [c for c in wanted if c in frame.columns]
    if not present:
        devices = [c for c in frame.columns if is_perf_metric(c)
                   and not c.endswith("_std")]
        raise ValueError(f"unknown device {device!r}: {str(path)!r} has no column "
                         f"{' or '.join(wanted)}; its device columns are {devices}")
    if len(present) > 1:
        raise ValueError(f"{str(path)!r} has both {present}; choose one with "
                         + " or ".join(f"metric={k!r}" for k in PERF_KINDS)
                         + f" (anb adapt: --metric {'|'.join(PERF_KINDS)})")
    target = present[0]
    archs = table_archs(frame, repr(str(path)), space=space)
    values = pd.to_numeric(frame[target], errors="coerce").to_numpy(dtype=np.float64)
    for i, (arch, value, raw) in enumerate(zip(archs, values, frame[target], strict=True)):
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{str(path)!r} row {i + 1} ({arch}): column {target!r} has "
                             f"{raw!r}; every measured architecture needs a positive number")
    choices = space.to_choices(archs)
    measured = merge_repeats(target, choices, values)
    if len(measured.values) < min_points:
        raise ValueError(f"{str(path)!r} holds {len(measured.values)} distinct measured "
                         f"architectures of {target!r} ({measured.rows} rows); adapting needs "
                         f"at least {min_points}")
    return measured


def _load_base(base: str | Path | Any) -> Any:
    """A surrogate benchmark: an artifact folder, a packaged name (``"accel-nasbench"``) or one
    already loaded; not an adapted one (adapt on its base instead)."""
    from anb.surrogates.packaged import load

    bench = load(base) if isinstance(base, (str, Path)) else base
    if isinstance(bench, AdaptedBenchmark):
        raise ValueError(f"base {str(base)!r} is an adapted surrogate; adapt on the surrogate "
                         "it was adapted on (its manifest's base), every device at once")
    return bench


def base_space(base: str | Path | Any, space: str | Space | None = None) -> Space:
    """The search space of the base benchmark ``base`` (read from its manifest, nothing
    loaded); ``space``, when given, must be it."""
    from anb.surrogates.packaged import benchmark_space

    return resolve_space(space, benchmark_space(base).name, f"base benchmark {str(base)!r}")


def adapt(device: str, measured: str | Path, base: str | Path = resources.PACKAGED_BENCHMARK,
          out: str | Path | None = None, metric: str | None = None, overwrite: bool = False,
          space: str | Space | None = None) -> tuple[AdaptedBenchmark | None, AdaptedModel]:
    """Fit a surrogate of ``device`` from measured architectures, on top of the base surrogate
    benchmark ``base`` (a saved artifact folder); save it to ``out``, a benchmark of the base's
    metrics plus the new device (``anb.load(out)``, ``anb query out``, ``anb search
    --benchmark out``; see :func:`save_adapted` for ``overwrite``). Repeated measurements of a
    design are averaged (:func:`read_measured`); every metric of ``device`` the base knows is
    left out of what it transfers from (:func:`~anb.surrogates.adapt.model.device_metrics`);
    ``metric`` (throughput | latency) picks the measured column when the file has both;
    ``space``, when given, must be the base's."""
    if out is not None:
        check_folder(out, OUTPUT, overwrite)
    in_space = base_space(base, space)
    data = read_measured(measured, device, metric, space=in_space)  # checked before the base loads
    bench = _load_base(base)
    known = BenchmarkKnown(bench, exclude=device_metrics(data.target))
    model = AdaptedModel.fit(data.target, known.targets, known.log_costs(data.choices),
                             op_components(data.choices, bench.space), data.values,
                             known_source=known.source, choices=data.choices,
                             space=bench.space)
    if out is None:
        return None, model
    info = {"measured": {"file": Path(measured).name, **data.summary(bench.space)}}
    save_adapted(out, base, {data.target: model}, info, overwrite)
    return load_adapted(out), model


def check_suggest(k: int, n_candidates: int) -> None:
    """ValueError unless ``1 <= k <= n_candidates`` (``k`` are picked from that many)."""
    if not 1 <= k <= n_candidates:
        raise ValueError(f"--suggest {k:,} is invalid; allowed: 1 to --candidates "
                         f"({n_candidates:,}), the sampled architectures it picks from")


def suggest(base: str | Path | Any = resources.PACKAGED_BENCHMARK, k: int = 10,
            measured: str | Path | None = None, device: str | None = None,
            metric: str | None = None, n_candidates: int = 5000,
            seed: int = 0, exclude: Sequence[str] = (), space: str | Space | None = None
            ) -> list[str]:
    """``k`` distinct architecture strings to measure next on a device (none measured yet)."""
    check_suggest(k, n_candidates)
    bench = _load_base(base)
    resolve_space(space, bench.space.name, f"base benchmark {str(base)!r}")
    done = None
    target = None
    if measured is not None:
        if device is None:
            raise ValueError("give --device with --measured (which column holds the values)")
        data = read_measured(measured, device, metric, space=bench.space, min_points=0)
        target, done = data.target, data.choices
    hidden = device_metrics(target) if target else []
    known = BenchmarkKnown(bench, exclude=[*hidden, *exclude])
    picked = _suggest(known, k, done, n_candidates=n_candidates, seed=seed, space=bench.space)
    return [str(a) for a in bench.space.archs_from_choices(picked)]


def submit(archs: Sequence[str], device: str, queue: str, space: Space,
           priority: int | None = None) -> tuple[int, int]:
    """Queue a ``measure`` job per architecture of ``space`` on ``device`` (a device config
    name or TOML path) in the measurement queue ``queue``; returns (added, already queued)."""
    from anb.collect_throughput.queue.stages import job_specs, submit_jobs
    from anb.jobs.queue import open_queue

    specs = job_specs(archs, [device], space, ["measure"], priority)
    with open_queue(queue) as q:
        added = submit_jobs(q, specs)
    return len(added), len(specs) - len(added)
