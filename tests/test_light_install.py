"""``pip install anb`` without extras: querying and searching the surrogates never import a
collection or fitting library, and a command that needs one says in one line which extra to
install. Each check runs in a subprocess whose imports of those libraries fail as if they were
not installed; the extras' names match pyproject.toml."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tomllib
from packaging.requirements import Requirement

from anb import extras
from anb.surrogates import FitConfig, api
from tests.conftest import REPO

B0 = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"
#: What only an extra installs; importing any of them fails in the child.
BLOCKED = ("torch", "torchvision", "xgboost", "lightgbm", "sklearn", "wandb", "onnx",
           "onnxruntime", "optuna", "optunahub", "pyarrow", "plotly", "pymoo", "matplotlib",
           "syne_tune")
BLOCKER = f"""
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

sys.meta_path.insert(0, Blocked())
"""
SMALL = {"targets": ["val_top1", "throughput_zcu102"], "layer_cost": True, "hole_folds": 1,
         "default": {"family": "xgboost", "params": {"n_estimators": 40, "max_depth": 3},
                     "n_members": 1}}


def _child(code: str, tmp_path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ANB_CACHE_DIR": str(tmp_path / "cache"),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code)], cwd=tmp_path,
                          env=env, input=stdin, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_load_query_and_search_import_no_extra(dataset_tarball, tmp_path):
    """The packaged benchmark (shipped, compiled), an ``anb fit`` artifact (XGBoost JSON read
    into node tables) and a short search on the surrogates, all with the libraries blocked;
    the fitted artifact predicts what it predicts with xgboost installed."""
    fitted = tmp_path / "fitted"
    bench, _ = api.fit(dataset_tarball, fitted, config=FitConfig.from_dict(SMALL), progress=False)
    want = bench.query([B0]).iloc[0].to_dict()
    proc = _child(f"""
        import json, sys
        import anb
        from anb.cli import app
        from anb.cli_support import run

        packaged = anb.load()
        row = packaged.query([{B0!r}], noise=True, seed=3).iloc[0]
        assert len(packaged.metrics) >= 9 and 60 < row["val_top1"] < 80, row
        fitted = anb.load({str(fitted)!r}).query([{B0!r}]).iloc[0].to_dict()
        try:
            run(app, ["search", "-o", "val_top1", "-o", "throughput_zcu102", "--budget", "40",
                      "--benchmark", "accel-nasbench", "--out", "search"])
        except SystemExit as done:
            assert done.code == 0, done.code
        print(json.dumps(fitted))
        """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loaded the packaged benchmark 'accel-nasbench'" in proc.stderr
    assert "first use" not in proc.stderr  # nothing fitted
    assert json.loads(proc.stdout.splitlines()[-1]) == want
    summary = json.loads((tmp_path / "search" / "summary.json").read_text())
    assert summary["evaluations"] == 40 and summary["hypervolume"] > 0
    assert not (tmp_path / "search" / "search.png").exists()  # the plot: the search extra


@pytest.mark.slow
def test_the_query_command_runs_without_extras(tmp_path):
    proc = _child("""
        from anb.cli import app
        from anb.cli_support import run
        run(app, ["query", "accel-nasbench", "--metrics", "val_top1"])
        """, tmp_path, stdin=B0 + "\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0].startswith("arch,val_top1,val_top1_std,ood")
    assert proc.stdout.splitlines()[1].startswith(B0 + ",")


#: What loading and querying the packaged benchmark never imports: the CLI's library, the
#: fitting and adapting modules, scipy.
OFF_THE_QUERY_PATH = ("typer", "scipy", "anb.cli", "anb.surrogates.api",
                      "anb.surrogates.adapt.model")


def test_loading_and_querying_import_only_what_a_query_needs(tmp_path):
    proc = _child(f"""
        import sys
        import anb
        anb.load(quiet=True).query([{B0!r}])
        print([m for m in {OFF_THE_QUERY_PATH!r} if m in sys.modules])
        """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "[]"


def test_the_lazy_package_names_are_the_functions_they_were():
    """``anb.surrogates`` imports its names on first use; ``fit`` stays the function (the
    module ``anb.surrogates.fit`` is imported by loading a benchmark and would shadow it)."""
    import importlib

    import anb.surrogates as surrogates
    from anb.surrogates import api, fit

    assert fit is api.fit and surrogates.fit is api.fit
    assert sorted(surrogates.HOMES) == sorted(surrogates.__all__)
    for name, home in surrogates.HOMES.items():
        module = importlib.import_module(f"anb.surrogates.{home}")
        assert getattr(surrogates, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        surrogates.nothing  # noqa: B018


@pytest.mark.slow
def test_a_command_needing_an_extra_says_which_in_one_line(tmp_path):
    """``anb fit`` names the ``fit`` extra before any work, ``anb search --algorithm nsga2``
    the ``search`` one, ``anb measure`` the ``measure`` one; a Python caller (a fit, an import of
    a collection module) gets such a line as the ImportError's message."""
    for args, extra in ((["fit", "--out", "model"], "fit"),
                        (["search", "-o", "val_top1", "--algorithm", "nsga2", "--out", "moo"],
                         "search"),
                        (["measure", "cpu-ort", "--archs", "sample:1", "--out", "speed",
                          "--budget", "2", "--no-progress"], "measure")):
        proc = _child(f"""
            from anb.cli import app
            from anb.cli_support import run
            run(app, {args!r})
            """, tmp_path)
        assert proc.returncode == 2, proc.stderr[-3000:]
        [line] = [t for t in proc.stderr.splitlines() if t.startswith("error")]
        assert f"pip install 'anb[{extra}]'" in line and "Traceback" not in proc.stderr, line
        assert not (tmp_path / args[args.index("--out") + 1]).exists()
    proc = _child("""
        import anb
        from anb.surrogates import FitConfig
        anb.load(config=FitConfig(targets=["val_top1"]), quiet=True)
        """, tmp_path)
    assert proc.stderr.strip().splitlines()[-1] == (
        "anb.extras.MissingExtra: fitting a 'xgboost' surrogate needs xgboost, which is not "
        "installed: pip install 'anb[fit]' (or 'anb[all]' for everything)")
    for module, extra in (("anb.searchspace.model", "measure"),
                          ("anb.collect_accuracy.train", "train"),
                          ("anb.collect_throughput.backends.torch_backend", "measure")):
        proc = _child(f"import {module}", tmp_path)
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("anb.extras.MissingExtra: ") and "needs torch, which is not " \
            f"installed: pip install 'anb[{extra}]'" in last, last


