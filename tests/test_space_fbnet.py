"""The FBNet space of HW-NAS-Bench (Li et al., ICLR 2021), CIFAR-100 setting.

External references: HW-NAS-Bench's ``hw_nas_bench_api/fbnet_models/model_infer.py`` (skeleton
and ops) and HELP's FBNet latency table (``anb/data/help/fbnet_latency.csv.gz``, 5,000
architectures with HW-NAS-Bench's op indices and per-device latencies). HW-NAS-Bench publishes
no FLOPs figure for this space, so the fixed parts are checked against hand-derived counts.
"""
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from anb.resources import HELP_DIR
from anb.searchspace.base import COST_NAMES
from anb.searchspace.fbnet import LAYERS, OPS, SPACE
from anb.searchspace.fbnet_model import ChannelShuffle
from anb.searchspace.registry import get_space
from anb.searchspace.sampler import Sampler

HELP_TABLE = HELP_DIR / "fbnet_latency.csv.gz"
ALL_SKIP = "-".join(["skip"] * 22)
ALL_K5_E6 = "-".join(["k5_e6"] * 22)


@pytest.fixture(scope="module")
def help_table() -> pd.DataFrame:
    if not HELP_TABLE.exists():
        pytest.fail(f"HELP's FBNet table not found at {HELP_TABLE}")
    return pd.read_csv(HELP_TABLE)


@pytest.fixture(scope="module")
def help_choices(help_table) -> np.ndarray:
    return np.stack([SPACE.parse_string(text) for text in help_table["arch"]])


def _thop(model: torch.nn.Module, resolution: int) -> tuple[int, int]:
    from thop import profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        macs, params = profile(model.eval(), inputs=(torch.randn(1, 3, resolution, resolution),),
                               verbose=False)
    return int(macs), int(params)


def test_registered_with_the_task_and_size():
    assert get_space("fbnet") is SPACE
    assert SPACE.size() == 9**22
    assert SPACE.choice_shape == (22,)
    assert (SPACE.task.dataset, SPACE.task.resolution, SPACE.task.num_classes) == ("cifar100", 32,
                                                                                   100)
    assert [v.name for v in SPACE.variables] == [f"layer{i:02d}" for i in range(22)]
    assert all(v.labels == OPS for v in SPACE.variables)
    assert OPS == ("k3_e1", "k3_e1_g2", "k3_e3", "k3_e6", "k5_e1", "k5_e1_g2", "k5_e3", "k5_e6",
                   "skip")


def test_every_help_architecture_parses_round_trips_and_matches_op_idx(help_table, help_choices):
    """All 5,000 strings of HELP's table parse, format back unchanged, and their positions are
    the table's ``op_idx`` (HW-NAS-Bench's op indices)."""
    assert len(help_table) == 5000
    op_idx = np.array([[int(t) for t in text.split()] for text in help_table["op_idx"]])
    assert np.array_equal(SPACE.positions(help_choices), op_idx)
    assert [SPACE.format(row) for row in help_choices] == help_table["arch"].tolist()


@pytest.mark.parametrize("text, message", [
    ("-".join(["k3_e1"] * 21), "has 21 '-'-separated ops; expected 22"),
    ("-".join(["k3_e1"] * 23), "has 23 '-'-separated ops; expected 22"),
    ("-".join(["k3_e1"] * 5 + ["k7_e6"] + ["k3_e1"] * 16),
     r"op 'k7_e6' at layer 5 \(layer05\) is unknown; allowed ops are k3_e1, k3_e1_g2"),
    ("", "has 1 '-'-separated ops"),
])
def test_bad_strings_say_what_and_where(text, message):
    with pytest.raises(ValueError, match=message):
        SPACE.parse_string(text)
    with pytest.raises(ValueError, match=message):
        SPACE.arch(text)


