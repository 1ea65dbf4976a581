"""Every script in ``benchmarks/`` imports: a moved module breaks its import line, which no run
of the script in the suite would otherwise show."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO

SCRIPTS = sorted(p for p in (REPO / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_the_script_imports(script, monkeypatch):
    monkeypatch.syspath_prepend(str(script.parent))  # as `python benchmarks/x.py` runs it
    spec = importlib.util.spec_from_file_location(f"anb_benchmark_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look the module up
    spec.loader.exec_module(module)
