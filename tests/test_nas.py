"""NAS on the benchmark: objectives, mutation, Pareto tools and the search algorithms."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anb.nas import (
    Constraint,
    Objective,
    Problem,
    analytic_evaluator,
    nsga2,
    random_search,
    regularized_evolution,
)
from anb.nas.mutation import mutate, random_choices
from anb.nas.pareto import crowding_distance, hypervolume, non_dominated_fronts, pareto_mask
from anb.searchspace import ANB_SPACE, Arch, count

LARGEST = Arch.from_string("-".join(["e6k5l3se"] * 5 + ["e6k5l4se", "e6k5l3se"]), space=ANB_SPACE)


def test_objective_and_constraint_parsing():
    assert Objective.parse("val_top1") == Objective("val_top1", True)
    assert Objective.parse("latency_zcu102") == Objective("latency_zcu102", False)
    assert Objective.parse("throughput_a100:min") == Objective("throughput_a100", False)
    c = Constraint.parse("latency_zcu102 <= 5")
    assert (c.metric, c.upper, c.bound) == ("latency_zcu102", True, 5.0)
    assert c.satisfied(np.array([4.0, 6.0])).tolist() == [True, False]
    assert c.violation(np.array([4.0, 6.5])).tolist() == [0.0, 1.5]
    with pytest.raises(ValueError, match="sense 'best' is not 'max' or 'min'"):
        Objective.parse("val_top1:best")
    with pytest.raises(ValueError, match="constraint 'macs < 3' is malformed"):
        Constraint.parse("macs < 3")


def test_mutation_changes_exactly_one_choice_within_the_space():
    rng = np.random.default_rng(0)
    parents = random_choices(2000, rng, space=ANB_SPACE)
    children = mutate(parents, rng, space=ANB_SPACE)
    assert ((children != parents).sum(axis=(1, 2)) == 1).all()
    ANB_SPACE.ordinal(children)  # raises if any value left the space
    changed_fields = np.argwhere(children != parents)[:, 2]
    assert set(changed_fields.tolist()) == {0, 1, 2, 3}


def test_pareto_tools_on_a_small_example():
    scores = np.array([[1, 5], [2, 4], [3, 3], [2, 2], [1, 1], [3, 3]], dtype=float)
    assert pareto_mask(scores).tolist() == [True, True, True, False, False, True]
    assert non_dominated_fronts(scores).tolist() == [0, 0, 0, 1, 2, 0]
    crowd = crowding_distance(scores[:3])
    assert np.isinf(crowd[[0, 2]]).all() and crowd[1] == pytest.approx(2.0)
    assert hypervolume(scores, np.array([0.0, 0.0])) == pytest.approx(1 * 5 + 1 * 4 + 1 * 3)


def test_evolution_finds_the_known_optimum_that_random_search_misses():
    problem = Problem(analytic_evaluator(space=ANB_SPACE), [Objective.parse("params:max")],
                      space=ANB_SPACE)
    optimum = count(LARGEST, space=ANB_SPACE).params / 1e6
    evolved = regularized_evolution(problem, 1500, seed=0, population=32, sample=8, batch=4)
    random = random_search(problem, 1500, seed=0)
    assert evolved.best()["params"] == pytest.approx(optimum)
    assert evolved.best()["arch"] == str(LARGEST)
    assert random.best()["params"] < 0.97 * optimum
    trace = evolved.incumbent_trace()
    assert (np.diff(trace) >= 0).all() and len(trace) == 1500


def test_constraints_are_respected_and_runs_are_reproducible():
    problem = Problem(analytic_evaluator(space=ANB_SPACE), [Objective.parse("params:max")],
                      [Constraint.parse("macs<=250")], space=ANB_SPACE)
    a = regularized_evolution(problem, 600, seed=3, batch=8)
    b = regularized_evolution(problem, 600, seed=3, batch=8)
    assert a.history().equals(b.history())
    best = a.best()
    assert best["feasible"] and best["macs"] <= 250
    assert best["params"] >= random_search(problem, 600, seed=3).best()["params"] * 0.98


def test_nsga2_front_beats_random_search_in_hypervolume():
    problem = Problem(analytic_evaluator(space=ANB_SPACE),
                      [Objective.parse("params:max"), Objective.parse("macs")], space=ANB_SPACE)
    reference = np.array([0.0, -800.0])

    def volume(result):
        front = result.pareto_front()
        return hypervolume(problem.scores({m: front[m].to_numpy() for m in problem.metrics}),
                              reference)

    evolved, random = nsga2(problem, 1500, seed=1), random_search(problem, 1500, seed=1)
    assert volume(evolved) > 1.05 * volume(random)
    front = evolved.pareto_front()
    assert pareto_mask(problem.scores({m: front[m].to_numpy() for m in problem.metrics})).all()


def test_bad_problems_are_rejected():
    with pytest.raises(ValueError, match="at least one objective"):
        Problem(analytic_evaluator(space=ANB_SPACE), [], space=ANB_SPACE)
    problem = Problem(analytic_evaluator(space=ANB_SPACE), [Objective.parse("val_top1")],
                      space=ANB_SPACE)
    with pytest.raises(ValueError, match=r"unknown metric\(s\) \['val_top1'\]"):
        random_search(problem, 10)
    with pytest.raises(ValueError, match="budget must be >= 1"):
        random_search(Problem(analytic_evaluator(space=ANB_SPACE), [Objective.parse("macs")],
                              space=ANB_SPACE), 0)


@pytest.mark.slow
def test_search_command_writes_results_and_rejects_bad_input(tmp_path):
    anb = str(Path(sys.executable).with_name("anb"))
    out = tmp_path / "s"
    run = subprocess.run([anb, "search", "-o", "params:max", "-o", "macs", "--algorithm", "nsga2",
                          "--budget", "200", "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluations"] == 200 and summary["pareto_size"] > 3
    assert summary["hypervolume"] > 0 and len(summary["hypervolume_reference"]) == 2
    assert (out / "search.png").stat().st_size > 1000
    bad = subprocess.run([anb, "search", "-o", "val_top1", "--out", str(tmp_path / "b")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "need a surrogate benchmark" in bad.stderr
    bad = subprocess.run([anb, "search", "-o", "macs", "--algorithm", "bohb"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "--algorithm 'bohb' is not one of" in bad.stderr


def test_a_metric_given_as_two_objectives_is_refused():
    with pytest.raises(ValueError, match=r"objective metric 'macs' is given twice "
                                         r"\(macs:min and macs:max\)"):
        Problem(analytic_evaluator(space=ANB_SPACE),
                [Objective.parse("macs"), Objective.parse("macs:max")], space=ANB_SPACE)


@pytest.mark.slow
def test_infeasible_search_says_so_writes_its_report_and_exits_1(tmp_path):
    anb = str(Path(sys.executable).with_name("anb"))
    out = tmp_path / "s"
    run = subprocess.run([anb, "search", "-o", "params:max", "-c", "macs<=1", "--budget", "100",
                          "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 1, run.stderr
    summary = json.loads((out / "summary.json").read_text())
    least = summary["best"]
    assert summary["feasible"] is False and summary["pareto_size"] == 0
    assert summary["violations"] == {"macs<=1": pytest.approx(least["macs"] - 1)}
    history = (out / "history.csv").read_text().splitlines()
    assert len(history) == 101
    assert "error: no feasible design: none of the 100 evaluated designs meets macs<=1" \
        in run.stderr
    assert f"the least violating is {least['arch']}" in run.stderr
    assert f"violates macs<=1 by {least['macs'] - 1:.4g}" in run.stderr
    assert "best" not in run.stdout


@pytest.mark.slow
def test_search_budget_over_an_hour_is_refused_without_yes(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from anb.cli import app
    from anb.nas import budget

    anb = str(Path(sys.executable).with_name("anb"))
    huge = subprocess.run([anb, "search", "-o", "macs", "--budget", str(10**9), "--out",
                           str(tmp_path / "huge")], capture_output=True, text=True, timeout=120)
    assert huge.returncode == 2
    assert "error: --budget 1,000,000,000 would take about" in huge.stderr
    assert "runs over 1.0 h need --yes" in huge.stderr
    assert not (tmp_path / "huge").exists()
    monkeypatch.setattr(budget, "MAX_SECONDS", 0.0)  # every estimate is over the limit
    args = ["search", "-o", "macs", "--budget", "300"]
    refused = CliRunner().invoke(app, args + ["--out", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "need --yes" in refused.output
    ran = CliRunner().invoke(app, args + ["--yes", "--out", str(tmp_path / "b")])
    assert ran.exit_code == 0, ran.output
    assert "estimated run time" in ran.output
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["evaluations"] == 300


def test_a_metric_given_twice_through_an_alias_is_refused():
    """``-o val_top1 -o accuracy`` is one metric twice (the README says so); both adapters
    refuse a repeated objective too."""
    from typer.testing import CliRunner

    from anb.cli import app
    from anb.integrations.common import check_metrics

    with pytest.raises(ValueError, match=r"objective metric 'val_top1' is given twice "
                                         r"\(val_top1:max and accuracy:max\)"):
        Problem(analytic_evaluator(space=ANB_SPACE),
                [Objective.parse("val_top1"), Objective.parse("accuracy")], space=ANB_SPACE)
    result = CliRunner().invoke(app, ["search", "-o", "val_top1", "-o", "accuracy",
                                      "--benchmark", "accel-nasbench", "--budget", "4"])
    assert result.exit_code == 2 and "'val_top1' is given twice" in result.stderr
    with pytest.raises(ValueError, match=r"objective metric 'val_top1' is given twice"):
        check_metrics(["val_top1", "latency_zcu102", "val_top1"], ["val_top1", "latency_zcu102"])
