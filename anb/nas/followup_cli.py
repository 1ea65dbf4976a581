"""``anb retrain`` and ``anb front-report`` (registered on the root app)."""
from __future__ import annotations

from pathlib import Path

import typer

from anb.cli_support import fail
from anb.nas.followup import DEFAULT_ACCURACY_METRIC


def retrain_cmd(
    ctx: typer.Context,
    archs: Path = typer.Argument(..., help="A search's pareto.csv (or any CSV with 'arch')."),
    out: Path = typer.Option(..., "--out", help="Folder: runs/ and accuracy.csv."),
    config: str = typer.Option("imagenet_full.ini", help="Recipe: shipped name or INI path."),
) -> None:
    """Fully train the chosen designs (extra --section.key value arguments go to the trainer)."""
    from anb.nas.followup import retrain

    try:
        status, dataset = retrain(archs, out, config, list(ctx.args))
    except (FileNotFoundError, ValueError) as err:
        fail(err)
    written = (f"accuracy -> {dataset}" if dataset is not None
               else f"no runs in {out / 'runs'}: no accuracy written")
    typer.echo(f"trainer exit status {status}; {written}")
    raise typer.Exit(status)


def front_report_cmd(
    search: Path = typer.Argument(..., help="Search results folder (pareto.csv, summary.json)."),
    out: Path = typer.Option(..., "--out", help="Report folder."),
    accuracy: Path | None = typer.Option(None, help="Trained accuracy dataset (anb retrain)."),
    measured: Path | None = typer.Option(None, help="'anb measure' results folder."),
    accuracy_metric: str = typer.Option(DEFAULT_ACCURACY_METRIC, help="Accuracy column."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even when it "
                                   "holds something other than an anb front-report."),
) -> None:
    """Predicted vs measured accuracy and speed of a front; which designs fall off it."""
    from anb.nas.followup import FRONT_REPORT, front_report
    from anb.outputs import replace_folder

    try:
        with replace_folder(out, FRONT_REPORT, overwrite) as tmp:
            s = front_report(search, tmp, accuracy, measured, accuracy_metric)
    except (FileNotFoundError, ValueError, KeyError) as err:
        fail(err)
    typer.echo(f"{s['complete']} of {s['designs']} designs measured; "
               f"{len(s['falls_off'])} fall off the front -> {out}")


def register(app: typer.Typer) -> None:
    app.command("retrain", context_settings={"allow_extra_args": True,
                                             "ignore_unknown_options": True})(retrain_cmd)
    app.command("front-report")(front_report_cmd)
