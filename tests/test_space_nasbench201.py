"""The NAS-Bench-201 space: strings, indexing, sampling, exact costs, builder and ONNX."""
import csv
import gzip
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from anb.resources import HELP_DIR
from anb.searchspace.nasbench201 import OPS, SPACE
from anb.searchspace.nasbench201_model import InferCell, ResNetBasicblock
from anb.searchspace.onnx_export import export_onnx, run_onnx
from anb.searchspace.registry import get_space
from anb.searchspace.sampler import Sampler
from tests.conftest import REPO

LATENCY_CSV = HELP_DIR / "nasbench201_latency.csv.gz"
NONE = "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|"
CONV3 = ("|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+"
         "|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|")
ARCH0 = ("|avg_pool_3x3~0|+|nor_conv_1x1~0|skip_connect~1|+"
         "|nor_conv_1x1~0|skip_connect~1|skip_connect~2|")
SAMPLED = [str(a) for a in Sampler(7, space=SPACE).sample(4)] + [NONE, CONV3, ARCH0]


def _thop(model, shape):
    from thop import profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        macs, params = profile(model.eval(), inputs=(torch.randn(*shape),), verbose=False)
    return int(macs), int(params)


def test_registered_under_its_name_without_importing_torch():
    assert get_space("nasbench201") is SPACE and SPACE.size() == 15_625
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "import sys; import anb.searchspace.nasbench201; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_every_nasbench201_string_parses_is_distinct_and_round_trips():
    with gzip.open(LATENCY_CSV, "rt", newline="") as handle:
        strings = [row["arch"] for row in csv.DictReader(handle)]
    assert len(strings) == 15_625
    choices = np.stack([SPACE.parse_string(s) for s in strings])
    assert len({tuple(r) for r in choices.tolist()}) == 15_625
    assert [SPACE.format(r) for r in choices] == strings
    assert sorted(SPACE.index_from_choices(choices).tolist()) == list(range(15_625))


def test_edge_order_and_op_indices_follow_the_nasbench201_string():
    assert SPACE.block_names() == ["edge_1_0", "edge_2_0", "edge_2_1", "edge_3_0", "edge_3_1",
                                   "edge_3_2"]
    assert SPACE.parse_string(ARCH0).tolist() == [4, 2, 1, 2, 1, 1]
    assert OPS == ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
    assert SPACE.choice_shape == (6,)


@pytest.mark.parametrize("text, message", [
    ("|none~0|+|none~0|none~1|", "2 node groups separated by '\\+', need 3"),
    ("|conv~0|+|none~0|none~1|+|none~0|none~1|none~2|", "unknown op 'conv' in 'conv~0'"),
    ("|none~0|+|none~1|none~0|+|none~0|none~1|none~2|",
     "token 'none~1' is input 0 of node 2, so it must end in '~0'"),
    ("|none~0|+|none~0|none~1|+|none~0|none~1|", "node 3 has 2 inputs"),
    ("none~0|+|none~0|none~1|+|none~0|none~1|none~2|", "node 1 group 'none~0|' must start"),
    ("|none|+|none~0|none~1|+|none~0|none~1|none~2|", "token 'none' is input 0 of node 1"),
])
def test_bad_strings_say_what_token_where_and_what_is_allowed(text, message):
    with pytest.raises(ValueError, match=message) as error:
        SPACE.parse_string(text)
    assert "avg_pool_3x3" in str(error.value) and repr(text) in str(error.value)


def test_bad_choices_name_the_variable_value_and_allowed_values():
    with pytest.raises(ValueError, match="variable 'edge_2_1' has value 5; allowed values are "
                                         "0 \\(none\\), 1 \\(skip_connect\\)"):
        SPACE.positions(np.array([[0, 0, 5, 0, 0, 0]]))
    with pytest.raises(ValueError, match="choices must have shape \\(n, 6\\), got \\(1, 5\\)"):
        SPACE.cost_table(np.zeros((1, 5), dtype=np.int64))
    with pytest.raises(ValueError, match="resolution must be a positive multiple of 4"):
        SPACE.cost_table(np.zeros((1, 6), dtype=np.int64), resolution=30)


