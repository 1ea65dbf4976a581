"""One target's surrogate: an ensemble of members plus an estimated label-noise term.

Members cycle through one or more families (e.g. XGBoost, LightGBM and SVR) with their own seeds,
optionally on bootstrap resamples of the training rows, and optionally as a correction of a base
feature (the layer-cost prediction). The predictive variance is the
members' spread plus a noise variance estimated on the validation split, so that intervals
cover observed labels, not only the model's own disagreement. The noise is heteroscedastic: one
std per ``NOISE_BINS`` quantile bin of the predicted value on the validation split,
interpolated between the bins' median predictions (``noise_at``): low-accuracy or extreme-cost
architectures are predicted less well than the rest (``benchmarks/surrogates.py``, 90 %
coverage per quartile of the target).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from anb.io import atomic_write_bytes
from anb.surrogates.estimators import FAMILIES, NATIVE_SUFFIX, Family, make_family
from anb.surrogates.uncertainty.holes import hole_std
from anb.surrogates.uncertainty.terms import StdTerms

#: Bins of the predicted value the noise std is estimated in. Re-chosen for the interval-level
#: rule by 2-fold cross-validation over the validation split (the packaged fit's members; each
#: half's bins set the other half's std; 3 seeds, 10 targets): mean |coverage - 0.9| per
#: quartile of the target for 1, 3, 4, 5, 6, 8, 10 bins: 0.075, 0.041, 0.037, 0.038, 0.041,
#: 0.044, 0.041. 4 and 5 tie; 5 (chosen so before) is kept.
NOISE_BINS = 5
#: The edge of the training labels: a predicted mean beyond this quantile of them (or short of
#: ``1 -`` it) is at the edge, where the truth may lie beyond what the data hold (measured in
#: ``benchmarks/shift.py``, top family, 1 member: of the own-target top-decile hold-outs 73-100 %
#: are predicted past the 0.95 quantile against 5 % in distribution; past 0.99, 3-100 %, and the
#: 3090's and VCK190's held-out rows stay under-covered at any std per unit of edge excess).
EDGE_QUANTILE = 0.95


class TargetSurrogate:
    """Bagged ensemble for one (transformed) target with mean / std prediction."""

    def __init__(self, family: str | list[str] = "xgboost",
                 params: dict[str, Any] | list[dict[str, Any]] | None = None,
                 n_members: int = 3, bootstrap: bool = False, base_column: int | None = None,
                 random_state: int = 0, extrapolate: bool = True):
        self.family = family
        self.params = params
        self.n_members = n_members
        self.bootstrap = bootstrap
        self.base_column = base_column
        self.random_state = random_state
        self.extrapolate = extrapolate

    def _raw_base(self, X: np.ndarray) -> np.ndarray:
        if self.base_column is None:
            return np.zeros(len(X))
        return X[:, self.base_column].astype(np.float64)

    def _base(self, X: np.ndarray) -> np.ndarray:
        """The base feature (the layer-cost prediction). With ``extrapolate`` it follows the
        per-layer sum beyond its training range, where the tree members are flat: right for
        costs, which add up over layers (clipping gave the held-out top decile of a device
        metric one constant prediction: ``benchmarks/shift.py``, top family, MAPE 15 % ->
        0.2-3 %); without it, clipped to that range: accuracy saturates, a sum does not."""
        base = self._raw_base(X)
        if self.extrapolate:
            return base
        return np.clip(base, *getattr(self, "base_range_", (-np.inf, np.inf)))

    def base_excess(self, X: np.ndarray) -> np.ndarray:
        """How far the base lies outside its training range (model-space units; 0 inside)."""
        base = self._raw_base(X)
        low, high = getattr(self, "base_range_", (np.inf, -np.inf))
        if low > high:  # no base, or none fitted
            return np.zeros(len(X))
        return np.maximum(np.maximum(base - high, low - base), 0.0)

    def base_span(self) -> float:
        """The width of the base's training range (1 without a base or a spread)."""
        low, high = getattr(self, "base_range_", (0.0, 0.0))
        return high - low if high > low else 1.0

    def edge_excess(self, mean: np.ndarray) -> np.ndarray:
        """How far a predicted mean lies past the ``EDGE_QUANTILE`` quantile of the training
        labels (model-space units): positive above, negative below the ``1 - EDGE_QUANTILE``
        quantile, 0 between them or before a fit."""
        low, high = getattr(self, "edge_range_", (-np.inf, np.inf))
        return np.maximum(mean - high, 0.0) - np.maximum(low - mean, 0.0)

    def edge_width(self, mean: np.ndarray) -> np.ndarray:
        """The std the edge adds at predicted means ``mean``
        (:meth:`StdTerms.edge_width` of the :meth:`edge_excess`). The two ends differ: the
        slowest architectures are large ones, beyond the layer-cost base's range, which
        extrapolates there; the fastest, small ones stay inside it."""
        return self.std_terms_.edge_width(self.edge_excess(mean))

    def fit(self, X: np.ndarray, y: np.ndarray, X_val: np.ndarray | None = None,
            y_val: np.ndarray | None = None,
            progress: Callable[[], object] | None = None,
            std_terms: StdTerms | None = None) -> TargetSurrogate:
        """Fit the members on ``(X, y)``; early stopping and the noise estimate use the val set.
        ``std_terms``: the target's learned std terms (:mod:`anb.surrogates.uncertainty`),
        stored as ``std_terms_``; the defaults (nothing learned) without them."""
        if len(X) == 0:
            raise ValueError("empty training set: no labelled rows are left after filtering")
        if (X_val is None) != (y_val is None):
            raise ValueError("X_val and y_val go together: give both or neither")
        self.validate()
        rng = np.random.default_rng(self.random_state)
        if self.base_column is not None:
            raw = self._raw_base(X)
            self.base_range_ = (float(raw.min()), float(raw.max()))
        self.edge_range_ = (float(np.quantile(y, 1 - EDGE_QUANTILE)),
                            float(np.quantile(y, EDGE_QUANTILE)))
        self.std_terms_ = std_terms if std_terms is not None else StdTerms()
        resid = y - self._base(X)
        resid_val = None if X_val is None else y_val - self._base(X_val)
        self.members_: list[Family] = []
        for i in range(self.n_members):
            rows = rng.integers(0, len(X), len(X)) if self.bootstrap and self.n_members > 1 \
                else np.arange(len(X))
            member = make_family(self.member_family(i), self._member_params(i))
            self.members_.append(member.fit(X[rows], resid[rows], X_val, resid_val))
            if progress is not None:
                progress()
        self.noise_std_, self.noise_curve_ = 0.0, None
        if X_val is not None and y_val is not None and len(X_val) > 1:
            self.noise_std_, self.noise_curve_ = self._estimate_noise(X_val, y_val)
        return self

    def validate(self) -> None:
        """Check family names and parameters before any work (clear ValueErrors)."""
        if self.n_members < 1:
            raise ValueError(f"n_members must be >= 1, got {self.n_members}")
        for i in range(self.n_members):
            make_family(self.member_family(i), self._member_params(i))

    def member_family(self, i: int) -> str:
        """Family of member ``i`` (members cycle through a list of families)."""
        return self.family if isinstance(self.family, str) else self.family[i % len(self.family)]

    def _member_params(self, i: int) -> dict[str, Any]:
        params = self.params or {}
        if isinstance(params, list):
            params = params[i % len(params)] if params else {}
        params = dict(params)
        family = FAMILIES.get(self.member_family(i))
        if family is not None and "random_state" in family._param_names:
            params["random_state"] = self.random_state * 1000 + i
        return params

    def _estimate_noise(self, X_val: np.ndarray, y_val: np.ndarray
                        ) -> tuple[float, tuple[np.ndarray, np.ndarray] | None]:
        """The label noise std over the whole validation set, and per bin of the predicted
        value (the bins' median predictions and stds; None with too few rows to bin): the
        smallest that, added in quadrature to the members' spread, puts ``LEVEL`` of the rows
        inside their interval. The excess mean square it replaces was set by the heaviest
        residuals: training time's 90 % interval covered 0.98 of the validation rows."""
        mean, spread = self.predict_members(X_val)

        def excess(rows: np.ndarray) -> float:
            return hole_std(y_val[rows] - mean[rows], spread[rows], np.ones(int(rows.sum())))

        overall = excess(np.ones(len(mean), dtype=bool))
        if len(mean) < 20 * NOISE_BINS:  # too few to bin: the constant alone
            return overall, None
        edges = np.quantile(mean, np.linspace(0, 1, NOISE_BINS + 1)[1:-1])
        bins = np.searchsorted(edges, mean, side="right")
        if len(np.unique(bins)) < NOISE_BINS:  # ties: a constant prediction, say
            return overall, None
        centres = np.array([np.median(mean[bins == b]) for b in range(NOISE_BINS)])
        return overall, (centres, np.array([excess(bins == b) for b in range(NOISE_BINS)]))

    def noise_at(self, mean: np.ndarray) -> np.ndarray:
        """Label noise std at predicted values ``mean`` (constant beyond the outer bins)."""
        curve = getattr(self, "noise_curve_", None)
        if curve is None:
            return np.full(np.shape(mean), self.noise_std_)
        return np.interp(mean, *curve)

    def member_predictions(self, X: np.ndarray) -> np.ndarray:
        """``(n, n_members)`` predictions in the transformed target space."""
        base = self._base(X)
        return np.stack([base + m.predict(X) for m in self.members_], axis=1)

    def predict_members(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and spread (std) over members."""
        preds = self.member_predictions(X)
        return preds.mean(1), preds.std(1)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.predict_members(X)[0]

    def predict_dist(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and std (members' spread combined with the label noise)."""
        mean, spread = self.predict_members(X)
        return mean, np.sqrt(spread**2 + self.noise_at(mean) ** 2)

    # ------------------------------------------------------------ persistence
    def save(self, folder: Path, stem: str, compiled: bool = False) -> list[Path]:
        """Write the members as ``<stem>.m<i><suffix>``; return the paths. ``compiled``: each
        in the form that predicts with numpy alone (XGBoost as node tables)."""
        paths = []
        for i, member in enumerate(self.members_):
            member = member.compiled() if compiled else member
            path = folder / f"{stem}.m{i}{member.file_suffix()}"
            member.save(path)
            paths.append(path)
        return paths

    def save_native(self, folder: Path, stem: str) -> list[Path]:
        """Beside compiled members, each XGBoost member's native model
        (``<stem>.m<i>.xgb.json``): loaded on a large batch where xgboost is installed."""
        paths = []
        for i, member in enumerate(self.members_):
            native_json = getattr(member, "native_json", None)
            raw = native_json() if native_json is not None else None
            if raw is not None:
                path = folder / f"{stem}.m{i}{NATIVE_SUFFIX}"
                atomic_write_bytes(path, raw)
                paths.append(path)
        return paths

    def spec(self) -> dict[str, Any]:
        """JSON-able description for the manifest (everything but the member files)."""
        terms = self.std_terms_.to_spec()
        return {"family": self.family, "params": self.params or {}, "n_members": self.n_members,
                "bootstrap": self.bootstrap, "base_column": self.base_column,
                "random_state": self.random_state, "extrapolate": self.extrapolate,
                "noise_std": self.noise_std_,
                "noise_curve": None if (curve := getattr(self, "noise_curve_", None)) is None
                else [c.tolist() for c in curve],
                "base_range": list(getattr(self, "base_range_", (None, None))),
                "trend": terms["trend"], "base_std": terms["base_std"],
                "reach_std": terms["reach_std"],
                "edge_range": list(getattr(self, "edge_range_", (None, None))),
                "edge_std": terms["edge_std"], "edge_cap": terms["edge_cap"],
                "observation_std": terms["observation_std"],
                "member_params": [m.get_params() for m in self.members_]}

    @classmethod
    def from_spec(cls, spec: dict[str, Any], paths: list[Path]) -> TargetSurrogate:
        model = cls(spec["family"], spec["params"], spec["n_members"], spec["bootstrap"],
                    spec["base_column"], spec["random_state"],
                    spec.get("extrapolate", False))  # artifacts before it clipped the base
        members = zip(paths, spec["member_params"], strict=True)
        model.members_ = [FAMILIES[model.member_family(i)].load(p, params)
                          for i, (p, params) in enumerate(members)]
        model.noise_std_ = float(spec["noise_std"])
        curve = spec.get("noise_curve")  # absent before heteroscedastic noise: constant
        model.noise_curve_ = None if curve is None else (np.asarray(curve[0], np.float64),
                                                         np.asarray(curve[1], np.float64))
        low, high = spec.get("base_range", [None, None])
        if low is not None:
            model.base_range_ = (float(low), float(high))
        low, high = spec.get("edge_range", [None, None])  # absent before it: no edge
        if low is not None:
            model.edge_range_ = (float(low), float(high))
        model.std_terms_ = StdTerms.from_spec(spec)  # a term absent before it: none
        return model

