"""Running ``anb`` in the test's own process through the console entry's code path.

``anb.cli.main`` is ``anb.cli_support.run(app)``: the same wrapper turns usage errors, a user's
OS errors, a missing extra and Ctrl-C into one line and an exit code. :func:`run_console` calls
that wrapper with captured streams, so a case costs the command's work instead of a fresh
interpreter's start-up (about 3 s of imports each). What only a process shows (signals, the
installed console script, concurrent runs) keeps a subprocess in its own test.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from unittest import mock


@contextlib.contextmanager
def _process_state(argv: list[str], cwd: Path, env: dict[str, str], stdin: str
                   ) -> Iterator[None]:
    """``argv`` as the command line, ``cwd``, ``env`` added to the environment, ``stdin`` as
    standard input and the CPU affinity for the block; all put back after it, as a
    subprocess's end would (``anb measure`` pins its CPUs)."""
    before = os.getcwd()
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    with mock.patch.dict(os.environ, env), mock.patch.object(sys, "argv", ["anb", *argv]), \
            mock.patch.object(sys, "stdin", io.StringIO(stdin)):
        os.chdir(cwd)
        try:
            yield
        finally:
            os.chdir(before)
            if affinity is not None:
                os.sched_setaffinity(0, affinity)


def run_console(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
                stdin: str = "") -> subprocess.CompletedProcess:
    """``anb argv`` run in ``cwd`` as the console script runs it, in this process: its exit
    code (1 and the traceback on stderr for an exception the wrapper lets through, as the
    interpreter would), stdout and stderr. ``stdin``: what it reads as standard input."""
    from anb.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: int
    with _process_state(argv, cwd, env or {}, stdin), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            main()
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:  # sys.exit("message"): printed, exit code 1
                print(stop.code, file=err)
                code = 1
        except Exception:  # noqa: BLE001 - what the interpreter prints for an uncaught one
            traceback.print_exc(file=err)
            code = 1
    return subprocess.CompletedProcess(["anb", *argv], code, out.getvalue(), err.getvalue())
