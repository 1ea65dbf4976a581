"""``anb adapt``: a surrogate for a new device from a few measurements, and what to measure next."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def _fail(err: Exception) -> None:
    typer.echo(f"error: {err}", err=True)
    raise typer.Exit(code=2)


def adapt_cmd(
    device: str = typer.Option(..., "--device", help="Device name: the CSV column is "
                               "throughput_<NAME> or latency_<NAME>."),
    base: Path = typer.Option(..., "--base", help="Surrogate artifact of the known devices "
                              "(written by 'anb fit')."),
    measured: Optional[Path] = typer.Option(None, "--measured", help="CSV with 'arch' and "
                                            "<kind>_<NAME> columns, or an 'anb measure' folder."),
    out: Optional[Path] = typer.Option(None, "--out", help="Adapted artifact folder to write."),
    metric: Optional[str] = typer.Option(None, "--metric", help="throughput | latency (when "
                                         "the file has both)."),
    suggest: int = typer.Option(0, "--suggest", help="Print the K most informative "
                                "architectures to measure next (none already measured)."),
    candidates: int = typer.Option(5000, help="Sampled candidates --suggest chooses from."),
    seed: int = typer.Option(0, help="Seed of the candidate sample."),
) -> None:
    """Adapt a surrogate to a new device from measured architectures; suggest what to measure."""
    from anb.surrogates.adapt_api import adapt, suggest as suggest_archs

    if suggest == 0 and (measured is None or out is None):
        _fail(ValueError("give --measured and --out to adapt, or --suggest K to choose "
                         "architectures to measure"))
    try:
        if measured is not None and out is not None:
            bench, model = adapt(device, measured, base, out, metric)
            typer.echo(f"{model.target}: adapted from {model.n_points} measured architectures "
                       f"on {len(model.known)} known devices; leave-one-out log error "
                       f"{model.loo_rmse:.4f} -> {out}")
        if suggest:
            for arch in suggest_archs(base, suggest, measured, device, metric,
                                      n_candidates=candidates, seed=seed):
                typer.echo(arch)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)


def register(app: typer.Typer) -> None:
    """Add ``anb adapt`` to the root app."""
    app.command("adapt")(adapt_cmd)
