"""Surrogate models: architectures in, predicted accuracy and device speed with uncertainty out.

>>> import anb.surrogates as S
>>> bench = S.load("accel-nasbench")  # doctest: +SKIP  (the same function as anb.load)
>>> bench.query(["e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"])  # +SKIP

The names below are imported on first use: loading and querying a benchmark never imports
the fitting and evaluation modules (nor the CLI's libraries they bring).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anb.surrogates.api import evaluate_artifact, fit
    from anb.surrogates.artifact import read_manifest, save
    from anb.surrogates.benchmark import SurrogateBenchmark
    from anb.surrogates.compat import load_ensemble
    from anb.surrogates.ensemble import TargetSurrogate
    from anb.surrogates.estimators import FAMILIES, make_family
    from anb.surrogates.fit import FitConfig, TargetConfig, evaluate, fit_benchmark, prepare
    from anb.surrogates.metrics import regression_metrics
    from anb.surrogates.packaged import load

#: The module each public name comes from.
HOMES = {
    "evaluate_artifact": "api", "fit": "api", "read_manifest": "artifact", "save": "artifact",
    "SurrogateBenchmark": "benchmark", "load_ensemble": "compat", "TargetSurrogate": "ensemble",
    "FAMILIES": "estimators", "make_family": "estimators", "FitConfig": "fit",
    "TargetConfig": "fit", "evaluate": "fit", "fit_benchmark": "fit", "prepare": "fit",
    "regression_metrics": "metrics", "load": "packaged",
}

__all__ = [
    "FAMILIES", "FitConfig", "SurrogateBenchmark", "TargetConfig", "TargetSurrogate",
    "evaluate", "evaluate_artifact", "fit", "fit_benchmark", "load", "load_ensemble",
    "make_family", "prepare", "read_manifest", "regression_metrics", "save",
]

# Loading a benchmark imports the module ``anb.surrogates.fit`` (its FitConfig), which sets this
# package's attribute ``fit`` to that module: imported here and the attribute dropped, ``fit``
# stays the function from ``api`` (via __getattr__), as it was when this file imported it.
importlib.import_module(f"{__name__}.fit")
del globals()["fit"]


def __getattr__(name: str) -> Any:
    if name not in HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{HOMES[name]}"), name)
    globals()[name] = value
    return value
