"""Analytic MACs/params without building a model, vectorised over architectures.

``macs`` follows the benchmark's profiler convention (thop 0.1.1): convolutions and linear
layers count multiply-accumulates, BatchNorm counts 4 per element, adaptive average pooling
``(H*W + 1)`` per channel, activations and element-wise ops nothing. ``true_macs`` counts only
convolution and linear multiply-accumulates. ``activations`` counts the elements
each layer reads and writes (a proxy for memory traffic), in every space: the input plus the
output of each convolution, linear layer, pooling layer (global pooling included) and channel
shuffle; BatchNorm and activation functions (fused into the convolution on a device),
element-wise adds and identities count nothing, and neither does squeeze-excite's path (its
pool, two 1x1 convolutions and gate). ``tests/test_space_originals.py`` checks it against
forward hooks on every space's built network.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from anb.searchspace.arch import Arch, archs_to_choices
from anb.searchspace.base import COST_NAMES, MAX_CLASSES, CostTable, check_resolution
from anb.searchspace.space import SearchSpace

OPERATION_NAMES = ("expand_macs", "dw3_macs", "dw5_macs", "se_macs", "project_macs",
                   "activations", "layers", "se_layers")

__all__ = ["COST_NAMES", "OPERATION_NAMES", "CostTable", "Counts", "cost_table", "count",
           "count_batch", "count_many", "operation_costs", "unit_operation_costs"]


class Counts(NamedTuple):
    """Benchmark-compatible counts of one architecture (absolute units, not millions)."""

    macs: int
    params: int


def _out(size: int, stride: int) -> int:
    """Output size of a conv with padding (k-1)//2: ceil(size / stride)."""
    return (size - 1) // stride + 1


