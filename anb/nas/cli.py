"""``anb search``: run a NAS algorithm on a surrogate benchmark (or the analytic counters)."""
from __future__ import annotations

from pathlib import Path

import typer

from anb.cli_support import fail, space_option


def search(
    objective: list[str] = typer.Option(..., "--objective", "-o",
                                        help="metric[:max|min], repeat for multi-objective."),
    constraint: list[str] | None = typer.Option(None, "--constraint", "-c",
                                                   help="e.g. 'latency_zcu102<=5'."),
    benchmark: Path | None = typer.Option(None, help="Benchmark folder (`anb fit` or `anb "
                                             "adapt`), or a packaged name (accel-nasbench, "
                                             "help-nasbench201, help-fbnet); without it "
                                             "only macs/params/depth are known."),
    algorithm: str = typer.Option("re", help="random | re (regularized evolution) | nsga2 "
                                  "(anb's default, on pymoo) | pymoo_nsga2 (pymoo's defaults)"),
    budget: int = typer.Option(1000, min=1, help="Evaluations. A budget whose estimated run "
                               "time (from a pilot of 256 evaluations) exceeds 1 hour is "
                               "refused unless --yes is given."),
    yes: bool = typer.Option(False, "--yes", help="Run a budget estimated to take over 1 hour."),
    seed: int = typer.Option(0, min=0),
    noise: bool = typer.Option(False, help="Query plausible noisy observations, not means."),
    out: Path = typer.Option(Path("outputs/search"), help="Results folder."),
    measure: str | None = typer.Option(None, help="Measure this device's metrics in the "
                                          "loop (device config name or TOML, e.g. cpu-ort, or a "
                                          "Qualcomm SNPE config such as snpe-dsp)."),
    queue: str | None = typer.Option(None, help="With --measure: submit measurements to "
                                        "this job queue instead of measuring here."),
    max_measurements: int | None = typer.Option(None, min=1, help="With --measure: at most this "
                                                   "many new measurements."),
    max_hours: float | None = typer.Option(None, min=1e-6, help="With --measure: stop after this "
                                              "many hours."),
    supported_only: bool = typer.Option(False, help="Treat architectures the surrogate flags "
                                        "as out of distribution as infeasible."),
    space: str | None = space_option("search space (default: the benchmark's, else "
                                     "anb-mnasnet)"),
) -> None:
    """Search the space for the best architectures under objectives and constraints.

    Exit status: 0 when a design meets every constraint; 1 when none does (the least violating
    one is shown and the report is written); 2 for bad input or a refused budget."""
    import numpy as np

    from anb.extras import require
    from anb.nas.budget import MAX_SECONDS, PILOT_EVALUATIONS, describe, estimate_seconds
    from anb.nas.evaluators import combined, surrogate_evaluator
    from anb.nas.mutation import random_choices
    from anb.nas.objectives import Constraint, Objective, check_objectives
    from anb.nas.report import SEARCH, headline, write_report
    from anb.nas.search import ALGORITHMS, PYMOO_ALGORITHMS, Problem
    from anb.outputs import check_folder, exclusive, prepare_folder
    from anb.searchspace.registry import resolve_space

    try:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"--algorithm {algorithm!r} is not one of {sorted(ALGORITHMS)}")
        if algorithm in PYMOO_ALGORITHMS:
            require("pymoo", what=f"--algorithm {algorithm}")
        objectives = [Objective.parse(o) for o in objective]
        constraints = [Constraint.parse(c) for c in constraint or []]
        check_objectives(objectives)
        check_folder(out, SEARCH)
        bench = None
        if benchmark is not None:
            from anb.surrogates import load

            bench = load(benchmark)
        in_space = resolve_space(space, None if bench is None else bench.space.name,
                                 f"benchmark {str(benchmark)!r}")

        def evaluator():  # a fresh one per run: a noisy evaluator's stream advances
            return combined(None if bench is None else
                            surrogate_evaluator(bench, noise=noise, seed=seed), space=in_space)

        def problem() -> Problem:
            return Problem(evaluator(), objectives, constraints, supported_only=supported_only,
                           space=in_space)

        run = ALGORITHMS[algorithm]
        if measure is None:  # every metric answered once before the folder is made (an
            # unknown one raises here); a measured search checks its own (check_measured)
            problem().evaluate(random_choices(1, np.random.default_rng(seed), in_space))
        if measure is None and budget > PILOT_EVALUATIONS:
            seconds = estimate_seconds(run, problem(), budget, seed)
            if seconds > MAX_SECONDS and not yes:
                raise ValueError(f"--budget {budget:,} would take about {describe(seconds)} "
                                 f"(estimated from {PILOT_EVALUATIONS} evaluations); runs over "
                                 f"{describe(MAX_SECONDS)} need --yes, or lower --budget")
            typer.echo(f"estimated run time {describe(seconds)}", err=True)
        if measure is not None:  # all of it checked before the folder or a measurement
            from anb.nas.measured import check_measured

            if in_space.name != "anb-mnasnet":
                raise ValueError(f"--measure searches anb-mnasnet only; space "
                                 f"{in_space.name!r} is searched on a benchmark")
            check_measured(evaluator(), measure, objective, constraint or [], max_measurements,
                           max_hours)
        with exclusive(prepare_folder(out, SEARCH), "anb search"):
            if measure is not None:
                from anb.nas.measured import SearchInterrupted, search_measured

                try:
                    s = search_measured(run, evaluator(), measure, queue, objective,
                                        constraint or [], budget, seed, out, max_measurements,
                                        max_hours, supported_only)
                except SearchInterrupted as stop:
                    typer.echo(f"stopped after {stop.evaluations} evaluations, {stop.measured} "
                               "measurements" + (f"; the front so far is in {stop.out}"
                                                 if stop.evaluations else "")
                               + "; run the same command again to resume (stored "
                               "measurements are reused)", err=True)
                    raise
                typer.echo(f"{algorithm} with {s['device']} in the loop: {s['evaluations']} "
                           f"evaluations, {s['measurements']} measurements in "
                           f"{s['hours'] * 60:.1f} min ({s['stopped']}); Pareto front "
                           f"{s['pareto_size']}; results in {out}")
                return
            result = run(problem(), budget, seed=seed, progress=True)
            summary = write_report(result, out)
    except (ValueError, FileNotFoundError) as err:
        fail(err)
    best, *others = headline(summary, result.problem.metrics)
    if not summary["feasible"]:
        typer.echo(f"{algorithm}: {summary['evaluations']} evaluations; results in {out}")
        typer.echo(f"error: {best}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{algorithm}: {summary['evaluations']} evaluations, {best}; "
               f"Pareto front {summary['pareto_size']}; results in {out}")
    for line in others:
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add ``anb search`` to the root app."""
    app.command()(search)
