"""Training learns: on the bundled digits the loss drops and validation accuracy ends far above
chance (10 classes: 10 %), with the proxy recipe and with the full recipe (warm-up + cosine,
RMSprop, EMA of weights). Without the optimiser step both stay at chance."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from anb.collect_accuracy.train import main
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import REPO

pytestmark = pytest.mark.timeout(300)
SMALL = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
PROXY = REPO / "configs" / "accuracy" / "digits_tiny.ini"
FULL = REPO / "configs" / "accuracy" / "digits_full_tiny.ini"
SMALL_DATA = ["--image_size", "32", "--min_res", "32", "--max_res", "32", "--val_res", "32"]


def train(config: Path, folder: Path, capsys, *extra: str) -> tuple[dict, list[float]]:
    """The record of SMALL and the per-epoch mean training losses."""
    assert main(["--config", str(config), "--folder", str(folder), "--archs", SMALL,
                 "--progress", "false", *extra]) == 0
    out = capsys.readouterr().out
    losses = [float(v) for v in re.findall(r"epoch \d+/\d+ train_loss=(\S+)", out)]
    (path,) = (folder / "records").glob("*.json")
    return json.loads(path.read_text()), losses


@pytest.mark.slow
def test_proxy_recipe_learns(tmp_path, capsys):
    record, losses = train(PROXY, tmp_path, capsys, *SMALL_DATA, "--max_steps", "0",
                           "--epochs", "2", "--eval_epochs", "1", "--lr", "0.01",
                           "--lr_batch", "32")
    assert len(losses) == 2 and losses[1] < 0.8 * losses[0], losses
    assert record["metrics"]["val_top1"] >= 30.0, record["metrics"]  # chance: 10 %


def test_too_short_runs_are_flagged():
    """After 8 steps (the old smoke recipe: 2 epochs x max_steps 4) each BatchNorm's running
    statistics were still 43 % their initial 0 / 1: eval-mode BatchNorm mis-scaled every layer
    and validation losses reached 4e11. The trainer says so rather than print such numbers
    unexplained; a full digits epoch (44 steps of 32) leaves under 1 %."""
    from anb.collect_accuracy.recipe import bn_stats_note

    note = bn_stats_note(8)
    assert note is not None and note.startswith("only 8 training steps") and "43%" in note
    assert bn_stats_note(44) is None


@pytest.mark.slow
def test_full_recipe_learns_and_is_the_configured_one(tmp_path, capsys):
    record, losses = train(FULL, tmp_path, capsys)
    config = record["provenance"]["config"]
    assert config["optimizer"]["name"] == "rmsprop" and config["optimizer"]["schedule"] == "cosine"
    assert config["trainval"]["ema_decay"] == 0.9
    assert len(losses) == 2 and losses[1] < 0.8 * losses[0], losses
    assert record["metrics"]["val_top1"] >= 30.0, record["metrics"]


def test_full_recipe_config_holds_the_exact_settings():
    """The reference's "exact" recipe: 450 epochs, batch 192 per GPU, lr 0.068, weight decay
    1e-5, 5 warm-up epochs, min lr 1e-5; RMSprop, EMA, RandAugment."""
    from anb.collect_accuracy import recipe
    from anb.collect_accuracy.config import load_config

    config = load_config(REPO / "configs" / "accuracy" / "imagenet_full.ini")
    tv, opt = config["trainval"], config["optimizer"]
    assert (tv["epochs"], tv["batch_size"], opt["lr"], opt["weight_decay"]) == (450, 192, 0.068,
                                                                                 1e-5)
    assert (opt["warmup_epochs"], opt["min_lr"], opt["name"], opt["schedule"]) == (
        5, 1e-5, "rmsprop", "cosine")
    assert tv["ema_decay"] > 0 and tv["randaugment_ops"] > 0
    peak = recipe.peak_lr(config, 4)
    assert peak == pytest.approx(0.068)
    steps = 100
    assert recipe.lr_at(5 * steps, steps, 450, peak, opt) == pytest.approx(0.068)
    assert recipe.lr_at(2.5 * steps, steps, 450, peak, opt) == pytest.approx(
        0.068 * (1e-4 + (1 - 1e-4) * 0.5))
    assert recipe.lr_at(450 * steps, steps, 450, peak, opt) == pytest.approx(1e-5)
    mid = recipe.lr_at((5 + 445 / 2) * steps, steps, 450, peak, opt)
    assert mid == pytest.approx(1e-5 + 0.5 * (0.068 - 1e-5))


@pytest.mark.slow
def test_full_recipe_trains_a_pareto_csv_and_resumes(tmp_path, capsys, monkeypatch):
    import pandas as pd

    from anb.collect_accuracy.train import Trainer
    from anb.searchspace import Arch, Sampler

    archs = [str(a) for a in Sampler(4, space=ANB_SPACE).sample(2)]
    pareto = tmp_path / "pareto.csv"
    pd.DataFrame({"arch": archs, "val_top1": [60.0, 61.0], "macs": [300, 400]}).to_csv(
        pareto, index=False)
    args = ["--config", str(FULL), "--folder", str(tmp_path / "out"), "--archs", str(pareto),
            "--progress", "false", "--max_steps", "2", "--max_val_steps", "1"]
    original, calls = Trainer._train_epoch, []

    def interrupted(self, *a, **k):
        if calls:
            raise KeyboardInterrupt("stand-in for a preemption after epoch 1")
        calls.append(1)
        return original(self, *a, **k)

    monkeypatch.setattr(Trainer, "_train_epoch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(args)
    monkeypatch.undo()
    import torch

    (ckpt,) = (tmp_path / "out" / "checkpoints").glob("*.pt")
    assert "ema" in torch.load(ckpt, weights_only=True)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{Arch.from_string(archs[0], ANB_SPACE).id} resuming from epoch 1" in out
    assert "note: only 4 training steps in all: BatchNorm running statistics" in out
    found = sorted(p.stem for p in (tmp_path / "out" / "records").glob("*.json"))
    assert found == sorted(Arch.from_string(a, ANB_SPACE).id for a in archs)
    bad = tmp_path / "bad.csv"
    bad.write_text("name\nx\n")
    assert main([*args, "--archs", str(bad)]) == 2
    assert "'model.archs'" in capsys.readouterr().err


def test_randaugment_runs_through_torchvision_or_names_what_is_missing(tmp_path, capsys):
    """RandAugment is torchvision's; where no torchvision matching torch is installed (this CI's
    CPU torch has none on its index), the run stops before training with a clear message."""
    try:
        from torchvision.transforms import v2  # noqa: F401
        available = True
    except (ImportError, RuntimeError):
        available = False
    code = main(["--config", str(FULL), "--folder", str(tmp_path), "--archs", SMALL,
                 "--progress", "false", "--max_steps", "2", "--max_val_steps", "1",
                 "--epochs", "1", "--eval_epochs", "1", "--warmup_epochs", "0.5",
                 "--randaugment_ops", "2"])
    if available:
        assert code == 0 and list((tmp_path / "records").glob("*.json"))
    else:
        assert code == 2
        err = capsys.readouterr().err
        assert "'trainval.randaugment_ops': value 2 needs torchvision" in err
        assert not (tmp_path / "records").exists()
