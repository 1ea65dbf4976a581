"""Search algorithms that run on surrogates (single and multi-objective)."""
from anb.nas.evaluators import analytic_evaluator, combined, surrogate_evaluator
from anb.nas.objectives import Constraint, Objective
from anb.nas.search import (
                            ALGORITHMS,
                            Problem,
                            SearchResult,
                            nsga2,
                            pymoo_nsga2,
                            random_search,
                            regularized_evolution,
)

__all__ = ["ALGORITHMS", "Constraint", "Objective", "Problem", "SearchResult", "analytic_evaluator",
           "combined", "surrogate_evaluator",
           "nsga2", "pymoo_nsga2", "random_search", "regularized_evolution"]
