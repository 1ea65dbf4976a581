"""Holding the additive transfer against a choice among many candidates on 20 rows
(anb/surrogates/adapt/hold.py): a candidate that beats it by chance is held off, a clear winner
is taken, and the std scores the held choice out of fold (choice.choose)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from anb.surrogates.adapt import model as adapt_model
from anb.surrogates.adapt.choice import ChoiceRule, choose
from anb.surrogates.adapt.hold import held


def least_squares(residuals: np.ndarray, y: np.ndarray) -> int:
    return int(np.argmin(np.mean(residuals**2, axis=0)))


def two_columns(gain: float) -> np.ndarray:
    """20 rows: column 0 errors of +-sqrt(2), column 1 squared errors lower by ``gain`` on
    average, the per-row difference with std 0.3 (standard error 0.067)."""
    z = np.random.default_rng(0).standard_normal(20)
    diff = gain + 0.3 * (z - z.mean()) / z.std(ddof=1)
    a = np.sqrt(2.0) * np.where(np.arange(20) % 2, 1.0, -1.0)
    return np.column_stack([a, np.sign(a) * np.sqrt(a**2 - diff)])


def test_a_small_gain_is_held_and_a_clear_one_taken():
    y = np.zeros(20)
    small, clear = two_columns(0.05), two_columns(0.5)
    assert least_squares(small, y) == 1 and least_squares(clear, y) == 1
    assert held(small, 0, least_squares(small, y), 1.5) == 0
    assert held(clear, 0, least_squares(clear, y), 1.5) == 1
    # the threshold is k standard errors of the per-row difference of squared errors
    gain = small[:, 0] ** 2 - small[:, 1] ** 2
    t = gain.mean() / (gain.std(ddof=1) / np.sqrt(20))
    assert held(small, 0, 1, 0.99 * t) == 1
    assert held(small, 0, 1, 1.01 * t) == 0


def test_the_held_choice_is_scored_without_each_row():
    """In the rank regime (20 rows) the rule holds column 0; the std scores each row under
    the column the held rule picks without it (constant rows: every rank agreement ties, so
    the rank choice picks the least squared error, column 1)."""
    y = np.zeros(20)
    residuals = two_columns(0.1)
    rule = ChoiceRule(10, 20, 50, 0.005, 0.8, 1.5)
    expected = []
    for i in range(20):
        rest = np.arange(20) != i
        expected.append(residuals[i, rule.pick(residuals[rest], np.zeros((19, 0)), y[rest],
                                                0, 20)] ** 2)
    picked = choose(residuals, np.zeros((20, 0)), y, 0, rule)
    assert picked.rmse == pytest.approx(np.sqrt(np.mean(expected)))
    free = choose(residuals, np.zeros((20, 0)), y, 0, dataclasses.replace(rule, hold_se=-np.inf))
    assert (picked.column, free.column) == (0, 1) and free.rmse != picked.rmse


def test_the_model_holds_the_additive_transfer_from_rank_min_points(monkeypatch):
    """Known devices that are nearly the new one plus 20 noisy rows: the rank choice alone
    moves off the additive model on these rows by chance; held, the additive predicts and
    the std is the held choice scored out of fold."""
    from anb.searchspace import get_space
    from anb.searchspace.sampler import Sampler

    space = get_space("nasbench201")
    choices = Sampler(5, space=space).sample_choices(20)
    rng = np.random.default_rng(5)
    ops = adapt_model.op_components(choices, space)
    cost = ops @ rng.uniform(0.5, 1.5, ops.shape[1]) + 1.0
    known = np.log(np.column_stack([cost * np.exp(0.05 * rng.standard_normal(20)),
                                    cost ** 0.9 * np.exp(0.05 * rng.standard_normal(20))]))
    latency = cost * np.exp(0.08 * rng.standard_normal(20))

    def fit() -> adapt_model.AdaptedModel:
        return adapt_model.AdaptedModel.fit("latency_newbox", ["a", "b"], known, ops, latency,
                                            choices=choices, space=space)

    held = fit()
    monkeypatch.setattr(adapt_model, "CHOICE_RULE",
                        dataclasses.replace(adapt_model.CHOICE_RULE, hold_se=-np.inf))
    free = fit()
    assert len(latency) == adapt_model.RANK_MIN_POINTS
    assert (free.blend, free.embed_blend, free.proxy) != (0.0, 0.0, "")
    assert (held.blend, held.own_blend, held.embed_blend, held.proxy) == (0.0, 0.0, 0.0, "")
    assert held.loo_rmse != free.loo_rmse
