"""The OFA MobileNetV3 space: strings, native dicts, a bijective index, exact costs, networks."""
import warnings

import numpy as np
import pytest
import torch

from anb.searchspace import Sampler, get_space
from anb.searchspace.ofa_mbv3 import RESOLUTIONS, SPACE, STAGE_SIZE

EXAMPLE = ("r176:d2:k3e4,k5e6-d3:k7e6,k5e4,k3e3-d4:k3e3,k5e3,k7e4,k3e6-d2:k5e6,k7e6-"
           "d3:k3e3,k7e3,k5e4")
LARGEST = {"ks": [7] * 20, "e": [6] * 20, "d": [4] * 5, "r": 224}
SMALLEST = {"ks": [3] * 20, "e": [3] * 20, "d": [2] * 5, "r": 224}
REST = "-".join(["d2:k3e3,k3e3"] * 4)  # four smallest stages


def _random_choices(n: int, seed: int = 0, resolution_pos: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 3, size=(n, len(SPACE.variables)))
    pos[:, 0] = rng.integers(0, len(RESOLUTIONS), n) if resolution_pos is None else resolution_pos
    return SPACE.from_positions(pos)


def _thop(model, resolution):
    from thop import profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        macs, params = profile(model.eval(), inputs=(torch.randn(1, 3, resolution, resolution),),
                               verbose=False)
    return int(macs), int(params)


def test_registered_under_its_name():
    assert get_space("ofa-mbv3") is SPACE
    assert SPACE.task.resolution == 224 and SPACE.task.num_classes == 1000


def test_size_is_the_papers_count_times_25_resolutions():
    """OFA paper (Cai et al., ICLR 2020, sec. 3.2): ((3x3)^2 + (3x3)^3 + (3x3)^4)^5 ~ 2e19
    subnets per resolution; OFA trains them at 128-224 px in steps of 4 (train_ofa_net.py)."""
    assert STAGE_SIZE == 9**2 + 9**3 + 9**4
    assert RESOLUTIONS == tuple(range(128, 225, 4)) and len(RESOLUTIONS) == 25
    assert SPACE.size() == 25 * (9**2 + 9**3 + 9**4) ** 5 == 543_966_387_314_312_146_275
    assert round(SPACE.size() / 25, -19) == 2e19
    assert SPACE.version == "2"


def test_version_1_strings_and_dicts_read_unchanged():
    """Version 1 (resolutions 160-224 step 16) persisted strings, records and OFA dicts: they
    read as the same architectures with the same ids."""
    arch = SPACE.arch(EXAMPLE)
    assert str(arch) == EXAMPLE and arch.id == SPACE.arch_id(EXAMPLE)
    assert SPACE.arch({**LARGEST, "r": 208}).to_choices()[0] == 208


def test_string_round_trip_and_canonical_form():
    arch = SPACE.arch(EXAMPLE)
    assert str(arch) == EXAMPLE
    assert SPACE.arch(f"  {EXAMPLE} ") == arch
    for arch in SPACE.archs_from_choices(_random_choices(30, seed=3)):
        assert SPACE.arch(str(arch)) == arch
        assert SPACE.arch(SPACE.to_record(arch)) == arch


@pytest.mark.parametrize("text, message", [
    ("d2:k3e4", "must start with 'r<resolution>:'"),
    ("r224:d2:k3e3,k3e3", "has 1 stages separated by '-'; expected 5"),
    ("r225:" + REST + "-d2:k3e3,k3e3", r"resolution is 'r225'; allowed values are \[128, 132,"),
    ("r224:d5:k3e3,k3e3-" + REST,
     r"stage 0 .* depth is 'd5:k3e3,k3e3'; allowed values are \[2, 3, 4\]"),
    ("r224:d3:k3e3,k3e3-" + REST, "stage 0 .* says depth 3 but lists 2 layers"),
    ("r224:d2:k3e3,k4e3-" + REST,
     r"stage 0 .* layer 1 kernel is 'k4e3'; allowed values are \[3, 5, 7\]"),
    ("r224:" + REST + "-d2:k3e3,k3e5",
     r"stage 4 .* layer 1 expansion is 'k3e5'; allowed values are \[3, 4, 6\]"),
    ("r224:" + REST + "-d2:k3e3,3x3", "layer 1 '3x3' must look like 'k5e4'"),
    ("r224:" + REST + "-2:k3e3", r"stage 4 \('2:k3e3'\) must look like"),
])
def test_parse_errors_say_what_and_where(text, message):
    with pytest.raises(ValueError, match=message):
        SPACE.parse_string(text)


