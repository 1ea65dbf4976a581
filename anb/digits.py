"""The bundled small image set: scikit-learn's 8x8 digits (1,797 images, 10 classes) upscaled
to RGB, with one fixed 80/20 split. The trainer's ``digits`` loader trains and validates on
it; the throughput stage calibrates int8 models on its train part and scores them on its
validation part (:func:`anb.collect_throughput.timing.digits.digits_images`)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from anb.extras import MissingExtra, message, require

if TYPE_CHECKING:
    import torch

Part = tuple["torch.Tensor", "torch.Tensor"]

#: Fraction of the images in the train part (the rest is the validation part).
TRAIN_FRACTION = 0.8
#: Seed of the permutation that cuts the split (fixed: the split is part of the data set).
SPLIT_SEED = 0


def digits_tensors(image_size: int) -> tuple[Part, Part]:
    """``((x_train, y_train), (x_val, y_val))``: the digits upscaled (bilinear) to
    ``image_size``, RGB uint8 NCHW tensors and int64 labels, cut by the fixed split."""
    torch = require("torch", "measure", "the bundled digits")
    F = require("torch.nn.functional", "measure", "the bundled digits")
    images, labels = digits_table()
    x = torch.from_numpy(images.astype(np.float32) * (255.0 / 16.0))[:, None]
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = x.clamp(0, 255).round().to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
    y = torch.from_numpy(labels)
    order = torch.from_numpy(np.random.default_rng(SPLIT_SEED).permutation(len(y)))
    cut = int(TRAIN_FRACTION * len(y))
    return (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])


def digits_table() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: ``(images, labels)``, (1797, 8, 8) float64 in 0-16 and int64.

    Read from the file ``sklearn.datasets.load_digits`` reads, without importing
    ``sklearn.datasets`` (over a second of CPU in every trainer process); through
    ``load_digits`` where the installed release keeps it elsewhere."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise MissingExtra(message("sklearn", "measure", "the bundled digits"))
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    if path.is_file():
        table = np.loadtxt(path, delimiter=",")
        return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)
    digits = require("sklearn.datasets", "measure", "the bundled digits").load_digits()
    return digits.images, digits.target.astype(np.int64)
