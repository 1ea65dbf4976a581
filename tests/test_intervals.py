"""One interval definition (the predictive distribution's quantiles in the fitted space) and
the proper scores, each against an independent computation (scipy.stats, a numerical CRPS)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats
from typer.testing import CliRunner

import anb
from anb.cli import app
from anb.surrogates import intervals

ARCH = "e6k3l1-e1k5l3-e6k3l2-e6k3l1-e4k3l2-e6k5l1-e4k5l2"


def _lognormal(rng, n=4000, mu=1.0, sigma=0.5, bias=0.0):
    """Labels drawn from a log-normal and the value-space (median, std) a query reports."""
    y = np.exp(rng.normal(mu + bias, sigma, n))
    median = np.full(n, np.exp(mu))
    std = median * np.sqrt(np.expm1(sigma**2))
    return y, median, std


def test_the_interval_is_the_lognormal_quantiles_and_covers_its_level():
    rng = np.random.default_rng(0)
    y, median, std = _lognormal(rng)
    mu, sigma = intervals.fitted_params(median, std, log=True)
    np.testing.assert_allclose(sigma, 0.5, rtol=1e-12)
    lo, hi = intervals.bounds(mu, sigma, log=True, level=0.9)
    dist = stats.lognorm(s=0.5, scale=np.exp(1.0))
    np.testing.assert_allclose([lo[0], hi[0]], dist.ppf([0.05, 0.95]), rtol=1e-12)
    assert intervals.coverage(y, median, std, log=True) == pytest.approx(0.9, abs=0.015)
    assert intervals.coverage(y, median, std, log=True, level=0.5) == pytest.approx(0.5,
                                                                                   abs=0.02)


def test_the_value_space_rule_overstates_a_skewed_miss():
    """With a shifted log-normal (the model's median too high, as a model fitted without
    squeeze-excite predicts ZCU102 throughput), the old rule |y - median| <= 1.645 std in
    value space calls far more rows covered than the true interval holds (0.99 vs 0.73)."""
    rng = np.random.default_rng(1)
    y, median, std = _lognormal(rng, sigma=0.5, bias=-0.5)
    old = float(np.mean(np.abs(y - median) <= 1.6448536269514722 * std))
    new = intervals.coverage(y, median, std, log=True)
    truth = float(np.mean((y >= np.exp(1 - 1.6448536269514722 * 0.5))
                          & (y <= np.exp(1 + 1.6448536269514722 * 0.5))))
    assert new == pytest.approx(truth, abs=1e-12)
    assert old > new + 0.2


def test_crps_nll_and_interval_score_match_independent_computations():
    rng = np.random.default_rng(2)
    y = rng.normal(0.3, 1.2, 50)
    pred, std = np.full(50, 0.1), np.full(50, 0.8)
    cdf = stats.norm(0.1, 0.8).cdf
    numeric = np.mean([integrate.quad(lambda x, t=t: (cdf(x) - (x >= t)) ** 2, -12, 12,
                                      points=[t], limit=200)[0] for t in y])
    assert intervals.crps(y, pred, std, log=False) == pytest.approx(numeric, rel=1e-6)
    assert intervals.nll(y, pred, std, log=False) == pytest.approx(
        -np.mean(stats.norm(0.1, 0.8).logpdf(y)), rel=1e-12)
    lo, hi = stats.norm(0.1, 0.8).ppf([0.05, 0.95])
    winkler = np.mean((hi - lo) + 20 * (np.maximum(lo - y, 0) + np.maximum(y - hi, 0)))
    assert intervals.interval_score(y, pred, std, log=False) == pytest.approx(winkler, rel=1e-12)
    # in log space for a log target: the same numbers as on the logs
    assert intervals.crps(np.exp(y), np.exp(pred), np.exp(pred) * np.sqrt(np.expm1(std**2)),
                          log=True) == pytest.approx(numeric, rel=1e-6)


def test_a_sharper_honest_model_scores_better_and_an_overconfident_one_worse():
    rng = np.random.default_rng(3)
    truth = rng.normal(0, 1, 5000)
    y = truth + rng.normal(0, 0.3, 5000)
    honest = intervals.crps(y, truth, np.full(5000, 0.3), log=False)
    vague = intervals.crps(y, truth, np.full(5000, 1.0), log=False)
    overconfident = intervals.nll(y, truth, np.full(5000, 0.05), log=False)
    assert honest < vague
    assert intervals.nll(y, truth, np.full(5000, 0.3), log=False) < overconfident
    robust, mean_ratio = intervals.sharpness(y, truth, np.full(5000, 0.3), log=False)
    assert robust == pytest.approx(0.3 / np.median(np.abs(y - truth)), rel=1e-12)
    assert mean_ratio > robust  # a few tiny errors inflate the mean ratio


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, "0.9", True])
def test_a_level_outside_zero_and_one_is_refused(level):
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        intervals.z_value(level)


def test_query_gives_the_interval_at_a_level():
    bench = anb.load(quiet=True)
    frame = bench.query([ARCH], ["accuracy", "latency_zcu102"], level=0.8)
    for metric, log in (("val_top1", False), ("latency_zcu102", True)):
        value, std = frame[metric].iloc[0], frame[f"{metric}_std"].iloc[0]
        lo, hi = frame[f"{metric}_lo"].iloc[0], frame[f"{metric}_hi"].iloc[0]
        assert lo < value < hi
        if log:  # asymmetric around the median: the log-normal's own quantiles
            sigma = np.sqrt(np.log1p((std / value) ** 2))
            dist = stats.lognorm(s=sigma, scale=value)
        else:
            dist = stats.norm(value, std)
        np.testing.assert_allclose([lo, hi], dist.ppf([0.1, 0.9]), rtol=1e-9)
    assert "val_top1_lo" not in bench.query([ARCH], "accuracy").columns  # only when asked
    with pytest.raises(ValueError, match="level 2"):
        bench.query([ARCH], "accuracy", level=2)


def test_anb_query_level_adds_the_bounds():
    result = CliRunner().invoke(app, ["query", "accel-nasbench", "-", "--metrics", "accuracy",
                                      "--level", "0.9"], input=ARCH + "\n")
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0].split(",")
    assert header[:5] == ["arch", "val_top1", "val_top1_std", "val_top1_lo", "val_top1_hi"]
    bad = CliRunner().invoke(app, ["query", "accel-nasbench", "-", "--level", "1.2"],
                             input=ARCH + "\n")
    assert bad.exit_code == 2 and "level 1.2 is invalid" in bad.stderr
