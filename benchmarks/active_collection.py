"""Active collection on the released data: does ``anb plan``'s acquisition beat random picks?

    .venv/bin/python benchmarks/active_collection.py [--seeds 3] [--batches 9] [--on test|val]
        [--targets val_top1,...] [--cost-power 1] [--diversity 1] [--quick]

Pool-based simulation: the pool is the published train + val rows (``--on val``: train only,
scored on val, for choosing settings); the test split is only scored. Each seed draws a random
start of 100 pool architectures, then adds batches of 100 either uniformly at random or by the
plan's acquisition (:func:`anb.surrogates.plan.propose`, all targets at once: uncertainty over
every target, cost = predicted training GPU-hours). After each batch the planner model is fitted
on what was collected and scored (Kendall tau per target on the scored split); its GPU-hours are
the collected rows' ``train_time`` x 4 GPUs; the stopping signal
(:func:`anb.surrogates.plan.quality`) is compared with the scored tau. The full-pool reference
is the same planner model fitted on the whole pool. ``--quick``: 1 seed, 3 batches, top-1 and
ZCU102 throughput.

What was tried and measured to choose these settings:
docs/decisions/plan.md (the site's "How the numbers were chosen").
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
from scipy.stats import kendalltau

from anb import resources
from anb.searchspace.base import Space
from anb.searchspace.space import ANB_SPACE
from anb.surrogates.data import ACCURACY_TARGET
from anb.surrogates.fit import prepare
from anb.surrogates.plan import (
    COST_COLUMN,
    Collected,
    PlanConfig,
    PlanModel,
    bootstrap_std,
    propose,
    quality,
)

GPUS = 4  # train_time is seconds on 4 x RTX 3090


def scored_pairs(model: PlanModel, data: Collected, rows: np.ndarray, targets: list[str]
                 ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per target, the labelled ``rows``' labels and the fitted planner's mean predictions."""
    preds = model.members(data.choices[rows])
    out = {}
    for t in targets:
        y, p = data.y[t][rows], preds[t].mean(1)
        ok = np.isfinite(y)
        out[t] = (y[ok], p[ok])
    return out


def scores(model: PlanModel, data: Collected, rows: np.ndarray, targets: list[str]
           ) -> dict[str, float]:
    """Kendall tau of the fitted planner on ``rows`` per target."""
    return {t: float(kendalltau(y, p)[0])
            for t, (y, p) in scored_pairs(model, data, rows, targets).items()}


def simulate(data: Collected, hours: np.ndarray, pool: np.ndarray, scored: np.ndarray,
             space: Space, targets: list[str], strategy: str, config: PlanConfig, start: int,
             batches: int, seed: int, stopping: bool = False) -> list[dict]:
    """One run: rows per batch with n, GPU-hours, tau per target (and the stopping signal)."""
    rng = np.random.default_rng(seed)
    taken = rng.choice(pool, start, replace=False)
    config = replace(config, seed=seed)
    rows = []
    for b in range(batches + 1):
        collected = data.subset(taken)
        model = PlanModel(config, space).fit(collected)
        row = {"batch": b, "n": len(taken), "gpu_hours": float(hours[taken].sum()),
               "tau": scores(model, data, scored, targets)}
        if stopping:
            q = quality(collected, config, space, targets, model=model)
            row["estimate"] = {t: v.tau for t, v in q.items()}
            row["estimate_std"] = {t: v.tau_std for t, v in q.items()}
            row["gain"] = {t: v.gain for t, v in q.items()}
        rows.append(row)
        if b == batches:
            break
        left = np.setdiff1d(pool, taken)
        if strategy == "random":
            new = rng.choice(left, config.batch, replace=False)
        else:
            new = left[propose(collected, data.choices[left], config, space, targets, model).index]
        taken = np.concatenate([taken, new])
    return rows


