"""Provenance lets slow or odd nodes be told apart: hardware (GPU, driver, CUDA, cuDNN), the
git commit, the data files' fingerprints; memory is returned between architectures."""
from __future__ import annotations

import json
import subprocess

import pytest
import torch

from anb.collect_accuracy import provenance
from anb.collect_accuracy.train import main
from anb.searchspace import Sampler, get_space
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import REPO

pytestmark = pytest.mark.timeout(300)
ECG = REPO / "configs" / "accuracy" / "seq1d_ecg.ini"


def test_record_names_hardware_commit_and_data_file(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    data = tmp_path / "ecg.npz"
    np.savez(data, x_train=rng.normal(size=(64, 1, 100)).astype(np.float32),
             y_train=rng.integers(0, 4, 64), x_val=rng.normal(size=(16, 1, 100)).astype(np.float32),
             y_val=rng.integers(0, 4, 16))
    arch = str(Sampler(0, space=get_space("anb-seq1d")).sample(1)[0])
    assert main(["--config", str(ECG), "--folder", str(tmp_path / "out"), "--archs", arch,
                 "--train_path", str(data), "--val_path", str(data), "--epochs", "1",
                 "--eval_epochs", "1", "--batch_size", "16", "--progress", "false",
                 "--num_workers", "0", "--lr_peak_epoch", "0.5",
                 "--wandb_mode", "disabled"]) == 0
    (path,) = (tmp_path / "out" / "records").glob("*.json")
    prov = json.loads(path.read_text())["provenance"]
    hw = prov["hardware"]
    assert hw["device"] == "cpu" and hw["gpu"] is None and hw["cuda"] == torch.version.cuda
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert prov["git_commit"].removesuffix("-dirty") == head
    fingerprint = provenance.file_fingerprint(str(data))
    assert prov["dataset"]["train_file"] == fingerprint
    assert fingerprint["bytes"] == data.stat().st_size


def test_file_fingerprint_follows_content_not_location(tmp_path):
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(bytes(range(256)) * 100)
    b.write_bytes(bytes(range(256)) * 100)
    fa, fb = provenance.file_fingerprint(str(a)), provenance.file_fingerprint(str(b))
    assert fa == fb
    c = tmp_path / "c.bin"
    c.write_bytes(bytes(range(256)) * 99 + bytes(255) + b"\\x01")
    assert provenance.file_fingerprint(str(c)) != fa
    assert provenance.file_fingerprint(str(tmp_path)) is None
    assert provenance.file_fingerprint("") is None


def test_memory_is_freed_between_architectures(tmp_path, monkeypatch):
    """On CPU the call itself is what can be checked (the CUDA cache release and peak reset
    happen only on a GPU): once after every trained architecture."""
    from anb.collect_accuracy import train

    calls = []
    monkeypatch.setattr(train, "free_memory", lambda device: calls.append(device.type))
    archs = ",".join(str(a) for a in Sampler(1, space=ANB_SPACE).sample(2))
    assert main(["--config", str(REPO / "configs" / "accuracy" / "digits_tiny.ini"),
                 "--folder", str(tmp_path), "--archs", archs, "--progress", "false",
                 "--epochs", "1", "--eval_epochs", "1", "--max_steps", "1",
                 "--max_val_steps", "1", "--min_res", "32", "--max_res", "32",
                 "--val_res", "32", "--image_size", "32"]) == 0
    assert calls == ["cpu", "cpu"]
