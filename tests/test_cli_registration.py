"""One way to add commands (each stage's ``register(app)``) and one declaration of the options
several commands share (the queue, the packaged benchmark's name)."""
from __future__ import annotations

import ast

import click
import typer

from anb import cli, resources
from anb.cli_support import DEFAULT_QUEUE, QUEUE_ENV
from tests.conftest import REPO


def _commands(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_the_root_app_only_calls_each_stages_register():
    """``anb/cli.py`` adds no command itself: no ``add_typer`` or ``command`` call."""
    tree = ast.parse((REPO / "anb" / "cli.py").read_text())
    calls = {node.func.attr for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert "register" in calls and not calls & {"add_typer", "command"}


def test_every_queue_option_is_the_shared_one():
    """``anb search --queue`` is the exception: off unless given (with it the search submits
    its measurements instead of measuring here), so it neither defaults nor reads $ANB_QUEUE."""
    root = typer.main.get_command(cli.app)
    found = []
    for path, command in _commands(root):
        for param in command.params:
            if "--queue" in getattr(param, "opts", []) and path != ("search",):
                found.append(" ".join(path))
                assert param.envvar == QUEUE_ENV and param.default == DEFAULT_QUEUE, path
    assert {"adapt", "worker", "queue submit", "queue status"} <= set(found)


def test_no_module_spells_out_the_shared_values():
    """The queue default, its variable and the packaged benchmark's name are declared once."""
    owners = {"anb-queue.db": "anb/cli_support.py", "ANB_QUEUE": "anb/cli_support.py",
              resources.PACKAGED_BENCHMARK: "anb/resources.py"}
    for path in (REPO / "anb").rglob("*.py"):
        literals = {node.value for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        for value, owner in owners.items():
            if value in literals:
                assert str(path.relative_to(REPO)) == owner, (value, path)


def test_no_help_text_holds_what_rich_would_take_as_markup():
    """Bug class: ``[remote]`` in a command's help was read as a style tag by rich and vanished
    from ``anb measure --help`` ("a board over , a Qualcomm SoC"). No command or option help
    holds a bracketed word (``\\[`` escapes one)."""
    import re

    tag = re.compile(r"(?<!\\)\[[A-Za-z_./#-]+\]")
    root = typer.main.get_command(cli.app)
    found = []
    for path, command in _commands(root):
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        found += [(" ".join(path), m.group()) for text in texts for m in tag.finditer(text)]
    assert not found
