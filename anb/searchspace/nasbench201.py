"""The NAS-Bench-201 cell space (Dong & Yang, ICLR 2020): 6 edges x 5 ops = 15,625 cells.

A cell is a DAG of 4 nodes; node ``j`` sums one op per earlier node ``i`` (edge ``j <- i``).
Edges are ordered as in NAS-Bench-201's string ``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|``:
``1<-0, 2<-0, 2<-1, 3<-0, 3<-1, 3<-2``. A choices row holds the 6 op indices into
:data:`OPS`. The network (xautodl's ``TinyNetwork``, built by
:mod:`anb.searchspace.nasbench201_model`) repeats the one cell 5 times at each of the widths
16, 32, 64, with a residual reduction block between the groups.

Extent: every one of the 5**6 = 15,625 cells (all of NAS-Bench-201's, each once); CIFAR-10,
32 px, 10 classes by default. Resolutions: positive multiples of 4 only (16 for
ImageNet16-120): the reduction block's 2x2 average pool rounds an odd map down while its
stride-2 conv rounds up, so the original network cannot run at other sizes.

Costs follow thop 0.1.1 (see :mod:`anb.searchspace.counting`); thop counts an
``AvgPool2d`` as one op per output element. NAS-Bench-201's own ``flop`` figure counts only
convolution and linear multiply-accumulates plus the classifier bias, i.e.
``true_macs + num_classes``; its ``params`` equal ``params`` here.
"""
from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from anb.searchspace.base import (
    COST_NAMES,
    CostTable,
    CostUnits,
    OpSpace,
    Task,
    Variable,
)

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

#: the ops of an edge, in index order
OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
#: the edges ``(node, input node)`` in string order
EDGES = ((1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))
NODES = 3
#: the three cell groups: width multiplier of ``C`` and spatial divisor of the input size
STAGES = ((1, 1), (2, 2), (4, 4))
CELLS_PER_STAGE = 5
STEM_CHANNELS = 16


def _fixed(costs: dict[str, Any]) -> dict[str, int]:
    return {name: int(costs[name]) for name in COST_NAMES}


def _cost(macs: int = 0, true_macs: int = 0, params: int = 0, activations: int = 0
          ) -> dict[str, int]:
    return {"macs": macs, "true_macs": true_macs, "params": params, "activations": activations}


def _conv_bn(cin: int, cout: int, kernel: int, area_in: int, area_out: int) -> dict[str, int]:
    """ReLU -> conv (no bias) -> BN (affine); the ReLU costs nothing."""
    conv = cin * cout * kernel * kernel
    return _cost(conv * area_out + 4 * cout * area_out, conv * area_out,
                 conv + 2 * cout, cin * area_in + cout * area_out)


def _sum(*parts: dict[str, int]) -> dict[str, int]:
    return {name: sum(p[name] for p in parts) for name in COST_NAMES}


def edge_op_costs(channels: int, area: int) -> np.ndarray:
    """Costs of each op on one edge at ``channels`` and ``area`` pixels: ``(len(OPS), 4)``."""
    per_op = {
        "none": _cost(),
        "skip_connect": _cost(),
        "nor_conv_1x1": _conv_bn(channels, channels, 1, area, area),
        "nor_conv_3x3": _conv_bn(channels, channels, 3, area, area),
        "avg_pool_3x3": _cost(macs=channels * area, activations=2 * channels * area),
    }
    return np.array([[per_op[op][name] for name in COST_NAMES] for op in OPS], dtype=np.int64)


def _reduction(cin: int, cout: int, area_in: int, area_out: int) -> dict[str, int]:
    """ResNet basic block, stride 2: two ReLU-conv3x3-BN and an AvgPool2d(2) + conv1x1
    shortcut."""
    pool = _cost(macs=cin * area_out, activations=cin * area_in + cin * area_out)
    shortcut = cin * cout * area_out
    return _sum(_conv_bn(cin, cout, 3, area_in, area_out), _conv_bn(cout, cout, 3, area_out,
                                                                    area_out),
                pool, _cost(shortcut, shortcut, cin * cout, cin * area_out + cout * area_out))


#: One variable per edge: its op.
_VARIABLES = tuple(Variable(f"edge_{node}_{src}", tuple(range(len(OPS))), OPS)
                   for node, src in EDGES)


