"""``anb.load(name_or_path)``, the one way to load a benchmark, and the packaged benchmark.

The packaged benchmark (the released Accel-NASBench data and its published split, fitted with
the packaged default config) ships inside the package, fitted, its XGBoost members compiled to
numpy node tables (``resources.SHIPPED_DIR``, written by ``scripts/build_packaged.py``): it
loads in about a second without xgboost. Its manifest records the key it was fitted under
(:func:`shipped_key`: the anb version, the hashes of the data, split, config and fitting code);
a shipped artifact whose key differs from the current inputs' is never used: it is refitted.

Another config (or a stale shipped artifact) is fitted on first use (the ``fit`` extra) and
saved in the user's cache folder (``platformdirs``; ``ANB_CACHE_DIR`` overrides) under a key
made of the anb version, the library versions and the hashes of the data, split and config.
Later calls load it from there. A file lock makes concurrent first uses fit it once: the others
wait and load what the first one wrote (the artifact itself is written to a temporary folder and
renamed, so a reader never sees half of it).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import time
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anb import resources
from anb.io import read_json, sha256_file
from anb.searchspace.base import Space
from anb.searchspace.registry import DEFAULT_SPACE, get_space
from anb.surrogates import artifact
from anb.surrogates.benchmark import SurrogateBenchmark
from anb.surrogates.fit import FitConfig
from anb.version import __version__

if TYPE_CHECKING:  # annotations only
    import pandas as pd

    from anb.surrogates.adapt.model import AdaptedBenchmark

#: Names :func:`load` resolves to a packaged benchmark (anything else is an artifact folder).
PACKAGED = (resources.PACKAGED_BENCHMARK, *resources.HELP_BENCHMARKS)
#: ``info`` field of a loaded packaged benchmark: its name and the released data's hashes.
RELEASED = "released"
#: How long a process waits for another one's first-use fit before giving up (seconds).
LOCK_TIMEOUT = 3600.0


def cache_root() -> Path:
    """``$ANB_CACHE_DIR`` if set, else the user's cache folder for anb (platformdirs).

    Raises ValueError, naming the variable, when ``$ANB_CACHE_DIR`` (or a folder above it) is
    a file."""
    if os.environ.get("ANB_CACHE_DIR"):
        root = Path(os.environ["ANB_CACHE_DIR"]).expanduser()
        existing = next((p for p in (root, *root.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            raise ValueError(f"ANB_CACHE_DIR={str(root)!r}: {str(existing)!r} is a file; "
                             "allowed: a folder (existing or to be created), or unset it for "
                             "the user's cache folder")
        return root
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("anb", appauthor=False))


def fit_config(config: str | Path | FitConfig | None) -> FitConfig:
    """The config a packaged benchmark is fitted with: ``FitConfig()`` (the packaged
    ``default.json``) unless one is given."""
    if config is None:
        return FitConfig()
    return config if isinstance(config, FitConfig) else FitConfig.from_file(config)


def cache_key(config: FitConfig) -> dict[str, Any]:
    """What the cached artifact depends on; any change gives a new cache entry."""
    return {**_inputs_key(config), "libraries": artifact.library_versions(),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}"}


def _inputs_key(config: FitConfig) -> dict[str, Any]:
    """The anb version and the hashes of the data, split and config (both keys' part)."""
    return {"anb_version": __version__, **released_key(), "config": config.to_dict()}


#: The manifest field holding the :func:`shipped_key` a shipped artifact was fitted under.
SHIPPED_KEY = "packaged_key"
#: The modules of ``anb.surrogates`` whose code decides what a fit produces (part of
#: :func:`shipped_key`).
FIT_CODE = ("compiled", "data", "ensemble", "estimators", "features", "fit", "layer_cost",
            "uncertainty.holes", "uncertainty.learn", "uncertainty.noise", "uncertainty.support",
            "uncertainty.terms")


def fit_code_sha256() -> str:
    """The sha256 of the :data:`FIT_CODE` modules' source, in that order."""
    code = hashlib.sha256()
    for module in FIT_CODE:
        source = files("anb.surrogates")
        *folders, name = module.split(".")
        for folder in folders:
            source = source / folder
        code.update((source / f"{name}.py").read_bytes())
    return code.hexdigest()


def shipped_key(config: FitConfig) -> dict[str, Any]:
    """What a shipped fitted artifact depends on: the anb version and the hashes of the data,
    split, config and fitting code (library versions are recorded in its manifest)."""
    return {**_inputs_key(config), "fit_code_sha256": fit_code_sha256()}


def shipped(config: FitConfig) -> Path | None:
    """The shipped artifact, if it was fitted under ``config``'s :func:`shipped_key`."""
    try:
        made = read_json(resources.SHIPPED_DIR / artifact.MANIFEST).get(SHIPPED_KEY)
    except (OSError, ValueError):
        return None
    return resources.SHIPPED_DIR if made == shipped_key(config) else None


#: Manifest field of a shipped artifact: the fitted (not compiled) artifact's query on the
#: first :data:`N_REFERENCE` test-split architectures (more than a small batch: the native
#: predictor), to compare the compiled form against.
REFERENCE = "reference_predictions"
N_REFERENCE = 128


def reference(bench: SurrogateBenchmark) -> dict[str, Any]:
    """``bench``'s query (numeric columns) on the first test-split architectures."""
    from anb.surrogates.fit import prepare

    prepared = prepare(resources.RELEASED_DATASET, split_dir=resources.RELEASED_SPLIT_DIR,
                       space=bench.space)
    return reference_values(bench.query(prepared.choices[prepared.masks["test"]][:N_REFERENCE]))


def reference_values(frame: pd.DataFrame) -> dict[str, Any]:
    """A query's architectures and numeric columns, as the manifest keeps them (see
    :func:`reference_diff`)."""
    return {"archs": frame["arch"].tolist(),
            "values": {c: frame[c].astype(float).tolist() for c in frame.columns
                       if frame[c].dtype.kind in "fb"}}


def reference_diff(bench: SurrogateBenchmark) -> tuple[float, float]:
    """Largest absolute and relative difference of ``bench``'s query from the reference
    predictions in its manifest (see :data:`REFERENCE`)."""
    ref = bench.info[REFERENCE]
    frame = bench.query(ref["archs"])
    absolute = relative = 0.0
    for column, values in ref["values"].items():
        expected = np.asarray(values, dtype=float)
        diff = np.abs(frame[column].to_numpy(dtype=float) - expected)
        absolute = max(absolute, float(diff.max()))
        relative = max(relative, float((diff / np.maximum(np.abs(expected), 1e-12)).max()))
    return absolute, relative


def cache_path(name: str = resources.PACKAGED_BENCHMARK,
               config: str | Path | FitConfig | None = None) -> Path:
    """The cache folder of the packaged benchmark ``name`` fitted with ``config``."""
    _check_name(name)
    digest = hashlib.sha256(json.dumps(cache_key(fit_config(config)), sort_keys=True).encode())
    return cache_root() / name / f"{__version__}-{digest.hexdigest()[:16]}"


def packaged_folder(name: str = resources.PACKAGED_BENCHMARK) -> Path:
    """The folder :func:`load` reads the packaged benchmark ``name`` (default config) from:
    the shipped one, or the cache folder, fitted into it first if it is not there yet."""
    _check_name(name)
    if name in resources.HELP_BENCHMARKS:
        from anb.surrogates import help_benchmark

        return help_benchmark.folder(name)
    ready = shipped(FitConfig())
    if ready is not None:
        return ready
    path = cache_path(name)
    if not (path / artifact.MANIFEST).is_file():
        _load_packaged(name, None, None, quiet=False, started=time.perf_counter())
    return path


def _check_name(name: str) -> None:
    if name not in PACKAGED:
        raise ValueError(f"unknown packaged benchmark {name!r} and no folder of that name; "
                         f"allowed: {list(PACKAGED)} or the folder of a benchmark written by "
                         "`anb fit` or `anb adapt`")


def say(quiet: bool, text: str) -> None:
    """One ``anb: <text>`` line on stderr unless ``quiet``."""
    if not quiet:
        print(f"anb: {text}", file=sys.stderr, flush=True)


def _load_packaged(name: str, config: str | Path | FitConfig | None, n_jobs: int | None,
                   quiet: bool, started: float) -> SurrogateBenchmark:
    """The packaged benchmark: the shipped one, or fitted on first use and cached (see the
    module docstring)."""
    if name in resources.HELP_BENCHMARKS:
        from anb.surrogates import help_benchmark

        return help_benchmark.load(name, config, n_jobs, quiet, started)
    config = fit_config(config)
    cache_root()  # a bad $ANB_CACHE_DIR is reported whether or not this load needs the cache
    bench = _load_or_fit(name, config, n_jobs, quiet, started)
    bench.info[RELEASED] = {"name": name, **released_key()}
    return bench


def packaged_identity(name: str = resources.PACKAGED_BENCHMARK) -> dict[str, Any]:
    """The identity (:func:`anb.surrogates.identity.identity`) of the packaged benchmark
    ``name`` as :func:`load` gives it with the default config, read from the shipped manifest
    without loading its models."""
    from types import SimpleNamespace

    from anb.surrogates.identity import identity

    _check_name(name)
    if name in resources.HELP_BENCHMARKS:
        from anb.surrogates import help_benchmark

        info = read_json(help_benchmark.shipped_dir(name) / artifact.MANIFEST)
        return identity(SimpleNamespace(info={**info,
                                              RELEASED: help_benchmark.released(name, info)}))
    info = read_json(resources.SHIPPED_DIR / artifact.MANIFEST)
    return identity(SimpleNamespace(info={**info, RELEASED: {"name": name, **released_key()}}))


def released_key() -> dict[str, Any]:
    """The hashes of the released data and split a packaged benchmark is fitted on."""
    data, split = _released_hashes()
    return {"data_sha256": data, "split_sha256": dict(split)}


@functools.cache
def _released_hashes() -> tuple[str, tuple[tuple[str, str], ...]]:
    """The package's released files, hashed once per process (a load needs them twice: the
    shipped artifact's key and the identity)."""
    split = tuple((p.name, sha256_file(p))
                  for p in sorted(resources.RELEASED_SPLIT_DIR.glob("*.json")))
    return sha256_file(resources.RELEASED_DATASET), split


def _load_or_fit(name: str, config: FitConfig, n_jobs: int | None, quiet: bool,
                 started: float) -> SurrogateBenchmark:
    from filelock import FileLock

    ready = shipped(config)
    if ready is not None:
        bench = artifact.load(ready)
        say(quiet, f"loaded the packaged benchmark {name!r} in "
                    f"{time.perf_counter() - started:.2f} s")
        return bench
    if config == FitConfig() and (resources.SHIPPED_DIR / artifact.MANIFEST).is_file():
        say(quiet, f"the shipped fitted {name!r} was made for other inputs (data, config, "
                    "fitting code or anb version; scripts/build_packaged.py remakes it): not used")
    path = cache_path(name, config)
    if (path / artifact.MANIFEST).is_file():
        try:
            return _load(path, quiet, started)
        except ValueError as err:  # damaged after it was written: refit under the lock
            say(quiet, f"the cached benchmark {path} is unreadable ({err}); fitting it again")
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT):
        if (path / artifact.MANIFEST).is_file():  # another process fitted it while we waited
            try:
                return _load(path, quiet, started)
            except ValueError:
                pass
        return _fit(name, path, config, n_jobs, quiet)


