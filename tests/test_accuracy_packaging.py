"""The ``ffcv`` extra of pyproject.toml names what scripts/ci/accuracy.sh installs and the tests
run against: FFCV pulls ``opencv-python`` (not the headless wheel; both provide ``cv2`` and
clash when installed together), and the CI pins satisfy the extra's specifiers."""
from __future__ import annotations

import re
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.trainer_helpers import REPO

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def ffcv_extra() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["optional-dependencies"]["ffcv"]]
    return {canonicalize_name(r.name): r for r in reqs}


def pins(text: str) -> dict[str, str]:
    """``name==version`` pairs of the line that installs FFCV."""
    (line,) = [ln for ln in text.splitlines() if re.search(r"\bffcv==", ln)]
    return {canonicalize_name(n): v for n, v in re.findall(r"([A-Za-z0-9_.-]+)==([^\s]+)", line)}


def test_ci_pins_satisfy_the_ffcv_extra():
    extra = ffcv_extra()
    ci = pins((REPO / "scripts" / "ci" / "accuracy.sh").read_text())
    assert {"ffcv", "numba", "opencv-python"} <= set(ci)
    assert set(extra) <= set(ci), f"extra {sorted(extra)} not all installed by CI {sorted(ci)}"
    for name, requirement in extra.items():
        assert requirement.specifier.contains(ci[name], prereleases=True), (name, ci[name])
    assert "opencv-python-headless" not in extra
    # requirements.txt documents the same pins
    assert pins((REPO / "requirements.txt").read_text()) == ci


def test_ffcv_extra_names_the_opencv_that_ffcv_itself_requires():
    try:
        needs = {canonicalize_name(Requirement(r).name) for r in metadata.requires("ffcv") or []}
    except metadata.PackageNotFoundError:
        pytest.skip("FFCV is installed by scripts/ci/accuracy.sh")
    opencv = {n for n in needs if n.startswith("opencv")}
    assert opencv and opencv <= set(ffcv_extra())
    for name, requirement in ffcv_extra().items():  # and the installed versions satisfy it
        assert requirement.specifier.contains(metadata.version(name), prereleases=True), name
