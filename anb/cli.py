"""The ``anb`` command line: each stage's ``cli`` module adds its commands (``register(app)``)."""
from __future__ import annotations

import typer

from anb import package_cli, pipeline
from anb.collect_accuracy import cli as accuracy_cli
from anb.collect_throughput import cli as throughput_cli
from anb.collect_throughput import edge_cli
from anb.collect_throughput.queue import cli as queue_cli
from anb.nas import cli as search_cli
from anb.nas import followup_cli
from anb.searchspace import cli as space_cli
from anb.surrogates import cli as surrogates_cli
from anb.surrogates import plan_cli
from anb.surrogates.adapt import cli as adapt_cli

app = typer.Typer(
    name="anb",
    help="Build and serve accelerator-aware NAS benchmarks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
for module in (space_cli, pipeline, search_cli, throughput_cli, accuracy_cli, surrogates_cli,
               edge_cli, package_cli, queue_cli, adapt_cli, followup_cli, plan_cli):
    module.register(app)


def main() -> None:
    """The ``anb`` console script (and ``python -m anb``)."""
    from anb.cli_support import run

    run(app)