@pytest.mark.slow
def test_an_api_module_needing_an_extra_says_which_in_one_line(tmp_path):
    """The researchers' integrations and the pymoo search, imported (or called) without their
    libraries: one MissingExtra line naming the extra, not a raw ModuleNotFoundError."""
    for code, library, extra in (
            ("import anb.integrations.syne_tune", "syne_tune", "syne-tune"),
            ("import anb.integrations.optuna", "optuna", "optunahub"),
            ("from anb.nas.search import nsga2; nsga2(None, 8)", "pymoo", "search")):
        proc = _child(code, tmp_path)
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("anb.extras.MissingExtra: ") and f"needs {library}, which is " \
            f"not installed: pip install 'anb[{extra}]'" in last, last


def test_every_extra_named_installs_the_module():
    """anb.extras.EXTRA and the families' ``requires`` name extras of pyproject.toml that
    install the module (following ``anb[...]`` references)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = project["optional-dependencies"]

    def packages(extra: str) -> set[str]:
        out: set[str] = set()
        for text in groups[extra]:
            req = Requirement(text)
            out |= set().union(*(packages(e) for e in req.extras)) if req.name == "anb" \
                else {req.name}
        return out

    distribution = {"sklearn": "scikit-learn", "torch_xla": "torch-xla", "tvm": "apache-tvm",
                    "syne_tune": "syne-tune", "PIL": "pillow"}
    from anb.surrogates.estimators import FAMILIES

    pairs = [*extras.EXTRA.items(), *(f.requires for f in FAMILIES.values())]
    for module, extra in pairs:
        assert distribution.get(module, module) in packages(extra), (module, extra)
    assert {"fit", "measure", "train", "all"} <= set(groups)
    assert packages("all") >= {"xgboost", "torch", "wandb", "onnxruntime", "psycopg"}
    base = {Requirement(r).name for r in project["dependencies"]}
    assert not base & {"torch", "xgboost", "lightgbm", "scikit-learn", "wandb", "onnx",
                       "onnxruntime", "pyarrow", "optuna", "plotly"}


def test_hypervolume_needs_no_pymoo_and_equals_pymoos():
    """The search summary's hypervolume (numpy, exact) is pymoo's on random fronts of 2 to 4
    objectives, with points below the reference and dominated points mixed in."""
    from pymoo.indicators.hv import HV

    from anb.nas.pareto import hypervolume

    rng = np.random.default_rng(0)
    for m in (2, 3, 4):
        for _ in range(3):
            points, reference = rng.random((50, m)), np.full(m, 0.2)
            above = points[(points > reference).all(axis=1)]
            want = float(HV(ref_point=-reference)(-above))
            assert want > 0 and hypervolume(points, reference) == pytest.approx(want, rel=1e-12)
    assert hypervolume(np.zeros((3, 2)), np.ones(2)) == 0.0


def test_only_a_missing_optional_module_is_explained():
    """A module no extra installs is not dressed up as a missing extra; ``optional`` returns
    None only for the module asked for."""
    assert extras.explain(ModuleNotFoundError("No module named 'foo'", name="foo")) is None
    assert extras.explain(ImportError("cannot import name 'x'")) is None
    line = extras.explain(ModuleNotFoundError("No module named 'torch.nn'", name="torch.nn"))
    assert line == ("this needs torch, which is not installed: pip install 'anb[measure]' "
                    "(or 'anb[all]' for everything)")
    assert extras.optional("json") is json and extras.optional("no_such_module_xyz") is None
    with pytest.raises(extras.MissingExtra, match=r"^X needs no_such_module_xyz, .*'anb\[fit\]'"):
        extras.require("no_such_module_xyz", "fit", what="X")


def test_every_shipped_space_builds_or_names_the_extra_without_torch(tmp_path):
    """``space.build`` without torch: one line naming the ``measure`` extra, in every space
    (NAS-Bench-201's was a raw ModuleNotFoundError)."""
    proc = _child("""
        from anb.extras import MissingExtra
        from anb.searchspace import get_space, space_names
        for name in space_names():
            space = get_space(name)
            try:
                space.build(space.archs_from_choices(space.choices_from_index([0]))[0])
            except MissingExtra as err:
                print(name, "|", err)
        """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" | ") for line in proc.stdout.strip().splitlines())
    assert set(lines) >= {"anb-mnasnet", "nasbench201", "fbnet", "ofa-mbv3", "anb-seq1d"}, lines
    for name, message in lines.items():
        assert "needs torch, which is not installed: pip install 'anb[measure]'" in message, name