def test_index_is_a_bijection_onto_the_space():
    index = np.arange(SPACE.size())
    choices = SPACE.choices_from_index(index)
    assert np.array_equal(SPACE.index_from_choices(choices), index)
    assert len({tuple(r) for r in choices.tolist()}) == SPACE.size()


def test_sampler_gives_distinct_valid_archs():
    archs = Sampler(0, space=SPACE).sample(50)
    assert len(set(archs)) == 50
    for arch in archs:
        assert SPACE.arch(str(arch)) == arch and len(arch.id) == 16


def test_records_hold_op_names_and_read_back():
    arch = SPACE.arch(ARCH0)
    record = SPACE.to_record(arch)
    assert record == {"edge_1_0": "avg_pool_3x3", "edge_2_0": "nor_conv_1x1",
                      "edge_2_1": "skip_connect", "edge_3_0": "nor_conv_1x1",
                      "edge_3_1": "skip_connect", "edge_3_2": "skip_connect"}
    assert SPACE.arch({"architecture": record}) == arch
    with pytest.raises(ValueError, match="'edge_1_0' has value 'conv'; allowed values are"):
        SPACE.from_record({**record, "edge_1_0": "conv"})


@pytest.mark.parametrize("text", SAMPLED)
def test_cost_table_equals_the_profiler_and_the_parameter_count(text):
    model = SPACE.build(text)
    table = SPACE.cost_table(SPACE.to_choices(text))
    macs, params = _thop(model, (1, 3, 32, 32))
    assert (int(table.total("macs")[0]), int(table.total("params")[0])) == (macs, params)
    assert params == sum(p.numel() for p in model.parameters())


def test_cost_table_equals_the_profiler_at_other_sizes_and_classes():
    text = SAMPLED[0]
    model = SPACE.build(text, num_classes=120, in_channels=1)
    table = SPACE.cost_table(SPACE.to_choices(text), resolution=16, num_classes=120,
                             in_channels=1)
    assert (int(table.total("macs")[0]), int(table.total("params")[0])) == _thop(model,
                                                                                (1, 1, 16, 16))


@pytest.mark.parametrize("task, classes, resolution, params, flops", [
    ("cifar10", 10, 32, (0.073306, 1.531546), (7.78305, 220.11969)),
    ("cifar100", 100, 32, (0.079156, 1.537396), (7.7889, 220.12554)),
    ("ImageNet16-120", 120, 16, (0.080456, 1.538696), (1.9534, 55.03756)),
])
def test_published_nasbench201_ranges(task, classes, resolution, params, flops):
    """NAS-Bench-201-v1_1-096897's ``params`` (MB = 1e6) and ``flop`` (MFLOPs) ranges over all
    15,625 cells, as read from the benchmark file by HPOBench's NAS-Bench-201 bounds script
    and used as ideal/nadir points by EvoXBench's C10/MOP problems. NAS-Bench-201 counts
    FLOPs with xautodl's ``utils/flop_benchmark.py``: conv and linear multiply-accumulates plus
    the linear bias (pools are hooked but not summed), i.e. ``true_macs + num_classes``.
    The smallest cell is all ``none`` (no conv, fewest params), the largest all
    ``nor_conv_3x3``."""
    table = SPACE.cost_table(SPACE.to_choices([NONE, CONV3]), resolution, classes)
    assert np.array_equal(table.total("params"), np.round(np.array(params) * 1e6))
    assert np.array_equal(table.total("true_macs") + classes, np.round(np.array(flops) * 1e6))
    every = SPACE.cost_table(SPACE.choices_from_index(np.arange(SPACE.size())), resolution,
                             classes)
    assert every.total("params").min() == table.total("params")[0]
    assert every.total("true_macs").max() == table.total("true_macs")[1]