class NASBench201Space(OpSpace):
    """NAS-Bench-201's 15,625 cells in the CIFAR ``TinyNetwork`` skeleton (C=16, N=5)."""

    name = "nasbench201"
    version = "1"
    task = Task("cifar10", 32, 10)
    summary = "NAS-Bench-201 cell space: 6 edges x 5 ops in the CIFAR TinyNetwork (C=16, N=5)"

    @property
    def variables(self) -> tuple[Variable, ...]:
        return _VARIABLES

    def format(self, row: np.ndarray) -> str:
        ops = self.positions(np.asarray(row).reshape(1, -1))[0]
        groups, edge = [], 0
        for node in range(1, NODES + 1):
            tokens = [f"{OPS[ops[edge + src]]}~{src}" for src in range(node)]
            edge += node
            groups.append("|" + "|".join(tokens) + "|")
        return "+".join(groups)

    def parse_string(self, text: str) -> np.ndarray:
        def fail(why: str) -> ValueError:
            return ValueError(f"{self.name}: cannot parse {text!r}: {why}; expected the "
                              "NAS-Bench-201 form |op~0|+|op~0|op~1|+|op~0|op~1|op~2| "
                              f"with op one of {list(OPS)}")

        if not isinstance(text, str):
            raise fail(f"expected a string, got {type(text).__name__}")
        groups = text.strip().split("+")
        if len(groups) != NODES:
            raise fail(f"{len(groups)} node groups separated by '+', need {NODES}")
        row: list[int] = []
        for node, group in enumerate(groups, start=1):
            if len(group) < 2 or group[0] != "|" or group[-1] != "|":
                raise fail(f"node {node} group {group!r} must start and end with '|'")
            tokens = group[1:-1].split("|")
            if len(tokens) != node:
                raise fail(f"node {node} has {len(tokens)} inputs {tokens}, needs {node}")
            for src, token in enumerate(tokens):
                op, sep, source = token.partition("~")
                if op not in OPS:
                    raise fail(f"unknown op {op!r} in {token!r} (node {node})")
                if not sep or source != str(src):
                    raise fail(f"token {token!r} is input {src} of node {node}, so it must "
                               f"end in '~{src}'")
                row.append(OPS.index(op))
        return np.asarray(row, dtype=np.int64)

    # -- costs --------------------------------------------------------------------------
    def cost_table(self, choices: np.ndarray, resolution: int | None = None,
                   num_classes: int | None = None, in_channels: int | None = None) -> CostTable:
        """Per edge: the op's cost summed over all 15 cells; ``stem``: conv3x3 + BN;
        ``head``: both reduction blocks, the last BN, global pool and classifier."""
        ops = self.positions(choices)
        size = self._check_resolution(resolution if resolution is not None
                                      else self.task.resolution)
        classes = num_classes if num_classes is not None else self.task.num_classes
        cin = in_channels if in_channels is not None else self.task.in_channels
        per_edge = np.sum([CELLS_PER_STAGE * edge_op_costs(STEM_CHANNELS * width,
                                                           (size // div) ** 2)
                           for width, div in STAGES], axis=0)
        costs = per_edge[ops]  # (n, edges, cost names)
        per_stage = {name: costs[:, :, c] for c, name in enumerate(COST_NAMES)}
        stem = _conv_bn(cin, STEM_CHANNELS, 3, size * size, size * size)  # conv + BN, no ReLU
        head_parts = [_reduction(STEM_CHANNELS * w0, STEM_CHANNELS * w1, (size // d0) ** 2,
                                 (size // d1) ** 2)
                      for (w0, d0), (w1, d1) in pairwise(STAGES)]
        last = STEM_CHANNELS * STAGES[-1][0]
        area = (size // STAGES[-1][1]) ** 2
        linear = last * classes
        head_parts += [
            _cost(macs=4 * last * area, params=2 * last),  # lastact BN (+ ReLU)
            _cost(macs=(area + 1) * last, activations=last * area + last),  # global pool
            _cost(linear, linear, linear + classes, last + classes),  # classifier
        ]
        return CostTable(per_stage, _fixed(stem), _fixed(_sum(*head_parts)))

    def _check_resolution(self, resolution: int) -> int:
        if isinstance(resolution, bool) or not isinstance(resolution, (int, np.integer)) \
                or resolution < 4 or resolution % 4:
            raise ValueError(f"{self.name}: resolution must be a positive multiple of 4 (two "
                             f"stride-2 reductions), got {resolution!r}")
        return int(resolution)

    def cost_units(self, choices: np.ndarray) -> CostUnits:
        """One slot per edge holding its op once (the unit covers the edge in all 15 cells)."""
        ops = self.positions(choices)
        names = tuple(v.name for v in self.variables)
        return CostUnits(ops, np.ones(ops.shape, dtype=np.float64), (len(OPS),) * len(EDGES),
                         names)

    def block_names(self) -> list[str]:
        return [v.name for v in self.variables]

    # -- networks -----------------------------------------------------------------------
    def build(self, arch: Any, num_classes: int | None = None, **options: Any) -> nn.Module:
        """xautodl's ``TinyNetwork``; the only option is ``in_channels``."""
        from anb.searchspace.nasbench201_model import TinyNetwork

        unknown = sorted(set(options) - {"in_channels"})
        if unknown:
            raise ValueError(f"{self.name}: unknown build options {unknown}; the only option "
                             "is in_channels")
        ops = [OPS[i] for i in self.to_choices(arch)[0]]
        return TinyNetwork(ops, num_classes or self.task.num_classes,
                           options.get("in_channels", self.task.in_channels))


SPACE = NASBench201Space()
