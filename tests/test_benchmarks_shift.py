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


def test_stage_rank_picks_the_nth_most_common(shift):
    counts = np.array([5, 9, 7, 9, 1])
    # ties keep their order: the first 9 is the most common, the second 9 the 2nd
    assert [shift.ranked(counts, r) for r in (1, 2, 3, 4, 5)] == [1, 3, 2, 0, 4]
    assert shift.ranked(counts, 9) == 4  # past the last: the least common


def test_pooled_coverage_weights_each_region_by_its_rows(shift):
    table = _table()
    table.loc[(table["where"] == "out") & (table["target"] == "val_top1")
              & (table["family"] == "stage"), "n"] = 30
    extra = table[(table["family"] == "stage") & (table["target"] == "val_top1")].copy()
    extra["holdout"], extra["cov90"], extra["n"] = "s1", 0.5, 10
    pooled = shift.pooled_coverage(pd.concat([table, extra]))
    # s0 covers 0.90 of 30 rows, s1 0.50 of 10: 32 of 40, not the plain mean 0.70
    assert pooled.loc["stage", "val_top1"] == pytest.approx(0.8)
    assert pooled.loc["stage", "latency_x"] == pytest.approx(0.4)


def test_shared_part_is_one_when_every_row_is_off_the_same_way(shift):
    from types import SimpleNamespace

    y = np.array([1.0, 2.0, 3.0, 4.0])
    labels = {"val_top1": SimpleNamespace(values=y, present=np.ones(4, dtype=bool))}
    prepared = SimpleNamespace(labels=labels)
    rows = np.ones(4, dtype=bool)
    biased = pd.DataFrame({"val_top1": y + [0.5, 1.0, 0.2, 0.3], "val_top1_std": 1.0})
    assert shift.scores(biased, prepared, rows, "val_top1")["shared"] == pytest.approx(1.0)
    assert shift.scores(biased, prepared, rows, "val_top1")["bias"] == pytest.approx(0.5)
    mixed = pd.DataFrame({"val_top1": y + [0.5, -0.5, 1.0, -1.0], "val_top1_std": 1.0})
    assert shift.scores(mixed, prepared, rows, "val_top1")["shared"] == pytest.approx(0.0)
    assert shift.scores(mixed, prepared, rows, "val_top1")["bias"] == pytest.approx(0.0)
    labels["latency_zcu102"] = labels["val_top1"]  # device metric: the bias in % of the label
    slow = pd.DataFrame({"latency_zcu102": 1.1 * y, "latency_zcu102_std": 0.1 * y})
    assert shift.scores(slow, prepared, rows, "latency_zcu102")["bias"] == pytest.approx(10.0)
    table = _table().assign(shared=[0.0, 0.9, 0.0, 0.3, 0.0, 0.5])
    bands = shift.shared_by_band(table)
    assert bands.loc[("stage", "under")].tolist() == [1, 0.3]
    assert bands.loc[("stage", "within")].tolist() == [1, 0.9]
    assert bands.loc[("no_se", "over")].tolist() == [1, 0.5]
