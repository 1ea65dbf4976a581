"""PyTorch builder of OFA MobileNetV3 subnets (see :mod:`anb.searchspace.ofa_mbv3`).

The layers follow OFA's ``MBConvLayer`` / ``SEModule`` / ``ConvLayer``; OFA's ``Hswish`` and
``Hsigmoid`` are ``nn.Hardswish`` and ``nn.Hardsigmoid``. Global and SE pooling are
``nn.AdaptiveAvgPool2d`` modules (OFA takes a mean) so that thop counts them as the analytic
costs do; the function computed is the same.
"""
from __future__ import annotations

from anb.extras import missing

try:
    import torch
    from torch import nn
except ModuleNotFoundError as err:
    raise missing(err, "measure",
                  "the PyTorch model builder (anb.searchspace.ofa_mbv3_model)") from None

from anb.searchspace.model import SqueezeExcite
from anb.searchspace.ofa_mbv3 import (
    DROPOUT,
    FEATURE_MIX_WIDTH,
    FINAL_EXPAND_WIDTH,
    FIRST_BLOCK_WIDTH,
    STAGES,
    STEM_WIDTH,
    mid_channels,
    se_channels,
    stage_inputs,
)

ACTIVATIONS = {"relu": nn.ReLU, "h_swish": nn.Hardswish}


class OFAMBConv(nn.Module):
    """[1x1 expand, BN, act] -> kxk depthwise, BN, act -> [SE] -> 1x1 project, BN (+ input
    when the shapes allow)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expansion: int,
                 activation: str, se: bool):
        super().__init__()
        act = ACTIVATIONS[activation]
        mid = mid_channels(cin, expansion)
        self.expand = (nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid),
                                     act(inplace=True))
                       if expansion != 1 else nn.Identity())
        self.depthwise = nn.Sequential(
            nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
            nn.BatchNorm2d(mid), act(inplace=True))
        self.se = SqueezeExcite(mid, se_channels(mid), "relu", 2) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.project(self.se(self.depthwise(self.expand(x))))
        return x + out if self.residual else out


class OFAMobileNetV3(nn.Module):
    """First conv -> first block -> 5 stages of ``layers[s]`` = [(kernel, expansion), ...]
    -> final expand -> pool -> feature mix -> dropout -> classifier."""

    def __init__(self, layers: list[list[tuple[int, int]]], num_classes: int = 1000,
                 dropout: float = DROPOUT, in_channels: int = 3):
        super().__init__()
        if len(layers) != len(STAGES):
            raise ValueError(f"expected {len(STAGES)} stages of layers, got {len(layers)}")
        self.first_conv = nn.Sequential(
            nn.Conv2d(in_channels, STEM_WIDTH, 3, 2, 1, bias=False), nn.BatchNorm2d(STEM_WIDTH),
            nn.Hardswish(inplace=True))
        blocks = [OFAMBConv(STEM_WIDTH, FIRST_BLOCK_WIDTH, 3, 1, 1, "relu", False)]
        for stage, cin, stage_layers in zip(STAGES, stage_inputs(), layers, strict=True):
            for j, (kernel, expansion) in enumerate(stage_layers):
                blocks.append(OFAMBConv(cin if j == 0 else stage.width, stage.width, kernel,
                                        stage.stride if j == 0 else 1, expansion,
                                        stage.activation, stage.se))
        self.blocks = nn.Sequential(*blocks)
        self.final_expand = nn.Sequential(
            nn.Conv2d(STAGES[-1].width, FINAL_EXPAND_WIDTH, 1, bias=False),
            nn.BatchNorm2d(FINAL_EXPAND_WIDTH), nn.Hardswish(inplace=True))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.feature_mix = nn.Sequential(
            nn.Conv2d(FINAL_EXPAND_WIDTH, FEATURE_MIX_WIDTH, 1, bias=False),
            nn.Hardswish(inplace=True))
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(FEATURE_MIX_WIDTH, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.final_expand(self.blocks(self.first_conv(x)))
        x = self.feature_mix(self.pool(x)).flatten(1)
        return self.classifier(self.dropout(x))
