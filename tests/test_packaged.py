"""The packaged benchmark: data identical to the release, fitted once on first use, cached under
a key of versions and hashes, safe when two processes do the first use at once."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import anb
import anb.surrogates
from anb import resources
from anb.surrogates import FitConfig, packaged
from anb.surrogates.artifact import read_manifest
from tests.conftest import REPO, SHARED_DATA

B0 = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"
#: A small-budget config (two targets, one 40-round member each): the same code path as the
#: packaged default, in seconds.
SMALL = {"targets": ["val_top1", "throughput_zcu102"], "layer_cost": True,
         "default": {"family": "xgboost", "params": {"n_estimators": 40, "max_depth": 3},
                     "n_members": 1}}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_packaged_data_matches_the_release_checksums():
    """Every packaged data file has the sha256 the reference copy's SOURCE.md lists for it."""
    source = (SHARED_DATA / "SOURCE.md").read_text()
    rows = dict(re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", source, re.M))
    packaged_files = [resources.RELEASED_DATASET,
                      *sorted(resources.RELEASED_SPLIT_DIR.glob("*.json"))]
    assert len(packaged_files) == 4
    for path in packaged_files:
        name = str(path.relative_to(resources.RELEASED_DIR))
        assert name in rows, f"{name} is not listed in {SHARED_DATA / 'SOURCE.md'}"
        assert _sha256(path) == rows[name], name
    assert rows["anb_dataset_jsons.tar.gz"] == \
        "3520992d42e368b7c08c99fc3f6612855b5b366bf98668a7f19d49f3131aa4ae"
    for name in ("LICENSE", "NOTICE", "SOURCE.md"):
        assert (resources.RELEASED_DIR / name).is_file(), name
    assert "Apache License" in (resources.RELEASED_DIR / "LICENSE").read_text()


#: Looks outside the package that are not run-time inputs: the git commit of a checkout, recorded
#: as provenance when there is one (None for an installed wheel).
ALLOWED = {("anb/collect_accuracy/provenance.py", ".parent.parent"),
           ("anb/collect_accuracy/provenance.py", "__file__")}


def test_nothing_reads_shared_or_the_source_tree_at_run_time():
    """No module of the package points outside it (``../shared``, the repository's configs)."""
    offenders = []
    for path in (REPO / "anb").rglob("*.py"):
        text = path.read_text()
        for pattern in ("shared/data", "../", ".parents[", ".parent.parent", "__file__",
                        "Path.cwd()"):
            name = str(path.relative_to(REPO))
            if pattern in text and (name, pattern) not in ALLOWED:
                offenders.append(f"{name}: {pattern}")
    assert not offenders


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ANB_CACHE_DIR", str(tmp_path / "cache"))
    config = tmp_path / "small.json"
    config.write_text(json.dumps(SMALL))
    return config


@pytest.mark.slow
def test_load_fits_once_then_reads_the_cache(cache, capsys):
    bench = anb.load(config=cache)
    first = capsys.readouterr().err
    assert "first use of 'accel-nasbench'" in first and "fitted and cached" in first
    path = packaged.cache_path(config=cache)
    assert path.parent.parent == Path(os.environ["ANB_CACHE_DIR"])
    manifest = read_manifest(path)
    assert manifest["anb_version"] == anb.__version__
    assert manifest["training_data"]["n_records"] == 5138
    stamp = path.stat().st_mtime_ns
    again = anb.load(config=cache)
    second = capsys.readouterr().err
    assert "first use" not in second and "loaded the cached benchmark" in second
    assert path.stat().st_mtime_ns == stamp
    a, b = bench.query([B0]), again.query([B0])
    assert list(a.columns) == ["arch", "val_top1", "val_top1_std", "throughput_zcu102",
                               "throughput_zcu102_std", "ood", "ood_distance", "ood_cost",
                               "ood_reason"]
    np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())


def test_cache_key_covers_version_data_libraries_and_config(cache, monkeypatch):
    base = packaged.cache_path(config=cache)
    assert base.name.startswith(f"{anb.__version__}-")
    monkeypatch.setattr(packaged, "__version__", "9.9.9")
    assert packaged.cache_path(config=cache) != base
    monkeypatch.undo()
    monkeypatch.setenv("ANB_CACHE_DIR", str(base.parent.parent))
    key = packaged.cache_key(packaged.fit_config(cache))
    assert key["data_sha256"] == _sha256(resources.RELEASED_DATASET)
    assert set(key["split_sha256"]) == {"train_paths.json", "val_paths.json", "test_paths.json"}
    assert key["libraries"]["xgboost"] and key["libraries"]["anb"] == anb.__version__
    monkeypatch.setattr(packaged.artifact, "library_versions",
                        lambda: {**key["libraries"], "xgboost": "0.0.1"})
    assert packaged.cache_path(config=cache) != base
    monkeypatch.undo()
    other = cache.with_name("other.json")
    other.write_text(json.dumps({**SMALL, "seed": 1}))
    monkeypatch.setenv("ANB_CACHE_DIR", str(base.parent.parent))
    assert packaged.cache_path(config=other) != base
    assert packaged.cache_path(config=cache) == base


