"""HELP's latency tables as packaged latency benchmarks: ``help-nasbench201`` and ``help-fbnet``.

Each answers 27 latency targets in ms, one per HELP device column (``latency_<device>``, e.g.
``latency_1080ti-1``: :func:`anb.surrogates.help_tables.target`). An architecture that is in the
table (every NAS-Bench-201 architecture; 5,000 sampled FBNet ones) gets the measured value,
marked ``measured``, with std 0 and an interval of that value alone: HELP publishes one number
per architecture and device, no repeat spread, so no measurement noise is known. Any other
architecture (the rest of the FBNet space) gets the surrogate's prediction with its std,
intervals and out-of-distribution flags.

The surrogate is fitted by anb's own fit (:func:`anb.surrogates.api.fit`) on the whole table in
anb's record form, on the deterministic ``random`` split (80/10/10 by a seeded hash of the
architecture id, seed 0; its rows are recorded in the manifest), with the config in
``configs/surrogates/help.json`` (chosen on the validation split, see ``DEFAULTS.md`` there).
It ships fitted and compiled in ``data/packaged/<name>/`` (``scripts/build_packaged.py
--benchmark <name>``) under a key of its inputs (:func:`shipped_key`); a shipped artifact made
for other inputs is never used: it is fitted again into the user's cache on first use.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anb import resources
from anb.io import read_json, sha256_file
from anb.searchspace.registry import get_space
from anb.surrogates import artifact, help_tables
from anb.surrogates.benchmark import OOD_COLUMNS, SurrogateBenchmark
from anb.surrogates.data import make_split
from anb.surrogates.fit import FitConfig
from anb.surrogates.packaged import (
    LOCK_TIMEOUT,
    N_REFERENCE,
    RELEASED,
    SHIPPED_KEY,
    cache_root,
    fit_code_sha256,
    reference_values,
    say,
)
from anb.version import __version__

#: Packaged HELP benchmark name -> the search space of its table (``help-<space>``).
SPACES = {name: name.removeprefix("help-") for name in resources.HELP_BENCHMARKS}
#: The fitting config of both (targets: every device column of the table).
CONFIG = resources.CONFIG_DIR / "surrogates" / "help.json"
#: Query column: True where the value is HELP's measurement, False where it is predicted.
MEASURED = "measured"
#: Manifest field of a shipped HELP benchmark: its data identity and split (:func:`provenance`).
HELP = "help"
#: The dataset name in a HELP benchmark's identity.
DATASET = "HELP latency tables"


def check_name(name: str) -> str:
    """The space of the HELP benchmark ``name``; ValueError naming the allowed ones."""
    if name not in SPACES:
        raise ValueError(f"unknown HELP benchmark {name!r}; allowed: {sorted(SPACES)}")
    return SPACES[name]


def shipped_dir(name: str) -> Path:
    """Where the fitted, compiled benchmark ``name`` ships inside the package."""
    check_name(name)
    return resources.PACKAGED_DIR / name


def table_path(name: str) -> Path:
    return resources.HELP_DIR / help_tables.protocol(check_name(name)).file


def help_commit() -> str:
    """HELP's commit the tables were taken from, as ``SOURCE.md`` beside them states it."""
    found = re.search(r"HayeonLee/HELP, commit ([0-9a-f]{7,40})",
                      (resources.HELP_DIR / "SOURCE.md").read_text())
    if found is None:
        raise ValueError(f"{str(resources.HELP_DIR / 'SOURCE.md')!r} names no HELP commit")
    return found.group(1)


@cache
def table_sha256(name: str) -> str:
    """The sha256 of the packaged table behind ``name`` (hashed once per process)."""
    return sha256_file(table_path(name))


def fit_config(config: str | Path | FitConfig | None = None) -> FitConfig:
    """``config`` (a FitConfig or its JSON file), or the packaged ``help.json``."""
    if config is None:
        return FitConfig.from_file(CONFIG)
    return config if isinstance(config, FitConfig) else FitConfig.from_file(config)


