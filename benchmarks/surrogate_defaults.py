"""How the packaged surrogate defaults are chosen: cross-validation inside train + val.

    nice .venv/bin/python benchmarks/surrogate_defaults.py [--folds 5] [--targets ...]

The published test split is left out entirely (its rows are dropped before anything else). The
remaining train + val architectures are cut into ``--folds`` folds by architecture id; for fold
``i`` the surrogates train on the other folds but ``i + 1`` (early stopping and the noise term on
fold ``i + 1``) and are scored on fold ``i``. Each candidate is the packaged default config with
one decision changed; a change is adopted when it raises the mean CV Kendall tau over the
targets. The decisions compared are the ones the default config makes beyond the family's
own defaults: learning rate 0.2 on the ZCU102 targets, the trimmed layer-cost refit, and the
XGBoost + SVR mix for accuracy.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import copy
import json
import time

import numpy as np
import pandas as pd

from anb.resources import RELEASED_DATASET, config_path
from anb.surrogates import FitConfig, evaluate, fit_benchmark, prepare
from anb.surrogates.data import kfold_splits
from anb.surrogates.fit import Prepared


def candidates(base: dict) -> dict[str, dict]:
    """The default config and one-decision variations of it."""
    out = {"default": base}
    slower = copy.deepcopy(base)
    for target in ("throughput_zcu102", "latency_zcu102"):
        if target in slower["per_target"]:
            slower["per_target"][target]["params"]["learning_rate"] = 0.1
    out["zcu102_lr0.1"] = slower
    untrimmed = copy.deepcopy(base)
    untrimmed["layer_cost_trim"] = None
    out["no_trim"] = untrimmed
    xgb_only = copy.deepcopy(base)
    accuracy = xgb_only["per_target"].get("val_top1")
    if accuracy is not None:
        xgb_only["per_target"]["val_top1"] = {**accuracy, "family": "xgboost",
                                              "params": accuracy["params"][0]}
    out["accuracy_xgboost_only"] = xgb_only
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--use-folds", type=int, default=None, help="score only the first N")
    parser.add_argument("--targets", nargs="+", default=None, help="default: all")
    args = parser.parse_args()
    full = prepare(RELEASED_DATASET, args.targets)
    pool = full.masks["train"] | full.masks["val"]  # the test split never enters
    frame = full.frame[pool].reset_index(drop=True)
    prepared = prepare(frame, args.targets)
    base = json.loads(config_path("surrogates", "default.json").read_text())
    folds = kfold_splits(frame, args.folds, seed=0)[:args.use_folds or args.folds]
    rows = []
    for name, data in candidates(base).items():
        config = FitConfig.from_dict({**data, "targets": list(prepared.labels)})
        for i, masks in enumerate(folds):
            start = time.perf_counter()
            sub = Prepared(prepared.frame, prepared.choices, masks, prepared.labels)
            scores = evaluate(fit_benchmark(sub, config, progress=False), sub, "test")
            for target, row in scores.iterrows():
                rows.append({"candidate": name, "fold": i, "target": target,
                             "tau": row["kendall_tau"], "r2": row["r2"]})
            print(f"{name} fold {i}: {time.perf_counter() - start:.0f} s", flush=True)
    table = pd.DataFrame(rows).groupby(["target", "candidate"])[["tau", "r2"]].mean()
    pd.set_option("display.width", 200)
    print("\n== mean CV scores inside train + val ==")
    print(table.round(4).to_string())
    print("\n== each decision against the default (mean CV tau over all targets; a change is "
          "adopted when it raises it) ==")
    tau = table["tau"].unstack("candidate")
    for name in tau.columns.drop("default"):
        delta = tau[name] - tau["default"]
        verdict = "adopt" if delta.mean() > 0 else "keep the default"
        print(f"{name}: mean delta tau {delta.mean():+.5f} ({verdict}); per target "
              + ", ".join(f"{t} {d:+.4f}" for t, d in delta.items() if d != 0))

if __name__ == "__main__":
    main()
