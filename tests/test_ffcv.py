"""FFCV for real: write an image folder to .beton (max side, JPEG quality), load it through the
trainer's loader (random-resized-crop at the epoch's resolution, flips, centre-crop val) and
train an architecture from it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_accuracy.config import load_config
from anb.collect_accuracy.data import make_loaders
from anb.collect_accuracy.imagefolder import scan, write_digits_folder
from anb.collect_accuracy.train import main

from tests.test_train_torchrun import CONFIG

pytest.importorskip("ffcv", reason="FFCV is installed by scripts/ci/accuracy.sh")
MAX_SIDE = 44


@pytest.fixture(scope="module")
def betons(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("ffcv")
    train_dir, val_dir = write_digits_folder(root / "images", sizes=(40, 56))
    runner = CliRunner()
    for folder, name in ((train_dir, "train"), (val_dir, "val")):
        result = runner.invoke(app, ["write-ffcv", str(folder), str(root / f"{name}.beton"),
                                     "--max-side", str(MAX_SIDE), "--quality", "90",
                                     "--workers", "2"])
        assert result.exit_code == 0, result.output
    return root / "train.beton", root / "val.beton", train_dir


def test_writer_stores_every_image_resized_with_its_label(betons):
    from ffcv.reader import Reader

    train, _, train_dir = betons
    paths, labels, _ = scan(train_dir)
    reader = Reader(str(train))
    assert reader.num_samples == len(paths)
    meta = reader.metadata
    image, label = (meta[f"f{reader.field_names.index(n)}"] for n in ("image", "label"))
    assert np.array_equal(label, np.asarray(labels))
    sides = np.maximum(image["height"], image["width"])
    assert set(sides) == {MAX_SIDE}  # 40 x 56 and 56 x 40 sources, shrunk to max side 44
    assert set(np.minimum(image["height"], image["width"])) == {round(40 * MAX_SIDE / 56)}
    assert (image["height"] > image["width"]).any() and (image["height"] < image["width"]).any()
    assert (image["mode"] == 0).all()  # 0 = JPEG


def test_loader_resolution_ramp_and_validation(betons):
    train, val, _ = betons
    config = load_config(CONFIG, ["--kind", "ffcv", "--train_path", str(train),
                                  "--val_path", str(val), "--num_workers", "1"])
    loaders = make_loaders(config, 0, 1, torch.device("cpu"))
    assert loaders.num_classes == 10 and loaders.train_steps() == 1437 // 32
    shapes = []
    for epoch, res in ((0, 32), (1, 48), (2, 48)):
        x, y = next(iter(loaders.train(epoch, res)))
        shapes.append(tuple(x.shape))
        assert x.dtype == torch.float32 and y.dtype == torch.int64 and y.max() < 10
        assert abs(float(x.mean())) < 1.5 and 0.3 < float(x.std()) < 3  # normalised
    assert shapes == [(32, 3, 32, 32), (32, 3, 48, 48), (32, 3, 48, 48)]
    x, y = next(iter(loaders.val()))
    assert tuple(x.shape) == (128, 3, 48, 48)


def test_train_from_ffcv_files(betons, tmp_path):
    train, val, _ = betons
    out = tmp_path / "out"
    code = main(["--config", str(CONFIG), "--folder", str(out), "--kind", "ffcv",
                 "--train_path", str(train), "--val_path", str(val), "--num_workers", "1",
                 "--num_models", "1", "--progress", "false", "--max_val_steps", "1"])
    assert code == 0
    (record,) = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    assert record["provenance"]["dataset"]["kind"] == "ffcv"
    assert record["provenance"]["versions"]["ffcv"]
    assert 0 <= record["metrics"]["val_top1"] <= 100


def test_write_ffcv_errors(tmp_path):
    result = CliRunner().invoke(app, ["write-ffcv", str(tmp_path / "none"),
                                      str(tmp_path / "x.beton")])
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not (tmp_path / "x.beton").exists()
