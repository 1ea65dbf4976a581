"""The public Python functions refuse bad arguments with a ValueError naming the argument, its
value and what is allowed, before any work (the cases ``scripts/bad_input_table.py`` found
answered with a result or a traceback)."""
from __future__ import annotations

import pytest

from anb.searchspace import Sampler, as_arch, count
from anb.searchspace.space import ANB_SPACE

ARCH = "e6k5l1-e6k5l1-e6k5l1-e6k5l1-e6k5l1-e6k5l1-e6k5l1"


@pytest.mark.parametrize(("call", "message"), [
    (lambda: count(as_arch(ARCH, ANB_SPACE), space=ANB_SPACE, resolution=-1),
     r"resolution must be an integer from 1 to 8192 \(pixels\), got -1"),
    (lambda: count(as_arch(ARCH, ANB_SPACE), space=ANB_SPACE, resolution=10**12),
     r"resolution must be an integer from 1 to 8192 \(pixels\), got 1000000000000"),
    (lambda: count(as_arch(ARCH, ANB_SPACE), space=ANB_SPACE, num_classes=0),
     "num_classes 0 is invalid; allowed: an integer from 1 to 100000"),
    (lambda: count(as_arch(ARCH, ANB_SPACE), space=ANB_SPACE, num_classes=10**12),
     "num_classes 1000000000000 is invalid"),
    (lambda: Sampler(chunk=0, space=ANB_SPACE), "chunk 0 is invalid; allowed: a positive integer"),
    (lambda: Sampler(chunk=2.5, space=ANB_SPACE), "chunk 2.5 is invalid"),
], ids=["count-negative-resolution", "count-absurd-resolution", "count-zero-classes",
        "count-absurd-classes", "sampler-zero-chunk", "sampler-float-chunk"])
def test_bad_argument_is_a_value_error_naming_it(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_merge_of_a_source_without_records_writes_nothing(tmp_path):
    from anb.collect_throughput.records.merge import merge

    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: holds no records"):
        merge(None, [tmp_path / "empty"], tmp_path / "out", space=ANB_SPACE)
    assert not (tmp_path / "out").exists()


def test_export_with_an_unknown_duplicates_rule_writes_nothing(tmp_path):
    from anb.collect_accuracy.export import export

    with pytest.raises(ValueError, match="duplicate rule 'bogus' is unknown"):
        export(tmp_path / "o.csv", [tmp_path], rule="bogus", space=ANB_SPACE)
    assert list(tmp_path.iterdir()) == []


def test_counting_in_range_still_works():
    arch = as_arch(ARCH, ANB_SPACE)
    assert count(arch, space=ANB_SPACE, resolution=224, num_classes=1000).params == \
        count(arch, space=ANB_SPACE).params


@pytest.fixture(scope="module")
def bench():
    import anb

    return anb.load("accel-nasbench")


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"noise": True, "seed": -1}, ValueError,
     r"seed -1 is negative; allowed: an int >= 0 or None"),
    ({"metrics": ["val_top1", "val_top1"]}, ValueError,
     r"metric 'val_top1' is given twice \(val_top1 and val_top1\)"),
    ({"metrics": ["top1", "val_top1"]}, ValueError,
     r"metric 'val_top1' is given twice \(top1 and val_top1\)"),
], ids=["negative-seed", "duplicate-metric", "metric-and-its-alias"])
def test_query_refuses_bad_arguments(bench, kwargs, error, message):
    with pytest.raises(error, match=message):
        bench.query(**{"archs": [ARCH], **kwargs})


def test_query_with_distinct_metrics_and_a_seed_still_answers(bench):
    frame = bench.query([ARCH], ["accuracy", "latency_zcu102"], noise=True, seed=0)
    assert list(frame["arch"]) == [ARCH] and {"val_top1", "latency_zcu102"} <= set(frame)
