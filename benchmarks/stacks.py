"""The CPU compiler/runtime stacks side by side: onnxruntime (fp32, int8), OpenVINO (fp32, int8)
and Apache TVM (fp32, untuned), each measuring the same sampled architectures twice.

    .venv/bin/python benchmarks/stacks.py [--n 20] [--resolution 224] [--budget 2]
        [--devices cpu-ort,cpu-int8,cpu-openvino,cpu-openvino-int8,cpu-tvm] [--cpu N]

Latency, batch 1, one thread, wall clock, the process pinned to one CPU; the architectures are
timed round-robin (interleaved, drift-corrected) as ``benchmarks/measure_cpu.py`` does. Per
stack: test-retest (Kendall tau between the two passes, median coefficient of variation of the
repetitions; goal tau >= 0.95, CV <= 2 %), the median latency, the median per-architecture
ratio to onnxruntime fp32 and the rank agreement with it (Kendall tau). Model building (export,
quantization, TVM's compile) happens in pass 1 and is reused in pass 2; its time is reported
apart from the timing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from scipy.stats import kendalltau

from anb.searchspace.space import ANB_SPACE

STACKS = "cpu-ort,cpu-int8,cpu-openvino,cpu-openvino-int8,cpu-tvm"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--budget", type=float, default=2.0, help="timing budget per measurement")
    parser.add_argument("--devices", default=STACKS)
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                        help="pin the process to this CPU (-1: no pinning)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})

    from anb.collect_throughput.targets.base import RunSettings
    from anb.collect_throughput.targets.local import LocalTarget
    from anb.collect_throughput.targets.protocol_target import Schedule
    from anb.collect_throughput.timing.protocol import load_device
    from anb.searchspace.sampler import Sampler

    out = args.out or Path(tempfile.mkdtemp(prefix="anb-stacks-"))
    archs = Sampler(args.seed, space=ANB_SPACE).sample(args.n)
    means: dict[str, list[np.ndarray]] = {}
    rows = []
    for device in args.devices.split(","):
        config = load_device(device, {"resolution": args.resolution, "clock": "wall",
                                      "stopping": {"budget_seconds": args.budget}},
                             space=ANB_SPACE.name)
        config = dataclasses.replace(config, protocols=tuple(
            p for p in config.protocols if p.kind == "latency"))
        key = config.keys[0]
        passes, cvs, seconds = [], [], []
        for p in (1, 2):
            began = time.perf_counter()
            LocalTarget(config, Schedule(interleave=args.n, anchors=())).measure(
                archs, out / f"pass{p}", RunSettings(workdir=out / "models" / device,
                                                     keep_work=True))
            seconds.append(time.perf_counter() - began)
            entries = [json.loads((out / f"pass{p}" / device / f"{a.id}.json").read_text())
                       ["platform_perf"][key] for a in archs]
            passes.append(np.array([e["latency_mean"] for e in entries]))
            cvs += [e["cv"] for e in entries]
        means[device] = passes
        rows.append({"device": device, "retest_tau": float(kendalltau(*passes).statistic),
                     "median_cv": float(np.median(cvs)),
                     "median_ms": float(np.median(passes[0])),
                     "pass_s": seconds})
    reference = np.mean(means["cpu-ort"], axis=0) if "cpu-ort" in means else None
    print(f"{args.n} architectures, latency batch 1, {args.resolution} px, 1 thread, pinned "
          f"CPU {args.cpu}, budget {args.budget} s")
    print("| stack | test-retest tau | median CV | median latency (ms) | ratio to cpu-ort | "
          "tau vs cpu-ort | pass 1 / pass 2 (s) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        mean = np.mean(means[row["device"]], axis=0)
        ratio = tau = "-"
        if reference is not None:
            ratio = f"{np.median(mean / reference):.2f}"
            tau = f"{kendalltau(mean, reference).statistic:.3f}"
        print(f"| {row['device']} | {row['retest_tau']:.3f} | {100 * row['median_cv']:.2f} % | "
              f"{row['median_ms']:.2f} | {ratio} | {tau} | "
              f"{row['pass_s'][0]:.0f} / {row['pass_s'][1]:.0f} |")
    goal = [r["device"] for r in rows if r["retest_tau"] < 0.95 or r["median_cv"] > 0.02]
    print("goal (tau >= 0.95, median CV <= 2 %): " + ("met by every stack" if not goal
                                                       else f"missed by {', '.join(goal)}"))
    print(f"load average {os.getloadavg()} on {os.cpu_count()} CPUs; results in {out}")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
