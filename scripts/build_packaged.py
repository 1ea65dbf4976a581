"""Regenerate the fitted packaged benchmark that ships in the wheel (anb/data/packaged/).

Fits the packaged default config on the packaged dataset and split (the same call as a first-use
fit), records reference predictions of that fitted artifact on the test split's architectures
and the key it was fitted under (``anb.surrogates.packaged.shipped_key``), and saves it with its
XGBoost members compiled to numpy node tables. Then loads the compiled copy and reports its
largest difference from the fitted artifact's predictions. Run it after changing the data, the
default config, the fitting code or the anb version (tests/test_packaged.py fails until then):

    .venv/bin/python scripts/build_packaged.py [--jobs 2]
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
from anb.surrogates import artifact, packaged
from anb.surrogates.api import fit
from anb.surrogates.fit import FitConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0))
                        if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    args = parser.parse_args()
    config = FitConfig()
    with tempfile.TemporaryDirectory(prefix="anb-packaged-") as tmp:
        start = time.perf_counter()
        fit(resources.RELEASED_DATASET, Path(tmp) / "fitted", config=config,
            split_dir=resources.RELEASED_SPLIT_DIR, n_jobs=args.jobs)
        print(f"fitted in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        bench = artifact.load(Path(tmp) / "fitted")
    bench.info[packaged.REFERENCE] = packaged.reference(bench)
    bench.info[packaged.SHIPPED_KEY] = packaged.shipped_key(config)
    artifact.save(bench, resources.SHIPPED_DIR, overwrite=True, compiled=True)
    # package data, not an output folder: the wheel carries no dotfiles, so neither does this
    (resources.SHIPPED_DIR / MARKER).unlink(missing_ok=True)
    resources.SHIPPED_DIR.chmod(0o755)  # package data: readable by every user of an install
    for member in resources.SHIPPED_DIR.iterdir():
        member.chmod(0o644)
    compiled = artifact.load(resources.SHIPPED_DIR)
    absolute, relative = packaged.reference_diff(compiled)
    size = sum(p.stat().st_size for p in resources.SHIPPED_DIR.iterdir())
    print(f"wrote {resources.SHIPPED_DIR} ({size / 1e6:.1f} MB); compiled vs fitted on "
          f"{packaged.N_REFERENCE} test archs: max abs diff {absolute:.3g}, max rel diff "
          f"{relative:.3g}")


if __name__ == "__main__":
    main()
