"""The FBNet layer-wise space as HW-NAS-Bench defines it for CIFAR-100 (Li et al., ICLR 2021).

A fixed skeleton (3x3 stem of 16 channels, 22 searchable layers in 7 stages, a 1x1 head of
1504 channels, global pool, linear classifier) where each layer is one of 9 ops: an FBNet
block ``k{kernel}_e{expansion}[_g2]`` (1x1 group conv expand, [channel shuffle], kxk
depthwise, 1x1 group conv project, BN after each, ReLU after the first two, residual when
stride 1 and channels kept) or ``skip`` (identity when the shape is kept, else 1x1 conv, BN,
ReLU). Definitions follow HW-NAS-Bench's ``hw_nas_bench_api/fbnet_models/model_infer.py``
(CIFAR settings: stem stride 1, stage strides 1, 1, 2, 2, 1, 2, 1).

A choices row is the 22 op indices (0-8, in :data:`OPS` order); the canonical string is the op
names joined by ``-``, as in HELP's FBNet latency table.

Extent: each of the 22 layers any of the 9 ops: ``9**22`` = 984,770,902,183,611,232,881
architectures; CIFAR-100, 32 px, 100 classes by default. Costs and the network take any
positive input size (odd ones too: a stride-2 layer's map is ``ceil(size / 2)``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from anb.searchspace.base import (
    COST_NAMES,
    CostTable,
    CostUnits,
    OpSpace,
    Task,
    Variable,
    check_resolution,
)

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

#: the 9 candidate ops, in HW-NAS-Bench's index order
OPS = ("k3_e1", "k3_e1_g2", "k3_e3", "k3_e6", "k5_e1", "k5_e1_g2", "k5_e3", "k5_e6", "skip")
SKIP = OPS.index("skip")
STEM_CHANNELS = 16
HEAD_CHANNELS = 1504  # CIFAR setting (1984 on ImageNet)
STAGE_LAYERS = (1, 4, 4, 4, 4, 4, 1)
STAGE_CHANNELS = (16, 24, 32, 64, 112, 184, 352)
STAGE_STRIDES = (1, 1, 2, 2, 1, 2, 1)  # CIFAR setting, stem stride 1


@dataclass(frozen=True)
class OpSpec:
    """An FBNet block's kernel, expansion and group count."""

    kernel: int
    expansion: int
    groups: int


def _op_spec(name: str) -> OpSpec:
    kernel, expansion, *group = name.split("_")
    return OpSpec(int(kernel[1:]), int(expansion[1:]), int(group[0][1:]) if group else 1)


#: the blocks of ops 0-7 (op 8 is ``skip``)
BLOCKS = tuple(_op_spec(name) for name in OPS[:SKIP])


@dataclass(frozen=True)
class LayerSpec:
    """One searchable layer of the skeleton."""

    in_channels: int
    out_channels: int
    stride: int


def _skeleton() -> tuple[LayerSpec, ...]:
    layers, cin = [], STEM_CHANNELS
    for count, cout, stride in zip(STAGE_LAYERS, STAGE_CHANNELS, STAGE_STRIDES, strict=True):
        for i in range(count):
            layers.append(LayerSpec(cin, cout, stride if i == 0 else 1))
            cin = cout
    return tuple(layers)


LAYERS = _skeleton()


def out_size(size: int, stride: int) -> int:
    """Spatial size after a conv with padding ``(k - 1) // 2`` (odd k): ``ceil(size / stride)``."""
    return (size - 1) // stride + 1


