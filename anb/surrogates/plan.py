"""Active collection: which architectures to train or measure next, and when to stop.

A cheap planner model (bagged small XGBoost ensembles on the surrogate features, one per target,
correcting a base: the layer-cost model for device targets, on the space's features a Gaussian
process for accuracy and a ridge for the others, fitted on their labels' normal scores; seconds
to fit) scores a candidate pool by
its members' disagreement, scaled per target by the spread of its predictions over the pool and
averaged over the targets, and divided by the predicted cost squared (the training GPU-hours
when accuracy is a target and the data has ``train_time``). The default batch (``kmeans``) is
the candidates nearest k-means centres of the better-scoring half of the pool, so a batch
spreads over the space instead of piling into one uncertain corner; ``penalised`` picks
greedily, multiplying the scores of each pick's neighbours by ``1 - exp(-d^2 / 2r^2)``. With no
data yet (or ``coverage``) the batch is space-filling: k-means centres of the pool not yet
covered (:func:`anb.surrogates.adapt.select.select`).
What was tried and measured to choose these settings:
docs/decisions/plan.md (the site's "How the numbers were chosen").

The stopping signal estimates the test Kendall tau of the planner fitted on everything collected:
the planner's predictions on a uniform sample of the space (as a benchmark's test split is drawn)
plus ``folds``-fold out-of-fold residuals of the collected rows, resampled within quintiles of
the predicted value, so the noise follows the prediction (larger for poor architectures) and the
estimate does not inherit the collected rows' narrower spread under active picks. Its std is the
spread of that estimate over bootstrap resamples of the collected rows combined with a model
error of ``MODEL_ERROR * (1 - tau)``. The expected gain of one more batch is the log-n slope of
the pooled out-of-fold tau at ``folds``-fold and 2-fold.
"""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.linalg import cho_solve
from scipy.stats import kendalltau, norm, rankdata

from anb.extras import missing

try:
    from sklearn.base import BaseEstimator, RegressorMixin
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, DotProduct, WhiteKernel
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import StandardScaler
except ModuleNotFoundError as err:
    raise missing(err, "fit", "planning measurements (anb.surrogates.plan)") from None

from anb.records import is_perf_metric
from anb.searchspace.base import Space
from anb.searchspace.encoding import encoding_names
from anb.surrogates.adapt.select import select
from anb.surrogates.data import ACCURACY_TARGET, labels, transform_for
from anb.surrogates.ensemble import TargetSurrogate
from anb.surrogates.features import FeatureBuilder
from anb.surrogates.fit import packaged_default, to_model_space
from anb.surrogates.layer_cost import LayerCostModel

ACQUISITIONS = ("kmeans", "penalised", "coverage")
#: The column of a training run's wall time (seconds on ``PlanConfig.gpus`` GPUs).
COST_COLUMN = "train_time"
#: Resamples behind the stopping signal's std.
BOOTSTRAP_DRAWS = 200
#: Architectures of the space the stopping signal's estimate predicts (a uniform sample).
POPULATION = 2000
#: Predicted-value bins the out-of-fold residuals are resampled within.
RESIDUAL_BINS = 5
#: The estimate's model error as a share of ``1 - tau``, added in quadrature to its bootstrap
#: std: the smallest multiple of 0.05 that puts 95 % of the estimate's errors within 2 std on
#: the validation rows (2 seeds x 10 batches x 10 targets: 99.5 %; 0.25 gave 92 %).
MODEL_ERROR = 0.3
#: The encoding the planner's models, its ridge base and its diversity distance use.
ENCODING = "features"
#: Ridge penalties the linear base chooses from (standardised features).
LINEAR_ALPHAS = np.logspace(-3, 3, 13)
#: Rows the accuracy's kernel base tunes its hyperparameters on (then fixed for all rows).
#: Chosen on the validation rows (2 seeds, nested picks): 600 against 300, the same at 200 and
#: 500, tau 0.914-0.922 against 0.908-0.920 at 800-1,300 with half the batch-to-batch change
#: (mean 0.0017 vs 0.0028; the ridge base 0.906-0.913, 0.0016); 1,000 rows: as 600.
KERNEL_TUNING_ROWS = 600
#: The most rows the Gaussian process is fitted on: beyond, a random subset, and the other rows
#: get its predictions (out of sample, like the leave-one-out ones the trees correct). Its
#: Cholesky factor and the inverse the leave-one-out needs take 16 n**2 bytes: 0.8 GB here,
#: several GB past 15,000 rows. A memory bound, not a tuned setting: the whole released
#: dataset (5,138 labelled rows) fits under it.
KERNEL_FIT_ROWS = 7000
#: Rows predicted at once (the cross-kernel with the fitted rows takes 8 x this x their number
#: bytes: 230 MB at the cap).
KERNEL_PREDICT_ROWS = 4096
#: The bases of the targets without a layer-cost base, as ``plan.json`` records them.
SPACE_BASES = {
    ACCURACY_TARGET: {"estimator": "gaussian process", "kernel": "C*RBF + C*DotProduct + White",
                      "tuned on rows": KERNEL_TUNING_ROWS,
                      "fitted on at most rows": KERNEL_FIT_ROWS, "trees fit": "leave-one-out base"},
    "others": {"estimator": "ridge", "alphas": LINEAR_ALPHAS.tolist()},
    "features": "space", "labels": "normal scores"}
