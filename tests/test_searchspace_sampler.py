"""Seeded sampler: deterministic, without repeats, disjoint shards, exclusion."""
import subprocess
import sys

import numpy as np
import pytest

from anb.searchspace import ANB_SPACE, Sampler, sample
from anb.searchspace.sampler import Permutation, parse_shard


def test_space_size_matches_the_benchmark():
    assert ANB_SPACE.size() == 36**6 * 48 == 104_485_552_128


def test_stream_is_deterministic_and_seed_dependent():
    a = Sampler(7, space=ANB_SPACE).sample_indices(1000)
    assert np.array_equal(a, Sampler(7, space=ANB_SPACE).sample_indices(1000))
    assert not np.array_equal(a, Sampler(8, space=ANB_SPACE).sample_indices(1000))
    assert [str(x) for x in sample(5, seed=7, space=ANB_SPACE)] == [str(x) for x in Sampler(7,
                                                                                            space=ANB_SPACE).sample(5)]


def test_stream_matches_in_another_process():
    code = ("from anb.searchspace import ANB_SPACE, Sampler; "
            "print(Sampler(11, space=ANB_SPACE).sample_indices(20).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONHASHSEED": "99", "PATH": ""}, check=True)
    assert out.stdout.strip() == str(Sampler(11, space=ANB_SPACE).sample_indices(20).tolist())


def test_stream_never_repeats():
    idx = Sampler(1, space=ANB_SPACE).sample_indices(200_000)
    assert len(np.unique(idx)) == idx.size


def test_permutation_is_a_bijection_on_a_small_domain():
    perm = Permutation(1000, seed=5)
    values = perm(np.arange(1000))
    assert sorted(values.tolist()) == list(range(1000))
    assert not np.array_equal(values, np.arange(1000))


@pytest.mark.parametrize("chunk", [65536, 7])
def test_shards_are_disjoint_and_interleave_to_the_unsharded_stream(chunk):
    """Catches: sampler shards whose chunks overlap (chunk 7: many chunk boundaries)."""
    k, n = 4, 250
    sampler = Sampler(3, chunk=chunk, space=ANB_SPACE)
    shards = [sampler.sample_indices(n, shard=(i, k)) for i in range(k)]
    for i in range(k):
        for j in range(i + 1, k):
            assert not set(shards[i]) & set(shards[j])
    interleaved = np.stack(shards, axis=1).reshape(-1)
    assert np.array_equal(interleaved, sampler.sample_indices(n * k))
    assert np.array_equal(shards[2], sampler.sample_indices(n, shard="2/4"))
    again = Sampler(3, space=ANB_SPACE).sample_indices(n * k)
    assert np.array_equal(interleaved, again)  # chunk-independent


@pytest.mark.slow
def test_exclude_skips_done_architectures_by_arch_or_id():
    sampler = Sampler(0, space=ANB_SPACE)
    first = sampler.sample(10)
    done = [first[1], str(first[3])] + [first[5].id]
    rest = sampler.sample(7, exclude=done)
    expected = [a for i, a in enumerate(first) if i not in (1, 3, 5)]
    assert rest == expected


def test_samples_cover_every_choice_roughly_uniformly():
    choices = Sampler(2, space=ANB_SPACE).sample_choices(20_000)
    layers5 = choices[:, 5, 2]
    counts = np.bincount(layers5, minlength=5)[1:]
    assert set(np.unique(layers5)) == {1, 2, 3, 4}
    assert counts.min() / counts.max() > 0.9
    se = choices[:, :, 3].mean()
    assert 0.48 < se < 0.52


@pytest.mark.parametrize("shard, message", [
    ("4/4", "need k >= 1 and 0 <= i < k"), ("a/b", "malformed"), ((0, 0), "need k >= 1"),
])
def test_bad_shards_are_rejected(shard, message):
    with pytest.raises(ValueError, match=message):
        parse_shard(shard)


def test_negative_n_is_rejected():
    with pytest.raises(ValueError, match="n must be >= 0"):
        Sampler(0, space=ANB_SPACE).sample(-1)


def test_n_beyond_the_space_or_shard_is_refused_naming_both_sizes():
    with pytest.raises(ValueError, match=r"cannot sample 1,000,000,000,000 .* holds "
                                         r"104,485,552,128"):
        Sampler(0, space=ANB_SPACE).sample_indices(10**12)
    quarter = Sampler(0, space=ANB_SPACE).shard_size("1/4")
    assert quarter == 26_121_388_032
    with pytest.raises(ValueError, match="26,121,388,032 of them in shard 1/4"):
        Sampler(0, space=ANB_SPACE).sample(quarter + 1, shard="1/4")


def test_streamed_sample_equals_the_list_across_chunks():
    small = Sampler(3, chunk=7, space=ANB_SPACE)
    streamed = [str(a) for a in small.iter_sample(30, shard="1/3", exclude=small.sample(4))]
    assert streamed == [str(a) for a in Sampler(3, space=ANB_SPACE).sample(30, shard="1/3",
                                                           exclude=Sampler(3,
                                                                           space=ANB_SPACE).sample(4))]
    assert len(set(streamed)) == 30