def test_hand_counted_blocks():
    """A conv3x3 edge over 15 cells: 5 x (16^2 x 9 x 32^2 + 32^2 x 9 x 16^2 + 64^2 x 9 x 8^2)
    MACs; it reads and writes C x H x W elements in each cell."""
    table = SPACE.cost_table(SPACE.to_choices([CONV3, NONE]))
    assert table.per_stage["true_macs"][0].tolist() == [15 * 2_359_296] * 6
    assert table.per_stage["activations"][0].tolist() == [5 * 2 * (16_384 + 8_192 + 4_096)] * 6
    assert table.per_stage["params"][0].tolist() == [5 * (2_336 + 9_280 + 36_992)] * 6
    assert not any(table.per_stage[name][1].any() for name in table.per_stage)
    assert table.stem == {"macs": 507_904, "true_macs": 442_368, "params": 464,
                          "activations": 3 * 1_024 + 16 * 1_024}
    assert table.head["true_macs"] == 7_783_050 - 442_368 - 10


def test_cost_units_reproduce_the_cost_table():
    """Each slot's unit is its edge's op; one cost per op (taken from uniform cells)
    reproduces every edge column exactly."""
    uniform = SPACE.cost_table(np.repeat(np.arange(len(OPS))[:, None], 6, axis=1))
    choices = SPACE.choices_from_index(Sampler(3, space=SPACE).sample_indices(200))
    units = SPACE.cost_units(choices)
    table = SPACE.cost_table(choices)
    assert units.widths == (5,) * 6 and units.slot_names == tuple(SPACE.block_names())
    for name, columns in table.per_stage.items():
        per_op = uniform.per_stage[name][:, 0]
        assert np.array_equal(per_op[units.units] * units.counts, columns)


def test_network_layout_and_forward_shape():
    model = SPACE.build(ARCH0, num_classes=7).eval()
    assert [type(c) for c in model.cells].count(ResNetBasicblock) == 2
    assert [type(c) for c in model.cells].count(InferCell) == 15
    with torch.no_grad():
        assert model(torch.randn(3, 3, 32, 32)).shape == (3, 7)
    with pytest.raises(ValueError, match="unknown build options \\['dropout'\\]"):
        SPACE.build(ARCH0, dropout=0.1)


def test_onnx_export_matches_torch(tmp_path):
    model = SPACE.build(SAMPLED[1]).eval()
    path = export_onnx(model, tmp_path / "nb201.onnx", resolution=32)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(run_onnx(path, x.numpy()), want, atol=1e-4)


def _reference_cell(ops, x):
    """Node j = sum over i < j of op(i -> j)(node i), for the parameter-free ops."""
    apply = {"none": lambda t: torch.zeros_like(t), "skip_connect": lambda t: t,
             "avg_pool_3x3": lambda t: torch.nn.functional.avg_pool2d(
                 t, 3, 1, 1, count_include_pad=False)}
    nodes, edge = [x], 0
    for node in (1, 2, 3):
        nodes.append(sum(apply[ops[edge + i]](nodes[i]) for i in range(node)))
        edge += node
    return nodes[-1]


def test_cell_wires_each_edge_to_its_nodes():
    rng = np.random.default_rng(0)
    free = ["none", "skip_connect", "avg_pool_3x3"]
    x = torch.randn(2, 4, 6, 6)
    for _ in range(20):
        ops = [free[i] for i in rng.integers(0, 3, 6)]
        with torch.no_grad():
            got = InferCell(ops, 4)(x)
        torch.testing.assert_close(got, _reference_cell(ops, x), rtol=0, atol=1e-6)


def test_module_names_follow_xautodl_so_its_state_dicts_load():
    """Checked once against xautodl 1.0.0's TinyNetwork: its state dict loads strictly and the
    logits are identical; these are the names that makes work."""
    keys = set(SPACE.build(ARCH0).state_dict())
    assert {"stem.0.weight", "stem.1.running_mean", "cells.0.layers.1.op.1.weight",
            "cells.5.conv_a.op.1.weight", "cells.5.downsample.1.weight",
            "cells.16.layers.3.op.2.bias", "lastact.0.weight", "classifier.bias"} <= keys
    assert not any(k.startswith("cells.0.layers.0.") for k in keys)  # the pool has no state
