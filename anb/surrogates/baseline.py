"""The reference benchmark's surrogate baselines, re-measured with its own tuned settings.

One XGBoost and one LightGBM model per target on the 28-value ordinal encoding, raw labels, the
tuned hyper-parameters of ``configs/surrogates/baselines/`` (docs/background/accel-nasbench.md,
"Baseline hyper-parameters": each ConfigSpace parameter's ``default``, ``num_rounds`` with
``early_stopping_rounds`` on validation), trained with the libraries' native ``train`` as the
reference does.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anb.extras import require
from anb.resources import CONFIG_DIR
from anb.searchspace.encoding import encode
from anb.surrogates.fit import Prepared
from anb.surrogates.metrics import regression_metrics

#: docs/background/accel-nasbench.md, "Published scores": (R^2, Kendall tau) on the published test
#: split.
REFERENCE_BASELINES: dict[str, dict[str, tuple[float, float]]] = {
    "val_top1": {"xgboost": (0.9822, 0.9208), "lightgbm": (0.9841, 0.9237)},
    "throughput_3090": {"xgboost": (0.9946, 0.9628), "lightgbm": (0.9958, 0.9653)},
    "throughput_a100": {"xgboost": (0.9951, 0.9736), "lightgbm": (0.9952, 0.9670)},
    "throughput_tpuv2": {"xgboost": (0.9944, 0.9599), "lightgbm": (0.9943, 0.9629)},
    "throughput_tpuv3": {"xgboost": (0.9748, 0.9023), "lightgbm": (0.9755, 0.9016)},
    "throughput_zcu102": {"xgboost": (0.9893, 0.9506), "lightgbm": (0.9874, 0.9462)},
    "throughput_vck190": {"xgboost": (0.9899, 0.9462), "lightgbm": (0.9899, 0.9470)},
    "latency_zcu102": {"xgboost": (0.9995, 0.9792), "lightgbm": (0.9995, 0.9802)},
    "latency_vck190": {"xgboost": (0.9986, 0.9776), "lightgbm": (0.9990, 0.9801)},
}

#: Kendall-tau goals from the measurement-noise ceilings (issue 5;
#: docs/background/accel-nasbench.md, "Noise ceilings").
TAU_GOALS = {"val_top1": 0.93, "throughput_a100": 0.99, "throughput_3090": 0.99,
             "throughput_tpuv2": 0.958, "throughput_tpuv3": 0.921, "throughput_zcu102": 0.98,
             "throughput_vck190": 0.98, "latency_zcu102": 0.99, "latency_vck190": 0.99}


BASELINE_DIR = CONFIG_DIR / "surrogates" / "baselines"
_FILE_PREFIX = {"xgboost": "xgb", "lightgbm": "lgb"}
#: Targets the reference tuned no model for, and the target whose settings their plain
#: baseline borrows.
BORROWED_SETTINGS = {"train_time": "val_top1"}


def settings_file(target: str, family: str) -> Path:
    """The reference's settings file for ``target`` (accuracy: the un-suffixed one; see
    :data:`BORROWED_SETTINGS` for targets it has none of)."""
    prefix = _FILE_PREFIX[family]
    target = BORROWED_SETTINGS.get(target, target)
    if target == "val_top1":
        return BASELINE_DIR / f"{prefix}_configspace.json"
    metric, device = target.split("_", 1)
    return BASELINE_DIR / f"{prefix}_accel_{device}_{metric}_configspace.json"


def reference_settings(target: str, family: str) -> dict[str, Any]:
    """Tuned settings as native parameter names (``param:`` prefix dropped)."""
    path = settings_file(target, family)
    if not path.is_file():
        raise ValueError(f"no reference {family} settings for target {target!r} ({path.name})")
    out = {}
    for hp in json.loads(path.read_text())["hyperparameters"]:
        value = hp["value"] if hp["type"] == "constant" else hp["default"]
        out[hp["name"].removeprefix("param:")] = value
    out.pop("bananas_enc", None)
    return out


class ReferenceModel:
    """One baseline model trained the reference's way (native ``train`` + early stopping)."""

    def __init__(self, family: str, settings: dict[str, Any], n_jobs: int = 1,
                 scale: float = 1.0, seed: int = 0):
        self.family, self.settings = family, dict(settings)
        self.n_jobs, self.scale, self.seed = n_jobs, scale, seed

    def fit(self, X: np.ndarray, y: np.ndarray, X_val: np.ndarray, y_val: np.ndarray
            ) -> ReferenceModel:
        params = dict(self.settings)
        rounds = max(20, int(params.pop("num_rounds") * self.scale))
        stop = int(params.pop("early_stopping_rounds"))
        if self.family == "xgboost":
            xgb = require("xgboost", "fit", "the reference baseline")

            params.update(nthread=self.n_jobs, seed=self.seed, objective="reg:squarederror")
            self.model_: Any = xgb.train(params, xgb.DMatrix(X, y), rounds,  # or lgb's Booster
                                         evals=[(xgb.DMatrix(X_val, y_val), "val")],
                                         early_stopping_rounds=stop, verbose_eval=False)
        else:
            lgb = require("lightgbm", "fit", "the reference baseline")

            params.update(objective="regression", num_threads=self.n_jobs, seed=self.seed,
                          verbosity=-1)
            train = lgb.Dataset(X, y, params={"max_bin": params.get("max_bin", 255)})
            self.model_ = lgb.train(params, train, rounds,
                                    valid_sets=[lgb.Dataset(X_val, y_val, reference=train)],
                                    callbacks=[lgb.early_stopping(stop, verbose=False)])
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self.family == "xgboost":
            xgb = require("xgboost", "fit", "the reference baseline")

            best = self.model_.best_iteration
            return self.model_.predict(xgb.DMatrix(X), iteration_range=(0, best + 1))
        return self.model_.predict(X, num_iteration=self.model_.best_iteration)


