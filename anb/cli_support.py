"""What every ``anb`` command shares: the error line, the exit codes, Ctrl-C and the
``--queue`` option.

A mistake the user can fix (a missing file, a folder given for a file, a bad value) ends
with one ``error:`` line on stderr and exit code 2; Ctrl-C ends with exit code 130. A
traceback is left only for a bug in anb itself.
"""
from __future__ import annotations

import functools
import math
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from anb.extras import explain

if TYPE_CHECKING:  # typer is imported where it is used: loading a benchmark needs none of it
    from collections.abc import Callable

    import typer

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: The job queue a command uses unless ``--queue`` or ``$ANB_QUEUE`` names another.
DEFAULT_QUEUE = "anb-queue.db"
QUEUE_ENV = "ANB_QUEUE"


def queue_option(help: str = "SQLite file or postgresql:// URL.") -> Any:
    """The ``--queue`` option (``$ANB_QUEUE``) of every command that uses the job queue."""
    import typer

    return typer.Option(DEFAULT_QUEUE, "--queue", envvar=QUEUE_ENV, help=help)


def space_option(help: str = "search space (default: the one the input names, else "
                              "anb-mnasnet; `anb space list` shows all)") -> Any:
    """The ``--space`` option of every command that reads or makes architectures."""
    import typer

    return typer.Option(None, "--space", help=help)


class UserError(ValueError):
    """A mistake the user can fix: shown as one ``error:`` line, exit code 2."""


def fail(message: object) -> NoReturn:
    """Print ``error: <message>`` to stderr and leave the command with exit code 2."""
    import typer

    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def check_finite(option: str, value: float) -> float:
    """``value``, unless NaN or infinite (Typer lets both through): then fail naming ``option``."""
    if not math.isfinite(value):
        fail(f"{option} {value}: not a finite number")
    return value


def describe_os_error(err: OSError) -> str:
    """``<path>: <what is wrong>`` for an operating-system error on a user's path."""
    what = {
        IsADirectoryError: "is a folder, a file is needed here",
        NotADirectoryError: "is not a folder (a file stands where a folder is needed)",
        FileNotFoundError: "does not exist",
        FileExistsError: "already exists",
        PermissionError: "permission denied",
    }.get(type(err), err.strerror or str(err))
    target = err.filename2 if err.filename2 is not None else err.filename  # a rename's target
    return f"{os.fsdecode(target)}: {what}" if target is not None else str(what)


@functools.cache
def _command(app: typer.Typer) -> Callable[..., Any]:
    """``app`` as the click command it runs as, built once per process: calling the Typer app
    builds it anew each time (about 20 ms), which a process running many commands repeats."""
    import typer

    return typer.main.get_command(app)


def run(app: typer.Typer, args: list[str] | None = None) -> NoReturn:
    """Run ``app`` as the console command: usage errors, a user's OS errors, a module of a
    missing extra and Ctrl-C end with a clear line and exit codes 2 / 2 / 2 / 130 instead of a
    traceback."""
    import typer

    try:
        result = _command(app)(args=args, standalone_mode=False)
    except typer.Abort as err:
        if isinstance(err.__cause__ or err.__context__, KeyboardInterrupt):
            _interrupted()
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        _interrupted()
    except typer.TyperException as err:  # a usage error: click's message and exit code
        err.show()  # type: ignore[attr-defined]  # typer raises only click's, which have show()
        sys.exit(err.exit_code)
    except OSError as err:
        if err.filename is None:
            raise
        typer.echo(f"error: {describe_os_error(err)}", err=True)
        sys.exit(EXIT_USAGE)
    except ImportError as err:  # an optional module: name the extra that installs it
        line = explain(err)
        if line is None:
            raise
        typer.echo(f"error: {line}", err=True)
        sys.exit(EXIT_USAGE)
    if result == EXIT_INTERRUPTED:  # typer turns a KeyboardInterrupt into Exit(130)
        _interrupted()
    sys.exit(result if isinstance(result, int) else 0)


def _interrupted() -> NoReturn:
    import typer

    typer.echo("interrupted (Ctrl-C): nothing is left half-written; commands that resume "
               "(measure, train, search --measure) keep their finished work", err=True)
    sys.exit(EXIT_INTERRUPTED)
