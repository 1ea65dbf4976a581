"""Calibration and evaluation images for the Vitis AI host steps (Python 3.7, numpy, PIL).

Samples across every class of an ImageNet-style folder (class sub-folders, sorted names =
labels) with a seed: each class shuffled, then one image per class in turn (classes in a
shuffled order). The same algorithm as :func:`anb.collect_throughput.inputs.stratified_sample`
(checked equal by ``tests/test_fpga_host.py``). Preprocessing: short side to ``resolution /
0.875`` (256 for 224), centre crop, ImageNet mean/std, as the trainer's validation transform.
"""
from __future__ import annotations

import os

import numpy as np

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
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
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("RGB")
        short = int(round(resolution / 0.875))
        w, h = image.size
        scale = short / min(w, h)
        image = image.resize((max(short, int(round(w * scale))), max(short, int(round(h * scale)))),
                             Image.BILINEAR)
        w, h = image.size
        left, top = (w - resolution) // 2, (h - resolution) // 2
        image = image.crop((left, top, left + resolution, top + resolution))
        array = np.asarray(image, dtype=np.float32) / 255.0
    return ((array - MEAN) / STD).transpose(2, 0, 1)


def batch_tensor(items, resolution=224):
    import torch

    return torch.from_numpy(np.stack([preprocess(f, resolution) for f, _ in items]))
