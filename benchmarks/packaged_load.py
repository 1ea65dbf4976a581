"""The packaged benchmark's costs: wheel size, first-use and cached ``anb.load()`` times.

Each load runs in a fresh Python process (``import anb`` included in the process time, and timed
separately around the call) with ``ANB_CACHE_DIR`` set to an empty temporary folder, so the first
call fits and the later ones read the cache. Ratios from the same run: the first use against the
cached call, and the cache key (hashing the packaged data, split and config) against the cached
call it is part of.

    .venv/bin/python benchmarks/packaged_load.py [--repeats 3] [--config small.json]

Measured (2 CPU cores busy with other work, default config): wheel 1.48 MB; first use 54.1 s
(fit + save + load, 2 threads); cached anb.load() 0.61 s (median of 3 fresh processes; 1.70 s
with the process and `import anb`); first use / cached 89x; the cache key costs 0.006 s.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".venv", ".git", "build", "dist", "outputs", "results", "runs",
                                "wandb", "*.egg-info", "__pycache__", ".pytest_cache")
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import anb
from anb.surrogates import packaged
t1 = time.perf_counter()
config = sys.argv[1] or None
packaged.cache_path(config=config)
t2 = time.perf_counter()
bench = anb.load(config=config, quiet=True)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "key_s": t2 - t1, "load_s": t3 - t2,
                  "metrics": len(bench.metrics)}))
"""


def wheel_size(tmp: Path) -> tuple[str, int]:
    src = tmp / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=IGNORE)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(tmp / "dist"), str(src)], check=True)
    wheel = next((tmp / "dist").glob("anb-*.whl"))
    return wheel.name, wheel.stat().st_size


def timed_load(cache: Path, config: str) -> dict:
    env = {**os.environ, "ANB_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, config], env=env, capture_output=True,
                         text=True, check=True, cwd=cache.parent)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="cached loads to time")
    parser.add_argument("--config", default="", help="FitConfig JSON (default: the packaged one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="anb-bench-") as tmp:
        tmp = Path(tmp)
        name, size = wheel_size(tmp)
        print(f"wheel {name}: {size / 1e6:.2f} MB ({size:,} bytes)")
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        cache = tmp / "cache"
        first = timed_load(cache, args.config)
        print(f"first use  (fit + save + load, {threads} thread(s)): anb.load() "
              f"{first['load_s']:.1f} s; process {first['process_s']:.1f} s "
              f"(import anb {first['import_s']:.2f} s)")
        cached = [timed_load(cache, args.config) for _ in range(args.repeats)]
        load = statistics.median(r["load_s"] for r in cached)
        key = statistics.median(r["key_s"] for r in cached)
        proc = statistics.median(r["process_s"] for r in cached)
        imp = statistics.median(r["import_s"] for r in cached)
        print(f"cached     (median of {args.repeats} fresh processes): anb.load() {load:.3f} s; "
              f"process {proc:.2f} s (import anb {imp:.2f} s)")
        print(f"ratio cache key / cached anb.load(): {key / load:.2f} ({key:.3f} s to hash the "
              "packaged data, split and config)")
        print(f"ratio first use / cached anb.load(): {first['load_s'] / load:.0f}x")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
