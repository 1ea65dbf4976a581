"""Surrogate models: architectures in, predicted accuracy and device speed with uncertainty out.

>>> import anb.surrogates as S
>>> bench = S.load("accel-nasbench")  # doctest: +SKIP  (the same function as anb.load)
>>> bench.query(["e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"])  # +SKIP
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as the type checker sees them
    from anb.surrogates.api import evaluate_artifact, fit
    from anb.surrogates.artifact import read_manifest, save
    from anb.surrogates.benchmark import SurrogateBenchmark
    from anb.surrogates.compat import load_ensemble
    from anb.surrogates.ensemble import TargetSurrogate
    from anb.surrogates.estimators import FAMILIES, make_family
    from anb.surrogates.fit import FitConfig, TargetConfig, evaluate, fit_benchmark, prepare
    from anb.surrogates.metrics import regression_metrics
    from anb.surrogates.packaged import load

#: Where each public name lives: imported on first use, so that ``anb.load`` and a query
#: import only the query path (not fitting, its metrics, or scipy.stats).
_WHERE = {
    "evaluate_artifact": "api", "fit": "api", "read_manifest": "artifact", "save": "artifact",
    "SurrogateBenchmark": "benchmark", "load_ensemble": "compat", "TargetSurrogate": "ensemble",
    "FAMILIES": "estimators", "make_family": "estimators", "FitConfig": "fit",
    "TargetConfig": "fit", "evaluate": "fit", "fit_benchmark": "fit", "prepare": "fit",
    "regression_metrics": "metrics", "load": "packaged",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'anb.surrogates' has no attribute {name!r}")
    return getattr(importlib.import_module(f"anb.surrogates.{_WHERE[name]}"), name)


__all__ = [
    "FAMILIES", "FitConfig", "SurrogateBenchmark", "TargetConfig", "TargetSurrogate",
    "evaluate", "evaluate_artifact", "fit", "fit_benchmark", "load", "load_ensemble",
    "make_family", "prepare", "read_manifest", "regression_metrics", "save",
]
