"""One-call workflows behind the CLI: fit (with optional HPO) + save, and evaluate."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from anb.outputs import check_folder, replace_folder
from anb.records import detect_space
from anb.searchspace.base import Space
from anb.searchspace.registry import resolve_space
from anb.surrogates.artifact import OUTPUT, load, save
from anb.surrogates.benchmark import SurrogateBenchmark
from anb.surrogates.features import FeatureBuilder
from anb.surrogates.fit import (
    FitConfig,
    Prepared,
    TargetConfig,
    evaluate,
    fit_benchmark,
    prepare,
    to_model_space,
)
from anb.surrogates.layer_cost import LayerCostModel
from anb.surrogates.report import REPORT, markdown_table, parity_plots, write_report


def tune_config(prepared: Prepared, config: FitConfig, seconds: float, seed: int = 0
                ) -> FitConfig:
    """Run Optuna per target (``seconds`` each) and return the config with the chosen params."""
    from anb.surrogates.hpo import tune

    train, val = prepared.masks["train"], prepared.masks["val"]
    layer_cost = LayerCostModel(trim=config.layer_cost_trim,
                                saturating=config.layer_cost_saturating).fit(
        prepared.choices[train],
        {t: (lab.values[train], lab.present[train]) for t, lab in prepared.labels.items()},
        prepared.space) if config.layer_cost else None
    builder = FeatureBuilder(config.feature_set, layer_cost, space=prepared.space)
    X = builder.transform(prepared.choices)
    per_target = dict(config.per_target)
    for target, lab in prepared.labels.items():
        spec = config.for_target(target)
        if not isinstance(spec.family, str) or isinstance(spec.params, list):
            continue  # mixed families and per-member params keep their configured settings
        tr, va = lab.present & train, lab.present & val
        y = to_model_space(target, lab.values)
        base = X[:, builder.column(f"lc_{target}")] if layer_cost is not None else 0.0
        params = tune(spec.family, X[tr], (y - base)[tr], X[va], (y - base)[va], seconds,
                      fixed=spec.params, seed=seed)
        per_target[target] = replace(spec, params=params)
    return replace(config, per_target=per_target)


#: The largest ensemble, thread count and tuning time (seconds per target) a fit takes.
MAX_MEMBERS = 100
MAX_JOBS = 1024
MAX_HPO_SECONDS = 7 * 24 * 3600.0


def check_fit_sizes(members: int | None, n_jobs: int, hpo_seconds: float) -> None:
    """ValueError naming the argument unless ``members`` (None: the config's) is in
    1..MAX_MEMBERS, ``n_jobs`` in 1..MAX_JOBS and ``hpo_seconds`` in 0..MAX_HPO_SECONDS."""
    for name, value, low, high in (("members", members, 1, MAX_MEMBERS),
                                   ("n_jobs", n_jobs, 1, MAX_JOBS)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not low <= value <= high):
            raise ValueError(f"{name}={value!r} is invalid; allowed: an integer in "
                             f"{low}..{high}")
    if not 0 <= hpo_seconds <= MAX_HPO_SECONDS:  # NaN fails too
        raise ValueError(f"hpo_seconds={hpo_seconds!r} is invalid; allowed: 0 (no tuning) to "
                         f"{MAX_HPO_SECONDS:.0f} seconds per target")


def fit(dataset: str | Path | pd.DataFrame, out: str | Path, config: str | Path | FitConfig |
        None = None, targets: Sequence[str] | None = None, split: str | None = None,
        split_dir: str | Path | None = None, members: int | None = None,
        hpo_seconds: float = 0.0, seed: int | None = None, n_jobs: int = 1,
        progress: bool = True, overwrite: bool = False, space: str | Space | None = None
        ) -> tuple[SurrogateBenchmark, str]:
    """Fit the benchmark (optionally tuned), score it on val/test, save it; return a report.
    ``out`` is checked first (see :func:`anb.surrogates.artifact.save`); ``space``: the
    dataset's by default (see :func:`anb.searchspace.registry.resolve_space`)."""
    check_fit_sizes(members, n_jobs, hpo_seconds)
    check_folder(out, OUTPUT, overwrite)
    space = resolve_space(space, detect_space(dataset), f"dataset {_name(dataset)}")
    if isinstance(config, (str, Path)):
        config = FitConfig.from_file(config)
    config = config or FitConfig()
    given = {"targets": list(targets) if targets else None, "split": split, "seed": seed}
    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    config = replace(config, **changes)
    if members is not None:
        config = replace(config, default=replace(config.default, n_members=members),
                         per_target={k: replace(v, n_members=members)
                                     for k, v in config.per_target.items()})
    config = _with_jobs(config, n_jobs)
    prepared = prepare(dataset, config.targets, config.split, config.seed, split_dir, space=space)
    missing = {t: lab.n_missing for t, lab in prepared.labels.items() if lab.n_missing}
    if hpo_seconds > 0:
        config = tune_config(prepared, config, hpo_seconds, config.seed)
    bench = fit_benchmark(prepared, config, progress=progress)
    scores = {name: evaluate(bench, prepared, name) for name in ("val", "test")
              if prepared.masks[name].any()}
    scores = {name: frame for name, frame in scores.items() if len(frame)}  # >= 2 labels
    for target, info in bench.info["targets"].items():
        info["metrics"] = {name: frame.loc[target].to_dict() for name, frame in scores.items()
                           if target in frame.index}
    bench.info["hpo"] = {"seconds_per_target": hpo_seconds, "library": "optuna"} \
        if hpo_seconds > 0 else None
    save(bench, out, overwrite)
    lines = [f"skipped missing labels: {missing}" if missing else "no missing labels"]
    for name, frame in scores.items():
        lines += [f"\n{name} split:", markdown_table(frame)]
    return bench, "\n".join(lines)


def _name(data: str | Path | pd.DataFrame) -> str:
    return "(a table)" if isinstance(data, pd.DataFrame) else repr(str(data))


def _with_jobs(config: FitConfig, n_jobs: int) -> FitConfig:
    """Set ``n_jobs`` on every tree-family member of the config."""
    def with_jobs(family: str, params: dict) -> dict:
        threaded = family in ("xgboost", "lightgbm", "random_forest")
        return {**params, "n_jobs": n_jobs} if threaded else params

    def jobs(spec: TargetConfig) -> TargetConfig:
        if isinstance(spec.family, str):
            if isinstance(spec.params, list):  # one params object per member
                return replace(spec, params=[with_jobs(spec.family, dict(p)) for p in spec.params])
            return replace(spec, params=with_jobs(spec.family, dict(spec.params)))
        params = spec.params if isinstance(spec.params, list) else [spec.params] * len(spec.family)
        if len(params) != len(spec.family):
            raise ValueError(f"params must be one object per family ({len(spec.family)}), "
                             f"got {len(params)}")
        return replace(spec, params=[with_jobs(f, dict(p))
                                     for f, p in zip(spec.family, params, strict=True)])

    return replace(config, default=jobs(config.default),
                   per_target={k: jobs(v) for k, v in config.per_target.items()})


def evaluate_artifact(model: str | Path, dataset: str | Path | pd.DataFrame,
                      split: str = "published", split_dir: str | Path | None = None,
                      on: str = "test", report: str | Path | None = None,
                      baseline: bool = False, n_jobs: int = 1, seed: int = 0,
                      overwrite: bool = False, space: str | Space | None = None) -> str:
    """Score a saved benchmark (a folder, or a packaged one by name) on a split; optionally
    write a report folder (replaced whole, see :func:`anb.outputs.replace_folder`) and compare
    to baselines."""
    from anb.surrogates.baseline import comparison_table, evaluate_baselines
    from anb.surrogates.packaged import packaged_folder

    check_fit_sizes(None, n_jobs, 0.0)
    if report is not None:
        check_folder(report, REPORT, overwrite, "--report")

    bench = load(model if Path(model).exists() else packaged_folder(str(model)))
    resolve_space(space, bench.space.name, f"benchmark {str(model)!r}")
    resolve_space(bench.space, detect_space(dataset), f"dataset {_name(dataset)}")
    prepared = prepare(dataset, [t for t in bench.metrics], split, seed, split_dir,
                       space=bench.space)
    if on not in prepared.masks:
        raise ValueError(f"unknown split part {on!r}; allowed: {list(prepared.masks)}")
    metrics = evaluate(bench, prepared, on)
    if metrics.empty:
        raise ValueError(f"dataset {_name(dataset)}: its {on!r} split has fewer than 2 "
                         f"labelled architectures for every target "
                         f"({int(prepared.masks[on].sum())} rows); nothing to score")
    text = [f"{on} split:", markdown_table(metrics)]
    comparison = comparison_table(
        metrics, evaluate_baselines(prepared, list(metrics.index), n_jobs, split=on)
        if baseline else None)
    text += ["comparison (R^2 / Kendall tau vs baselines; to_goal = tau - goal):",
             markdown_table(comparison)]
    if report is not None:
        with replace_folder(report, REPORT, overwrite, "--report") as folder:
            write_report(metrics, folder, "metrics")
            write_report(comparison, folder, "comparison")
            parity_plots(bench, prepared, folder, on)
        text.append(f"report written to {report}")
    return "\n".join(text)
