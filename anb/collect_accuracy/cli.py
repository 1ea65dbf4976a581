"""``anb train``, ``anb export`` and ``anb write-ffcv``."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from anb.cli_support import fail
from anb.collect_accuracy.config import MAX_IMAGE_SIDE, MAX_WRITERS
from anb.outputs import check_file


def register(app: typer.Typer) -> None:
    """Add the accuracy-collection commands to the ``anb`` root app."""

    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def train(ctx: typer.Context,
              config: Path | None = typer.Option(None, help="INI recipe file.")) -> None:
        """Train the configured stream of architectures (resumable). Extra arguments override
        config keys: --section.key value or --key value (every key with its default:
        `python -m anb.collect_accuracy.train --help`). Launch several processes with
        `torchrun --nproc_per_node N --no-python anb train ...` or
        `torchrun ... -m anb.collect_accuracy.train ...`."""
        from anb.collect_accuracy.train import main

        argv = (["--config", str(config)] if config else []) + list(ctx.args)
        raise typer.Exit(main(argv))

    @app.command("export")
    def export_cmd(
        out: Path = typer.Option(..., "--out", "-o", help="Output CSV (Parquet beside it)."),
        local: list[Path] = typer.Option([], "--local", help="Trainer results folder(s)."),
        wandb_dir: list[Path] = typer.Option([], "--wandb-dir",
                                             help="Folder(s) holding offline wandb runs."),
        project: list[str] = typer.Option([], "--project",
                                          help="wandb 'entity/project' read through wandb.Api."),
        duplicates: str = typer.Option("first", help="Duplicate rule: first or mean."),
        space: str = typer.Option("anb-mnasnet", help="Search space name."),
        parquet: bool = typer.Option(True, help="Also write Parquet."),
        recipe: str | None = typer.Option(
            None, help="Recipe hash (or prefix) to export when the sources hold several."),
    ) -> None:
        """Build one dataset (one row per architecture) from results folders and wandb."""
        from anb.collect_accuracy.export import export
        from anb.collect_accuracy.train import trainer_space

        if not (local or wandb_dir or project):
            fail("nothing to export; give --local, --wandb-dir and/or --project")
        try:
            check_file(out)
            api = None
            if project:
                import wandb

                try:
                    api = wandb.Api()
                except Exception as err:  # noqa: BLE001 - wandb's own types (no key, no network)
                    fail(f"option --project {project}: cannot open wandb.Api "
                         f"({type(err).__name__}: {err}); log in with `wandb login` or "
                         "export offline runs with --wandb-dir")
            summary = export(out, local, wandb_dir, api, project, duplicates,
                             space=trainer_space(space), parquet=parquet, recipe=recipe)
        except (FileNotFoundError, ValueError) as err:
            fail(err)
        typer.echo(json.dumps(summary))

    @app.command("write-ffcv")
    def write_ffcv_cmd(
        source: Path = typer.Argument(..., help="ImageNet-style folder: <class>/<image>."),
        out: Path = typer.Argument(..., help="Output .beton file."),
        max_side: int = typer.Option(400, min=8, max=MAX_IMAGE_SIDE,
                                     help="Longest side after resizing."),
        quality: int = typer.Option(90, min=1, max=100, help="JPEG quality."),
        workers: int = typer.Option(8, min=1, max=MAX_WRITERS, help="Writer processes."),
        compress_probability: float = typer.Option(
            1.0, min=0.0, max=1.0,
            help="Share of images stored as JPEG, the rest raw (the reference's "
                      "train_400_0.50_90: 0.5)."),
    ) -> None:
        """Write an image folder as an FFCV file (max side 400, JPEG quality 90)."""
        from anb.collect_accuracy.ffcv_io import write_beton

        try:
            check_file(out, "OUT")
            count = write_beton(source, out, max_side, quality, workers, compress_probability)
        except (FileNotFoundError, ValueError, ImportError) as err:
            fail(err)
        typer.echo(f"wrote {count} images to {out}")
