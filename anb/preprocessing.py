"""Image preprocessing shared by the stages: the ImageNet statistics, the validation crop
ratio and the validation transform (the trainer's, which trained weights are scored with).

``fpga_code/host/images.py`` runs on the boards' Python 3.7 without anb and keeps its own copy
of these constants and of :func:`val_image`; ``tests/test_fpga_host.py`` checks them equal.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from anb.extras import require

#: ImageNet's per-channel (RGB) mean and std of pixel values scaled to [0, 1].
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: The same statistics for pixel values in [0, 255].
IMAGENET_MEAN_255 = tuple(m * 255 for m in IMAGENET_MEAN)
IMAGENET_STD_255 = tuple(s * 255 for s in IMAGENET_STD)
#: Validation centre-crop ratio: the crop is this fraction of the short side (224 of 256).
VAL_CROP_RATIO = 0.875
#: The most images a command scores or calibrates on: ImageNet's validation set, the
#: largest labelled set the stages read (a larger count only repeats images or starts
#: hours of work).
MAX_IMAGES = 50_000


def val_crop_box(width: int, height: int, crop_ratio: float = VAL_CROP_RATIO,
                 ) -> tuple[float, float, float, float]:
    """The validation crop of a ``width`` x ``height`` image: the centred square of
    ``crop_ratio`` x the short side (resized to the resolution, the short side lands at
    ``resolution / crop_ratio``)."""
    side = min(width, height) * crop_ratio
    return ((width - side) / 2, (height - side) / 2, (width + side) / 2, (height + side) / 2)


def val_image(path: str | Path, resolution: int, crop_ratio: float = VAL_CROP_RATIO,
              ) -> np.ndarray:
    """One image through the validation transform: RGB, :func:`val_crop_box` resized to
    ``resolution`` (bilinear); uint8 HWC."""
    Image = require("PIL.Image", "measure", "reading an image")

    with Image.open(path) as source:
        image = source.convert("RGB")
        box = val_crop_box(image.width, image.height, crop_ratio)
        image = image.resize((resolution, resolution), Image.Resampling.BILINEAR, box=box)
        return np.array(image, dtype=np.uint8)


def normalise(pixels: np.ndarray) -> np.ndarray:
    """Channels-last RGB pixels in [0, 255] -> float32 normalised with the ImageNet
    statistics (the trainer's arithmetic: ``(x - mean_255) / std_255`` in float32)."""
    mean = np.asarray(IMAGENET_MEAN_255, dtype=np.float32)
    std = np.asarray(IMAGENET_STD_255, dtype=np.float32)
    return (pixels.astype(np.float32) - mean) / std