def test_bad_choices_name_the_variable_and_allowed_values():
    bad = np.zeros((2, 22), dtype=np.int64)
    bad[1, 7] = 9
    with pytest.raises(ValueError, match=r"variable 'layer07' has value 9; allowed values are "
                                         r"0-8 \(k3_e1, .*, skip\)"):
        SPACE.positions(bad)
    with pytest.raises(ValueError, match=r"choices must have shape \(n, 22\), got \(2, 21\)"):
        SPACE.cost_table(np.zeros((2, 21), dtype=np.int64))
    with pytest.raises(ValueError, match="integer op indices"):
        SPACE.positions(np.zeros((1, 22)))


def test_index_is_a_bijection():
    choices = Sampler(3, space=SPACE).sample_choices(200)
    index = SPACE.index_from_choices(choices)
    assert len(set(index.tolist())) == len({tuple(r) for r in choices.tolist()}) == 200
    assert np.array_equal(SPACE.choices_from_index(index), choices)
    assert SPACE.format(SPACE.choices_from_index([0])[0]) == "-".join(["k3_e1"] * 22)
    assert SPACE.format(SPACE.choices_from_index([9**22 - 1])[0]) == ALL_SKIP
    assert SPACE.index_from_choices(SPACE.parse_string(ALL_SKIP)[None])[0] == 9**22 - 1


def test_sampler_gives_distinct_valid_archs():
    archs = Sampler(0, space=SPACE).sample(50)
    assert len(set(archs)) == 50
    choices = SPACE.to_choices(archs)
    assert choices.shape == (50, 22)
    assert [SPACE.arch(str(a)) for a in archs] == archs
    assert len({a.id for a in archs}) == 50


def test_records_hold_op_names_and_read_back(help_table):
    arch = SPACE.arch(help_table["arch"][0])
    record = SPACE.to_record(arch)
    assert list(record) == [f"layer{i:02d}" for i in range(22)]
    assert "-".join(record.values()) == help_table["arch"][0]
    assert SPACE.arch({"architecture": record}) == arch
    with pytest.raises(ValueError, match="variable 'layer00' has value 'k9'; allowed values"):
        SPACE.from_record({**record, "layer00": "k9"})


def test_fixed_stem_and_head_and_the_all_skip_network():
    """Hand-derived counts (32 px, stem stride 1 so the head sees 4x4 after strides 2, 2, 2).

    stem: 3x3 conv 3->16 on 32x32 (442,368 MACs, 432 params) + BN (65,536; 32).
    head: 1x1 conv 352->1504 on 4x4 (8,470,528; 529,408) + BN (96,256; 3,008) + pool
    (17 x 1504 = 25,568) + linear 1504->100 (150,400 MACs; 150,500 params).
    all-skip: identity where the shape is kept, else 1x1 conv + BN (HW-NAS-Bench's Skip)
    at layers 1, 5, 9, 13, 17, 21.
    """
    table = SPACE.cost_table(SPACE.to_choices([ALL_SKIP]))
    assert (table.stem["macs"], table.stem["params"]) == (442_368 + 65_536, 432 + 32)
    assert table.stem["true_macs"] == 442_368
    assert (table.head["macs"], table.head["params"]) == (
        8_470_528 + 96_256 + 25_568 + 150_400, 529_408 + 3_008 + 150_500)
    assert table.head["true_macs"] == 8_470_528 + 150_400
    skip_params = {1: 16 * 24 + 48, 5: 24 * 32 + 64, 9: 32 * 64 + 128, 13: 64 * 112 + 224,
                   17: 112 * 184 + 368, 21: 184 * 352 + 704}
    want = [skip_params.get(i, 0) for i in range(22)]
    assert table.per_stage["params"][0].tolist() == want
    assert np.count_nonzero(table.per_stage["macs"][0]) == 6


