"""How the packaged surrogate defaults are chosen: cross-validation inside train + val.

    nice .venv/bin/python benchmarks/surrogate_defaults.py [--folds 5] [--jobs 2]
        [--settings accuracy_xgb_lr accuracy_svr ...] [--csv /tmp/cv.csv]

Only the published train and val architectures are loaded into the table that is tuned on
(:func:`tuning_frame`): the test split's rows, and the 14 rows in no split file (3 of them repeat a
test architecture), never enter it (``tests/test_surrogate_defaults.py`` checks this on the
folds and on what the fits see). That table is cut into ``--folds`` folds by architecture id
(:func:`cv_folds`); for fold ``i`` the surrogates train on the other folds but ``i + 1`` (early
stopping and the noise term on fold ``i + 1``) and are scored on fold ``i``. Every candidate is
the packaged ``default.json`` with one setting changed, and is scored only on the targets that
setting affects; the other targets are fitted with a one-tree stand-in (each target's ensemble
is independent, and the layer-cost features every target sees are fitted exactly as in the full
config, so the scored targets' models are the ones the full config fits; checked: a no-op
candidate reproduces the default's scores exactly). The default is fitted once per fold.

Decision rule, fixed before the first run: per fold, a candidate's gain is its Kendall tau minus
the default's on the same fold (averaged over the targets the setting affects). A different value
is adopted only when its mean gain over the folds is positive and larger than the fold-to-fold
standard deviation of that gain (mean / sd > 1: a paired t above sqrt(5) = 2.2 with five folds);
of several such values the one with the largest gain. Otherwise the default stays.

Settings compared (grid; the current default is one of the values):

- ``accuracy_xgb_lr``: the accuracy target's XGBoost member, learning rate 0.03 / 0.05 / 0.1
- ``accuracy_svr``: the accuracy target's SVR member, C 1 / 3 / 10 x epsilon 0.02 / 0.05 / 0.1
- ``accuracy_mix``: accuracy members XGBoost + SVR vs XGBoost only (two XGBoost members)
- ``members``: members per target, 1 / 2 / 3 (every target but tpuv3 throughput)
- ``tpuv3_members``: members for tpuv3 throughput, 2 / 3 / 4
- ``zcu102_lr``: learning rate on ``throughput_zcu102`` / ``latency_zcu102``, 0.05 / 0.1 / 0.2
- ``layer_cost_trim``: trimmed layer-cost refit, none / 1.5 / 2.0 / 2.5 / 3.0 / 5.0 (all targets)
- ``layer_cost_saturating``: the saturating time base on every time target / none, against
  the packaged per-target list (chosen with a second rule, ``DEFAULTS.md``)
- ``max_depth`` / ``subsample``: anb's XGBoost wrapper defaults (``XGBoostFamily``: depth 4,
  subsample and colsample 0.8; XGBoost's own are 6 and 1.0) against depth 3 / 6 and 1.0

What was tried and measured to choose these settings:
docs/decisions/surrogate-defaults.md (the site's "How the numbers were chosen").
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import copy
import json
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from anb.resources import RELEASED_DATASET, RELEASED_SPLIT_DIR, config_path
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, evaluate, fit_benchmark
from anb.surrogates.data import (
    frame_choices,
    kfold_splits,
    labels,
    load_table,
    published_split,
    target_columns,
)
from anb.surrogates.fit import Prepared

ACCURACY = "val_top1"
ZCU102 = ("throughput_zcu102", "latency_zcu102")
TPUV3 = "throughput_tpuv3"
#: Stand-in for a target a candidate does not change (fitted, never scored).
STUB = {"family": "xgboost", "params": {"n_estimators": 1, "max_depth": 1}, "n_members": 1}


# ------------------------------------------------------------------ the data tuned on
def tuning_frame(dataset: str | Path = RELEASED_DATASET,
                 split_dir: str | Path = RELEASED_SPLIT_DIR) -> pd.DataFrame:
    """The rows defaults are chosen on: the published train and val architectures only."""
    full = load_table(dataset, space=ANB_SPACE)
    masks = published_split(full, split_dir)
    return full[masks["train"] | masks["val"]].reset_index(drop=True)


def cv_folds(frame: pd.DataFrame, k: int = 5, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Fold ``i``: score on fold ``i``, early stopping / noise on fold ``i + 1``, train on the
    rest (by architecture id, so duplicate measurements stay in one fold)."""
    return kfold_splits(frame, k, seed)


