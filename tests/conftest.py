"""Shared fixtures: the released dataset (the copy packaged in ``anb.resources``) and thread
pinning."""
from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

import sys

import pytest

REPO = Path(__file__).resolve().parents[1]
SNPE_STANDINS = Path(__file__).parent / "standins" / "snpe"


#: Seconds each test file took in the last full run (``scripts/update_durations.py`` writes it
#: from a JUnit report). pytest-xdist's ``--dist loadfile`` hands files to idle workers in
#: collection order, so the longest start first and the suite does not end on one long file
#: while the other worker sits idle.
FILE_SECONDS = REPO / "tests" / "durations.json"
#: Files that wait for a build test.sh starts beside the suite (the torch-xla environment: many
#: minutes on a fresh machine): handed out last, so that no worker waits idle for it.
WAIT_FOR_BACKGROUND_BUILD = frozenset({"test_xla_env.py"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.exists() else {}
    items.sort(key=lambda item: (item.path.name in WAIT_FOR_BACKGROUND_BUILD,  # stable sort
                                 -seconds.get(item.path.name, 0.0)))


@pytest.fixture(scope="session")
def statistical_seed() -> int:
    """The seed of the ``statistical`` tests' random draws: 0, or ``ANB_TEST_SEED``
    (``scripts/statistical_seeds.sh`` reruns them over several)."""
    return int(os.environ.get("ANB_TEST_SEED", "0"))


@pytest.fixture(scope="session", autouse=True)
def _pin_torch_threads():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard requirement
        return
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def dataset_tarball() -> Path:
    from anb.resources import RELEASED_DATASET

    return RELEASED_DATASET


@pytest.fixture(scope="session")
def released_records(dataset_tarball):
    from anb.records import load_records
    from anb.searchspace.space import ANB_SPACE

    return load_records(dataset_tarball, space=ANB_SPACE)


@pytest.fixture(scope="session")
def released_frame(released_records):
    from anb.records import records_to_frame
    from anb.searchspace.space import ANB_SPACE

    return records_to_frame(released_records, space=ANB_SPACE)


@pytest.fixture(scope="session")
def small_released_bench():
    """A small benchmark fitted on the released data (``tests/integration_helpers.py``), shared
    by every file of one test process that needs one; read only."""
    from tests.integration_helpers import released_bench

    return released_bench()


@pytest.fixture(scope="session")
def small_nb201_bench():
    """A small NAS-Bench-201 benchmark on HELP's latencies (``tests/integration_helpers.py``),
    shared like ``small_released_bench``; read only."""
    from tests.integration_helpers import nasbench201_bench

    return nasbench201_bench()


@pytest.fixture
def sdk_path(monkeypatch):
    """The SNPE stand-ins first on PATH (with this interpreter's python3)."""
    monkeypatch.setenv("PATH",
                       f"{SNPE_STANDINS}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.delenv("SNPE_ROOT", raising=False)
    return SNPE_STANDINS


@pytest.fixture
def drop_idle_prior(monkeypatch):
    """Call to make later layer-cost fits as before the prior on unexercised work: no work
    left idle, so none takes the median speed and no unit is ``unmeasured_``."""
    import numpy as np

    from anb.surrogates.layer_cost import LayerCostModel

    def no_idle_costs(self, design: np.ndarray, mapping: np.ndarray):
        return np.zeros(design.shape[1], dtype=bool), np.zeros(len(mapping) - 1, dtype=bool)

    return lambda: monkeypatch.setattr(LayerCostModel, "_idle_costs", no_idle_costs)


#: Set in the interpreter an ``isolated`` test runs in.
ISOLATED_CHILD = os.environ.get("ANB_ISOLATED_CHILD") == "1"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test marked ``isolated`` runs in a fresh interpreter (``python -m pytest NODEID``):
    native stacks that bundle their own LLVM or thread runtime (TVM, OpenVINO) must not share
    the suite's process with the others (numba's llvmlite, torch, onnxruntime), where they
    crashed the interpreter tests later. Its outcome (pass, skip, failure with the child's
    output) is the test's. Its fixtures are set up in both interpreters: mark only tests
    whose fixtures are light."""
    if ISOLATED_CHILD or pyfuncitem.get_closest_marker("isolated") is None:
        return None
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         pyfuncitem.nodeid], env={**os.environ, "ANB_ISOLATED_CHILD": "1"}, cwd=REPO,
        capture_output=True, text=True, timeout=900)
    output = proc.stdout[-4000:] + proc.stderr[-2000:]
    if proc.returncode == 0 and " skipped" in proc.stdout and " passed" not in proc.stdout:
        reasons = [line.split(": ", 1)[-1] for line in proc.stdout.splitlines()
                   if line.startswith("SKIPPED")]
        pytest.skip(reasons[0] if reasons else "skipped in its own interpreter")
    if proc.returncode != 0 or "1 passed" not in proc.stdout:
        pytest.fail(f"in its own interpreter (exit {proc.returncode}):\n{output}",
                    pytrace=False)
    return True
