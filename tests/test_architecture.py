"""The layers of ARCHITECTURE.md hold: import-linter's contracts (pyproject.toml) pass on this
tree, and the job queue imports no stage, not even inside a function."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
#: Everything above ``anb.jobs`` in ARCHITECTURE.md: the stages and what wires them.
ABOVE_JOBS = ("anb.searchspace", "anb.records", "anb.collect_accuracy", "anb.collect_throughput",
              "anb.surrogates", "anb.nas", "anb.pipeline", "anb.package_cli", "anb.cli",
              "anb.__main__")


def test_lint_imports_keeps_every_contract():
    lint = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout and "Analyzed" in run.stdout


def test_jobs_imports_no_stage_package():
    graph = grimp.build_graph("anb", cache_dir=None)
    jobs = {"anb.jobs", *graph.find_descendants("anb.jobs")}
    found = [f"{module} -> {imported} (line {d['line_number']})"
             for module in sorted(jobs)
             for imported in sorted(graph.find_modules_directly_imported_by(module))
             if imported.startswith(ABOVE_JOBS)
             for d in graph.get_import_details(importer=module, imported=imported)]
    assert found == []
    for package in ABOVE_JOBS:  # nor through a module in between
        assert not graph.chain_exists("anb.jobs", package, as_packages=True), package
