"""A Syne Tune multi-objective search on an anb benchmark under simulated time, against random
search at the same simulated budget, in one run.

    SYNETUNE_FOLDER=/tmp/syne-tune python examples/syne_tune_moo.py [--benchmark FOLDER]
        [--objectives val_top1,latency_zcu102] [--hours 100] [--seeds 0,1] [--workers 4]

``--benchmark``: an ``anb fit`` folder (default: the packaged benchmark, ``anb.load()``). Each
trial's simulated time is its predicted ``train_time`` (seconds on the records' GPUs), so
``--hours`` is simulated training time across ``--workers`` parallel workers. Prints the
hypervolume of each method's front per seed (reference point: the worst value each objective
took in any run) and the mean.
"""
from __future__ import annotations

import argparse
import logging

import numpy as np

import anb
from anb.integrations.common import maximised
from anb.integrations.syne_tune import AnbBlackbox, mo_scheduler, simulate
from anb.nas.pareto import hypervolume


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="accel-nasbench")
    parser.add_argument("--objectives", default="val_top1,latency_zcu102")
    parser.add_argument("--hours", type=float, default=100.0)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    logging.getLogger("syne_tune").setLevel(logging.ERROR)

    bench = anb.load(args.benchmark)
    objectives = args.objectives.split(",")
    bb = AnbBlackbox(bench, objectives=objectives)
    runs = {(method, seed): simulate(bb, mo_scheduler(bb, method, seed=seed), args.hours * 3600,
                                     n_workers=args.workers)
            for method in ("morea", "random") for seed in map(int, args.seeds.split(","))}
    sign = np.array([1.0 if maximised(m) else -1.0 for m in objectives])
    scores = {key: run[objectives].dropna().to_numpy(dtype=float) * sign
              for key, run in runs.items()}
    reference = np.min(np.concatenate(list(scores.values())), axis=0) - 1e-9
    print(f"objectives {objectives}; {args.hours:g} simulated hours on {args.workers} workers")
    for method in ("morea", "random"):
        volumes = [hypervolume(s, reference) for (m, _), s in scores.items() if m == method]
        trials = [len(s) for (m, _), s in scores.items() if m == method]
        print(f"{method:>6}: hypervolume {np.round(volumes, 3).tolist()} (mean "
              f"{np.mean(volumes):.3f}); trials {trials}")


if __name__ == "__main__":
    main()
