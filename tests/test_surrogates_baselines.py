"""The re-measured baselines are the reference's own tuned settings (REFERENCE.md section 8)."""
from __future__ import annotations

import pytest

from anb.surrogates import prepare
from anb.surrogates.baseline import evaluate_baselines, reference_settings, settings_file
from tests.conftest import DATASET_TARBALL as TARBALL


def test_settings_ship_in_the_package_and_match_the_reference_files():
    """REFERENCE.md section 8: data/anb/baseline_configs, each parameter's default."""
    shared = TARBALL.parent / "baseline_configs"
    for target in ("val_top1", "throughput_a100", "latency_zcu102", "throughput_tpuv3"):
        for family in ("xgboost", "lightgbm"):
            ours = settings_file(target, family)
            assert "anb/configs/surrogates/baselines" in ours.as_posix()
            if shared.is_dir():
                assert ours.read_bytes() == (shared / ours.name).read_bytes()
    acc = reference_settings("val_top1", "xgboost")
    assert acc["max_depth"] == 3 and acc["learning_rate"] == pytest.approx(0.0937280205)
    assert acc["num_rounds"] == 20000 and acc["early_stopping_rounds"] == 100
    assert acc["min_child_weight"] == 63 and "bananas_enc" not in acc
    a100 = reference_settings("throughput_a100", "lightgbm")
    assert a100["num_leaves"] == 100 and a100["max_bin"] == 150 and a100["num_rounds"] == 30000
    with pytest.raises(ValueError,
                       match="no reference xgboost settings for target 'throughput_h100'"):
        reference_settings("throughput_h100", "xgboost")


@pytest.mark.slow
def test_accuracy_xgboost_baseline_lands_on_the_reference_figures():
    """REFERENCE.md section 8: accuracy XGBoost R^2 0.9819 / tau 0.9179 (table: 0.9822/0.9208)."""
    prepared = prepare(TARBALL, ["val_top1"])
    scores = evaluate_baselines(prepared, ["val_top1"], families=("xgboost",))
    row = scores.loc[("val_top1", "xgboost")]
    assert row["r2"] == pytest.approx(0.982, abs=0.002)
    assert row["kendall_tau"] == pytest.approx(0.92, abs=0.006)

