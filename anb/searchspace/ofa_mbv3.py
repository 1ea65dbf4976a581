"""The Once-for-All MobileNetV3 space (width multiplier 1.0), as the once-for-all repository
defines it (Cai et al., ICLR 2020; ``ofa/imagenet_classification/elastic_nn/networks/ofa_mbv3.py``).

Fixed skeleton: first conv 3x3 stride 2 -> 16 (BN, h_swish); a fixed first MBConv (3x3,
expansion 1, ReLU, residual) 16 -> 16; five searchable stages of widths 24, 40, 80, 112, 160,
strides 2, 2, 2, 1, 2, activations ReLU, ReLU, h_swish, h_swish, h_swish and squeeze-excite
off, on, off, on, on; a final 1x1 expand 160 -> 960 (BN, h_swish), global average pooling, a
1x1 feature-mix conv 960 -> 1280 (no BN, h_swish), dropout 0.1 and Linear(1280, classes).
An MBConv layer expands to ``make_divisible(in * e, 8)`` channels and its SE squeezes to
``make_divisible(mid // 4, 8)`` (ReLU inside, hard-sigmoid gate), as OFA's ``MBConvLayer``.

Decisions (a *conditional* space): the input resolution ``r`` in :data:`RESOLUTIONS`; per
stage a depth ``d`` in {2, 3, 4}; per layer (4 per stage, 20 in all) a kernel ``ks`` in
{3, 5, 7} and an expansion ``e`` in {3, 4, 6}. Layers beyond their stage's depth are inactive
and take the first values (k3, e3). Variables, in the order of a choices row (46 ints): ``r``,
then per stage ``d{s}`` followed by ``ks{i}``, ``e{i}`` of its layers (``i`` = OFA's global
layer index 0..19).

String form (canonical)::

    r224:d2:k3e4,k5e6-d3:k7e6,k5e4,k3e3-d4:k3e3,k3e3,k3e3,k3e3-d2:k5e6,k7e6-d2:k3e3,k3e3

``r<resolution>:`` then the five stages separated by ``-``; a stage is ``d<depth>:`` followed
by its active layers ``k<kernel>e<expansion>`` separated by ``,`` (exactly ``depth`` of them).
OFA's native dict ``{"ks": [20], "e": [20], "d": [5], "r": 224}`` is read too
(:meth:`OFAMobileNetV3Space.from_native`).

Extent: resolutions 128, 132, ..., 224 (25 values, every multiple of 4 in [128, 224]: the
image sizes OFA trains its subnets at, ``train_ofa_net.py``'s ``image_size = "128,160,192,224"``
with ``continuous_size`` and ``MyRandomResizedCrop.IMAGE_SIZE_SEG = 4``; OFA's evolution finder
and latency/FLOPs look-up tables use the subset 160, 176, 192, 208, 224, its accuracy dataset
128, 160, 192, 224); depths {2, 3, 4}, kernels {3, 5, 7}, expansions {3, 4, 6}, every layer
independently, as ``OFAMobileNetV3.sample_active_subnet`` draws them. Other resolutions are
not in the space: :meth:`OFAMobileNetV3Space.cost_table` and the built network still take any
input size (``resolution=``), e.g. an odd one.

The index is a bijection onto the *distinct* architectures: resolution, then the five stages
as digits of radix :data:`STAGE_SIZE` (per stage: an offset by depth plus a mixed-radix number
over the active layers' (kernel, expansion) pairs). There are ``25 * 7371**5`` =
543,966,387,314,312,146,275 (about 5.4e20) architectures, more than 64 bits hold, so indices
are exact Python ints in object arrays.

Version 2 (version 1 had the five resolutions 160-224 in steps of 16): strings, records and
OFA's dicts of version 1 read unchanged (same text, same id); indices and ordinal / one-hot
encodings of the resolution differ, so a surrogate fitted on version 1 is refused.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from anb.searchspace.base import (
    COST_NAMES,
    CostTable,
    CostUnits,
    Space,
    Task,
    UnitCosts,
    Variable,
    check_resolution,
)
from anb.searchspace.counting import _add, _bn, _conv, _out

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

#: OFA's training image sizes: every multiple of ``MyRandomResizedCrop.IMAGE_SIZE_SEG`` (4)
#: from 128 to 224 (``train_ofa_net.py``: ``image_size = "128,160,192,224"``,
#: ``continuous_size = True``; ``ofa/utils/my_dataloader/my_random_resize_crop.py``)
RESOLUTIONS = tuple(range(128, 224 + 1, 4))
KERNELS = (3, 5, 7)
EXPANSIONS = (3, 4, 6)
DEPTHS = (2, 3, 4)
MAX_DEPTH = max(DEPTHS)
CHANNEL_DIVISIBLE = 8
SE_REDUCTION = 4

STEM_WIDTH = 16          # first conv 3x3 stride 2, BN, h_swish
FIRST_BLOCK_WIDTH = 16   # fixed MBConv 3x3, e1, ReLU, no SE
FINAL_EXPAND_WIDTH = 960
FEATURE_MIX_WIDTH = 1280
DROPOUT = 0.1


@dataclass(frozen=True)
class OFAStage:
    """One searchable stage: output width, stride of its first layer, activation, SE."""

    width: int
    stride: int
    activation: str
    se: bool


STAGES = (
    OFAStage(24, 2, "relu", False),
    OFAStage(40, 2, "relu", True),
    OFAStage(80, 2, "h_swish", False),
    OFAStage(112, 1, "h_swish", True),
    OFAStage(160, 2, "h_swish", True),
)
NUM_STAGES = len(STAGES)
NUM_LAYERS = NUM_STAGES * MAX_DEPTH
UNIT_RADIX = len(KERNELS) * len(EXPANSIONS)
_STAGE_COLUMNS = 1 + 2 * MAX_DEPTH
#: distinct settings of one stage: sum over depths of 9**depth
STAGE_SIZE = sum(UNIT_RADIX**d for d in DEPTHS)
_DEPTH_OFFSETS = np.cumsum([0] + [UNIT_RADIX**d for d in DEPTHS[:-1]]).astype(np.int64)


def make_divisible(value: float, divisor: int = CHANNEL_DIVISIBLE) -> int:
    """OFA's channel rounding: nearest multiple of ``divisor`` (at least ``divisor``), never
    more than 10% below ``value``."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def mid_channels(in_channels: int, expansion: int) -> int:
    """Expanded width of an MBConv layer (``DynamicMBConvLayer.active_middle_channel``)."""
    return make_divisible(round(in_channels * expansion))