def prepared_fold(frame: pd.DataFrame, masks: dict[str, np.ndarray],
                  targets: list[str]) -> Prepared:
    """The fit input of one fold (no published-split lookup: only the fold masks)."""
    return Prepared(frame, frame_choices(frame, ANB_SPACE), masks,
                    {t: labels(frame, t) for t in targets}, ANB_SPACE)


# ------------------------------------------------------------------ the candidates
@dataclass(frozen=True)
class Candidate:
    setting: str
    name: str
    value: str
    change: Callable[[dict], None]   # edits a copy of the default config in place
    scored: tuple[str, ...] | None   # targets the setting affects (None: all)


def _entry(config: dict, target: str) -> dict:
    """The per-target entry of ``target`` (materialised from ``default`` when absent)."""
    per = config.setdefault("per_target", {})
    if target not in per:
        per[target] = copy.deepcopy(config["default"])
    return per[target]


def _xgb_params(entry: dict) -> list[dict]:
    """The XGBoost parameter dicts of an entry (one per XGBoost family slot)."""
    families = entry["family"] if isinstance(entry["family"], list) else [entry["family"]]
    params = entry["params"] if isinstance(entry["params"], list) else [entry["params"]]
    return [p for f, p in zip(families, params, strict=False) if f == "xgboost"]


def _all_xgb(config: dict, key: str, value) -> None:
    for entry in [config["default"], *config.get("per_target", {}).values()]:
        for params in _xgb_params(entry):
            params[key] = value


def _set_accuracy_lr(lr: float):
    return lambda c: _xgb_params(_entry(c, ACCURACY))[0].__setitem__("learning_rate", lr)


def _set_svr(C: float, epsilon: float):
    def change(c):
        entry = _entry(c, ACCURACY)
        svr = entry["params"][entry["family"].index("svr")]
        svr["C"], svr["epsilon"] = C, epsilon
    return change


def _xgboost_only(c):
    entry = _entry(c, ACCURACY)
    entry["family"], entry["params"] = "xgboost", _xgb_params(entry)[0]


def _set_members(n: int, current: int):
    def change(c):
        for entry in [c["default"], *c.get("per_target", {}).values()]:
            if entry["n_members"] == current:
                entry["n_members"] = n
    return change


def _set_tpuv3_members(n: int):
    return lambda c: _entry(c, TPUV3).__setitem__("n_members", n)


def _set_zcu102_lr(lr: float):
    def change(c):
        for target in ZCU102:
            for params in _xgb_params(_entry(c, target)):
                params["learning_rate"] = lr
    return change


def _set_trim(trim):
    return lambda c: c.__setitem__("layer_cost_trim", trim)


def _set_saturating(value):
    return lambda c: c.__setitem__("layer_cost_saturating", value)


def _set_all_xgb(**values):
    def change(c):
        for key, value in values.items():
            _all_xgb(c, key, value)
    return change


#: The values each setting is compared over (the current default is one of them, or is added).
GRID = {"accuracy_xgb_lr": (0.03, 0.05, 0.1),
        "accuracy_svr": tuple((C, eps) for C in (1.0, 3.0, 10.0) for eps in (0.02, 0.05, 0.1)),
        "members": (1, 2, 3),
        "tpuv3_members": (2, 3, 4),
        "zcu102_lr": (0.05, 0.1, 0.2),
        "layer_cost_trim": (None, 1.5, 2.0, 2.5, 3.0, 5.0),
        "max_depth": (3, 4, 6),
        "subsample": (0.8, 1.0),
        "layer_cost_saturating": (False, True)}


