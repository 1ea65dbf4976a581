"""The recipe identity holds the global batch and the peak lr, never the data's location: a
resume under another global batch (another GPU count) is refused with a clear message, or kept
equal with ``trainval.global_batch``; a dataset staged to local disk keeps its identity."""
from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch

from anb.collect_accuracy import checkpoint
from anb.collect_accuracy.config import (
    ConfigError,
    for_world,
    load_config,
    per_rank_batch,
    recipe_hash,
    recipe_identity,
)
from anb.collect_accuracy.train import Trainer, main
from anb.searchspace import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import CONFIG, REPO

pytestmark = pytest.mark.timeout(300)
IMAGENET = REPO / "configs" / "accuracy" / "imagenet_proxy.ini"
TINY = ["--progress", "false", "--epochs", "2", "--eval_epochs", "1", "--max_steps", "2",
        "--max_val_steps", "1", "--min_res", "32", "--max_res", "32", "--val_res", "32",
        "--image_size", "32"]


def test_global_batch_and_peak_lr_are_in_the_recipe_identity():
    """docs/background/accel-nasbench.md, "Data and schedule": 4 GPUs x 512 at peak lr 0.425, scaled
    with the global batch."""
    config = load_config(IMAGENET)
    ident4 = recipe_identity(config, 4)
    assert ident4["global_batch"] == 2048 and ident4["peak_lr"] == pytest.approx(0.425)
    ident2 = recipe_identity(config, 2)
    assert ident2["global_batch"] == 1024 and ident2["peak_lr"] == pytest.approx(0.2125)
    assert recipe_hash(config, 4) != recipe_hash(config, 2)
    kept = load_config(IMAGENET, ["--global_batch", "2048"])
    assert per_rank_batch(kept, 2) == 1024 and per_rank_batch(kept, 8) == 256
    assert recipe_hash(kept, 2) == recipe_hash(kept, 8) == recipe_hash(config, 4)
    assert for_world(kept, 8)["trainval"]["batch_size"] == 256
    with pytest.raises(ConfigError, match="'trainval.global_batch': value 2048 does not "
                                          "divide into 3 ranks"):
        per_rank_batch(kept, 3)


def test_staged_dataset_keeps_its_identity(tmp_path):
    shared, local = tmp_path / "lustre", tmp_path / "scratch"
    for folder in (shared, local):
        folder.mkdir()
    (shared / "train.beton").write_bytes(b"x" * 1000)
    (shared / "val.beton").write_bytes(b"y" * 500)
    for name in ("train.beton", "val.beton"):
        shutil.copy(shared / name, local / name)

    def config(folder, *extra):
        return load_config(IMAGENET, ["--train_path", str(folder / "train.beton"),
                                      "--val_path", str(folder / "val.beton"), *extra])
    assert recipe_hash(config(shared), 4) == recipe_hash(config(local), 4)
    (local / "val.beton").write_bytes(b"y" * 501)  # another file is another recipe
    assert recipe_hash(config(shared), 4) != recipe_hash(config(local), 4)


@pytest.mark.slow
def test_record_holds_global_batch_and_peak_lr(tmp_path):
    arch = str(Sampler(2, space=ANB_SPACE).sample(1)[0])
    assert main(["--config", str(CONFIG), "--folder", str(tmp_path), "--archs", arch,
                 *TINY, "--lr", "0.1", "--lr_batch", "64"]) == 0
    (path,) = (tmp_path / "records").glob("*.json")
    prov = json.loads(path.read_text())["provenance"]
    assert prov["global_batch"] == 32 and prov["peak_lr"] == pytest.approx(0.1 * 32 / 64)
    assert prov["recipe"]["global_batch"] == 32
    assert prov["recipe"]["peak_lr"] == pytest.approx(0.05)
    assert prov["recipe"]["dataset"] == {"train_path": None, "val_path": None}  # no paths


def _interrupt_after_first_epoch(monkeypatch):
    original = Trainer._train_epoch
    calls = []

    def once(self, *args, **kwargs):
        if calls:
            raise KeyboardInterrupt("stand-in for a node loss after epoch 1")
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_train_epoch", once)