def _load(path: Path, quiet: bool, started: float) -> SurrogateBenchmark:
    bench = artifact.load(path)
    say(quiet, f"loaded the cached benchmark {path} in {time.perf_counter() - started:.2f} s")
    return bench


def _fit(name: str, path: Path, config: FitConfig, n_jobs: int | None, quiet: bool
         ) -> SurrogateBenchmark:
    from anb.surrogates.api import fit

    if path.exists():  # unreadable or incomplete: not ours to trust, refit
        shutil.rmtree(path)
    jobs = n_jobs or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1)
    targets = ", ".join(config.targets) if config.targets else "every target"
    say(quiet, f"first use of {name!r}: fitting the surrogates ({targets}) on the packaged "
                f"dataset ({resources.RELEASED_DATASET.name}, published "
                f"split) with {jobs} thread(s); cached in {path}")
    start = time.perf_counter()
    bench, _ = fit(resources.RELEASED_DATASET, path, config=config,
                   split_dir=resources.RELEASED_SPLIT_DIR, n_jobs=jobs, progress=not quiet)
    say(quiet, f"fitted and cached {name!r} in {time.perf_counter() - start:.1f} s; "
                "later loads read the cache")
    return artifact.load(path)


def benchmark_space(name_or_path: str | Path | Any) -> Space:
    """The search space of a benchmark (a packaged name, a folder, or one loaded), read from
    its manifest without loading models: so a command can check its other inputs first. A
    folder whose manifest cannot be read gives the default space (loading it then says why)."""
    if not isinstance(name_or_path, (str, Path)):
        return name_or_path.space
    path = Path(name_or_path)
    if not path.exists():
        _check_name(str(name_or_path))
        if str(name_or_path) in resources.HELP_BENCHMARKS:
            from anb.surrogates.help_benchmark import check_name

            return get_space(check_name(str(name_or_path)))
        return get_space(DEFAULT_SPACE)
    from anb.surrogates.adapt.base import resolve_base
    from anb.surrogates.adapt.model import is_adapted

    try:
        manifest = read_json(path / artifact.MANIFEST)
        if is_adapted(path):
            base = manifest["base"]
            return benchmark_space(base.get("packaged") or resolve_base(path, base))
        return get_space(manifest["space"]["name"])
    except (ValueError, OSError, KeyError, TypeError):
        return get_space(DEFAULT_SPACE)


