"""Search on pymoo: constrained domination, duplicate elimination, tournaments without
replacement, any number of objectives, the out-of-distribution restriction, hypervolume."""
from __future__ import annotations

import numpy as np
import pytest

from anb.nas import (
    Constraint,
    Objective,
    Problem,
    SearchResult,
    analytic_evaluator,
    nsga2,
    pymoo_nsga2,
    random_search,
    regularized_evolution,
)
from anb.nas.pareto import hypervolume
from anb.searchspace.counting import cost_table
from anb.searchspace.space import ANB_SPACE


def _front_scores(result):
    front = result.pareto_front()
    return result.problem.scores({m: front[m].to_numpy() for m in result.problem.metrics})


def test_hypervolume_in_two_and_three_objectives():
    square = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]])
    assert hypervolume(square, np.zeros(2)) == pytest.approx(3 + 2 + 1)
    cube = np.array([[1.0, 1.0, 1.0], [2.0, 0.5, 0.5]])
    assert hypervolume(cube, np.zeros(3)) == pytest.approx(1.0 + 1.0 * 0.25)
    assert hypervolume(cube, np.full(3, 5.0)) == 0.0


def test_search_hypervolume_leaves_out_infeasible_points():
    """Catches: a hypervolume that counts infeasible points (or an OOD one under
    ``supported_only``). The infeasible row dominates every feasible one and would raise the
    volume from 6 to 35; exact values, with an explicit and the default reference."""
    problem = Problem(analytic_evaluator(space=ANB_SPACE), [Objective.parse("params:max"),
                                             Objective.parse("macs:min")],
                      [Constraint.parse("params <= 5")], supported_only=True, space=ANB_SPACE)
    values = {"params": np.array([1.0, 2.0, 3.0, 10.0, 4.0]),
              "macs": np.array([1.0, 2.0, 3.0, 0.5, 0.1]),
              "ood": np.array([False, False, False, False, True])}
    result = SearchResult(problem, np.zeros((5, 7, 4), dtype=int), values, "test", 0)
    assert result.feasible.tolist() == [True, True, True, False, False]
    assert result.hypervolume(np.array([0.0, -4.0])) == (6.0, [0.0, -4.0])
    # default reference: the worst score of every objective over the whole history
    assert result.hypervolume() == (1.0, [1.0, -3.0])
    none = SearchResult(problem, np.zeros((1, 7, 4), dtype=int),
                        {k: v[3:4] for k, v in values.items()}, "test", 0)
    assert none.hypervolume(np.array([0.0, -4.0])) == (0.0, [0.0, -4.0])


def test_constrained_domination_keeps_infeasible_points_off_the_front():
    """A large infeasible architecture dominates small feasible ones in both objectives; it
    must still rank behind them (constrained domination), so the search ends feasible."""
    problem = Problem(analytic_evaluator(space=ANB_SPACE), [Objective.parse("params:max"),
                                             Objective.parse("depth:max")],
                      [Constraint.parse("macs<=200")], space=ANB_SPACE)
    result = nsga2(problem, 1200, seed=0)
    history = result.history()
    last = history.iloc[-300:]
    assert last["feasible"].mean() > 0.5  # offspring of boundary parents may cross it
    front = result.pareto_front()
    assert front["feasible"].all() and (front["macs"] <= 200).all()
    # the unconstrained optimum (infeasible) was seen, yet is not reported
    unconstrained = nsga2(Problem(analytic_evaluator(space=ANB_SPACE), problem.objectives,
                                  [Constraint.parse("macs<=1e9")], space=ANB_SPACE), 1200, seed=0)
    assert unconstrained.best()["macs"] > 200
    best = result.best()
    assert best["feasible"] and best["params"] < unconstrained.best()["params"]


@pytest.mark.parametrize("search", [nsga2, pymoo_nsga2])
def test_offspring_are_never_duplicates_of_each_other_or_the_population(search, monkeypatch):
    """Every generation's offspring differ from each other and from the population they were
    bred from (pymoo's duplicate elimination). Checked on the engine's own generations (a
    callback records the population and offspring of each), so a single repeat fails: with
    elimination off, anb's operators repeat a population member only about once per 200
    offspring, which an overall-uniqueness bar cannot see."""
    import anb.nas.moo as moo

    generations = []  # (offspring, population after survival) per generation, as positions

    def record(algorithm):
        off = algorithm.off.get("X") if algorithm.off is not None else np.empty((0, 0))
        generations.append((np.array(off), np.array(algorithm.pop.get("X"))))

    minimize = moo.minimize
    monkeypatch.setattr(moo, "minimize", lambda *a, **k: minimize(*a, callback=record, **k))
    problem = Problem(analytic_evaluator(space=ANB_SPACE), [Objective.parse("params:max"),
                                             Objective.parse("macs")], space=ANB_SPACE)
    result = search(problem, 2000, seed=3, population=32)
    assert len(generations) > 40
    offspring = population_repeats = 0
    for (_, parents), (children, _) in zip(generations[:-1], generations[1:], strict=True):
        rows = [tuple(x) for x in children]
        assert len(set(rows)) == len(rows), "two offspring of one generation are the same"
        population = {tuple(x) for x in parents}
        population_repeats += sum(row in population for row in rows)
        offspring += len(rows)
    assert offspring > 1500
    assert population_repeats == 0, f"{population_repeats} offspring repeat a population member"
    ids = result.history()["arch_id"].to_numpy()
    for start in range(32, 2000, 32):  # one generation of offspring (32 each here)
        generation = ids[start:start + 32]
        assert len(set(generation)) == len(generation)
    assert len(set(ids)) / len(ids) > 0.97