def test_index_is_a_bijection_onto_distinct_architectures():
    # every setting of the last stage once: distinct architectures, indices round-trip
    first = SPACE.choices_from_index(range(STAGE_SIZE))
    assert len(np.unique(first, axis=0)) == STAGE_SIZE  # canonical rows: distinct archs
    assert SPACE.index_from_choices(first).tolist() == list(range(STAGE_SIZE))
    # beyond 64 bits: exact Python ints
    rng = np.random.default_rng(1)
    big = [0, SPACE.size() - 1] + [int(rng.integers(0, 2**62)) * 23 + int(v) for v in range(20)]
    assert SPACE.index_from_choices(SPACE.choices_from_index(big)).tolist() == big
    choices = _random_choices(300, seed=2)
    index = SPACE.index_from_choices(choices)
    assert np.array_equal(SPACE.choices_from_index(index), choices)
    assert len(set(index.tolist())) == len({str(a) for a in SPACE.archs_from_choices(choices)})
    with pytest.raises(ValueError, match=r"index 543966387314312146275 is outside the space"):
        SPACE.choices_from_index([SPACE.size()])


def test_inactive_layers_do_not_change_the_architecture():
    row = SPACE.parse_string(EXAMPLE)
    other = row.copy()
    other[1 + 2 * 2 + 1] = 7   # stage 0 (depth 2) layer 2 kernel: inactive
    other[1 + 2 * 3 + 2] = 6   # stage 0 layer 3 expansion: inactive
    assert SPACE.index_from_choices(other[None]) == SPACE.index_from_choices(row[None])
    assert SPACE.format(other) == EXAMPLE
    active = SPACE.active(SPACE.positions(row[None]))[0]
    assert active.sum() == 1 + 5 + 2 * (2 + 3 + 4 + 2 + 3)
    assert SPACE.depth(row[None]).tolist() == [[2, 3, 4, 2, 3]]


def test_positions_name_the_variable_and_the_allowed_values():
    row = SPACE.parse_string(EXAMPLE)[None].copy()
    row[0, 0] = 225
    with pytest.raises(ValueError, match=r"variable 'r' has value 225 .* \[128, 132, 136, 140"):
        SPACE.positions(row)
    row = SPACE.parse_string(EXAMPLE)[None].copy()
    row[0, 1 + 9 + 1] = 4
    with pytest.raises(ValueError, match=r"variable 'ks4' has value 4 .* \[3, 5, 7\]"):
        SPACE.positions(row)
    with pytest.raises(ValueError, match="choices must have shape"):
        SPACE.positions(np.zeros((2, 45), dtype=np.int64))


def test_native_ofa_dict_is_read_and_written():
    native = {"ks": [3, 5, 0, 0, 7, 5, 3, 0, 3, 5, 7, 3, 5, 7, 0, 0, 3, 7, 5, 0],
              "e": [4, 6, 0, 0, 6, 4, 3, 0, 3, 3, 4, 6, 6, 6, 0, 0, 3, 3, 4, 0],
              "d": [2, 3, 4, 2, 3], "r": [176]}
    arch = SPACE.arch(native)
    assert str(arch) == EXAMPLE
    assert SPACE.arch({"architecture": native}) == arch
    assert SPACE.arch({**{k: v for k, v in native.items() if k != "r"},
                       "image_size": 176, "wid": None}) == arch
    again = SPACE.to_native(arch)
    assert again["d"] == native["d"] and again["r"] == 176
    assert SPACE.arch(again) == arch
    assert str(SPACE.arch({k: native[k] for k in ("ks", "e", "d")})).startswith("r224:")


@pytest.mark.parametrize("change, message", [
    ({"ks": [7] * 19}, "OFA key 'ks' must be a list of 20 ints"),
    ({"ks": [4] + [7] * 19}, r"ks\[0\] is 4; allowed values are \[3, 5, 7\]"),
    ({"d": [4, 4, 1, 4, 4]}, r"d\[2\] is 1; allowed values are \[2, 3, 4\]"),
    ({"r": 202}, r"r is 202; allowed values are \[128, 132, .*, 220, 224\]"),
    ({"w": [1]}, r"unknown keys \['w'\]"),
    ({"wid": 1.2}, "'wid' must be None"),
])
def test_native_dict_errors(change, message):
    with pytest.raises(ValueError, match=message):
        SPACE.arch({**LARGEST, **change})


def test_sampler_gives_distinct_valid_archs():
    archs = Sampler(0, space=SPACE).sample(50)
    assert len(set(archs)) == 50
    SPACE.positions(SPACE.to_choices(archs))


def test_uniform_indices_give_distinct_valid_archs():
    rng = np.random.default_rng(0)
    index = [int(rng.integers(0, 2**62)) * 23 for _ in range(50)]
    archs = SPACE.archs_from_choices(SPACE.choices_from_index(index))
    assert len(set(archs)) == 50
    SPACE.positions(SPACE.to_choices(archs))


