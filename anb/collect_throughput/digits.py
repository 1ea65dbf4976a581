"""The shipped small dataset: scikit-learn's 8x8 digits, upscaled to RGB images.

Used for int8 calibration and for the accuracy change of quantization (a sampled architecture
fitted to it in seconds, see :func:`fit_digits`). Deterministic stratified 75/25 split.
"""
from __future__ import annotations

import numpy as np


def digits_images(resolution: int = 32, split: str = "test", seed: int = 0,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: NCHW float32 images in [-1, 1] (bilinear upscale, grey to RGB), int64 labels."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if split not in ("train", "test", "all"):
        raise ValueError(f"split={split!r} is invalid; allowed: ['train', 'test', 'all']")
    data = load_digits()
    x = data.images.astype(np.float32) / 16.0
    y = data.target.astype(np.int64)
    if split != "all":
        train, test = train_test_split(np.arange(len(y)), test_size=0.25, random_state=seed,
                                       stratify=y)
        idx = train if split == "train" else test
        x, y = x[idx], y[idx]
    t = torch.from_numpy(x)[:, None]
    t = torch.nn.functional.interpolate(t, size=(resolution, resolution), mode="bilinear",
                                        align_corners=False)
    t = (t.repeat(1, 3, 1, 1) - 0.5) / 0.5
    return t.numpy().astype(np.float32), y


def fit_digits(arch, resolution: int = 32, seed: int = 0, batch: int = 128):
    """A 10-class network of ``arch`` that classifies digits, fitted in seconds (no backprop).

    The randomly initialised network (seeded) gets its BatchNorm statistics re-estimated on the
    train split, and its classifier is a multinomial logistic regression fitted on the pooled
    features (standardisation folded into the linear layer). Every layer is used, so int8
    quantization of the whole network shows up as a change of its test accuracy.
    """
    import torch
    from sklearn.linear_model import LogisticRegression

    from anb.searchspace.model import build_model

    torch.manual_seed(seed)
    x, y = digits_images(resolution, "train", seed)
    model = build_model(arch, num_classes=10, dropout=0.0, drop_path=0.0)
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
