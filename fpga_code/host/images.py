"""Calibration and evaluation images for the Vitis AI host steps (Python 3.7, numpy, PIL).

Samples across every class of an ImageNet-style folder (class sub-folders, sorted names =
labels) with a seed: each class shuffled, then one image per class in turn (classes in a
shuffled order). The same algorithm as
:func:`anb.collect_throughput.timing.inputs.stratified_sample` (checked equal by
``tests/test_fpga_host.py``). Preprocessing: the trainer's validation transform, a copy of
:mod:`anb.preprocessing` (constants and pixels checked equal by the same test): the centred
square of ``VAL_CROP_RATIO`` x the short side resized to the resolution (the short side at
``resolution / 0.875``, 256 for 224), ImageNet mean/std.
"""
from __future__ import annotations

import os

import numpy as np

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
VAL_CROP_RATIO = 0.875
MEAN_255 = np.array([m * 255 for m in IMAGENET_MEAN], dtype=np.float32)
STD_255 = np.array([s * 255 for s in IMAGENET_STD], dtype=np.float32)
SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


def labelled_files(folder):
    """Image paths per class (sorted class folder names; sorted files, recursive)."""
    classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    per_class = []
    for c in classes:
        found = []
        for root, _, files in os.walk(os.path.join(folder, c)):
            found += [os.path.join(root, f) for f in files if f.lower().endswith(SUFFIXES)]
        per_class.append(sorted(found))
    if not any(per_class):
        raise ValueError("no images in class sub-folders of {}".format(folder))
    return per_class


def stratified_sample(per_class, n, seed, exclude=frozenset()):
    rng = np.random.default_rng(seed)
    pools = []
    for label, files in enumerate(per_class):
        files = [f for f in files if f not in exclude]
        pools.append([(files[i], label) for i in rng.permutation(len(files))])
    order = rng.permutation(len(pools))
    picked, depth = [], 0
    while len(picked) < n and any(len(p) > depth for p in pools):
        picked += [pools[c][depth] for c in order if len(pools[c]) > depth][:n - len(picked)]
        depth += 1
    return picked


def calibration_and_eval(folder, calibration, evaluation, seed=0):
    """Disjoint class-stratified ``(file, label)`` samples: (calibration, evaluation)."""
    per_class = labelled_files(folder)
    evaluated = stratified_sample(per_class, evaluation, seed)
    calib = stratified_sample(per_class, calibration, seed + 1,
                              frozenset(f for f, _ in evaluated))
    return calib, evaluated


def preprocess(path, resolution=224):
    """One image through the trainer's validation transform; CHW float32."""
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("RGB")
        w, h = image.size
        side = min(w, h) * VAL_CROP_RATIO
        box = ((w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2)
        image = image.resize((resolution, resolution), Image.BILINEAR, box=box)
        array = np.array(image, dtype=np.uint8).astype(np.float32)
    return ((array - MEAN_255) / STD_255).transpose(2, 0, 1)


def batch_tensor(items, resolution=224):
    import torch

    return torch.from_numpy(np.stack([preprocess(f, resolution) for f, _ in items]))