@pytest.mark.slow
def test_surrogates_load_by_name_reads_the_default_cache_entry(cache, capsys):
    """``anb.surrogates.load("accel-nasbench")`` and ``anb.load()`` use the packaged default
    config's cache entry (filled here with the small fit, so nothing is fitted)."""
    import shutil

    small = packaged.cache_path(config=cache)
    anb.load(config=cache)
    default = packaged.cache_path()
    default.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(small, default)
    capsys.readouterr()
    bench = anb.surrogates.load("accel-nasbench")
    assert f"loaded the cached benchmark {default}" in capsys.readouterr().err
    assert bench.metrics == ["val_top1", "throughput_zcu102"]
    assert anb.load().metrics == bench.metrics

    from typer.testing import CliRunner

    from anb.cli import app

    query = CliRunner().invoke(app, ["query", "accel-nasbench"], input=B0 + "\n")
    assert query.exit_code == 0, query.output
    assert "arch,val_top1,val_top1_std,throughput_zcu102,throughput_zcu102_std" in query.output
    search = CliRunner().invoke(app, ["search", "-o", "val_top1", "--budget", "30", "--benchmark",
                                      "accel-nasbench", "--out", str(default.parent / "search")])
    assert search.exit_code == 0, search.output
    assert "first use" not in query.output + search.output
    with pytest.raises(ValueError, match=r"unknown packaged benchmark 'nasbench201'.*accel-nasbench"):
        anb.load("nasbench201")


def test_anb_load_is_the_one_way_to_load_a_benchmark(tmp_path):
    """``anb.surrogates.load`` is the same function; the packaged-only loader is internal; a
    missing folder and a config for a folder are clear errors."""
    assert anb.surrogates.load is packaged.load
    assert "load_packaged" not in anb.surrogates.__all__
    assert not hasattr(packaged, "load_packaged")
    with pytest.raises(ValueError, match=r"unknown packaged benchmark 'no/such/folder' and no "
                                         r"folder of that name; allowed: \['accel-nasbench'\]"):
        anb.load("no/such/folder")
    with pytest.raises(ValueError, match="config is for a packaged benchmark"):
        anb.load(tmp_path, config=FitConfig.from_dict(SMALL))


@pytest.mark.slow
def test_a_damaged_cache_entry_is_fitted_again(cache, capsys):
    anb.load(config=cache)
    path = packaged.cache_path(config=cache)
    victim = path / sorted(read_manifest(path)["files"])[0]
    victim.write_bytes(victim.read_bytes()[:-10])
    capsys.readouterr()
    bench = anb.load(config=cache)
    err = capsys.readouterr().err
    assert "is unreadable" in err and "fitted and cached" in err
    assert read_manifest(path)["anb_version"] == anb.__version__
    assert bench.metrics == ["val_top1", "throughput_zcu102"]


WORKER = textwrap.dedent("""
    import json, os, sys, time
    go = sys.argv[2]
    while not os.path.exists(go):
        time.sleep(0.01)
    import anb
    bench = anb.load(config=sys.argv[1])
    print(json.dumps(bench.query([sys.argv[3]]).iloc[0].to_dict()))
""")


@pytest.mark.slow
def test_two_processes_doing_the_first_use_at_once_fit_it_once(cache, tmp_path):
    """Two real processes released together: one fits, the other waits on the lock and loads
    the artifact the first wrote; both answer the same and the cache verifies."""
    go = tmp_path / "go"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(cache), str(go), B0],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=tmp_path) for _ in range(2)]
    time.sleep(3.0)  # both have imported python and are polling
    go.touch()
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    errs = [o[1] for o in outs]
    assert sum("first use of 'accel-nasbench'" in e for e in errs) == 1, errs
    assert sum("loaded the cached benchmark" in e for e in errs) == 1, errs
    assert json.loads(outs[0][0]) == json.loads(outs[1][0])
    path = packaged.cache_path(config=cache)
    read_manifest(path)  # every checksum verifies
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".lock"]
