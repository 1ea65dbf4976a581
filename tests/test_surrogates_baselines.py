"""The re-measured baselines are the reference's own tuned settings
(docs/background/accel-nasbench.md, "Baseline hyper-parameters")."""
from __future__ import annotations

import hashlib
import re

import pytest

from anb.resources import RELEASED_DATASET as TARBALL
from anb.resources import RELEASED_DIR
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import prepare
from anb.surrogates.baseline import evaluate_baselines, reference_settings, settings_file


def test_settings_ship_in_the_package_and_match_the_reference_files():
    """docs/background/accel-nasbench.md, "Baseline hyper-parameters": the benchmark's own files
    (byte for byte: the sha256 the released data's SOURCE.md lists), each parameter's default."""
    source = (RELEASED_DIR / "SOURCE.md").read_text().split("## baseline_configs/")[1]
    listed = dict(re.findall(r"^\| `([^`]+\.json)` \| `([0-9a-f]{64})` \|$", source, re.M))
    assert len(listed) == 18
    for target in ("val_top1", "throughput_a100", "latency_zcu102", "throughput_tpuv3"):
        for family in ("xgboost", "lightgbm"):
            ours = settings_file(target, family)
            assert "anb/configs/surrogates/baselines" in ours.as_posix()
    shipped = sorted(settings_file("val_top1", "xgboost").parent.glob("*.json"))
    assert {path.name for path in shipped} == set(listed)
    for path in shipped:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == listed[path.name], path.name
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
    """docs/background/accel-nasbench.md, "Baseline hyper-parameters": accuracy XGBoost R^2
    0.9819 / tau 0.9179 (the published table: 0.9822 / 0.9208)."""
    prepared = prepare(TARBALL, ["val_top1"], space=ANB_SPACE)
    scores = evaluate_baselines(prepared, ["val_top1"], families=("xgboost",))
    row = scores.loc[("val_top1", "xgboost")]
    assert row["r2"] == pytest.approx(0.982, abs=0.002)
    assert row["kendall_tau"] == pytest.approx(0.92, abs=0.006)

