"""The query object: architectures in, per-metric predicted mean and std out.

Large batches run every member of every requested target as one task on a small thread pool
(``n_jobs`` workers, one native thread per member): the native predictors and numpy release the
GIL, so the members of a 9-target query keep every core busy without oversubscribing them.
Small batches walk all XGBoost trees at once in numpy (:mod:`anb.surrogates.compiled`), as do
all batches where no member has a native booster (the query install has no xgboost).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from anb.records import is_perf_metric
from anb.searchspace.base import Space
from anb.searchspace.encoding import to_choices
from anb.surrogates.compiled_forest import PackedForest
from anb.surrogates.ensemble import TargetSurrogate
from anb.surrogates.estimators import XGBoostFamily
from anb.surrogates.features import FeatureBuilder
from anb.surrogates.identity import IDENTITY, identity
from anb.surrogates.intervals import bounds, z_value
from anb.surrogates.uncertainty.noise import standard_normal
from anb.surrogates.uncertainty.support import Support
from anb.surrogates.uncertainty.terms import widened_std

#: Columns every query adds after the metrics: the out-of-distribution flag, its two scores and
#: why it is flagged (the unseen or rare combination, the cost or the distance; "" if not).
OOD_COLUMNS = ("ood", "ood_distance", "ood_cost", "ood_reason")

#: Friendly names accepted by ``query(metrics=...)``.
ALIASES = {"accuracy": "val_top1", "top1": "val_top1"}
#: Batches up to this size use the packed numpy forest; larger ones the native predictor where
#: xgboost is installed.
SMALL_BATCH = 64


class SurrogateBenchmark:
    """A fitted surrogate benchmark (see :func:`anb.surrogates.load`)."""

    def __init__(self, builder: FeatureBuilder, models: dict[str, TargetSurrogate],
                 transforms: dict[str, str], info: dict[str, Any] | None = None,
                 *, space: Space, n_jobs: int = 1, support: Support | None = None):
        self.builder = builder
        self.support = support
        self.models = models
        self.transforms = transforms
        self.info = dict(info or {})
        self.space = space
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = os.getpid()
        self.set_threads(n_jobs)
        self._packed: PackedForest | None = None
        self._packed_slots: dict[str, list[int]] = {}

    # ------------------------------------------------------------ metadata
    @property
    def metrics(self) -> list[str]:
        """The metrics this benchmark predicts (``val_top1``, ``throughput_a100``, ...)."""
        return list(self.models)

    @property
    def devices(self) -> list[str]:
        """The devices of its ``throughput_<device>`` / ``latency_<device>`` metrics."""
        return sorted({m.split("_", 1)[1] for m in self.models
                       if is_perf_metric(m)})

    def resolve(self, metrics: str | Sequence[str] | None) -> list[str]:
        """Validate metric names (aliases allowed); ``None`` means all."""
        if metrics is None:
            return self.metrics
        given = [metrics] if isinstance(metrics, str) else list(metrics)
        check_distinct(given, "metric")
        out = []
        for name in given:
            full = ALIASES.get(name, name)
            if full not in self.models:
                raise ValueError(f"unknown metric {name!r}; this benchmark knows {self.metrics} "
                                 f"(aliases {sorted(ALIASES)})")
            out.append(full)
        return out

    def set_threads(self, n_jobs: int) -> None:
        """Members predicted concurrently on large batches (each on one native thread)."""
        if n_jobs < 1:
            raise ValueError(f"n_jobs must be >= 1, got {n_jobs}")
        self.n_jobs = n_jobs
        for model in self.models.values():
            for member in model.members_:
                if hasattr(member, "set_threads"):
                    member.set_threads(1)
        if self._pool is not None and self._pool_pid == os.getpid():
            self._pool.shutdown(wait=False)
        self._pool = None

    # ------------------------------------------------------------ input
    def choices(self, archs: Any) -> np.ndarray:
        """The space's choices array from architectures, strings or records (or lists or
        arrays of them), a choices array, or an ordinal-encoded ``(n, num_variables)`` array
        (for spaces whose choices are not already that shape)."""
        if isinstance(archs, np.ndarray) and archs.dtype.kind in "USO":
            archs = archs.tolist()
        elif isinstance(archs, np.ndarray):
            shape, width = self.space.choice_shape, len(self.space.variables)
            if archs.shape in (shape, (width,)):
                archs = archs[None]
            if archs.shape[1:] != shape:
                if archs.ndim != 2 or archs.shape[1] != width:
                    raise ValueError(f"an architecture array must have shape (n, "
                                     f"{', '.join(map(str, shape))}) or (n, {width}) ordinal "
                                     f"columns, got shape {archs.shape}")
                return self._from_ordinal(archs)
        if isinstance(archs, pd.DataFrame):
            archs = archs.to_dict("records")
        return to_choices(archs, self.space)

    def _from_ordinal(self, positions: np.ndarray) -> np.ndarray:
        pos = np.asarray(positions)
        if not np.all(pos == np.round(pos)):
            raise ValueError("an ordinal-encoded array must hold whole numbers")
        pos = pos.astype(np.int64)
        radices = self.space.radices()
        bad = (pos < 0) | (pos >= radices)
        if bad.any():
            row, col = (int(v[0]) for v in np.nonzero(bad))
            raise ValueError(f"ordinal column {self.space.position_names()[col]} has value "
                             f"{pos[row, col]}; allowed positions are 0..{radices[col] - 1}")
        return self.space.from_positions(pos)

    # ------------------------------------------------------------ prediction
    def _packed_forest(self) -> PackedForest:
        if self._packed is None:
            tables, slot = [], 0
            for name, model in self.models.items():
                slots = []
                for member in model.members_:
                    if isinstance(member, XGBoostFamily):  # and its RandomForestFamily
                        tables.append(member.table())
                        slots.append(slot)
                        slot += 1
                    else:
                        slots.append(-1)
                self._packed_slots[name] = slots
            self._packed = PackedForest(tables)
        return self._packed

    def _member_predictions(self, X: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
        if len(X) <= SMALL_BATCH or not any(
                member.native() for name in names for member in self.models[name].members_
                if isinstance(member, XGBoostFamily)):
            return self._packed_batch(X, names)
        jobs = [(name, i, member) for name in names
                for i, member in enumerate(self.models[name].members_)]
        if self.n_jobs > 1 and len(jobs) > 1:
            pool = self._thread_pool()
            # costliest first, so the workers finish together
            order = sorted(range(len(jobs)), key=lambda j: -_cost_hint(jobs[j][2]))
            futures = {j: pool.submit(jobs[j][2].predict, X) for j in order}
            preds = [futures[j].result() for j in range(len(jobs))]
        else:
            preds = [member.predict(X) for _, _, member in jobs]
        out: dict[str, np.ndarray] = {}
        start = 0
        for name in names:
            model = self.models[name]
            stacked = np.stack(preds[start:start + len(model.members_)], axis=1)
            start += len(model.members_)
            out[name] = stacked + model._base(X)[:, None]
        return out

    def _thread_pool(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pool_pid != os.getpid():  # no threads after fork
            self._pool = ThreadPoolExecutor(self.n_jobs, thread_name_prefix="anb-query")
            self._pool_pid = os.getpid()
        return self._pool

    def _packed_batch(self, X: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
        """Every member's prediction: the trees from the packed forest, the other members
        (an SVR, say) on the thread pool meanwhile when there are threads and rows to spare."""
        packed = self._packed_forest()
        others = {(name, i): member for name in names
                  for i, (slot, member) in enumerate(zip(self._packed_slots[name],
                                                         self.models[name].members_,
                                                         strict=True)) if slot < 0}
        pending = {}
        if others and self.n_jobs > 1 and len(X) > SMALL_BATCH:
            pool = self._thread_pool()
            pending = {key: pool.submit(member.predict, X) for key, member in others.items()}
        margins = packed.predict(X)

        def predicted(name: str, i: int, slot: int) -> np.ndarray:
            if slot >= 0:
                return margins[:, slot]
            future = pending.get((name, i))
            return others[name, i].predict(X) if future is None else future.result()

        out: dict[str, np.ndarray] = {}
        for name in names:
            base = self.models[name]._base(X)  # once per target, shared by its members
            out[name] = np.stack([base + predicted(name, i, slot)
                                  for i, slot in enumerate(self._packed_slots[name])], axis=1)
        return out

    def ood(self, choices: np.ndarray) -> dict[str, np.ndarray]:
        """Out-of-distribution scores and flag (all in-distribution without a support)."""
        if self.support is None:
            n = len(choices)
            return {"ood": np.zeros(n, dtype=bool), "ood_distance": np.zeros(n),
                    "ood_cost": np.zeros(n), "ood_hole": np.zeros(n), "ood_unit": np.zeros(n),
                    "ood_reason": np.full(n, "", dtype=object)}
        score = self.support.score(choices)
        layer_cost = self.builder.layer_cost
        if self.support.slot_counts_ is not None and layer_cost is not None:
            share = np.zeros((len(choices), len(layer_cost.targets_)))
            holes = choices[score["ood_hole"] > 0]  # the rest need none (see hole_measure)
            if len(holes):
                share[score["ood_hole"] > 0] = layer_cost.hole_share(
                    holes, self.support.slot_rarity(holes))
            score["ood_hole_share"] = share
        if layer_cost is not None and layer_cost.unmeasured_.any():
            score["ood_unmeasured"] = layer_cost.unmeasured_share(choices)
        return score

    def hole_measure(self, ood: dict[str, np.ndarray], target: str) -> np.ndarray:
        """What ``target``'s hole std multiplies: the share of its prediction resting on units
        in holes (:meth:`LayerCostModel.hole_share`) where the architecture is in a hole
        (``ood_hole > 0``); ``ood_hole`` itself for a support or model without it."""
        share = self._per_target(ood, "ood_hole_share", target)
        if share is None:
            return np.asarray(ood["ood_hole"])
        return np.where(np.asarray(ood["ood_hole"]) > 0, share, 0.0)

    def unmeasured_measure(self, ood: dict[str, np.ndarray], target: str) -> np.ndarray:
        """What :data:`~anb.surrogates.uncertainty.terms.UNMEASURED_STD` multiplies for
        ``target``: the
        share of its prediction resting on units that hold work of a kind no training
        architecture had (:meth:`LayerCostModel.unmeasured_share`; 0 without any)."""
        share = self._per_target(ood, "ood_unmeasured", target)
        return np.zeros(len(ood["ood"])) if share is None else share

    def _per_target(self, ood: dict[str, np.ndarray], key: str, target: str
                    ) -> np.ndarray | None:
        """``target``'s column of the per-layer-cost-target score ``ood[key]``; None when
        the score or the target's layer-cost base is absent."""
        layer_cost = self.builder.layer_cost
        if key not in ood or layer_cost is None or target not in layer_cost.targets_:
            return None
        return ood[key][:, layer_cost.targets_.index(target)]

    def reach(self, X: np.ndarray) -> np.ndarray:
        """How far the layer-cost base lies beyond its training range: the largest excess
        over all this benchmark's targets, each relative to its training span (0 inside every
        range). An architecture beyond one target's range is an extreme one for the others
        too (``benchmarks/shift.py``, top family: the held-out top decile of one device's
        speed is mispredicted on the other devices)."""
        return self.reach_of({name: m.base_excess(X) for name, m in self.models.items()})

    def reach_of(self, excess: dict[str, np.ndarray]) -> np.ndarray:
        """:meth:`reach` from every target's base excess (:meth:`TargetSurrogate.base_excess`)."""
        return np.max([excess[name] / m.base_span() for name, m in self.models.items()], axis=0)

    def predict_transformed(self, archs: Any, metrics: str | Sequence[str] | None = None,
                            ood: dict[str, np.ndarray] | None = None
                            ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Mean and predictive std in each target's model space (log for device metrics);
        the std scales with the support distance and grows by every learned term
        (:func:`~anb.surrogates.uncertainty.terms.widened_std` of the target's
        :class:`~anb.surrogates.uncertainty.terms.StdTerms`): outside the training cost range,
        in holes, on unseen units, where the layer-cost base extrapolates beyond its training
        range (its ``base_std`` times :meth:`TargetSurrogate.base_excess`, and its
        ``reach_std`` times :meth:`reach`) and where the mean lies past the edge of the training
        labels (:meth:`TargetSurrogate.edge_width`)."""
        return self.predict_with_excess(self.choices(archs), self.resolve(metrics), ood)[0]

    def predict_with_excess(self, choices: np.ndarray, names: list[str],
                            ood: dict[str, np.ndarray] | None, base_widening: bool = True
                            ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]],
                                       dict[str, np.ndarray]]:
        """:meth:`predict_transformed`'s result for ``names`` (without the base term when not
        ``base_widening``) and the base excess of every target of the benchmark (all of them
        widen through :meth:`reach`, whichever are queried), from one feature transform."""
        if not len(choices):
            return ({name: (np.zeros(0), np.zeros(0)) for name in names},
                    {name: np.zeros(0) for name in self.models})
        X = self.builder.transform(choices)
        ood = ood if ood is not None else self.ood(choices)
        result = {}
        excess = {name: model.base_excess(X) for name, model in self.models.items()}
        reach = self.reach_of(excess)
        for name, preds in self._member_predictions(X, names).items():
            model = self.models[name]
            mean = preds.mean(1)
            std = np.sqrt(preds.var(1) + model.noise_at(mean) ** 2)
            measures = {"ood_cost": ood["ood_cost"], "hole": self.hole_measure(ood, name),
                        "ood_unit": ood.get("ood_unit", 0.0),
                        "unmeasured": self.unmeasured_measure(ood, name),
                        "excess": excess[name] if base_widening else 0.0,
                        "reach": reach if base_widening else 0.0}
            if base_widening:
                measures["edge"] = model.edge_excess(mean)
            std = widened_std(model.std_terms_, self.support, name,
                              std * np.maximum(ood["ood_distance"], 1.0), measures)
            result[name] = (mean, std)
        return result, excess

    def query(self, archs: Any, metrics: str | Sequence[str] | None = None, noise: bool = False,
              seed: int | None = None, level: float | None = None) -> pd.DataFrame:
        """Predict ``metrics`` (default: all) for one or many architectures.

        Returns a DataFrame with ``arch`` (the architecture string) first, then ``<metric>``
        (the predicted mean, or with ``noise=True`` one plausible repeated measurement: mean
        plus observation noise drawn per (seed, architecture, metric)) and ``<metric>_std``
        (predictive std: model + noise, wider out of distribution) per metric, then ``ood``
        (flag), ``ood_distance``, ``ood_cost`` and ``ood_reason`` (why it is flagged, e.g.
        ``block5_e=6 with block5_k=5 unseen in training``; empty when it is not). With a
        ``level`` (e.g. 0.9), ``<metric>_lo`` / ``<metric>_hi`` follow each std: the central
        interval of the predictive distribution (:mod:`anb.surrogates.intervals`). Its
        ``attrs["anb"]`` holds :attr:`identity`: which data answered. An empty ``archs``
        answers an empty frame with these columns (a search's empty batch relies on it).
        """
        check_query_args(archs, noise, seed, level)
        names = self.resolve(metrics)
        choices = self.choices(archs)
        ood = self.ood(choices)
        dist, excess = self.predict_with_excess(choices, names, ood)
        spans = {name: model.base_span() for name, model in self.models.items()}
        ood = flag_extrapolation(ood, excess, self.transforms, spans)  # every target: see reach
        if noise and seed is None:
            seed = int(np.random.default_rng().integers(2**63))
        columns: dict[str, Any] = {"arch": self.space.arch_strings(choices)}
        for name in names:
            mu, sigma = dist[name]
            draw = mu
            if noise and seed is not None:  # a seed is drawn above when none is given
                draw = mu + self.models[name].std_terms_.observation_std * standard_normal(
                    seed, choices, name, self.space)
            log = self.transforms[name] == "log"
            columns[name] = np.exp(draw) if log else draw
            columns[f"{name}_std"] = label_std(mu, sigma) if log else sigma
            if level is not None:
                columns[f"{name}_lo"], columns[f"{name}_hi"] = bounds(mu, sigma, log, level)
        columns.update({column: ood[column] for column in OOD_COLUMNS})
        frame = pd.DataFrame(columns)  # built once: inserting column by column cost 1 ms
        frame.attrs[IDENTITY] = identity(self)
        return frame

    @property
    def identity(self) -> dict[str, Any]:
        """Which data this is (:func:`anb.surrogates.identity.identity`)."""
        return identity(self)

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)  # absent when __init__ failed
        if pool is not None and self._pool_pid == os.getpid():
            pool.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"SurrogateBenchmark(metrics={self.metrics})"


def check_distinct(names: Sequence[str], what: str,
                   labels: Sequence[str] | None = None) -> None:
    """Refuse a metric named twice in ``names``, also through an alias (``val_top1`` and
    ``accuracy``): a ValueError naming it and both entries (``labels``, default the names)."""
    shown = list(names) if labels is None else list(labels)
    seen: dict[str, str] = {}
    for name, label in zip(names, shown, strict=True):
        full = ALIASES.get(name, name)
        if full in seen:
            raise ValueError(f"{what} {full!r} is given twice ({seen[full]} and {label}); "
                             "each metric may be given once")
        seen[full] = label


def check_query_args(archs: Any, noise: Any, seed: Any, level: Any) -> None:
    """TypeError / ValueError naming the argument, the value and what is allowed, before any
    work: ``query(123)``, ``query(None)``, ``noise="no"`` (which added noise) or ``seed="x"``
    failed deep inside, or did the wrong thing."""
    if archs is None or isinstance(archs, (bool, int, float, complex, np.number)):
        raise TypeError(f"archs {archs!r} is not architectures; allowed: an architecture "
                        "string, record or array, or a sequence, array or DataFrame of them")
    if not isinstance(noise, (bool, np.bool_)):
        raise TypeError(f"noise {noise!r} is not a bool; allowed: True or False")
    if seed is not None and (isinstance(seed, (bool, np.bool_))
                             or not isinstance(seed, (int, np.integer))):
        raise TypeError(f"seed {seed!r} is not an integer; allowed: an int or None")
    if seed is not None and seed < 0:
        raise ValueError(f"seed {seed} is negative; allowed: an int >= 0 or None")
    if level is not None:
        z_value(level)


def label_std(mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """The label-space std ``exp(mu) * sqrt(exp(sigma**2) - 1)`` of a log-modelled target,
    computed in log space: finite up to ``sigma`` ~ 37 (the direct form overflowed past 26.6),
    ``inf`` beyond, without a warning."""
    var = np.square(sigma)
    with np.errstate(divide="ignore", over="ignore"):  # sigma = 0 -> 0; beyond floats -> inf
        return np.exp(mu + 0.5 * (var + np.log(-np.expm1(-var))))


def flag_extrapolation(ood: dict[str, np.ndarray], excess: dict[str, np.ndarray],
                       transforms: dict[str, str], spans: dict[str, float]
                       ) -> dict[str, np.ndarray]:
    """``ood`` with the architectures also flagged whose layer-cost base for any target (queried
    or not: each one widens every std through the reach) lies beyond its training range (the
    prediction extrapolates); ``ood_reason`` names the target whose excess is the largest share
    of its training range's width (``spans``), so that percentage points and log units compare
    fairly."""
    if not excess or not len(next(iter(excess.values()))):
        return ood
    names = list(excess)
    table = np.stack([excess[name] for name in names], axis=1)
    beyond = np.flatnonzero(table.max(axis=1) > 0)
    if not len(beyond):
        return ood
    width = np.array([spans[name] for name in names])
    reason = ood["ood_reason"].copy()
    for i in beyond:
        j = int((table[i] / width).argmax())
        name = names[j]
        unit = " log units" if transforms[name] == "log" else ""
        text = (f"{name} layer-cost estimate {table[i, j]:.2f}{unit} beyond its "
                "training range")
        reason[i] = f"{reason[i]}; {text}" if reason[i] else text
    flag = ood["ood"].copy()
    flag[beyond] = True
    return {**ood, "ood": flag, "ood_reason": reason}


def _cost_hint(member: Any) -> float:
    """Rough relative prediction cost of a member (orders the pool's tasks; 1 ~ one tree)."""
    booster = getattr(member, "booster_", None)
    if member.name in ("xgboost", "random_forest"):
        return float(member.table().n_trees if booster is None else booster.num_boosted_rounds())
    if member.name == "lightgbm" and booster is not None:
        return 3.0 * booster.num_trees()  # LightGBM's predictor is ~3x slower per tree
    if member.name == "svr":
        return member.support_.size / 200.0
    weights = getattr(member, "weights_", None)
    return sum(w.size for w in weights) / 50.0 if weights is not None else 0.0