def _conv(cin, cout, k, area_out, groups=1, dims=2, bias=False) -> dict[str, np.ndarray]:
    kernel = np.asarray(k) ** dims
    macs = cout * area_out * (cin // groups) * kernel
    params = cout * (cin // groups) * kernel + (cout if bias else 0)
    return {"macs": macs, "true_macs": macs, "params": params}


def _bn(channels, area) -> dict[str, np.ndarray]:
    return {"macs": 4 * channels * area, "true_macs": 0 * channels, "params": 2 * channels}


def _add(total: dict, part: dict, mask=1) -> None:
    for name in ("macs", "true_macs", "params"):
        total[name] = total[name] + part[name] * mask


def _mbconv(cin: int, cout: int, stride: int, e, k, se, size: int, dims: int) -> dict:
    """Costs of one MBConv layer for arrays ``e, k, se`` at input spatial ``size``."""
    size_out = _out(size, stride)
    area_in, area_out = size**dims, size_out**dims
    mid = cin * e
    expand = (e != 1).astype(np.int64)
    zero = np.zeros_like(e)
    cost = {"macs": zero, "true_macs": zero, "params": zero}
    _add(cost, _conv(cin, mid, 1, area_in, dims=dims), expand)
    _add(cost, _bn(mid, area_in), expand)
    _add(cost, _conv(mid, mid, k, area_out, groups=mid, dims=dims))
    _add(cost, _bn(mid, area_out))
    squeeze = max(1, cin // 4)
    se_cost = {"macs": (area_out + 1) * mid, "true_macs": zero, "params": zero}
    _add(se_cost, _conv(mid, squeeze, 1, 1, dims=dims, bias=True))
    _add(se_cost, _conv(squeeze, mid, 1, 1, dims=dims, bias=True))
    _add(cost, se_cost, se.astype(np.int64))
    _add(cost, _conv(mid, cout, 1, area_out, dims=dims))
    _add(cost, _bn(cout, area_out))
    cost["activations"] = (
        cin * area_in + expand * 2 * mid * area_in + 2 * mid * area_out + cout * area_out
    )
    return cost


def cost_table(
    choices: np.ndarray,
    space: SearchSpace,
    resolution: int = 224,
    num_classes: int = 1000,
    in_channels: int | None = None,
) -> CostTable:
    """Per-stage costs for a ``(n, num_stages, 4)`` choices array (see module docstring)."""
    choices = np.asarray(choices, dtype=np.int64)
    space.ordinal(choices)  # validates shape and values
    dims = space.dims
    in_channels = in_channels if in_channels is not None else (3 if dims == 2 else 1)
    size = _out(resolution, space.stem_stride)
    stem: dict = {}
    _add_fixed(stem, _conv(in_channels, space.stem_channels, 3, size**dims, dims=dims))
    _add_fixed(stem, _bn(space.stem_channels, size**dims))
    stem["activations"] = in_channels * resolution**dims + space.stem_channels * size**dims

    n = choices.shape[0]
    per_stage = {name: np.zeros((n, space.num_stages), dtype=np.int64) for name in COST_NAMES}
    for s, spec in enumerate(space.stages):
        e, k, layers, se = (choices[:, s, f] for f in range(4))
        first = _mbconv(spec.in_channels, spec.out_channels, spec.stride, e, k, se, size, dims)
        size = _out(size, spec.stride)
        rest = _mbconv(spec.out_channels, spec.out_channels, 1, e, k, se, size, dims)
        for name in COST_NAMES:
            per_stage[name][:, s] = first[name] + (layers - 1) * rest[name]

    last = space.stages[-1].out_channels
    head: dict = {}
    area = size**dims
    _add_fixed(head, _conv(last, space.head_channels, 1, area, dims=dims))
    _add_fixed(head, _bn(space.head_channels, area))
    head["macs"] += (area + 1) * space.head_channels
    linear = space.head_channels * num_classes
    head["macs"] += linear
    head["true_macs"] += linear
    head["params"] += linear + num_classes
    # head conv in + out, pool in + out, classifier in + out
    head["activations"] = (last * area + 2 * space.head_channels * area
                           + 2 * space.head_channels + num_classes)
    return CostTable(per_stage, stem, head)


def _add_fixed(total: dict, part: dict) -> None:
    for name in ("macs", "true_macs", "params"):
        total[name] = int(total.get(name, 0) + int(np.asarray(part[name])))


def count_batch(
    choices: np.ndarray,
    space: SearchSpace,
    resolution: int = 224,
    num_classes: int = 1000,
    in_channels: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Benchmark-compatible ``(macs, params)`` arrays for a ``(n, num_stages, 4)`` batch."""
    table = cost_table(choices, space, resolution, num_classes, in_channels)
    return table.total("macs"), table.total("params")


def count(
    arch: Arch,
    resolution: int = 224,
    num_classes: int = 1000,
    *, space: SearchSpace,
    in_channels: int | None = None,
) -> Counts:
    """Benchmark-compatible MACs and params of one architecture, in absolute units.

    ``count(a).macs / 1e6`` rounded to 6 decimals is the dataset's ``model_info.macs``.
    """
    check_resolution(space.name, resolution)
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) \
            or not 1 <= num_classes <= MAX_CLASSES:
        raise ValueError(f"num_classes {num_classes!r} is invalid; allowed: an integer from 1 "
                         f"to {MAX_CLASSES}")
    macs, params = count_batch(arch.to_choices()[None], space, resolution, num_classes, in_channels)
    return Counts(int(macs[0]), int(params[0]))


def count_many(archs: Sequence[Arch], space: SearchSpace, **kwargs
               ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`count_batch` on a list of :class:`Arch` of ``space``."""
    return count_batch(archs_to_choices(archs, space), space, **kwargs)


def _operation_parts(cin: int, cout: int, stride: int, size: int, e: np.ndarray,
                     k: np.ndarray, se: np.ndarray, dims: int) -> tuple[np.ndarray, ...]:
    """One MBConv layer's per-operation costs (``OPERATION_NAMES`` order) for float arrays."""
    size_out = (size - 1) // stride + 1
    area_in, area_out = size**dims, size_out**dims
    mid = cin * e
    expand = (e != 1).astype(np.float64)
    depthwise = mid * k**dims * area_out
    return (cin * mid * area_in * expand, depthwise * (k == 3), depthwise * (k == 5),
            ((area_out + 1) * mid + 2 * mid * max(1, cin // 4)) * se,
            mid * cout * area_out,
            cin * area_in + expand * 2 * mid * area_in + 2 * mid * area_out + cout * area_out,
            np.ones(len(e)), se)


def operation_costs(choices: np.ndarray, space: SearchSpace,
                    resolution: int = 224) -> np.ndarray:
    """Exact per-operation totals of each architecture, ``(n, len(OPERATION_NAMES))``: MACs of
    the expand, 3x3 / 5x5 depthwise, squeeze-excite and project convolutions, activation
    traffic, layers and squeeze-excite layers."""
    choices = np.asarray(choices, dtype=np.int64)
    space.ordinal(choices)  # validates
    dims, n = space.dims, len(choices)
    size = (resolution - 1) // space.stem_stride + 1
    out = np.zeros((n, len(OPERATION_NAMES)))
    for s, spec in enumerate(space.stages):
        e, k, layers, se = (choices[:, s, f].astype(np.float64) for f in range(4))
        for first in (True, False):
            cin = spec.in_channels if first else spec.out_channels
            stride = spec.stride if first else 1
            count = np.ones(n) if first else layers - 1
            parts = _operation_parts(cin, spec.out_channels, stride, size, e, k, se, dims)
            for i, part in enumerate(parts):
                out[:, i] += count * part
            if first:
                size = (size - 1) // stride + 1
    return out


def unit_operation_costs(space: SearchSpace,
                         resolution: int = 224) -> tuple[np.ndarray, ...]:
    """Per cost-unit slot (``space.cost_units`` order: each stage's first layer, then its later
    layers), one layer's ``OPERATION_NAMES`` costs for every unit it may hold, ``(width, 8)``."""
    dims = space.dims
    size = (resolution - 1) // space.stem_stride + 1
    tables = space._value_tables()
    out = []
    for s, spec in enumerate(space.stages):
        radix_e, radix_k, _, radix_se = spec.radices
        combo = np.arange(radix_e * radix_k * radix_se)
        e = tables[s][0][combo // (radix_k * radix_se)].astype(np.float64)
        k = tables[s][1][combo // radix_se % radix_k].astype(np.float64)
        se = tables[s][3][combo % radix_se].astype(np.float64)
        out.append(np.stack(_operation_parts(spec.in_channels, spec.out_channels, spec.stride,
                                             size, e, k, se, dims), axis=1))
        size = (size - 1) // spec.stride + 1
        out.append(np.stack(_operation_parts(spec.out_channels, spec.out_channels, 1, size,
                                             e, k, se, dims), axis=1))
    return tuple(out)
