"""Every shipped space against its original.

Designs are drawn with each original's own rules, written here from the originals'
definitions and independent of anb's code (OFA: ``OFAMobileNetV3.sample_active_subnet`` and
``train_ofa_net.py``'s image sizes; NAS-Bench-201: its string of 6 edges over 5 ops; FBNet:
HW-NAS-Bench's 22 layers of 9 ops; MnasNet: Accel-NASBench's ``block{i}_{e,k,l,se}`` records).
They round-trip through parse, string, record, table, index, encodings, count, build and ONNX
(the whole chain to a fitted benchmark's query is ``tests/test_space_chain.py``). Every
cost is checked against an independent count on the built PyTorch network, at even and odd
resolutions: thop for MACs, the parameters themselves, and forward hooks for the
convolution / linear multiply-accumulates and the activation traffic (the input plus the
output of every convolution, linear, pooling layer and channel shuffle outside
squeeze-excite). Out-of-range indices, op codes and positions are refused, naming the field,
the value and the allowed range.
"""
import random
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from anb.records import new_record, records_to_frame, table_archs, validate_record
from anb.searchspace.encoding import encode
from anb.searchspace.fbnet_model import ChannelShuffle
from anb.searchspace.model import SqueezeExcite
from anb.searchspace.onnx_export import export_onnx, run_onnx
from anb.searchspace.registry import BUILTIN_SPACES, get_space

# -- the originals' own rules ---------------------------------------------------------------
OFA_KERNELS, OFA_EXPANDS, OFA_DEPTHS = [3, 5, 7], [3, 4, 6], [2, 3, 4]
OFA_LAYERS, OFA_STAGES = 20, 5
#: train_ofa_net.py: image_size "128,160,192,224" with continuous_size, IMAGE_SIZE_SEG 4
OFA_IMAGE_SIZES = [size for size in range(128, 224 + 1) if size % 4 == 0]
NB201_OPS = ["none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3"]
FBNET_OPS = ["k3_e1", "k3_e1_g2", "k3_e3", "k3_e6", "k5_e1", "k5_e1_g2", "k5_e3", "k5_e6",
             "skip"]
FBNET_LAYERS = 22
#: Accel-NASBench (MnasNet / EfficientNet-B0 skeleton): per block e, k, layers (block 5 up
#: to 4), squeeze-excite
MNAS_BLOCKS = 7


def ofa_subnet(rng: random.Random) -> dict:
    """``sample_active_subnet``: every layer's kernel and expansion and every stage's depth
    drawn independently, plus one of the training image sizes."""
    return {"ks": [rng.choice(OFA_KERNELS) for _ in range(OFA_LAYERS)],
            "e": [rng.choice(OFA_EXPANDS) for _ in range(OFA_LAYERS)],
            "d": [rng.choice(OFA_DEPTHS) for _ in range(OFA_STAGES)],
            "r": rng.choice(OFA_IMAGE_SIZES)}


def nb201_cell(rng: random.Random) -> str:
    ops = [rng.choice(NB201_OPS) for _ in range(6)]
    return "|{}~0|+|{}~0|{}~1|+|{}~0|{}~1|{}~2|".format(*ops)


def fbnet_net(rng: random.Random) -> str:
    return "-".join(rng.choice(FBNET_OPS) for _ in range(FBNET_LAYERS))


def mnasnet_record(rng: random.Random) -> dict:
    out = {}
    for block in range(MNAS_BLOCKS):
        out |= {f"block{block}_e": rng.choice([1, 4, 6]), f"block{block}_k": rng.choice([3, 5]),
                f"block{block}_l": rng.choice([1, 2, 3, 4] if block == 5 else [1, 2, 3]),
                f"block{block}_se": rng.choice([True, False])}
    return out


def seq1d_record(rng: random.Random) -> dict:
    """anb-seq1d is anb's own: 5 stride-1 MBConv blocks, e 1/4/6, k 3/5, 1-3 layers, no SE."""
    out = {}
    for block in range(5):
        out |= {f"block{block}_e": rng.choice([1, 4, 6]), f"block{block}_k": rng.choice([3, 5]),
                f"block{block}_l": rng.choice([1, 2, 3]), f"block{block}_se": False}
    return out


