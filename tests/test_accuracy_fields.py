"""The released accuracy fields and the full recipe's parts, each checked where it can break:
``val_top5`` is the best top-5 over the evaluated epochs (not that of the best top-1 epoch),
``train_time`` includes validation (``train_steps_time`` is the steps alone), the ``step``
schedule decays at its configured epochs after the warm-up, validation evaluates the EMA
weights when EMA is on, and wandb system stats are on by default and reach ``wandb.init``."""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
import torch

from anb.collect_accuracy import checkpoint, recipe
from anb.collect_accuracy.config import load_config
from anb.collect_accuracy.data import make_loaders
from anb.collect_accuracy.distributed import DistInfo
from anb.collect_accuracy.train import Trainer, main
from anb.searchspace import Arch, get_space
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import CONFIG, REPO

pytestmark = pytest.mark.timeout(300)
SMALL = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
FULL = REPO / "configs" / "accuracy" / "digits_full_tiny.ini"
TINY = ["--progress", "false", "--archs", SMALL, "--image_size", "32", "--min_res", "32",
        "--max_res", "32", "--val_res", "32", "--max_steps", "3", "--max_val_steps", "1"]
# epoch 1 has the best top-1, epoch 2 the best top-5: the two choices disagree
HISTORY = [{"epoch": 0, "val_loss": 1.5, "val_top1": 50.0, "val_top5": 70.0},
           {"epoch": 1, "val_loss": 1.2, "val_top1": 60.0, "val_top5": 80.0},
           {"epoch": 2, "val_loss": 1.3, "val_top1": 55.0, "val_top5": 90.0}]


def _record(folder: Path) -> dict:
    (path,) = (folder / "records").glob("*.json")
    return json.loads(path.read_text())


def test_record_takes_the_best_top5_over_epochs_not_that_of_the_best_top1_epoch(tmp_path):
    config = load_config(CONFIG, ["--folder", str(tmp_path)])
    device = torch.device("cpu")
    trainer = Trainer(config, DistInfo(0, 1, 0, device, "test"),
                      make_loaders(config, 0, 1, device), get_space("anb-mnasnet"))
    arch = Arch.from_string(SMALL, ANB_SPACE)
    record = trainer._record(arch, copy.deepcopy(HISTORY), 12.3456, 7.891, 20.0, ["job"],
                             {"arch_id": arch.id})
    metrics, prov = record["metrics"], record["provenance"]
    assert metrics["val_top1"] == 60.0 and prov["best_epoch"] == 1
    assert metrics["val_top5"] == 90.0  # epoch 2's; the best top-1 epoch's would be 80
    assert "val_loss" not in metrics and "epoch" not in metrics
    assert metrics["train_time"] == 12.346  # with validation
    assert prov["train_steps_time"] == 7.891  # the steps alone
    assert prov["session_time"] == 20.0 and prov["val_history"] == HISTORY


@pytest.mark.slow
def test_training_records_best_top5_and_train_time_with_validation(tmp_path, monkeypatch):
    """The whole loop, with validation scripted to disagree on the best epoch and to take a
    known time: that time is in ``train_time`` and not in ``train_steps_time``."""
    pause, calls = 0.3, []

    def scripted(self, net, loss_fn):
        time.sleep(pause)
        calls.append(1)
        return {k: v for k, v in HISTORY[len(calls) - 1].items() if k != "epoch"}

    monkeypatch.setattr(Trainer, "evaluate", scripted)
    assert main(["--config", str(CONFIG), "--folder", str(tmp_path), *TINY,
                 "--epochs", "3", "--eval_epochs", "3"]) == 0
    record = _record(tmp_path)
    metrics, prov = record["metrics"], record["provenance"]
    assert len(calls) == 3 and prov["val_history"] == HISTORY
    assert metrics["val_top1"] == 60.0 and prov["best_epoch"] == 1
    assert metrics["val_top5"] == 90.0
    steps = prov["train_steps_time"]
    assert steps > 0
    assert metrics["train_time"] - steps >= 3 * pause - 0.01, (metrics["train_time"], steps)


