"""Regenerate a fitted packaged benchmark that ships in the wheel (anb/data/packaged/<name>/).

``accel-nasbench`` (the default): fits the packaged default config on the packaged dataset and
split (the same call as a first-use fit). ``help-nasbench201`` / ``help-fbnet``: fits
``configs/surrogates/help.json`` on HELP's table (``anb.surrogates.help_benchmark``). Either
way it records reference predictions of the fitted artifact on test-split architectures and the
key it was fitted under, and saves it with its XGBoost members compiled to numpy node tables;
then loads the compiled copy and reports its largest difference from the fitted artifact's
predictions. Run it after changing the data, the config, the fitting code or the anb version
(tests/test_packaged.py and tests/test_help_benchmark.py fail until then):

    .venv/bin/python scripts/build_packaged.py [--benchmark help-fbnet] [--jobs 2]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anb import resources  # the checkout's anb, not an installed one
from anb.outputs import MARKER
from anb.surrogates import artifact, help_benchmark, packaged
from anb.surrogates.api import fit
from anb.surrogates.benchmark import SurrogateBenchmark
from anb.surrogates.fit import FitConfig


def fit_accel(jobs: int) -> SurrogateBenchmark:
    """The accel-nasbench benchmark, fitted, with its reference predictions and key."""
    config = FitConfig()
    with tempfile.TemporaryDirectory(prefix="anb-packaged-") as tmp:
        fit(resources.RELEASED_DATASET, Path(tmp) / "fitted", config=config,
            split_dir=resources.RELEASED_SPLIT_DIR, n_jobs=jobs)
        bench = artifact.load(Path(tmp) / "fitted")
    bench.info[packaged.REFERENCE] = packaged.reference(bench)
    bench.info[packaged.SHIPPED_KEY] = packaged.shipped_key(config)
    return bench


def fit_help(name: str, jobs: int) -> SurrogateBenchmark:
    """A HELP benchmark, fitted (its key recorded by the fit), with its reference predictions."""
    with tempfile.TemporaryDirectory(prefix="anb-packaged-") as tmp:
        bench = help_benchmark.fit_help(name, Path(tmp) / "fitted", help_benchmark.fit_config(),
                                        jobs, progress=True)
    bench.info[packaged.REFERENCE] = help_benchmark.reference(bench)
    return bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=packaged.PACKAGED,
                        default=resources.PACKAGED_BENCHMARK)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0))
                        if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    args = parser.parse_args()
    start = time.perf_counter()
    if args.benchmark == resources.PACKAGED_BENCHMARK:
        bench, folder = fit_accel(args.jobs), resources.SHIPPED_DIR
    else:
        bench, folder = fit_help(args.benchmark, args.jobs), \
            help_benchmark.shipped_dir(args.benchmark)
    print(f"fitted in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    artifact.save(bench, folder, overwrite=True, compiled=True)
    # package data, not an output folder: the wheel carries no dotfiles, so neither does this
    (folder / MARKER).unlink(missing_ok=True)
    folder.chmod(0o755)  # package data: readable by every user of an install
    for member in folder.iterdir():
        member.chmod(0o644)
    compiled = artifact.load(folder)
    absolute, relative = packaged.reference_diff(compiled)
    size = sum(p.stat().st_size for p in folder.iterdir())
    print(f"wrote {folder} ({size / 1e6:.1f} MB); compiled vs fitted on "
          f"{len(bench.info[packaged.REFERENCE]['archs'])} test archs: max abs diff "
          f"{absolute:.3g}, max rel diff {relative:.3g}")


if __name__ == "__main__":
    main()
