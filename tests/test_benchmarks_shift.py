"""``benchmarks/shift.py``'s goal check and plot on a small hand-made table (the fits
themselves are the surrogate tests' business)."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def shift():
    name = "anb_benchmarks_shift"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / "shift.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _table() -> pd.DataFrame:
    rows = []
    for family, holdout, target, cov, sharp, err in [
            ("stage", "s0", "val_top1", 0.90, 1.2, 0.5),
            ("stage", "s0", "latency_x", 0.40, 0.3, 9.0),
            ("no_se", "train without SE", "val_top1", 0.99, 3.0, 1.1)]:
        rows.append({"family": family, "holdout": holdout, "target": target, "where": "in",
                     "n": 10, "tau": 0.9, "err": 0.3, "cov90": 0.9, "sharp": 1.0, "flag": 0.0})
        rows.append({"family": family, "holdout": holdout, "target": target, "where": "out",
                     "n": 10, "tau": 0.8, "err": err, "cov90": cov, "sharp": sharp, "flag": 1.0})
    return pd.DataFrame(rows)


def test_goals_are_checked_per_cell(shift):
    met = shift.goals(_table())[["coverage_ok", "sharpness_ok", "error_ok", "flag_ok"]]
    # held-out error under twice the in-distribution one: no flag needed
    assert met.loc[("stage", "s0", "val_top1")].tolist()[:3] == [1.0, 1.0, 1.0]
    assert np.isnan(met.loc[("stage", "s0", "val_top1"), "flag_ok"])
    # 9 % MAPE on one stage's device metric misses the 8 % goal; under-covered, too sharp,
    # and flagged (all of it) where its error is far above the in-distribution one
    assert met.loc[("stage", "s0", "latency_x")].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert met.loc[("no_se", "train without SE", "val_top1"), "coverage_ok"] == 0.0


def test_plot_writes_one_png_with_a_panel_pair_per_family(shift, tmp_path):
    path = tmp_path / "shift.png"
    shift.plot(_table(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.pyplot as plt
    assert not plt.get_fignums()  # closed after writing
    image = plt.imread(path)
    assert image.shape[1] > image.shape[0] > 0 and np.isfinite(image).all()
