"""A third-party anb search space: three layers, each a 3x3 conv, a 5x5 conv or a skip.

It lives outside anb and reaches it only through the ``anb.spaces`` entry point, as a user's
own space would. Networks: stem conv3x3 3->16, the three layers (16 channels, stride 1, ReLU),
global average pool, linear 16->10, on 16x16 images.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from anb.searchspace.base import CostTable, CostUnits, OpSpace, Task, Variable

OPS = ("conv3", "conv5", "skip")
KERNELS = (3, 5, 0)
LAYERS = 3
WIDTH = 16


class TinyChain(OpSpace):
    name = "tiny-chain"
    version = "1"
    task = Task("tiny", 16, 10)
    summary = "three layers of conv3 / conv5 / skip (a third-party test space)"

    @property
    def variables(self) -> tuple[Variable, ...]:
        return tuple(Variable(f"layer{i}", (0, 1, 2), OPS) for i in range(LAYERS))

    def format(self, row: np.ndarray) -> str:
        return "-".join(OPS[int(v)] for v in row)

    def parse_string(self, text: str) -> np.ndarray:
        tokens = text.strip().split("-")
        if len(tokens) != LAYERS or any(t not in OPS for t in tokens):
            raise ValueError(f"{self.name}: {text!r} is not {LAYERS} of {list(OPS)} joined by '-'")
        return np.array([OPS.index(t) for t in tokens], dtype=np.int64)

    def cost_table(self, choices: np.ndarray, resolution: int | None = None,
                   num_classes: int | None = None, in_channels: int | None = None) -> CostTable:
        choices = self.positions(choices)
        area = (resolution or self.task.resolution) ** 2
        classes = num_classes or self.task.num_classes
        channels = in_channels or self.task.in_channels
        kernel = np.asarray(KERNELS)[choices]
        conv = WIDTH * WIDTH * kernel**2
        per_stage = {"macs": conv * area, "true_macs": conv * area, "params": conv,
                     "activations": np.where(kernel > 0, 2 * WIDTH * area, 0)}
        stem_conv = WIDTH * channels * 9
        stem = {"macs": stem_conv * area, "true_macs": stem_conv * area, "params": stem_conv,
                "activations": (channels + WIDTH) * area}
        linear = WIDTH * classes
        head = {"macs": (area + 1) * WIDTH + linear, "true_macs": linear,
                "params": linear + classes, "activations": WIDTH * area + classes}
        return CostTable(per_stage, stem, head)

    def cost_units(self, choices: np.ndarray) -> CostUnits:
        units = self.positions(choices)
        return CostUnits(units, np.ones(units.shape), (len(OPS),) * LAYERS,
                         tuple(f"layer{i}" for i in range(LAYERS)))

    def build(self, arch: Any, num_classes: int | None = None, **options: Any):
        from torch import nn

        row = self.arch(arch).to_choices()
        layers: list[nn.Module] = [nn.Conv2d(options.get("in_channels", 3), WIDTH, 3, 1, 1,
                                             bias=False), nn.ReLU()]
        for op in row:
            if KERNELS[op]:
                layers += [nn.Conv2d(WIDTH, WIDTH, KERNELS[op], 1, KERNELS[op] // 2, bias=False),
                           nn.ReLU()]
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                   nn.Linear(WIDTH, num_classes or self.task.num_classes)]
        return nn.Sequential(*layers)


SPACE = TinyChain()
