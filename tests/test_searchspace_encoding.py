"""Encodings: the benchmark's ordinal vector, one-hot and analytic features, vectorised."""
import numpy as np
import pytest

from anb.searchspace import EFFICIENTNET_B0, Sampler, encode, encoding_names
from anb.searchspace.encoding import features, onehot, ordinal
from anb.searchspace.space import ANB_SPACE


def test_ordinal_follows_the_benchmark_mapping():
    vec = ordinal(EFFICIENTNET_B0, space=ANB_SPACE)[0]
    # e 1/4/6 -> 0/1/2, k 3/5 -> 0/1, l -> l-1, se true -> 0 / false -> 1
    assert vec[:8].tolist() == [0, 0, 0, 0, 2, 0, 1, 0]
    assert vec[20:24].tolist() == [2, 1, 3, 0]
    no_se = ordinal("e4k5l3-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1", space=ANB_SPACE)[0]
    assert no_se[:4].tolist() == [1, 1, 2, 1]
    assert encoding_names("ordinal", space=ANB_SPACE)[:4] == ["b0_e", "b0_k", "b0_l", "b0_se"]


def test_ordinal_of_released_records_matches_the_dataset(released_records):
    recs = released_records[:200]
    enc = ordinal([r["architecture"] for r in recs], space=ANB_SPACE)
    for row, rec in zip(enc, recs, strict=False):
        a = rec["architecture"]
        for i in range(7):
            assert row[4 * i] == {1: 0, 4: 1, 6: 2}[a[f"block{i}_e"]]
            assert row[4 * i + 1] == {3: 0, 5: 1}[a[f"block{i}_k"]]
            assert row[4 * i + 2] == a[f"block{i}_l"] - 1
            assert row[4 * i + 3] == (0 if a[f"block{i}_se"] else 1)


def test_onehot_has_one_hot_per_choice():
    x = onehot(Sampler(0, space=ANB_SPACE).sample_choices(500), space=ANB_SPACE)
    assert x.shape == (500, 6 * 10 + 11)
    assert np.all(x.sum(axis=1) == 28)
    assert len(encoding_names("onehot", space=ANB_SPACE)) == x.shape[1]


def test_features_are_finite_and_named():
    choices = Sampler(0, space=ANB_SPACE).sample_choices(1000)
    x = features(choices, space=ANB_SPACE)
    assert x.shape == (1000, len(encoding_names("features", space=ANB_SPACE)))
    assert np.isfinite(x).all()
    assert np.array_equal(x[:, :28], ordinal(choices, space=ANB_SPACE))


@pytest.mark.parametrize("kind", ["ordinal", "onehot", "features"])
def test_list_and_array_inputs_agree(kind):
    archs = Sampler(5, space=ANB_SPACE).sample(20)
    from_list = encode(archs, kind, space=ANB_SPACE)
    from_strings = encode([str(a) for a in archs], kind, space=ANB_SPACE)
    from_array = encode(np.stack([a.to_choices() for a in archs]), kind, space=ANB_SPACE)
    assert from_list.dtype == np.float32
    assert np.array_equal(from_list, from_array) and np.array_equal(from_list, from_strings)


def test_unknown_encoding_is_rejected():
    with pytest.raises(ValueError, match="unknown encoding 'graph'; allowed encodings are"):
        encode([EFFICIENTNET_B0], "graph", space=ANB_SPACE)
