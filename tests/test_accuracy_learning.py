"""Training learns: on the bundled digits the loss drops and validation accuracy ends far above
chance (10 classes: 10 %), with the proxy recipe and with the full recipe (warm-up + cosine,
RMSprop, EMA of weights). Without the optimiser step both stay at chance."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from anb.collect_accuracy.train import main

from tests.test_train_torchrun import REPO

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


def test_proxy_recipe_learns(tmp_path, capsys):
    record, losses = train(PROXY, tmp_path, capsys, *SMALL_DATA, "--max_steps", "0",
                           "--epochs", "2", "--eval_epochs", "1", "--lr", "0.01",
                           "--lr_batch", "32")
    assert len(losses) == 2 and losses[1] < 0.8 * losses[0], losses
    assert record["metrics"]["val_top1"] >= 30.0, record["metrics"]  # chance: 10 %


def test_full_recipe_learns_and_is_the_configured_one(tmp_path, capsys):
    record, losses = train(FULL, tmp_path, capsys)
    config = record["provenance"]["config"]
    assert config["optimizer"]["name"] == "rmsprop" and config["optimizer"]["schedule"] == "cosine"
    assert config["trainval"]["ema_decay"] == 0.9
    assert len(losses) == 2 and losses[1] < 0.8 * losses[0], losses
    assert record["metrics"]["val_top1"] >= 30.0, record["metrics"]
