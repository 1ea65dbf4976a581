"""Model families behind one estimator interface.

Every family follows the scikit-learn convention (hyper-parameters in ``__init__``, ``fit`` /
``predict``), accepts an optional validation set for early stopping, and saves itself in a
native, code-free format: XGBoost / LightGBM model files, or ``.npz`` arrays read with
``allow_pickle=False`` (SVR, MLP).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from anb.extras import optional, require
from anb.io import atomic_write, atomic_write_text
from anb.sigint import deferred_sigint
from anb.surrogates.compiled import TreeTable

#: The file suffix of a member compiled to a numpy node table.
TABLE_SUFFIX = ".npz"
#: A compiled member's native XGBoost model beside its table (``<member>.xgb.json``).
NATIVE_SUFFIX = ".xgb.json"


class Family:
    """Interface shared by all model families (one regression output)."""

    name: ClassVar[str]
    suffix: ClassVar[str]
    _param_names: ClassVar[tuple[str, ...]]
    #: The module fitting needs and the extra that installs it.
    requires: ClassVar[tuple[str, str]]

    @classmethod
    def check_installed(cls) -> None:
        """Raise :class:`anb.extras.MissingExtra` (one line naming the extra) if fitting this
        family needs a module that is not installed."""
        require(*cls.requires, what=f"fitting a {cls.name!r} surrogate")

    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._param_names}

    def fit(self, X: np.ndarray, y: np.ndarray, X_val: np.ndarray | None = None,
            y_val: np.ndarray | None = None) -> Family:
        raise NotImplementedError

    def predict(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def save(self, path: Path) -> None:
        """Write the fitted model to ``path`` (atomically)."""
        raise NotImplementedError

    def file_suffix(self) -> str:
        """The suffix of the file :meth:`save` writes."""
        return self.suffix

    def compiled(self) -> Family:
        """This member in a form that predicts with numpy alone (itself if it already does)."""
        return self

    @classmethod
    def load(cls, path: Path, params: dict[str, Any]) -> Family:
        raise NotImplementedError


class XGBoostFamily(Family):
    """Gradient-boosted trees (XGBoost, ``hist``), early stopping on the validation set."""

    native_path_: Path | None = None

    name, suffix = "xgboost", ".json"
    requires = ("xgboost", "fit")
    _param_names: ClassVar[tuple[str, ...]] = (
        "n_estimators", "max_depth", "learning_rate", "subsample", "colsample_bytree",
        "min_child_weight", "reg_lambda", "reg_alpha", "early_stopping_rounds", "random_state",
        "n_jobs")

    def __init__(self, n_estimators: int = 2000, max_depth: int = 4, learning_rate: float = 0.03,
                 subsample: float = 0.8, colsample_bytree: float = 0.8,
                 min_child_weight: float = 1.0, reg_lambda: float = 1.0, reg_alpha: float = 0.0,
                 early_stopping_rounds: int = 100, random_state: int = 0, n_jobs: int = 1):
        self.n_estimators, self.max_depth = n_estimators, max_depth
        self.learning_rate = learning_rate
        self.subsample, self.colsample_bytree = subsample, colsample_bytree
        self.min_child_weight = min_child_weight
        self.reg_lambda, self.reg_alpha = reg_lambda, reg_alpha
        self.early_stopping_rounds, self.random_state, self.n_jobs = (
            early_stopping_rounds, random_state, n_jobs)

    def _regressor(self):
        self.check_installed()
        import xgboost as xgb

        return xgb.XGBRegressor(**{k: v for k, v in self.get_params().items()
                                   if k != "early_stopping_rounds"}, tree_method="hist")

    def fit(self, X, y, X_val=None, y_val=None):
        model = self._regressor()
        with deferred_sigint():
            if X_val is not None and len(X_val) and self.early_stopping_rounds:
                model.set_params(early_stopping_rounds=self.early_stopping_rounds)
                model.fit(X, y, eval_set=[(X_val, y_val)], verbose=False)
                booster = model.get_booster()[: model.best_iteration + 1]
            else:
                model.fit(X, y, verbose=False)
                booster = model.get_booster()
        booster.set_param({"nthread": self.n_jobs})
        self.booster_, self.table_ = booster, None
        return self

    def table(self) -> TreeTable:
        """The trees as a numpy node table (read from the booster's JSON once)."""
        table = getattr(self, "table_", None)
        if table is None:
            table = self.table_ = TreeTable.from_xgboost_json(
                bytes(self.booster_.save_raw("json")))
        return table

    def compiled(self) -> Family:
        model = type(self)(**self.get_params())
        model.booster_, model.table_ = None, self.table()
        return model

    def file_suffix(self) -> str:
        return self.suffix if self.booster_ is not None else TABLE_SUFFIX

    def native(self) -> bool:
        """Whether a native booster predicts (the shipped one is loaded on first use)."""
        return self.booster_ is not None or self._load_native()

    def predict(self, X):
        if not self.native():
            return self.table().predict(X)
        return self.booster_.inplace_predict(np.asarray(X, dtype=np.float32))

    def _load_native(self) -> bool:
        """Load the shipped native model beside a compiled table (``<member>.xgb.json``) on
        first use, where an xgboost that reads it is installed: large batches are faster
        natively."""
        path = getattr(self, "native_path_", None)
        self.native_path_ = None
        if path is None:
            return False
        booster = native_booster(Path(path).read_bytes())
        if booster is None:
            return False
        self.booster_ = booster
        self.booster_.set_param({"nthread": self.n_jobs})
        return True

    def native_json(self) -> bytes | None:
        """The booster as XGBoost JSON (None for a table loaded without one)."""
        return None if self.booster_ is None else bytes(self.booster_.save_raw("json"))

    def set_threads(self, n_jobs: int) -> None:
        """Prediction threads (training uses ``n_jobs``)."""
        if self.booster_ is not None:
            self.booster_.set_param({"nthread": n_jobs})

    def save(self, path):
        if self.booster_ is None:
            self.table().save(path)
            return
        raw = bytes(self.booster_.save_raw("json"))
        atomic_write(path, lambda tmp: tmp.write_bytes(raw))

    @classmethod
    def load(cls, path, params):
        """A compiled table (``.npz``), or XGBoost JSON: natively where xgboost is installed,
        else read into a table (the query install has no xgboost)."""
        model = cls(**params)
        model.booster_, model.table_ = None, None
        if Path(path).suffix == TABLE_SUFFIX:
            model.table_ = TreeTable.load(path)
            native = Path(path).with_name(Path(path).stem + NATIVE_SUFFIX)
            model.native_path_ = native if native.is_file() else None
        else:
            raw = Path(path).read_bytes()
            model.booster_ = native_booster(raw)
            if model.booster_ is None:
                model.table_ = TreeTable.from_xgboost_json(raw)
            else:
                model.booster_.set_param({"nthread": model.n_jobs})
        return model


def native_booster(raw: bytes) -> Any:
    """An XGBoost JSON model as a native booster, or None where xgboost is missing or older
    than the version that wrote it (an older one misreads a newer model: xgboost 2.0 read
    3.x's base score as 0.5, every packaged prediction off by a factor e^0.5); the caller
    predicts from the model's tree table then, which reads any version."""
    xgb = optional("xgboost")
    if xgb is None or installed_version(xgb.__version__) < written_version(raw):
        return None
    booster = xgb.Booster()
    booster.load_model(bytearray(raw))
    return booster


def written_version(raw: bytes) -> tuple[int, ...]:
    """The xgboost version an XGBoost JSON model records (its top-level ``"version"``, written
    last), read without parsing the whole model; ``()`` if it records none."""
    found = _VERSION.findall(raw[-256:]) or _VERSION.findall(raw)
    return tuple(int(part) for part in found[-1]) if found else ()


_VERSION = re.compile(rb'"version"\s*:\s*\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]')


def installed_version(text: str) -> tuple[int, ...]:
    """``"2.0.3"`` / ``"3.1.0rc1"`` as ``(2, 0, 3)`` / ``(3, 1, 0)``."""
    parts = (re.match(r"\d+", part) for part in text.split(".")[:3])
    return tuple(int(match[0]) for match in parts if match is not None)


class RandomForestFamily(XGBoostFamily):
    """Random forest (XGBoost's ``XGBRFRegressor``: one round of bagged, column-sampled trees)."""

    name = "random_forest"
    _param_names = ("n_estimators", "max_depth", "subsample", "colsample_bynode",
                    "min_child_weight", "random_state", "n_jobs")

    def __init__(self, n_estimators: int = 300, max_depth: int = 12, subsample: float = 0.8,
                 colsample_bynode: float = 0.6, min_child_weight: float = 1.0,
                 random_state: int = 0, n_jobs: int = 1):
        self.n_estimators, self.max_depth, self.subsample = n_estimators, max_depth, subsample
        self.colsample_bynode, self.min_child_weight = colsample_bynode, min_child_weight
        self.random_state, self.n_jobs = random_state, n_jobs
        self.early_stopping_rounds = 0

    def _regressor(self):
        self.check_installed()
        import xgboost as xgb

        return xgb.XGBRFRegressor(**self.get_params(), tree_method="hist")


class LightGBMFamily(Family):
    """Gradient-boosted trees (LightGBM), early stopping on the validation set."""

    name, suffix = "lightgbm", ".txt"
    requires = ("lightgbm", "fit")
    _param_names = ("n_estimators", "num_leaves", "learning_rate", "subsample", "colsample_bytree",
                    "min_child_samples", "reg_lambda", "early_stopping_rounds", "random_state",
                    "n_jobs")

    def __init__(self, n_estimators: int = 3000, num_leaves: int = 15, learning_rate: float = 0.02,
                 subsample: float = 0.8, colsample_bytree: float = 0.7,
                 min_child_samples: int = 10, reg_lambda: float = 0.0,
                 early_stopping_rounds: int = 100, random_state: int = 0, n_jobs: int = 1):
        self.n_estimators, self.num_leaves = n_estimators, num_leaves
        self.learning_rate = learning_rate
        self.subsample, self.colsample_bytree = subsample, colsample_bytree
        self.min_child_samples, self.reg_lambda = min_child_samples, reg_lambda
        self.early_stopping_rounds, self.random_state, self.n_jobs = (
            early_stopping_rounds, random_state, n_jobs)

    def fit(self, X, y, X_val=None, y_val=None):
        self.check_installed()
        import lightgbm as lgb

        params = {k: v for k, v in self.get_params().items() if k != "early_stopping_rounds"}
        model = lgb.LGBMRegressor(**params, subsample_freq=1, verbose=-1)
        callbacks: list[Callable[..., Any]] = []
        kwargs: dict[str, Any] = {}
        if X_val is not None and len(X_val) and self.early_stopping_rounds:
            kwargs = {"eval_X": (X_val,), "eval_y": (y_val,)}
            callbacks.append(lgb.early_stopping(self.early_stopping_rounds, verbose=False))
        with deferred_sigint():
            model.fit(X, y, callbacks=callbacks, **kwargs)
            best = model.best_iteration_ or None
            self.booster_ = lgb.Booster(
                model_str=model.booster_.model_to_string(num_iteration=best))
        return self

    def predict(self, X):
        return self.booster_.predict(np.asarray(X, dtype=np.float64),
                                     num_threads=getattr(self, "threads_", self.n_jobs))

    def set_threads(self, n_jobs: int) -> None:
        """Prediction threads (training uses ``n_jobs``)."""
        self.threads_ = n_jobs

    def save(self, path):
        atomic_write_text(path, self.booster_.model_to_string())

    @classmethod
    def load(cls, path, params):
        require("lightgbm", what=f"the LightGBM surrogate member {Path(path).name!r}")
        import lightgbm as lgb

        model = cls(**params)
        model.booster_ = lgb.Booster(model_file=str(path))
        return model


class _Standardised(Family):
    """Shared input/label standardisation for the array-backed families (SVR, MLP)."""

    suffix = ".npz"

    def _fit_scaling(self, X, y):
        """Standardise inputs and label. A feature constant in training gets an infinite
        scale: it carries nothing the fit could use, so any value of it maps to 0. (A scale
        of ``1e-8`` put an unseen value, squeeze-excite in a fit without any, 1e8 away from
        every support vector: the SVR answered its intercept, 0.93 pp low on average.)"""
        spread = X.std(0)
        self.x_mean_ = X.mean(0)
        self.x_scale_ = np.where(spread > 0, spread + 1e-8, np.inf)
        self.y_mean_, self.y_scale_ = float(y.mean()), float(y.std() + 1e-12)

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"x_mean": self.x_mean_, "x_scale": self.x_scale_,
                "y_stats": np.array([self.y_mean_, self.y_scale_])}

    def _set_arrays(self, data) -> None:
        self.x_mean_, self.x_scale_ = data["x_mean"], data["x_scale"]
        self.y_mean_, self.y_scale_ = (float(v) for v in data["y_stats"])

    def save(self, path):
        arrays = self._arrays()
        atomic_write(path, lambda tmp: _savez(tmp, arrays))

    @classmethod
    def load(cls, path, params):
        model = cls(**params)
        with np.load(path, allow_pickle=False) as data:
            model._set_arrays(data)
        return model


