"""Which variables name a slot's unit (the support's combinations), per shipped space, and the
nearest-training-architecture distance against a direct computation."""
from __future__ import annotations

import numpy as np

from anb.searchspace import get_space
from anb.surrogates.uncertainty.support import Combinations, Support


def test_each_slot_is_named_by_the_variables_that_decide_its_unit():
    # anb-mnasnet: a block's unit is its expansion, kernel and squeeze-excite (not its depth);
    # two slots per block (first layer, the repeats)
    mnasnet = Combinations.of(get_space("anb-mnasnet"))
    assert mnasnet.slot_variables == tuple(
        (4 * b, 4 * b + 1, 4 * b + 3) for b in range(7) for _ in range(2))
    # NAS-Bench-201 and FBNet: one variable per slot (an edge's op, a layer's block)
    assert Combinations.of(get_space("nasbench201")).slot_variables == tuple(
        (v,) for v in range(6))
    assert Combinations.of(get_space("fbnet")).slot_variables == tuple((v,) for v in range(22))


def test_nearest_distance_is_the_smallest_euclidean_distance(tmp_path):
    space = get_space("anb-mnasnet")
    rng = np.random.default_rng(1)
    train = space.choices_from_index(rng.integers(0, space.size(), 300))
    support = Support(space).fit(train)
    points = rng.random((700, support.positions_.shape[1])).astype(np.float32)
    direct = np.sqrt(((points[:, None, :].astype(np.float64)
                       - support.positions_[None].astype(np.float64)) ** 2).sum(-1)).min(1)
    np.testing.assert_allclose(support._nearest(points), direct, rtol=0, atol=1e-5)
    own = support._nearest(support.positions_, exclude_self=True)
    others = np.sqrt(((support.positions_[:, None, :].astype(np.float64)
                       - support.positions_[None].astype(np.float64)) ** 2).sum(-1))
    np.fill_diagonal(others, np.inf)
    np.testing.assert_allclose(own, others.min(1), rtol=0, atol=1e-5)
