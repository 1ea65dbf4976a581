"""SIGTERM (what SLURM sends on preemption, scancel and requeue) in the middle of an
architecture: the rerun continues it from its last checkpointed epoch, with its claim free."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from anb.searchspace import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import CONFIG, REPO, child_env


@pytest.fixture
def inherited_wandb_service():
    """A wandb service of this (the test) process, its token in the environment the jobs
    inherit, as after an in-process wandb run in a notebook or an earlier test: the killed
    job's open run must not block the rerun ("run ID ... is in use")."""
    wandb_setup = pytest.importorskip("wandb.sdk.wandb_setup")
    wandb_setup.singleton().ensure_service()
    assert os.environ.get("WANDB_SERVICE")


@pytest.mark.slow
@pytest.mark.usefixtures("inherited_wandb_service")
def test_sigterm_mid_architecture_then_rerun_resumes(tmp_path):
    folder = tmp_path / "out"
    cmd = [sys.executable, "-m", "anb.collect_accuracy.train", "--config", str(CONFIG),
           "--folder", str(folder), "--num_models", "2", "--seed", "5", "--progress", "false",
           "--epochs", "4", "--eval_epochs", "1", "--batch_size", "16", "--max_steps", "2",
           "--val_batch_size", "60", "--wandb_mode", "offline"]
    first, second = [a.id for a in Sampler(5, space=ANB_SPACE).sample(2)]
    proc = subprocess.Popen(cmd, env=child_env(), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    ckpt = folder / "checkpoints" / f"{first}.pt"
    deadline = time.time() + 300
    while not ckpt.exists():
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM
    if (folder / "records" / f"{first}.json").exists():  # it finished before the signal landed
        resumed = second
    else:
        resumed = first
    epoch = torch_epoch(folder / "checkpoints" / f"{resumed}.pt")
    rerun = subprocess.run(cmd, env=child_env(), cwd=REPO, capture_output=True, text=True,
                           timeout=400)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "busy:" not in rerun.stdout and "'busy': 0" in rerun.stdout  # claim went with it
    records = {p.stem: json.loads(p.read_text()) for p in (folder / "records").glob("*.json")}
    assert sorted(records) == sorted([first, second]), rerun.stdout[-3000:]
    if epoch is not None:  # killed after `epoch` epochs: the rerun did only the rest
        assert f"{resumed} resuming from epoch {epoch}" in rerun.stdout
        assert len(records[resumed]["provenance"]["job_ids"]) == 2
    assert [h["epoch"] for h in records[resumed]["provenance"]["val_history"]] == [3]
    assert not list((folder / "checkpoints").glob("*.pt"))


def torch_epoch(path) -> int | None:
    if not path.exists():
        return None
    import torch

    return int(torch.load(path, map_location="cpu", weights_only=True)["epoch"])
