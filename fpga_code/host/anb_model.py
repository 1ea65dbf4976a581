"""The benchmark's network for the Vitis AI host steps: Python 3.7 + torch 1.10, no ``anb``.

A copy of :mod:`anb.searchspace.model` for the 2-D ImageNet space (ReLU + hard-sigmoid
squeeze-excite, which Xilinx DPUs run), in eval form: no stochastic depth (an identity at
inference). ``tests/test_fpga_host.py`` checks it equal to the original, parameter by parameter
and output by output, so weights trained with ``anb`` load here unchanged.
"""
from __future__ import annotations

import hashlib
import math
import re

import torch
from torch import nn

# (in, out, stride) of the seven stages, stem 3 -> 32 (stride 2), head 320 -> 1280
STAGES = ((32, 16, 1), (16, 24, 2), (24, 40, 2), (40, 80, 2), (80, 112, 1), (112, 192, 2),
          (192, 320, 1))
STEM, HEAD = 32, 1280
_STAGE = re.compile(r"e(\d+)k(\d+)l(\d+)(se)?")


def parse_arch(text):
    """``[(e, k, l, se), ...]`` of an architecture string (``e1k3l1se-e6k3l2-...``)."""
    parts = text.strip().split("-")
    if len(parts) != len(STAGES):
        raise ValueError("arch {!r}: {} stages, need {}".format(text, len(parts), len(STAGES)))
    stages = []
    for i, part in enumerate(parts):
        m = _STAGE.fullmatch(part)
        layers = (1, 2, 3, 4) if i == 5 else (1, 2, 3)
        if not m or int(m.group(1)) not in (1, 4, 6) or int(m.group(2)) not in (3, 5) \
                or int(m.group(3)) not in layers:
            raise ValueError("arch {!r}: stage {} {!r} is outside the space".format(text, i, part))
        stages.append((int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) is not None))
    return stages


def arch_id(text):
    canonical = "-".join("e{}k{}l{}{}".format(e, k, depth, "se" if se else "")
                         for e, k, depth, se in parse_arch(text))
    return hashlib.sha256("anb-arch:{}".format(canonical).encode()).hexdigest()[:16]


class SqueezeExcite(nn.Module):
    def __init__(self, channels, squeeze):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeeze, 1, bias=True)
        self.act = nn.ReLU(inplace=True)
        self.expand = nn.Conv2d(squeeze, channels, 1, bias=True)
        self.gate = nn.Hardsigmoid()

    def forward(self, x):
        return x * self.gate(self.expand(self.act(self.reduce(self.pool(x)))))


class MBConv(nn.Module):
    def __init__(self, cin, cout, stride, expansion, kernel, se):
        super().__init__()
        mid = cin * expansion
        self.expand = (nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid),
                                     nn.ReLU(inplace=True))
                       if expansion != 1 else nn.Identity())
        self.depthwise = nn.Sequential(
            nn.Conv2d(mid, mid, kernel, stride, (kernel - 1) // 2, groups=mid, bias=False),
            nn.BatchNorm2d(mid), nn.ReLU(inplace=True))
        self.se = SqueezeExcite(mid, max(1, cin // 4)) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        out = self.project(self.se(self.depthwise(self.expand(x))))
        return x + out if self.residual else out


class ANBNet(nn.Module):
    def __init__(self, arch, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, STEM, 3, 2, 1, bias=False), nn.BatchNorm2d(STEM),
                                  nn.ReLU(inplace=True))
        stages = []
        for (cin, cout, stride), (e, k, depth, se) in zip(STAGES, parse_arch(arch)):
            stages.append(nn.Sequential(*[
                MBConv(cin if j == 0 else cout, cout, stride if j == 0 else 1, e, k, se)
                for j in range(depth)]))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.Conv2d(STAGES[-1][1], HEAD, 1, bias=False),
                                  nn.BatchNorm2d(HEAD), nn.ReLU(inplace=True))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(HEAD, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                bound = 1.0 / math.sqrt(num_classes)
                nn.init.uniform_(module.weight, -bound, bound)
                nn.init.zeros_(module.bias)

    def forward(self, x):
        x = self.pool(self.head(self.stages(self.stem(x)))).flatten(1)
        return self.classifier(self.dropout(x))


def build_model(arch, num_classes=1000):
    return ANBNet(arch, num_classes)


def load_weights(model, path):
    """Load a state_dict, a trainer checkpoint (``{"model": ...}``) or a DDP-prefixed one."""
    state = torch.load(path, map_location="cpu")
    if isinstance(state, dict) and "model" in state and "format" in state:
        state = state["model"]
    clean = {}
    for key, value in state.items():
        for prefix in ("module.", "_orig_mod."):
            if key.startswith(prefix):
                key = key[len(prefix):]
        clean[key] = value
    model.load_state_dict(clean)
    return model


# Leaf modules the DPU runs (DPUCZDX8G / DPUCVDX8G): sigmoid, SiLU, softmax split the graph.
DPU_MODULES = (nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.ReLU6, nn.Hardsigmoid,
               nn.AdaptiveAvgPool2d, nn.Linear, nn.Dropout, nn.Identity)


def unsupported_modules(model):
    """``name: Type`` of every leaf module the DPU does not run."""
    return ["{}: {}".format(name, type(m).__name__) for name, m in model.named_modules()
            if not any(True for _ in m.children()) and not isinstance(m, DPU_MODULES)]
