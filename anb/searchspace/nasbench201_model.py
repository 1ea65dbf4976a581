"""PyTorch builder of NAS-Bench-201 networks: xautodl's CIFAR ``TinyNetwork`` (C=16, N=5).

Module names and layouts follow xautodl (``models/cell_infers/tiny_network.py``,
``cells.py``, ``cell_operations.py``), so a NAS-Bench-201 state dict loads unchanged; the
only difference is that ``forward`` returns the logits alone (xautodl returns the pooled
features too).
"""
from __future__ import annotations

from collections.abc import Sequence

from anb.extras import missing

try:
    import torch
    from torch import nn
except ModuleNotFoundError as err:
    raise missing(err, "measure",
                  "the PyTorch model builder (anb.searchspace.nasbench201_model)") from None

from anb.searchspace.nasbench201 import CELLS_PER_STAGE, EDGES, STAGES, STEM_CHANNELS


class ReLUConvBN(nn.Module):
    """ReLU -> conv (no bias) -> BN (affine)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int):
        super().__init__()
        self.op = nn.Sequential(
            nn.ReLU(inplace=False),
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, bias=False),
            nn.BatchNorm2d(cout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x)


class Pooling(nn.Module):
    """3x3 average pool, stride 1, padding not counted in the average."""

    def __init__(self) -> None:
        super().__init__()
        self.op = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x)


class Zero(nn.Module):
    """The ``none`` op: a zero map of the input's shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul(0.0)


class Identity(nn.Module):
    """The ``skip_connect`` op (input and output widths are equal inside a cell)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def edge_op(name: str, channels: int) -> nn.Module:
    """The module of op ``name`` on an edge of ``channels`` channels, stride 1."""
    if name == "none":
        return Zero()
    if name == "skip_connect":
        return Identity()
    if name == "nor_conv_1x1":
        return ReLUConvBN(channels, channels, 1, 1)
    if name == "nor_conv_3x3":
        return ReLUConvBN(channels, channels, 3, 1)
    if name == "avg_pool_3x3":
        return Pooling()
    raise ValueError(f"unknown NAS-Bench-201 op {name!r}")


class InferCell(nn.Module):
    """Node ``j`` sums its edges' ops applied to nodes ``0..j-1``; the output is node 3."""

    def __init__(self, ops: Sequence[str], channels: int):
        super().__init__()
        self.layers = nn.ModuleList(edge_op(op, channels) for op in ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes = [x]
        edge = 0
        while edge < len(EDGES):
            node = EDGES[edge][0]
            nodes.append(sum(self.layers[edge + src](nodes[src]) for src in range(node)))
            edge += node
        return nodes[-1]


class ResNetBasicblock(nn.Module):
    """Reduction block: two ReLU-conv3x3-BN (the first stride 2) plus an AvgPool2d(2) +
    conv1x1 shortcut."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv_a = ReLUConvBN(cin, cout, 3, 2)
        self.conv_b = ReLUConvBN(cout, cout, 3, 1)
        self.downsample = nn.Sequential(nn.AvgPool2d(kernel_size=2, stride=2, padding=0),
                                        nn.Conv2d(cin, cout, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.downsample(x) + self.conv_b(self.conv_a(x))


class TinyNetwork(nn.Module):
    """Stem conv3x3 + BN, 3 groups of 5 cells (16, 32, 64 channels) joined by reduction
    blocks, BN + ReLU, global average pool, linear classifier."""

    def __init__(self, ops: Sequence[str], num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        if len(ops) != len(EDGES):
            raise ValueError(f"a NAS-Bench-201 cell has {len(EDGES)} edges, got {len(ops)} ops")
        self.ops = tuple(ops)
        self.stem = nn.Sequential(nn.Conv2d(in_channels, STEM_CHANNELS, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(STEM_CHANNELS))
        cells: list[nn.Module] = []
        previous = STEM_CHANNELS
        for width, _ in STAGES:
            channels = STEM_CHANNELS * width
            if channels != previous:
                cells.append(ResNetBasicblock(previous, channels))
            cells += [InferCell(ops, channels) for _ in range(CELLS_PER_STAGE)]
            previous = channels
        self.cells = nn.ModuleList(cells)
        self.lastact = nn.Sequential(nn.BatchNorm2d(previous), nn.ReLU(inplace=True))
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(previous, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for cell in self.cells:
            x = cell(x)
        return self.classifier(self.global_pooling(self.lastact(x)).flatten(1))