@pytest.mark.slow
def test_resume_under_another_global_batch_is_refused_or_kept(tmp_path, monkeypatch, capsys):
    arch = str(Sampler(2, space=ANB_SPACE).sample(1)[0])
    args = ["--config", str(CONFIG), "--folder", str(tmp_path), "--archs", arch, *TINY]
    _interrupt_after_first_epoch(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        main([*args, "--batch_size", "32"])
    (ckpt,) = (tmp_path / "checkpoints").glob("*.pt")
    assert torch.load(ckpt, weights_only=True)["global_batch"] == 32
    monkeypatch.undo()
    assert main([*args, "--batch_size", "16"]) == 2
    err = capsys.readouterr().err
    assert "was trained at global batch 32 (1 ranks), this run has global batch 16" in err
    assert "--trainval.global_batch 32" in err
    assert ckpt.exists() and not list((tmp_path / "records").glob("*.json"))
    # the option keeps the global batch (here: 32 on one rank), so the run resumes
    assert main([*args, "--batch_size", "16", "--global_batch", "32"]) == 0
    assert "resuming from epoch 1" in capsys.readouterr().out
    (record,) = (tmp_path / "records").glob("*.json")
    assert json.loads(record.read_text())["provenance"]["global_batch"] == 32


def test_checkpoint_of_another_world_size_is_refused(tmp_path):
    path = tmp_path / "a.pt"
    checkpoint.save(path, {"arch": "a", "recipe_hash": "h", "epoch": 3, "global_batch": 2048,
                           "world_size": 4})
    with pytest.raises(checkpoint.CheckpointError,
                       match=r"global batch 2048 \(4 ranks\), this run has global batch 1024 "
                             r"\(2 ranks\)"):
        checkpoint.load(path, "a", "h", 1024, 2)
    assert checkpoint.load(path, "a", "h", 2048, 8)["epoch"] == 3


#: recipe_hash of packaged recipes computed before ``trainval.crop_scale`` / ``hflip`` existed:
#: records and checkpoints written then must keep matching their recipe.
HASHES_BEFORE_AUGMENTATION_KEYS = {("imagenet_proxy.ini", 4): "252caaa9463e3747",
                                   ("imagenet_full.ini", 4): "052ba965edbed985",
                                   ("digits_full_tiny.ini", 1): "8b7c8e31f51fcabf",
                                   ("seq1d_ecg.ini", 1): "3c83cb343c2f1331"}


@pytest.mark.parametrize("name,world", sorted(HASHES_BEFORE_AUGMENTATION_KEYS))
def test_augmentation_keys_join_the_identity_only_when_set(name, world):
    config = load_config(REPO / "configs" / "accuracy" / name)
    assert recipe_hash(config, world) == HASHES_BEFORE_AUGMENTATION_KEYS[name, world]
    assert "crop_scale" not in recipe_identity(config, world)["trainval"]
    for key, value in (("crop_scale", "0.5"), ("hflip", "false")):
        changed = load_config(REPO / "configs" / "accuracy" / name, [f"--trainval.{key}", value])
        assert recipe_identity(changed, world)["trainval"][key] == changed["trainval"][key]
        assert recipe_hash(changed, world) != recipe_hash(config, world)
    same = load_config(REPO / "configs" / "accuracy" / name,
                       ["--crop_scale", "0.08", "--hflip", "true"])  # the defaults, spelled out
    assert recipe_hash(same, world) == recipe_hash(config, world)


def test_model_regularisation_keys_are_in_the_recipe_identity():
    """Catches: ``model.*`` training keys (dropout, drop path, activation) missing from the
    recipe identity, so two settings share one hash (and one resume checkpoint); the keys
    that pick which architectures to train (seed, shard, num_models) stay out of it."""
    config = load_config(IMAGENET)
    base = recipe_hash(config, 4)
    for key, value in (("dropout", "0.3"), ("drop_path", "0.1"), ("activation", "silu")):
        changed = load_config(IMAGENET, [f"--model.{key}", value])
        assert recipe_identity(changed, 4)["model"][key] == changed["model"][key]
        assert recipe_hash(changed, 4) != base, key
    for key, value in (("seed", "5"), ("num_models", "7"), ("shard", "1/2")):
        assert recipe_hash(load_config(IMAGENET, [f"--model.{key}", value]), 4) == base, key


@pytest.mark.slow
def test_resume_restores_the_optimizer_state_and_continues_exactly(tmp_path, monkeypatch):
    """Catches: a resume that drops the optimizer state (SGD momentum) and continues. An
    uninterrupted 3-epoch run and one interrupted after epoch 1 then resumed must checkpoint
    identical weights and momentum buffers after epochs 2 and 3 (CPU, seeded per epoch)."""
    arch = str(Sampler(2, space=ANB_SPACE).sample(1)[0])
    states: dict[str, list[dict]] = {"whole": [], "resumed": []}
    real_save, run = checkpoint.save, ["whole"]

    def recording_save(path, state):
        states[run[0]].append(copy.deepcopy({k: state[k] for k in ("epoch", "model",
                                                                   "optimizer")}))
        return real_save(path, state)

    def args(folder):
        return ["--config", str(CONFIG), "--folder", str(folder), "--archs", arch, *TINY,
                "--epochs", "3"]

    monkeypatch.setattr(checkpoint, "save", recording_save)
    assert main(args(tmp_path / "whole")) == 0
    run[0] = "resumed"
    _interrupt_after_first_epoch(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        main(args(tmp_path / "resumed"))
    monkeypatch.undo()
    monkeypatch.setattr(checkpoint, "save", recording_save)
    assert main(args(tmp_path / "resumed")) == 0
    whole, resumed = states["whole"], states["resumed"]
    assert [s["epoch"] for s in whole] == [1, 2, 3] and [s["epoch"] for s in resumed] == [1, 2, 3]
    momentum = [b["momentum_buffer"] for b in whole[0]["optimizer"]["state"].values()]
    assert momentum and any(bool(m.abs().sum() > 0) for m in momentum)  # there is momentum
    for a, b in zip(whole, resumed, strict=True):
        for key, value in a["model"].items():
            assert torch.equal(value, b["model"][key]), (a["epoch"], key)
        for index, buffers in a["optimizer"]["state"].items():
            assert torch.equal(buffers["momentum_buffer"],
                               b["optimizer"]["state"][index]["momentum_buffer"]), index