@pytest.mark.parametrize("resolution, num_classes", [(32, 100), (40, 10)])
def test_cost_table_equals_thop_and_parameter_count(resolution, num_classes):
    archs = Sampler(11, space=SPACE).sample(3) + [SPACE.arch(ALL_SKIP), SPACE.arch(ALL_K5_E6)]
    table = SPACE.cost_table(SPACE.to_choices(archs), resolution, num_classes)
    for i, arch in enumerate(archs):
        model = SPACE.build(arch, num_classes)
        assert _thop(model, resolution) == (table.total("macs")[i], table.total("params")[i])
        assert sum(p.numel() for p in model.parameters()) == table.total("params")[i]


def test_every_op_at_every_layer_equals_thop():
    """Nine uniform networks cover each (layer, op) pair once."""
    for op in OPS:
        text = "-".join([op] * 22)
        table = SPACE.cost_table(SPACE.to_choices([text]))
        macs, params = _thop(SPACE.build(text), 32)
        assert (macs, params) == (table.total("macs")[0], table.total("params")[0]), op
        assert (table.per_stage["true_macs"] <= table.per_stage["macs"]).all()


def _moved_per_layer(model: torch.nn.Module) -> list[int]:
    """Elements read plus written by the convs and shuffles of each searchable layer."""
    moved = [0] * len(model.layers)

    def count(layer: int):
        def hook(module, inputs, output):
            moved[layer] += inputs[0].numel() + output.numel()
        return hook

    for layer, block in enumerate(model.layers):
        for module in block.modules():
            if isinstance(module, (torch.nn.Conv2d, ChannelShuffle)):
                module.register_forward_hook(count(layer))
    with torch.no_grad():
        model.eval()(torch.randn(1, 3, 32, 32))
    return moved


def test_layer_activations_are_what_its_convs_and_shuffles_read_and_write():
    """Per layer, ``activations`` = elements each conv (and channel shuffle) reads plus
    writes, counted with forward hooks on the built model; identity skips move nothing."""
    archs = Sampler(8, space=SPACE).sample(2) + [SPACE.arch(ALL_SKIP)]
    table = SPACE.cost_table(SPACE.to_choices(archs))
    for i, arch in enumerate(archs):
        assert _moved_per_layer(SPACE.build(arch)) == table.per_stage["activations"][i].tolist()
    # e.g. layer02 (24 channels, 32x32) k3_e1_g2: in + 2 x expanded + 2 x shuffled + 2 x
    # depthwise out + out = 8 x 24 x 1024
    grouped = SPACE.cost_table(SPACE.to_choices(["-".join(["k3_e1_g2"] * 22)]))
    assert grouped.per_stage["activations"][0, 2] == 8 * 24 * 1024


def test_cost_units_reproduce_the_layer_costs_exactly():
    """One slot per layer, width 9, count 1: a least-squares fit of a per-(slot, unit) cost
    on sampled archs reproduces every layer cost of unseen archs."""
    train = Sampler(5, space=SPACE).sample_choices(400)
    test = Sampler(6, space=SPACE).sample_choices(50)
    units = SPACE.cost_units(train)
    assert units.widths == (9,) * 22 and units.slot_names == tuple(SPACE.block_names())
    assert np.array_equal(units.counts, np.ones((400, 22)))

    def design(choices):
        u = SPACE.cost_units(choices)
        x = np.zeros((len(choices), 22 * 9))
        x[np.arange(len(choices))[:, None], np.arange(22) * 9 + u.units] = u.counts
        return x

    for name in COST_NAMES:
        cost = SPACE.cost_table(train).per_stage[name].sum(axis=1).astype(float)
        weights, *_ = np.linalg.lstsq(design(train), cost, rcond=None)
        want = SPACE.cost_table(test).per_stage[name].sum(axis=1)
        assert np.array_equal(np.rint(design(test) @ weights).astype(np.int64), want), name


