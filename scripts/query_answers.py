"""The query path's answers as JSON, for the version matrix (``noxfile.py``) to compare across
Python and dependency versions: run with any environment's Python where anb is installed.

    python scripts/query_answers.py OUT.json [--fit] [--optuna] [--syne-tune]

Native XGBoost boosters sum their trees in float32, tree tables in float64 (a 1e-8 relative
difference, which a two-member std amplifies past 1e-6): ``--tables`` answers as an install
without xgboost does, and ``predictor`` tells the comparison which kind it holds.

Answers: the packaged benchmark's query of 300 fixed architectures (every metric, mean and
std; past the small-batch size, so both prediction paths) and of 8 with noise at a fixed seed;
a regularized-evolution search's front and history; with ``--optuna`` / ``--syne-tune`` the
OptunaHub problem's / the Syne Tune blackbox's values of 5 fixed configurations; with
``--fit`` a small fit's predictions of the 300 (the fit path: xgboost, lightgbm,
scikit-learn). ``versions`` records what ran.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

#: Architecture indices of the fixed query set (the packaged space's mixed-radix index).
N_QUERY, N_NOISY, N_CONFIGS = 300, 8, 5
PACKAGES = ("anb", "numpy", "pandas", "scipy", "ConfigSpace", "optuna", "syne-tune",
            "xgboost", "lightgbm", "scikit-learn")
#: A small fit: two targets, a few trees, no hole folds (seconds, any version).
FIT_CONFIG = {"targets": ["val_top1", "latency_zcu102"], "layer_cost": True, "hole_folds": 0,
              "default": {"family": "xgboost", "n_members": 2,
                          "params": {"n_estimators": 40, "max_depth": 3, "n_jobs": 1}},
              "per_target": {"val_top1": {"family": ["xgboost", "lightgbm"], "n_members": 2,
                                          "params": [{"n_estimators": 40, "max_depth": 3,
                                                      "n_jobs": 1},
                                                     {"n_estimators": 40, "num_leaves": 8,
                                                      "n_jobs": 1}]}}}


def _columns(frame) -> dict[str, list]:
    return {c: frame[c].tolist() for c in frame.columns}


def query_answers(bench) -> dict:
    space = bench.space
    index = np.random.default_rng(0).integers(0, space.size(), N_QUERY)  # stable stream
    choices = space.choices_from_index(index)
    return {"query": _columns(bench.query(choices)),
            "noisy": _columns(bench.query(choices[:N_NOISY], noise=True, seed=7))}


def search_answers(work: Path) -> dict:
    out = work / "search"
    subprocess.run([str(Path(sys.executable).with_name("anb")), "search", "-o", "accuracy",
                    "-o", "latency_zcu102:min", "--benchmark", "accel-nasbench",
                    "--budget", "600", "--seed", "3", "--out", str(out)],
                   check=True, capture_output=True, text=True)
    return {name: _read_csv(out / name) for name in ("pareto.csv", "history.csv")}


def _read_csv(path: Path) -> dict[str, list]:
    """A CSV's columns (numbers as numbers, so that they compare within a tolerance)."""
    import pandas as pd

    return _columns(pd.read_csv(path))


def _configs(bench) -> list[dict]:
    from anb.integrations.common import domains

    rng = np.random.default_rng(5)
    configs = [{d.name: d.values[int(rng.integers(len(d.values)))] for d in domains(bench.space)}
               for _ in range(N_CONFIGS)]
    return [{k: v.item() if hasattr(v, "item") else v for k, v in c.items()} for c in configs]


def optuna_answers(bench) -> dict:
    from anb.integrations.optuna import AnbProblem

    problem = AnbProblem(bench, objectives=("val_top1", "latency_zcu102"),
                         constraints=("throughput_a100>=1000",))
    return {"optuna": [[*problem.evaluate(c), *problem.evaluate_constraints(c).values()]
                       for c in _configs(bench)]}


def syne_tune_answers(bench) -> dict:
    from anb.integrations.syne_tune import AnbBlackbox

    blackbox = AnbBlackbox(bench, objectives=["val_top1", "latency_zcu102"], noise=False)
    return {"syne_tune": _columns(blackbox.evaluate(_configs(bench)))}


def fit_answers(work: Path) -> dict:
    from anb import resources
    from anb.surrogates import FitConfig, fit

    bench, _ = fit(resources.RELEASED_DATASET, work / "fit", config=FitConfig.from_dict(FIT_CONFIG),
                   split_dir=resources.RELEASED_SPLIT_DIR, n_jobs=1, progress=False)
    return {"fit": query_answers(bench)["query"]}


def predictor(bench) -> str:
    """``native`` where the queries went through xgboost's own predictor, else ``tables``."""
    members = [m for model in bench.models.values() for m in model.members_]
    return "native" if any(getattr(m, "booster_", None) is not None for m in members) \
        else "tables"


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--optuna", action="store_true")
    parser.add_argument("--syne-tune", action="store_true")
    parser.add_argument("--tables", action="store_true",
                        help="predict from tree tables even where xgboost is installed")
    args = parser.parse_args()
    if args.tables:
        sys.modules["xgboost"] = None  # type: ignore[assignment]  # as if not installed
    import anb

    bench = anb.load(quiet=True, n_jobs=1)
    answers = {"versions": versions(), **query_answers(bench)}
    answers["predictor"] = predictor(bench)
    with tempfile.TemporaryDirectory(prefix="anb-answers-") as tmp:
        answers["search"] = search_answers(Path(tmp))
        if args.optuna:
            answers.update(optuna_answers(bench))
        if args.syne_tune:
            answers.update(syne_tune_answers(bench))
        if args.fit:
            answers.update(fit_answers(Path(tmp)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(answers, indent=1, default=str))


if __name__ == "__main__":
    main()
