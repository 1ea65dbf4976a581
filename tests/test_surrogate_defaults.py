"""Choosing the surrogate defaults never sees the test split: the cross-validation in
``benchmarks/surrogate_defaults.py`` tunes on exactly the published train + val rows."""
from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from anb import resources
from anb.searchspace.space import ANB_SPACE
from anb.surrogates.data import load_table, published_split, target_columns
from tests.conftest import REPO


def _load_script():
    name = "anb_benchmarks_surrogate_defaults"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name,
                                                  REPO / "benchmarks" / "surrogate_defaults.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return _load_script()


@pytest.fixture(scope="module")
def released():
    """The whole release and its split, read here independently of the script."""
    full = load_table(resources.RELEASED_DATASET, space=ANB_SPACE)
    names = {split: {Path(p).name for p in json.loads(
        (resources.RELEASED_SPLIT_DIR / f"{split}_paths.json").read_text())}
        for split in ("train", "val", "test")}
    source = full["source"].astype(str).map(lambda s: Path(s).name)
    in_split = {split: source.isin(names[split]).to_numpy() for split in names}
    # the split loader the surrogates use agrees with the files read directly
    masks = published_split(full, resources.RELEASED_SPLIT_DIR)
    for split in in_split:
        assert np.array_equal(masks[split], in_split[split]), split
    assert in_split["test"].sum() == 512
    return full, in_split


@pytest.fixture(scope="module")
def tuned_on(script):
    frame = script.tuning_frame()
    return frame, script.cv_folds(frame, 5)


@pytest.mark.slow
def test_tuning_rows_are_exactly_train_and_val(tuned_on, released):
    full, split = released
    frame, _ = tuned_on
    test = full[split["test"]]
    pool = full[split["train"] | split["val"]]
    assert not set(frame["arch"]) & set(test["arch"])
    assert not set(frame["arch_id"]) & set(test["arch_id"])
    assert not set(frame["source"]) & set(test["source"])
    assert len(frame) == len(pool) == split["train"].sum() + split["val"].sum()
    assert sorted(frame["source"]) == sorted(pool["source"])
    assert set(frame["arch_id"]) == set(pool["arch_id"])
    # rows in no split file are left out too: some repeat a test architecture, so "every row
    # but the test split's" would leak test architectures into the tuning
    unsplit = full[~(split["train"] | split["val"] | split["test"])]
    assert set(unsplit["arch_id"]) & set(test["arch_id"])
    assert not set(frame["source"]) & set(unsplit["source"])


def test_folds_cover_train_and_val_once_and_hold_no_test_architecture(tuned_on, released):
    full, split = released
    frame, folds = tuned_on
    test_archs = set(full.loc[split["test"], "arch"])
    assert len(folds) == 5
    scored = np.zeros(len(frame), dtype=int)
    for masks in folds:
        roles = [masks["train"], masks["val"], masks["test"]]
        assert all(len(m) == len(frame) for m in roles)
        assert np.array_equal(sum(m.astype(int) for m in roles), np.ones(len(frame), int))
        for mask in roles:
            assert mask.any() and not set(frame.loc[mask, "arch"]) & test_archs
        # a duplicate measurement never straddles the scored fold and the fitted ones
        assert not set(frame.loc[masks["test"], "arch_id"]) & \
            set(frame.loc[masks["train"] | masks["val"], "arch_id"])
        scored += masks["test"]
    assert (scored == 1).all()  # every train + val row is scored once, nothing else is
    assert set(frame["arch"]) == set(full.loc[split["train"] | split["val"], "arch"])


@pytest.mark.slow
def test_the_cv_run_fits_and_scores_only_train_and_val_rows(script, tuned_on, released,
                                                            monkeypatch):
    """End to end on the script's own code path (a small config, one fold): every table the
    surrogates are fitted or scored on is free of test architectures."""
    full, split = released
    test_archs = set(full.loc[split["test"], "arch"])
    frame, folds = tuned_on
    base = json.loads(resources.config_path("surrogates", "default.json").read_text())
    small = copy.deepcopy(base)
    small["hole_folds"] = 0  # the internal hold-outs split inside the rows the spy sees
    for entry in [small["default"], *small["per_target"].values()]:
        for params in entry["params"] if isinstance(entry["params"], list) else [entry["params"]]:
            if "n_estimators" in params:
                params["n_estimators"] = 5
    seen = []
    fit, evaluate = script.fit_benchmark, script.evaluate

    def fit_spy(prepared, config, **kwargs):
        seen.append(("fit", prepared.frame, prepared.masks))
        return fit(prepared, config, **kwargs)

    def evaluate_spy(bench, prepared, split_name="test"):
        seen.append(("evaluate", prepared.frame, prepared.masks))
        return evaluate(bench, prepared, split_name)

    monkeypatch.setattr(script, "fit_benchmark", fit_spy)
    monkeypatch.setattr(script, "evaluate", evaluate_spy)
    scores = script.run_cv(frame, folds[:1], small, names=["tpuv3_members2"], jobs=1)
    assert {kind for kind, *_ in seen} == {"fit", "evaluate"} and len(seen) == 4
    for _, table, masks in seen:
        assert not set(table["arch"]) & test_archs
        assert np.array_equal(masks["test"], folds[0]["test"])
    assert set(scores["candidate"]) == {"default", "tpuv3_members2"}
    assert set(scores.loc[scores.candidate == "default", "target"]) == set(target_columns(frame))
    assert set(scores.loc[scores.candidate == "tpuv3_members2", "target"]) == {"throughput_tpuv3"}
