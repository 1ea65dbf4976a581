"""Analytic MACs/params: exact on all released records and equal to the thop profiler."""
import warnings

import numpy as np
import pytest
import torch

from anb.searchspace import ANB_SPACE, EFFICIENTNET_B0, SEQ1D_SPACE, Arch, Sampler, count
from anb.searchspace.counting import cost_table, count_batch
from anb.searchspace.encoding import to_choices
from anb.searchspace.model import build_model


def test_every_released_record_matches_to_the_printed_unit(released_records):
    assert len(released_records) == 5138
    choices = to_choices([r["architecture"] for r in released_records], space=ANB_SPACE)
    macs, params = count_batch(choices, space=ANB_SPACE)
    want_macs = np.array([r["model_info"]["macs"] for r in released_records])
    want_params = np.array([r["model_info"]["params"] for r in released_records])
    assert np.array_equal(np.round(macs / 1e6, 6), want_macs)
    assert np.array_equal(np.round(params / 1e6, 6), want_params)


def test_single_count_agrees_with_batch_count(released_records):
    for record in released_records[:20]:
        macs, params = count(Arch.from_anb_dict(record["architecture"], ANB_SPACE),
                             space=ANB_SPACE)
        assert round(macs / 1e6, 6) == record["model_info"]["macs"]
        assert round(params / 1e6, 6) == record["model_info"]["params"]


def test_reference_sanity_figures():
    assert tuple(count(EFFICIENTNET_B0, space=ANB_SPACE)) == (415_145_024, 5_288_548)
    table = cost_table(EFFICIENTNET_B0.to_choices()[None], space=ANB_SPACE)
    assert (table.stem["macs"], table.stem["params"]) == (12_443_648, 928)
    assert (table.head["macs"], table.head["params"]) == (21_665_280, 1_693_160)
    # True MACs drop BN and pooling, so they are strictly below the benchmark's count.
    assert table.total("true_macs")[0] < table.total("macs")[0]


def _thop(model, shape):
    from thop import profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        macs, params = profile(model.eval(), inputs=(torch.randn(*shape),), verbose=False)
    return int(macs), int(params)


@pytest.mark.parametrize("resolution", [224, 192])
def test_analytic_count_equals_the_profiler_on_sampled_archs(resolution):
    for arch in Sampler(21, space=ANB_SPACE).sample(3) + [EFFICIENTNET_B0]:
        want = _thop(build_model(arch, space=ANB_SPACE), (1, 3, resolution, resolution))
        assert tuple(count(arch, resolution=resolution, space=ANB_SPACE)) == want


def test_seq1d_count_equals_the_profiler():
    arch = Sampler(4, space=SEQ1D_SPACE).sample(1)[0]
    model = build_model(arch, num_classes=4, space=SEQ1D_SPACE)
    got = count(arch, resolution=1000, num_classes=4, space=SEQ1D_SPACE)
    assert tuple(got) == _thop(model, (1, 1, 1000))


def test_costs_grow_with_each_choice():
    base = Arch.from_string("e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1", ANB_SPACE)
    bigger = [
        "e4k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1",
        "e1k5l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1",
        "e1k3l2-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1",
        "e1k3l1se-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1",
    ]
    for text in bigger:
        assert count(Arch.from_string(text, ANB_SPACE), space=ANB_SPACE).macs > count(base,
                                                                                            space=ANB_SPACE).macs
        assert count(Arch.from_string(text, ANB_SPACE),
                     space=ANB_SPACE).params >= count(base, space=ANB_SPACE).params


def test_bad_choices_array_is_rejected():
    bad = EFFICIENTNET_B0.to_choices()[None].copy()
    bad[0, 2, 1] = 7
    with pytest.raises(ValueError,
                       match="stage 2 field 'k' has value 7; allowed values are \\[3, 5\\]"):
        count_batch(bad, space=ANB_SPACE)
    with pytest.raises(ValueError, match="choices must have shape"):
        count_batch(np.zeros((2, 6, 4), dtype=int), space=ANB_SPACE)
    assert ANB_SPACE.num_stages == 7