def current_values(base: dict) -> dict[str, object]:
    """What ``base`` (the packaged default config) sets for each compared setting."""
    config = FitConfig.from_dict(base)
    accuracy = config.for_target(ACCURACY)
    families = accuracy.family if isinstance(accuracy.family, list) else [accuracy.family]
    params = accuracy.params if isinstance(accuracy.params, list) else [accuracy.params]
    svr = params[families.index("svr")] if "svr" in families else {}
    return {"accuracy_xgb_lr": params[families.index("xgboost")]["learning_rate"],
            "accuracy_svr": (svr.get("C"), svr.get("epsilon")),
            "accuracy_mix": " + ".join(f for f in ("xgboost", "svr") if f in families),
            "members": config.default.n_members,
            "tpuv3_members": config.for_target(TPUV3).n_members,
            "zcu102_lr": config.for_target(ZCU102[0]).params["learning_rate"],
            "layer_cost_trim": config.layer_cost_trim,
            "max_depth": config.default.params["max_depth"],
            "subsample": config.default.params["subsample"],
            "layer_cost_saturating": config.layer_cost_saturating}


def _show(setting: str, value) -> str:
    if setting == "accuracy_svr":
        return f"C={value[0]:g}, epsilon={value[1]:g}"
    if setting == "subsample":
        return f"{value} (subsample and colsample)"
    if setting == "layer_cost_saturating":
        return ("all" if value else "none") if isinstance(value, bool) \
            else f"{len(value)} targets"
    return str(value)


def candidates(base: dict, targets: list[str]) -> list[Candidate]:
    """Every setting's alternatives to the default (each one decision changed)."""
    now = current_values(base)
    config = FitConfig.from_dict(base)
    same = tuple(t for t in targets if t != TPUV3
                 and config.for_target(t).n_members == now["members"])
    every = {  # setting: (name of a value, change for a value, targets scored)
        "accuracy_xgb_lr": (lambda v: f"accuracy_lr{v}", _set_accuracy_lr, (ACCURACY,)),
        "accuracy_svr": (lambda v: f"svr_C{v[0]:g}_eps{v[1]:g}", lambda v: _set_svr(*v),
                         (ACCURACY,)),
        "members": (lambda v: f"members{v}", lambda v: _set_members(v, now["members"]), same),
        "tpuv3_members": (lambda v: f"tpuv3_members{v}", _set_tpuv3_members, (TPUV3,)),
        "zcu102_lr": (lambda v: f"zcu102_lr{v}", _set_zcu102_lr, ZCU102),
        "layer_cost_trim": (lambda v: f"trim_{v}", _set_trim, None),
        "max_depth": (lambda v: f"depth{v}", lambda v: _set_all_xgb(max_depth=v), None),
        "subsample": (lambda v: f"subsample{v}",
                      lambda v: _set_all_xgb(subsample=v, colsample_bytree=v), None),
        "layer_cost_saturating": (lambda v: f"saturating_{'all' if v else 'none'}",
                                  _set_saturating, None)}
    out = []
    for setting, (name, change, scored) in every.items():
        out += [Candidate(setting, name(v), _show(setting, v), change(v), scored)
                for v in GRID[setting] if v != now[setting]]
        if setting == "accuracy_svr" and now["accuracy_mix"] == "xgboost + svr":
            out.append(Candidate("accuracy_mix", "accuracy_xgboost_only", "XGBoost only",
                                 _xgboost_only, (ACCURACY,)))
    return out


def candidate_config(base: dict, candidate: Candidate | None, targets: list[str]) -> FitConfig:
    """``base`` with the candidate's change; targets it does not affect get the stand-in."""
    data = copy.deepcopy(base)
    if candidate is not None:
        candidate.change(data)
        if candidate.scored is not None:
            for target in targets:
                if target not in candidate.scored:
                    data.setdefault("per_target", {})[target] = copy.deepcopy(STUB)
    return FitConfig.from_dict({**data, "targets": targets})


# ------------------------------------------------------------------ scoring
_STATE: dict = {}


def _init(frame, folds, base, targets):
    _STATE.update(frame=frame, folds=folds, base=base, targets=targets,
                  candidates={c.name: c for c in candidates(base, targets)})