GENERATORS = {"anb-mnasnet": mnasnet_record, "anb-seq1d": seq1d_record,
              "nasbench201": nb201_cell, "fbnet": fbnet_net, "ofa-mbv3": ofa_subnet}


def designs(name: str, n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [GENERATORS[name](rng) for _ in range(n)]


def test_every_shipped_space_has_a_generator():
    assert sorted(GENERATORS) == sorted(BUILTIN_SPACES)


def test_extents():
    """The sizes the module docstrings state, from the originals' rules."""
    assert get_space("ofa-mbv3").size() == len(OFA_IMAGE_SIZES) * sum(
        (len(OFA_KERNELS) * len(OFA_EXPANDS)) ** d for d in OFA_DEPTHS) ** OFA_STAGES
    assert len(OFA_IMAGE_SIZES) == 25
    assert get_space("ofa-mbv3").size() == 543_966_387_314_312_146_275
    assert get_space("nasbench201").size() == len(NB201_OPS) ** 6 == 15_625
    assert get_space("fbnet").size() == len(FBNET_OPS) ** FBNET_LAYERS
    assert get_space("anb-mnasnet").size() == (3 * 2 * 3 * 2) ** 6 * (3 * 2 * 4 * 2)
    assert get_space("anb-seq1d").size() == (3 * 2 * 3) ** 5


# -- round trips ----------------------------------------------------------------------------
def _same_design(name: str, space, arch, design) -> None:
    """What anb read is the design itself, in the original's own terms."""
    if name == "ofa-mbv3":
        native = space.to_native(arch)
        assert native["r"] == design["r"] and native["d"] == design["d"]
        for s, depth in enumerate(design["d"]):
            active = slice(4 * s, 4 * s + depth)
            assert native["ks"][active] == design["ks"][active]
            assert native["e"][active] == design["e"][active]
    elif name in ("nasbench201", "fbnet"):
        assert str(arch) == design
    else:
        assert space.to_record(arch) == design


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_original_designs_round_trip(name):
    space = get_space(name)
    generated = designs(name, 40, seed=1)
    archs = [space.arch(d) for d in generated]
    for arch, design in zip(archs, generated, strict=True):
        _same_design(name, space, arch, design)
        assert space.arch(str(arch)) == arch
        assert space.arch(space.to_record(arch)) == arch
        record = new_record(arch, space)
        assert validate_record(record, space=space) == arch
    choices = space.to_choices(archs)
    index = space.index_from_choices(choices)
    assert np.array_equal(space.choices_from_index(index), choices)
    ordinal = encode(archs, "ordinal", space=space)
    assert np.array_equal(space.from_positions(ordinal.astype(np.int64)), choices)
    onehot = encode(archs, "onehot", space=space)
    assert onehot.shape == (len(archs), int(space.radices().sum()))
    assert np.array_equal(onehot.sum(axis=1), np.full(len(archs), len(space.variables)))
    assert table_archs(records_to_frame([new_record(a, space) for a in archs], space),
                       space=space) == archs
    table = space.cost_table(choices)
    assert (table.total("macs") > table.total("true_macs")).all()


# -- an independent count on the built network ----------------------------------------------
COUNTED = (nn.Conv1d, nn.Conv2d, nn.Linear, nn.AvgPool2d, nn.AdaptiveAvgPool1d,
           nn.AdaptiveAvgPool2d, ChannelShuffle)


def measured_costs(model: nn.Module, shape: tuple[int, ...]) -> dict[str, int]:
    """MACs (thop 0.1.1), parameters, and from forward hooks the conv / linear
    multiply-accumulates (all) and the traffic of every counted layer outside squeeze-excite."""
    from thop import profile

    model = model.eval()
    inside_se = {m for se in model.modules() if isinstance(se, SqueezeExcite)
                 for m in se.modules()}
    moved, true_macs = [0], [0]

    def hook(module, inputs, output):
        if module not in inside_se:
            moved[0] += inputs[0].numel() + output.numel()
        if isinstance(module, (nn.Conv1d, nn.Conv2d)):
            true_macs[0] += (output.numel() * module.in_channels // module.groups
                             * int(np.prod(module.kernel_size)))
        elif isinstance(module, nn.Linear):
            true_macs[0] += output.numel() * module.in_features

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, COUNTED)]
    with torch.no_grad():
        model(torch.randn(*shape))
    for handle in handles:
        handle.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        macs, params = profile(model, inputs=(torch.randn(*shape),), verbose=False)
    assert params == sum(p.numel() for p in model.parameters())
    return {"macs": int(macs), "params": int(params), "true_macs": true_macs[0],
            "activations": moved[0]}


