"""anb: build and serve accelerator-aware NAS benchmarks.

>>> import anb
>>> bench = anb.load()          # doctest: +SKIP  (the default benchmark; fitted once, then cached)
>>> bench.query(["e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"])  # +SKIP
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from anb.resources import PACKAGED_BENCHMARK
from anb.version import __version__


def load(name_or_path: str | Path = PACKAGED_BENCHMARK, **kwargs: Any) -> Any:
    """The one way to load a benchmark: a packaged one by name, or a folder written by
    ``anb fit`` or ``anb adapt``; ``kwargs``: ``config``, ``n_jobs``, ``quiet`` (see
    :func:`anb.surrogates.packaged.load`, imported on first call); the time it reports
    includes that import."""
    started = time.perf_counter()
    from anb.surrogates.packaged import load as load_benchmark

    return load_benchmark(name_or_path, **{"started": started, **kwargs})


__all__ = ["__version__", "load"]
