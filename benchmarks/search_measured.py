"""A real search with device measurement in the loop on this CPU (``cpu-ort``, the shipped
protocol: onnxruntime fp32, 224 px, one pinned thread, latency and throughput).

Regularized evolution (population 16, tournaments of 4, 8 children per step) maximises the
surrogate's top-1 and the measured throughput; stops at ``--max-measurements`` or
``--max-hours``. Prints the budget, the measurements taken, the time and the front found; the
results (history.csv, pareto.csv, summary.json, the measured records) are in ``--out``.

    python benchmarks/search_measured.py --benchmark <anb fit folder> --out outputs/search-cpu

Measured on this 2-core VM (accuracy from ``anb fit --targets val_top1``, test tau 0.924): 32
measurements / 0.25 h budget, 33 evaluations, 32 measurements (1 cache hit), 390 s; front of 6
designs from 59.4 % / 227 images/s to 66.4 % / 72 images/s.
"""
from __future__ import annotations

import argparse
import functools
import json
import time

from anb.nas.evaluators import combined, surrogate_evaluator
from anb.nas.measured import search_measured
from anb.nas.search import regularized_evolution
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--benchmark", required=True, help="Surrogate artifact with val_top1.")
    p.add_argument("--device", default="cpu-ort")
    p.add_argument("--out", required=True)
    p.add_argument("--budget", type=int, default=400, help="Evaluations.")
    p.add_argument("--max-measurements", type=int, default=32)
    p.add_argument("--max-hours", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    algo = functools.partial(regularized_evolution, population=16, sample=4, batch=8)
    start = time.perf_counter()
    s = search_measured(algo, combined(surrogate_evaluator(load(args.benchmark)),
                                       space=ANB_SPACE), args.device,
                        None, ["val_top1:max", f"throughput_{args.device}:max"], [],
                        args.budget, args.seed, args.out, args.max_measurements, args.max_hours)
    print(json.dumps({k: s[k] for k in ("device", "evaluations", "unique_architectures",
                                        "measurements", "cache_hits", "failed", "stopped",
                                        "max_measurements", "max_hours", "pareto_size")}))
    print(f"wall time {time.perf_counter() - start:.0f} s")
    for row in s["pareto"]:
        print(f"  {row['arch']}  val_top1 {row['val_top1']:.2f}  "
              f"throughput {row[f'throughput_{args.device}']:.1f} images/s  "
              f"latency {row.get(f'latency_{args.device}', float('nan')):.2f} ms")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