def test_hw_nas_bench_latency_is_additive_over_the_cost_units(help_table, help_choices):
    """HW-NAS-Bench's FPGA latencies are sums of per-(layer, op) lookup-table entries: fitted
    on 4,000 rows with the space's cost units they predict the other 1,000 to the table's
    six digits; and the layers whose fitted op costs coincide are exactly those this
    skeleton gives identical shapes (same in/out channels, stride, input size)."""
    units = SPACE.cost_units(help_choices)
    x = np.zeros((len(help_choices), 22, 9))
    x[np.arange(len(help_choices))[:, None], np.arange(22), units.units] = 1
    x = np.hstack([x[:, :, 1:].reshape(len(x), -1), np.ones((len(x), 1))])  # op 0 as baseline
    latency = help_table["fpga"].to_numpy()
    weights, *_ = np.linalg.lstsq(x[:4000], latency[:4000], rcond=None)
    assert np.abs(x[4000:] @ weights - latency[4000:]).max() < 1e-4 * latency.mean()

    fitted = weights[:-1].reshape(22, 8)
    uniform = SPACE.cost_table(np.repeat(np.arange(9)[:, None], 22, axis=1))
    ours = np.stack([uniform.per_stage[n].T for n in COST_NAMES], axis=1)  # (22, 4, 9)

    def groups(rows: np.ndarray, atol: float) -> list[list[int]]:
        """Layers grouped with the first earlier layer whose row is equal within ``atol``."""
        found: list[list[int]] = []
        for i, row in enumerate(rows):
            match = [g for g in found if np.allclose(rows[g[0]], row, rtol=0, atol=atol)]
            if match:
                match[0].append(i)
            else:
                found.append([i])
        return found

    assert groups(fitted, 1e-3) == groups(ours, 0)
    assert len(groups(ours, 0)) == 12  # 6 stage-opening layers + 6 groups of repeated layers


def test_skeleton_matches_hw_nas_bench():
    channels = [layer.out_channels for layer in LAYERS]
    assert channels == [16] + [24] * 4 + [32] * 4 + [64] * 4 + [112] * 4 + [184] * 4 + [352]
    assert [i for i, layer in enumerate(LAYERS) if layer.stride == 2] == [5, 9, 17]
    assert LAYERS[0].in_channels == 16


def test_model_forward_shape_residuals_and_options():
    arch = Sampler(1, space=SPACE).sample(1)[0]
    model = SPACE.build(arch, num_classes=10).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert SPACE.build(arch)(torch.randn(1, 3, 32, 32)).shape == (1, 100)
    assert SPACE.build(arch, in_channels=1)(torch.randn(1, 1, 32, 32)).shape == (1, 100)
    with pytest.raises(ValueError, match=r"unknown build options \['activation'\]; allowed are "
                                         r"\['dropout', 'in_channels'\]"):
        SPACE.build(arch, activation="relu")

    blocks = SPACE.build(ALL_K5_E6).layers
    assert [bool(b.residual) for b in blocks] == [
        layer.stride == 1 and layer.in_channels == layer.out_channels for layer in LAYERS]
    skips = SPACE.build(ALL_SKIP).layers
    assert [isinstance(s, torch.nn.Identity) for s in skips] == [
        layer.stride == 1 and layer.in_channels == layer.out_channels for layer in LAYERS]


def test_channel_shuffle_interleaves_the_groups():
    x = torch.arange(6.0).reshape(1, 6, 1, 1)
    assert ChannelShuffle(2)(x).flatten().tolist() == [0, 3, 1, 4, 2, 5]
    block = SPACE.build("-".join(["k3_e1_g2"] * 22)).layers[2]
    assert isinstance(block.shuffle, ChannelShuffle) and block.expand[0].groups == 2
    assert block.project[0].groups == 2 and block.depthwise[0].groups == 24


def test_onnx_export_matches_torch(tmp_path):
    from anb.searchspace.onnx_export import export_onnx, run_onnx

    arch = SPACE.arch("-".join(["k3_e1_g2", "skip", "k5_e6", "k5_e1_g2"] * 5 + ["skip", "k3_e3"]))
    model = SPACE.build(arch).eval()
    path = export_onnx(model, tmp_path / "fbnet.onnx", resolution=32)
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(run_onnx(path, x), want, atol=1e-4)
