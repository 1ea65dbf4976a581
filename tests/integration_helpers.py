"""Small fitted benchmarks the adapter tests share: the packaged space on the released data
(accuracy, one FPGA latency, train_time) and NAS-Bench-201 on HELP's real latency table (two
devices whose rankings differ most: Eyeriss and a batch-1 Titan RTX), and hypervolume."""
from __future__ import annotations

import numpy as np
import pandas as pd

from anb.nas.pareto import hypervolume
from anb.resources import HELP_DIR, RELEASED_DATASET
from anb.searchspace.registry import get_space
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, TargetConfig, fit_benchmark, prepare
from anb.surrogates import help_tables as ht

HELP_NB201 = HELP_DIR / "nasbench201_latency.csv.gz"
RELEASED_TARGETS = ["val_top1", "latency_zcu102", "train_time"]
NB201_TARGETS = ["latency_eyeriss", "latency_titan-rtx-1"]
SMALL = FitConfig(hole_folds=0, layer_cost_trim=None, per_target={}, default=TargetConfig(
    "xgboost", {"n_estimators": 150, "learning_rate": 0.15, "n_jobs": 1}, 2))


def released_bench():
    prepared = prepare(RELEASED_DATASET, RELEASED_TARGETS, space=ANB_SPACE)
    return fit_benchmark(prepared, SMALL, progress=False)


def nasbench201_bench(rows: int = 1500):
    space = get_space("nasbench201")
    table = pd.read_csv(HELP_NB201).iloc[:rows]
    frame = ht.to_frame(table, space, ("eyeriss", "titan_rtx_1"))
    prepared = prepare(frame, NB201_TARGETS, split="random", space=space)
    return fit_benchmark(prepared, SMALL, progress=False)


def front_volume(values: pd.DataFrame, objectives: dict[str, bool],
                 reference: dict[str, float]) -> float:
    """Hypervolume of ``values``' rows over ``objectives`` (name -> maximised) from
    ``reference`` (a value per objective, worse than any point that counts)."""
    names = list(objectives)
    sign = np.array([1.0 if objectives[n] else -1.0 for n in names])
    scores = values[names].to_numpy(dtype=float) * sign
    return hypervolume(scores, np.array([reference[n] for n in names]) * sign)
