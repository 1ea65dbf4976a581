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

Measured (2 busy CPU cores; packaged default config: layer_cost_trim 2.0, layer-cost back-off,
hole_folds 2, label noise per bin of the predicted value): test R^2 / Kendall tau, ours vs the
best of the re-measured and REFERENCE baselines: val_top1 0.9859 / 0.9268 (0.9237),
latency_vck190 0.9997 / 0.9910 (0.9801), latency_zcu102 0.9999 / 0.9958 (0.9814), 3090 0.9972
/ 0.9919 (0.9653), a100 0.9998 / 0.9969 (0.9736), tpuv2 0.9950 / 0.9710 (0.9629), tpuv3 0.9794
/ 0.9106 (0.9032), vck190 0.9952 / 0.9704 (0.9470), zcu102 0.9994 / 0.9875 (0.9507) (before
the back-off: 0.9860 / 0.9269, .9997 / .9908, .9999 / .9959, .9975 / .9916, .9999 / .9970,
.9953 / .9707, .9791 / .9096, .9949 / .9706, .9994 / .9872). Re-measured accuracy XGBoost
baseline 0.9826 / 0.9205. 90 % coverage on test 0.869-0.955. Held-out extrapolation (fit on
MACs <= 80th percentile): coverage 0.976-0.999 on the rest, every such architecture flagged,
median std 2-37x the in-distribution one. 10,000 archs x 9 targets with std 0.900 s; one arch
4.87 ms (baselines, an earlier run on this machine: 11.96 s and 67 ms); fit 38.9 s (13.5 s
before the hole hold-outs, which refit twice).

Training cost (``--targets train_time``, seconds of the released training on 4x RTX 3090,
modelled in log): test R^2 / Kendall tau 0.857 / 0.890 against the plain baselines' 0.788 /
0.786 (XGBoost) and 0.792 / 0.793 (LightGBM; the reference tuned none for train_time, so both
borrow the accuracy settings); 90 % coverage 0.971 (per quartile 0.945-1.0); observation noise
0.147 in log (the 13 architectures trained twice), model noise 0.107; fit 3.0 s.

90 % coverage per quartile of the true value on test (model space; Q1 the lowest accuracy,
throughput or latency; goal 0.85-0.95 each), with the label noise per bin of the predicted value
(``ensemble.NOISE_BINS``, chosen on val) and, before, a constant:

  target | Q1 | Q2 | Q3 | Q4 | all | before: Q1 | Q2 | Q3 | Q4 | all
  ---|---|---|---|---|---|---|---|---|---|---
  val_top1 | 0.914 | 0.914 | 0.906 | 0.946 | 0.920 | 0.836 | 0.898 | 0.953 | 0.984 | 0.918
  latency_vck190 | 0.977 | 0.961 | 0.961 | 0.922 | 0.955 | 0.945 | 0.969 | 0.969 | 0.945 | 0.957
  latency_zcu102 | 0.789 | 0.906 | 0.883 | 0.898 | 0.869 | 0.719 | 0.867 | 0.938 | 0.977 | 0.875
  throughput_3090 | 0.938 | 0.914 | 0.883 | 0.938 | 0.918 | 1.000 | 1.000 | 1.000 | 0.859 | 0.965
  throughput_a100 | 0.938 | 0.945 | 0.930 | 0.938 | 0.938 | 0.969 | 0.930 | 0.930 | 0.883 | 0.928
  throughput_tpuv2 | 0.961 | 0.913 | 0.906 | 0.859 | 0.910 | 0.984 | 0.976 | 0.891 | 0.727 | 0.894
  throughput_tpuv3 | 0.945 | 0.849 | 0.890 | 0.953 | 0.909 | 1.000 | 1.000 | 0.874 | 0.866 | 0.935
  throughput_vck190 | 0.914 | 0.961 | 0.953 | 0.945 | 0.943 | 1.000 | 1.000 | 0.977 | 0.703 | 0.920
  throughput_zcu102 | 0.961 | 0.875 | 0.914 | 0.945 | 0.924 | 0.961 | 0.938 | 0.938 | 0.867 | 0.926

Every accuracy quartile is now in range (bottom 0.836 -> 0.914); the worst device quartile rises
from 0.703 to 0.789 (latency_zcu102 Q1, its fastest designs: FPGA latency is deterministic, the
error there is the model's, and the per-bin noise is fitted on log latency where those designs
sit in one bin with slower ones); tpuv3 Q2 0.849; the other misses are over-coverage up to 0.977.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

from anb.resources import RELEASED_DATASET as DATA
from anb.searchspace import Sampler
from anb.searchspace.encoding import encode
from anb.surrogates import FitConfig, evaluate, fit_benchmark, load, prepare, save
from anb.surrogates.baseline import (
    REFERENCE_BASELINES,
    TAU_GOALS,
    comparison_table,
    evaluate_baselines,
)
from anb.surrogates.metrics import interval_coverage
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

    macs = cost_table(prepared.choices).total("macs")
    cut = np.quantile(macs, 0.8)
    low, high = macs <= cut, macs > cut
    masks = {"train": low & prepared.masks["train"], "val": low & prepared.masks["val"],
             "test": np.zeros(len(macs), dtype=bool)}
    sub = type(prepared)(prepared.frame, prepared.choices, masks, prepared.labels)
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
                     "coverage90_out": interval_coverage(lab.values[high][ok],
                                                         out[target].to_numpy()[ok],
                                                         out[f"{target}_std"].to_numpy()[ok]),
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
        out[target] = {f"Q{q + 1}": interval_coverage(y[quartile == q], mean[ok][quartile == q],
                                                      std[ok][quartile == q]) for q in range(4)}
        out[target]["all"] = interval_coverage(y, mean[ok], std[ok])
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

    prepared = prepare(args.data, args.targets.split(",") if args.targets else None)
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
                     "coverage90_spread_only": interval_coverage(y, mean, spread),
                     "coverage90_ours": interval_coverage(
                         y, mean, np.sqrt(spread**2 + model.noise_at(mean) ** 2))})
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
    print(pd.DataFrame({t: {"observation_std": m.observation_std_, "model_noise_std": m.noise_std_}
                        for t, m in bench.models.items()}).T.round(5).to_string())

    # ---------------------------------------------------------------- extrapolation
    if not args.skip_extrapolation:
        print("\n== held-out extrapolation: fit on MACs <= 80th percentile, score the rest "
              "(std relative to the mean for device metrics; goal coverage >= 0.85, "
              "std_out > std_in) ==")
        print(extrapolation_check(prepared, config).round(4).to_string())

    # ---------------------------------------------------------------- speed
    many = Sampler(seed=0).sample_choices(10_000)
    one = many[:1]
    bench.query(many)
    bench.query(one)
    t_many = median_time(lambda: bench.query(many), 5)
    t_one = median_time(lambda: bench.query(one), 200)
    print("\n== query speed (medians, this machine) ==")
    print(f"ours: 10,000 archs x {len(bench.metrics)} targets with std: {t_many:.3f} s "
          f"(goal < 1 s); one arch, all targets: {1000 * t_one:.2f} ms (goal < 5 ms)")
    if fitted:
        x1 = encode(one, "ordinal")
        base_one, base_many = [], []
        for (_target, family), model in fitted.items():
            if family != "xgboost":
                continue
            model.predict(x1)
            base_one.append(median_time(lambda m=model: m.predict(x1), 50))
            base_many.append(median_time(lambda m=model: m.predict(encode(many, "ordinal")), 3))
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
