"""anb: build and serve accelerator-aware NAS benchmarks.

>>> import anb
>>> bench = anb.load()          # doctest: +SKIP  (the default benchmark; fitted once, then cached)
>>> bench.query(["e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"])  # +SKIP
"""
from __future__ import annotations

from typing import Any

from anb.version import __version__


def load(name: str = "accel-nasbench", **kwargs: Any) -> Any:
    """The packaged benchmark ``name`` (see :func:`anb.surrogates.packaged.load_packaged`), or a
    benchmark folder written by ``anb fit`` or ``anb adapt`` (see
    :func:`anb.surrogates.packaged.load`; ``kwargs``: its ``n_jobs``)."""
    from pathlib import Path

    from anb.surrogates.packaged import load as load_folder
    from anb.surrogates.packaged import load_packaged

    if Path(name).exists():
        return load_folder(name, **kwargs)
    return load_packaged(str(name), **kwargs)


__all__ = ["__version__", "load"]