def _analytic(space, arch, resolution):
    table = space.cost_table(space.to_choices([arch]), resolution=resolution)
    return {name: int(table.total(name)[0]) for name in ("macs", "params", "true_macs",
                                                          "activations")}


#: (space, resolution, designs): the task's resolution and others, odd ones where the space's
#: network takes them (NAS-Bench-201's reduction pools 2x2 without padding while its conv
#: rounds up, so only multiples of 4 run there)
COST_CASES = [
    ("ofa-mbv3", 128, 2), ("ofa-mbv3", 132, 1), ("ofa-mbv3", 204, 1), ("ofa-mbv3", 224, 1),
    ("ofa-mbv3", 131, 1),
    ("fbnet", 32, 2), ("fbnet", 33, 2), ("fbnet", 36, 1),
    ("nasbench201", 32, 3), ("nasbench201", 16, 2),
    ("anb-mnasnet", 224, 1), ("anb-mnasnet", 97, 2),
    ("anb-seq1d", 1000, 1), ("anb-seq1d", 333, 2),
]


@pytest.mark.parametrize("name, resolution, n", COST_CASES)
def test_costs_equal_an_independent_count_on_the_built_network(name, resolution, n):
    space = get_space(name)
    generated = designs(name, n, seed=resolution)
    if name == "ofa-mbv3" and resolution in OFA_IMAGE_SIZES:
        generated = [{**d, "r": resolution} for d in generated]  # the space's own resolution
    if name == "nasbench201":
        generated.append("|avg_pool_3x3~0|+|avg_pool_3x3~0|avg_pool_3x3~1|+"
                         "|avg_pool_3x3~0|avg_pool_3x3~1|avg_pool_3x3~2|")
    for design in generated:
        arch = space.arch(design)
        own = int(space.resolutions(space.to_choices([arch]))[0])
        override = None if own == resolution else resolution
        model = space.build(arch)
        shape = space.task.input_shape(1, resolution)
        assert measured_costs(model, shape) == _analytic(space, arch, override), \
            (str(arch), resolution)


def test_ofa_resolutions_are_the_training_image_sizes():
    space = get_space("ofa-mbv3")
    assert list(space.variables[0].values) == OFA_IMAGE_SIZES
    base = designs("ofa-mbv3", 1, seed=3)[0]
    for size in OFA_IMAGE_SIZES:
        arch = space.arch({**base, "r": size})
        assert str(arch).startswith(f"r{size}:")
        assert space.resolutions(space.to_choices([arch])).tolist() == [size]
    for size in (124, 126, 131, 200 + 2, 228):
        with pytest.raises(ValueError, match=rf"r is {size}; allowed values are \[128, 132, "):
            space.arch({**base, "r": size})
    refused = r"ofa-mbv3: resolution must be an integer from 1 to 8192 \(pixels\), got 0"
    with pytest.raises(ValueError, match=refused):
        space.cost_table(space.to_choices([space.arch(base)]), resolution=0)


def test_nasbench201_refuses_sizes_its_network_cannot_take():
    space = get_space("nasbench201")
    arch = space.arch(designs("nasbench201", 1)[0])
    with pytest.raises(ValueError, match="resolution must be a positive multiple of 4"):
        space.cost_table(space.to_choices([arch]), resolution=30)
    with pytest.raises(RuntimeError):
        space.build(arch)(torch.randn(1, 3, 30, 30))


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_onnx_export_of_an_original_design(name, tmp_path):
    space = get_space(name)
    design = designs(name, 1, seed=5)[0]
    if name == "ofa-mbv3":
        design = {**design, "r": 128}  # the smallest: quick on two cores
    arch = space.arch(design)
    model = space.build(arch).eval()
    size = int(space.resolutions(space.to_choices([arch]))[0])
    shape = space.task.input_shape(1, size)
    path = export_onnx(model, tmp_path / "m.onnx", input_shape=shape)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(run_onnx(path, x), want, rtol=1e-3, atol=1e-4)


