"""FFCV for real: write an image folder to .beton (max side, JPEG quality), load it through the
trainer's loader (random-resized-crop at the epoch's resolution, flips, centre-crop val) and
train an architecture from it."""
from __future__ import annotations

import json
import re
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
from anb.searchspace import get_space
from tests.cli_helpers import range_refused
from tests.trainer_helpers import CONFIG

pytest.importorskip("ffcv", reason="FFCV is installed by scripts/ci/accuracy.sh")
pytestmark = pytest.mark.timeout(300)
MAX_SIDE = 44
SMALL = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
# odd: 2 ranks cannot split it evenly, so FFCV's distributed sampler would pad it to 360
VAL_IMAGES = 359


@pytest.fixture(scope="module")
def betons(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("ffcv")
    train_dir, val_dir = write_digits_folder(root / "images", sizes=(40, 56))
    images = sorted(val_dir.glob("*/*.jpg"))
    images[-1].unlink()  # 360 -> VAL_IMAGES
    assert len(scan(val_dir)[0]) == VAL_IMAGES
    runner = CliRunner()
    for folder, name in ((train_dir, "train"), (val_dir, "val")):
        result = runner.invoke(app, ["write-ffcv", str(folder), str(root / f"{name}.beton"),
                                     "--max-side", str(MAX_SIDE), "--quality", "90",
                                     "--workers", "2"])
        assert result.exit_code == 0, result.output
    return root / "train.beton", root / "val.beton", train_dir


@pytest.mark.slow
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


@pytest.mark.slow
def test_loader_resolution_ramp_and_validation(betons):
    train, val, _ = betons
    config = load_config(CONFIG, ["--kind", "ffcv", "--train_path", str(train),
                                  "--val_path", str(val), "--num_workers", "1", "--val_res", "48"])
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


@pytest.mark.slow
def test_training_from_ffcv_files_learns(betons, tmp_path, capsys):
    """Bug class: FFCV batches that do not match their labels (a shuffled or mis-decoded field),
    or a pipeline that trains on garbage, still finish with *some* accuracy. Two full epochs of
    the digits recipe from the .beton files must learn as the image-folder run does
    (tests/test_accuracy_learning.py): the loss drops and validation top-1 ends far above
    chance (10 classes: 10 %)."""
    train, val, _ = betons
    out = tmp_path / "out"
    code = main(["--config", str(CONFIG), "--folder", str(out), "--kind", "ffcv",
                 "--train_path", str(train), "--val_path", str(val), "--num_workers", "1",
                 "--archs", SMALL, "--progress", "false", "--epochs", "2", "--eval_epochs", "1",
                 "--max_steps", "0", "--lr", "0.01", "--lr_batch", "32"])
    assert code == 0
    losses = [float(v) for v in re.findall(r"epoch \d+/\d+ train_loss=(\S+)",
                                           capsys.readouterr().out)]
    (record,) = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    assert record["provenance"]["dataset"]["kind"] == "ffcv"
    assert record["provenance"]["versions"]["ffcv"]
    assert len(losses) == 2 and losses[1] < 0.8 * losses[0], losses
    assert record["metrics"]["val_top1"] >= 30.0, record["metrics"]


def test_write_ffcv_errors(tmp_path):
    result = CliRunner().invoke(app, ["write-ffcv", str(tmp_path / "none"),
                                      str(tmp_path / "x.beton")])
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not (tmp_path / "x.beton").exists()


@pytest.mark.slow
def test_writer_mixes_raw_and_jpeg_with_compress_probability(betons, tmp_path):
    """The reference's ``train_400_0.50_90``: each image JPEG with probability 0.5, else raw."""
    from ffcv.reader import Reader

    _, _, train_dir = betons
    out = tmp_path / "mixed.beton"
    result = CliRunner().invoke(app, ["write-ffcv", str(train_dir), str(out), "--max-side",
                                      str(MAX_SIDE), "--compress-probability", "0.5",
                                      "--workers", "2"])
    assert result.exit_code == 0, result.output
    modes = Reader(str(out)).metadata["f0"]["mode"]  # 0: JPEG, 1: raw
    share = float((modes == 0).mean())
    assert len(modes) == 1437 and 0.4 < share < 0.6, share
    assert set(Reader(str(betons[0])).metadata["f0"]["mode"].tolist()) == {0}
    bad = CliRunner().invoke(app, ["write-ffcv", str(train_dir), str(tmp_path / "x.beton"),
                                   "--compress-probability", "1.5"])
    assert bad.exit_code == 2 and range_refused(bad.output, "--compress-probability", "<=", "1")


class _Constant(torch.nn.Module):
    """Predicts class 0 for every image."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.arange(10, 0, -1, dtype=torch.float32).expand(len(x), -1)


def _distributed_loaders(rank: int, port: int, train: str, val: str, queue) -> None:
    import os

    import torch.distributed as dist

    from anb.collect_accuracy.distributed import DistInfo
    from anb.collect_accuracy.train import Trainer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        # in_memory false: QUASI_RANDOM, which ffcv 1.0.2 refuses in distributed mode
        config = load_config(CONFIG, ["--kind", "ffcv", "--train_path", train, "--val_path",
                                      val, "--num_workers", "1", "--in_memory", "false"])
        loaders = make_loaders(config, rank, 2, torch.device("cpu"))
        x, _ = next(iter(loaders.train(0, 32)))
        labels = [int(v) for _, y in loaders.val() for v in y]
        # the trainer's all-reduced validation over the same loader
        trainer = Trainer(config, DistInfo(rank, 2, rank, torch.device("cpu"), "test"), loaders,
                          get_space("anb-mnasnet"))
        val_top1 = trainer.evaluate(_Constant(), torch.nn.CrossEntropyLoss())["val_top1"]
        queue.put((rank, loaders.train_loader.traversal_order.__class__.__name__,
                   tuple(x.shape), labels, val_top1))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_distributed_loaders_shuffle_randomly_and_count_each_val_image_once(betons):
    import socket

    from ffcv.reader import Reader

    train, val, train_dir = betons
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    from anb.collect_accuracy.ffcv_io import ffcv_context, train_order

    ctx = ffcv_context()  # ranks forked from a server that imported FFCV once (not spawned)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_distributed_loaders, args=(r, port, str(train), str(val), queue))
             for r in range(2)]
    for proc in procs:
        proc.start()
    results = dict((r, rest) for r, *rest in (queue.get(timeout=200) for _ in range(2)))
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    from ffcv.loader import OrderOption

    assert train_order(True, False) == OrderOption.RANDOM
    assert train_order(False, False) == OrderOption.QUASI_RANDOM
    for rank in range(2):
        order, shape, *_ = results[rank]
        assert order == "Random" and shape == (32, 3, 32, 32)
    # every validation image counted exactly once: FFCV's distributed sampler would pad the
    # odd count to 360 (one image twice)
    assert Reader(str(val)).num_samples == VAL_IMAGES
    labels = results[0][2] + results[1][2]
    assert len(labels) == VAL_IMAGES
    assert sorted(labels) == sorted(scan(train_dir.parent / "val")[1])
    assert sorted(len(results[r][2]) for r in range(2)) == [VAL_IMAGES // 2, VAL_IMAGES // 2 + 1]
    # the trainer's numbers are over the same VAL_IMAGES: top-1 of always-class-0
    expected = round(100.0 * labels.count(0) / VAL_IMAGES, 3)
    assert results[0][3] == results[1][3] == expected


@pytest.mark.slow
def test_loader_follows_crop_scale_and_hflip(tmp_path):
    """The same meaning as the in-memory and folder loaders (tests/test_accuracy_augment.py):
    whole-image crops, no flips (the defaults' pipeline is the one the tests above run)."""
    from anb.collect_accuracy.ffcv_io import write_beton
    from tests.augment_helpers import SETTINGS, check, config, write_folder

    root = write_folder(tmp_path / "images")
    for split in ("train", "val"):
        write_beton(root / split, tmp_path / f"{split}.beton", workers=1)
    setting = "whole, no flip"
    loaders = make_loaders(config(*SETTINGS[setting], "--train_path",
                                  str(tmp_path / "train.beton"), "--val_path",
                                  str(tmp_path / "val.beton"), kind="ffcv"),
                           0, 1, torch.device("cpu"))
    check(loaders.train(0, 16), setting)
