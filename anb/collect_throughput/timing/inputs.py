"""Model inputs: synthetic on-device tensors (default) or ImageNet-val images.

Synthetic inputs have the shape the protocol's search space takes
(:func:`~anb.collect_throughput.timing.network.input_shape`); images need a space of RGB images.

Both are produced before timing starts, so data loading is never inside the clock. The
ImageNet option feeds images at exactly ``resolution`` px (the reference's GPU pass: 256):
resize the short side to ``resolution``, centre crop ``resolution`` x ``resolution``,
ImageNet mean/std normalisation; ``max_batches`` batches are preloaded and cycled.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.timing.network import input_shape, measured_resolution, require_images
from anb.collect_throughput.timing.protocol import Protocol
from anb.preprocessing import IMAGENET_MEAN, IMAGENET_STD

MEAN = np.array(IMAGENET_MEAN, dtype=np.float32)
STD = np.array(IMAGENET_STD, dtype=np.float32)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


def synthetic_input(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A fixed standard-normal float32 array of ``shape``."""
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def synthetic_batch(batch: int, resolution: int, seed: int = 0) -> np.ndarray:
    """A fixed standard-normal NCHW float32 batch of RGB images."""
    return synthetic_input((batch, 3, resolution, resolution), seed)


def preprocess_image(path: Path, resolution: int) -> np.ndarray:
    """Resize short side to ``resolution``, centre crop ``resolution``, normalise; CHW float32."""
    from PIL import Image

    with Image.open(path) as source:
        image = source.convert("RGB")
        short = resolution
        w, h = image.size
        scale = short / min(w, h)
        image = image.resize((max(short, round(w * scale)), max(short, round(h * scale))),
                             Image.Resampling.BILINEAR)
        w, h = image.size
        left, top = (w - resolution) // 2, (h - resolution) // 2
        image = image.crop((left, top, left + resolution, top + resolution))
        array = np.asarray(image, dtype=np.float32) / 255.0
    return ((array - MEAN) / STD).transpose(2, 0, 1)


def image_batches(folder: str | Path, batch: int, resolution: int, max_batches: int = 8,
                  ) -> list[np.ndarray]:
    """Up to ``max_batches`` full batches of preprocessed images from ``folder`` (recursive)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"imagenet_dir={str(folder)!r} is not a folder of images")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if len(files) < batch:
        raise ValueError(f"imagenet_dir={str(folder)!r} holds {len(files)} images; "
                         f"need at least batch={batch}")
    batches = []
    for start in range(0, min(len(files), batch * max_batches) - batch + 1, batch):
        batches.append(np.stack([preprocess_image(p, resolution)
                                 for p in files[start:start + batch]]))
    return batches


def make_inputs(protocol: Protocol, arch: Any, seed: int = 0) -> list[np.ndarray]:
    """The batches a measurement of ``arch`` cycles through (float32, the shape its space's
    network takes at the measured resolution)."""
    if protocol.inputs == "imagenet":
        require_images(protocol, "inputs='imagenet'")
        if not protocol.imagenet_dir:
            raise ValueError(f"device {protocol.device!r}: inputs='imagenet' needs imagenet_dir")
        return image_batches(protocol.imagenet_dir, protocol.batch,
                             measured_resolution(protocol, arch))
    return [synthetic_input(input_shape(protocol, arch), seed)]


def labelled_files(folder: str | Path) -> list[list[Path]]:
    """Image files per class of an ImageNet-style folder (class sub-folders, sorted names:
    index = label, as the trainer orders them)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"images={str(folder)!r} is not a folder of class sub-folders")
    classes = sorted(d for d in folder.iterdir() if d.is_dir())
    files = [sorted(f for f in c.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES)
             for c in classes]
    if not any(files):
        raise ValueError(f"images={str(folder)!r} holds no images in class sub-folders")
    return files


def stratified_sample(per_class: list[list[Path]], n: int, seed: int,
                      exclude: frozenset = frozenset()) -> list[tuple[Path, int]]:
    """``n`` ``(file, label)`` pairs spread over all classes: each class shuffled with
    ``seed``, then one image per class in turn (classes in a shuffled order), until ``n``."""
    rng = np.random.default_rng(seed)
    pools = []
    for label, files in enumerate(per_class):
        files = [f for f in files if f not in exclude]
        pools.append([(files[i], label) for i in rng.permutation(len(files))])
    order = rng.permutation(len(pools))
    picked: list[tuple[Path, int]] = []
    depth = 0
    while len(picked) < n and any(len(p) > depth for p in pools):
        picked += [pools[c][depth] for c in order if len(pools[c]) > depth][: n - len(picked)]
        depth += 1
    return picked


def calibration_and_eval(folder: str | Path, calibration: int, evaluation: int, seed: int = 0,
                         ) -> tuple[list[tuple[Path, int]], list[tuple[Path, int]]]:
    """Disjoint class-stratified calibration and evaluation samples of ``folder``."""
    per_class = labelled_files(folder)
    evaluated = stratified_sample(per_class, evaluation, seed)
    calib = stratified_sample(per_class, calibration, seed + 1,
                              frozenset(f for f, _ in evaluated))
    return calib, evaluated