_BUDGET_NEEDS = (f"a GPU-hour budget needs the training time: the collected data must have "
                 f"{COST_COLUMN!r} and {ACCURACY_TARGET!r} must be a target, with the "
                 "kmeans or penalised acquisition")


#: What the planner's small XGBoost members change of the packaged fit's XGBoost settings
#: (``default.json``'s ``default.params``, their one source): fewer trees, no early stopping.
PLANNER_XGBOOST = {"n_estimators": 200, "early_stopping_rounds": 0}


def _planner_params() -> dict[str, Any]:
    return {**packaged_default("default", "params")(), **PLANNER_XGBOOST}


@dataclass(frozen=True)
class PlanConfig:
    """How a plan is made (recorded in ``plan.json``)."""

    batch: int = 100
    #: stop adding architectures once their predicted training GPU-hours reach this
    gpu_hours: float | None = None
    members: int = 4
    params: dict[str, Any] = field(default_factory=_planner_params)
    layer_cost: bool = True
    #: ``penalised`` (greedy, local penalisation), ``kmeans`` (k-means centres among the
    #: ``top`` share of candidates by score) or ``coverage`` (k-means, no model)
    acquisition: str = "kmeans"
    top: float = 0.5
    #: score = uncertainty / cost ** cost_power (0: ignore cost)
    cost_power: float = 2.0
    #: penalty radius in median nearest-neighbour distances of the pool (0: no diversity)
    diversity: float = 1.0
    folds: int = 5
    #: suggest stopping when no target's tau is expected to rise by this much in one batch
    min_gain: float = 0.005
    #: GPUs a run's ``train_time`` was measured on (the released data: 4 x RTX 3090)
    gpus: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if self.acquisition not in ACQUISITIONS:
            raise ValueError(f"unknown acquisition {self.acquisition!r}; allowed: "
                             f"{', '.join(ACQUISITIONS)}")
        checks = {"batch": self.batch >= 1, "members": self.members >= 2,
                  "folds": self.folds >= 3, "gpus": self.gpus >= 1,
                  "cost_power": self.cost_power >= 0, "diversity": self.diversity >= 0,
                  "min_gain": self.min_gain >= 0, "top": 0 < self.top <= 1,
                  "gpu_hours": self.gpu_hours is None or self.gpu_hours > 0}
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"plan setting {name!r} = {getattr(self, name)!r} is out of "
                                 "range; allowed: batch, gpus >= 1, members >= 2, folds >= 3, "
                                 "gpu_hours > 0, 0 < top <= 1, cost_power, diversity, "
                                 "min_gain >= 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Collected:
    """What is known: architectures (choices) and per-target model-space labels (NaN: none)."""

    choices: np.ndarray
    y: dict[str, np.ndarray]

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, choices: np.ndarray, targets: list[str]
                   ) -> Collected:
        """Labels of ``targets`` (and ``train_time``, log, when the table has it)."""
        y = {}
        for target in targets:
            lab = labels(frame, target)
            y[target] = np.where(lab.present, to_model_space(target, np.where(
                lab.present, lab.values, 1.0)), np.nan)
        if COST_COLUMN in frame.columns:
            t = pd.to_numeric(frame[COST_COLUMN], errors="coerce").to_numpy(np.float64)
            ok = np.isfinite(t) & (t > 0)
            if ok.sum() >= 2:
                y[COST_COLUMN] = np.where(ok, np.log(np.where(ok, t, 1.0)), np.nan)
        return cls(choices, y)

    def subset(self, rows: np.ndarray) -> Collected:
        return Collected(self.choices[rows], {t: v[rows] for t, v in self.y.items()})

    @property
    def targets(self) -> list[str]:
        return [t for t in self.y if t != COST_COLUMN]