def records(name: str) -> pd.DataFrame:
    """The table of ``name`` in anb's record form (every device column; ``source``
    ``help_<row>.json``), rows in table order."""
    space = check_name(name)
    table = help_tables.read_table(resources.HELP_DIR, space)
    return help_tables.to_frame(table, get_space(space), help_tables.TABLE_COLUMNS[space])


def split_rows(frame: pd.DataFrame, config: FitConfig) -> dict[str, list[int]]:
    """The table rows of each part of the config's split (as :func:`fit` makes it)."""
    masks = make_split(frame, config.split, config.seed)
    return {part: np.flatnonzero(mask).tolist() for part, mask in masks.items()}


def provenance(name: str, config: FitConfig, frame: pd.DataFrame) -> dict[str, Any]:
    """The manifest's :data:`HELP` field: the dataset, HELP's commit, the table's sha256 and
    the split's rows (validation and test; train is the rest)."""
    rows = split_rows(frame, config)
    return {"dataset": DATASET, "help_commit": help_commit(),
            "table": table_path(name).name, "table_sha256": table_sha256(name),
            "split": {"name": config.split, "seed": config.seed,
                      "val_rows": rows["val"], "test_rows": rows["test"]}}


def shipped_key(name: str, config: FitConfig) -> dict[str, Any]:
    """What a fitted HELP benchmark depends on: the anb version, the table's sha256, the
    config and the fitting code's sha256 (the same modules as the accel-nasbench key)."""
    return {"benchmark": name, "anb_version": __version__, "table_sha256": table_sha256(name),
            "config": config.to_dict(), "fit_code_sha256": fit_code_sha256()}


def shipped(name: str, config: FitConfig) -> Path | None:
    """The shipped folder of ``name`` if it was fitted under ``config``'s key, else None."""
    folder = shipped_dir(name)
    try:
        made = read_json(folder / artifact.MANIFEST).get(SHIPPED_KEY)
    except (OSError, ValueError):
        return None
    return folder if made == shipped_key(name, config) else None


def cache_path(name: str, config: FitConfig) -> Path:
    """The cache folder of ``name`` fitted with ``config`` (library versions in the key)."""
    key = {**shipped_key(name, config), "libraries": artifact.library_versions()}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / name / f"{__version__}-{digest}"


def fit_help(name: str, out: Path, config: FitConfig, n_jobs: int = 1, progress: bool = False
             ) -> SurrogateBenchmark:
    """Fit ``name``'s surrogate with ``config`` and save it (not compiled) to ``out``, its
    manifest holding :func:`provenance` and :func:`shipped_key`."""
    from anb.surrogates.api import fit

    frame = records(name)
    bench, _ = fit(frame, out, config=config, n_jobs=n_jobs, progress=progress,
                   space=check_name(name), overwrite=True)
    bench.info[HELP] = provenance(name, config, frame)
    bench.info[SHIPPED_KEY] = shipped_key(name, config)
    artifact.save(bench, out, overwrite=True)
    return artifact.load(out)


def reference(bench: SurrogateBenchmark) -> dict[str, Any]:
    """The surrogate's own query (numeric columns; no measured value put in) on the first
    :data:`~anb.surrogates.packaged.N_REFERENCE` test-split rows of ``bench``'s table: what
    its compiled copy must reproduce (:func:`anb.surrogates.packaged.reference_diff`)."""
    table = pd.read_csv(resources.HELP_DIR / bench.info[HELP]["table"], usecols=["arch"])
    archs = table["arch"].to_numpy()[bench.info[HELP]["split"]["test_rows"][:N_REFERENCE]]
    return reference_values(SurrogateBenchmark.query(bench, list(archs)))


def folder(name: str, config: FitConfig | None = None, n_jobs: int = 1,
           quiet: bool = False) -> Path:
    """The folder of the fitted benchmark ``name``: the shipped one, or the cache folder,
    fitted into it first (under a file lock) when it is not there yet."""
    from filelock import FileLock

    config = config or fit_config()
    ready = shipped(name, config)
    if ready is not None:
        return ready
    path = cache_path(name, config)
    if (path / artifact.MANIFEST).is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT):
        if not (path / artifact.MANIFEST).is_file():
            say(quiet, f"fitting {name!r} (27 latency targets) on HELP's table with "
                        f"{n_jobs} thread(s); cached in {path}")
            fit_help(name, path, config, n_jobs)
    return path


