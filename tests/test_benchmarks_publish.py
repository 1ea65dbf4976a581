"""Figures reach ``benchmarks/RESULTS.md`` only from a benchmark script's complete run, each
with the command, date, machine and commit that produced it (``benchmarks/publish.py``)."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = """
import sys
sys.path.insert(0, {bench!r})
import publish
publish.RESULTS = publish.Path({results!r})
def main():
    print("tau 0.93")
    if {fail}:
        raise SystemExit(3)
with publish.published({name!r}):
    main()
"""


def run(tmp_path, name: str, fail: bool = False, **env: str) -> subprocess.CompletedProcess:
    code = SCRIPT.format(bench=str(REPO / "benchmarks"), results=str(tmp_path / "RESULTS.md"),
                         fail=fail, name=f"/x/{name}.py")
    return subprocess.run([sys.executable, "-c", code, "--quick"], capture_output=True,
                          text=True, env={**os.environ, **env}, cwd=tmp_path)


def test_a_complete_run_replaces_its_own_section_only(tmp_path):
    """Bug class: a rerun appends a second copy, or overwrites the other scripts' sections."""
    for name in ("surrogates", "help_transfer", "surrogates"):
        assert run(tmp_path, name).returncode == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.count("<!-- begin surrogates quick -->") == 1 and text.count("tau 0.93") == 2
    assert text.index("## help_transfer quick") < text.index("## surrogates quick")  # name order
    assert "`python benchmarks/surrogates.py --quick`" in text
    assert "commit " in text and " cores" in text and "UTC" in text


def test_a_failed_or_opted_out_run_publishes_nothing(tmp_path):
    """Bug class: a crashed run (or a scratch run with ANB_PUBLISH=0) replaces the recorded
    figures with partial ones."""
    assert run(tmp_path, "shift", fail=True).returncode == 3
    assert run(tmp_path, "shift", ANB_PUBLISH="0").returncode == 0
    assert not (tmp_path / "RESULTS.md").exists()


def test_every_benchmark_script_publishes():
    """Bug class: a new benchmark prints figures that never reach RESULTS.md."""
    scripts = sorted((REPO / "benchmarks").glob("*.py"))
    missing = [p.name for p in scripts if p.name != "publish.py"
               and "with published(__file__):" not in p.read_text()]
    assert not missing


def test_output_options_do_not_name_a_section():
    """Bug class: ``--csv PATH`` or ``--out DIR`` starts a new section, orphaning the old one."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from publish import section_name

    plain = section_name("/x/shift.py", ["--members", "1"])
    assert plain == "shift members 1"
    assert section_name("/x/shift.py", ["--csv", "/tmp/a.csv", "--members", "1",
                                        "--plot=/tmp/p.png"]) == plain
    assert section_name("/x/search_measured.py", ["--out", "/tmp/o", "--benchmark", "b"]) \
        == "search_measured benchmark b"
