"""Top-level ``anb fit``, ``anb evaluate`` and ``anb query`` commands."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import typer

from anb.cli_support import fail, space_option
from anb.io import atomic_write_text, parse_json, read_text
from anb.outputs import check_file
from anb.searchspace.base import Space
from anb.surrogates.api import MAX_HPO_SECONDS, MAX_JOBS, MAX_MEMBERS


def read_archs(text: str, where: str = "input", *, space: Space) -> list[Any]:
    """Architectures from text: JSON (list or one), JSON lines, a CSV table (an ``arch``
    column or the space's record-key columns, e.g. ``anb query``'s own output), or one
    architecture string per line. Errors name ``where`` (file or stdin)."""
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"{where}: no architectures given (empty input)")
    if stripped[0] in "[{":
        try:
            data = json.loads(stripped)
            return data if isinstance(data, list) else [data]
        except json.JSONDecodeError:
            return [parse_json(line, f"{where}:{i}")
                    for i, line in enumerate(stripped.splitlines(), 1) if line.strip()]
    header = [name.strip() for name in stripped.splitlines()[0].split(",")]
    if "arch" in header or space.record_keys()[0] in header:
        import pandas as pd

        from anb.records import table_archs

        return table_archs(pd.read_csv(io.StringIO(stripped), dtype={"arch": str}), where,
                           space=space)
    lines = [(i, line.strip()) for i, line in enumerate(stripped.splitlines(), 1)
             if line.strip()]
    for i, line in lines:  # a wrong one named with its line before any work
        try:
            space.arch(line)
        except ValueError as err:
            raise ValueError(f"{where}:{i}: {err}") from None
    return [line for _, line in lines]


def register(app: typer.Typer) -> None:
    """Add ``fit``, ``evaluate`` and ``query`` to the root ``anb`` app."""

    @app.command("fit")
    def fit_cmd(
        dataset: Path | None = typer.Argument(
            None, help="dataset: tarball, folder of JSON, CSV, Parquet (default: the packaged "
                       "Accel-NASBench release)"),
        out: Path = typer.Option(..., "--out", "-o", help="artifact folder to write"),
        config: Path | None = typer.Option(None, help="FitConfig JSON; fields left out are "
                                           "the packaged surrogates/default.json's (the "
                                           "config `anb.load()` fits)"),
        targets: str | None = typer.Option(None, help="comma-separated targets (default all)"),
        split: str | None = typer.Option(None, help="published | random | kfold:<k>:<i> "
                                         "(default: the config's, published)"),
        split_dir: Path | None = typer.Option(None, help="folder of {train,val,test}_paths.json"),
        members: int | None = typer.Option(None, min=1, max=MAX_MEMBERS,
                                           help="ensemble members per target"),
        hpo_seconds: float = typer.Option(0.0, min=0.0, max=MAX_HPO_SECONDS,
                                          help="Optuna budget per target on val (0: none)"),
        seed: int | None = typer.Option(None, min=0, help="split and model seed (default: the "
                                        "config's, 0)"),
        jobs: int = typer.Option(1, min=1, max=MAX_JOBS, help="threads per model"),
        overwrite: bool = typer.Option(False, "--overwrite", help="replace --out even when it "
                                       "holds something other than an anb surrogate artifact"),
        space: str | None = space_option(),
    ) -> None:
        """Fit a surrogate per target and save the artifact."""
        from anb import resources
        from anb.surrogates.api import fit

        if dataset is None:
            dataset = resources.RELEASED_DATASET
            typer.echo(f"fitting on the packaged dataset {dataset}", err=True)
        try:
            bench, report = fit(dataset, out, config=config, targets=_split_list(targets),
                                split=split, split_dir=split_dir, members=members,
                                hpo_seconds=hpo_seconds, seed=seed, n_jobs=jobs,
                                overwrite=overwrite, space=space)
        except (ValueError, FileNotFoundError) as err:
            fail(err)
        typer.echo(report)
        typer.echo(f"wrote {out}")

    @app.command("evaluate")
    def evaluate_cmd(
        model: Path = typer.Argument(..., help="artifact folder written by `anb fit`"),
        dataset: Path = typer.Argument(..., help="dataset the split files refer to"),
        split_dir: Path | None = typer.Option(None),
        split: str = typer.Option("published"),
        on: str = typer.Option("test", help="which part of the split to score"),
        report: Path | None = typer.Option(None, help="folder for tables and parity plots"),
        baseline: bool = typer.Option(False, help="also fit the reference XGBoost/LightGBM recipe "
                                                  "and print the comparison table"),
        jobs: int = typer.Option(1, min=1, max=MAX_JOBS),
        overwrite: bool = typer.Option(False, "--overwrite", help="replace --report even when "
                                       "it holds something other than an anb evaluate report"),
        space: str | None = space_option("search space; must be the benchmark's (default: it)"),
    ) -> None:
        """Score an artifact (R^2, Kendall tau, sparse tau, Spearman, MAE, RMSE, coverage)."""
        from anb.surrogates.api import evaluate_artifact

        try:
            text = evaluate_artifact(model, dataset, split=split, split_dir=split_dir, on=on,
                                     report=report, baseline=baseline, n_jobs=jobs,
                                     overwrite=overwrite, space=space)
        except (ValueError, FileNotFoundError) as err:
            fail(err)
        typer.echo(text)

    @app.command("query")
    def query_cmd(
        model: Path = typer.Argument(..., help="benchmark folder written by `anb fit` or "
                                               "`anb adapt`, or a packaged name: accel-nasbench, "
                                               "help-nasbench201, help-fbnet"),
        archs: str = typer.Argument("-", help="file of architectures (strings, JSON, or a CSV "
                                              "with 'arch' or block{i}_* columns), one "
                                              "architecture string, or '-' for stdin"),
        metrics: str | None = typer.Option(None, help="comma-separated metrics (default all)"),
        noise: bool = typer.Option(False, help="sample plausible observed values"),
        seed: int | None = typer.Option(None, min=0),
        level: float | None = typer.Option(None, help="add <metric>_lo/_hi: the central "
                                                       "interval of the predictive "
                                                       "distribution at this level, e.g. 0.9"),
        out: Path | None = typer.Option(None, "--out", "-o", help="CSV file (default stdout)"),
        space: str | None = space_option("search space; must be the benchmark's (default: it)"),
    ) -> None:
        """Predict metrics for architectures (strings, JSON records or CSV); writes CSV."""
        from anb.searchspace.registry import resolve_space
        from anb.surrogates import load
        from anb.surrogates.benchmark import check_distinct
        from anb.surrogates.identity import IDENTITY, describe
        from anb.surrogates.packaged import benchmark_space

        try:
            if out is not None:
                check_file(out)
            in_space = resolve_space(space, benchmark_space(model).name,
                                     f"benchmark {str(model)!r}")
            items = _query_archs(archs, in_space)
            names = _split_list(metrics)
            if names:
                check_distinct(names, "--metrics")
            bench = load(model)
            frame = bench.query(items, names, noise=noise, seed=seed,
                                level=level)
        except (ValueError, FileNotFoundError) as err:
            fail(err)
        typer.echo(f"anb: answered by {describe(frame.attrs[IDENTITY])}", err=True)
        csv = frame.to_csv(index=False, float_format="%.6g")
        if out is None:
            typer.echo(csv, nl=False)
        else:
            atomic_write_text(out, csv)


def _query_archs(archs: str, space: Space) -> list[Any]:
    """``anb query``'s architectures: stdin for ``-``, the file ``archs`` when it exists, else
    ``archs`` itself as one architecture string of ``space`` (an error names both readings)."""
    if archs == "-":
        return read_archs(sys.stdin.read(), "stdin", space=space)
    if Path(archs).exists():
        return read_archs(read_text(archs), archs, space=space)
    try:
        return [space.format(space.parse_string(archs))]
    except ValueError as err:
        raise ValueError(f"{archs!r} is neither a file nor an architecture of space "
                         f"{space.name}: {err}") from None


def _split_list(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None
