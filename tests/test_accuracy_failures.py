"""One failing design never stops the stream: it is recorded with its error in
``<folder>/failed/``, the stream goes on and replaces it (a node asked for ``num_models`` trains
that many), a rerun retries it until ``max_attempts`` failures, and ``anb export`` lists it.

The failure itself is a stand-in where it cannot happen here: a CUDA out-of-memory error raised
for one chosen architecture (CPU-only machine). The NaN-loss failure is real (a huge lr)."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from anb.collect_accuracy import failures
from anb.collect_accuracy.export import export
from anb.collect_accuracy.train import Trainer, main
from anb.searchspace import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import CONFIG

pytestmark = pytest.mark.timeout(300)
TINY = ["--progress", "false", "--epochs", "1", "--eval_epochs", "1", "--max_steps", "2",
        "--max_val_steps", "1", "--min_res", "32", "--max_res", "32", "--val_res", "32",
        "--image_size", "32", "--seed", "5"]


class Injected:
    """Which architecture ids fail (``bad``) and which were tried, in order."""

    def __init__(self):
        self.bad: set[str] = set()
        self.tried: list[str] = []


@pytest.fixture
def oom(monkeypatch) -> Injected:
    """Training an architecture in ``oom.bad`` raises CUDA's out-of-memory error (stand-in)."""
    injected = Injected()
    original = Trainer._train_arch

    def failing(self, arch, index, total):
        injected.tried.append(arch.id)
        if arch.id in injected.bad:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB "
                                         "(stand-in)")
        return original(self, arch, index, total)

    monkeypatch.setattr(Trainer, "_train_arch", failing)
    return injected


def _records(folder) -> list[str]:
    return sorted(p.stem for p in (folder / "records").glob("*.json"))


@pytest.mark.slow
def test_failing_design_is_recorded_replaced_retried_and_exported(tmp_path, oom, capsys):
    stream = [a.id for a in Sampler(5, space=ANB_SPACE).sample(4)]
    oom.bad.add(stream[1])
    tried = oom.tried
    args = ["--config", str(CONFIG), "--folder", str(tmp_path), "--num_models", "3",
            "--max_attempts", "2", *TINY]
    assert main(args) == 0
    # the failure did not stop the stream, and the 4th design replaced it
    assert _records(tmp_path) == sorted([stream[0], stream[2], stream[3]])
    assert tried == stream
    (entry,) = failures.entries(tmp_path, stream[1])
    assert entry["error"].startswith("OutOfMemoryError: CUDA out of memory")
    assert entry["arch_id"] == stream[1] and "Traceback" not in entry["error"]
    assert f"{stream[1]} failed: OutOfMemoryError" in capsys.readouterr().out
    # rerun: the failed design is tried again (attempt 2 of 2), the rest are done
    tried.clear()
    assert main(args) == 0
    assert tried == [stream[1]] and failures.attempts(tmp_path, stream[1]) == 2
    # third run: max_attempts used up, nothing is trained
    tried.clear()
    assert main(args) == 0
    assert tried == [] and f"{stream[1]} already failed" in capsys.readouterr().out
    assert _records(tmp_path) == sorted([stream[0], stream[2], stream[3]])
    summary = export(tmp_path / "acc.csv", local=[tmp_path], parquet=False, space=ANB_SPACE)
    assert summary["rows"] == 3 and summary["failed"] == 1
    incomplete = pd.read_csv(tmp_path / "acc.incomplete.csv")
    row = incomplete[incomplete["status"] == "failed"].iloc[0]
    assert row["arch_id"] == stream[1] and "2 failed attempt(s)" in row["reason"]
    assert "OutOfMemoryError" in row["reason"]


@pytest.mark.slow
def test_explicit_list_is_not_extended_and_a_success_clears_failures(tmp_path, oom):
    stream = [a.id for a in Sampler(5, space=ANB_SPACE).sample(2)]
    archs = ",".join(str(a) for a in Sampler(5, space=ANB_SPACE).sample(2))
    oom.bad.add(stream[0])
    args = ["--config", str(CONFIG), "--folder", str(tmp_path), "--archs", archs, *TINY]
    assert main(args) == 0
    assert oom.tried == stream and _records(tmp_path) == [stream[1]]
    assert failures.attempts(tmp_path, stream[0]) == 1
    oom.bad.clear()  # the next attempt succeeds (e.g. the GPU was fragmented)
    oom.tried.clear()
    assert main(args) == 0 and oom.tried == [stream[0]]
    assert _records(tmp_path) == sorted(stream) and failures.all_failed(tmp_path) == {}


def test_nan_loss_is_recorded_as_a_failure(tmp_path):
    arch = str(Sampler(5, space=ANB_SPACE).sample(1)[0])
    assert main(["--config", str(CONFIG), "--folder", str(tmp_path), "--archs", arch,
                 *TINY, "--lr", "1e30", "--lr_batch", "1"]) == 0
    (arch_id,) = failures.all_failed(tmp_path)
    (entry,) = failures.entries(tmp_path, arch_id)
    assert entry["error"].startswith("FloatingPointError: training loss is")
    assert not (tmp_path / "records").exists() or not _records(tmp_path)
    assert json.loads((tmp_path / "failed" / arch_id / entry["path"].split("/")[-1])
                      .read_text())["status"] == "failed"


def test_failed_design_memory_is_released_before_it_is_freed(tmp_path, monkeypatch):
    """The failed design's model (and so its optimiser state and activations) is unreachable
    when ``free_memory`` runs: on CUDA a design that ran out of memory would otherwise still
    hold it, and the next design would start on a nearly full GPU (seen on an H100)."""
    import gc
    import weakref

    from anb.collect_accuracy import train

    models: list[weakref.ref] = []
    live_at_free: list[int] = []
    build = train.build_model

    def tracked(*args, **kwargs):
        model = build(*args, **kwargs)
        models.append(weakref.ref(model))
        return model

    def free(device):
        gc.collect()
        live_at_free.append(sum(ref() is not None for ref in models))

    monkeypatch.setattr(train, "build_model", tracked)
    monkeypatch.setattr(train, "free_memory", free)
    arch = str(Sampler(5, space=ANB_SPACE).sample(1)[0])
    assert main(["--config", str(CONFIG), "--folder", str(tmp_path), "--archs", arch,
                 *TINY, "--lr", "1e30", "--lr_batch", "1"]) == 0
    assert failures.all_failed(tmp_path) and models
    assert live_at_free == [0]


@pytest.mark.slow
def test_nan_loss_on_two_ranks_fails_the_design_on_both_and_goes_on(tmp_path):
    """torchrun, 2 gloo processes: the loss is all-reduced, so every rank sees the NaN, records
    it and moves on together (no rank left waiting in a collective)."""
    import subprocess

    from tests.trainer_helpers import REPO, child_env, torchrun_cmd

    proc = subprocess.run(torchrun_cmd(tmp_path, "--num_models", "2", "--epochs", "1",
                                       "--eval_epochs", "1", "--lr", "1e30", "--lr_batch", "1",
                                       "--max_attempts", "1"),
                          env=child_env(), cwd=REPO, capture_output=True, text=True, timeout=250)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    failed = failures.all_failed(tmp_path)
    assert len(failed) == 4  # the two designs and two replacements (max_replacements -1)
    for entries in failed.values():
        assert sorted(e["rank"] for e in entries) == [0, 1]
        assert all(e["error"].startswith("FloatingPointError") for e in entries)
        assert len({e["job_id"] for e in entries}) == 1
