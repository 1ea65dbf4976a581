"""``trainval.crop_scale`` (smallest random-resized-crop, as a fraction of the area) and
``trainval.hflip`` mean the same in every image loader: on images black on the left and white
on the right, whole-image crops without flips keep every image two-toned, dark on the left;
the reference's defaults (0.08, flip) give some (nearly) one-toned crops and some mirrored
images."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from anb.collect_accuracy.config import load_config
from anb.collect_accuracy.data import TensorImageLoaders, make_loaders

from tests.test_train_torchrun import CONFIG

RES, COUNT = 16, 64
SETTINGS = {"reference": ["--crop_scale", "0.08", "--hflip", "true"],
            "whole, no flip": ["--crop_scale", "1", "--hflip", "false"],
            "whole, flip": ["--crop_scale", "1", "--hflip", "true"]}


def half_images(count: int, side: int = 32) -> torch.Tensor:
    """``count`` RGB uint8 images, black left half, white right half."""
    x = torch.zeros(count, 3, side, side, dtype=torch.uint8)
    x[..., side // 2:] = 255
    return x


def sides(batches) -> tuple[np.ndarray, np.ndarray]:
    """Per training image: right-half minus left-half mean, and the image's spread."""
    diff, spread = [], []
    for x, _ in batches:
        diff.append((x[..., RES // 2:].mean((1, 2, 3)) - x[..., :RES // 2].mean((1, 2, 3))))
        spread.append(x.flatten(1).std(1))
    return torch.cat(diff).numpy(), torch.cat(spread).numpy()


def config(*extra: str, kind: str = "digits", folder: Path | None = None):
    paths = ([] if folder is None else ["--train_path", str(folder / "train"), "--val_path",
                                        str(folder / "val")])
    return load_config(CONFIG, ["--kind", kind, *paths, "--batch_size", "16", "--min_res",
                                str(RES), "--max_res", str(RES), "--num_workers", "0", *extra])


def tensor_loaders(*extra: str) -> TensorImageLoaders:
    x, y = half_images(COUNT), torch.zeros(COUNT, dtype=torch.long)
    return TensorImageLoaders((x, y), (x, y), 2, config(*extra), 0, 1, torch.device("cpu"))


def write_folder(root: Path) -> Path:
    image = Image.fromarray(half_images(1)[0].permute(1, 2, 0).numpy())
    for split in ("train", "val"):
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for i in range(COUNT // 2):
                image.save(root / split / label / f"{i}.png")
    return root


def check(batches, setting: str) -> None:
    diff, spread = sides(batches)
    assert len(diff) == COUNT
    if setting == "whole, no flip":
        assert (diff > 0).all() and (spread > 0.5).all(), (diff, spread)
    elif setting == "whole, flip":
        assert (diff < 0).any() and (diff > 0).any() and (spread > 0.5).all(), (diff, spread)
    else:  # crops down to 8 % of the area: some fall (nearly) inside one half
        assert (diff < 0).any() and (spread < 0.5).any(), (diff, spread)


@pytest.mark.parametrize("setting", SETTINGS)
def test_tensor_loader_follows_crop_scale_and_hflip(setting):
    check(tensor_loaders(*SETTINGS[setting]).train(0, RES), setting)


@pytest.mark.parametrize("setting", SETTINGS)
def test_folder_loader_follows_crop_scale_and_hflip(setting, tmp_path):
    loaders = make_loaders(config(*SETTINGS[setting], kind="folder",
                                  folder=write_folder(tmp_path)), 0, 1, torch.device("cpu"))
    check(loaders.train(0, RES), setting)
