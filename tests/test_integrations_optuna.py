"""The OptunaHub problem with real ``optuna`` and ``optunahub``, on the packaged space (released
data) and on NAS-Bench-201 (HELP's real latencies): single- and multi-objective studies,
constraints set on each trial, and NSGA-II's front against random search at equal budget."""
from __future__ import annotations

import numpy as np
import optuna
import pandas as pd
import pytest
from optunahub.benchmarks import BaseProblem

from anb.integrations.optuna import AnbProblem
from tests.integration_helpers import front_volume

pytestmark = pytest.mark.slow  # real training / fitting / searches: over 2 s each

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def released(small_released_bench):
    return small_released_bench


@pytest.fixture(scope="module")
def nb201(small_nb201_bench):
    return small_nb201_bench


def test_single_objective_study(released):
    problem = AnbProblem(released)
    assert isinstance(problem, BaseProblem)
    assert problem.directions == [optuna.study.StudyDirection.MAXIMIZE]
    assert list(problem.search_space) == [v.name for v in released.space.variables]
    study = optuna.create_study(directions=problem.directions,
                                sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(problem, n_trials=25)
    best = study.best_trial.params
    arch = released.space.arch({k: (v == "True") if k.endswith("_se") else v
                                for k, v in best.items()})
    assert study.best_value == pytest.approx(released.query([arch], "val_top1")["val_top1"][0])


def test_constraints_are_set_on_each_trial(released):
    problem = AnbProblem(released, ["val_top1", "train_time"],
                         constraints=["latency_zcu102<=5"])
    assert problem.directions == [optuna.study.StudyDirection.MAXIMIZE,
                                  optuna.study.StudyDirection.MINIMIZE]
    study = optuna.create_study(directions=problem.directions,
                                sampler=optuna.samplers.RandomSampler(seed=1))
    study.optimize(problem, n_trials=20)
    for trial in study.trials:
        latency = problem.values(trial.params)["latency_zcu102"]
        assert trial.system_attrs["constraints:latency_zcu102<=5"] == pytest.approx(latency - 5)
    with pytest.raises(ValueError, match="unknown objective"):
        AnbProblem(released, ["throughput_a100"])


@pytest.mark.parametrize("space", ["released", "nb201"])
def test_nsga2_front_beats_random_search_at_equal_budget(space, released, nb201):
    if space == "released":
        bench, objectives = released, {"val_top1": True, "latency_zcu102": False}
        reference, constraint = {"val_top1": 50.0, "latency_zcu102": 15.0}, "train_time<=2500"
    else:
        bench, objectives = nb201, {"latency_eyeriss": False, "latency_titan-rtx-1": False}
        reference, constraint = {"latency_eyeriss": 8.0, "latency_titan-rtx-1": 40.0}, None
    problem = AnbProblem(bench, list(objectives), constraints=[constraint] if constraint else [])
    volumes: dict[str, list[float]] = {}
    for name in ("nsga2", "random"):
        volumes[name] = []
        for seed in (0, 1):
            sampler = (optuna.samplers.NSGAIISampler(seed=seed, population_size=20)
                       if name == "nsga2" else optuna.samplers.RandomSampler(seed=seed))
            study = optuna.create_study(directions=problem.directions, sampler=sampler)
            study.optimize(problem, n_trials=160)
            feasible = [t for t in study.trials
                        if all(v <= 0 for k, v in t.system_attrs.items()
                               if k.startswith("constraints:"))]
            assert 0 < len(feasible) <= 160
            values = pd.DataFrame([t.values for t in feasible], columns=list(objectives))
            volumes[name].append(front_volume(values, objectives, reference))
    assert sum(volumes["nsga2"]) > sum(volumes["random"]), volumes
    assert np.isfinite(sum(volumes["random"]))
