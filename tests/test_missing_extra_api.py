"""Each public function (and module) that needs an optional library, called with that library
missing for real (``sys.modules[name] = None`` makes ``import name`` fail): one
:class:`anb.extras.MissingExtra` naming the extra that installs it, before any output."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

import numpy as np
import pytest

from anb import extras
from tests.conftest import REPO


def block(monkeypatch: pytest.MonkeyPatch, library: str) -> None:
    """Make ``library`` and each of its loaded submodules fail to import."""
    for name in [library, *(m for m in list(sys.modules) if m.startswith(library + "."))]:
        monkeypatch.setitem(sys.modules, name, None)


def reimport(module: str) -> Callable[[], object]:
    return lambda: importlib.import_module(module)


def plan_import(monkeypatch: pytest.MonkeyPatch) -> Callable[[], object]:
    monkeypatch.delitem(sys.modules, "anb.surrogates.plan", raising=False)
    return reimport("anb.surrogates.plan")


def adapt_select(_: pytest.MonkeyPatch) -> Callable[[], object]:
    from anb.surrogates.adapt.select import select
    return lambda: select(np.zeros((4, 2)), 2)


def hpo_tune(_: pytest.MonkeyPatch) -> Callable[[], object]:
    from anb.surrogates.hpo import tune
    x, y = np.zeros((4, 2)), np.zeros(4)
    return lambda: tune("xgboost", x, y, x, y, seconds=1)


def parity_plots(_: pytest.MonkeyPatch) -> Callable[[], object]:
    from anb.surrogates.report import parity_plots
    return lambda: parity_plots(None, None, None)  # type: ignore[arg-type]  # refused first


def baseline(family: str) -> Callable[[pytest.MonkeyPatch], Callable[[], object]]:
    def entry(_: pytest.MonkeyPatch) -> Callable[[], object]:
        from anb.surrogates.baseline import ReferenceModel
        x, y = np.zeros((4, 2)), np.zeros(4)
        settings = {"num_rounds": 1, "early_stopping_rounds": 1}
        return lambda: ReferenceModel(family, settings).fit(x, y, x, y)
    return entry


def digits(_: pytest.MonkeyPatch) -> Callable[[], object]:
    from anb.digits import digits_tensors
    return lambda: digits_tensors(8)


def postgres(_: pytest.MonkeyPatch) -> Callable[[], object]:
    from anb.jobs.postgres import PostgresQueue
    return lambda: PostgresQueue("postgresql://nowhere/anb")


def onnx_session(_: pytest.MonkeyPatch) -> Callable[[], object]:
    from anb.searchspace.onnx_export import onnx_session
    return lambda: onnx_session("model.onnx")


def val_image(_: pytest.MonkeyPatch) -> Callable[[], object]:
    from anb.preprocessing import val_image
    return lambda: val_image("image.jpg", 32)


def read_parquet(_: pytest.MonkeyPatch) -> Callable[[], object]:
    from anb.records import read_table
    return lambda: read_table("table.parquet")


CASES = [  # (entry point, library made missing, extra the line names)
    ("plan", plan_import, "sklearn", "fit"),
    ("adapt-select", adapt_select, "sklearn", "fit"),
    ("hpo", hpo_tune, "optuna", "fit"),
    ("parity-plots", parity_plots, "matplotlib", "fit"),
    ("baseline-xgboost", baseline("xgboost"), "xgboost", "fit"),
    ("baseline-lightgbm", baseline("lightgbm"), "lightgbm", "fit"),
    ("digits", digits, "torch", "measure"),
    ("digits-sklearn", digits, "sklearn", "measure"),
    ("postgres", postgres, "psycopg", "postgres"),
    ("onnx-session", onnx_session, "onnxruntime", "measure"),
    ("val-image", val_image, "PIL", "measure"),
    ("read-parquet", read_parquet, "pyarrow", "fit"),
]


@pytest.mark.parametrize(("entry", "library", "extra"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_missing_library_names_its_extra(monkeypatch, entry, library, extra):
    call = entry(monkeypatch)
    block(monkeypatch, library)
    with pytest.raises(extras.MissingExtra) as caught:
        call()
    assert f"needs {library}, which is not installed: pip install 'anb[{extra}]'" \
        in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_front_report_names_plotly_before_writing(monkeypatch, tmp_path):
    from anb.nas.followup import front_report
    block(monkeypatch, "plotly")
    with pytest.raises(extras.MissingExtra, match=r"needs plotly, .*'anb\[measure\]'"):
        front_report(tmp_path / "no-search", tmp_path / "report")
    assert not (tmp_path / "report").exists()


def test_merge_names_pyarrow_before_writing(monkeypatch, tmp_path):
    from anb.collect_throughput.records.merge import MergeReport, write_merged
    from anb.searchspace import get_space
    block(monkeypatch, "pyarrow")
    with pytest.raises(extras.MissingExtra, match=r"needs pyarrow, .*'anb\[measure\]'"):
        write_merged([], MergeReport("anb-mnasnet"), tmp_path / "merged",
                     space=get_space("anb-mnasnet"))
    assert not (tmp_path / "merged").exists()


def test_the_command_line_names_pillows_extra():
    """A command that reads images without Pillow: the CLI's one line (anb.cli_support.run)
    names the extra, as for every other optional module."""
    line = extras.explain(ModuleNotFoundError("No module named 'PIL'", name="PIL"))
    assert line is not None and "needs PIL, which is not installed: pip install " \
        "'anb[measure]'" in line


def test_every_module_imports_or_names_its_extra(tmp_path):
    """Every module of the package, imported with every optional library missing (those
    :data:`anb.extras.EXTRA` lists): it imports, or raises one MissingExtra line."""
    code = textwrap.dedent(f"""
        import importlib, importlib.abc, pkgutil, sys

        class Blocked(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {sorted(extras.EXTRA)!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

        sys.meta_path.insert(0, Blocked())
        import anb
        from anb.extras import MissingExtra
        for info in pkgutil.walk_packages(anb.__path__, "anb."):
            if info.name != "anb.__main__":  # runs the command
                try:
                    importlib.import_module(info.name)
                except MissingExtra:
                    pass
                except Exception as err:
                    print(info.name, type(err).__name__, err)
        """)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "", proc.stdout
