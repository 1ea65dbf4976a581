"""``anb`` commands run one after another in one fresh interpreter of their own.

Where a test is about what a new process sees (a plug-in found only through its entry point on
that process's path) but not about each command's start-up, one child process runs every
command through the console entry's wrapper (:func:`tests.console_fixtures.run_console`) and
answers each with its exit code, stdout and stderr: one start-up (about 3 s of imports) instead
of one per command. The answers travel on a pipe of their own, so nothing a command prints can
be taken for one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import TracebackType

#: The child: one JSON request a line on stdin, one JSON answer a line on the answer pipe.
SERVER = """
import json, os, sys
from pathlib import Path
from tests.console_fixtures import run_console
answers = os.fdopen(int(sys.argv[1]), "w")
for line in sys.stdin:
    request = json.loads(line)
    done = run_console(request["argv"], Path(request["cwd"]), request["env"])
    answers.write(json.dumps([done.returncode, done.stdout, done.stderr]) + "\\n")
    answers.flush()
"""


class ConsoleProcess:
    """A child interpreter with ``env`` as its environment that runs ``anb`` commands in turn
    (a context manager: the child ends with the block)."""

    def __init__(self, env: dict[str, str]) -> None:
        read, write = os.pipe()
        self._proc = subprocess.Popen([sys.executable, "-c", SERVER, str(write)], env=env,
                                      stdin=subprocess.PIPE, text=True, pass_fds=(write,))
        os.close(write)
        self._answers = os.fdopen(read)

    def run(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
        """``anb argv`` in ``cwd`` (``env`` added to the child's environment for it)."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "env": env or {}})
                               + "\n")
        self._proc.stdin.flush()
        line = self._answers.readline()
        assert line, f"the anb process ended (exit {self._proc.wait()}) running {argv}"
        code, out, err = json.loads(line)
        return subprocess.CompletedProcess(["anb", *argv], code, out, err)

    def __enter__(self) -> ConsoleProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=60)
        finally:
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            self._answers.close()
