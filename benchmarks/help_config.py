"""How the HELP benchmarks' surrogate config (``configs/surrogates/help.json``) is chosen: on the
validation part of the split it is fitted on, never on its test part.

    nice .venv/bin/python benchmarks/help_config.py [--benchmark help-fbnet] [--jobs 2]

Each candidate is ``help.json`` with one setting changed, fitted by anb's own fit on the whole
table (the ``random`` 80/10/10 split of ``help.json``), without the internal hold-outs that only
widen the stds (``hole_folds`` 0: the means do not depend on them). Printed per candidate: the
mean Kendall tau and 90 % interval coverage over the 27 targets on the validation part, the fit
time and the artifact size. Rule: the highest mean validation tau wins; a candidate within 0.001
of a smaller, faster one loses to it (the shipped size counts against the 400 MB light install).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anb import resources  # the checkout's anb
from anb.surrogates import help_benchmark
from anb.surrogates.api import fit
from anb.surrogates.fit import FitConfig


def candidates(config: FitConfig) -> dict[str, FitConfig]:
    """``help.json`` (hole-outs off) and one setting changed at a time."""
    base = replace(config, hole_folds=0)
    params = dict(base.default.params)  # type: ignore[arg-type]
    return {"help.json": base,
            "max_depth 6": replace(base, default=replace(base.default,
                                                         params={**params, "max_depth": 6})),
            "no layer-cost features": replace(base, layer_cost=False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=resources.HELP_BENCHMARKS, default="help-fbnet")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    frame = help_benchmark.records(args.benchmark)
    space = help_benchmark.check_name(args.benchmark)
    for name, config in candidates(help_benchmark.fit_config()).items():
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            bench, _ = fit(frame, Path(tmp) / "fitted", config=config, n_jobs=args.jobs,
                           progress=False, space=space)
            seconds = time.perf_counter() - start
            size = sum(p.stat().st_size for p in (Path(tmp) / "fitted").iterdir()) / 1e6
        val = [t["metrics"]["val"] for t in bench.info["targets"].values()]
        tau = sum(m["kendall_tau"] for m in val) / len(val)
        coverage = sum(m["coverage90"] for m in val) / len(val)
        print(f"{name}: val tau {tau:.4f}, coverage90 {coverage:.3f}, {seconds:.0f} s, "
              f"{size:.1f} MB", flush=True)


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