@pytest.mark.parametrize("native, macs, params", [
    (LARGEST, 605_129_216, 7_664_760),
    (SMALLEST, 134_410_864, 3_410_792),
    ({**SMALLEST, "r": 160}, 69_941_872, 3_410_792),
])
def test_largest_and_smallest_subnets(native, macs, params):
    """OFA's largest (d4 k7 e6) and smallest (d2 k3 e3) subnets, w1.0, 1000 classes. OFA
    reports no exact counts for them; these are thop's (0.1.1) on our build. Its own counter
    (ofa/utils/flops_counter.py: conv and linear only) corresponds to ``true_macs``: the
    largest has 566M at 224, inside the paper's "mobile setting (<600M MACs)"."""
    table = SPACE.cost_table(SPACE.to_choices(native))
    assert (table.total("macs")[0], table.total("params")[0]) == (macs, params)
    if native is LARGEST:
        assert table.total("true_macs")[0] == 566_170_656


@pytest.mark.parametrize("seed", [0, 1])
def test_analytic_costs_equal_thop_and_the_parameter_count(seed):
    # two archs per seed; resolution 176 and 208 round odd feature maps up
    archs = SPACE.archs_from_choices(_random_choices(2, seed=seed))
    archs.append(SPACE.arch(EXAMPLE) if seed == 0 else SPACE.arch({**SMALLEST, "r": 208}))
    for arch in archs:
        model = SPACE.build(arch)
        resolution = int(SPACE.resolutions(arch.to_choices()[None])[0])
        table = SPACE.cost_table(arch.to_choices()[None])
        assert (int(table.total("macs")[0]), int(table.total("params")[0])) == \
            _thop(model, resolution)
        assert table.total("params")[0] == sum(p.numel() for p in model.parameters())


def test_cost_table_columns_stem_head_and_resolution_override():
    choices = _random_choices(6, seed=5)
    table = SPACE.cost_table(choices)
    assert SPACE.block_names() == ["s0", "s1", "s2", "s3", "s4"]
    for name in ("macs", "true_macs", "params", "activations"):
        assert table.per_stage[name].shape == (6, 5)
        assert table.stem[name].shape == table.head[name].shape == (6,)
    assert (table.total("true_macs") < table.total("macs")).all()
    # the same networks at 224: parameters unchanged, compute follows the input
    at224 = SPACE.cost_table(choices, resolution=224)
    assert np.array_equal(at224.total("params"), table.total("params"))
    fixed224 = choices.copy()
    fixed224[:, 0] = 224
    assert np.array_equal(at224.total("macs"), SPACE.cost_table(fixed224).total("macs"))
    tens = SPACE.cost_table(choices, num_classes=10)
    assert np.array_equal(table.total("params") - tens.total("params"),
                          np.full(6, 1280 * 990 + 990))


def test_cost_units_reproduce_the_block_costs():
    """An exact least-squares fit at 224 reproduces every architecture's block MACs; at the
    other resolutions the per-layer area-ratio counts are within 5% (a stride-2 expand runs on
    the input map)."""
    def design(choices):
        units = SPACE.cost_units(choices)
        assert units.widths == (9,) * 20 and len(units.slot_names) == 20
        x = np.zeros((len(choices), 20 * 9))
        for s in range(20):
            x[np.arange(len(choices)), s * 9 + units.units[:, s]] = units.counts[:, s]
        return x, SPACE.cost_table(choices).per_stage["macs"].sum(1).astype(float)

    x, y = design(_random_choices(400, seed=7, resolution_pos=len(RESOLUTIONS) - 1))
    weights = np.linalg.lstsq(x, y, rcond=None)[0]
    assert np.allclose(x @ weights, y, rtol=1e-9, atol=0)
    x, y = design(_random_choices(400, seed=8))
    assert np.abs(x @ weights / y - 1).max() < 0.05
    counts = SPACE.cost_units(SPACE.to_choices(SMALLEST)).counts[0]
    assert counts.tolist() == [1.0, 1.0, 0.0, 0.0] * 5


def test_forward_shape_at_any_resolution():
    model = SPACE.build(EXAMPLE, num_classes=10).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 176, 176)).shape == (2, 10)
        assert model(torch.randn(1, 3, 160, 160)).shape == (1, 10)


def test_onnx_export_matches_torch(tmp_path):
    from anb.searchspace.onnx_export import export_onnx, run_onnx

    model = SPACE.build(SMALLEST).eval()
    path = export_onnx(model, tmp_path / "ofa.onnx", resolution=160)
    x = torch.randn(2, 3, 160, 160)
    with torch.no_grad():
        want = model(x).numpy()
    assert np.allclose(run_onnx(path, x.numpy()), want, atol=1e-4)
