"""``benchmarks/new_device.py`` runs from a clean checkout: the whole-board protocol on the GPU
pair at n = 5, one draw (its figures are the benchmark's business; this catches a crash, a
missing row or a publish that should not happen)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_whole_board_protocol_runs_and_scores_every_hidden_metric():
    results = REPO / "benchmarks" / "RESULTS.md"
    before = results.read_bytes()
    env = {**os.environ, "ANB_PUBLISH": "0", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "new_device.py"),
                           "--protocol", "board", "--devices", "gpu", "--n", "5", "--reps", "1",
                           "--active-pool", "50"], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {m.group(1): [float(v) for v in m.groups()[1:]] for m in re.finditer(
        r"^\| gpu \| (\w+) \| 5 \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| "
        r"([\d.]+) \(([\d.]+)\) \| ([\d.]+) \(([\d.]+)\) \|", proc.stdout, re.M)}
    assert set(rows) == {"throughput_a100", "throughput_3090"}, proc.stdout
    for full, ceiling, scratch, _ridge, random, _, active, _ in rows.values():
        # the full-data surrogate bounds the transfer, which beats 5 points from scratch
        assert full > ceiling > max(random, active) > scratch
    assert re.search(r"^n = 5 random: mean tau gap [\d.]+", proc.stdout, re.M)
    # the proper scores by the one interval definition: the coverage is the table's
    scored = {m.group(1): [float(v) for v in m.groups()[1:]] for m in re.finditer(
        r"^\| 5 \| (random|active) \| ([\d.]+) \| ([\d.]+) \| (-?[\d.]+) \| ([\d.]+) \| "
        r"([\d.]+) \| ([\d.]+) \|$", proc.stdout, re.M)}
    assert set(scored) == {"random", "active"}, proc.stdout
    for mode, column in (("random", 5), ("active", 7)):
        coverage = np.mean([row[column] for row in rows.values()])
        assert scored[mode][0] == pytest.approx(coverage, abs=1e-3)
        crps, _nll, interval, sharp, _mean_ratio = scored[mode][1:]
        assert 0 < crps < interval and sharp > 0
    assert results.read_bytes() == before  # ANB_PUBLISH=0: nothing published
