"""The proxified training recipe: optimiser, per-step triangular lr, resolution ramp, loss."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from anb.collect_accuracy.config import Config


def resolution(epoch: int, tv: dict) -> int:
    """Progressive resizing: ``min_res`` up to ``start_ramp``, ``max_res`` from ``end_ramp``,
    linear in between rounded to a multiple of ``res_step`` (160 -> 192 over epochs 11 -> 13)."""
    lo, hi, start, end = tv["min_res"], tv["max_res"], tv["start_ramp"], tv["end_ramp"]
    if epoch <= start:
        return lo
    if epoch >= end:
        return hi
    value = float(np.interp(epoch, [start, end], [lo, hi]))
    return int(np.round(value / tv["res_step"])) * tv["res_step"]


def peak_lr(config: Config, world_size: int) -> float:
    """Peak lr scaled linearly with the global batch."""
    opt = config["optimizer"]
    return opt["lr"] * config["trainval"]["batch_size"] * world_size / opt["lr_batch"]


def lr_at(step: float, steps_per_epoch: int, epochs: int, peak: float, opt: dict) -> float:
    """Triangular schedule, per step: ``lr_start * peak`` at 0 -> ``peak`` at ``lr_peak_epoch``
    -> 0 at the last step."""
    epoch = step / max(1, steps_per_epoch)
    return float(np.interp(epoch, [0.0, opt["lr_peak_epoch"], float(epochs)],
                           [opt["lr_start"] * peak, peak, 0.0]))


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay only on weights with >= 2 dims (none on BN parameters and biases)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, config: Config) -> torch.optim.SGD:
    opt = config["optimizer"]
    return torch.optim.SGD(param_groups(model, opt["weight_decay"]), lr=0.0,
                           momentum=opt["momentum"], nesterov=False)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def make_loss(config: Config) -> nn.Module:
    """Label-smoothed cross-entropy, or BCE-with-logits for multi-label 1-D tasks."""
    if config["dataloader"]["kind"] == "numpy" and config["dataloader"]["task"] == "multilabel":
        return nn.BCEWithLogitsLoss()
    return nn.CrossEntropyLoss(label_smoothing=config["trainval"]["label_smoothing"])
