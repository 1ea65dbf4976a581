"""Shared by the augmentation tests: images black on the left and white on the right, a
trainer config at a small resolution, an image folder of them, and the check of what
``crop_scale`` / ``hflip`` must do to them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from anb.collect_accuracy.config import load_config
from tests.trainer_helpers import CONFIG

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
        diff.append(x[..., RES // 2:].mean((1, 2, 3)) - x[..., :RES // 2].mean((1, 2, 3)))
        spread.append(x.flatten(1).std(1))
    return torch.cat(diff).numpy(), torch.cat(spread).numpy()


def config(*extra: str, kind: str = "digits", folder: Path | None = None):
    paths = ([] if folder is None else ["--train_path", str(folder / "train"), "--val_path",
                                        str(folder / "val")])
    return load_config(CONFIG, ["--kind", kind, *paths, "--batch_size", "16", "--min_res",
                                str(RES), "--max_res", str(RES), "--num_workers", "0", *extra])


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