# -- analytic costs (thop 0.1.1 convention, see anb.searchspace.counting) -------------------
def _conv(cin: int, cout: int, k: int, area_out: int, groups: int = 1) -> dict[str, int]:
    macs = cout * area_out * (cin // groups) * k * k
    return {"macs": macs, "true_macs": macs, "params": cout * (cin // groups) * k * k}


def _bn(channels: int, area: int) -> dict[str, int]:
    return {"macs": 4 * channels * area, "true_macs": 0, "params": 2 * channels}


def _sum(*parts: dict[str, int], activations: int) -> dict[str, int]:
    total = {name: sum(p[name] for p in parts) for name in ("macs", "true_macs", "params")}
    return {**total, "activations": activations}


def _block_cost(layer: LayerSpec, op: OpSpec, size: int) -> dict[str, int]:
    """One FBNet block at input size ``size``. Activations: each conv reads its input and
    writes its output; the channel shuffle reads and writes the expanded map once more."""
    cin, cout = layer.in_channels, layer.out_channels
    mid = cin * op.expansion
    area_in, area_out = size * size, out_size(size, layer.stride) ** 2
    shuffle = 2 * mid * area_in if op.groups > 1 else 0
    return _sum(
        _conv(cin, mid, 1, area_in, op.groups), _bn(mid, area_in),
        _conv(mid, mid, op.kernel, area_out, mid), _bn(mid, area_out),
        _conv(mid, cout, 1, area_out, op.groups), _bn(cout, area_out),
        activations=cin * area_in + 2 * mid * area_in + shuffle + 2 * mid * area_out
        + cout * area_out,
    )


def _skip_cost(layer: LayerSpec, size: int) -> dict[str, int]:
    """Identity (free) when the shape is kept, else 1x1 conv (stride), BN, ReLU."""
    if layer.stride == 1 and layer.in_channels == layer.out_channels:
        return {name: 0 for name in COST_NAMES}
    area_out = out_size(size, layer.stride) ** 2
    return _sum(_conv(layer.in_channels, layer.out_channels, 1, area_out),
                _bn(layer.out_channels, area_out),
                activations=layer.in_channels * size * size + layer.out_channels * area_out)


@cache
def layer_costs(resolution: int) -> dict[str, np.ndarray]:
    """Each cost of every op at every layer, ``(22, 9)`` int64 arrays (read-only)."""
    table = {name: np.zeros((len(LAYERS), len(OPS)), dtype=np.int64) for name in COST_NAMES}
    size = resolution  # stem stride 1
    for i, layer in enumerate(LAYERS):
        costs = [_block_cost(layer, op, size) for op in BLOCKS] + [_skip_cost(layer, size)]
        for j, cost in enumerate(costs):
            for name in COST_NAMES:
                table[name][i, j] = cost[name]
        size = out_size(size, layer.stride)
    for array in table.values():
        array.flags.writeable = False
    return table


def _stem_cost(resolution: int, in_channels: int) -> dict[str, int]:
    area = resolution * resolution
    return _sum(_conv(in_channels, STEM_CHANNELS, 3, area), _bn(STEM_CHANNELS, area),
                activations=in_channels * area + STEM_CHANNELS * area)


def _head_cost(resolution: int, num_classes: int) -> dict[str, int]:
    size = resolution
    for layer in LAYERS:
        size = out_size(size, layer.stride)
    area, last = size * size, LAYERS[-1].out_channels
    cost = _sum(_conv(last, HEAD_CHANNELS, 1, area), _bn(HEAD_CHANNELS, area),
                activations=last * area + 2 * HEAD_CHANNELS * area + 2 * HEAD_CHANNELS
                + num_classes)  # head conv, pool and classifier: each one's input and output
    linear = HEAD_CHANNELS * num_classes
    cost["macs"] += (area + 1) * HEAD_CHANNELS + linear  # adaptive avg pool, linear
    cost["true_macs"] += linear
    cost["params"] += linear + num_classes
    return cost


#: One variable per searchable layer (``layer00`` ...): its op.
_VARIABLES = tuple(Variable(f"layer{i:02d}", tuple(range(len(OPS))), OPS)
                   for i in range(len(LAYERS)))


class FBNetSpace(OpSpace):
    """HW-NAS-Bench's FBNet space on CIFAR-100: 22 layers, 9 ops each (9^22 architectures)."""

    name = "fbnet"
    version = "1"
    task = Task("cifar100", 32, 100)
    summary = "FBNet (HW-NAS-Bench, CIFAR-100): 22 layers, each one of 9 ops"

    @property
    def variables(self) -> tuple[Variable, ...]:
        return _VARIABLES

    def allowed_text(self, variable: Variable) -> str:
        return f"0-{len(OPS) - 1} ({', '.join(OPS)})"

    def format(self, row: np.ndarray) -> str:
        return "-".join(OPS[i] for i in self.positions(np.asarray(row)[None])[0])

    def parse_string(self, text: str) -> np.ndarray:
        tokens = str(text).strip().split("-")
        if len(tokens) != len(LAYERS):
            raise ValueError(f"{self.name}: {text!r} has {len(tokens)} '-'-separated ops; "
                             f"expected {len(LAYERS)}, each one of {', '.join(OPS)}")
        row = []
        for i, token in enumerate(tokens):
            if token not in OPS:
                raise ValueError(f"{self.name}: op {token!r} at layer {i} ({self.block_names()[i]})"
                                 f" is unknown; allowed ops are {', '.join(OPS)}")
            row.append(OPS.index(token))
        return np.asarray(row, dtype=np.int64)

    def cost_table(self, choices: np.ndarray, resolution: int | None = None,
                   num_classes: int | None = None, in_channels: int | None = None) -> CostTable:
        """Exact costs of each searchable layer (a table lookup per layer and op)."""
        choices = self.positions(choices)
        resolution = (self.task.resolution if resolution is None
                      else check_resolution(self.name, resolution))
        table = layer_costs(resolution)
        rows = np.arange(len(LAYERS))
        per_stage = {name: table[name][rows, choices] for name in COST_NAMES}
        return CostTable(per_stage,
                         _stem_cost(resolution, in_channels or self.task.in_channels),
                         _head_cost(resolution, num_classes or self.task.num_classes))

    def cost_units(self, choices: np.ndarray) -> CostUnits:
        """One slot per layer holding its op once: costs are exactly additive over layers."""
        units = self.positions(choices)
        return CostUnits(units, np.ones(units.shape), (len(OPS),) * len(LAYERS),
                         tuple(self.block_names()))

    def block_names(self) -> list[str]:
        return [v.name for v in _VARIABLES]

    def build(self, arch: Any, num_classes: int | None = None, **options: Any) -> nn.Module:
        """HW-NAS-Bench's ``FBNet_Infer``; options ``in_channels`` and ``dropout`` (default
        0, as in the reference) before the classifier."""
        from anb.searchspace.fbnet_model import FBNet

        allowed = {"in_channels", "dropout"}
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(f"{self.name}: unknown build options {unknown}; "
                             f"allowed are {sorted(allowed)}")
        ops = self.arch(arch).to_choices().tolist()
        return FBNet(ops, num_classes or self.task.num_classes, **options)


SPACE = FBNetSpace()
