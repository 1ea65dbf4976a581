"""The Python API refuses wrong arguments by name, value and what is allowed, before any work
(these were tracebacks from deep inside, or, for ``noise="no"``, noise added)."""
from __future__ import annotations

import pytest

import anb
from anb.searchspace import Sampler
from anb.searchspace.registry import get_space

ARCH = "e6k3l1-e1k5l3-e6k3l2-e6k3l1-e4k3l2-e6k5l1-e4k5l2"


@pytest.fixture(scope="module")
def bench():
    return anb.load(quiet=True)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"archs": 123}, TypeError, "archs 123 is not architectures"),
    ({"archs": None}, TypeError, "archs None is not architectures"),
    ({"archs": [ARCH], "noise": "no"}, TypeError, "noise 'no' is not a bool"),
    ({"archs": [ARCH], "noise": True, "seed": "x"}, TypeError, "seed 'x' is not an integer"),
    ({"archs": [ARCH], "seed": 1.5}, TypeError, "seed 1.5 is not an integer"),
    ({"archs": [ARCH], "level": 0}, ValueError, "level 0 is invalid"),
])
def test_query_refuses_wrong_arguments_by_name(bench, kwargs, error, message):
    with pytest.raises(error, match=message):
        bench.query(**kwargs)


def test_query_noise_false_and_an_integer_seed_still_work(bench):
    plain = bench.query([ARCH], "accuracy", noise=False, seed=3)
    assert plain["val_top1"].iloc[0] == bench.query([ARCH], "accuracy")["val_top1"].iloc[0]


@pytest.mark.parametrize("name_or_path", [123, None, 4.5])
def test_load_refuses_what_is_neither_a_name_nor_a_path(name_or_path):
    with pytest.raises(TypeError, match=f"name_or_path {name_or_path!r} is not a benchmark"):
        anb.load(name_or_path)


def test_sampler_takes_a_space_by_name_and_refuses_others():
    assert Sampler(seed=1, space="nasbench201").sample(2) == \
        Sampler(seed=1, space=get_space("nasbench201")).sample(2)
    with pytest.raises(ValueError, match="unknown search space 'bogus'; known spaces are"):
        Sampler(space="bogus")
    with pytest.raises(TypeError, match="space 3 is not a search space"):
        Sampler(space=3)
