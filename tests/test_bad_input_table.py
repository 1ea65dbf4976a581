"""The bad-input table (``scripts/bad_input_table.py``: every ``anb`` command and public function
given one bad input of each kind that applies, 475 cases) runs whole in the suite: every case
must end in a clear error, i.e. no traceback, no wrong behaviour (a result, work started, files
left behind) and no vague message. The cases it found are pinned one by one in
tests/test_bad_inputs.py and tests/test_bad_api_inputs.py; this catches a new command or
argument that answers badly.

Its one time bound (``--hang``: a case still running after it started work instead of refusing)
is set far above what any refusal takes on a loaded machine, so only a real hang reaches it."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

#: Seconds after which a case counts as a hang: refusals take a few seconds at most.
HANG_SECONDS = 300


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_bad_input_of_the_table_is_refused_clearly(tmp_path):
    out = tmp_path / "cases.tsv"
    # this checkout's anb, whatever the environment's install points at (a worktree's .venv may
    # be another checkout's, whose editable install would otherwise be the one tested)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bad_input_table.py"),
                           "--out", str(out), "--hang", str(HANG_SECONDS)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1700)
    summary = re.search(r"^all (\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", done.stdout, re.M)
    assert summary, done.stdout[-3000:] + done.stderr[-3000:]
    total, clear = int(summary[1]), int(summary[2])
    assert total >= 475, done.stdout  # the table has not lost cases
    assert (clear, done.returncode) == (total, 0), done.stdout + out.read_text()
