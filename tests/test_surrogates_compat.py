"""Scripts written for the reference benchmark run on anb with only the import lines changed.

The clients below are written the way the reference's ``example.py`` and the optimisers of its
evaluation folder call it (``ANBEnsemble(...).load_ensemble()``, ``query`` on ConfigSpace
samples, ``acc, _ = b.query(config)``); the benchmark behind them is a small real fit.
"""
from __future__ import annotations

import copy
import random

import numpy as np
import pytest

import anb.surrogates.compat as anb  # was: import accelnb as anb
from anb.resources import RELEASED_DATASET as TARBALL
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, TargetConfig, fit_benchmark, prepare, save
from anb.surrogates.compat import EfficientNetSS as ss  # was: configurationspaces.searchspaces

TARGETS = ["val_top1", "throughput_tpuv2", "latency_zcu102"]


@pytest.fixture(scope="module")

def path(tmp_path_factory):
    small = TargetConfig("xgboost", {"n_estimators": 200, "learning_rate": 0.1, "n_jobs": 1}, 3)
    # no internal hold-outs: the clients read means, members and stds, not how wide the std
    # grows in holes of the data
    config = FitConfig(targets=TARGETS, default=small, per_target={}, layer_cost_trim=None,
                       hole_folds=0)
    bench = fit_benchmark(prepare(TARBALL, TARGETS, space=ANB_SPACE), config, progress=False)
    return save(bench, tmp_path_factory.mktemp("compat") / "bench")


@pytest.mark.slow
def test_example_script(path):
    """The reference's example.py, import lines changed (and the artifact path given)."""
    seed = 3
    ensemble_inst_acc = anb.ANBEnsemble("xgb", seed=seed, path=path)
    ensemble_inst_thr = anb.ANBEnsemble("xgb", device="tpuv2", metric="throughput", seed=seed,
                                        path=path)
    acc_model = ensemble_inst_acc.load_ensemble()
    thr_model = ensemble_inst_thr.load_ensemble()
    search_space = ss()
    test_sample_rand = search_space.random_sample(1)  # one Configuration, not a list
    test_sample_man = search_space.manual_sample([[1, 6, 6, 6, 6, 6, 6], [3, 3, 5, 3, 5, 5, 3],
                                                  [1, 2, 2, 3, 3, 4, 1], [True] * 7])
    samples = [test_sample_rand, test_sample_man]
    mean_acc, std_acc = acc_model.query(samples)
    mean_thr, std_thr = thr_model.query(samples)
    assert mean_acc.shape == std_acc.shape == mean_thr.shape == (2,)
    b0 = anb.ANBEnsemble("xgb", path=path).load_ensemble().query_mean(
        "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se")
    assert mean_acc[1] == pytest.approx(b0, abs=1e-4) and np.ndim(b0) == 0
    assert np.array_equal(acc_model.query_std(samples), std_acc) and (std_acc > 0).all()
    members = acc_model.query_members(samples)
    assert members.shape == (2, 3)
    np.testing.assert_allclose(members.mean(1), mean_acc, atol=1e-3)
    noise = acc_model.query_noise(samples)
    assert np.array_equal(noise, acc_model.query_noise(samples))  # seeded by seed=3
    single = anb.ANBEnsemble("xgb", seed=seed, path=path).load_model()
    one_mean, one_std = single.query(samples)
    np.testing.assert_allclose(one_mean, members[:, 0], rtol=1e-6) and (one_std == 0).all()
    lat, _ = anb.ANBEnsemble("xgb", device="zcu102", metric="latency",
                             path=path).load_ensemble().query(search_space.random_sample(3))
    assert lat.shape == (3,) and (lat > 0).all()


def test_regularized_evolution_client(path):
    """The way the reference's evaluation-folder optimisers call it: one Configuration at a
    time, ``acc, _ = b.query(config)``, mutations through ConfigSpace."""
    random.seed(1)
    b = anb.ANBEnsemble("xgb", seed=None, path=path).load_ensemble()
    cs = ss(seed=1).ss

    def mutate(config):
        values = dict(config)
        name = random.choice(sorted(values))
        hp = cs[name]
        choices = list(hp.sequence) if hasattr(hp, "sequence") else list(hp.choices)
        values[name] = random.choice([v for v in choices if v != values[name]])
        return type(config)(cs, values=values)

    population = []
    for config in cs.sample_configuration(10):
        acc, _ = b.query(config)
        population.append((float(acc), config))
    history = list(population)
    for _ in range(30):
        parent = max(random.sample(population, 5), key=lambda p: p[0])[1]
        child = mutate(copy.deepcopy(parent))
        acc, _ = b.query(child)
        population.append((float(acc), child))
        population.pop(0)
        history.append(population[-1])
    assert max(a for a, _ in history) >= max(a for a, _ in history[:10])
    assert b.query(dict(history[0][1]))[0] == pytest.approx(history[0][0])


def test_bad_device_or_metric_is_a_clear_error(path):
    with pytest.raises(ValueError, match="unknown device 'h100'"):
        anb.ANBEnsemble("xgb", device="h100", metric="throughput", path=path).load_ensemble()
    with pytest.raises(ValueError, match="needs metric 'throughput' or 'latency'"):
        anb.ANBEnsemble("xgb", device="a100", metric="energy", path=path)
    with pytest.raises(ValueError, match="needs a device"):
        anb.load_ensemble(path, "latency")
    assert anb.ANBEnsemble("xgb", path=path).load_ensemble().query([])[0].shape == (0,)
