"""Arch value type: dataset dicts, string form, ids and clear errors on bad input."""
import subprocess
import sys

import numpy as np
import pytest

from anb.searchspace import ANB_SPACE, EFFICIENTNET_B0, SEQ1D_SPACE, Arch, Sampler, as_arch

B0 = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"


def test_string_round_trip_and_b0_choices():
    arch = Arch.from_string(B0, ANB_SPACE)
    assert str(arch) == B0
    assert arch == EFFICIENTNET_B0
    assert [s.e for s in arch.stages] == [1, 6, 6, 6, 6, 6, 6]
    assert [s.k for s in arch.stages] == [3, 3, 5, 3, 5, 5, 3]
    assert [s.l for s in arch.stages] == [1, 2, 2, 3, 3, 4, 1]
    assert all(s.se for s in arch.stages)
    assert arch.depth == 16


def test_dataset_dict_round_trip_on_released_records(released_records):
    for record in released_records[::50]:
        arch = Arch.from_anb_dict(record["architecture"], ANB_SPACE)
        assert arch.to_anb_dict() == record["architecture"]
        assert Arch.from_string(str(arch), space=ANB_SPACE) == arch


def test_arch_is_immutable_and_hashable():
    arch = Arch.from_string(B0, ANB_SPACE)
    with pytest.raises(AttributeError):
        arch.stages = ()  # type: ignore[misc]
    assert len({arch, Arch.from_string(B0, ANB_SPACE)}) == 1


