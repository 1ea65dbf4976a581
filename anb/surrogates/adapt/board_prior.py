"""An analytic prior of a new board's cost, per kind of accelerator (issue 47, item 4).

What a board's hardware already says about an architecture's cost, before any measurement: each
layer's compute from the accelerator's documented parallelism (``anb/configs/accelerators/
boards.toml``, every constant with its public source) and its memory traffic, summed over the
layers of the architecture's exact per-layer shapes into parts (:data:`COMPONENTS`):

- *dpu* (Xilinx DPUCZDX8G / DPUCVDX8G): a ``k x k`` convolution takes
  ``ceil(c_in / ICP) * ceil(c_out / OCP) * ceil(W / PP) * H * k^2`` cycles (channel and pixel
  parallelism, PG338), a depthwise one ``ceil(c / ICP) * ceil(W / PP_dw) * H * k^2``;
- *tpu*: the MXU multiplies 128 x 128 tiles, channels padded to 128 lanes:
  ``ceil(c_in / 128) * ceil(c_out / 128) * 128^2 * H * W * k^2`` MACs at the core's bf16 peak,
  a depthwise convolution one lane group per pass (``ceil(c / 128) * 128^2 * H * W * k^2``);
  traffic in the layer's own channels over the HBM bandwidth;
- *gpu*: FLOPs at the tensor-core peak (depthwise: the non-tensor peak), traffic over the
  memory bandwidth (the two sides of a roofline).

Traffic is two parts, weights and activations: a batch reads a layer's weights once for all
its images and each image's activations on its own, and an accelerator keeps weights on chip
or streams them, so the two move at different speeds per image. Chosen on the validation
split of the whole-board protocol (the prior's parts alone at speeds fitted on 20 random
rows, :mod:`~anb.surrogates.adapt.board_model`, 10 draws, Kendall tau): one traffic part in
channels padded to 128 lanes, as before, ranked TPU v2 / v3 at 0.665 / 0.658, unpadded 0.819
/ 0.751, unpadded and split 0.865 / 0.776 (padded and split 0.659 / 0.649); the split lifts
A100 0.909 -> 0.979 and 3090 0.915 -> 0.967; the DPUs move by at most 0.004.

The prior fixes the shape of the cost (padding, parallelism), not its scale: in
:class:`anb.surrogates.adapt.model.AdaptedModel` the parts join the additive model's non-negative
components, so the ``n`` measurements weigh them, out of fold against the rest of the blend,
and calibrated alone they are a new board's own model
(:mod:`~anb.surrogates.adapt.board_model`). It covers the 2-D MBConv macro spaces
(:class:`anb.searchspace.space.SearchSpace`); elsewhere, or for a device the table does not
hold, :func:`prior_components` returns None.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from anb import resources
from anb.searchspace.base import Space
from anb.searchspace.space import SearchSpace

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport, a dependency there
    import tomli as tomllib

#: The packaged table of accelerator constants (``[device]`` tables, see the module docstring).
BOARDS_FILE = ("accelerators", "boards.toml")
KINDS = ("dpu", "tpu", "gpu")
#: The operations a :class:`Layer` holds.
OPS = ("conv", "depthwise", "elementwise")
#: What :func:`prior_components` returns per architecture: the compute of each of
#: :data:`OPS` (an element-wise layer's on a TPU or a GPU: its traffic), and the
#: convolutions' weight and activation traffic (:func:`traffic`).
COMPONENTS = ("conv_compute", "depthwise_compute", "elementwise", "weights", "activations")
_REQUIRED = {"dpu": ("pixel_parallel", "input_channel_parallel", "output_channel_parallel",
                     "depthwise_pixel_parallel"),
             "tpu": ("lanes", "mxu_flops", "memory_bandwidth", "bytes_per_element"),
             "gpu": ("tensor_flops", "vector_flops", "memory_bandwidth", "bytes_per_element")}


@dataclass(frozen=True)
class Layer:
    """One layer of a batch of architectures: its operation (one of :data:`OPS`), channels
    in and out, output height and width, input pixels, kernel, and how many times each
    architecture has it (0 where absent). An element-wise layer (pooling, squeeze-excite's
    gate, a residual add) runs over ``c_in`` channels of its ``height x width`` map."""

    op: str
    c_in: np.ndarray
    c_out: np.ndarray
    height: int
    width: int
    in_pixels: int
    kernel: np.ndarray
    count: np.ndarray


def boards() -> dict[str, dict[str, Any]]:
    """The packaged accelerator constants, keyed by device name (checked: a known ``kind`` and
    its constants present)."""
    with resources.config_path(*BOARDS_FILE).open("rb") as handle:
        table = tomllib.load(handle)
    for name, spec in table.items():
        if spec.get("kind") not in KINDS:
            raise ValueError(f"{BOARDS_FILE[1]} [{name}]: kind {spec.get('kind')!r} is "
                             f"unknown; allowed: {list(KINDS)}")
        missing = [key for key in _REQUIRED[spec["kind"]] if key not in spec]
        if missing:
            raise ValueError(f"{BOARDS_FILE[1]} [{name}]: {spec['kind']} needs {missing}")
    return table


def device_of(target: str) -> str:
    """The device part of a metric name (``throughput_zcu102`` -> ``zcu102``)."""
    return target.split("_", 1)[1] if "_" in target else target


def layers(space: SearchSpace, choices: np.ndarray, resolution: int) -> list[Layer]:
    """Every layer of ``choices`` (``(n, stages, 4)``) at ``resolution``: stem, per stage the
    first layer's and the later layers' expand, depthwise, squeeze-excite (pool, two 1x1
    convolutions, gate) and project convolutions and residual add, then head, pool and
    classifier (the shapes ``anb.searchspace.counting`` counts)."""
    choices = np.asarray(choices, dtype=np.int64)
    space.ordinal(choices)  # validates shape and values
    one = np.ones(len(choices))
    out, size = _stem(space, resolution, one)
    for s in range(space.num_stages):
        e, k, depth, se = (choices[:, s, f].astype(np.float64) for f in range(4))
        stage, size = _stage(space, s, size, e, k, se, (one, depth - 1))
        out += stage
    return out + _head(space, size, one)


def _stem(space: SearchSpace, resolution: int, one: np.ndarray) -> tuple[list[Layer], int]:
    """The stem convolution and the size of the map it outputs."""
    size = (resolution - 1) // space.stem_stride + 1
    return [Layer("conv", 3 * one, space.stem_channels * one, size, size, resolution**2,
                  3 * one, one)], size


def _stage(space: SearchSpace, s: int, size: int, e: np.ndarray, k: np.ndarray,
           se: np.ndarray, counts: tuple[np.ndarray, np.ndarray]) -> tuple[list[Layer], int]:
    """Stage ``s``'s layers on a ``size`` input map, its first layer ``counts[0]`` times and
    its later layers ``counts[1]`` times (expansion ``e``, kernel ``k``, squeeze-excite
    ``se`` per row), and the size of the map it outputs."""
    spec, one = space.stages[s], np.ones(len(e))
    out = []
    for first, count in zip((True, False), counts, strict=True):
        c_in = spec.in_channels if first else spec.out_channels
        stride = spec.stride if first else 1
        size_out = (size - 1) // stride + 1
        mid, squeeze = c_in * e, max(1, c_in // 4) * one
        out += [Layer("conv", c_in * one, mid, size, size, size**2, one, count * (e != 1)),
                Layer("depthwise", mid, mid, size_out, size_out, size**2, k, count),
                Layer("elementwise", mid, mid, size_out, size_out, size_out**2, one,
                      count * se),
                Layer("conv", mid, squeeze, 1, 1, 1, one, count * se),
                Layer("conv", squeeze, mid, 1, 1, 1, one, count * se),
                Layer("elementwise", mid, mid, size_out, size_out, size_out**2, one,
                      count * se),
                Layer("conv", mid, spec.out_channels * one, size_out, size_out,
                      size_out**2, one, count)]
        if stride == 1 and c_in == spec.out_channels:
            out.append(Layer("elementwise", c_in * one, c_in * one, size_out, size_out,
                             size_out**2, one, count))
        size = size_out
    return out, size


def _head(space: SearchSpace, size: int, one: np.ndarray) -> list[Layer]:
    """The head convolution, the pool and the classifier on a ``size`` map."""
    head = space.head_channels * one
    return [Layer("conv", space.stages[-1].out_channels * one, head, size, size, size**2, one,
                  one),
            Layer("elementwise", head, head, size, size, size**2, one, one),
            Layer("conv", head, space.task.num_classes * one, 1, 1, 1, one, one)]


def compute_time(spec: dict[str, Any], layer: Layer) -> np.ndarray:
    """One convolution's (or, on a DPU, element-wise layer's) compute per architecture:
    cycles on a DPU, seconds at peak on a TPU or a GPU (see the module docstring); an
    element-wise layer on a TPU or a GPU is all memory traffic (:func:`traffic`)."""
    k2, area = layer.kernel**2, layer.height * layer.width
    if spec["kind"] == "dpu":
        in_groups = np.ceil(layer.c_in / spec["input_channel_parallel"])
        if layer.op != "conv":  # depthwise and element-wise: the ALU
            return in_groups * np.ceil(layer.width / spec["depthwise_pixel_parallel"]) \
                * layer.height * k2
        return (in_groups * np.ceil(layer.c_out / spec["output_channel_parallel"])
                * np.ceil(layer.width / spec["pixel_parallel"]) * layer.height * k2)
    if layer.op == "elementwise":
        return np.zeros_like(layer.c_in)
    if spec["kind"] == "tpu":
        lanes = spec["lanes"]
        c_in = np.ceil(layer.c_in / lanes) * lanes
        c_out = lanes if layer.op == "depthwise" else np.ceil(layer.c_out / lanes) * lanes
        return 2 * c_in * c_out * area * k2 / spec["mxu_flops"]
    depthwise = layer.op == "depthwise"
    macs = layer.c_in * (1 if depthwise else layer.c_out) * area * k2
    return 2 * macs / spec["vector_flops" if depthwise else "tensor_flops"]


def traffic(spec: dict[str, Any], layer: Layer) -> tuple[np.ndarray, np.ndarray]:
    """One layer's memory traffic per architecture: its weights, and its input and output
    activations; int8 elements on a DPU, seconds at the memory bandwidth on a TPU or a GPU."""
    weights = np.zeros_like(layer.c_in) if layer.op == "elementwise" else \
        layer.c_out * layer.kernel**2 * (1 if layer.op == "depthwise" else layer.c_in)
    activations = layer.c_in * layer.in_pixels + layer.c_out * layer.height * layer.width
    if spec["kind"] == "dpu":
        return weights, activations
    scale = spec["bytes_per_element"] / spec["memory_bandwidth"]
    return weights * scale, activations * scale


def board_spec(target: str) -> dict[str, Any] | None:
    """The accelerator constants of ``target``'s device, with its resolution (the table's,
    else its device config's); None for a device the table does not hold."""
    spec = boards().get(device_of(target))
    if spec is None:
        return None
    spec = dict(spec)
    if "resolution" not in spec:
        with resources.config_path("devices", f"{device_of(target)}.toml").open("rb") as fh:
            spec["resolution"] = int(tomllib.load(fh).get("resolution", 224))
    return spec


