"""``anb search``: run a NAS algorithm on a surrogate benchmark (or the analytic counters)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from anb.cli_support import fail


def search(
    objective: list[str] = typer.Option(..., "--objective", "-o",
                                        help="metric[:max|min], repeat for multi-objective."),
    constraint: Optional[list[str]] = typer.Option(None, "--constraint", "-c",
                                                   help="e.g. 'latency_zcu102<=5'."),
    benchmark: Optional[Path] = typer.Option(None, help="Fitted surrogate benchmark folder, "
                                             "or accel-nasbench (packaged); without it only macs/params/depth are known."),
    algorithm: str = typer.Option("re", help="random | re (regularized evolution) | nsga2 "
                                  "(anb's default, on pymoo) | pymoo_nsga2 (pymoo's defaults)"),
    budget: int = typer.Option(1000, min=1, help="Evaluations."),
    seed: int = typer.Option(0),
    noise: bool = typer.Option(False, help="Query plausible noisy observations, not means."),
    out: Path = typer.Option(Path("outputs/search"), help="Results folder."),
    measure: Optional[str] = typer.Option(None, help="Measure this device's metrics in the "
                                          "loop (device config name or TOML, e.g. cpu-ort, or a "
                                          "Qualcomm SNPE config such as snpe-dsp)."),
    queue: Optional[str] = typer.Option(None, help="With --measure: submit measurements to "
                                        "this job queue instead of measuring here."),
    max_measurements: Optional[int] = typer.Option(None, help="With --measure: at most this "
                                                   "many new measurements."),
    max_hours: Optional[float] = typer.Option(None, help="With --measure: stop after this "
                                              "many hours."),
    supported_only: bool = typer.Option(False, help="Treat architectures the surrogate flags "
                                        "as out of distribution as infeasible."),
) -> None:
    """Search the space for the best architectures under objectives and constraints."""
    from anb.nas.evaluators import combined, surrogate_evaluator
    from anb.nas.objectives import Constraint, Objective
    from anb.nas.report import headline, write_report
    from anb.nas.search import ALGORITHMS, Problem

    try:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"--algorithm {algorithm!r} is not one of {sorted(ALGORITHMS)}")
        surrogate = None
        if benchmark is not None:
            from anb.surrogates import load

            surrogate = surrogate_evaluator(load(benchmark), noise=noise, seed=seed)
        evaluator = combined(surrogate)
        if measure is not None:
            from anb.nas.measured import SearchInterrupted, search_measured

            try:
                s = search_measured(ALGORITHMS[algorithm], evaluator, measure, queue, objective,
                                    constraint or [], budget, seed, out, max_measurements,
                                    max_hours, supported_only)
            except SearchInterrupted as stop:
                typer.echo(f"stopped after {stop.evaluations} evaluations, {stop.measured} "
                           "measurements" + (f"; the front so far is in {stop.out}"
                                             if stop.evaluations else "")
                           + "; run the same command again to resume (stored measurements "
                           "are reused)", err=True)
                raise
            typer.echo(f"{algorithm} with {s['device']} in the loop: {s['evaluations']} "
                       f"evaluations, {s['measurements']} measurements in {s['hours'] * 60:.1f} "
                       f"min ({s['stopped']}); Pareto front {s['pareto_size']}; results in {out}")
            return
        problem = Problem(evaluator, [Objective.parse(o) for o in objective],
                          [Constraint.parse(c) for c in constraint or []],
                          supported_only=supported_only)
        result = ALGORITHMS[algorithm](problem, budget, seed=seed, progress=True)
    except (ValueError, FileNotFoundError) as err:
        fail(err)
    summary = write_report(result, out)
    best, *others = headline(summary, problem.metrics)
    typer.echo(f"{algorithm}: {summary['evaluations']} evaluations, {best}; "
               f"Pareto front {summary['pareto_size']}; results in {out}")
    for line in others:
        typer.echo(line)