def _score(task: tuple[str, int]) -> list[dict]:
    name, i = task
    frame, targets = _STATE["frame"], _STATE["targets"]
    candidate = _STATE["candidates"].get(name)
    config = candidate_config(_STATE["base"], candidate, targets)
    sub = prepared_fold(frame, _STATE["folds"][i], targets)
    start = time.perf_counter()
    scores = evaluate(fit_benchmark(sub, config, progress=False), sub, "test")
    scored = targets if candidate is None or candidate.scored is None else candidate.scored
    seconds = time.perf_counter() - start
    print(f"{name} fold {i}: {seconds:.0f} s", flush=True)
    return [{"candidate": name, "fold": i, "target": t, "tau": scores.loc[t, "kendall_tau"],
             "r2": scores.loc[t, "r2"], "seconds": seconds} for t in scored]


def run_cv(frame: pd.DataFrame, folds: list[dict[str, np.ndarray]], base: dict,
           names: list[str] | None = None, jobs: int = 1) -> pd.DataFrame:
    """Per-fold, per-target CV scores of the default and of the named candidates (all when
    ``names`` is None)."""
    targets = target_columns(frame)
    chosen = [c.name for c in candidates(base, targets) if names is None or c.name in names]
    tasks = [(name, i) for name in ["default", *chosen] for i in range(len(folds))]
    if jobs == 1:
        _init(frame, folds, base, targets)
        rows = [r for task in tasks for r in _score(task)]
    else:
        with ProcessPoolExecutor(jobs, initializer=_init,
                                 initargs=(frame, folds, base, targets)) as pool:
            rows = [r for part in pool.map(_score, tasks) for r in part]
    return pd.DataFrame(rows)


def summarise(scores: pd.DataFrame, base: dict, targets: list[str]) -> pd.DataFrame:
    """One row per candidate: mean CV tau over its targets, the default's on the same targets,
    the paired per-fold gain (mean, sd, folds won) and the verdict of the decision rule."""
    default = scores[scores.candidate == "default"].set_index(["fold", "target"])["tau"]
    now = current_values(base)
    rows = []
    for cand in candidates(base, targets):
        mine = scores[scores.candidate == cand.name]
        if mine.empty:
            continue
        mine = mine.set_index(["fold", "target"])["tau"]
        ref = default.loc[mine.index]
        gain = (mine - ref).groupby("fold").mean()
        sd = float(gain.std(ddof=1)) if len(gain) > 1 else float("nan")
        clear = gain.mean() > 0 and gain.mean() > sd
        shown = "XGBoost + SVR" if cand.setting == "accuracy_mix" else \
            _show(cand.setting, now[cand.setting])
        rows.append({"setting": cand.setting, "default": shown,
                     "candidate": cand.value, "targets": len(mine.index.unique("target")),
                     "tau_default": ref.mean(), "tau_candidate": mine.mean(),
                     "gain": gain.mean(), "sd": sd, "won": f"{int((gain > 0).sum())}/{len(gain)}",
                     "clear": bool(clear)})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--use-folds", type=int, default=None, help="score only the first N")
    parser.add_argument("--settings", nargs="+", default=None, help="default: all")
    parser.add_argument("--jobs", type=int, default=1, help="processes (one thread each)")
    parser.add_argument("--csv", type=Path, default=None, help="write the per-fold scores here")
    args = parser.parse_args()
    start = time.perf_counter()
    frame = tuning_frame()
    folds = cv_folds(frame, args.folds)[:args.use_folds or args.folds]
    base = json.loads(config_path("surrogates", "default.json").read_text())
    targets = target_columns(frame)
    names = None if args.settings is None else [
        c.name for c in candidates(base, targets) if c.setting in args.settings]
    print(f"{len(frame)} train + val rows, {len(folds)} folds, {len(targets)} targets", flush=True)
    scores = run_cv(frame, folds, base, names, args.jobs)
    if args.csv is not None:
        scores.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    per_target = scores.pivot_table(index="target", columns="candidate", values="tau")
    print("\n== default: CV tau per target (mean and fold-to-fold sd) ==")
    d = scores[scores.candidate == "default"].groupby("target")["tau"]
    print(pd.DataFrame({"mean": d.mean(), "sd": d.std(ddof=1)}).round(4).to_string())
    print("\n== mean CV tau per target and candidate ==")
    print(per_target.round(4).to_string())
    print("\n== each setting against the default (gain: mean paired per-fold tau gain over the "
          "targets the setting affects; adopted only when gain > 0 and gain > sd) ==")
    print(summarise(scores, base, targets).round(5).to_string(index=False))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
