"""Every shipped space and a third-party one run the whole chain from the shell: sample ->
count -> ONNX -> measure cpu-ort (real onnxruntime timing) -> merge -> fit -> query -> search
-> adapt, each step reading what the last one wrote and naming the space.

The shipped spaces' chains run each command in this process through the console entry's
wrapper (tests/console_fixtures.py). The third-party space (``tests/plugins/anb_tiny_space``)
is pip-installed into a folder of its own and found only through its ``anb.spaces`` entry
point, in a fresh process with that folder on its path that runs the chain's commands in turn
(tests/console_process.py)."""
from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anb.records import model_info
from anb.searchspace.registry import get_space
from tests.console_fixtures import run_console
from tests.console_process import ConsoleProcess
from tests.plugin_helpers import pip_install

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "tests" / "plugins" / "anb_tiny_space"
N_ARCHS = 12
#: Short timing; the 12 architectures in one round-robin block per protocol (one machine-state
#: probe and sampler per block instead of one per architecture).
FAST = ["--budget", "0.2", "--batch", "2", "--no-progress", "--anchors", "none",
        "--interleave", str(N_ARCHS)]


#: ``anb args`` run in a folder; its stdout (exit code 0 asserted).
Anb = Callable[[list[str], Path], str]


def anb_here(args: list[str], cwd: Path) -> str:
    """In this process through the console entry's wrapper (tests/console_fixtures.py)."""
    done = run_console(args, cwd, {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    assert done.returncode == 0, f"anb {' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def anb_process(process: ConsoleProcess) -> Anb:
    """``anb`` in ``process`` (a fresh one, where a plug-in is on the path)."""
    def anb(args: list[str], cwd: Path) -> str:
        done = process.run(args, cwd)
        assert done.returncode == 0, f"anb {' '.join(args)}\n{done.stdout}\n{done.stderr}"
        return done.stdout
    return anb


def run_chain(space_name: str, folder: Path, space_for_checks, anb: Anb) -> None:
    """The chain in ``folder`` with ``anb``; ``space_for_checks``: the Space object the outputs
    are checked against (the plug-in's is loaded here through the same entry point)."""
    space = ["--space", space_name]
    text = anb(["space", "sample", "-n", str(N_ARCHS), "--seed", "3", *space], folder)
    archs = text.split("\n")[:N_ARCHS]
    parsed = [space_for_checks.arch(a) for a in archs]
    assert len({a.id for a in parsed}) == N_ARCHS  # no repeats
    (folder / "archs.txt").write_text(text)

    counted = pd.read_csv(io.StringIO(anb(["space", "count", archs[0], *space], folder)))
    assert counted["macs"][0] == pytest.approx(model_info(parsed[0], space_for_checks)["macs"])

    anb(["space", "onnx", archs[0], "one.onnx", *space], folder)
    assert (folder / "one.onnx").stat().st_size > 0

    anb(["measure", "cpu-ort", "--archs", "archs.txt", "--out", "res", *space, *FAST], folder)
    anb(["merge", "res", "--out", "merged"], folder)  # the records name the space
    table = pd.read_csv(folder / "merged" / "dataset.csv")
    assert set(table["space"]) == {space_name}
    assert sorted(table["arch"]) == sorted(str(a) for a in parsed)
    assert (table["throughput_cpu-ort"] > 0).all() and (table["latency_cpu-ort"] > 0).all()

    anb(["fit", "merged", "--out", "model", "--split", "random",
          "--targets", "throughput_cpu-ort"], folder)
    manifest = json.loads((folder / "model" / "manifest.json").read_text())
    assert manifest["space"]["name"] == space_name

    answer = pd.read_csv(io.StringIO(
        anb(["query", "model", "archs.txt"], folder)))
    assert list(answer["arch"]) == [str(a) for a in parsed]
    assert np.isfinite(answer["throughput_cpu-ort"]).all()

    anb(["search", "--benchmark", "model", "-o", "throughput_cpu-ort:max", "-o", "params:min",
          "--budget", "30", "--out", "found"], folder)
    summary = json.loads((folder / "found" / "summary.json").read_text())
    assert summary["space"]["name"] == space_name and summary["evaluations"] == 30
    front = pd.read_csv(folder / "found" / "pareto.csv", dtype={"arch": str})
    assert all(space_for_checks.arch(a) is not None for a in front["arch"])

    # the batch-1 latency as a device the base never saw ("cpu-ort-b1": adapt never transfers
    # from the same device's other metrics), adapted from the 12 measured points
    table[["arch", "latency_cpu-ort"]].rename(columns={"latency_cpu-ort": "latency_cpu-ort-b1"})\
        .to_csv(folder / "b1.csv", index=False)
    anb(["adapt", "--device", "cpu-ort-b1", "--measured", "b1.csv", "--base", "model",
          "--out", "adapted"], folder)
    adapted = pd.read_csv(io.StringIO(
        anb(["query", "adapted", "archs.txt"], folder)))
    assert list(adapted["arch"]) == [str(a) for a in parsed]
    assert (adapted["latency_cpu-ort-b1"] > 0).all() and "latency_cpu-ort-b1_std" in adapted


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("space_name", ["anb-seq1d", "nasbench201", "fbnet", "ofa-mbv3"])
def test_whole_chain_on_a_shipped_space(space_name, tmp_path):
    run_chain(space_name, tmp_path, get_space(space_name), anb_here)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_whole_chain_on_a_third_party_space(tmp_path):
    """Installed with pip (no anb file touched); anb finds it by its entry point."""
    target = pip_install(PLUGIN, tmp_path / "site")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join((str(target), str(REPO)))}
    with ConsoleProcess(env) as process:
        anb = anb_process(process)
        listed = anb(["space", "list"], tmp_path)
        assert "tiny-chain v1: 27 architectures" in listed
        sys.path.insert(0, str(target))
        try:
            from anb_tiny_space import SPACE  # the same object the entry point names
        finally:
            sys.path.remove(str(target))
        work = tmp_path / "work"
        work.mkdir()
        run_chain("tiny-chain", work, SPACE, anb)
