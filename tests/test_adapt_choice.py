"""The adapted model's out-of-fold choice among the blend weightings and the analytic proxies
(:func:`anb.surrogates.adapt.choice.choose`), on hand-made out-of-fold errors."""
from __future__ import annotations

import numpy as np
import pytest

from anb.surrogates.adapt.choice import choose, rank_choice, rank_selected_rmse, selected_rmse

RULE = {"choice_min": 10, "rank_from": 20, "rank_below": 50, "margin": 0.005}


def _errors(n: int, seed: int, scales: tuple[float, ...]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([s * rng.standard_normal(n) for s in scales])


def test_below_choice_min_the_fallback_predicts_with_its_own_error():
    """Under ``choice_min`` rows nothing is chosen: the fallback column predicts even where
    another blend or a proxy has the lower error, and the std's error is its RMSE."""
    blends = _errors(9, 0, (0.3, 0.1))
    proxies = _errors(9, 1, (0.05,))
    picked = choose(blends, proxies, np.arange(9.0), 0, **RULE)
    assert picked.column == 0
    assert picked.rmse == pytest.approx(np.sqrt(np.mean(blends[:, 0] ** 2)))


def test_squared_error_chooses_between_blends_and_proxies():
    """From ``choice_min`` rows (below ``rank_from``) the blend of least squared error
    predicts unless a proxy's error is lower; the std's error scores the choice within the
    winning group out of fold."""
    y = np.arange(12.0)
    blends = _errors(12, 0, (0.3, 0.1))
    worse = _errors(12, 1, (0.5, 0.4))
    picked = choose(blends, worse, y, 0, **RULE)
    assert picked.column == 1
    assert picked.rmse == pytest.approx(selected_rmse(blends))
    better = _errors(12, 2, (0.5, 0.02))
    picked = choose(blends, better, y, 0, **RULE)
    assert picked.column == 2 + 1
    assert picked.rmse == pytest.approx(selected_rmse(better))
    no_line = np.full((12, 1), np.inf)  # a proxy that does not vary is no candidate
    assert choose(blends, no_line, y, 0, **RULE).column == 1


def test_from_rank_from_rows_the_rank_choice_picks_among_all():
    y = np.linspace(0.0, 2.0, 20)
    blends = _errors(20, 3, (0.2, 0.3))
    proxies = np.column_stack([0.5 * (y - y.mean())])  # a line of slope 1.5: the order kept
    candidates = np.column_stack([blends, proxies])
    picked = choose(blends, proxies, y, 0, **RULE)
    assert picked.column == rank_choice(candidates, y, RULE["margin"]) == 2
    assert picked.rmse == pytest.approx(rank_selected_rmse(candidates, y, RULE["margin"]))
    beyond = choose(blends, proxies, y, 0, **{**RULE, "rank_below": 20})
    assert beyond.column == int(np.argmin(np.mean(candidates**2, axis=0)))
