"""``anb --version``, ``anb config``, ``anb slurm-template`` and the version stamp in what anb
writes."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import anb
from anb import resources
from anb.cli import app
from anb.searchspace.space import ANB_SPACE
from tests.conftest import REPO

runner = CliRunner()


def test_version_is_one_value_everywhere():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.splitlines()[0] == f"anb {anb.__version__}"
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = {attr = "anb.version.__version__"}' in pyproject
    assert f"## {anb.__version__}" in (REPO / "CHANGELOG.md").read_text()


def test_config_lists_and_prints_packaged_files():
    listed = runner.invoke(app, ["config"])
    assert listed.exit_code == 0
    names = listed.output.split()
    assert {"devices/cpu-ort.toml", "devices/a100.toml", "accuracy/imagenet_proxy.ini",
            "surrogates/default.json", "slurm/train.sbatch"} <= set(names)
    for name in names:
        shown = runner.invoke(app, ["config", name])
        assert shown.exit_code == 0 and shown.output == (resources.CONFIG_DIR / name).read_text()


def test_config_unknown_name_is_a_clear_error():
    result = runner.invoke(app, ["config", "devices/nope.toml"])
    assert result.exit_code == 2
    assert "'nope.toml'" in result.output and "cpu-ort.toml" in result.output


def test_slurm_template_prints_the_packaged_script():
    result = runner.invoke(app, ["slurm-template"])
    assert result.exit_code == 0
    assert result.output == resources.config_path("slurm", "train.sbatch").read_text()
    assert result.output.startswith("#!/bin/bash")


def test_version_stamp_in_device_and_merged_records(tmp_path, released_records):
    from anb.collect_throughput.records.merge import merge_records, write_merged
    from anb.collect_throughput.timing.environment import host_environment

    assert host_environment()["anb_version"] == anb.__version__
    merged, report = merge_records(released_records[:3], [], space=ANB_SPACE)
    write_merged(merged, report, tmp_path, space=ANB_SPACE)
    for path in sorted((tmp_path / "records").glob("*.json")):
        assert json.loads(path.read_text())["provenance"]["merge"] == \
            {"anb_version": anb.__version__}
    assert json.loads((tmp_path / "merge_report.json").read_text())["anb_version"] == \
        anb.__version__


@pytest.mark.slow
def test_fit_without_a_dataset_uses_the_packaged_one(tmp_path):
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"targets": ["val_top1"], "layer_cost": False, "default": {
        "family": "xgboost", "params": {"n_estimators": 20, "max_depth": 2}, "n_members": 1}}))
    result = runner.invoke(app, ["fit", "--out", str(tmp_path / "model"), "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert f"fitting on the packaged dataset {resources.RELEASED_DATASET}" in result.output
    manifest = json.loads((tmp_path / "model" / "manifest.json").read_text())
    assert manifest["training_data"]["n_records"] == 5138
    assert manifest["anb_version"] == anb.__version__
    assert manifest["libraries"]["anb"] == anb.__version__


def test_version_stamp_in_accuracy_records():
    import torch

    from anb.collect_accuracy.provenance import base_provenance
    from anb.searchspace import EFFICIENTNET_B0

    config = {"model": {"space": "anb", "seed": 0, "shard": "0/1"},
              "dataloader": {"kind": "digits", "train_path": "", "val_path": ""}}
    prov = base_provenance(EFFICIENTNET_B0, config, "hash", 0, 1, torch.device("cpu"))
    assert prov["anb_version"] == anb.__version__ == prov["versions"]["anb"]


@pytest.mark.parametrize("name", ["../../../../etc/passwd", "devices/../../../etc/passwd",
                                  "/etc/passwd", "devices//etc/passwd", "devices/../version.py"])
def test_config_names_are_names_never_paths_out_of_the_package(name):
    """Every form of a path out of the shipped configs is refused, and nothing is printed."""
    result = runner.invoke(app, ["config", name])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "is not a name inside the shipped configs" in result.stderr


def test_a_link_out_of_the_configs_is_refused(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    (configs / "devices").mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("not a config")
    (configs / "devices" / "leak.toml").symlink_to(secret)
    monkeypatch.setattr(resources, "CONFIG_DIR", configs)
    with pytest.raises(ValueError, match="leads outside the shipped configs"):
        resources.config_path("devices", "leak.toml")