class PlanModel:
    """One small bagged ensemble per target (and for the log training time), each correcting a
    base: the additive layer-cost model for device targets, for the others a fit on the space's
    features (not the layer-cost columns): :class:`KernelBase` for accuracy, a ridge (its
    penalty chosen by leave-one-out) for the rest (:func:`space_base`)."""

    def __init__(self, config: PlanConfig, space: Space):
        self.config = config
        self.space = space

    def fit(self, data: Collected) -> PlanModel:
        layer_cost = None
        device = {t: (np.exp(v), np.isfinite(v)) for t, v in data.y.items()
                  if is_perf_metric(t) and np.isfinite(v).sum() >= 2}
        if self.config.layer_cost and device:
            layer_cost = LayerCostModel(trim=2.0).fit(data.choices, device, self.space)
        self.builder = FeatureBuilder(ENCODING, layer_cost, space=self.space)
        X = self.builder.transform(data.choices).astype(np.float64)
        self.n_space = len(encoding_names(ENCODING, space=self.space))
        self.models: dict[str, TargetSurrogate] = {}
        self.linear: dict[str, Pipeline | KernelBase] = {}
        self.scores: dict[str, NormalScores] = {}
        for target, y in data.y.items():
            rows = np.isfinite(y)
            if rows.sum() < 2:
                continue
            if layer_cost is not None and target in device:
                base = self.builder.column(f"lc_{target}")
                Xt = X
            else:
                self.scores[target] = NormalScores().fit(y[rows])
                y = np.where(rows, self.scores[target].transform(y), np.nan)
                self.linear[target] = space_base(target, self.config.seed).fit(
                    X[rows, :self.n_space], y[rows])
                base, Xt = X.shape[1], self._with_linear(target, X)
                if isinstance(self.linear[target], KernelBase):  # it interpolates its rows
                    Xt[rows, base] = self.linear[target].loo_
            # base clipped to its range, as when the acquisition's settings were chosen on
            # the validation rows (extrapolated, the quick benchmark lost 0.01 top-1 tau at
            # 300-400 architectures, one seed)
            self.models[target] = TargetSurrogate(
                "xgboost", self.config.params, self.config.members, bootstrap=True,
                base_column=base, random_state=self.config.seed,
                extrapolate=False).fit(Xt[rows], y[rows])
        return self

    def _with_linear(self, target: str, X: np.ndarray) -> np.ndarray:
        """``X`` with the target's linear base as its last column (else ``X`` itself)."""
        if target not in self.linear:
            return X
        return np.column_stack([X, self.linear[target].predict(X[:, :self.n_space])])

    def members(self, choices: np.ndarray) -> dict[str, np.ndarray]:
        """``(n, members)`` model-space predictions per target."""
        X = self.builder.transform(choices).astype(np.float64)
        out = {}
        for t, m in self.models.items():
            p = m.member_predictions(self._with_linear(t, X))
            out[t] = self.scores[t].inverse(p) if t in self.scores else p
        return out


