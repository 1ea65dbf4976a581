"""The adapted model's out-of-fold choice among the blend weightings and the analytic proxies
(:func:`anb.surrogates.adapt.choice.choose`), on hand-made out-of-fold errors."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from anb.surrogates.adapt.choice import ChoiceRule, choose, rank_choice

RULE = ChoiceRule(choice_min=10, rank_from=20, rank_below=50, margin=0.005)


def _errors(n: int, seed: int, scales: tuple[float, ...]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([s * rng.standard_normal(n) for s in scales])


def _whole_choice_rmse(blends: np.ndarray, proxies: np.ndarray, y: np.ndarray, fallback: int,
                       rule: ChoiceRule) -> float:
    """Each row under the column the rule picks without it, in the regime of all rows."""
    candidates = np.column_stack([blends, proxies])
    errors = [candidates[i, rule.pick(np.delete(blends, i, 0), np.delete(proxies, i, 0),
                                      np.delete(y, i), fallback, len(y))]
              for i in range(len(y))]
    return float(np.sqrt(np.mean(np.square(errors))))


def test_below_choice_min_the_fallback_predicts_with_its_own_error():
    """Under ``choice_min`` rows nothing is chosen: the fallback column predicts even where
    another blend or a proxy has the lower error, and the std's error is its RMSE."""
    blends = _errors(9, 0, (0.3, 0.1))
    proxies = _errors(9, 1, (0.05,))
    picked = choose(blends, proxies, np.arange(9.0), 0, RULE)
    assert picked.column == 0
    assert picked.rmse == pytest.approx(np.sqrt(np.mean(blends[:, 0] ** 2)))


def test_squared_error_chooses_between_blends_and_proxies():
    """From ``choice_min`` rows (below ``rank_from``) the blend of least squared error
    predicts unless a proxy's error is lower; the std's error scores the whole choice out of
    fold, at least the winner's own error."""
    y = np.arange(12.0)
    blends = _errors(12, 0, (0.3, 0.1))
    worse = _errors(12, 1, (0.5, 0.4))
    picked = choose(blends, worse, y, 0, RULE)
    assert picked.column == 1
    assert picked.rmse == pytest.approx(_whole_choice_rmse(blends, worse, y, 0, RULE))
    assert picked.rmse >= np.sqrt(np.mean(blends[:, 1] ** 2))
    better = _errors(12, 2, (0.5, 0.02))
    picked = choose(blends, better, y, 0, RULE)
    assert picked.column == 2 + 1
    assert picked.rmse == pytest.approx(_whole_choice_rmse(blends, better, y, 0, RULE))
    no_line = np.full((12, 1), np.inf)  # a proxy that does not vary is no candidate
    assert choose(blends, no_line, y, 0, RULE).column == 1
    # A misses row 0 only, B errs by 0.2 everywhere: B wins, but without row 0 A does, so
    # row 0 is scored by A's miss
    a, b = np.zeros(10), np.full(10, 0.2)
    a[0] = 1.0
    picked = choose(np.column_stack([a, b]), np.zeros((10, 0)), np.arange(10.0), 0, RULE)
    assert picked.column == 1
    assert picked.rmse == pytest.approx(np.sqrt((1.0 + 9 * 0.2**2) / 10))


def test_a_pick_must_beat_the_fallback_by_the_ratio():
    """With ``fallback_ratio`` a pick predicts only where its squared error is under that
    share of the fallback's: a blend 10 % better than the fallback gives way to it at 0.8
    and wins at 0.95; one twice as good wins at 0.8; from ``rank_below`` rows no ratio."""
    rng = np.random.default_rng(4)
    base = rng.standard_normal(12)
    y = np.arange(12.0)
    near = np.column_stack([0.2 * base, 0.2 * np.sqrt(0.9) * base])  # squared error x 0.9
    far = np.column_stack([0.2 * base, 0.2 * np.sqrt(0.5) * base])  # x 0.5
    none = np.zeros((12, 0))
    strict = replace(RULE, fallback_ratio=0.8)
    assert choose(near, none, y, 0, RULE).column == 1
    assert choose(near, none, y, 0, strict).column == 0
    assert choose(near, none, y, 0, replace(RULE, fallback_ratio=0.95)).column == 1
    assert choose(far, none, y, 0, strict).column == 1
    assert strict.pick(near, none, y, 0, n=50) == 1  # own model regime: unchanged
    # the std's error scores the ratio's choice too: here the fallback, row by row
    assert choose(near, none, y, 0, strict).rmse == pytest.approx(
        np.sqrt(np.mean(near[:, 0] ** 2)))


def test_from_rank_from_rows_the_rank_choice_picks_among_all():
    y = np.linspace(0.0, 2.0, 20)
    blends = _errors(20, 3, (0.2, 0.3))
    proxies = np.column_stack([0.5 * (y - y.mean())])  # a line of slope 1.5: the order kept
    candidates = np.column_stack([blends, proxies])
    picked = choose(blends, proxies, y, 0, RULE)
    assert picked.column == rank_choice(candidates, y, RULE.margin) == 2
    assert picked.rmse == pytest.approx(_whole_choice_rmse(blends, proxies, y, 0, RULE))
    beyond = choose(blends, proxies, y, 0, replace(RULE, rank_below=20))
    assert beyond.column == int(np.argmin(np.mean(candidates**2, axis=0)))


def test_the_calibration_study_records_the_choice_the_model_makes():
    """``benchmarks/adapt_calibration.py collect`` keeps what the model's out-of-fold choice
    saw through one seam into the fit: called as the model calls it, the seam records the
    arguments, answers as :func:`choose` does, and is removed afterwards."""
    import importlib.util

    import anb.surrogates.adapt.model as adapt_model
    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location(
        "anb_benchmarks_adapt_calibration", REPO / "benchmarks" / "adapt_calibration.py")
    assert spec is not None and spec.loader is not None
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    blends, proxies, y = _errors(12, 0, (0.3, 0.1)), _errors(12, 1, (0.05,)), np.arange(12.0)
    with study.recorded_choice() as seen:
        picked = adapt_model.choose(blends, proxies, y, 1, RULE)
    assert picked == choose(blends, proxies, y, 1, RULE)
    assert seen["blends"] is blends and seen["proxies"] is proxies and seen["y"] is y
    assert seen["fallback"] == 1
    assert adapt_model.choose is choose
