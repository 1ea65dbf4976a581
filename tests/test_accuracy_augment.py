"""``trainval.crop_scale`` (smallest random-resized-crop, as a fraction of the area) and
``trainval.hflip`` mean the same in every image loader: on images black on the left and white
on the right, whole-image crops without flips keep every image two-toned, dark on the left;
the reference's defaults (0.08, flip) give some (nearly) one-toned crops and some mirrored
images."""
from __future__ import annotations

import pytest
import torch

from anb.collect_accuracy.data import TensorImageLoaders, make_loaders
from tests.augment_helpers import COUNT, RES, SETTINGS, check, config, half_images, write_folder


def tensor_loaders(*extra: str) -> TensorImageLoaders:
    x, y = half_images(COUNT), torch.zeros(COUNT, dtype=torch.long)
    return TensorImageLoaders((x, y), (x, y), 2, config(*extra), 0, 1, torch.device("cpu"))


@pytest.mark.parametrize("setting", SETTINGS)
def test_tensor_loader_follows_crop_scale_and_hflip(setting):
    check(tensor_loaders(*SETTINGS[setting]).train(0, RES), setting)


@pytest.mark.parametrize("setting", SETTINGS)
def test_folder_loader_follows_crop_scale_and_hflip(setting, tmp_path):
    loaders = make_loaders(config(*SETTINGS[setting], kind="folder",
                                  folder=write_folder(tmp_path)), 0, 1, torch.device("cpu"))
    check(loaders.train(0, RES), setting)
