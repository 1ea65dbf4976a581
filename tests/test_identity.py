"""Which data is this: a benchmark's identity (API, query metadata, ``anb --version``, ``anb
query``) and ``anb cite``."""
from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

import anb
from anb import resources
from anb.cli import app
from anb.io import sha256_file
from anb.surrogates.identity import IDENTITY, citations, config_sha256

runner = CliRunner()
ARCH = "e6k3l1-e1k5l3-e6k3l2-e6k3l1-e4k3l2-e6k5l1-e4k5l2"


@pytest.fixture(scope="module")
def bench():
    return anb.load(quiet=True)


def test_the_packaged_benchmark_names_its_data_by_hash(bench):
    ident = bench.identity
    data, split = ident["dataset"], ident["split"]
    assert ident["benchmark"] == resources.PACKAGED_BENCHMARK
    assert data["name"] == "accel-nasbench" and "dcd4d72" in data["version"]
    assert data["sha256"] == sha256_file(resources.RELEASED_DATASET)  # computed independently
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(resources.RELEASED_SPLIT_DIR.glob("*.json"))}
    assert split == {"name": "published", "sha256": hashlib.sha256(
        json.dumps(files, sort_keys=True).encode()).hexdigest()}
    manifest = json.loads((resources.SHIPPED_DIR / "manifest.json").read_text())
    assert ident["config_sha256"] == hashlib.sha256(
        json.dumps(manifest["fit_config"], sort_keys=True).encode()).hexdigest()
    assert ident["manifest_sha256"] == manifest["manifest_sha256"]
    assert ident["anb_version"] == anb.__version__ and data["n_records"] == 5138


def test_a_query_carries_the_identity_of_what_answered(bench):
    frame = bench.query([ARCH], "accuracy")
    assert frame.attrs[IDENTITY] == bench.identity


def test_a_changed_config_changes_its_hash():
    config = {"seed": 0, "targets": None}
    assert config_sha256(config) != config_sha256({**config, "seed": 1})
    assert config_sha256({"targets": None, "seed": 0}) == config_sha256(config)  # key order


def test_version_and_query_print_the_data_identity(bench):
    shown = runner.invoke(app, ["--version"])
    assert shown.exit_code == 0
    assert bench.identity["dataset"]["sha256"] in shown.output
    assert bench.identity["split"]["sha256"] in shown.output
    assert bench.identity["config_sha256"] in shown.output
    queried = runner.invoke(app, ["query", "accel-nasbench", "-", "--metrics", "accuracy"],
                            input=ARCH + "\n")
    assert queried.exit_code == 0, queried.output
    assert "answered by benchmark accel-nasbench: dataset accel-nasbench" in queried.stderr
    assert bench.identity["dataset"]["sha256"] in queried.stderr
    assert "answered by" not in queried.stdout  # the CSV stays clean


def test_cite_prints_the_data_and_the_method():
    result = runner.invoke(app, ["cite"])
    assert result.exit_code == 0
    assert result.output == citations()
    assert "@inproceedings{ahmad2024accelnasbench," in result.output
    assert "@software{anb," in result.output and f"version = {{{anb.__version__}}}" in \
        result.output


def test_cite_an_unknown_benchmark_is_a_clear_error():
    result = runner.invoke(app, ["cite", "nope"])
    assert result.exit_code == 2
    assert ("benchmark 'nope': no citation known; allowed: ['accel-nasbench', 'help-fbnet', "
            "'help-nasbench201']") in result.stderr