# -- out-of-range input ---------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_indices_outside_the_space_are_refused(name):
    space = get_space(name)
    size = space.size()
    last = space.choices_from_index([size - 1])
    assert space.index_from_choices(last).tolist() == [size - 1]
    for bad in (size, size + 1, -1):
        with pytest.raises(ValueError, match=rf"{name}: index {bad} is outside the space; "
                                             rf"allowed indices are 0 to {size - 1}"):
            space.choices_from_index([0, bad])
    with pytest.raises(ValueError, match=rf"{name}: index 1.5 is not an integer"):
        space.choices_from_index([1.5])


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_positions_outside_each_variable_are_refused(name):
    """An ordinal / position row (what encodings and search operators hold) must not wrap:
    -1 would otherwise pick a variable's last value."""
    space = get_space(name)
    good = space.positions(space.choices_from_index([0, 1]))
    radices = space.radices()
    names = space.position_names()
    for column in (0, len(radices) - 1):
        for value in (-1, int(radices[column])):
            bad = good.copy()
            bad[1, column] = value
            # an op space's positions are its op codes: the op-code message
            message = (rf"variable '{names[column]}' has value {value}; allowed values are "
                       rf"0[ -].*{radices[column] - 1}" if name in ("nasbench201", "fbnet") else
                       rf"position {value} of variable '{names[column]}' is outside its range "
                       rf"0 to {radices[column] - 1}")
            with pytest.raises(ValueError, match=message):
                space.from_positions(bad)


@pytest.mark.parametrize("name, ops", [("nasbench201", NB201_OPS), ("fbnet", FBNET_OPS)])
def test_op_codes_outside_the_ops_are_refused(name, ops):
    space = get_space(name)
    row = space.to_choices([designs(name, 1)[0]])
    for value in (-1, len(ops), 99):
        bad = row.copy()
        bad[0, 2] = value
        with pytest.raises(ValueError, match=rf"variable '{space.variables[2].name}' has value "
                                             rf"{value}; allowed values are 0"):
            space.positions(bad)
        with pytest.raises(ValueError, match=rf"has value {value}"):
            space.cost_table(bad)


@pytest.mark.parametrize("name, column, value, message", [
    ("ofa-mbv3", 0, -1, r"variable 'r' has value -1 .*allowed values are \[128, 132"),
    ("ofa-mbv3", 2, -1, r"variable 'ks0' has value -1 .*allowed values are \[3, 5, 7\]"),
    ("ofa-mbv3", 3, 8, r"variable 'e0' has value 8 .*allowed values are \[3, 4, 6\]"),
    ("anb-mnasnet", (0, 0), -1, r"stage 0 field 'e' has value -1; allowed values are \[1, 4"),
    ("anb-mnasnet", (6, 1), 7, r"stage 6 field 'k' has value 7; allowed values are \[3, 5\]"),
    ("anb-seq1d", (4, 3), 1, r"stage 4 field 'se' has value 1; allowed values are \[False\]"),
])
def test_choice_values_outside_the_space_are_refused(name, column, value, message):
    space = get_space(name)
    bad = space.choices_from_index([0, 5]).copy()
    bad[(1, *column) if isinstance(column, tuple) else (1, column)] = value
    with pytest.raises(ValueError, match=message):
        space.positions(bad)
    with pytest.raises(ValueError, match=message):
        space.index_from_choices(bad)


def test_count_command_takes_every_ofa_resolution_and_refuses_before_printing():
    """``anb space count`` on OFA rows at the new resolutions; one bad row among good ones
    exits 2 with nothing on stdout."""
    import subprocess
    import sys
    from pathlib import Path

    anb = [str(Path(sys.executable).with_name("anb")), "space", "count", "--space", "ofa-mbv3"]
    space = get_space("ofa-mbv3")
    base = designs("ofa-mbv3", 1, seed=9)[0]
    good = [str(space.arch({**base, "r": size})) for size in (128, 204)]
    out = subprocess.run(anb + good, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    macs = [round(_analytic(space, space.arch(text), None)["macs"] / 1e6, 6) for text in good]
    assert [float(line.rsplit(",", 2)[1]) for line in out.stdout.splitlines()[1:]] == macs
    bad = good[0].replace("r128:", "r206:")
    out = subprocess.run(anb + [good[0], bad], capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (2, "")
    assert "resolution is 'r206'; allowed values are [128, 132," in out.stderr
