"""GPU test-retest and agreement with the released GPU columns, on a CUDA machine.

    python benchmarks/measure_gpu.py [--device h100] [--n 20] [--budget 2] [--eager-latency]
        [--out DIR]

Draws ``--n`` architectures of the released Accel-NASBench dataset (seeded, spread over its
throughput_a100 range), measures them twice with the device config's reference protocol
(docs/background/devices.md, "GPU": batch 128 at 256 px, fp16 inputs, channels_last, CUDA
events; batch 1 replaying a CUDA graph per request for latency; ``--eager-latency``: eager
launches instead), only the timing budget shortened, and prints per key the
Kendall tau between the passes, the median coefficient of variation of the repetitions, the
median |pass 1 - pass 2| / pass 1, and the Kendall tau of pass 1 against the released
throughput_a100 and throughput_3090 columns. The environment of the first record (GPU, driver,
clocks, power, temperature) is printed too. Writes the passes and summary.json under --out.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

from anb.searchspace.space import ANB_SPACE

RELEASED_GPU_COLUMNS = ("throughput_a100", "throughput_3090")


def released_sample(n: int, seed: int) -> list[dict]:
    """``n`` released records spread evenly over the a100 throughput ranks, then shuffled."""
    from anb.records import load_records
    from anb.resources import RELEASED_DATASET

    records = sorted(load_records(RELEASED_DATASET, space=ANB_SPACE),
                     key=lambda r: r["platform_perf"]["throughput_a100"]["throughput_mean"])
    picks = np.linspace(0, len(records) - 1, n).round().astype(int)
    chosen = [records[i] for i in picks]
    np.random.default_rng(seed).shuffle(chosen)
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="h100")
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=2.0, help="timing budget per measurement")
    parser.add_argument("--eager-latency", action="store_true",
                        help="latency from eager launches instead of CUDA graph replays")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from anb.collect_throughput.targets.base import RunSettings
    from anb.collect_throughput.targets.local import LocalTarget
    from anb.collect_throughput.targets.protocol_target import Schedule
    from anb.collect_throughput.timing.protocol import load_device
    from anb.searchspace.arch import Arch

    out = args.out or Path(tempfile.mkdtemp(prefix="anb-measure-gpu-"))
    released = released_sample(args.n, args.seed)
    archs = [Arch.from_anb_dict(r["architecture"], ANB_SPACE) for r in released]
    overrides = {"stopping": {"budget_seconds": args.budget}}
    config = load_device(args.device, {**overrides, **({"cuda_graphs": False}
                                                       if args.eager_latency else {})},
                         space=ANB_SPACE.name)
    passes, seconds = [], []
    for p in range(2):
        began = time.perf_counter()
        LocalTarget(config, Schedule(anchors=())).measure(
            archs, out / f"pass{p + 1}", RunSettings(workdir=out / "models"))
        seconds.append(time.perf_counter() - began)
        passes.append([json.loads((out / f"pass{p + 1}" / config.name / f"{a.id}.json")
                                  .read_text()) for a in archs])

    summary = {"device": config.name, "n": args.n, "budget_s": args.budget,
               "seconds_per_arch": [s / args.n for s in seconds], "keys": {},
               "environment": passes[0][0]["platform_perf"][config.keys[0]].get("environment")}
    for key in config.keys:
        kind = key.split("_", 1)[0]
        a, b = (np.array([r["platform_perf"][key][f"{kind}_mean"] for r in passes[p]])
                for p in range(2))
        cv = [r["platform_perf"][key]["cv"] for p in range(2) for r in passes[p]]
        row = {"retest_kendall_tau": float(kendalltau(a, b).statistic),
               "median_cv": float(np.median(cv)),
               "median_abs_rel_diff": float(np.median(np.abs(a - b) / a)),
               "min": float(a.min()), "max": float(a.max()),
               "pass1": a.tolist(), "pass2": b.tolist()}
        for column in RELEASED_GPU_COLUMNS:
            ref = np.array([r["platform_perf"][column]["throughput_mean"] for r in released])
            sign = 1.0 if kind == "throughput" else -1.0  # latency ranks opposite to throughput
            row[f"tau_vs_{column}"] = float(sign * kendalltau(a, ref).statistic)
        summary["keys"][key] = row
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    for key, s in summary["keys"].items():
        print(f"{key:22s} retest tau={s['retest_kendall_tau']:.4f}  median CV="
              f"{100 * s['median_cv']:.2f} %  median |p1-p2|/p1="
              f"{100 * s['median_abs_rel_diff']:.2f} %  range {s['min']:.4g}..{s['max']:.4g}  "
              + "  ".join(f"tau vs {c}={s[f'tau_vs_{c}']:.4f}" for c in RELEASED_GPU_COLUMNS))
    print("seconds/arch per pass = " + ", ".join(f"{s:.2f}" for s in summary["seconds_per_arch"]))
    print("environment: " + json.dumps(summary["environment"], default=str)[:3000])
    print(f"results in {out}")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
