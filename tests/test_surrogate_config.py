"""One source for the surrogate defaults: the packaged ``surrogates/default.json``.

``anb fit`` without ``--config``, ``anb.load()`` (the packaged benchmark) and ``anb pipeline``
fit the same config, and ``FitConfig()`` / ``TargetConfig`` take every default from the file.
"""
from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import replace
from typing import Any

import pytest
from typer.testing import CliRunner

from anb import resources
from anb.cli import app
from anb.pipeline import pipeline
from anb.records import load_dataset
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, TargetConfig, packaged, read_manifest

PACKAGED = resources.config_path("surrogates", "default.json")
#: The module itself: ``anb.surrogates.fit`` as an attribute is the function of that name.
fit_module = importlib.import_module("anb.surrogates.fit")


def _without_jobs(value: Any) -> Any:
    """``anb fit --jobs`` adds ``n_jobs`` to tree members' params: not part of the model."""
    if isinstance(value, dict):
        return {k: _without_jobs(v) for k, v in value.items() if k != "n_jobs"}
    if isinstance(value, list):
        return [_without_jobs(v) for v in value]
    return value


def test_fit_config_defaults_are_the_packaged_file():
    data = json.loads(PACKAGED.read_text())
    config = FitConfig()
    assert config == FitConfig.from_file(PACKAGED) == FitConfig.from_dict({})
    expected = {"targets": None, **data,
                "default": {**data["default"], "bootstrap": False},
                "per_target": {k: {**v, "bootstrap": False}
                               for k, v in data["per_target"].items()}}
    assert config.to_dict() == expected
    assert TargetConfig("svr").n_members == data["default"]["n_members"]


def test_a_config_of_ones_own_takes_the_file_for_what_it_leaves_out():
    """A ``default`` of one's own applies to every target (the file's per-target settings
    refine the file's default only); any other field left out is the file's."""
    packaged_config = FitConfig()
    assert FitConfig.from_dict({"seed": 3}) == replace(packaged_config, seed=3)
    own = FitConfig.from_dict({"default": {"family": "svr", "params": {"C": 1.0}}})
    assert own.per_target == {} and own.default == TargetConfig("svr", {"C": 1.0})
    assert own.layer_cost_trim == packaged_config.layer_cost_trim
    assert FitConfig(default=TargetConfig("svr")).per_target == {}
    assert len(packaged_config.per_target) == 4


def test_every_default_follows_the_file_not_a_copy_in_the_code(monkeypatch):
    """Each field's default is read from the file: a changed file changes every one of them
    (a literal default put back into the dataclass fails here)."""
    changed = {"feature_set": "onehot", "layer_cost": False, "layer_cost_trim": 7.5,
               "layer_cost_saturating": True,
               "hole_folds": 3, "split": "random", "seed": 11,
               "default": {"family": "svr", "params": {"C": 9.0}, "n_members": 5},
               "per_target": {"val_top1": {"family": "lightgbm", "params": {}, "n_members": 6}}}
    monkeypatch.setattr(fit_module, "_packaged", lambda: changed)
    assert FitConfig().to_dict() == {
        "targets": None, **changed,
        "default": {**changed["default"], "bootstrap": False},
        "per_target": {"val_top1": {**changed["per_target"]["val_top1"], "bootstrap": False}}}
    assert TargetConfig("xgboost").n_members == 5
    assert packaged.fit_config(None) == FitConfig()


def test_packaged_and_pipeline_fit_the_packaged_file():
    assert packaged.fit_config(None) == FitConfig.from_file(PACKAGED)
    option = inspect.signature(pipeline).parameters["surrogate_config"].default
    assert FitConfig.from_file(option.default) == FitConfig()


@pytest.mark.slow
def test_anb_fit_without_config_fits_what_the_packaged_benchmark_fits(dataset_tarball,
                                                                      tmp_path):
    # every 6th released record (published split kept): the config is what is checked
    data = tmp_path / "sixth.csv"
    load_dataset(dataset_tarball, ANB_SPACE).iloc[::6].to_csv(data, index=False)
    out = tmp_path / "bench"
    result = CliRunner().invoke(app, ["fit", str(data), "--out", str(out),
                                      "--targets", "throughput_zcu102"])
    assert result.exit_code == 0, result.output
    recorded = read_manifest(out)["fit_config"]
    assert recorded["targets"] == ["throughput_zcu102"]
    recorded["targets"] = None
    assert _without_jobs(recorded) == _without_jobs(packaged.fit_config(None).to_dict())
    assert recorded["layer_cost_trim"] == 2.0
    assert recorded["per_target"]["throughput_zcu102"]["n_members"] == 2