def released(name: str, info: dict[str, Any]) -> dict[str, Any]:
    """The identity key :func:`anb.load` sets on a HELP benchmark (see
    :func:`anb.surrogates.identity.identity`): its name, the dataset, HELP's commit, the table's
    sha256 and the split's rows' sha256."""
    split = info[HELP]["split"]
    return {"name": name, "dataset": DATASET, "version": f"HayeonLee/HELP@{help_commit()}",
            "data_sha256": info[HELP]["table_sha256"],
            "split_sha256": {part: hashlib.sha256(json.dumps(split[part]).encode()).hexdigest()
                             for part in ("val_rows", "test_rows")}}


def load(name: str, config: str | Path | FitConfig | None = None, n_jobs: int | None = None,
         quiet: bool = False, started: float | None = None) -> HelpBenchmark:
    """The HELP benchmark ``name`` (shipped, or fitted into the cache on first use with
    ``config``: ``help.json`` by default)."""
    started = time.perf_counter() if started is None else started
    path = folder(name, fit_config(config), n_jobs or 1, quiet)
    base = artifact.load(path, n_jobs=n_jobs)
    if base.info.get(HELP, {}).get("table_sha256") != table_sha256(name):
        raise ValueError(f"{str(path)!r} was fitted on another table than the packaged "
                         f"{table_path(name).name}; remove it to fit it again")
    bench = HelpBenchmark(base, help_tables.read_table(resources.HELP_DIR, check_name(name)))
    bench.info[RELEASED] = released(name, bench.info)
    say(quiet, f"loaded the packaged benchmark {name!r} in "
                f"{time.perf_counter() - started:.2f} s")
    return bench


class HelpBenchmark(SurrogateBenchmark):
    """A fitted HELP surrogate that answers from the table where the table has the
    architecture (module docstring)."""

    def __init__(self, bench: SurrogateBenchmark, table: pd.DataFrame):
        super().__init__(bench.builder, bench.models, bench.transforms, bench.info,
                         space=bench.space, n_jobs=bench.n_jobs, support=bench.support)
        #: Table row of each measured architecture (the space's canonical string).
        self.rows = pd.Series(np.arange(len(table)), index=table["arch"].to_numpy())
        #: Measured latency (ms) per target, in table row order.
        self.measured = {help_tables.target(c): table[c].to_numpy(dtype=np.float64)
                         for c in help_tables.TABLE_COLUMNS[self.space.name]}

    def query(self, archs: Any, metrics: Any = None, noise: bool = False,
              seed: int | None = None, level: float | None = None) -> pd.DataFrame:
        """:meth:`SurrogateBenchmark.query`, with a :data:`MEASURED` column before the
        out-of-distribution ones; a measured row holds the table's value, std 0 (and
        ``lo = hi`` = that value) with ``noise`` or without, and is not flagged
        out of distribution (its distance and cost scores are kept)."""
        frame = super().query(archs, metrics, noise, seed, level)
        rows = self.rows.reindex(frame["arch"].to_numpy()).to_numpy()
        measured = ~np.isnan(rows)
        at = rows[measured].astype(np.int64)
        for name in self.resolve(metrics):
            value = self.measured[name][at]
            frame.loc[measured, name] = value
            frame.loc[measured, f"{name}_std"] = 0.0
            if level is not None:
                frame.loc[measured, f"{name}_lo"] = value
                frame.loc[measured, f"{name}_hi"] = value
        frame.loc[measured, "ood"] = False
        frame.loc[measured, "ood_reason"] = ""
        frame.insert(list(frame.columns).index(OOD_COLUMNS[0]), MEASURED, measured)
        return frame

    def __repr__(self) -> str:
        return f"HelpBenchmark({self.info.get(RELEASED, {}).get('name')!r}, " \
               f"metrics={self.metrics})"
