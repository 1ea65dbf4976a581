"""Training recipes: optimiser, per-step lr schedule, resolution ramp, loss, weight EMA.

The proxy (triangular lr, SGD) and the full recipe (warm-up + cosine or step decay, SGD or
RMSprop, EMA of weights, RandAugment) differ only in config keys."""
from __future__ import annotations

import copy
import inspect
import math

import numpy as np

from anb.extras import missing

try:
    import torch
    from torch import nn
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.recipe") from None

from anb.collect_accuracy.config import Config
from anb.collect_accuracy.config import peak_lr as config_peak_lr


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
    """Peak lr scaled linearly with the global batch (see :func:`.config.peak_lr`)."""
    return config_peak_lr(config, world_size)


def lr_at(step: float, steps_per_epoch: int, epochs: int, peak: float, opt: dict) -> float:
    """The lr of a step. ``triangular`` (the proxy's): ``lr_start * peak`` at 0 -> ``peak`` at
    ``lr_peak_epoch`` -> 0 at the last step. ``cosine`` / ``step`` (the full recipe): linear
    warm-up from ``lr_start * peak`` over ``warmup_epochs``, then cosine to ``min_lr`` at the
    end, or ``step_gamma`` every ``step_epochs``; never below ``min_lr``."""
    epoch = step / max(1, steps_per_epoch)
    if opt["schedule"] == "triangular":
        return float(np.interp(epoch, [0.0, opt["lr_peak_epoch"], float(epochs)],
                               [opt["lr_start"] * peak, peak, 0.0]))
    warm = opt["warmup_epochs"]
    if epoch < warm:
        return float(opt["lr_start"] * peak + (peak - opt["lr_start"] * peak) * epoch / warm)
    if opt["schedule"] == "cosine":
        done = (epoch - warm) / max(1e-12, epochs - warm)
        lr = opt["min_lr"] + 0.5 * (peak - opt["min_lr"]) * (1 + math.cos(math.pi * min(1.0, done)))
    else:
        lr = peak * opt["step_gamma"] ** math.floor((epoch - warm) / opt["step_epochs"])
    return float(max(opt["min_lr"], lr))


#: How far one training step moves BatchNorm's running statistics: PyTorch's default, which the
#: space's models (and the reference) use.
BN_MOMENTUM: float = inspect.signature(nn.BatchNorm2d).parameters["momentum"].default


def bn_stats_note(steps: int) -> str | None:
    """A warning when ``steps`` training steps in all are too few for BatchNorm's running
    statistics to leave their initial values (mean 0, variance 1): eval-mode BatchNorm then
    mis-scales every layer, compounding over a network's ~50 of them, and validation loss can
    reach 1e11 whatever the weights. None when less than 1 % of the initial values is left."""
    left = (1.0 - BN_MOMENTUM) ** steps
    if left < 0.01:
        return None
    return (f"only {steps} training steps in all: BatchNorm running statistics still hold "
            f"{left:.0%} of their initial values, so validation loss and accuracy mean little "
            "(raise trainval.max_steps, 0 = full epochs, or trainval.epochs)")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay only on weights with >= 2 dims (none on BN parameters and biases)."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, config: Config) -> torch.optim.Optimizer:
    """SGD (momentum, no Nesterov) or RMSprop (TF-style alpha 0.9, eps 1e-3, momentum)."""
    opt = config["optimizer"]
    if opt["name"] == "rmsprop":
        return torch.optim.RMSprop(param_groups(model, opt["weight_decay"]), lr=0.0, alpha=0.9,
                                   eps=1e-3, momentum=opt["momentum"])
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


class EMA:
    """Exponential moving average of a model's parameters and buffers, updated every step;
    the averaged copy is what validation evaluates."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self.model = copy.deepcopy(model).eval()
        for param in self.model.parameters():
            param.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        pairs = zip(self.model.state_dict().values(), model.state_dict().values(), strict=True)
        for avg, cur in pairs:
            if avg.dtype.is_floating_point:
                avg.mul_(self.decay).add_(cur.detach(), alpha=1 - self.decay)
            else:
                avg.copy_(cur)