def test_step_schedule_decays_at_the_configured_epochs_after_warmup():
    """``step``: linear warm-up from ``lr_start x peak`` over ``warmup_epochs``, then the peak
    times ``step_gamma`` per whole ``step_epochs`` since the warm-up ended (a staircase, not a
    smooth decay), never below ``min_lr``."""
    config = load_config(FULL, ["--schedule", "step", "--epochs", "350", "--warmup_epochs", "3",
                                "--lr_start", "0.1", "--min_lr", "0.01"])
    opt = config["optimizer"]
    assert (opt["schedule"], opt["step_epochs"], opt["step_gamma"]) == ("step", 2.4, 0.97)
    peak, steps, epochs = 0.5, 10, 350

    def lr(epoch: float) -> float:
        return recipe.lr_at(epoch * steps, steps, epochs, peak, opt)

    assert lr(0) == pytest.approx(0.05)
    assert lr(1.5) == pytest.approx(0.05 + 0.45 * 0.5)  # half-way through the warm-up
    assert lr(3) == pytest.approx(peak)
    for k in range(6):
        start, end = 3 + 2.4 * k, 3 + 2.4 * (k + 1)
        for epoch in (start + 0.1, (start + end) / 2, end - 0.1):
            assert lr(epoch) == pytest.approx(peak * 0.97 ** k), (k, epoch)
    # 0.5 x 0.97^144 = 0.0062 would be below min_lr
    assert lr(349) == pytest.approx(0.01)
    # the step that the trainer passes: global step over steps per epoch
    assert recipe.lr_at(3 * steps + 24, steps, epochs, peak, opt) == pytest.approx(peak * 0.97)


def test_validation_evaluates_the_ema_weights(tmp_path, monkeypatch):
    """With EMA on, each evaluated network holds the EMA weights (saved as the checkpoint's
    ``ema``), which differ from the raw network's, and the recorded metrics are those of the
    EMA weights."""
    original_eval, original_save = Trainer.evaluate, checkpoint.save
    evaluated, saved = [], []

    def clone(state: dict) -> dict:
        return {k: v.detach().clone() for k, v in state.items()}

    def spy_eval(self, net, loss_fn):
        evaluated.append((self, net, loss_fn, clone(net.state_dict())))
        return original_eval(self, net, loss_fn)

    def spy_save(path, state):
        saved.append({"model": clone(state["model"]), "ema": clone(state["ema"])})
        return original_save(path, state)

    monkeypatch.setattr(Trainer, "evaluate", spy_eval)
    monkeypatch.setattr(checkpoint, "save", spy_save)
    assert main(["--config", str(FULL), "--folder", str(tmp_path), *TINY,
                 "--epochs", "2", "--eval_epochs", "2"]) == 0
    assert len(evaluated) == len(saved) == 2

    def same(a: dict, b: dict) -> bool:
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    for (*_, state), ckpt in zip(evaluated, saved, strict=True):
        assert not same(ckpt["ema"], ckpt["model"])  # EMA (decay 0.9) lags the raw weights
        assert same(state, ckpt["ema"])
    # the recorded numbers are the EMA weights' ones, not the raw network's
    trainer, net, loss_fn, _ = evaluated[-1]
    on_ema, on_raw = copy.deepcopy(net), copy.deepcopy(net)
    on_ema.load_state_dict(saved[-1]["ema"])
    on_raw.load_state_dict(saved[-1]["model"])
    last = _record(tmp_path)["provenance"]["val_history"][-1]
    assert last["val_loss"] == pytest.approx(trainer.evaluate(on_ema, loss_fn)["val_loss"],
                                             rel=1e-9)
    assert last["val_loss"] != pytest.approx(trainer.evaluate(on_raw, loss_fn)["val_loss"],
                                             rel=1e-6)


def test_wandb_system_stats_default_on_and_reach_wandb_init(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    from anb.collect_accuracy.wandb_log import WandbRun

    assert load_config(CONFIG)["logging"]["wandb_stats"] is True  # digits_tiny leaves it unset
    for path in sorted((REPO / "configs" / "accuracy").glob("*.ini")):
        assert load_config(path)["logging"]["wandb_stats"] is True, path.name
    seen = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: seen.append(kwargs) or object())
    for extra, disabled in (([], False), (["--wandb_stats", "false"], True)):
        config = load_config(CONFIG, ["--folder", str(tmp_path), "--wandb_mode", "offline",
                                      *extra])
        WandbRun(config, "a1", "f" * 16, {"arch": SMALL}, active=True)
        settings = seen[-1]["settings"]
        assert isinstance(settings, wandb.Settings)  # the installed wandb accepts the keys
        assert settings.x_disable_stats is disabled
        assert seen[-1]["mode"] == "offline"


def test_a_job_starts_its_own_wandb_service_not_an_inherited_one(monkeypatch):
    """wandb passes its service to child processes in ``WANDB_SERVICE`` (the owner's pid
    second); a job drops another process's token and keeps its own."""
    import os

    from anb.collect_accuracy.wandb_log import own_service

    inherited = f"3-{os.getppid()}-unix-/tmp/wandb-service-{os.getppid()}.sock"
    monkeypatch.setenv("WANDB_SERVICE", inherited)
    own_service()
    assert "WANDB_SERVICE" not in os.environ
    mine = f"3-{os.getpid()}-tcp-localhost-40123"
    monkeypatch.setenv("WANDB_SERVICE", mine)
    own_service()
    assert os.environ["WANDB_SERVICE"] == mine
