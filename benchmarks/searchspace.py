"""Search-space throughput: sampling, ids, encodings and analytic counting for 100,000
architectures, beside the baseline of building a torch model and counting it with the thop
profiler (measured on a sample and reported per architecture), as a ratio.

    python benchmarks/searchspace.py [--n 100000] [--profile-sample 20] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from anb.searchspace import ANB_SPACE, Arch, Sampler
from anb.searchspace.counting import count_batch
from anb.searchspace.encoding import features, onehot, ordinal
from anb.searchspace.model import build_model


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def profiler_seconds_per_arch(archs: list[Arch]) -> float:
    from thop import profile

    times = []
    for arch in archs:
        start = time.perf_counter()
        model = build_model(arch, space=ANB_SPACE).eval()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            profile(model, inputs=(torch.randn(1, 3, 224, 224),), verbose=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--profile-sample", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.n
    sampler = Sampler(0, space=ANB_SPACE)
    choices = sampler.sample_choices(n)
    some = sampler.sample(n)

    rows = [
        ("sample (indices+decode)",
         median_seconds(lambda: sampler.sample_choices(n), args.repeats), n),
        ("sample as Arch objects",
         median_seconds(lambda: sampler.sample(len(some)), args.repeats), len(some)),
        ("arch.id (sha256)", median_seconds(lambda: [a.id for a in some], args.repeats), len(some)),
        ("mixed-radix index",
         median_seconds(lambda: ANB_SPACE.index_from_choices(choices), args.repeats), n),
        ("encode ordinal", median_seconds(lambda: ordinal(choices, ANB_SPACE), args.repeats), n),
        ("encode onehot", median_seconds(lambda: onehot(choices, ANB_SPACE), args.repeats), n),
        ("encode features", median_seconds(lambda: features(choices, ANB_SPACE), args.repeats), n),
        ("analytic count", median_seconds(lambda: count_batch(choices, ANB_SPACE), args.repeats),
         n),
    ]
    profiled = profiler_seconds_per_arch(some[: args.profile_sample])
    baseline_rate = 1.0 / profiled
    print(f"search-space throughput, median of {args.repeats} runs, 1 thread")
    print(f"{'operation':<26}{'archs':>9}{'seconds':>10}{'archs/s':>14}{'x profiler':>14}")
    for name, seconds, count in rows:
        rate = count / seconds
        print(f"{name:<26}{count:>9}{seconds:>10.4f}{rate:>14,.0f}{rate / baseline_rate:>14,.0f}")
    print(f"{'build model + thop':<26}{args.profile_sample:>9}"
          f"{profiled * args.profile_sample:>10.4f}{baseline_rate:>14,.1f}{1:>14}")
    count_seconds = rows[-1][1]
    print(f"\nanalytic count of {n:,} archs: {count_seconds:.3f} s; the profiler would take "
          f"~{profiled * n / 3600:.1f} h (ratio {profiled * n / count_seconds:,.0f}x)")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
