"""The README's accuracy smoke run, exactly as written (read from README.md) and through the
real console entry, learns: every architecture ends at >= 90 % top-1 on the bundled digits
(10 classes, chance 10 %) within the shipped epochs, with a validation loss below that of a
uniform guess at every evaluated epoch (the run used to end at chance with losses up to 4e11)."""
from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys

import pytest

from tests.test_readme import README, REPO, anb_lines, read_blocks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # ~2 1/4 min of CPU
SMOKE = "anb train --config digits_tiny.ini"


def smoke_commands() -> list[str]:
    """The ``anb`` lines of the README block that holds the smoke run."""
    (block,) = [b for b in read_blocks(README.read_text()) if b.lang == "bash"
                and any(line.startswith(SMOKE) for line in anb_lines(b.code))]
    return anb_lines(block.code)


def test_readme_smoke_run_learns(tmp_path):
    bin_dir, work = tmp_path / "bin", tmp_path / "work"
    bin_dir.mkdir()
    work.mkdir()
    shim = bin_dir / "anb"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m anb "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "WANDB_MODE": "disabled"}
    commands = smoke_commands()
    assert any(c.startswith("anb config accuracy/digits_tiny.ini") for c in commands), commands
    for command in commands:
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=work, env=env,
                              capture_output=True, text=True, timeout=850)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    records = [json.loads(p.read_text())
               for p in sorted((work / "results" / "digits" / "records").glob("*.json"))]
    assert len(records) == 3, len(records)
    uniform = math.log(10)  # cross-entropy of predicting every class alike
    for record in records:
        history = record["provenance"]["val_history"]
        assert record["metrics"]["val_top1"] >= 90.0, (record["provenance"]["arch"], history)
        assert all(math.isfinite(h["val_loss"]) and h["val_loss"] < uniform
                   for h in history), (record["provenance"]["arch"], history)