def test_id_is_a_stable_content_hash():
    # Golden value: the id must never change across machines, Python versions or releases.
    assert EFFICIENTNET_B0.id == "6133be7d089a1e58"
    ids = {a.id for a in Sampler(3, space=ANB_SPACE).sample(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids)


def test_id_is_the_same_in_a_fresh_interpreter_with_another_hash_seed():
    code = ("from anb.searchspace import ANB_SPACE, Arch; "
            f"print(Arch.from_string('{B0}', ANB_SPACE).id)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""}, check=True)
    assert out.stdout.strip() == EFFICIENTNET_B0.id


def test_index_is_a_bijection_with_choices():
    archs = Sampler(0, space=ANB_SPACE).sample(300)
    for arch in archs[:50]:
        assert Arch.from_index(arch.index(ANB_SPACE), ANB_SPACE) == arch
    indices = ANB_SPACE.index_from_choices(np.stack([a.to_choices() for a in archs]))
    assert len(set(indices.tolist())) == 300
    assert indices.min() >= 0 and indices.max() < ANB_SPACE.size()
    assert Arch.from_index(0, ANB_SPACE) != Arch.from_index(ANB_SPACE.size() - 1,
                                                                  space=ANB_SPACE)


def test_as_arch_accepts_every_form():
    record = {"architecture": EFFICIENTNET_B0.to_anb_dict(), "metrics": {}}
    for form in (EFFICIENTNET_B0, B0, EFFICIENTNET_B0.to_anb_dict(), record):
        assert as_arch(form, ANB_SPACE) == EFFICIENTNET_B0
    with pytest.raises(ValueError, match="cannot read an architecture from int 42; "):
        as_arch(42, ANB_SPACE)


@pytest.mark.parametrize("text, fragment", [
    ("e1k3l1se-e6k3l2se", "has 2 stage token(s); space anb-mnasnet needs 7"),
    ("e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1sx",
     "stage 6: malformed token 'e6k3l1sx'"),
    ("e1k3l4se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se",
     "stage 0 field 'l' has value 4; allowed values are [1, 2, 3]"),
    ("e2k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se",
     "stage 0 field 'e' has value 2; allowed values are [1, 4, 6]"),
    ("e1k7l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se",
     "stage 0 field 'k' has value 7; allowed values are [3, 5]"),
])
def test_bad_strings_raise_clear_errors(text, fragment):
    with pytest.raises(ValueError) as err:
        Arch.from_string(text, ANB_SPACE)
    assert fragment in str(err.value)


def test_four_layers_allowed_only_in_stage_5():
    good = EFFICIENTNET_B0.to_anb_dict()
    assert Arch.from_anb_dict(good, ANB_SPACE).stages[5].l == 4
    bad = dict(good, block3_l=4)
    with pytest.raises(ValueError,
                       match=r"stage 3 field 'l' has value 4; allowed values are \[1, 2, 3\]"):
        Arch.from_anb_dict(bad, ANB_SPACE)


def test_bad_dicts_raise_clear_errors():
    good = EFFICIENTNET_B0.to_anb_dict()
    with pytest.raises(ValueError, match="unknown architecture key 'block0_x'"):
        Arch.from_anb_dict({**good, "block0_x": 1}, ANB_SPACE)
    with pytest.raises(ValueError, match="names stage 7, but space anb-mnasnet has 7 stages"):
        Arch.from_anb_dict({**good, "block7_e": 1}, ANB_SPACE)
    missing = dict(good)
    del missing["block2_se"]
    with pytest.raises(ValueError, match=r"missing key\(s\) \['block2_se'\]"):
        Arch.from_anb_dict(missing, ANB_SPACE)
    with pytest.raises(ValueError, match="stage 1 field 'se' must be true or false, got 'maybe'"):
        Arch.from_anb_dict({**good, "block1_se": "maybe"}, ANB_SPACE)
    with pytest.raises(ValueError, match="stage 0 field 'e' must be an integer, got 2.5"):
        Arch.from_anb_dict({**good, "block0_e": 2.5}, ANB_SPACE)


def test_wrong_number_of_stages_is_rejected():
    stages = [s.as_dict() for s in EFFICIENTNET_B0.stages]
    with pytest.raises(ValueError, match="expected 7 stages, got 6"):
        Arch.from_stages(stages[:6], ANB_SPACE)
    assert not ANB_SPACE.contains(Arch(EFFICIENTNET_B0.stages[:6]))
    assert ANB_SPACE.contains(EFFICIENTNET_B0)


def test_stage_tuple_of_wrong_length_is_rejected():
    """A fifth value was silently dropped (zip truncated), a third-only tuple was 'missing se'."""
    stages = [tuple(s) for s in EFFICIENTNET_B0.stages]
    assert Arch.from_stages(stages, ANB_SPACE) == EFFICIENTNET_B0
    with pytest.raises(ValueError, match=r"stage 2: 5 value\(s\) \(6, 5, 2, True, 99\); "
                       r"expected 4, in the order \['e', 'k', 'l', 'se'\]"):
        Arch.from_stages(stages[:2] + [(6, 5, 2, True, 99)] + stages[3:], space=ANB_SPACE)
    with pytest.raises(ValueError, match=r"stage 0: 3 value\(s\) \(1, 3, 1\); expected 4"):
        Arch.from_stages([(1, 3, 1)] + stages[1:], space=ANB_SPACE)


def test_seq1d_space_has_no_se_and_five_stages():
    arch = Arch.from_string("e1k3l1-e4k5l2-e6k3l3-e1k5l1-e4k3l2", SEQ1D_SPACE)
    assert SEQ1D_SPACE.contains(arch)
    assert SEQ1D_SPACE.size() == 18**5
    with pytest.raises(ValueError,
                       match="stage 0 field 'se' has value True; allowed values are \\[False\\]"):
        Arch.from_string("e1k3l1se-e4k5l2-e6k3l3-e1k5l1-e4k3l2", SEQ1D_SPACE)


@pytest.mark.parametrize("name", ["anb-mnasnet", "anb-seq1d", "nasbench201", "fbnet", "ofa-mbv3"])
def test_arch_strings_equal_the_architectures_strings(name):
    """The tabulated join (what every query's ``arch`` column uses) is ``str(arch)``, and it
    validates its input like the architectures do."""
    from anb.searchspace import get_space

    space = get_space(name)
    choices = Sampler(seed=2, space=space).sample_choices(500)
    assert space.arch_strings(choices) == [str(a) for a in space.archs_from_choices(choices)]
    bad = choices.copy()
    bad.reshape(len(bad), -1)[0, 0] = 99
    with pytest.raises(ValueError):
        space.arch_strings(bad)
