"""PyTorch builder of the FBNet space (HW-NAS-Bench's ``FBNet_Infer``, CIFAR settings).

Parameter and thop MAC counts equal :meth:`anb.searchspace.fbnet.FBNetSpace.cost_table`.
"""
from __future__ import annotations

from collections.abc import Sequence

from anb.extras import missing

try:
    import torch
    from torch import nn
except ModuleNotFoundError as err:
    raise missing(err, "measure",
                  "the PyTorch model builder (anb.searchspace.fbnet_model)") from None

from anb.searchspace.fbnet import (
    BLOCKS,
    HEAD_CHANNELS,
    LAYERS,
    OPS,
    SKIP,
    STEM_CHANNELS,
    LayerSpec,
    OpSpec,
)


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
            relu: bool = True) -> nn.Sequential:
    """Conv (no bias, padding ``(k - 1) // 2``) -> BN [-> ReLU]."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class ChannelShuffle(nn.Module):
    """Interleave the channels of ``groups`` groups: (N, g*c, ...) -> (N, c*g, ...)."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, channels = x.shape[:2]
        grouped = x.reshape(n, self.groups, channels // self.groups, *x.shape[2:])
        return grouped.transpose(1, 2).reshape(x.shape)


class FBNetBlock(nn.Module):
    """1x1 group conv expand -> [shuffle] -> kxk depthwise -> 1x1 group conv project
    (+ input when stride 1 and channels kept)."""

    def __init__(self, layer: LayerSpec, op: OpSpec):
        super().__init__()
        cin, cout = layer.in_channels, layer.out_channels
        mid = cin * op.expansion
        self.expand = conv_bn(cin, mid, 1, groups=op.groups)
        self.shuffle = ChannelShuffle(op.groups) if op.groups > 1 else nn.Identity()
        self.depthwise = conv_bn(mid, mid, op.kernel, layer.stride, groups=mid)
        self.project = conv_bn(mid, cout, 1, groups=op.groups, relu=False)
        self.residual = layer.stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.project(self.depthwise(self.shuffle(self.expand(x))))
        return out + x if self.residual else out


def skip_layer(layer: LayerSpec) -> nn.Module:
    """Identity when the shape is kept, else 1x1 conv (stride) -> BN -> ReLU."""
    if layer.stride == 1 and layer.in_channels == layer.out_channels:
        return nn.Identity()
    return conv_bn(layer.in_channels, layer.out_channels, 1, layer.stride)


class FBNet(nn.Module):
    """Stem (3x3, 16) -> 22 searchable layers -> 1x1 head (1504) -> pool -> linear."""

    def __init__(self, ops: Sequence[int], num_classes: int = 100, in_channels: int = 3,
                 dropout: float = 0.0):
        super().__init__()
        if len(ops) != len(LAYERS) or any(not 0 <= op < len(OPS) for op in ops):
            raise ValueError(f"FBNet needs {len(LAYERS)} op indices in 0-{len(OPS) - 1}, "
                             f"got {list(ops)}")
        self.stem = conv_bn(in_channels, STEM_CHANNELS, 3)
        self.layers = nn.Sequential(*(
            skip_layer(layer) if op == SKIP else FBNetBlock(layer, BLOCKS[op])
            for layer, op in zip(LAYERS, ops, strict=True)
        ))
        self.head = conv_bn(LAYERS[-1].out_channels, HEAD_CHANNELS, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.classifier = nn.Linear(HEAD_CHANNELS, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        """HW-NAS-Bench's initialisation."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.001)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.layers(self.stem(x)))
        return self.classifier(self.dropout(self.pool(x).flatten(1)))
