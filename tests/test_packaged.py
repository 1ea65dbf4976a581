"""The packaged benchmark: data identical to the release; the default config shipped fitted and
compiled under a key of the inputs (never used stale); another config fitted once on first use,
cached under a key of versions and hashes, safe when two processes do the first use at once."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
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
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, packaged
from anb.surrogates.artifact import read_manifest
from anb.surrogates.data import load_table, target_columns
from tests.conftest import REPO

B0 = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"
#: A small-budget config (two targets, one 40-round member each): the same code path as the
#: packaged default, in seconds.
SMALL = {"targets": ["val_top1", "throughput_zcu102"], "layer_cost": True,
         "default": {"family": "xgboost", "params": {"n_estimators": 40, "max_depth": 3},
                     "n_members": 1}}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_packaged_data_matches_the_release_checksums():
    """Every packaged data file has the sha256 its SOURCE.md lists for the upstream file (copied
    byte for byte), and the dataset's is the released archive's."""
    source_md = resources.RELEASED_DIR / "SOURCE.md"
    source = source_md.read_text()
    rows = dict(re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", source, re.M))
    packaged_files = [resources.RELEASED_DATASET,
                      *sorted(resources.RELEASED_SPLIT_DIR.glob("*.json"))]
    assert len(packaged_files) == 4
    for path in packaged_files:
        name = str(path.relative_to(resources.RELEASED_DIR))
        assert name in rows, f"{name} is not listed in {source_md}"
        assert _sha256(path) == rows[name], name
    assert rows["anb_dataset_jsons.tar.gz"] == \
        "3520992d42e368b7c08c99fc3f6612855b5b366bf98668a7f19d49f3131aa4ae"
    for name in ("LICENSE", "NOTICE", "SOURCE.md"):
        assert (resources.RELEASED_DIR / name).is_file(), name
    assert "Apache License" in (resources.RELEASED_DIR / "LICENSE").read_text()


#: Looks outside the package that are not run-time inputs: the git commit of a checkout, recorded
#: as provenance when there is one (None for an installed wheel).
ALLOWED = {("anb/collect_accuracy/provenance.py", ".parent.parent"),
           ("anb/collect_accuracy/provenance.py", "__file__"),
           # the FPGA target pushes fpga_code/board/ (Python 3.7, outside the wheel) to the
           # board: found in a checkout beside the package or the working folder, or given by
           # fpga.fpga_code
           ("anb/collect_throughput/targets/fpga.py", ".parents["),
           ("anb/collect_throughput/targets/fpga.py", "__file__"),
           ("anb/collect_throughput/targets/fpga.py", "Path.cwd()")}


def test_nothing_reads_shared_or_the_source_tree_at_run_time():
    """No module of the package points outside it (a folder beside the checkout, the repository's
    configs; scripts/check_standalone.py checks the whole repository for the reference folder)."""
    offenders = []
    for path in (REPO / "anb").rglob("*.py"):
        text = path.read_text()
        for pattern in ("../", ".parents[", ".parent.parent", "__file__",
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


@pytest.fixture(scope="module")
def small_entry(tmp_path_factory) -> Path:
    """The small config's cache entry, fitted once for the module: a test that needs it cached
    before its own step copies it (:func:`cached`) instead of fitting it again."""
    folder = tmp_path_factory.mktemp("small")
    config = folder / "small.json"
    config.write_text(json.dumps(SMALL))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANB_CACHE_DIR", str(folder / "cache"))
        anb.load(config=config, quiet=True)
        return packaged.cache_path(config=config)


def cached(entry: Path, config: Path) -> Path:
    """``entry`` copied to where ``config``'s is in this test's cache (as a first use writes
    it); its path."""
    path = packaged.cache_path(config=config)
    shutil.copytree(entry, path)
    return path


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


def test_shipped_benchmark_was_fitted_under_the_current_key():
    """The fitted benchmark in the package matches today's data, split, default config, fitting
    code and anb version, and was fitted with the pinned libraries; if not, run
    ``scripts/build_packaged.py`` (CI fails until then)."""
    manifest = read_manifest(resources.SHIPPED_DIR)
    assert manifest[packaged.SHIPPED_KEY] == packaged.shipped_key(FitConfig()), \
        "the shipped benchmark is stale: run scripts/build_packaged.py"
    assert packaged.shipped(FitConfig()) == resources.SHIPPED_DIR
    pins = dict(line.split("==") for line in (REPO / "requirements.txt").read_text().split()
                if "==" in line)
    for library in ("numpy", "xgboost", "scikit-learn"):
        assert manifest["libraries"][library] == pins[library], library


@pytest.mark.slow
def test_shipped_benchmark_is_compiled_whole_and_predicts_like_the_fitted_one():
    """Every target of the default config, XGBoost members as node tables (no xgboost model),
    with its support and holes, layer costs and noise; predictions equal the fitted artifact's
    reference ones up to float32 sums (max abs diff printed)."""
    bench = packaged.load(quiet=True)
    manifest = bench.info
    targets = FitConfig().targets or target_columns(load_table(resources.RELEASED_DATASET,
                                                               space=ANB_SPACE))
    assert sorted(bench.metrics) == sorted(targets) and len(targets) >= 9
    # members are node tables; the only JSON beside them is each XGBoost member's native model
    # (read only for large batches where xgboost is installed)
    members = [f for spec in manifest["targets"].values() for f in spec["files"]]
    assert not [f for f in members if f.endswith(".json")]
    sidecars = sorted(f for f in manifest["files"] if f.endswith(".json"))
    assert sidecars and all(f.endswith(".xgb.json") and f[:-len(".xgb.json")] + ".npz" in members
                            for f in sidecars)
    assert bench.support is not None and set(bench.support.hole_std_) == set(bench.metrics)
    assert bench.builder.layer_cost is not None
    assert all(m.noise_curve_ is not None and m.noise_std_ > 0 for m in bench.models.values())
    assert bench.models["val_top1"].std_terms_.observation_std > 0  # repeated trainings: seed noise
    absolute, relative = packaged.reference_diff(bench)
    print(f"shipped vs fitted: max abs diff {absolute:.3g}, max rel diff {relative:.3g}")
    assert relative < 1e-5 and len(manifest[packaged.REFERENCE]["archs"]) == packaged.N_REFERENCE


def test_load_by_name_uses_the_shipped_benchmark(tmp_path, monkeypatch, capsys):
    """``anb.load()``, ``anb.surrogates.load("accel-nasbench")``, ``anb query`` and ``anb
    search`` read the shipped benchmark: nothing is fitted, nothing is cached."""
    monkeypatch.setenv("ANB_CACHE_DIR", str(tmp_path / "cache"))
    bench = anb.surrogates.load("accel-nasbench")
    assert "loaded the packaged benchmark 'accel-nasbench'" in capsys.readouterr().err
    assert anb.load().metrics == bench.metrics

    from typer.testing import CliRunner

    from anb.cli import app

    query = CliRunner().invoke(app, ["query", "accel-nasbench"], input=B0 + "\n")
    assert query.exit_code == 0, query.output
    assert "arch,val_top1,val_top1_std," in query.output
    search = CliRunner().invoke(app, ["search", "-o", "val_top1", "--budget", "30", "--benchmark",
                                      "accel-nasbench", "--out", str(tmp_path / "search")])
    assert search.exit_code == 0, search.output
    assert "first use" not in query.output + search.output
    assert not (tmp_path / "cache").exists()
    with pytest.raises(ValueError,
                       match=r"unknown packaged benchmark 'nasbench201'.*accel-nasbench"):
        anb.load("nasbench201")


@pytest.mark.slow
def test_a_stale_shipped_benchmark_is_not_used(cache, small_entry, monkeypatch, capsys):
    """Another fitting code (say) than the shipped benchmark's: it is fitted and cached instead
    (here the default config's cache entry is filled with the small fit, so nothing is fitted)."""
    small = cached(small_entry, cache)
    key = packaged.shipped_key(FitConfig())
    monkeypatch.setattr(packaged, "shipped_key",
                        lambda config: {**key, "fit_code_sha256": "0" * 64})
    default = packaged.cache_path()
    shutil.copytree(small, default)
    capsys.readouterr()
    bench = anb.load()
    err = capsys.readouterr().err
    assert "the shipped fitted 'accel-nasbench' was made for other inputs" in err
    assert f"loaded the cached benchmark {default}" in err
    assert bench.metrics == ["val_top1", "throughput_zcu102"]


def test_anb_load_is_the_one_way_to_load_a_benchmark(tmp_path):
    """``anb.surrogates.load`` is the same function; the packaged-only loader is internal; a
    missing folder and a config for a folder are clear errors."""
    assert anb.surrogates.load is packaged.load
    assert "load_packaged" not in anb.surrogates.__all__
    assert not hasattr(packaged, "load_packaged")
    with pytest.raises(ValueError, match=r"unknown packaged benchmark 'no/such/folder' and no "
                                         r"folder of that name; allowed: \['accel-nasbench', "
                                         r"'help-nasbench201', 'help-fbnet'\]"):
        anb.load("no/such/folder")
    with pytest.raises(ValueError, match="config is for a packaged benchmark"):
        anb.load(tmp_path, config=FitConfig.from_dict(SMALL))


@pytest.mark.slow
def test_a_damaged_cache_entry_is_fitted_again(cache, small_entry, capsys):
    path = cached(small_entry, cache)
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
    open(sys.argv[4], "w").close()  # started: polling from here on
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
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(cache), str(go), B0, str(r)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=tmp_path) for r in ready]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready):  # both are polling (not a fixed sleep)
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            [p.communicate()[1][-2000:] for p in procs if p.poll() is not None]
        time.sleep(0.01)
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