def has_prior(target: str, space: Space) -> bool:
    """Whether :func:`prior_components` knows ``target``'s board in ``space``."""
    return (isinstance(space, SearchSpace) and space.dims == 2
            and device_of(target) in boards())


def prior_components(target: str, choices: np.ndarray, space: Space) -> np.ndarray | None:
    """``(n, len(COMPONENTS))`` prior cost parts of each architecture on ``target``'s board:
    dense (and pointwise) convolution time, depthwise convolution time, element-wise time,
    weight and activation traffic (a DPU's in cycles and int8 elements, a TPU's or a GPU's in
    seconds at peak); None where :func:`has_prior` is false. The measurements weigh them (see
    the module docstring)."""
    if not has_prior(target, space):
        return None
    spec = board_spec(target)
    assert spec is not None and isinstance(space, SearchSpace)
    return _components(spec, layers(space, choices, spec["resolution"]), len(choices))


def unit_table(target: str, space: Space) -> np.ndarray | None:
    """The prior's parts per layer: ``(slots x units + 1, len(COMPONENTS))`` in the layout of
    :func:`anb.surrogates.layer_cost.layer_design` (per slot of ``space.cost_units``, each
    unit's parts for one layer; the last row the stem's and head's), so that
    ``layer_design(choices, space) @ unit_table(target, space)`` is
    :func:`prior_components`; None where :func:`has_prior` is false."""
    if not has_prior(target, space):
        return None
    spec = board_spec(target)
    assert spec is not None and isinstance(space, SearchSpace)
    one = np.ones(1)
    rows, size = [], _stem(space, spec["resolution"], one)[1]
    fixed = _stem(space, spec["resolution"], one)[0]
    for s, stage in enumerate(space.stages):
        radix_e, radix_k, _, radix_se = stage.radices
        unit = np.arange(radix_e * radix_k * radix_se)  # cost_units' order
        e = np.asarray(stage.expansions, dtype=np.float64)[unit // (radix_k * radix_se)]
        k = np.asarray(stage.kernels, dtype=np.float64)[unit // radix_se % radix_k]
        se = np.asarray(stage.se, dtype=np.float64)[unit % radix_se]
        ones, zeros = np.ones(len(unit)), np.zeros(len(unit))
        for counts in ((ones, zeros), (zeros, ones)):  # the first layer, then a later one
            rows.append(_components(spec, _stage(space, s, size, e, k, se, counts)[0],
                                    len(unit)))
        size = _stage(space, s, size, e[:1], k[:1], se[:1], (one, one))[1]
    rows.append(_components(spec, fixed + _head(space, size, one), 1))
    return np.concatenate(rows)


def _components(spec: dict[str, Any], layer_list: list[Layer], n: int) -> np.ndarray:
    """``(n, len(COMPONENTS))``: the prior's parts of ``layer_list`` on the board ``spec``."""
    out = np.zeros((n, len(COMPONENTS)))
    for layer in layer_list:
        column = OPS.index(layer.op)
        weights, activations = traffic(spec, layer)
        if layer.op == "elementwise" and spec["kind"] != "dpu":
            out[:, column] += layer.count * (weights + activations)
            continue
        out[:, column] += layer.count * compute_time(spec, layer)
        out[:, 3] += layer.count * weights
        out[:, 4] += layer.count * activations
    return out
