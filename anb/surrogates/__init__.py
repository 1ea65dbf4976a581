"""Surrogate models: architectures in, predicted accuracy and device speed with uncertainty out.

>>> import anb.surrogates as S
>>> bench = S.load("accel-nasbench")  # doctest: +SKIP  (the same function as anb.load)
>>> bench.query(["e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"])  # +SKIP
"""
from anb.surrogates.api import evaluate_artifact, fit
from anb.surrogates.artifact import read_manifest, save
from anb.surrogates.benchmark import SurrogateBenchmark
from anb.surrogates.compat import load_ensemble
from anb.surrogates.ensemble import TargetSurrogate
from anb.surrogates.estimators import FAMILIES, make_family
from anb.surrogates.fit import FitConfig, TargetConfig, evaluate, fit_benchmark, prepare
from anb.surrogates.metrics import regression_metrics
from anb.surrogates.packaged import load

__all__ = [
    "FAMILIES", "FitConfig", "SurrogateBenchmark", "TargetConfig", "TargetSurrogate",
    "evaluate", "evaluate_artifact", "fit", "fit_benchmark", "load", "load_ensemble",
    "make_family", "prepare", "read_manifest", "regression_metrics", "save",
]