def _hours_to(curve: list[tuple[float, float]], goal: float) -> float:
    """The first GPU-hours at which the mean curve reaches ``goal`` (inf: never)."""
    return next((h for h, tau in curve if tau >= goal), float("inf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=9)
    parser.add_argument("--on", choices=("test", "val"), default="test")
    parser.add_argument("--targets", default=None)
    parser.add_argument("--cost-power", type=float, default=PlanConfig.cost_power)
    parser.add_argument("--diversity", type=float, default=PlanConfig.diversity)
    parser.add_argument("--strategies", default="random,active")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.batches = 1, 3
        args.targets = args.targets or f"{ACCURACY_TARGET},throughput_zcu102"
    clock = time.time()
    prep = prepare(resources.RELEASED_DATASET, space=ANB_SPACE)
    targets = args.targets.split(",") if args.targets else list(prep.labels)
    data = Collected.from_frame(prep.frame, prep.choices, targets)
    hours = np.exp(data.y[COST_COLUMN]) * GPUS / 3600
    masks = prep.masks
    pool_mask = masks["train"] | (masks["val"] if args.on == "test" else False)
    pool, scored = np.flatnonzero(pool_mask), np.flatnonzero(masks[args.on])
    config = PlanConfig(cost_power=args.cost_power, diversity=args.diversity)
    pairs = scored_pairs(PlanModel(config, prep.space).fit(data.subset(pool)), data, scored,
                         targets)
    full = {t: float(kendalltau(y, p)[0]) for t, (y, p) in pairs.items()}
    # the scored tau's own sampling noise: its bootstrap std over the scored rows
    noise = {t: bootstrap_std(y, p, seed=0) for t, (y, p) in pairs.items()}
    full_hours = float(hours[pool].sum())
    runs: dict[str, list[list[dict]]] = {}
    for strategy in args.strategies.split(","):
        runs[strategy] = [simulate(data, hours, pool, scored, prep.space, targets, strategy,
                                   config, 100, args.batches, seed, stopping=strategy != "random")
                          for seed in range(args.seeds)]
    print(f"pool {len(pool)} ({full_hours:.0f} GPU-hours), scored on {args.on} "
          f"({len(scored)}), {args.seeds} seed(s), cost_power {args.cost_power}, "
          f"diversity {args.diversity}, {time.time() - clock:.0f} s")
    print("\n| strategy | n | GPU-h (% pool) | " + " | ".join(targets) + " |")
    print("|---|---|---|" + "---|" * len(targets))
    print(f"| full pool | {len(pool)} | {full_hours:.0f} (100 %) | "
          + " | ".join(f"{full[t]:.3f}" for t in targets) + " |")
    curves: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for strategy, reps in runs.items():
        curves[strategy] = {t: [] for t in targets}
        for b in range(args.batches + 1):
            at = [r[b] for r in reps]
            h = float(np.mean([r["gpu_hours"] for r in at]))
            taus = {t: float(np.mean([r["tau"][t] for r in at])) for t in targets}
            for t in targets:
                curves[strategy][t].append((h, taus[t]))
            print(f"| {strategy} | {at[0]['n']} | {h:.0f} ({100 * h / full_hours:.0f} %) | "
                  + " | ".join(f"{taus[t]:.3f}" for t in targets) + " |")
    print("\nGPU-hours (% of the pool's) at which the mean tau reaches full pool - 0.01 "
          "(goal <= 40 %; inf: not within the run):")
    print("| strategy | " + " | ".join(targets) + " |")
    print("|---|" + "---|" * len(targets))
    for strategy in runs:
        print(f"| {strategy} | " + " | ".join(
            f"{100 * _hours_to(curves[strategy][t], full[t] - 0.01) / full_hours:.0f} %"
            for t in targets) + " |")
    for strategy, reps in runs.items():
        if "estimate" not in reps[0][0]:
            continue
        signalled = {t: [r for rep in reps for r in rep if t in r.get("estimate", {})]
                     for t in targets}
        errors = {t: [abs(r["estimate"][t] - r["tau"][t]) for r in rs]
                  for t, rs in signalled.items()}
        within = {t: [e <= 2 * r["estimate_std"][t] for e, r in zip(errors[t], rs, strict=True)]
                  for t, rs in signalled.items()}
        spread = {t: [r["estimate_std"][t] for r in rs] for t, rs in signalled.items()}
        print(f"\nstopping signal ({strategy}): max / mean |estimate - scored tau| per target "
              "(goal: max <= 0.01); mean std the signal reports; share of batches whose error "
              "is within 2 of its std")
        print(" | ".join(f"{t} {max(e):.3f} / {np.mean(e):.3f}, std {np.mean(spread[t]):.3f}, "
                         f"{np.mean(within[t]):.0%} within" for t, e in errors.items() if e))
        print("the scored tau's own sampling std (bootstrap over the scored rows, full-pool "
              "model): " + " | ".join(f"{t} {noise[t]:.3f}" for t in targets))
        stops = [next((r["n"] for r in rep if r.get("gain") and
                       max(rep_g for rep_g in r["gain"].values()) < config.min_gain), None)
                 for rep in reps]
        print(f"suggested stop at n = {stops} (per seed; None: not within the run)")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