def test_regularized_evolution_tournaments_sample_without_replacement():
    """With ``sample == population`` every tournament sees the whole population, so each child
    is one mutation away from the current best."""
    problem = Problem(analytic_evaluator(space=ANB_SPACE), [Objective.parse("params:max")],
                      space=ANB_SPACE)
    result = regularized_evolution(problem, 200, seed=4, population=8, sample=8, batch=1)
    choices, params = result.choices, result.values["params"]
    for step in range(8, 200):
        window = slice(step - 8, step)  # the population when child ``step`` was made
        parent = choices[window][int(np.argmax(params[window]))]
        assert (choices[step] != parent).sum() == 1


def test_three_objectives_run_on_nsga3_and_beat_random_search():
    problem = Problem(analytic_evaluator(space=ANB_SPACE),
                      [Objective.parse("params:max"), Objective.parse("macs"),
                       Objective.parse("depth")], space=ANB_SPACE)
    reference = np.array([0.0, -1000.0, -30.0])
    evolved = nsga2(problem, 1500, seed=1)
    random = random_search(problem, 1500, seed=1)
    assert hypervolume(_front_scores(evolved), reference) > \
        1.02 * hypervolume(_front_scores(random), reference)


def test_anb_default_beats_pymoo_default_at_equal_budget():
    problem = Problem(analytic_evaluator(space=ANB_SPACE), [Objective.parse("params:max"),
                                             Objective.parse("macs")], space=ANB_SPACE)
    reference = np.array([0.0, -800.0])
    ours = [hypervolume(_front_scores(nsga2(problem, 1000, seed=s)), reference) for s in (0, 1)]
    theirs = [hypervolume(_front_scores(pymoo_nsga2(problem, 1000, seed=s)), reference)
              for s in (0, 1)]
    assert np.mean(ours) > np.mean(theirs)
    assert len(nsga2(problem, 1000, seed=0).history()) == 1000


def _flagging_evaluator(limit: float):
    """A stand-in surrogate (boundary: no fitted benchmark here) that flags MACs above
    ``limit`` as out of distribution, the way ``SurrogateBenchmark.query`` reports ``ood``."""
    analytic = analytic_evaluator(space=ANB_SPACE)

    def evaluate(choices, metrics):
        out = dict(analytic(choices, [m for m in metrics]))
        out["ood"] = cost_table(choices, space=ANB_SPACE).total("macs") / 1e6 > limit
        return out

    return evaluate


@pytest.mark.slow
@pytest.mark.parametrize("search", [nsga2, regularized_evolution])
def test_supported_only_keeps_the_search_inside_the_data(search):
    objectives = [Objective.parse("params:max"), Objective.parse("macs")]
    free = search(Problem(_flagging_evaluator(300), objectives, space=ANB_SPACE), 800, seed=0)
    assert free.best()["ood"]
    kept = search(Problem(_flagging_evaluator(300), objectives, supported_only=True,
                          space=ANB_SPACE), 800, seed=0)
    assert not kept.best()["ood"] and kept.best()["macs"] <= 300
    assert free.best_supported()["macs"] <= 300


def test_report_carries_std_ood_and_names_an_extrapolated_best(tmp_path):
    from anb.nas.report import headline, write_report

    def evaluator(choices, metrics):
        out = dict(_flagging_evaluator(300)(choices, metrics))
        out["params_std"] = np.full(len(choices), 0.1)
        return out

    result = nsga2(Problem(evaluator, [Objective.parse("params:max"), Objective.parse("macs")],
                           space=ANB_SPACE),
                   300, seed=0)
    summary = write_report(result, tmp_path)
    history = (tmp_path / "history.csv").read_text().splitlines()[0].split(",")
    assert "params_std" in history and "ood" in history
    assert summary["best_out_of_distribution"] is True
    assert summary["best_in_distribution"]["ood"] is False
    assert summary["best_in_distribution"]["macs"] <= 300 and summary["hypervolume"] > 0
    best, inside = headline(summary, ["params", "macs"])  # what `anb search`/`anb pipeline` print
    assert best.startswith(f"best {summary['best']['arch']} ") and "OUT OF DISTRIBUTION" in best
    assert "params=" in best and "+-0.1" in best
    assert inside.startswith(f"best in distribution: {summary['best_in_distribution']['arch']} ")
