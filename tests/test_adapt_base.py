"""``anb adapt`` as a new user runs it (an empty cache, the README's command) and adapted
folders that are copied or moved: the base is found by name or by path, or named when missing."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anb import resources
from anb.records import load_dataset
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import load
from anb.surrogates.adapt.api import adapt

#: README: ``anb adapt --device myboard --measured my.csv --out outputs/myboard``
README_ADAPT = ["adapt", "--device", "myboard", "--measured", "my.csv", "--out",
                "outputs/myboard"]
PROBE = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"


@pytest.fixture(scope="module")
def my_csv(tmp_path_factory) -> Path:
    """20 released architectures with ZCU102 latency as a new board's ``latency_myboard``."""
    frame = load_dataset(resources.RELEASED_DATASET, space=ANB_SPACE)
    rows = frame.dropna(subset=["latency_zcu102"]).sample(20, random_state=0)
    path = tmp_path_factory.mktemp("measured") / "my.csv"
    pd.DataFrame({"arch": rows["arch"], "latency_myboard": rows["latency_zcu102"]}).to_csv(
        path, index=False)
    return path


@pytest.fixture
def new_user(tmp_path, monkeypatch, my_csv) -> Path:
    """A working folder holding my.csv, and empty cache/home folders (env and platformdirs)."""
    home = tmp_path / "home"
    for name, value in (("HOME", home), ("XDG_CACHE_HOME", home / ".cache"),
                        ("ANB_CACHE_DIR", tmp_path / "anb-cache")):
        monkeypatch.setenv(name, str(value))
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(my_csv, work / "my.csv")
    return work


def run_anb(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "anb", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)


def test_the_readme_adapt_command_works_with_an_empty_cache(new_user):
    result = run_anb(new_user, *README_ADAPT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "latency_myboard: adapted from 20 measured architectures" in result.stdout
    frame = load(new_user / "outputs" / "myboard").query([PROBE])
    assert frame["latency_myboard"].iloc[0] > 0 and frame["latency_myboard_std"].iloc[0] > 0
    assert "val_top1" in frame.columns


def test_python_adapt_on_the_packaged_base_and_moved_folders_still_load(new_user, tmp_path):
    bench, _ = adapt("myboard", new_user / "my.csv", base=resources.PACKAGED_BENCHMARK,
                     out=new_user / "outputs" / "myboard")
    assert bench is not None
    assert bench.info["base"]["packaged"] == resources.PACKAGED_BENCHMARK
    before = bench.query([PROBE])
    moved = tmp_path / "elsewhere" / "deeper" / "myboard"
    moved.parent.mkdir(parents=True)
    shutil.move(str(new_user / "outputs" / "myboard"), moved)
    after = load(moved).query([PROBE])
    pd.testing.assert_frame_equal(before, after)


def test_a_folder_base_survives_moving_the_adapted_folder_alone_or_both(new_user, tmp_path):
    base = tmp_path / "models" / "base"
    shutil.copytree(resources.SHIPPED_DIR, base)
    out = tmp_path / "models" / "myboard"
    bench, _ = adapt("myboard", new_user / "my.csv", base=base, out=out)
    assert bench is not None
    expected = bench.query([PROBE])["latency_myboard"].to_numpy()

    alone = tmp_path / "other" / "myboard"  # relative path broken, absolute one holds
    alone.parent.mkdir()
    shutil.move(str(out), alone)
    np.testing.assert_array_equal(load(alone).query([PROBE])["latency_myboard"], expected)

    both = tmp_path / "copied"  # base and adapted copied together, the original base gone
    both.mkdir()
    shutil.move(str(base), both / "base")
    shutil.copytree(alone, both / "myboard")
    np.testing.assert_array_equal(load(both / "myboard").query([PROBE])["latency_myboard"],
                                  expected)

    with pytest.raises(ValueError, match="base surrogate benchmark of the adapted folder") as err:
        load(alone)  # neither place holds the base now
    assert str(base) in str(err.value) and str(tmp_path / "other" / "base") in str(err.value)