def evaluate_baselines(prepared: Prepared, targets: list[str] | None = None, n_jobs: int = 1,
                       scale: float = 1.0, split: str = "test",
                       fitted: dict[tuple[str, str], object] | None = None,
                       families: tuple[str, ...] = ("xgboost", "lightgbm")) -> pd.DataFrame:
    """Fit and score the reference's baselines per target; rows ``(target, family)``.
    Fitted models are put into ``fitted`` (keyed by ``(target, family)``) when given."""
    X = encode(prepared.choices, "ordinal", space=prepared.space)
    train, val, test = (prepared.masks[k] for k in ("train", "val", split))
    rows = []
    for target in targets or list(prepared.labels):
        lab = prepared.labels[target]
        tr, va, te = (m & lab.present for m in (train, val, test))
        for name in families:
            family = ReferenceModel(name, reference_settings(target, name), n_jobs, scale)
            family.fit(X[tr], lab.values[tr], X[va], lab.values[va])
            metrics = regression_metrics(lab.values[te], family.predict(X[te]))
            if fitted is not None:
                fitted[(target, name)] = family
            rows.append({"target": target, "family": name, **metrics})
    return pd.DataFrame(rows).set_index(["target", "family"])


def comparison_table(ours: pd.DataFrame, baselines: pd.DataFrame | None = None) -> pd.DataFrame:
    """Our R^2 / tau beside the re-measured and REFERENCE baselines, with differences and the
    distance to each Kendall-tau goal."""
    rows = []
    for label, row in ours.iterrows():
        target = str(label)
        out = {"target": target, "r2": row["r2"], "tau": row["kendall_tau"]}
        best_r2 = best_tau = -np.inf
        if baselines is not None and target in baselines.index.get_level_values(0):
            for family, b in baselines.loc[target].iterrows():
                out[f"{family}_r2"], out[f"{family}_tau"] = b["r2"], b["kendall_tau"]
                best_r2, best_tau = max(best_r2, b["r2"]), max(best_tau, b["kendall_tau"])
        for family, (r2, tau) in REFERENCE_BASELINES.get(target, {}).items():
            out[f"ref_{family}_r2"], out[f"ref_{family}_tau"] = r2, tau
            best_r2, best_tau = max(best_r2, r2), max(best_tau, tau)
        if np.isfinite(best_tau):
            out["d_r2_vs_best"] = row["r2"] - best_r2
            out["d_tau_vs_best"] = row["kendall_tau"] - best_tau
        if target in TAU_GOALS:
            out["tau_goal"] = TAU_GOALS[target]
            out["to_goal"] = row["kendall_tau"] - TAU_GOALS[target]
        rows.append(out)
    return pd.DataFrame(rows).set_index("target")
