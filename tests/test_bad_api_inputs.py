"""The public Python functions refuse bad arguments with a ValueError naming the argument, its
value and what is allowed, before any work (the cases ``scripts/bad_input_table.py`` found
answered with a result or a traceback)."""
from __future__ import annotations

from pathlib import Path

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


@pytest.fixture(scope="module")
def problem(bench):
    from anb import nas

    return nas.Problem(nas.surrogate_evaluator(bench), [nas.Objective("val_top1", True)], [],
                       space=ANB_SPACE)


@pytest.mark.parametrize(("run", "message"), [
    (lambda nas, p: nas.random_search(p, 8, batch=0), r"batch must be an integer >= 1, got 0"),
    (lambda nas, p: nas.regularized_evolution(p, 8, population=0, sample=0),
     r"population must be an integer >= 1, got 0"),
    (lambda nas, p: nas.regularized_evolution(p, 8, batch=-2),
     r"batch must be an integer >= 1, got -2"),
    (lambda nas, p: nas.nsga2(p, 8, population=0), r"population must be an integer >= 1, got 0"),
    (lambda nas, p: nas.nsga2(p, 8, offspring=0), r"offspring must be an integer >= 1, got 0"),
    (lambda nas, p: nas.pymoo_nsga2(p, 8, population=2.5),
     r"population must be an integer >= 1, got 2.5"),
    (lambda nas, p: nas.Problem(p.evaluator, [], [], space=ANB_SPACE),
     r"^objectives is empty: a search needs at least one objective"),
], ids=["random-batch", "re-population", "re-batch", "nsga2-population", "nsga2-offspring",
        "pymoo-population", "no-objectives"])
def test_a_search_refuses_a_size_below_one_naming_it(problem, run, message):
    from anb import nas

    with pytest.raises(ValueError, match=message):
        run(nas, problem)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"members": 0}, r"members=0 is invalid; allowed: an integer in 1\.\.100"),
    ({"members": 100_000}, r"members=100000 is invalid"),
    ({"n_jobs": 0}, r"n_jobs=0 is invalid; allowed: an integer in 1\.\.1024"),
    ({"hpo_seconds": float("nan")}, r"hpo_seconds=nan is invalid; allowed: 0 \(no tuning\)"),
    ({"hpo_seconds": -5.0}, r"hpo_seconds=-5\.0 is invalid"),
], ids=["no-members", "absurd-members", "no-jobs", "nan-hpo", "negative-hpo"])
def test_fit_refuses_bad_sizes_before_reading_the_data(tmp_path, kwargs, message):
    """Checked first: the dataset does not exist either, and nothing is written."""
    from anb.surrogates import fit

    with pytest.raises(ValueError, match=message):
        fit(tmp_path / "missing.tar.gz", tmp_path / "out", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_evaluate_takes_the_packaged_benchmark_by_name():
    """``evaluate_artifact('accel-nasbench', ...)`` loads the packaged benchmark (it looked for
    a folder of that name); the bad split part is what is refused."""
    from anb.resources import RELEASED_DATASET
    from anb.surrogates import evaluate_artifact

    with pytest.raises(ValueError, match=r"unknown split part 'bogus'; allowed: \['train', "):
        evaluate_artifact("accel-nasbench", RELEASED_DATASET, on="bogus")
    with pytest.raises(ValueError, match=r"n_jobs=0 is invalid"):
        evaluate_artifact("accel-nasbench", RELEASED_DATASET, n_jobs=0)


def test_evaluate_on_a_split_with_nothing_to_score_is_refused(tmp_path):
    """Three records leave the published test split without two labels of any target: a
    ValueError naming the dataset and the split (it was a KeyError from the comparison table),
    and no report."""
    import tarfile

    from anb.resources import RELEASED_DATASET
    from anb.surrogates import evaluate_artifact

    records = tmp_path / "records"
    records.mkdir()
    with tarfile.open(RELEASED_DATASET) as archive:
        members = [m for m in archive.getmembers() if m.name.endswith(".json")][:3]
        for member in members:
            (records / Path(member.name).name).write_bytes(archive.extractfile(member).read())
    with pytest.raises(ValueError, match=r"its 'test' split has fewer than 2 labelled "
                                         r"architectures for every target"):
        evaluate_artifact("accel-nasbench", records, report=tmp_path / "report")
    assert not (tmp_path / "report").exists()
