"""The uncertainty package's explicit state: fitting computes each target's ``StdTerms`` and
the ensemble stores them in its ``fit``; nothing writes an estimator's learned state from
outside its own class; the terms keep the artifact's JSON keys and combine one way."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from anb.searchspace import Sampler, get_space
from anb.surrogates.ensemble import TargetSurrogate
from anb.surrogates.fit import packaged_default
from anb.surrogates.plan import PLANNER_XGBOOST, PlanConfig
from anb.surrogates.uncertainty.support import Support
from anb.surrogates.uncertainty.terms import (
    BASE_STD,
    UNMEASURED_STD,
    StdTerms,
    cost_slope,
    widened_std,
)

SURROGATES = Path(__file__).resolve().parents[1] / "anb" / "surrogates"
#: The target spec's std fields, as every artifact since the edge std has held them.
SPEC_KEYS = ["trend", "base_std", "reach_std", "edge_std", "edge_cap", "observation_std"]


def outside_writes(root: Path) -> list[str]:
    """Assignments to a learned attribute (``name_``) of an object that is not ``self``,
    other than in a method of a class on an object that method built (a loader, a copy)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                       if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            flat = [t for target in targets
                    for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
            for t in flat:
                if (not isinstance(t, ast.Attribute) or not t.attr.endswith("_")
                        or t.attr.startswith("_")
                        or isinstance(t.value, ast.Name) and t.value.id == "self"):
                    continue
                function = parent.get(node)
                while function is not None and not isinstance(function, ast.FunctionDef):
                    function = parent.get(function)
                built = {name.id for sub in ast.walk(function)
                         if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Call)
                         for name in sub.targets if isinstance(name, ast.Name)} \
                    if isinstance(parent.get(function), ast.ClassDef) else set()
                if not (isinstance(t.value, ast.Name) and t.value.id in built):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(t)}")
    return found


def test_no_learned_state_is_written_from_outside_its_class():
    """fit.py wrote 9 of them (``trend_`` twice, once a slope and once a learned std)."""
    assert outside_writes(SURROGATES) == []


def test_the_scan_finds_a_write_from_outside(tmp_path):
    (tmp_path / "wiring.py").write_text(
        "def wire(model, support):\n    model.trend_ = 1.0\n    support.hole_std_ = {}\n"
        "class Loader:\n    @classmethod\n    def load(cls, other):\n"
        "        out = cls()\n        out.counts_ = 1\n        other.counts_ = 2\n")
    assert outside_writes(tmp_path) == ["wiring.py:2 model.trend_", "wiring.py:3 support.hole_std_",
                                        "wiring.py:9 other.counts_"]


def test_fit_stores_the_terms_it_is_given_and_the_spec_keeps_its_keys():
    X = np.random.default_rng(0).normal(size=(60, 3))
    terms = StdTerms(cost_std=0.7, base_std=0.2, reach_std=0.1, edge_std=(0.3, 0.4),
                     edge_cap=(1.0, 2.0), observation_std=0.05)
    model = TargetSurrogate("xgboost", {"n_estimators": 3}, 1).fit(X, X[:, 0], std_terms=terms)
    assert model.std_terms_ is terms
    spec = model.spec()
    assert [key for key in spec if key in SPEC_KEYS] == SPEC_KEYS
    assert spec["trend"] == 0.7 and spec["edge_std"] == [0.3, 0.4] and spec["edge_cap"] == [1, 2]
    assert StdTerms.from_spec(spec) == terms
    bare = TargetSurrogate("xgboost", {"n_estimators": 3}, 1).fit(X, X[:, 0])
    assert bare.std_terms_ == StdTerms() and bare.std_terms_.base_std == BASE_STD


def test_a_spec_from_before_a_term_reads_as_no_term():
    old = StdTerms.from_spec({"trend": 0.25, "base_std": 0.5})  # before reach, edge, noise
    assert old == StdTerms(cost_std=0.25, base_std=0.5)
    assert old.edge_width(np.array([-3.0, 0.0, 3.0])).tolist() == [0.0, 0.0, 0.0]
    assert StdTerms.from_spec({}).base_std == BASE_STD


def test_every_term_widens_in_quadrature():
    support = Support(get_space("nasbench201")).with_stds({"t": 2.0}, {"t": 3.0})
    terms = StdTerms(cost_std=5.0, base_std=7.0, reach_std=11.0, edge_std=(13.0, 17.0),
                     edge_cap=(np.inf, 0.5))
    measures = {"ood_cost": 0.1, "hole": 0.2, "ood_unit": 0.3, "unmeasured": 0.4,
                "excess": 0.5, "reach": 0.6, "edge": np.array([1.0, -0.1])}
    parts = [0.5, 5.0 * 0.1, 2.0 * 0.2, 3.0 * 0.3, UNMEASURED_STD * 0.4, 7.0 * 0.5, 11.0 * 0.6]
    edge = np.array([17.0 * 0.5, 13.0 * 0.1])  # above: capped at 0.5; below: 0.1
    np.testing.assert_allclose(widened_std(terms, support, "t", np.full(2, 0.5), measures),
                               np.sqrt(sum(p**2 for p in parts) + edge**2), rtol=1e-12)
    plain = widened_std(StdTerms(base_std=0.0), None, "t", np.full(2, 0.5),
                        {**measures, "edge": np.zeros(2)})
    np.testing.assert_allclose(plain, np.hypot(0.5, UNMEASURED_STD * 0.4), rtol=1e-12)


def test_with_stds_is_a_copy():
    space = get_space("nasbench201")
    support = Support(space).fit(Sampler(seed=0, space=space).sample_choices(50))
    learned = support.with_stds({"t": 1.0}, {"t": 2.0})
    assert support.hole_std_ == {} and support.unit_std_ == {}
    assert learned.hole_std_ == {"t": 1.0} and learned.unit_std_ == {"t": 2.0}
    assert learned.positions_ is support.positions_


def test_cost_slope_is_the_absolute_slope():
    log_macs = np.linspace(0.0, 1.0, 11)
    assert cost_slope(log_macs, 3.0 - 2.0 * log_macs) == pytest.approx(2.0)


def test_the_planner_changes_only_trees_and_stopping_of_the_packaged_xgboost_settings():
    packaged = packaged_default("default", "params")()
    assert PlanConfig().params == {**packaged, **PLANNER_XGBOOST}
    assert set(PLANNER_XGBOOST) == {"n_estimators", "early_stopping_rounds"}
    assert PlanConfig().params["max_depth"] == packaged["max_depth"]