def load(name_or_path: str | Path = resources.PACKAGED_BENCHMARK,
         config: str | Path | FitConfig | None = None, n_jobs: int | None = None,
         quiet: bool = False, started: float | None = None
         ) -> SurrogateBenchmark | AdaptedBenchmark:
    """A benchmark: a packaged one by name (``"accel-nasbench"``, fitted on first use and
    cached), or a saved folder of either kind (told apart by its manifest's ``format``): an
    ``anb fit`` artifact or an ``anb adapt`` one (its base benchmark plus the adapted devices).

    ``config`` (packaged only): a FitConfig (or its JSON file) instead of the packaged
    default; it is part of the cache key. ``n_jobs``: threads for queries and for the
    first-use fit (default: the CPUs this process may use). ``quiet``: no progress on stderr.
    ``started``: the ``time.perf_counter()`` the caller started at (:func:`anb.load` passes
    it, so the time reported counts the imports too).
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"name_or_path {name_or_path!r} is not a benchmark; allowed: a packaged "
                        f"name {list(PACKAGED)} or the folder of an `anb fit` / `anb adapt` "
                        "benchmark (str or Path)")
    if not Path(name_or_path).exists():
        _check_name(str(name_or_path))
        bench = _load_packaged(str(name_or_path), config, n_jobs, quiet,
                               time.perf_counter() if started is None else started)
        if n_jobs is not None:
            bench.set_threads(n_jobs)
        return bench
    if config is not None:
        raise ValueError(f"config is for a packaged benchmark ({list(PACKAGED)}); "
                         f"{str(name_or_path)!r} is a folder, fitted already")
    from anb.surrogates.adapt.model import is_adapted, load_adapted  # a folder's kind

    if is_adapted(name_or_path):
        return load_adapted(name_or_path, n_jobs=n_jobs)
    return artifact.load(name_or_path, n_jobs=n_jobs)
