"""PyTorch model builder for the space (2-D images and the 1-D sequence variant).

The benchmark's networks use ReLU with a hard-sigmoid squeeze-excite gate (Xilinx DPUs run
neither sigmoid nor SiLU); ``activation="silu"`` gives the EfficientNet default (SiLU + sigmoid).
Parameter counts equal :func:`anb.searchspace.counting.count` exactly.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from anb.extras import missing

try:
    import torch
    from torch import nn
except ModuleNotFoundError as err:
    raise missing(err, "measure", "the PyTorch model builder (anb.searchspace.model)") from None

from anb.searchspace.arch import Arch
from anb.searchspace.space import SearchSpace

ACTIVATIONS: dict[str, tuple[Callable[[], nn.Module], Callable[[], nn.Module]]] = {
    "relu": (lambda: nn.ReLU(inplace=True), nn.Hardsigmoid),
    "silu": (lambda: nn.SiLU(inplace=True), nn.Sigmoid),
}


def _layers(dims: int) -> tuple[type[nn.Module], type[nn.Module], type[nn.Module]]:
    if dims == 2:
        return nn.Conv2d, nn.BatchNorm2d, nn.AdaptiveAvgPool2d
    if dims == 1:
        return nn.Conv1d, nn.BatchNorm1d, nn.AdaptiveAvgPool1d
    raise ValueError(f"dims must be 1 or 2, got {dims}")


class DropPath(nn.Module):
    """Stochastic depth: drop the residual branch per sample while training."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class SqueezeExcite(nn.Module):
    """avgpool -> 1x1 conv -> act -> 1x1 conv -> gate -> multiply."""

    def __init__(self, channels: int, squeeze: int, activation: str, dims: int):
        super().__init__()
        conv, _, pool = _layers(dims)
        act, gate = ACTIVATIONS[activation]
        self.pool = pool(1)
        self.reduce = conv(channels, squeeze, 1, bias=True)
        self.act = act()
        self.expand = conv(squeeze, channels, 1, bias=True)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.gate(self.expand(self.act(self.reduce(self.pool(x)))))
        return x * scale


class MBConv(nn.Module):
    """Inverted residual: [1x1 expand] -> kxk depthwise -> [SE] -> 1x1 project."""

    def __init__(self, cin: int, cout: int, stride: int, expansion: int, kernel: int, se: bool,
                 activation: str = "relu", drop_path: float = 0.0, dims: int = 2):
        super().__init__()
        conv, bn, _ = _layers(dims)
        act, _ = ACTIVATIONS[activation]
        mid = cin * expansion
        self.expand = (
            nn.Sequential(conv(cin, mid, 1, bias=False), bn(mid), act())
            if expansion != 1 else nn.Identity()
        )
        self.depthwise = nn.Sequential(
            conv(mid, mid, kernel, stride, (kernel - 1) // 2, groups=mid, bias=False),
            bn(mid), act(),
        )
        self.se = SqueezeExcite(mid, max(1, cin // 4), activation, dims) if se else nn.Identity()
        self.project = nn.Sequential(conv(mid, cout, 1, bias=False), bn(cout))
        self.residual = stride == 1 and cin == cout
        self.drop_path = DropPath(drop_path) if self.residual else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.project(self.se(self.depthwise(self.expand(x))))
        return x + self.drop_path(out) if self.residual else out


class ANBNet(nn.Module):
    """Stem -> 7 MBConv stages (or 5 for the 1-D space) -> head -> classifier."""

    def __init__(self, arch: Arch, num_classes: int = 1000, activation: str = "relu",
                 dropout: float = 0.2, drop_path: float = 0.2, in_channels: int | None = None,
                 *, space: SearchSpace):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; allowed are {list(ACTIVATIONS)}")
        space.check(arch)
        conv, bn, pool = _layers(space.dims)
        act, _ = ACTIVATIONS[activation]
        in_channels = in_channels if in_channels is not None else (3 if space.dims == 2 else 1)
        self.arch = arch
        self.stem = nn.Sequential(
            conv(in_channels, space.stem_channels, 3, space.stem_stride, 1, bias=False),
            bn(space.stem_channels), act(),
        )
        total = arch.depth
        stages, index = [], 0
        for spec, choice in zip(space.stages, arch.stages, strict=True):
            layers = []
            for j in range(choice.l):
                layers.append(MBConv(
                    spec.in_channels if j == 0 else spec.out_channels, spec.out_channels,
                    spec.stride if j == 0 else 1, choice.e, choice.k, choice.se, activation,
                    drop_path * index / total, space.dims,
                ))
                index += 1
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        last = space.stages[-1].out_channels
        self.head = nn.Sequential(conv(last, space.head_channels, 1, bias=False),
                                  bn(space.head_channels), act())
        self.pool = pool(1)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(space.head_channels, num_classes)
        self._init_weights(num_classes)

    def _init_weights(self, num_classes: int) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Conv1d, nn.Conv2d)):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                bound = 1.0 / math.sqrt(num_classes)
                nn.init.uniform_(module.weight, -bound, bound)
                nn.init.zeros_(module.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.forward_features(x)).flatten(1)
        return self.classifier(self.dropout(x))


def build_model(arch: Arch, num_classes: int = 1000, activation: str = "relu",
                dropout: float = 0.2, drop_path: float = 0.2, in_channels: int | None = None,
                *, space: SearchSpace) -> ANBNet:
    """Build the network of ``arch`` (see :class:`ANBNet`)."""
    return ANBNet(arch, num_classes, activation, dropout, drop_path, in_channels, space=space)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters (BN running statistics excluded)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
