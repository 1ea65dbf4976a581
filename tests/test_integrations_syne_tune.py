"""The Syne Tune blackbox with the real ``syne-tune`` package, on the packaged space (released
data) and on NAS-Bench-201 (HELP's real latencies): its space, columns, noise, constraints and
simulated time, and a multi-objective search that beats random search at equal budget."""
from __future__ import annotations

import logging
import random

import numpy as np
import pytest

from anb.integrations.syne_tune import (
    ELAPSED_TIME,
    AnbBlackbox,
    mo_scheduler,
    simulate,
)
from tests.integration_helpers import front_volume

pytestmark = pytest.mark.slow  # real training / fitting / searches: over 2 s each


@pytest.fixture(scope="module")
def released(small_released_bench):
    return small_released_bench


@pytest.fixture(scope="module")
def nb201(small_nb201_bench):
    return small_nb201_bench


@pytest.fixture(autouse=True)
def _syne_tune_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNETUNE_FOLDER", str(tmp_path / "syne-tune"))
    logging.getLogger("syne_tune").setLevel(logging.ERROR)


def test_config_space_is_the_search_space(released, nb201):
    for bench in (released, nb201):
        bb = AnbBlackbox(bench)
        assert list(bb.configuration_space) == [v.name for v in bench.space.variables]
    edge = AnbBlackbox(nb201).configuration_space["edge_1_0"]
    assert list(edge.categories) == list(nb201.space.variables[0].labels)
    assert list(AnbBlackbox(released).configuration_space["block0_e"].categories) == [1, 4, 6]


def test_columns_noise_constraints_and_elapsed_time(released):
    bb = AnbBlackbox(released, constraints=["latency_zcu102<=5"], seed=3)
    rng = np.random.RandomState(0)
    configs = [{k: d.sample(random_state=rng) for k, d in bb.configuration_space.items()}
               for _ in range(40)]
    got = bb.evaluate(configs)
    assert list(got.columns) == ["val_top1", "latency_zcu102", "train_time", "neg_val_top1",
                                 "constraint_0", "feasible", ELAPSED_TIME]
    choices = [released.space.arch({k: (v == "True") if k.endswith("_se") else v
                                    for k, v in c.items()}) for c in configs]
    drawn = released.query(choices, noise=True, seed=3)
    for metric in ("val_top1", "latency_zcu102", "train_time"):
        assert np.allclose(got[metric], drawn[metric])
    assert not np.allclose(got["val_top1"], released.query(choices)["val_top1"])  # noisy
    assert np.allclose(got[ELAPSED_TIME], got["train_time"])  # seconds of simulated training
    assert np.allclose(got["neg_val_top1"], -got["val_top1"])
    assert np.allclose(got["constraint_0"], got["latency_zcu102"] - 5)
    assert ((got["constraint_0"] <= 0) == (got["feasible"] == 1)).all()
    assert 0 < got["feasible"].sum() < len(got)
    assert np.allclose(bb.evaluate(configs, seed=4)["val_top1"],
                       released.query(choices, noise=True, seed=4)["val_top1"])
    row = bb(configs[0])  # every fidelity: one, the finished training
    assert row.shape == (1, len(bb.objectives_names))
    assert np.allclose(row[0], got.iloc[0].to_numpy())
    assert bb(configs[0], fidelity=1)["val_top1"] == pytest.approx(got["val_top1"][0])


def test_bad_configurations_and_names_are_refused(released):
    bb = AnbBlackbox(released)
    config = {k: d.sample() for k, d in bb.configuration_space.items()}
    with pytest.raises(ValueError, match=r"variable 'block0_e' has value 5; allowed: \[1, 4, 6\]"):
        bb.evaluate([{**config, "block0_e": 5}])
    with pytest.raises(ValueError, match="unknown objective"):
        AnbBlackbox(released, objectives=["throughput_a100"])
    with pytest.raises(ValueError, match="names metric 'latency_vck190'"):
        AnbBlackbox(released, constraints=["latency_vck190<=3"])


@pytest.mark.parametrize("space", ["released", "nb201"])
def test_morea_front_beats_random_search_at_equal_simulated_time(space, released, nb201):
    if space == "released":
        bench, objectives = released, {"val_top1": True, "latency_zcu102": False}
        reference, seconds = {"val_top1": 50.0, "latency_zcu102": 15.0}, 60 * 6000.0
        tick = 60.0  # trials take 1,100-4,300 simulated s: 6,000 rounds instead of 72,000
    else:
        bench, objectives = nb201, {"latency_eyeriss": False, "latency_titan-rtx-1": False}
        reference, seconds = {"latency_eyeriss": 8.0, "latency_titan-rtx-1": 40.0}, 150.0
        tick = 5.0
    bb = AnbBlackbox(bench, objectives=list(objectives))
    volumes = {}
    for method in ("morea", "random"):
        kwargs = {"population_size": 20, "sample_size": 5} if method == "morea" else {}
        runs = []
        for seed in (0, 1):
            # Syne Tune draws part of a run's randomness from the global generators: seeded
            # here, a run does not depend on what the tests before it drew
            np.random.seed(seed)
            random.seed(seed)
            runs.append(simulate(bb, mo_scheduler(bb, method, seed=seed, **kwargs), seconds,
                                 tick=tick))
        assert all(run["st_tuner_time"].max() <= seconds * 1.2 for run in runs)
        volumes[method] = [front_volume(run, objectives, reference) for run in runs]
    assert sum(volumes["morea"]) > sum(volumes["random"]), volumes


def test_trials_start_on_the_ticks_of_the_simulated_clock(released):
    bb = AnbBlackbox(released, objectives=["val_top1", "latency_zcu102"])
    run = simulate(bb, mo_scheduler(bb, "random", seed=0), 12000.0, tick=1000.0)
    starts = (run["st_tuner_time"] - run[ELAPSED_TIME]).to_numpy()
    assert len(run) > 4 and starts.max() >= 1000.0  # trials after the first four
    offset = np.mod(starts - starts.min(), 1000.0)  # Syne Tune adds fractions of a second
    assert (np.minimum(offset, 1000.0 - offset) < 1.0).all(), starts


def test_example_script_runs_both_methods(released, tmp_path, monkeypatch, capsys):
    """The script as ``python examples/syne_tune_moo.py ...`` runs it, in this process."""
    import runpy

    from anb.surrogates import save
    from tests.trainer_helpers import REPO

    folder = save(released, tmp_path / "bench")
    script = REPO / "examples" / "syne_tune_moo.py"
    monkeypatch.setattr("sys.argv", [str(script), "--benchmark", str(folder), "--hours", "15",
                                     "--seeds", "0"])
    runpy.run_path(str(script), run_name="__main__")
    lines = [line for line in capsys.readouterr().out.splitlines() if "hypervolume" in line]
    assert [line.split(":")[0].strip() for line in lines] == ["morea", "random"]
