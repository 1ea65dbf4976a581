"""The supported range, tested: the built wheel in fresh environments at the dependency floor
and at the newest releases, on the oldest and newest Python anb supports.

    .venv/bin/nox -r --envdir ~/.cache/anb/nox      (-r: reuse the environments of an earlier run)
    .venv/bin/python scripts/compare_answers.py build/answers

Each session installs the wheel (built once into ``build/wheel``) and writes the query path's
answers (``scripts/query_answers.py``) to ``build/answers/<session>.json``; the comparison
holds them to the pinned environment's answers (``.venv``, the one the test suite runs in) at
1e-6 relative. The floors are read from ``pyproject.toml``: every ``>=`` becomes ``==``, so the
range declared is the range tested.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nox
import tomllib

ROOT = Path(__file__).parent
WHEEL_DIR = ROOT / "build" / "wheel"
ANSWERS = ROOT / "build" / "answers"
#: Python versions: the oldest and newest supported (the pinned suite runs on the main one).
OLDEST, NEWEST = "3.10", "3.13"
#: Extras the query path's adapters need, beside the core dependencies.
QUERY_EXTRAS = ("syne-tune", "optunahub")
FIT_EXTRAS = ("fit",)

nox.options.sessions = ["query_floor", "syne_tune_floor", "query_newest", "fit_floor"]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def floor_pins(extras: tuple[str, ...]) -> list[str]:
    """``name==X`` for every ``name>=X`` of the core dependencies and ``extras``; where an
    extra raises a core floor (syne-tune: numpy), the higher one (markers kept; exact pins as
    they are)."""
    project = _pyproject()
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    floors: dict[str, tuple[tuple[int, ...], str]] = {}
    for spec in specs:
        requirement, _, marker = spec.partition(";")
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-\[\]]+)\s*(>=|==)\s*([^,\s]+)\s*", requirement)
        if match is None:
            raise ValueError(f"pyproject.toml: {spec!r} has no floor (use 'name>=X' or '==X')")
        name = re.sub(r"\[.*\]", "", match[1]).lower()
        version = tuple(int(p) for p in re.findall(r"\d+", match[3]))
        pin = f"{name}=={match[3]}" + (f";{marker}" if marker else "")
        if name not in floors or version > floors[name][0]:
            floors[name] = (version, pin)
    return [pin for _, pin in floors.values()]


def wheel() -> Path:
    """The wheel of this checkout, built afresh on the first call of a run of nox."""
    if not _BUILT:
        for old in WHEEL_DIR.glob("anb-*.whl"):
            old.unlink()
        with tempfile.TemporaryDirectory(prefix="anb-matrix-") as tmp:
            # built from a copy: setuptools' build/ and egg-info stay out of the checkout,
            # which the test suite reads at the same time
            src = Path(tmp) / "src"
            shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
                ".venv", ".git", "build", "dist", "outputs", "site", "*.egg-info",
                "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"))
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                            "--no-build-isolation", "-w", str(WHEEL_DIR), str(src)], check=True)
        _BUILT.extend(sorted(WHEEL_DIR.glob("anb-*.whl")))
    return _BUILT[-1]


_BUILT: list[Path] = []


def _install(session: nox.Session, *requirements: str) -> None:
    """The dependencies, then this run's wheel over whatever a reused environment holds."""
    session.install(*requirements)
    session.install("--force-reinstall", "--no-deps", str(wheel()))


def _answers(session: nox.Session, *flags: str) -> None:
    session.run("python", str(ROOT / "scripts" / "query_answers.py"),
                str(ANSWERS / f"{session.name}.json"), *flags,
                env={"OMP_NUM_THREADS": "1", "ANB_CACHE_DIR": session.create_tmp()})


@nox.session(python=OLDEST)
def query_floor(session: nox.Session) -> None:
    """The query path (load, query, search, the Optuna problem) at every declared floor."""
    _install(session, f"{wheel()}[optunahub]", *floor_pins(("optunahub",)))
    _answers(session, "--optuna")


@nox.session(python=OLDEST)
def syne_tune_floor(session: nox.Session) -> None:
    """The Syne Tune blackbox at its extra's floors (which raise numpy's)."""
    _install(session, f"{wheel()}[syne-tune]", *floor_pins(("syne-tune",)))
    _answers(session, "--syne-tune")


@nox.session(python=NEWEST)
def query_newest(session: nox.Session) -> None:
    """The query path and both adapters at the newest releases the package index has."""
    _install(session, "--upgrade", "--upgrade-strategy", "eager",
             f"{wheel()}[{','.join(QUERY_EXTRAS)}]")
    _answers(session, "--optuna", "--syne-tune")


@nox.session(python=OLDEST)
def fit_floor(session: nox.Session) -> None:
    """The fit path (xgboost, lightgbm, scikit-learn) at its declared floors."""
    _install(session, f"{wheel()}[{','.join(FIT_EXTRAS)}]", *floor_pins(FIT_EXTRAS))
    _answers(session, "--fit")
