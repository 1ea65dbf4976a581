"""Runs the TPU back-end's tests for real in the torch-xla environment (torch 2.9.x + torch-xla
2.9.0 on the XLA CPU client, ``PJRT_DEVICE=CPU``), which ``bash test.sh`` builds with
``scripts/setup_xla_env.sh`` beside the suite (this test waits for its status file). The main
environment's torch cannot load torch-xla, so those tests run in a subprocess of that
environment; here they only skip."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

#: scripts/setup_xla_env.sh's default: the user's cache, shared by every clone on the machine.
XLA_VENV = os.environ.get("XLA_VENV") or (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "anb" / "venv-xla")
XLA_PYTHON = Path(XLA_VENV) / "bin" / "python"
#: How long to wait for ``bash test.sh``'s background build of that environment.
SETUP_WAIT_S = 600


def _wait_for_setup() -> None:
    """Under ``bash test.sh``, wait until its build of the environment has finished; a failed
    build fails here with its log."""
    status = os.environ.get("ANB_XLA_SETUP_STATUS")
    if not status:
        return
    path = Path(status)
    deadline = time.monotonic() + SETUP_WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"scripts/setup_xla_env.sh did not finish within {SETUP_WAIT_S} s "
                        f"(log: {path.parent / 'setup_xla.log'})")
        time.sleep(2)
    code = path.read_text().strip()
    if code != "0":
        log = (path.parent / "setup_xla.log").read_text(errors="replace")[-3000:]
        pytest.fail(f"scripts/setup_xla_env.sh exited with {code}:\n{log}")


@pytest.mark.timeout(900)
@pytest.mark.skipif(os.environ.get("ANB_SKIP_XLA") == "1", reason="ANB_SKIP_XLA=1")
def test_tpu_backend_in_the_torch_xla_environment():
    _wait_for_setup()
    if not XLA_PYTHON.exists():
        pytest.skip(f"no torch-xla environment at {XLA_PYTHON}: run scripts/setup_xla_env.sh "
                    "(bash test.sh does)")
    env = {**os.environ, "PJRT_DEVICE": "CPU", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [str(XLA_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         "tests/test_throughput_tpu.py"],
        cwd=REPO, env=env, capture_output=True, text=True)
    sys.stdout.write(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # Every XLA test must have run there: none may skip for a missing torch-xla.
    assert "needs torch-xla" not in proc.stdout, proc.stdout[-4000:]