def _savez(tmp: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(tmp, "wb") as handle:
        np.savez(handle, **arrays)  # type: ignore[arg-type]  # no key is allow_pickle


class SVRFamily(_Standardised):
    """RBF support-vector regression (scikit-learn fit, numpy predict from saved arrays)."""

    name = "svr"
    requires = ("sklearn", "fit")
    _param_names = ("C", "epsilon", "gamma")

    def __init__(self, C: float = 3.0, epsilon: float = 0.02, gamma: float | None = None):
        self.C, self.epsilon, self.gamma = C, epsilon, gamma

    def fit(self, X, y, X_val=None, y_val=None):
        self.check_installed()
        from sklearn.svm import SVR

        X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
        self._fit_scaling(X, y)
        Z = (X - self.x_mean_) / self.x_scale_
        self.gamma_ = float(self.gamma if self.gamma is not None else 1.0 / Z.shape[1])
        svr = SVR(C=self.C, epsilon=self.epsilon, gamma=self.gamma_)
        svr.fit(Z, (y - self.y_mean_) / self.y_scale_)
        self.support_, self.dual_ = svr.support_vectors_, svr.dual_coef_.ravel()
        self._kernel_cache = None
        self.intercept_ = float(svr.intercept_[0])
        return self

    #: Rows per kernel block: its kernel values (rows x support vectors, float64; 3.7 MB for
    #: the packaged accuracy member's 3,714) stay in the last-level cache.
    CHUNK = 128

    def _kernel_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Support vectors scaled by ``2 gamma`` with ``-gamma |s|^2`` as an extra row, as
        columns, and the dual coefficients (float64, cached): one matrix product of ``[z, 1]``
        gives ``2 gamma z.s - gamma |s|^2``."""
        cache = getattr(self, "_kernel_cache", None)
        if cache is None:
            support = np.asarray(self.support_, np.float64)
            aug = np.concatenate([2 * self.gamma_ * support,
                                  -self.gamma_ * (support**2).sum(1, keepdims=True)], axis=1)
            cache = self._kernel_cache = (np.ascontiguousarray(aug.T),
                                          np.asarray(self.dual_, np.float64))
        return cache

    def predict(self, X):
        """RBF kernel expansion in float64, in cache-sized blocks of rows.

        ``-g |z - s|^2 = 2g z.s - g |s|^2 - g |z|^2``: a block takes one matrix product (the
        ``|s|^2`` term rides along as an extra column), one subtraction of the rows' norms,
        a clip at 0 (rounding past it), one in-place ``exp`` and one matrix-vector product.
        The exponent never overflows, and the result agrees with scikit-learn's direct
        distances to rounding (tests/test_surrogates_layer_cost.py: 1e-9 relative).
        """
        Z = (np.asarray(X, np.float64) - self.x_mean_) / self.x_scale_
        row_norms = self.gamma_ * (Z**2).sum(1)
        aug_t, dual = self._kernel_arrays()
        Za = np.empty((len(Z), Z.shape[1] + 1))
        Za[:, :-1] = Z
        Za[:, -1] = 1.0
        out = np.empty(len(Z))
        with np.errstate(under="ignore"):  # a kernel value below the smallest float is 0
            for start in range(0, len(Z), self.CHUNK):
                block = Za[start:start + self.CHUNK] @ aug_t
                block -= row_norms[start:start + self.CHUNK, None]
                np.minimum(block, 0.0, out=block)
                np.exp(block, out=block)
                np.dot(block, dual, out=out[start:start + self.CHUNK])
        return (out + self.intercept_) * self.y_scale_ + self.y_mean_

    def _arrays(self):
        return {**super()._arrays(), "support": self.support_, "dual": self.dual_,
                "scalars": np.array([self.gamma_, self.intercept_])}

    def _set_arrays(self, data):
        super()._set_arrays(data)
        self._kernel_cache = None
        self.support_, self.dual_ = data["support"], data["dual"]
        self.gamma_, self.intercept_ = (float(v) for v in data["scalars"])


class MLPFamily(_Standardised):
    """Fully connected network (torch training, numpy inference from saved weights)."""

    name = "mlp"
    requires = ("torch", "train")
    _param_names = ("hidden", "epochs", "learning_rate", "weight_decay", "batch_size",
                    "patience", "random_state")

    def __init__(self, hidden: tuple[int, ...] = (256, 256), epochs: int = 400,
                 learning_rate: float = 1e-3, weight_decay: float = 1e-4, batch_size: int = 128,
                 patience: int = 40, random_state: int = 0):
        self.hidden, self.epochs, self.learning_rate = tuple(hidden), epochs, learning_rate
        self.weight_decay, self.batch_size, self.patience = weight_decay, batch_size, patience
        self.random_state = random_state

    def fit(self, X, y, X_val=None, y_val=None):
        self.check_installed()
        import torch

        X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
        self._fit_scaling(X, y)
        gen = torch.Generator().manual_seed(self.random_state)
        torch.manual_seed(self.random_state)
        sizes = [X.shape[1], *self.hidden, 1]
        layers: list[torch.nn.Module] = []
        for i in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(torch.nn.ReLU())
        net = torch.nn.Sequential(*layers).double()
        opt = torch.optim.AdamW(net.parameters(), lr=self.learning_rate,
                                weight_decay=self.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, self.epochs)
        xt = torch.from_numpy((X - self.x_mean_) / self.x_scale_)
        yt = torch.from_numpy((y - self.y_mean_) / self.y_scale_)
        has_val = X_val is not None and len(X_val) > 0
        if has_val:
            xv = torch.from_numpy((np.asarray(X_val, np.float64) - self.x_mean_) / self.x_scale_)
            yv = torch.from_numpy((np.asarray(y_val, np.float64) - self.y_mean_) / self.y_scale_)
        best, best_state, since = np.inf, None, 0
        for _ in range(self.epochs):
            net.train()
            for idx in torch.randperm(len(xt), generator=gen).split(self.batch_size):
                opt.zero_grad()
                loss = torch.mean((net(xt[idx]).squeeze(1) - yt[idx]) ** 2)
                loss.backward()
                opt.step()
            sched.step()
            if has_val:
                with torch.no_grad():
                    val = float(torch.mean((net(xv).squeeze(1) - yv) ** 2))
                if val < best:
                    best, since = val, 0
                    best_state = [p.detach().clone() for p in net.parameters()]
                elif (since := since + 1) >= self.patience:
                    break
        params = best_state or [p.detach() for p in net.parameters()]
        self.weights_ = [p.numpy().copy() for p in params]
        return self

    def predict(self, X):
        h = (np.asarray(X, np.float64) - self.x_mean_) / self.x_scale_
        n_layers = len(self.weights_) // 2
        for i in range(n_layers):
            h = h @ self.weights_[2 * i].T + self.weights_[2 * i + 1]
            if i < n_layers - 1:
                h = np.maximum(h, 0)
        return h[:, 0] * self.y_scale_ + self.y_mean_

    def _arrays(self):
        return {**super()._arrays(), **{f"w{i}": w for i, w in enumerate(self.weights_)}}

    def _set_arrays(self, data):
        super()._set_arrays(data)
        self.weights_ = [data[f"w{i}"] for i in range(len([k for k in data.files if k[0] == "w"]))]


FAMILIES: dict[str, type[Family]] = {
    f.name: f for f in (XGBoostFamily, LightGBMFamily, RandomForestFamily, SVRFamily, MLPFamily)
}


def make_family(name: str, params: dict[str, Any] | None = None) -> Family:
    """Instantiate a family by name with hyper-parameters; errors list what is allowed."""
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; allowed families are {sorted(FAMILIES)}")
    cls = FAMILIES[name]
    params = dict(params or {})
    unknown = sorted(set(params) - set(cls._param_names))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for family {name!r}; "
                         f"allowed: {list(cls._param_names)}")
    return cls(**params)
