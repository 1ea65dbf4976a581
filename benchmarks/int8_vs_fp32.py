"""int8 (onnxruntime static QDQ, per scheme) against fp32, timed A/B in the same run.

    .venv/bin/python benchmarks/int8_vs_fp32.py [--archs B0,sample:3] [--schemes u8s8,per-channel]
        [--threads 1] [--rounds 9] [--cpu N] [--resolution 224]

Per architecture the fp32 export and its int8 models (the ``cpu-int8`` device's calibration:
64 digits training images) are loaded into one-process onnxruntime sessions (the devices'
options: sequential, full graph optimisation, ``--threads`` intra-op threads) and timed
round-robin in a shuffled order each round (batch 1: median of 5 runs, batch 8: of 2), so
the machine's drift hits every model alike. Prints per architecture, batch and scheme the
median over rounds of int8 time / fp32 time of the same round (< 1: int8 faster), the fp32
median time, and the logits' SQNR and top-1 agreement of int8 against fp32 on 64 digits test
images; then the median ratio per scheme over the architectures, the CPU model and whether
it has AVX512-VNNI, and the load average. A ratio, never a timing assertion.
"""
from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from anb.searchspace.space import ANB_SPACE

B0 = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"
BATCHES = ((1, 5), (8, 2))  # (batch, runs per round)


def cpu_model() -> str:
    """The CPU's model name and whether it has AVX512-VNNI (from /proc/cpuinfo)."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith("model name")), "unknown CPU")
    return f"{name} ({'avx512_vnni' if 'avx512_vnni' in text else 'no avx512_vnni'})"


def time_ab(paths: dict[str, Path], threads: int, rounds: int, resolution: int,
            ) -> dict[int, tuple[float, dict[str, float]]]:
    """Per batch: (fp32 median seconds, {scheme: median int8/fp32 ratio}); ``paths`` holds
    ``fp32`` and one path per scheme."""
    from anb.collect_throughput.backends.onnxruntime_backend import ort_session

    sessions = {name: ort_session(path, threads) for name, path in paths.items()}
    rng = np.random.default_rng(0)
    out = {}
    for batch, runs in BATCHES:
        x = {"input": rng.standard_normal((batch, 3, resolution, resolution), dtype=np.float32)}
        for session in sessions.values():
            for _ in range(2):
                session.run(["logits"], x)
        ratios: dict[str, list[float]] = {name: [] for name in paths if name != "fp32"}
        fp32 = []
        for _ in range(rounds):
            order = list(sessions)
            random.shuffle(order)
            seconds = {}
            for name in order:
                session, times = sessions[name], []
                for _ in range(runs):
                    start = time.perf_counter()
                    session.run(["logits"], x)
                    times.append(time.perf_counter() - start)
                seconds[name] = float(np.median(times))
            fp32.append(seconds["fp32"])
            for name, values in ratios.items():
                values.append(seconds[name] / seconds["fp32"])
        out[batch] = (float(np.median(fp32)),
                      {name: float(np.median(r)) for name, r in ratios.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="B0,sample:3",
                        help="comma-separated architectures, B0 and/or sample:N (seed 0)")
    parser.add_argument("--schemes", default="u8s8,per-channel")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                        help="pin the process to this CPU (-1: no pinning; with --threads > 1 "
                             "pin to the last --threads CPUs)")
    args = parser.parse_args()
    if args.cpu >= 0:
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {args.cpu} if args.threads == 1 else set(allowed[-args.threads:]))

    from anb.collect_throughput.backends.int8_quantize import (
        SCHEMES,
        quantize_int8,
        run_model,
        sqnr_db,
    )
    from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
    from anb.collect_throughput.timing.digits import digits_images
    from anb.searchspace.arch import Arch
    from anb.searchspace.sampler import Sampler

    schemes = args.schemes.split(",")
    for scheme in schemes:
        if scheme not in SCHEMES:
            parser.error(f"--schemes {scheme!r} is invalid; allowed: {sorted(SCHEMES)}")
    archs = []
    for item in args.archs.split(","):
        archs += (Sampler(0, space=ANB_SPACE).sample(int(item.split(":")[1]))
                  if item.startswith("sample:")
                  else [Arch.from_string(B0 if item == "B0" else item, ANB_SPACE)])
    calibration = digits_images(args.resolution, "train")[0][:64]
    test = digits_images(args.resolution, "test")[0][:64]
    print(f"{cpu_model()}; threads={args.threads}; load average before "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    summary: dict[tuple[int, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="anb-int8-bench-") as tmp:
        for arch in archs:
            work = Path(tmp) / arch.id
            work.mkdir()
            paths = {"fp32": float_onnx(arch, work, args.resolution, space=ANB_SPACE)}
            for scheme in schemes:
                paths[scheme] = quantize_int8(paths["fp32"], work / f"{scheme}.onnx",
                                              calibration, scheme)
            logits = {name: run_model(path, test, 16) for name, path in paths.items()}
            print(arch, flush=True)
            for scheme in schemes:
                agree = np.mean(logits[scheme].argmax(1) == logits["fp32"].argmax(1))
                print(f"  {scheme}: logits SQNR {sqnr_db(logits['fp32'], logits[scheme]):.1f} "
                      f"dB, top-1 agreement {agree:.2f}", flush=True)
            for batch, (fp32, ratios) in time_ab(paths, args.threads, args.rounds,
                                                 args.resolution).items():
                print(f"  batch {batch}: fp32 {fp32 * 1e3:.1f} ms; int8/fp32 "
                      + ", ".join(f"{s} {r:.2f}" for s, r in ratios.items()), flush=True)
                for scheme, ratio in ratios.items():
                    summary.setdefault((batch, scheme), []).append(ratio)
    print("median int8/fp32 over the architectures: " + "; ".join(
        f"batch {b} {s} {np.median(r):.2f}" for (b, s), r in sorted(summary.items())))
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
