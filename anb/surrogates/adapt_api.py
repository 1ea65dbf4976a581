"""One-call workflows behind ``anb adapt``: read measurements, adapt, save; suggest what to measure.

>>> from anb.surrogates.adapt_api import adapt
>>> bench = adapt("myboard", "my.csv", base="models/anb", out="models/myboard")  # doctest: +SKIP
>>> bench.query(["e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"])  # +SKIP
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from anb.io import read_csv
from anb.searchspace.arch import Arch
from anb.searchspace.space import ANB_SPACE, SearchSpace
from anb.surrogates.adapt import (KINDS, MIN_POINTS, AdaptedBenchmark, AdaptedModel,
                                  BenchmarkKnown, load_adapted, op_components, save_adapted)
from anb.surrogates.adapt_select import suggest as _suggest


def read_measured(path: str | Path, device: str, kind: str | None = None,
                  space: SearchSpace = ANB_SPACE, min_points: int = MIN_POINTS
                  ) -> tuple[str, np.ndarray, np.ndarray]:
    """``(target, raw choices, values)`` of a device from a CSV (``arch`` + ``<kind>_<device>``
    columns) or from what ``anb measure`` wrote (a results folder or record JSON files)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"measured file {str(path)!r} does not exist")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown metric kind {kind!r}; allowed: {list(KINDS)}")
    if path.suffix == ".csv":
        frame = read_csv(path, dtype={"arch": str}, keep_default_na=True)
    else:
        from anb.records import load_dataset

        frame = load_dataset(path, space)
    if "arch" not in frame.columns:
        raise ValueError(f"{str(path)!r} has no 'arch' column (columns: {list(frame.columns)})")
    wanted = [f"{k}_{device}" for k in ([kind] if kind else KINDS)]
    present = [c for c in wanted if c in frame.columns]
    if not present:
        devices = [c for c in frame.columns if c.startswith(tuple(f"{k}_" for k in KINDS))
                   and not c.endswith("_std")]
        raise ValueError(f"unknown device {device!r}: {str(path)!r} has no column "
                         f"{' or '.join(wanted)}; its device columns are {devices}")
    if len(present) > 1:
        raise ValueError(f"{str(path)!r} has both {present}; choose one with --metric "
                         f"({' or '.join(KINDS)})")
    target = present[0]
    values = pd.to_numeric(frame[target], errors="coerce").to_numpy(dtype=np.float64)
    rows = []
    for i, (arch, value, raw) in enumerate(zip(frame["arch"], values, frame[target])):
        where = f"{str(path)!r} row {i + 1}"
        if not isinstance(arch, str) or not arch.strip():
            raise ValueError(f"{where}: column 'arch' is empty; give an architecture string like "
                             "'e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se'")
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{where} ({arch}): column {target!r} has {raw!r}; every measured "
                             "architecture needs a positive number")
        try:
            rows.append(Arch.from_string(arch.strip(), space).to_choices())
        except ValueError as err:
            raise ValueError(f"{where}: architecture {arch!r} is outside the search space "
                             f"{space.name!r}: {err}") from None
    choices = np.stack(rows) if rows else np.zeros((0, space.num_stages, 4), dtype=np.int64)
    if len(choices) < min_points:
        raise ValueError(f"{str(path)!r} holds {len(choices)} measured architectures of "
                         f"{target!r}; adapting needs at least {min_points}")
    return target, choices, values


def _load_base(base: str | Path | Any) -> Any:
    """A surrogate benchmark: an artifact folder, a packaged name (``"accel-nasbench"``) or one
    already loaded."""
    from anb.surrogates.packaged import load

    return load(base) if isinstance(base, (str, Path)) else base


def _base_folder(base: str | Path) -> Path:
    """The artifact folder behind ``base`` (a packaged name resolves to its cache folder)."""
    from anb.surrogates.packaged import PACKAGED, cache_path

    if str(base) in PACKAGED and not Path(base).exists():
        return cache_path(str(base))
    return Path(base)


def adapt(device: str, measured: str | Path, base: str | Path = "accel-nasbench",
          out: str | Path | None = None, kind: str | None = None) -> tuple[AdaptedBenchmark | None, AdaptedModel]:
    """Fit a surrogate of ``device`` from measured architectures, on top of the base surrogate
    benchmark ``base`` (a saved artifact folder); save it to ``out`` (queryable beside the base's
    metrics via :func:`anb.surrogates.adapt.load_adapted`)."""
    target, choices, values = read_measured(measured, device, kind)
    bench = _load_base(base)
    known = BenchmarkKnown(bench, exclude=[target])
    model = AdaptedModel.fit(target, known.targets, known.log_costs(choices),
                             op_components(choices, bench.space), values,
                             known_source=known.source)
    if out is None:
        return None, model
    info = {"measured": {"file": Path(measured).name, "n": int(len(values))}}
    save_adapted(out, _base_folder(base), {target: model}, info)
    return load_adapted(out), model


def suggest(base: str | Path | Any = "accel-nasbench", k: int = 10, measured: str | Path | None = None,
            device: str | None = None, kind: str | None = None, n_candidates: int = 5000,
            seed: int = 0, exclude: Sequence[str] = ()) -> list[str]:
    """``k`` distinct architecture strings to measure next on a device (none measured yet)."""
    bench = _load_base(base)
    done = None
    target = None
    if measured is not None:
        if device is None:
            raise ValueError("give --device with --measured (which column holds the values)")
        target, done, _ = read_measured(measured, device, kind, bench.space, min_points=0)
    known = BenchmarkKnown(bench, exclude=[t for t in [target, *exclude] if t])
    picked = _suggest(known, k, done, n_candidates=n_candidates, seed=seed, space=bench.space)
    return [str(Arch.from_choices(row, bench.space)) for row in picked]


def submit(archs: Sequence[str], device: str, queue: str, priority: int | None = None
           ) -> tuple[int, int]:
    """Queue a ``measure`` job per architecture on ``device`` (a device config name or TOML
    path) in the measurement queue ``queue``; returns (added, already queued)."""
    from anb.jobs.cli import _device_table
    from anb.jobs.queue import open_queue
    from anb.jobs.stages import chain

    name, table = _device_table(device)
    specs = [chain(a, name, ["measure"], priority, payload={"device_config": table})
             for a in archs]
    with open_queue(queue) as q:
        added = q.submit(specs)
    return len(added), len(specs) - len(added)