class NormalScores:
    """Labels as normal scores, ``Phi^-1((rank - 0.5) / n)`` (ties share their mean rank), and
    back by interpolating between the labels, extended linearly past either end with the slope
    of its outer tenth. The ridge-based targets are fitted on these: Kendall tau weighs every
    pair alike, while squared error on raw top-1 is pulled by the long tail of poor
    architectures. Chosen on the validation rows (train split as pool, random picks, 3 seeds,
    planner tau): top-1 0.863 -> 0.869 at 200, 0.892 -> 0.899 at 500, 0.907 -> 0.910 at 1,000;
    training time 0.856 -> 0.865 at 500; against clipping the lowest 5 % of labels (+0.001 to
    +0.005) and 8 members instead of 4 (+0.000 to +0.001)."""

    def fit(self, y: np.ndarray) -> NormalScores:
        self.labels, first = np.unique(y, return_index=True)
        z = norm.ppf((rankdata(y) - 0.5) / len(y))
        self.z = z[first]
        tail = max(2, len(self.z) // 10)
        self.slopes = (self._slope(slice(None, tail)), self._slope(slice(-tail, None)))
        return self

    def _slope(self, part: slice) -> float:
        """Labels per normal score over ``part`` of the fitted ones (1 with one label)."""
        if len(self.z) < 2:
            return 1.0
        return float(np.ptp(self.labels[part]) / np.ptp(self.z[part]))

    def transform(self, y: np.ndarray) -> np.ndarray:
        """Normal scores of labels (interpolated between the fitted ones)."""
        return np.interp(y, self.labels, self.z)

    def inverse(self, z: np.ndarray) -> np.ndarray:
        """Labels of normal scores: strictly increasing, so the ranking is kept."""
        low, high = self.slopes
        return np.where(z < self.z[0], self.labels[0] + (z - self.z[0]) * low,
                        np.where(z > self.z[-1], self.labels[-1] + (z - self.z[-1]) * high,
                                 np.interp(z, self.z, self.labels)))


def space_base(target: str, seed: int = 0) -> Pipeline | KernelBase:
    """The base of a target without a layer-cost base: the kernel base for accuracy, the
    ridge for the others. Chosen on the validation rows (train split as pool, random picks, 3
    seeds, planner tau): top-1 0.869 -> 0.877 at 200, 0.899 -> 0.902 at 500, 0.910 -> 0.918
    at 1,000; training time stays with the ridge (0.865 at 500; the kernel 0.828)."""
    return KernelBase(random_state=seed) if target == ACCURACY_TARGET else linear_base()


class KernelBase(RegressorMixin, BaseEstimator):
    """Gaussian-process regression on standardised features (a scaled RBF plus a scaled dot
    product plus white noise), its hyperparameters tuned by marginal likelihood on at most
    ``KERNEL_TUNING_ROWS`` rows and then fixed for the fit on up to ``KERNEL_FIT_ROWS``;
    ``loo_`` holds out-of-sample predictions of every row given to ``fit``: closed-form
    leave-one-out for the fitted ones, plain predictions for the rest. The trees correct
    those: the fit interpolates its rows (the noise tunes to its lower bound), so in-sample
    residuals would leave the members nothing to learn or disagree on."""

    def __init__(self, random_state: int = 0):
        self.random_state = random_state

    def fit(self, X: np.ndarray, y: np.ndarray) -> KernelBase:
        self.scaler_ = StandardScaler().fit(X)
        Z = self.scaler_.transform(X)
        kernel = (ConstantKernel(1.0) * RBF(10.0) + ConstantKernel(0.1) * DotProduct(1.0)
                  + WhiteKernel(0.3))
        order = np.random.default_rng(self.random_state).permutation(len(Z))
        tune, rows = order[:KERNEL_TUNING_ROWS], np.sort(order[:KERNEL_FIT_ROWS])
        with warnings.catch_warnings():  # a bound reached (the noise's) is expected
            warnings.simplefilter("ignore", ConvergenceWarning)
            tuned = GaussianProcessRegressor(kernel, normalize_y=True).fit(Z[tune], y[tune])
        self.gp_ = GaussianProcessRegressor(tuned.kernel_, normalize_y=True,
                                            optimizer=None).fit(Z[rows], y[rows])
        inverse = cho_solve((self.gp_.L_, True), np.eye(len(rows)))
        scale = float(np.std(y[rows])) or 1.0
        self.loo_ = np.empty(len(Z))
        self.loo_[rows] = y[rows] - self.gp_.alpha_ / np.diag(inverse) * scale
        rest = np.setdiff1d(np.arange(len(Z)), rows)
        self.loo_[rest] = self._predict_scaled(Z[rest])
        return self

    def _predict_scaled(self, Z: np.ndarray) -> np.ndarray:
        if not len(Z):
            return np.zeros(0)
        return np.concatenate([self.gp_.predict(Z[i:i + KERNEL_PREDICT_ROWS])
                               for i in range(0, len(Z), KERNEL_PREDICT_ROWS)])

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self._predict_scaled(self.scaler_.transform(X))


def linear_base() -> Pipeline:
    """Ridge on standardised features, its penalty chosen by leave-one-out over a log grid.
    Chosen on the validation rows (train split as pool, 2 seeds): top-1 tau of the planner
    0.782 -> 0.843 at 100 architectures, 0.856 -> 0.889 at 500, 0.878 -> 0.904 at 1,000,
    0.909 -> 0.918 at 4,000; training time 0.836 -> 0.846 at 500. Device targets keep the
    layer-cost base (VCK190 throughput at 500: 0.953 with it, 0.908 with the ridge base). Fitted
    on the space's features alone: with the layer-cost columns too, top-1 at 100 fell to 0.826."""
    return make_pipeline(StandardScaler(), RidgeCV(alphas=LINEAR_ALPHAS))


def encoding(choices: np.ndarray, space: Space) -> np.ndarray:
    """Standardised features the diversity penalty measures distance in."""
    Z = FeatureBuilder(ENCODING, None, space=space).transform(choices).astype(np.float64)
    sd = Z.std(0)
    keep = sd > 0
    return (Z[:, keep] - Z[:, keep].mean(0)) / sd[keep]


def uncertainty(preds: dict[str, np.ndarray], targets: list[str]) -> np.ndarray:
    """Members' spread per candidate, in units of each target's spread over the pool, averaged."""
    parts = []
    for target in targets:
        p = preds[target]
        scale = p.mean(1).std() or 1.0
        parts.append(p.std(1) / scale)
    return np.mean(parts, axis=0)


def greedy_batch(score: np.ndarray, cost: np.ndarray, Z: np.ndarray, k: int,
                 budget: float | None, diversity: float, seed: int = 0) -> np.ndarray:
    """Indices of up to ``k`` candidates: the best score, then the best after penalising the
    neighbours of each pick; stops before the summed ``cost`` would exceed ``budget``."""
    radius = diversity * _nn_distance(Z, seed)
    weight = np.ones(len(score))
    chosen: list[int] = []
    spent = 0.0
    free = np.ones(len(score), dtype=bool)
    while len(chosen) < min(k, len(score)):
        value = np.where(free, score * weight, -np.inf)
        i = int(np.argmax(value))
        if budget is not None and spent + cost[i] > budget:
            break
        chosen.append(i)
        free[i] = False
        spent += cost[i]
        if radius > 0:
            weight *= 1 - np.exp(-((Z - Z[i]) ** 2).sum(1) / (2 * radius**2))
    return np.array(chosen, dtype=int)


def _nn_distance(Z: np.ndarray, seed: int, sample: int = 500) -> float:
    """Median distance from a candidate to its nearest other candidate (on a sample)."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(Z), min(sample, len(Z)), replace=False)
    d2 = ((Z[rows, None, :] - Z[None, :, :]) ** 2).sum(2)
    d2[np.arange(len(rows)), rows] = np.inf
    return float(np.sqrt(np.median(d2.min(1)))) if len(Z) > 1 else 0.0


@dataclass
class Batch:
    """A proposed batch: pool indices, and per pick its score, uncertainty and GPU-hours."""

    index: np.ndarray
    score: np.ndarray
    uncertainty: np.ndarray
    gpu_hours: np.ndarray
    predictions: dict[str, np.ndarray]
    how: str


def propose(data: Collected, pool: np.ndarray, config: PlanConfig, space: Space,
            targets: list[str], model: PlanModel | None = None) -> Batch:
    """The next batch out of ``pool`` (choices none of which is collected); ``model``: the
    planner already fitted on ``data`` with ``config``."""
    k = min(config.batch, len(pool))
    if not targets or config.acquisition == "coverage":  # cover the pool
        if config.gpu_hours is not None:
            raise ValueError(_BUDGET_NEEDS)
        both = encoding(np.concatenate([pool, data.choices]), space)
        Z, done = both[:len(pool)], both[len(pool):]
        index = select(Z, k, done if len(done) else None, seed=config.seed)
        nan = np.full(len(index), np.nan)
        return Batch(index, nan, nan, nan, {}, "space-filling: k-means centres of the pool")
    model = model or PlanModel(config, space).fit(data)
    preds = model.members(pool)
    u = uncertainty(preds, targets)
    hours = np.full(len(pool), np.nan)
    cost = np.ones(len(pool))
    if ACCURACY_TARGET in targets and COST_COLUMN in preds:
        hours = np.exp(preds[COST_COLUMN].mean(1)) * config.gpus / 3600
        cost = hours / np.median(hours)
    if config.gpu_hours is not None and not np.isfinite(hours).all():
        raise ValueError(_BUDGET_NEEDS)
    score = u / cost**config.cost_power
    Z = encoding(pool, space)
    if config.acquisition == "kmeans":
        top = np.argsort(-score)[:max(k, int(config.top * len(pool)))]
        index = top[select(Z[top], k, seed=config.seed)]
        index = index[np.argsort(-score[index], kind="stable")]
        if config.gpu_hours is not None:
            index = index[np.cumsum(hours[index]) <= config.gpu_hours]
    else:
        index = greedy_batch(score, hours, Z, config.batch, config.gpu_hours,
                             config.diversity, config.seed)
    means = {t: p.mean(1)[index] for t, p in preds.items() if t in targets}
    means = {t: np.exp(m) if transform_for(t) == "log" else m for t, m in means.items()}
    how = (f"k-means centres among the top {config.top:.0%} by uncertainty / cost^"
           f"{config.cost_power:g}" if config.acquisition == "kmeans" else
           f"uncertainty / cost^{config.cost_power:g}, greedy with local penalisation")
    return Batch(index, score[index], u[index], hours[index], means, how)


@dataclass
class Quality:
    """The stopping signal of one target."""

    n: int
    tau: float          # estimated test tau of the planner fitted on all n rows
    tau_std: float      # its uncertainty (bootstrap over the collected rows and model error)
    cv_tau: float       # pooled out-of-fold tau at (folds - 1) / folds of the rows
    half_tau: float     # the same at half of the rows (2-fold)
    gain: float         # expected rise of tau from one more batch

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def quality(data: Collected, config: PlanConfig, space: Space, targets: list[str],
            next_batch: int | None = None, model: PlanModel | None = None,
            population: np.ndarray | None = None) -> dict[str, Quality]:
    """The stopping signal per target with >= 10 labels. ``model``: the planner already fitted
    on ``data``; ``population``: raw choices the estimate predicts (default: ``POPULATION``
    sampled uniformly from the space)."""
    from anb.surrogates.adapt.select import candidate_pool

    next_batch = config.batch if next_batch is None else next_batch
    out: dict[str, Quality] = {}
    n = len(data.choices)
    if n < 10:
        return out
    rng = np.random.default_rng(config.seed)
    order = rng.permutation(n)
    runs = {}
    for k in (config.folds, 2):
        fold = np.empty(n, dtype=int)
        fold[order] = np.arange(n) % k
        oof = {t: np.full(n, np.nan) for t in targets}
        for f in range(k):
            part = PlanModel(config, space).fit(data.subset(fold != f))
            preds = part.members(data.choices[fold == f])
            for t in targets:
                if t in preds:
                    oof[t][fold == f] = preds[t].mean(1)
        runs[k] = oof
    model = model or PlanModel(config, space).fit(data)
    if population is None:
        population = candidate_pool(POPULATION, config.seed, None, space=space)
    predicted = model.members(population)
    for t in targets:
        y = data.y[t]
        taus = {}
        for k, oof in runs.items():
            ok = np.isfinite(y) & np.isfinite(oof[t])
            if ok.sum() < 10:
                break
            taus[k] = float(kendalltau(y[ok], oof[t][ok])[0])
        if len(taus) < 2 or t not in predicted:
            continue
        ok = np.isfinite(y) & np.isfinite(runs[config.folds][t])
        estimate, spread = population_tau(predicted[t].mean(1), runs[config.folds][t][ok],
                                          y[ok] - runs[config.folds][t][ok], config.seed)
        spread = float(np.hypot(spread, MODEL_ERROR * (1 - estimate)))
        labelled = int(np.isfinite(y).sum())
        n_k, n_2 = labelled * (config.folds - 1) / config.folds, labelled / 2
        slope = max((taus[config.folds] - taus[2]) / np.log(n_k / n_2), 0.0)
        out[t] = Quality(labelled, estimate, spread, taus[config.folds], taus[2],
                         slope * np.log((labelled + next_batch) / labelled))
    return out


def population_tau(predicted: np.ndarray, oof: np.ndarray, residuals: np.ndarray, seed: int,
                   draws: int = BOOTSTRAP_DRAWS, bins: int = RESIDUAL_BINS
                   ) -> tuple[float, float]:
    """Mean and std of Kendall tau between ``predicted`` (a population's predictions) and
    ``predicted`` plus residuals drawn from collected rows whose out-of-fold prediction ``oof``
    fell in the same quantile bin; each draw first resamples the collected rows."""
    rng = np.random.default_rng(seed)
    bins = max(1, min(bins, len(oof) // 10))
    taus = []
    for _ in range(draws):
        rows = rng.integers(0, len(oof), len(oof))
        edges = np.quantile(oof[rows], np.linspace(0, 1, bins + 1)[1:-1])
        own, theirs = np.searchsorted(edges, oof[rows]), np.searchsorted(edges, predicted)
        noise = np.empty(len(predicted))
        for b in range(bins):
            pool = residuals[rows][own == b]
            pool = pool if len(pool) else residuals[rows]
            noise[theirs == b] = rng.choice(pool, int((theirs == b).sum()))
        taus.append(kendalltau(predicted, predicted + noise)[0])
    return float(np.mean(taus)), float(np.std(taus))


def bootstrap_std(y: np.ndarray, pred: np.ndarray, seed: int, draws: int = BOOTSTRAP_DRAWS
                  ) -> float:
    """Std of Kendall tau over ``draws`` resamples (with replacement) of the rows."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(y), size=(draws, len(y)))
    return float(np.nanstd([kendalltau(y[r], pred[r])[0] for r in rows]))


def suggest_stop(q: dict[str, Quality], config: PlanConfig) -> bool:
    """Stop when every target's tau is expected to rise by less than ``min_gain`` per batch."""
    return bool(q) and all(v.gain < config.min_gain for v in q.values())


@dataclass
class Plan:
    """A proposed batch (raw choices) with its scores and the stopping signal."""

    choices: np.ndarray
    batch: Batch
    quality: dict[str, Quality]
    stop: bool
    n_collected: int
    n_candidates: int


def make_plan(frame: pd.DataFrame | None, space: Space, config: PlanConfig,
              targets: list[str] | None = None, candidates: np.ndarray | None = None,
              n_candidates: int = 5000) -> Plan:
    """Plan the next batch from the collected ``frame`` (None or empty: nothing yet) out of
    ``candidates`` (raw choices; default: ``n_candidates`` sampled), none already collected."""
    from anb.surrogates.adapt.select import candidate_pool
    from anb.surrogates.data import frame_choices, target_columns

    if frame is None or frame.empty:
        done = np.zeros((0, *space.choice_shape), dtype=np.int64)
        targets, data = [], Collected(done, {})
    else:
        done = frame_choices(frame, space)
        targets = targets or target_columns(frame)
        data = Collected.from_frame(frame, done, targets)
    if candidates is None:
        pool = candidate_pool(n_candidates, config.seed, done if len(done) else None, space=space)
    else:
        taken = set(space.index_from_choices(done).tolist()) if len(done) else set()
        index = space.index_from_choices(candidates)
        _, first = np.unique(index, return_index=True)
        keep = [i for i in np.sort(first) if int(index[i]) not in taken]
        pool = candidates[keep]
    if not len(pool):
        raise ValueError("no candidate is left: every candidate architecture is collected "
                         "already")
    learnt = [t for t in targets if np.isfinite(data.y[t]).sum() >= 2]
    model = PlanModel(config, space).fit(data) if learnt and config.acquisition != "coverage" \
        else None
    batch = propose(data, pool, config, space, learnt, model)
    q = quality(data, config, space, learnt, model=model) if learnt else {}
    return Plan(pool[batch.index], batch, q, suggest_stop(q, config), len(done), len(pool))
