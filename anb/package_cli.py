"""``anb --version``, ``anb config``, ``anb cite`` and ``anb slurm-template``: what the installed
package carries."""
from __future__ import annotations

import typer

from anb import resources
from anb.version import __version__


def _version(value: bool) -> None:
    if value:
        from anb.surrogates.identity import describe
        from anb.surrogates.packaged import packaged_identity

        typer.echo(f"anb {__version__}")
        typer.echo(describe(packaged_identity()))
        raise typer.Exit()


def packaged_configs() -> list[str]:
    """Every packaged config as ``<kind>/<name>`` (``devices/a100.toml``, ...)."""
    return sorted(str(p.relative_to(resources.CONFIG_DIR)) for p in resources.CONFIG_DIR.rglob("*")
                  if p.is_file() and not p.name.startswith("."))


def register(app: typer.Typer) -> None:
    """Add ``--version``, ``config``, ``cite`` and ``slurm-template`` to the root ``anb`` app."""

    @app.callback()
    def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the anb version and exit.")) -> None:
        """Build and serve accelerator-aware NAS benchmarks."""

    @app.command("config")
    def config_cmd(name: str | None = typer.Argument(
            None, help="<kind>/<name>, e.g. surrogates/default.json; none: list them")) -> None:
        """Print a packaged config (device, training recipe, surrogate, SLURM) or list them."""
        if name is None:
            typer.echo("\n".join(packaged_configs()))
            return
        kind, _, base = name.partition("/")
        try:
            path = resources.config_path(kind, base)
        except (FileNotFoundError, ValueError) as err:
            typer.echo(f"error: config {name!r}: {err}; list them with `anb config`", err=True)
            raise typer.Exit(code=2) from None
        typer.echo(path.read_text(), nl=False)

    @app.command("cite")
    def cite_cmd(benchmark: str = typer.Argument(
            resources.PACKAGED_BENCHMARK, help="the packaged benchmark whose data to cite")
    ) -> None:
        """Print the BibTeX of a packaged benchmark's data and of the method (anb)."""
        from anb.cli_support import fail
        from anb.surrogates.identity import citations

        try:
            text = citations(benchmark)
        except ValueError as err:
            fail(err)
        typer.echo(text, nl=False)

    @app.command("slurm-template")
    def slurm_template() -> None:
        """Print the SLURM job script for `anb train` (anb slurm-template > train.sbatch)."""
        typer.echo(resources.config_path("slurm", "train.sbatch").read_text(), nl=False)
