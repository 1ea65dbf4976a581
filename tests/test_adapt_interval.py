"""The error an adapted model's std scales (anb/surrogates/adapt/interval.py): below
CHOICE_MIN_POINTS rows the out-of-fold RMSE shrunk in log space towards the spread of the
measured log costs, in the squared-error regime the additive transfer's RMSE, from
RANK_MIN_POINTS the choice's own."""
from __future__ import annotations

import numpy as np
import pytest

from anb.searchspace.space import ANB_SPACE
from anb.surrogates.adapt.interval import SHRINK_WEIGHT, error_scale, std_error
from anb.surrogates.adapt.model import (
    CHOICE_MIN_POINTS,
    CHOICE_RULE,
    RANK_MIN_POINTS,
    STD_FACTOR,
    AdaptedModel,
    choice_std_factor,
    loo_residuals,
    small_sample_factor,
)


def test_the_scale_is_the_weighted_geometric_mean_of_error_and_spread():
    y = np.array([0.0, 0.2, 0.4, 0.6, 0.8])
    spread = float(np.std(y, ddof=1))
    assert error_scale(0.05, y) == pytest.approx(spread ** (1 - SHRINK_WEIGHT)
                                                 * 0.05**SHRINK_WEIGHT)
    # an error below the spread widens, one above it (a 4-row refit gone wrong) narrows
    assert 0.05 < error_scale(0.05, y) < spread < error_scale(2.0, y) < 2.0
    assert error_scale(0.05, y, weight=1.0) == pytest.approx(0.05)
    assert error_scale(0.05, np.full(5, 0.3)) == 0.05  # no spread to shrink towards
    assert error_scale(0.0, y) == 0.0


def test_each_regime_of_the_choice_scales_its_own_error():
    rng = np.random.default_rng(0)
    for n, expected in ((5, "shrunk"), (CHOICE_MIN_POINTS - 1, "shrunk"),
                        (CHOICE_MIN_POINTS, "transfer"), (RANK_MIN_POINTS - 1, "transfer"),
                        (RANK_MIN_POINTS, "choice"), (200, "choice")):
        y = rng.normal(0.0, 0.5, n)
        want = {"shrunk": error_scale(0.1, y), "transfer": 0.3, "choice": 0.1}[expected]
        assert std_error(0.1, 0.3, y, CHOICE_RULE) == pytest.approx(want), n


def _device(n: int, seed: int, slope: float):
    rng = np.random.default_rng(seed)
    known_log = rng.normal(0.0, 0.3, (n, 3))
    ops = rng.uniform(1.0, 5.0, (n, 4))
    return known_log, ops, np.exp(slope * known_log @ [0.5, 0.3, 0.0]
                                  + rng.normal(0.0, 0.05, n))


def _fit(n: int, slope: float):
    known_log, ops, latency = _device(n, 3, slope)
    model = AdaptedModel.fit("latency_x", ["a", "b", "c"], known_log, ops, latency,
                             space=ANB_SPACE)
    y = np.log(latency)
    additive = loo_residuals(known_log, ops, y, model.ridge_alpha, model.known_scale,
                             model.op_scale, model.level)[:, 1]  # blend weight 0
    return model, y, float(np.sqrt(np.mean(additive**2)))


def _std_error(model: AdaptedModel) -> float:
    """The error the fitted std scales (its factor without the t and regime parts)."""
    n = model.n_points
    return model.std_factor * model.loo_rmse / (STD_FACTOR * small_sample_factor(n)
                                                * choice_std_factor(n))


def test_below_choice_min_points_the_std_shrinks_towards_the_spread():
    """At 5 rows the std's error is the additive transfer's out-of-fold RMSE shrunk towards
    the rows' spread, strictly between the two (costs 1x and 4x as far apart)."""
    for slope in (1.0, 4.0):
        model, y, additive = _fit(5, slope)
        assert model.loo_rmse == pytest.approx(additive)  # no choice: the transfer predicts
        assert _std_error(model) == pytest.approx(error_scale(additive, y))
        assert 1.1 * additive < _std_error(model) < np.std(y, ddof=1) / 1.1


def test_with_a_squared_error_choice_the_std_scales_the_transfer_error():
    """On 12 rows the std's error is the additive transfer's out-of-fold RMSE, not the
    choice's (which picks a ridge-weighted blend here); from RANK_MIN_POINTS the choice's."""
    model, _, additive = _fit(12, 1.0)
    assert model.blend > 0 and model.loo_rmse != pytest.approx(additive)
    assert _std_error(model) == pytest.approx(additive)
    model = _fit(RANK_MIN_POINTS + 10, 1.0)[0]
    assert _std_error(model) == pytest.approx(model.loo_rmse)
