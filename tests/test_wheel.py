"""The proof that ``pip install anb`` works anywhere: build the wheel, install it with its declared
dependencies (pinned by requirements.txt, from the configured package index) into a fresh virtual
environment outside the checkout, and use it from an unrelated folder the way a new user would:
with every extra (``anb[all]``: collection and fitting), and without any (the query install,
measured by benchmarks/packaged_load.py).

Fails if a run-time file is left out of the wheel (the commands below read device configs, the
surrogate config, the SLURM template, the packaged dataset and split) and, more generally, if any
file under ``anb/`` is missing from the wheel.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from anb.io import sha256_file
from anb.resources import RELEASED_DATASET as RELEASED
from tests.conftest import REPO

B0 = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"
#: The source tree minus what is built, cached or environment-specific.
IGNORE = shutil.ignore_patterns(".venv", ".git", "build", "dist", "outputs", "results", "runs",
                                "wandb", "*.egg-info", "__pycache__", ".pytest_cache",
                                ".mypy_cache", "*.pyc")
SMALL = {"targets": ["val_top1", "throughput_zcu102"], "layer_cost": True,
         "default": {"family": "xgboost", "params": {"n_estimators": 40, "max_depth": 3},
                     "n_members": 1}}


def _run(args: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)} failed ({proc.returncode}):\n" \
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(wheel, environment): the wheel built once from a copy of the source tree, under a
    temporary folder outside the checkout, for every test here."""
    root = tmp_path_factory.mktemp("anb-wheel")
    assert not root.resolve().is_relative_to(REPO.resolve())
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="offline")
    src = root / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=IGNORE)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--quiet", "-w", str(root / "dist"), str(src)], cwd=root, env=env)
    shutil.rmtree(src)
    return next((root / "dist").glob("anb-*.whl")), env


