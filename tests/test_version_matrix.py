"""The version matrix's parts (``noxfile.py``, ``scripts/compare_answers.py``): the floors are
the ones pyproject.toml declares, and the comparison holds answers to 1e-6 relative."""
from __future__ import annotations

import importlib.util
import sys

from tests.conftest import REPO


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


noxfile = _module("noxfile.py", "anb_noxfile")
compare = _module("scripts/compare_answers.py", "anb_compare_answers")


def test_floors_are_the_declared_ones_and_an_extra_may_raise_one():
    core = noxfile.floor_pins(())
    assert "numpy==1.24" in core and "pandas==2.0" in core and "typer==0.28" in core
    assert any(p.startswith("tomli==1.1;") and "python_version < '3.11'" in p for p in core)
    declared = noxfile._pyproject()["dependencies"]
    assert len(core) == len(declared)  # every core dependency, pinned once
    tuned = noxfile.floor_pins(("syne-tune",))
    assert "numpy==1.26" in tuned and "numpy==1.24" not in tuned  # the extra's higher floor
    assert "syne-tune==0.16.0" in tuned
    fit = noxfile.floor_pins(("fit",))
    assert {"xgboost==2.0", "lightgbm==4.7", "scikit-learn==1.3"} <= set(fit)


def test_answers_agree_within_one_millionth_and_differences_are_named():
    want = {"query": {"a": [100.0, 0.0, float("nan")], "arch": ["x", "y", "z"]}, "flag": True}
    close = {"query": {"a": [100.00005, 0.0, float("nan")], "arch": ["x", "y", "z"]},
             "flag": True}
    assert compare.differences(want, close) == []
    far = {"query": {"a": [100.0002, 0.0, 1.0], "arch": ["x", "q", "z"]}, "flag": False}
    assert compare.differences(want, far) == [
        "/query/a[0]: 100.0002, expected 100.0",
        "/query/a[2]: 1.0, expected nan",
        "/query/arch[1]: 'q', expected 'y'",
        "/flag: False, expected True",
    ]
    assert compare.differences({"a": [1.0]}, {"a": [1.0, 2.0]}) == ["/a: 2 items, expected 1"]
    assert compare.differences({"a": 1}, {}) == ["/a: missing"]
