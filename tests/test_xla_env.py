"""Runs the TPU back-end's tests for real in the torch-xla environment (torch 2.9.x + torch-xla
2.9.0 on the XLA CPU client, ``PJRT_DEVICE=CPU``), which ``bash test.sh`` builds with
``scripts/setup_xla_env.sh``. The main environment's torch cannot load torch-xla, so those tests
run in a subprocess of that environment; here they only skip."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

XLA_PYTHON = Path(os.environ.get("XLA_VENV", REPO / "build" / "venv-xla")) / "bin" / "python"


@pytest.mark.timeout(900)
@pytest.mark.skipif(os.environ.get("ANB_SKIP_XLA") == "1", reason="ANB_SKIP_XLA=1")
def test_tpu_backend_in_the_torch_xla_environment():
    if not XLA_PYTHON.exists():
        pytest.skip(f"no torch-xla environment at {XLA_PYTHON}: run scripts/setup_xla_env.sh "
                    "(bash test.sh does)")
    env = {**os.environ, "PJRT_DEVICE": "CPU", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [str(XLA_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         "tests/test_throughput_tpu.py"],
        cwd=REPO, env=env, capture_output=True, text=True)
    sys.stdout.write(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # Every XLA test must have run there: none may skip for a missing torch-xla.
    assert "needs torch-xla" not in proc.stdout, proc.stdout[-4000:]
