"""The ``anb`` command line: one sub-command group per stage."""
from __future__ import annotations

import typer

from anb.nas.cli import search
from anb.pipeline import pipeline
from anb.searchspace.cli import app as space_app

app = typer.Typer(
    name="anb",
    help="Build and serve accelerator-aware NAS benchmarks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(space_app, name="space")
app.command()(pipeline)
app.command()(search)
# Each stage registers its own group below: app.add_typer(<stage>_app, name="<stage>").
from anb.collect_throughput.cli import register as register_throughput  # noqa: E402

register_throughput(app)
from anb.collect_accuracy.cli import register as register_accuracy  # noqa: E402

register_accuracy(app)
from anb.surrogates.cli import register as register_surrogates  # noqa: E402

register_surrogates(app)
from anb.collect_throughput.edge_cli import register as register_edge  # noqa: E402

register_edge(app)
from anb.package_cli import register as register_package  # noqa: E402

register_package(app)
from anb.collect_throughput.queue_cli import register as register_queue  # noqa: E402

register_queue(app)
from anb.surrogates.adapt_cli import register as register_adapt  # noqa: E402

register_adapt(app)
from anb.nas.followup_cli import register as register_followup  # noqa: E402

register_followup(app)


def main() -> None:
    """The ``anb`` console script (and ``python -m anb``)."""
    from anb.cli_support import run

    run(app)