def _dists(python: Path, env: dict[str, str]) -> dict[str, str]:
    """{normalised name: version} of every distribution installed for ``python``."""
    listed = _run([str(python), "-m", "pip", "list", "--format", "json"], python.parent, env)
    return {_norm(d["name"]): d["version"] for d in json.loads(listed.stdout)}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def installed(built):
    """(venv, wheel, work dir, environment): a fresh venv holding the wheel with every extra and
    exactly the distributions pip resolves for ``anb[all]`` (pinned by requirements.txt); all
    under a temporary folder outside the checkout.

    What pip would install is taken from its own resolver (``pip install --dry-run --report``,
    as into an empty environment). Unpacking those 2.8 GB takes a minute on two cores, so the
    venv gets them as hard links of the same versions in the test environment, which holds
    them all (requirements.txt pins the suite's environment), and the rest of that environment
    is uninstalled; the venv's ``pip list`` must then equal the resolved set exactly. Where hard
    links cannot be made (another file system), pip installs the wheel as a user would."""
    wheel, env = built
    root = Path(tempfile.mkdtemp(prefix="anb-wheel-"))
    assert not root.resolve().is_relative_to(REPO.resolve())
    env = {**env, "ANB_CACHE_DIR": str(root / "cache")}
    venv, requirement = root / "venv", f"{wheel}[all]"
    constraints = ["-c", str(REPO / "requirements.txt")]
    try:
        _run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
              "--report", str(root / "resolved.json"), requirement, *constraints], root, env)
        resolved = {_norm(item["metadata"]["name"]): item["metadata"]["version"]
                    for item in json.loads((root / "resolved.json").read_text())["install"]}
        # the prefix resolved: a checkout whose .venv is a link to another's would get a copy of
        # the link, and the uninstall below would then empty that other environment
        linked = subprocess.run(["cp", "-al", str(Path(sys.prefix).resolve()), str(venv)],
                                capture_output=True)
        if linked.returncode == 0:
            assert not venv.is_symlink(), venv
            # Scripts name the environment they were installed in; pip's rewritten copies do not
            # touch the shared inodes (pip uninstall unlinks, and nothing below writes in place).
            python = venv / "bin" / "python"
            present = _dists(python, env)
            extra = sorted(set(present) - set(resolved) - {"pip", "anb"})
            _run([str(python), "-m", "pip", "uninstall", "--yes", "--quiet", "anb", *extra],
                 root, env)
            stale = [f"{name}=={version}" for name, version in resolved.items()
                     if name != "anb" and present.get(name) != version]
            _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps",
                  str(wheel), *stale], root, env)
        else:
            shutil.rmtree(venv, ignore_errors=True)
            base = getattr(sys, "_base_executable", sys.executable)
            _run([base, "-m", "venv", str(venv)], cwd=root, env=env)
            python = venv / "bin" / "python"
            _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", requirement,
                  *constraints], cwd=root, env=env, timeout=900)
        assert {k: v for k, v in _dists(python, env).items() if k != "pip"} == resolved
        work = root / "elsewhere"
        work.mkdir()
        yield venv, wheel, work, env
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_wheel_carries_every_file_of_the_package(installed):
    _, wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {str(p.relative_to(REPO)) for p in (REPO / "anb").rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert sorted(expected - names) == []
    assert "anb/data/accel_nasbench/anb_dataset_jsons.tar.gz" in names


@pytest.mark.slow
def test_installed_wheel_works_from_an_unrelated_folder(installed, tmp_path):
    venv, _, work, env = installed
    anb = str(venv / "bin" / "anb")
    python = str(venv / "bin" / "python")
    version = re.search(r'__version__ = "([^"]+)"', (REPO / "anb" / "version.py").read_text())[1]

    where = _run([python, "-c", "import anb; print(anb.__file__)"], work, env).stdout.strip()
    assert Path(where).is_relative_to(venv), where  # the wheel, not the checkout

    assert "measure" in _run([anb, "--help"], work, env).stdout
    shown = _run([anb, "--version"], work, env).stdout.splitlines()
    assert shown[0] == f"anb {version}" and sha256_file(RELEASED) in shown[1]
    count = _run([anb, "space", "count", B0], work, env).stdout
    assert "415.145024,5.288548" in count
    assert _run([anb, "config", "surrogates/default.json"], work, env).stdout == \
        (REPO / "anb" / "configs" / "surrogates" / "default.json").read_text()
    assert _run([anb, "slurm-template"], work, env).stdout == \
        (REPO / "anb" / "configs" / "slurm" / "train.sbatch").read_text()

    _run([anb, "measure", "cpu-ort", "--archs", "sample:1", "--out", "speed", "--budget", "2",
          "--no-progress"], work, env)
    [record] = [json.loads(p.read_text()) for p in (work / "speed" / "cpu-ort").glob("*.json")]
    assert set(record["platform_perf"]) == {"latency_cpu-ort", "throughput_cpu-ort"}
    assert f'"anb_version": "{version}"' in json.dumps(record)

    config = work / "small.json"
    config.write_text(json.dumps(SMALL))
    fit = _run([anb, "fit", "--out", "model", "--config", str(config)], work, env)
    assert "fitting on the packaged dataset" in fit.stderr + fit.stdout
    manifest = json.loads((work / "model" / "manifest.json").read_text())
    assert manifest["anb_version"] == version and manifest["training_data"]["n_records"] == 5138

    query = _run([anb, "query", "model"], work, env, stdin=B0 + "\n").stdout.splitlines()
    assert query[0] == ("arch,val_top1,val_top1_std,throughput_zcu102,throughput_zcu102_std,"
                        "ood,ood_distance,ood_cost,ood_reason")
    assert query[1].startswith(B0 + ",")

    _run([anb, "search", "-o", "val_top1", "-o", "throughput_zcu102", "--algorithm", "nsga2",
          "--budget", "60", "--benchmark", "model", "--out", "search"], work, env)
    summary = json.loads((work / "search" / "summary.json").read_text())
    assert summary["anb_version"] == version and summary["evaluations"] == 60

    code = ("import anb, json; b = anb.load(config='small.json'); "
            f"print(json.dumps(b.query(['{B0}']).iloc[0].to_dict()))")
    first = _run([python, "-c", code], work, env)
    assert "first use of 'accel-nasbench'" in first.stderr
    again = _run([python, "-c", code], work, env)
    assert "loaded the cached benchmark" in again.stderr
    assert json.loads(first.stdout) == json.loads(again.stdout)
    assert set(json.loads(first.stdout)) == {"arch", "val_top1", "val_top1_std",
                                             "throughput_zcu102", "throughput_zcu102_std", "ood",
                                             "ood_distance", "ood_cost", "ood_reason"}
    assert Path(env["ANB_CACHE_DIR"], "accel-nasbench").is_dir()


@pytest.mark.slow
def test_query_install_is_light_and_loads_the_benchmark_fitted(built, tmp_path):
    """``pip install anb`` (no extras; the wheel built above) into a fresh venv: at most
    400 MB on disk, no fitting or collection library, and the packaged benchmark predicts
    what the fitted artifact predicts. Times are printed, not asserted."""
    wheel, _ = built
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = _run([sys.executable, str(REPO / "benchmarks" / "packaged_load.py"), "--repeats", "2",
                 "--wheel", str(wheel), "--json"], cwd=tmp_path,
                env={**env, "TMPDIR": str(tmp_path), "ANB_PUBLISH": "0"},
                timeout=900)  # a test never rewrites benchmarks/RESULTS.md
    print(proc.stdout)
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["wheel_path"] == str(wheel)  # installed what the other tests check
    assert figures["heavy_found"] == []
    assert figures["install_mb"] <= 400, figures
    assert figures["max_rel_diff"] < 1e-5, figures
    assert figures["metrics"] >= 9
