"""Shared fixtures: the released dataset (read in place from ../shared) and thread pinning."""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

import sys  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ANB_SHARED_DATA", REPO.parent / "shared" / "data" / "anb"))
DATASET_TARBALL = SHARED_DATA / "anb_dataset_jsons.tar.gz"
SPLITS_DIR = SHARED_DATA / "splits"
SNPE_STANDINS = Path(__file__).parent / "standins" / "snpe"


@pytest.fixture(scope="session", autouse=True)
def _pin_torch_threads():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard requirement
        return
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def dataset_tarball() -> Path:
    if not DATASET_TARBALL.exists():
        pytest.fail(f"released dataset not found at {DATASET_TARBALL}; "
                    "the tests read ../shared/data/anb/ in place")
    return DATASET_TARBALL


@pytest.fixture(scope="session")
def released_records(dataset_tarball):
    from anb.records import load_records

    return load_records(dataset_tarball)


@pytest.fixture(scope="session")
def released_frame(released_records):
    from anb.records import records_to_frame

    return records_to_frame(released_records)


@pytest.fixture
def sdk_path(monkeypatch):
    """The SNPE stand-ins first on PATH (with this interpreter's python3)."""
    monkeypatch.setenv("PATH", f"{SNPE_STANDINS}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.delenv("SNPE_ROOT", raising=False)
    return SNPE_STANDINS
