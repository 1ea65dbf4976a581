"""Surrogate benchmark: accuracy vs baselines, uncertainty, fit time and query speed.

    nice .venv/bin/python benchmarks/surrogates.py [--config configs/surrogates/default.json]
        [--out /tmp/anb-surrogates] [--report /tmp/anb-surrogates-report] [--jobs 2]
        [--targets train_time]

Fits the full benchmark from the released dataset on the published split, re-measures the
reference's baselines (XGBoost and LightGBM on the ordinal encoding with its tuned settings,
docs/background/accel-nasbench.md, "Baseline hyper-parameters") in the same run, and prints our
test metrics beside both and beside the published numbers ("Published scores" there), the
distance to each Kendall-tau goal, interval coverage, and query timings (medians) against the
baseline's models.

What was tried and measured to choose these settings:
docs/decisions/surrogates.md (the site's "How the numbers were chosen").
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

from anb.resources import RELEASED_DATASET as DATA
from anb.searchspace import Sampler
from anb.searchspace.encoding import encode
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, evaluate, fit_benchmark, intervals, load, prepare, save
from anb.surrogates.baseline import (
    REFERENCE_BASELINES,
    TAU_GOALS,
    comparison_table,
    evaluate_baselines,
)
from anb.surrogates.report import parity_plots, write_report

ROOT = Path(__file__).resolve().parents[1]


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def required_check(comp: pd.DataFrame) -> pd.DataFrame:
    """The issue's required bar: >= the better baseline (re-measured and REFERENCE) in R^2 and
    tau, and +0.01 tau on tpuv3, zcu102 and vck190 throughput."""
    rows = []
    for target, row in comp.iterrows():
        extra = 0.01 if target in ("throughput_tpuv3", "throughput_zcu102",
                                   "throughput_vck190") else 0.0
        rows.append({"target": target, "r2_ok": row["d_r2_vs_best"] >= 0,
                     "tau_ok": row["d_tau_vs_best"] >= extra,
                     "tau_goal_ok": row.get("to_goal", np.nan) >= 0})
    return pd.DataFrame(rows).set_index("target")


def extrapolation_check(prepared, config) -> pd.DataFrame:
    """Fit on architectures with MACs at or below the 80th percentile (their train / val rows),
    score every architecture above it: 90 % coverage, median std outside vs inside, flagged
    share. Never reads the test labels of the low-MACs rows."""
    from anb.searchspace.counting import cost_table

    macs = cost_table(prepared.choices, space=ANB_SPACE).total("macs")
    cut = np.quantile(macs, 0.8)
    low, high = macs <= cut, macs > cut
    masks = {"train": low & prepared.masks["train"], "val": low & prepared.masks["val"],
             "test": np.zeros(len(macs), dtype=bool)}
    sub = dataclasses.replace(prepared, masks=masks)
    bench = fit_benchmark(sub, config, progress=False)
    out = bench.query(prepared.choices[high])
    inside = bench.query(prepared.choices[masks["val"]])
    rows = []
    for target in bench.metrics:
        lab = prepared.labels[target]
        ok = lab.present[high]
        rel = target != "val_top1"  # device metrics: std relative to the mean
        std_out = out[f"{target}_std"] / (out[target] if rel else 1)
        std_in = inside[f"{target}_std"] / (inside[target] if rel else 1)
        rows.append({"target": target, "n_out": int(ok.sum()),
                     "coverage90_out": intervals.coverage(
                         lab.values[high][ok], out[target].to_numpy()[ok],
                         out[f"{target}_std"].to_numpy()[ok],
                         log=bench.transforms[target] == "log"),
                     "median_std_out": float(std_out.median()),
                     "median_std_in": float(std_in.median()),
                     "flagged_out": float(out["ood"].mean()),
                     "flagged_in": float(inside["ood"].mean())})
    return pd.DataFrame(rows).set_index("target")


def quartile_coverage(bench, prepared, split: str) -> pd.DataFrame:
    """90 % coverage of the query's interval (model space, std as the query widens it) per
    quartile of the true target value on ``split``: a calibration that an average hides."""
    rows = prepared.masks[split]
    dist = bench.predict_transformed(prepared.choices[rows])
    out = {}
    for target, (mean, std) in dist.items():
        lab = prepared.labels[target]
        ok = lab.present[rows]
        y = lab.values[rows][ok]
        y = np.log(y) if bench.transforms[target] == "log" else y
        quartile = np.searchsorted(np.quantile(y, [0.25, 0.5, 0.75]), y, side="right")
        out[target] = {f"Q{q + 1}": intervals.coverage(
            y[quartile == q], mean[ok][quartile == q], std[ok][quartile == q], log=False)
            for q in range(4)}
        out[target]["all"] = intervals.coverage(y, mean[ok], std[ok], log=False)
    return pd.DataFrame(out).T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--config", default=str(ROOT / "configs/surrogates/default.json"))
    parser.add_argument("--out", default="/tmp/anb-surrogates")
    parser.add_argument("--report", default=None)
    parser.add_argument("--jobs", type=int, default=1,
                        help="threads per model (1 is fastest on a shared 2-core machine)")
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--skip-extrapolation", action="store_true")
    parser.add_argument("--targets", default=None,
                        help="comma-separated targets (default: all the dataset holds)")
    args = parser.parse_args()
    pd.set_option("display.width", 220)
    pd.set_option("display.max_columns", 30)

    prepared = prepare(args.data, args.targets.split(",") if args.targets else None,
                       space=ANB_SPACE)
    config = FitConfig.from_file(args.config)
    from anb.surrogates.api import _with_jobs

    config = _with_jobs(config, args.jobs)
    start = time.perf_counter()
    bench = fit_benchmark(prepared, config)
    fit_seconds = time.perf_counter() - start
    save(bench, args.out)
    bench = load(args.out)
    ours = evaluate(bench, prepared, "test")

    baselines, base_seconds, fitted = None, float("nan"), {}
    if not args.skip_baseline:
        start = time.perf_counter()
        baselines = evaluate_baselines(prepared, list(ours.index), n_jobs=args.jobs,
                                       fitted=fitted)
        base_seconds = time.perf_counter() - start
    comp = comparison_table(ours, baselines)

    print("\n== test split: our models ==")
    print(ours.round(4).to_string())
    if baselines is not None:
        print("\n== test split: baselines re-measured in this run (ordinal encoding) ==")
        print(baselines[["r2", "kendall_tau", "sparse_kendall_tau", "mae"]].round(4).to_string())
    print("\n== comparison (ours vs best of re-measured and REFERENCE; to_goal = tau - goal) ==")
    print(comp.round(4).to_string())
    print("\n== required bar and goals ==")
    print(required_check(comp).to_string())

    # ---------------------------------------------------------------- uncertainty
    test = prepared.masks["test"]
    X = bench.builder.transform(prepared.choices[test])
    rows = []
    for target, model in bench.models.items():
        lab = prepared.labels[target]
        ok = lab.present[test]
        y = np.log(lab.values[test][ok]) if bench.transforms[target] == "log" \
            else lab.values[test][ok]
        mean, spread = model.predict_members(X[ok])
        rows.append({"target": target, "noise_std": model.noise_std_,
                     "median_spread": float(np.median(spread)),
                     "coverage90_spread_only": intervals.coverage(y, mean, spread, log=False),
                     "coverage90_ours": intervals.coverage(
                         y, mean, np.sqrt(spread**2 + model.noise_at(mean) ** 2), log=False)})
    print("\n== uncertainty on test (model space: log for device metrics, pp for accuracy) ==")
    print(pd.DataFrame(rows).set_index("target").round(4).to_string())
    print("\n== 90 % coverage per quartile of the true value on test (model space; Q1: the "
          "lowest accuracy, throughput or latency; goal 0.85-0.95 each) ==")
    print(quartile_coverage(bench, prepared, "test").round(3).to_string())
    frame = prepared.frame
    dup = frame[frame["arch_id"].duplicated(keep=False)]
    if "val_top1" in bench.models:
        diffs = dup.groupby("arch_id")["val_top1"].agg(lambda v: v.iloc[0] - v.iloc[1])
        print(f"accuracy: 13 architectures trained twice (all rows, test included: a report, "
              f"not an input) -> per-run noise std "
              f"{np.sqrt(np.mean(diffs**2) / 2):.3f} pp (robust: "
              f"{1.4826 * np.median(np.abs(diffs)) / np.sqrt(2):.3f} pp); "
              f"our noise term {bench.models['val_top1'].noise_std_:.3f} pp")

    print("\n== observation noise (what noise=True draws; model space) vs model noise term ==")
    print(pd.DataFrame({t: {"observation_std": m.std_terms_.observation_std,
                            "model_noise_std": m.noise_std_}
                        for t, m in bench.models.items()}).T.round(5).to_string())

    # ---------------------------------------------------------------- extrapolation
    if not args.skip_extrapolation:
        print("\n== held-out extrapolation: fit on MACs <= 80th percentile, score the rest "
              "(std relative to the mean for device metrics; goal coverage >= 0.85, "
              "std_out > std_in) ==")
        print(extrapolation_check(prepared, config).round(4).to_string())

    # ---------------------------------------------------------------- speed
    many = Sampler(seed=0, space=ANB_SPACE).sample_choices(10_000)
    one = many[:1]
    bench.query(many)
    bench.query(one)
    t_many = median_time(lambda: bench.query(many), 5)
    t_one = median_time(lambda: bench.query(one), 200)
    print("\n== query speed (medians, this machine) ==")
    print(f"ours: 10,000 archs x {len(bench.metrics)} targets with std: {t_many:.3f} s "
          f"(goal < 1 s); one arch, all targets: {1000 * t_one:.2f} ms (goal < 5 ms)")
    if fitted:
        x1 = encode(one, "ordinal", space=ANB_SPACE)
        base_one, base_many = [], []
        for (_target, family), model in fitted.items():
            if family != "xgboost":
                continue
            model.predict(x1)
            base_one.append(median_time(lambda m=model: m.predict(x1), 50))
            base_many.append(median_time(
                lambda m=model: m.predict(encode(many, "ordinal", space=ANB_SPACE)), 3))
        print(f"baseline (one XGBoost per target, no uncertainty): 10,000 archs all targets "
              f"{sum(base_many):.3f} s; one arch all targets {1000 * sum(base_one):.2f} ms "
              f"(per target {1000 * min(base_one):.2f}-{1000 * max(base_one):.2f} ms)")
        print(f"ratios ours/baseline: batch {t_many / sum(base_many):.2f}x, "
              f"single {t_one / sum(base_one):.2f}x")
    print(f"\nfit time, all {len(bench.metrics)} targets from scratch (no HPO): "
          f"{fit_seconds:.1f} s (goal < 600 s); baselines: {base_seconds:.1f} s")
    if args.report:
        write_report(ours, args.report, "metrics")
        write_report(comp, args.report, "comparison")
        parity_plots(bench, prepared, Path(args.report))
        print(f"report: {args.report}")
    print(f"REFERENCE numbers used: {len(REFERENCE_BASELINES)} targets; goals {TAU_GOALS}")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
