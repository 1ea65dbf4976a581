"""Hyper-parameter search with Optuna (TPE) on the validation split, under a time budget."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from anb.extras import require
from anb.surrogates.estimators import make_family

SearchSpaceFn = Callable[[Any], dict[str, Any]]

SEARCH_SPACES: dict[str, SearchSpaceFn] = {
    "xgboost": lambda t: {
        "max_depth": t.suggest_int("max_depth", 2, 8),
        "learning_rate": t.suggest_float("learning_rate", 0.01, 0.2, log=True),
        "subsample": t.suggest_float("subsample", 0.5, 1.0),
        "colsample_bytree": t.suggest_float("colsample_bytree", 0.3, 1.0),
        "min_child_weight": t.suggest_float("min_child_weight", 0.5, 20, log=True),
        "reg_lambda": t.suggest_float("reg_lambda", 1e-3, 10, log=True),
    },
    "lightgbm": lambda t: {
        "num_leaves": t.suggest_int("num_leaves", 4, 64, log=True),
        "learning_rate": t.suggest_float("learning_rate", 0.01, 0.2, log=True),
        "subsample": t.suggest_float("subsample", 0.5, 1.0),
        "colsample_bytree": t.suggest_float("colsample_bytree", 0.3, 1.0),
        "min_child_samples": t.suggest_int("min_child_samples", 3, 50, log=True),
        "reg_lambda": t.suggest_float("reg_lambda", 1e-3, 10, log=True),
    },
    "svr": lambda t: {
        "C": t.suggest_float("C", 0.1, 100, log=True),
        "epsilon": t.suggest_float("epsilon", 1e-3, 0.3, log=True),
        "gamma": t.suggest_float("gamma", 1e-4, 0.1, log=True),
    },
}


def tune(family: str, X: np.ndarray, y: np.ndarray, X_val: np.ndarray, y_val: np.ndarray,
         seconds: float, fixed: dict[str, Any] | None = None, seed: int = 0,
         max_trials: int | None = None) -> dict[str, Any]:
    """Best hyper-parameters (merged with ``fixed``) by validation RMSE within ``seconds``."""
    optuna = require("optuna", "fit", "tuning a surrogate's hyper-parameters")

    if family not in SEARCH_SPACES:
        raise ValueError(f"no HPO search space for family {family!r}; "
                         f"tunable families are {sorted(SEARCH_SPACES)}")
    if seconds <= 0 and not max_trials:
        raise ValueError(f"HPO needs a positive time budget, got {seconds} s")
    fixed = dict(fixed or {})

    def objective(trial) -> float:
        params = {**fixed, **SEARCH_SPACES[family](trial)}
        model = make_family(family, params).fit(X, y, X_val, y_val)
        return float(np.sqrt(np.mean((model.predict(X_val) - y_val) ** 2)))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, timeout=seconds if seconds > 0 else None, n_trials=max_trials)
    return {**fixed, **study.best_params}
