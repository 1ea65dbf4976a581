"""The bundled digits (:mod:`anb.digits`, the trainer's images and split) as model inputs.

Used for int8 calibration and for the accuracy change of quantization (a sampled architecture
fitted to it in seconds, see :func:`fit_digits`).
"""
from __future__ import annotations

import copy
import functools

import numpy as np


def digits_images(resolution: int = 32, split: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: the train or the test (the trainer's validation) part of the digits as
    NCHW float32 images in [-1, 1], int64 labels."""
    from anb.digits import digits_tensors

    parts = dict(zip(("train", "test"), digits_tensors(resolution), strict=True))
    if split not in parts:
        raise ValueError(f"split={split!r} is invalid; allowed: {list(parts)}")
    x, y = parts[split]
    return (x.numpy().astype(np.float32) / 127.5 - 1.0), y.numpy()


def fit_digits(arch, resolution: int = 32, seed: int = 0, batch: int = 128):
    """A 10-class network of ``arch`` that classifies digits, fitted in seconds (no backprop).

    The randomly initialised network (seeded) gets its BatchNorm statistics re-estimated on the
    train split, and its classifier is a multinomial logistic regression fitted on the pooled
    features (standardisation folded into the linear layer). Every layer is used, so int8
    quantization of the whole network shows up as a change of its test accuracy.

    The fit is deterministic, so a process fits each set of arguments once (reports of one
    architecture on several paths); every call gets its own copy of the network.
    """
    return copy.deepcopy(_fit_digits_once(arch, resolution, seed, batch))


@functools.lru_cache(maxsize=4)
def _fit_digits_once(arch, resolution: int, seed: int, batch: int):
    """:func:`fit_digits` itself; the cached network is never handed out."""
    import torch
    from sklearn.linear_model import LogisticRegression

    from anb.searchspace.model import build_model
    from anb.searchspace.space import ANB_SPACE

    torch.manual_seed(seed)
    x, y = digits_images(resolution, "train")
    model = build_model(arch, num_classes=10, dropout=0.0, drop_path=0.0, space=ANB_SPACE)
    xs = torch.from_numpy(x)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # cumulative average over the whole pass
    with torch.no_grad():
        model.train()
        for chunk in xs.split(batch):
            model(chunk)
        model.eval()
        features = torch.cat([model.pool(model.forward_features(c)).flatten(1)
                              for c in xs.split(batch)]).numpy()
    mean, std = features.mean(0), features.std(0) + 1e-6
    probe = LogisticRegression(C=0.5, max_iter=1000).fit((features - mean) / std, y)
    weight = probe.coef_ / std
    bias = probe.intercept_ - weight @ mean
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(weight.astype(np.float32)))
        model.classifier.bias.copy_(torch.from_numpy(bias.astype(np.float32)))
    return model


def top1(logits: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy in percent."""
    return float(100.0 * (np.argmax(logits, axis=1) == labels).mean())