def se_channels(mid: int) -> int:
    """Squeeze width of OFA's ``SEModule`` on ``mid`` channels."""
    return make_divisible(mid // SE_REDUCTION)


def stage_inputs() -> list[int]:
    """Input width of each stage (the previous stage's width)."""
    return [FIRST_BLOCK_WIDTH] + [stage.width for stage in STAGES[:-1]]


def _column(stage: int, layer: int | None = None, field: str = "d") -> int:
    base = 1 + stage * _STAGE_COLUMNS
    return base if layer is None else base + 1 + 2 * layer + (field == "e")


def _variables() -> tuple[Variable, ...]:
    out = [Variable("r", RESOLUTIONS)]
    for s in range(NUM_STAGES):
        out.append(Variable(f"d{s}", DEPTHS))
        for j in range(MAX_DEPTH):
            i = s * MAX_DEPTH + j
            out += [Variable(f"ks{i}", KERNELS), Variable(f"e{i}", EXPANSIONS)]
    return tuple(out)


#: The resolution, then per stage its depth and each layer's kernel and expansion.
_VARIABLES = _variables()


class OFAMobileNetV3Space(Space):
    """The OFA MobileNetV3 space (see the module docstring)."""

    name = "ofa-mbv3"
    version = "2"
    task = Task("imagenet", 224, 1000)
    summary = ("Once-for-All MobileNetV3 (w1.0): resolution 128-224 step 4, per stage depth "
               "2-4, per layer kernel 3/5/7 and expansion 3/4/6")

    # -- variables ---------------------------------------------------------------------
    @property
    def variables(self) -> tuple[Variable, ...]:
        return _VARIABLES

    @property
    def choice_shape(self) -> tuple[int, ...]:
        return (1 + NUM_STAGES * _STAGE_COLUMNS,)

    def positions(self, choices: np.ndarray) -> np.ndarray:
        """Validated positions; inactive layers' positions are 0 whatever their values."""
        choices = np.asarray(choices)
        if choices.ndim != 2 or choices.shape[1:] != self.choice_shape:
            raise ValueError(f"{self.name}: choices must have shape (n, {self.choice_shape[0]}),"
                             f" got {choices.shape}")
        if choices.size and choices.dtype.kind not in "iu":
            raise ValueError(f"{self.name}: choices must be integers, got dtype {choices.dtype}")
        pos = np.zeros(choices.shape, dtype=np.int64)
        for c, variable in enumerate(self.variables):
            values = np.asarray(variable.values)
            match = choices[:, c, None] == values
            bad = ~match.any(axis=1)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise ValueError(f"{self.name}: variable {variable.name!r} has value "
                                 f"{int(choices[row, c])} (architecture {row}); allowed "
                                 f"values are {list(variable.values)}")
            pos[:, c] = match.argmax(axis=1)
        return np.where(self.active(pos), pos, 0)

    def from_positions(self, positions: np.ndarray) -> np.ndarray:
        pos = self.check_positions(positions)
        pos = np.where(self.active(pos), pos, 0)
        out = np.empty_like(pos)
        for c, variable in enumerate(self.variables):
            out[:, c] = np.asarray(variable.values, dtype=np.int64)[pos[:, c]]
        return out

    def conditions(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """A layer's kernel and expansion count only when its stage is at least that deep."""
        out = []
        for s in range(NUM_STAGES):
            for j in range(MAX_DEPTH):
                deep = tuple(d for d in DEPTHS if d > j)
                if deep != tuple(DEPTHS):
                    i = s * MAX_DEPTH + j
                    out += [(f"ks{i}", f"d{s}", deep), (f"e{i}", f"d{s}", deep)]
        return out

    def variable_groups(self) -> np.ndarray:
        """The resolution alone; a stage's depth with its layers' kernels and expansions."""
        return np.array([0] + [1 + s for s in range(NUM_STAGES) for _ in range(_STAGE_COLUMNS)])

    def active(self, positions: np.ndarray) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        out = np.ones(pos.shape, dtype=bool)
        depth_table = np.asarray(DEPTHS)
        for s in range(NUM_STAGES):
            depth = depth_table[pos[:, _column(s)]]
            for j in range(MAX_DEPTH):
                on = j < depth
                out[:, _column(s, j, "ks")] = on
                out[:, _column(s, j, "e")] = on
        return out

    # -- a bijective index onto the distinct architectures --------------------------------
    def size(self) -> int:
        return len(RESOLUTIONS) * STAGE_SIZE**NUM_STAGES

    def index_from_choices(self, choices: np.ndarray) -> np.ndarray:
        """Exact indices (Python ints in an object array: the space exceeds 64 bits)."""
        pos = self.positions(choices)
        index = pos[:, 0].astype(object)
        for s in range(NUM_STAGES):
            index = index * STAGE_SIZE + self._stage_codes(pos, s).astype(object)
        return index

    def choices_from_index(self, index: np.ndarray | Sequence[int]) -> np.ndarray:
        rest = self._check_index(index)
        pos = np.zeros((rest.size, len(self.variables)), dtype=np.int64)
        for s in reversed(range(NUM_STAGES)):
            self._decode_stage(pos, s, (rest % STAGE_SIZE).astype(np.int64))
            rest = rest // STAGE_SIZE
        pos[:, 0] = rest.astype(np.int64)
        return self.from_positions(pos)

    @staticmethod
    def _units(pos: np.ndarray, s: int, j: int) -> np.ndarray:
        """(kernel, expansion) pair of layer ``j`` of stage ``s`` as one digit in 0..8."""
        return pos[:, _column(s, j, "ks")] * len(EXPANSIONS) + pos[:, _column(s, j, "e")]

    def _stage_codes(self, pos: np.ndarray, s: int) -> np.ndarray:
        depth_pos = pos[:, _column(s)]
        depth = np.asarray(DEPTHS)[depth_pos]
        code = np.zeros(len(pos), dtype=np.int64)
        for j in range(MAX_DEPTH):
            code = np.where(j < depth, code * UNIT_RADIX + self._units(pos, s, j), code)
        return _DEPTH_OFFSETS[depth_pos] + code

    @staticmethod
    def _decode_stage(pos: np.ndarray, s: int, code: np.ndarray) -> None:
        depth_pos = np.searchsorted(_DEPTH_OFFSETS, code, side="right") - 1
        depth = np.asarray(DEPTHS)[depth_pos]
        local = code - _DEPTH_OFFSETS[depth_pos]
        pos[:, _column(s)] = depth_pos
        for j in range(MAX_DEPTH):
            place = np.maximum(depth - 1 - j, 0)
            unit = np.where(j < depth, local // UNIT_RADIX**place % UNIT_RADIX, 0)
            pos[:, _column(s, j, "ks")] = unit // len(EXPANSIONS)
            pos[:, _column(s, j, "e")] = unit % len(EXPANSIONS)

    # -- strings and OFA's native dict -----------------------------------------------------
    def format(self, row: np.ndarray) -> str:
        row = self.from_positions(self.positions(np.asarray(row).reshape(1, -1)))[0]
        stages = []
        for s in range(NUM_STAGES):
            depth = int(row[_column(s)])
            layers = ",".join(f"k{row[_column(s, j, 'ks')]}e{row[_column(s, j, 'e')]}"
                              for j in range(depth))
            stages.append(f"d{depth}:{layers}")
        return f"r{row[0]}:" + "-".join(stages)

    def parse_string(self, text: str) -> np.ndarray:
        example = ("r224:d2:k3e4,k5e6-d3:k7e6,k5e4,k3e3-d4:k3e3,k3e3,k3e3,k3e3-d2:k5e6,k7e6-"
                   "d2:k3e3,k3e3")
        if not isinstance(text, str):
            raise ValueError(f"{self.name}: expected a string, got {type(text).__name__}")
        head, sep, body = text.strip().partition(":")
        match = re.fullmatch(r"r(\d+)", head)
        if not sep or not match:
            raise ValueError(f"{self.name}: {text!r} must start with 'r<resolution>:' (e.g. "
                             f"{example!r})")
        stages = body.split("-")
        if len(stages) != NUM_STAGES:
            raise ValueError(f"{self.name}: {text!r} has {len(stages)} stages separated by "
                             f"'-'; expected {NUM_STAGES} (e.g. {example!r})")
        row = np.zeros(self.choice_shape, dtype=np.int64)
        row[0] = _allowed(self.name, "resolution", int(match.group(1)), RESOLUTIONS, head)
        row[1:] = self.from_positions(np.zeros((1, len(self.variables)), np.int64))[0, 1:]
        for s, token in enumerate(stages):
            where = f"stage {s} ({token!r})"
            stage = re.fullmatch(r"d(\d+):(.*)", token)
            if not stage:
                raise ValueError(f"{self.name}: {where} must look like 'd3:k3e4,k5e6,k7e3'")
            depth = _allowed(self.name, f"{where} depth", int(stage.group(1)), DEPTHS, token)
            layers = stage.group(2).split(",")
            if len(layers) != depth:
                raise ValueError(f"{self.name}: {where} says depth {depth} but lists "
                                 f"{len(layers)} layers")
            row[_column(s)] = depth
            for j, layer in enumerate(layers):
                field = re.fullmatch(r"k(\d+)e(\d+)", layer)
                if not field:
                    raise ValueError(f"{self.name}: {where} layer {j} {layer!r} must look like "
                                     "'k5e4' (kernel, expansion)")
                row[_column(s, j, "ks")] = _allowed(self.name, f"{where} layer {j} kernel",
                                                    int(field.group(1)), KERNELS, layer)
                row[_column(s, j, "e")] = _allowed(self.name, f"{where} layer {j} expansion",
                                                   int(field.group(2)), EXPANSIONS, layer)
        return row

    def is_native(self, mapping: Mapping[str, Any]) -> bool:
        """OFA's subnet dict: ``ks``, ``e``, ``d`` lists (and ``r``/``image_size``)."""
        return {"ks", "e", "d"} <= set(map(str, mapping))

    def from_native(self, mapping: Mapping[str, Any]) -> np.ndarray:
        """A choices row from OFA's ``{"ks": [20], "e": [20], "d": [5], "r": 224}``.

        ``r`` may be a one-element list (OFA's tutorial) or be named ``image_size`` (OFA's
        accuracy dataset); without either it is 224, as OFA's ``FLOPsTable`` assumes. Entries
        beyond a stage's depth are ignored (OFA's encoders write 0 there); ``wid`` (the
        tutorial's unused width slot) must be None.
        """
        allowed_keys = {"ks", "e", "d", "r", "image_size", "wid"}
        unknown = sorted(set(map(str, mapping)) - allowed_keys)
        if unknown:
            raise ValueError(f"{self.name}: OFA architecture has unknown keys {unknown}; "
                             f"allowed keys are {sorted(allowed_keys)}")
        if mapping.get("wid") is not None:
            raise ValueError(f"{self.name}: OFA key 'wid' must be None (width multiplier 1.0 "
                             f"only), got {mapping['wid']!r}")
        if "r" in mapping and "image_size" in mapping:
            raise ValueError(f"{self.name}: give the resolution as 'r' or 'image_size', not both")
        resolution = mapping.get("r", mapping.get("image_size", self.task.resolution))
        if isinstance(resolution, (list, tuple)) and len(resolution) == 1:
            resolution = resolution[0]
        ks, e, d = (_int_list(self.name, key, mapping[key], n) for key, n in
                    (("ks", NUM_LAYERS), ("e", NUM_LAYERS), ("d", NUM_STAGES)))
        row = np.zeros(self.choice_shape, dtype=np.int64)
        row[0] = _allowed(self.name, "r", resolution, RESOLUTIONS, resolution)
        for s in range(NUM_STAGES):
            depth = _allowed(self.name, f"d[{s}]", d[s], DEPTHS, d[s])
            row[_column(s)] = depth
            for j in range(MAX_DEPTH):
                i = s * MAX_DEPTH + j
                if j < depth:
                    row[_column(s, j, "ks")] = _allowed(self.name, f"ks[{i}]", ks[i], KERNELS,
                                                        ks[i])
                    row[_column(s, j, "e")] = _allowed(self.name, f"e[{i}]", e[i], EXPANSIONS,
                                                       e[i])
                else:
                    row[_column(s, j, "ks")], row[_column(s, j, "e")] = KERNELS[0], EXPANSIONS[0]
        return row

    def to_native(self, arch: Any) -> dict[str, Any]:
        """OFA's dict of an architecture (inactive layers at their canonical k3, e3)."""
        row = self.arch(arch).to_choices()
        return {"ks": [int(row[_column(s, j, "ks")]) for s in range(NUM_STAGES)
                       for j in range(MAX_DEPTH)],
                "e": [int(row[_column(s, j, "e")]) for s in range(NUM_STAGES)
                      for j in range(MAX_DEPTH)],
                "d": [int(row[_column(s)]) for s in range(NUM_STAGES)],
                "r": int(row[0])}

    # -- costs --------------------------------------------------------------------------
    def resolutions(self, choices: np.ndarray) -> np.ndarray:
        """Each architecture's input resolution ``(n,)``."""
        pos = self.positions(choices)
        return np.asarray(RESOLUTIONS, dtype=np.int64)[pos[:, 0]]

    def depth(self, choices: np.ndarray) -> np.ndarray:
        pos = self.positions(choices)
        return np.asarray(DEPTHS, dtype=np.int64)[pos[:, [_column(s) for s in
                                                           range(NUM_STAGES)]]]

    def block_names(self) -> list[str]:
        return [f"s{s}" for s in range(NUM_STAGES)]

    def cost_table(self, choices: np.ndarray, resolution: int | None = None,
                   num_classes: int | None = None, in_channels: int | None = None) -> CostTable:
        """Exact per-stage costs in thop's convention (see ``anb.searchspace.counting``).

        Each architecture runs at its own resolution ``r`` unless ``resolution`` overrides it
        for the whole batch; so ``stem`` and ``head`` hold ``(n,)`` arrays, not ints. The
        stem is the first conv and the fixed first MBConv; the head the final expand, pool,
        feature mix and classifier. SE and global pooling count as adaptive average pools.
        """
        choices = np.asarray(choices)
        pos = self.positions(choices)
        n = len(pos)
        size: Any = (np.full(n, check_resolution(self.name, resolution), dtype=np.int64)
                     if resolution is not None
                     else np.asarray(RESOLUTIONS, dtype=np.int64)[pos[:, 0]])
        num_classes = num_classes or self.task.num_classes
        in_channels = in_channels or self.task.in_channels
        zero = np.zeros(n, dtype=np.int64)

        stem: dict[str, Any] = {"macs": zero, "true_macs": zero, "params": zero}  # (n,) each
        activations = in_channels * size**2
        size = _out(size, 2)
        area = size**2
        _add(stem, _conv(in_channels, STEM_WIDTH, 3, area))
        _add(stem, _bn(STEM_WIDTH, area))
        first = _mbconv_cost(STEM_WIDTH, FIRST_BLOCK_WIDTH, 1, 3, 1, False, size)
        _add(stem, first)
        stem["activations"] = activations + STEM_WIDTH * area + first["activations"]

        per_stage = {name: np.zeros((n, NUM_STAGES), dtype=np.int64) for name in COST_NAMES}
        depth = self.depth(choices)
        for s, (stage, cin) in enumerate(zip(STAGES, stage_inputs(), strict=True)):
            for j in range(MAX_DEPTH):
                k = np.asarray(KERNELS)[pos[:, _column(s, j, "ks")]]
                e = np.asarray(EXPANSIONS)[pos[:, _column(s, j, "e")]]
                stride = stage.stride if j == 0 else 1
                cost = _mbconv_cost(cin if j == 0 else stage.width, stage.width, stride, k, e,
                                    stage.se, size)
                on = (j < depth[:, s]).astype(np.int64)
                for name in COST_NAMES:
                    per_stage[name][:, s] += on * cost[name]
                size = _out(size, stride)

        area = size**2
        last = STAGES[-1].width
        head: dict[str, Any] = {"macs": zero, "true_macs": zero, "params": zero}
        _add(head, _conv(last, FINAL_EXPAND_WIDTH, 1, area))
        _add(head, _bn(FINAL_EXPAND_WIDTH, area))
        head["macs"] = head["macs"] + (area + 1) * FINAL_EXPAND_WIDTH
        _add(head, _conv(FINAL_EXPAND_WIDTH, FEATURE_MIX_WIDTH, 1, 1))
        _add(head, _conv(FEATURE_MIX_WIDTH, num_classes, 1, 1, bias=True))  # the Linear
        head["activations"] = ((last + 2 * FINAL_EXPAND_WIDTH) * area + 2 * FINAL_EXPAND_WIDTH
                               + 2 * FEATURE_MIX_WIDTH + num_classes)
        return CostTable(per_stage, stem, head)

    def cost_units(self, choices: np.ndarray) -> CostUnits:
        """One slot per layer (20): its (kernel, expansion) pair, one of 9, counted once when
        the layer is active, scaled by the ratio of its output map's area at ``r`` to that at
        224 px: a layer's cost grows with its map (exactly so for all but a stride-2 layer's
        expand conv, which runs on the input map, and the SE pool's +1)."""
        pos = self.positions(choices)
        resolution = np.asarray(RESOLUTIONS, dtype=np.int64)[pos[:, 0]]
        size, native = _out(_out(resolution, 2), 1), _out(_out(self.task.resolution, 2), 1)
        active = self.active(pos)
        units, counts, names = [], [], []
        for s, stage in enumerate(STAGES):
            for j in range(MAX_DEPTH):
                stride = stage.stride if j == 0 else 1
                size, native = _out(size, stride), _out(native, stride)
                units.append(self._units(pos, s, j))
                counts.append(active[:, _column(s, j, "ks")] * (size / native) ** 2)
                names.append(f"s{s}_l{j}")
        return CostUnits(np.stack(units, 1), np.stack(counts, 1), (UNIT_RADIX,) * NUM_LAYERS,
                         tuple(names))

    def unit_costs(self) -> UnitCosts:
        """Each layer's ``COST_NAMES`` costs (plus 1 per instance) of its 9 (kernel,
        expansion) units at the task's resolution (``cost_units`` scales counts by each
        layer's map area), and each unit's two parts."""
        units = np.arange(UNIT_RADIX)
        k = np.asarray(KERNELS)[units // len(EXPANSIONS)]
        e = np.asarray(EXPANSIONS)[units % len(EXPANSIONS)]
        size = _out(_out(self.task.resolution, 2), 1)  # after the stem and the fixed block
        tables = []
        for stage, cin in zip(STAGES, stage_inputs(), strict=True):
            for j in range(MAX_DEPTH):
                stride = stage.stride if j == 0 else 1
                cost = _mbconv_cost(cin if j == 0 else stage.width, stage.width, stride, k, e,
                                    stage.se, size)
                tables.append(np.stack([np.asarray(cost[name], dtype=np.float64)
                                        for name in COST_NAMES] + [np.ones(UNIT_RADIX)], 1))
                size = _out(size, stride)
        parts = np.stack([units // len(EXPANSIONS), units % len(EXPANSIONS)], axis=1)
        return UnitCosts(tuple(tables), (*COST_NAMES, "instances"), shared=True,
                         parts=(parts,) * len(tables))

    # -- networks -----------------------------------------------------------------------
    def build(self, arch: Any, num_classes: int | None = None, **options: Any) -> nn.Module:
        """The PyTorch network (``options``: ``dropout``, ``in_channels``); it takes any input
        size, the architecture's own resolution being ``self.resolutions``."""
        from anb.searchspace.ofa_mbv3_model import OFAMobileNetV3

        row = self.arch(arch).to_choices()
        depth = self.depth(row[None])[0]
        layers = [[(int(row[_column(s, j, "ks")]), int(row[_column(s, j, "e")]))
                   for j in range(depth[s])] for s in range(NUM_STAGES)]
        return OFAMobileNetV3(layers, num_classes or self.task.num_classes, **options)


def _mbconv_cost(cin: int, cout: int, stride: int, k: Any, e: Any, se: bool,
                 size: Any) -> dict[str, np.ndarray]:
    """Costs of OFA MBConv layers (arrays ``k``, ``e`` or ints) at input sizes ``size``."""
    expansions = np.atleast_1d(np.asarray(e))
    mids = {int(v): mid_channels(cin, int(v)) for v in np.unique(expansions)}
    mid = np.vectorize(mids.__getitem__, otypes=[np.int64])(expansions)
    area_in, area_out = size**2, _out(size, stride) ** 2
    expand = (expansions != 1).astype(np.int64)
    cost = {"macs": 0 * size, "true_macs": 0 * size, "params": 0 * size}
    _add(cost, _conv(cin, mid, 1, area_in), expand)
    _add(cost, _bn(mid, area_in), expand)
    _add(cost, _conv(mid, mid, k, area_out, groups=mid))
    _add(cost, _bn(mid, area_out))
    if se:
        squeeze = np.vectorize(se_channels, otypes=[np.int64])(mid)
        cost["macs"] = cost["macs"] + (area_out + 1) * mid
        _add(cost, _conv(mid, squeeze, 1, 1, bias=True))
        _add(cost, _conv(squeeze, mid, 1, 1, bias=True))
    _add(cost, _conv(mid, cout, 1, area_out))
    _add(cost, _bn(cout, area_out))
    cost["activations"] = (cin * area_in + expand * 2 * mid * area_in + 2 * mid * area_out
                           + cout * area_out)
    return cost


def _allowed(space: str, what: str, value: Any, allowed: tuple[int, ...], token: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or int(value) not in allowed:
        raise ValueError(f"{space}: {what} is {token!r}; allowed values are {list(allowed)}")
    return int(value)


def _int_list(space: str, key: str, value: Any, length: int) -> list[Any]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != length:
        raise ValueError(f"{space}: OFA key {key!r} must be a list of {length} ints, got "
                         f"{value!r}")
    return list(value)


#: The registered instance (``anb.searchspace.registry``: ``ofa-mbv3``).
SPACE = OFAMobileNetV3Space()
