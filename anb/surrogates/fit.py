"""Fit a whole surrogate benchmark from a dataset, and score it on a split."""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anb import resources
from anb.io import read_json
from anb.searchspace.base import Space
from anb.surrogates.benchmark import SurrogateBenchmark
from anb.surrogates.data import (
    Labels,
    data_hash,
    frame_choices,
    labels,
    load_table,
    make_split,
    target_columns,
    transform_for,
)
from anb.surrogates.ensemble import TargetSurrogate
from anb.surrogates.estimators import FAMILIES
from anb.surrogates.features import FeatureBuilder
from anb.surrogates.intervals import scores
from anb.surrogates.layer_cost import LayerCostModel
from anb.surrogates.metrics import regression_metrics
from anb.surrogates.uncertainty.holes import Refit
from anb.surrogates.uncertainty.learn import learn_std_terms
from anb.surrogates.uncertainty.noise import observation_std
from anb.surrogates.uncertainty.support import Support
from anb.surrogates.uncertainty.terms import StdTerms, cost_slope

#: The packaged surrogate config: the one source of every default below.
PACKAGED_CONFIG = ("surrogates", "default.json")


@lru_cache(maxsize=1)
def _packaged() -> dict[str, Any]:
    return read_json(resources.config_path(*PACKAGED_CONFIG))


def packaged_default(*keys: str) -> Callable[[], Any]:
    """A default factory: the value at ``keys`` in the packaged config (a copy)."""
    def value() -> Any:
        data: Any = _packaged()
        for key in keys:
            data = data[key]
        return copy.deepcopy(data)
    return value


def _default_target() -> TargetConfig:
    return _target_config(packaged_default("default")(), "default")


def _per_target() -> dict[str, TargetConfig]:
    return {k: _target_config(v, f"per_target.{k}")
            for k, v in packaged_default("per_target")().items()}


@dataclass
class TargetConfig:
    """How one target is modelled: ``params`` left out are the family's own defaults,
    ``n_members`` left out is the packaged ``default.json``'s."""

    family: str | list[str]
    params: dict[str, Any] | list[dict[str, Any]] = field(default_factory=dict)
    n_members: int = field(default_factory=packaged_default("default", "n_members"))
    bootstrap: bool = False


@dataclass
class FitConfig:
    """Everything ``fit_benchmark`` needs besides the data (JSON-serialisable). What is left
    out is the packaged ``anb/configs/surrogates/default.json``'s: ``FitConfig()`` is the
    config ``anb.load()``, ``anb fit`` and ``anb pipeline`` fit by default. ``per_target``
    left out is the file's only with the file's ``default``: a ``default`` you give applies
    to every target."""

    targets: list[str] | None = None
    feature_set: str = field(default_factory=packaged_default("feature_set"))
    layer_cost: bool = field(default_factory=packaged_default("layer_cost"))
    #: Robust refit of the layer-cost model for device metrics: leave out rows measured more
    #: than ``layer_cost_trim`` robust stds slower than the additive model (saturated devices).
    layer_cost_trim: float | None = field(default_factory=packaged_default("layer_cost_trim"))
    #: Time targets (device metrics, training time) as a saturating sum
    #: ``(S**p + F**p)**(1/p)`` with a per-target floor (host-side throughput ceilings) instead
    #: of the trimmed additive fit: all (true), none (false) or the targets listed.
    layer_cost_saturating: bool | list[str] = field(
        default_factory=packaged_default("layer_cost_saturating"))
    #: Internal hold-outs that learn how much wider predictions in holes of the training data
    #: must be (:mod:`anb.surrogates.uncertainty.holes`; each refits the benchmark once;
    #: 0: none).
    hole_folds: int = field(default_factory=packaged_default("hole_folds"))
    split: str = field(default_factory=packaged_default("split"))
    seed: int = field(default_factory=packaged_default("seed"))
    default: TargetConfig = field(default_factory=_default_target)
    per_target: dict[str, TargetConfig] = None  # type: ignore[assignment]  # see __post_init__

    def __post_init__(self) -> None:
        if not isinstance(self.hole_folds, int) or self.hole_folds < 0:
            raise ValueError(f"config field 'hole_folds' must be a whole number >= 0, got "
                             f"{self.hole_folds!r}")
        if self.per_target is None:
            self.per_target = _per_target() if self.default == _default_target() else {}

    def for_target(self, target: str) -> TargetConfig:
        return self.per_target.get(target, self.default)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FitConfig:
        allowed = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; allowed: {sorted(allowed)}")
        data = dict(data)
        if "default" in data:
            data["default"] = _target_config(data["default"], "default")
        if "per_target" in data:
            data["per_target"] = {k: _target_config(v, f"per_target.{k}")
                                  for k, v in (data["per_target"] or {}).items()}
        LayerCostModel(trim=data.get("layer_cost_trim"),  # a bad value is a clear error now
                       saturating=data.get("layer_cost_saturating", False))
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path) -> FitConfig:
        return cls.from_dict(read_json(path))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _target_config(data: Any, where: str) -> TargetConfig:
    if not isinstance(data, dict):
        raise ValueError(f"config field {where!r} must be an object, got {data!r}")
    unknown = sorted(set(data) - set(TargetConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown} in config {where!r}; "
                         f"allowed: {sorted(TargetConfig.__dataclass_fields__)}")
    if "family" not in data:
        raise ValueError(f"config {where!r} needs a 'family'; allowed: {sorted(FAMILIES)}")
    config = TargetConfig(**data)
    TargetSurrogate(config.family, config.params, config.n_members).validate()
    return config


@dataclass
class Prepared:
    """A dataset made ready for fitting: table, choices, split masks and labels, and the
    search space they are of (the one carrier of the space through fitting)."""

    frame: pd.DataFrame
    choices: np.ndarray
    masks: dict[str, np.ndarray]
    labels: dict[str, Labels]
    space: Space


def prepare(data: str | Path | pd.DataFrame, targets: Sequence[str] | None = None,
            split: str = "published", seed: int = 0, split_dir: str | Path | None = None,
            *, space: Space) -> Prepared:
    """Load the data, split it, and pick the targets (all present by default)."""
    frame = data if isinstance(data, pd.DataFrame) else load_table(data, space)
    masks = make_split(frame, split, seed, split_dir)
    names = list(targets) if targets else target_columns(frame)
    return Prepared(frame, frame_choices(frame, space), masks,
                    {t: labels(frame, t) for t in names}, space)


def to_model_space(target: str, y: np.ndarray) -> np.ndarray:
    return np.log(y) if transform_for(target) == "log" else y


def fit_layer_cost(prepared: Prepared, config: FitConfig) -> LayerCostModel:
    """The layer-cost model of every prepared target, fitted on the train split with the
    config's trim and saturation (as ``fit_benchmark`` fits it)."""
    train = prepared.masks["train"]
    return LayerCostModel(trim=config.layer_cost_trim,
                          saturating=config.layer_cost_saturating).fit(
        prepared.choices[train],
        {t: (lab.values[train], lab.present[train]) for t, lab in prepared.labels.items()},
        prepared.space)


def fit_benchmark(prepared: Prepared, config: FitConfig | None = None, progress: bool = True
                  ) -> SurrogateBenchmark:
    """Fit one bagged surrogate per target on the train split (val for early stopping/noise),
    in the prepared data's space."""
    from tqdm.auto import tqdm

    space = prepared.space
    config = config or FitConfig()
    for target in prepared.labels:  # a missing extra: one line before any work
        spec = config.for_target(target)
        for family in [spec.family] if isinstance(spec.family, str) else spec.family:
            FAMILIES[family].check_installed()
    train, val = prepared.masks["train"], prepared.masks["val"]
    for target, lab in prepared.labels.items():
        if not (lab.present & train).any():
            raise ValueError(f"target {target!r}: empty training set after filtering "
                             f"({lab.n_missing} of {len(lab.values)} labels are missing)")
    layer_cost = fit_layer_cost(prepared, config) if config.layer_cost else None
    builder = FeatureBuilder(config.feature_set, layer_cost, space=space)
    X = builder.transform(prepared.choices)
    support = Support(space).fit(prepared.choices[train])
    log_macs = support.log_macs(prepared.choices)
    seen = ~prepared.masks["test"]  # observation noise: any row but the test split's
    values = {t: (to_model_space(t, np.where(lab.present, lab.values, 1.0)), lab.present)
              for t, lab in prepared.labels.items()}
    terms = {target: StdTerms(cost_std=cost_slope(log_macs[lab.present & train],
                                                  values[target][0][lab.present & train]),
                              observation_std=observation_std(
                                  prepared.frame, prepared.choices, target,
                                  transform_for(target), lab.present & seen))
             for target, lab in prepared.labels.items()}
    if config.hole_folds:
        support, terms = learn_std_terms(prepared.choices, prepared.masks, space,
                                         config.hole_folds, _refit(prepared, config), log_macs,
                                         config.seed, support, terms, values)
    total = sum(config.for_target(t).n_members for t in prepared.labels)
    bar = tqdm(total=total, desc="fitting surrogates", disable=not progress, unit="member")
    models: dict[str, TargetSurrogate] = {}
    info: dict[str, dict[str, Any]] = {}
    for target, lab in prepared.labels.items():
        spec = config.for_target(target)
        tr, va = lab.present & train, lab.present & val
        y = to_model_space(target, lab.values)
        base = builder.column(f"lc_{target}") if layer_cost is not None else None
        model = TargetSurrogate(spec.family, spec.params, spec.n_members, spec.bootstrap, base,
                                config.seed, extrapolate=transform_for(target) == "log")
        models[target] = model.fit(X[tr], y[tr], X[va], y[va], progress=bar.update,
                                   std_terms=terms[target])
        info[target] = {"n_train": int(tr.sum()), "n_val": int(va.sum()),
                        "n_missing": lab.n_missing}
        if layer_cost is not None:
            info[target]["n_layer_cost"] = layer_cost.n_used_[target]
        info[target].update(_learned_info(terms[target], support, target, config.hole_folds))
    bar.close()
    transforms = {t: transform_for(t) for t in models}
    manifest_info = {
        "fit_config": config.to_dict(),
        "training_data": {"sha256": data_hash(prepared.frame, list(prepared.labels)),
                          "n_records": len(prepared.frame), "split": config.split},
        "targets": info,
    }
    return SurrogateBenchmark(builder, models, transforms, manifest_info, space=space,
                              support=support)


def _learned_info(terms: StdTerms, support: Support, target: str, hole_folds: int
                  ) -> dict[str, Any]:
    """What the manifest records of a target's stds learned on internal hold-outs."""
    if not hole_folds:
        return {}
    info: dict[str, Any] = {}
    if target in support.hole_std_:
        info.update(hole_std=support.hole_std_[target], base_std=terms.base_std,
                    reach_std=terms.reach_std, cost_std=terms.cost_std)
    if target in support.unit_std_:
        info["unit_std"] = support.unit_std_[target]
    info.update(edge_std=list(terms.edge_std), edge_cap=list(terms.edge_cap))
    return info


def _refit(prepared: Prepared, config: FitConfig) -> Refit:
    """The internal hold-outs' refit: the same config without hold-outs of its own."""
    inner_config = replace(config, hole_folds=0)

    def refit(masks: dict[str, np.ndarray], held: np.ndarray, targets: list[str] | None
              ) -> tuple[dict[str, tuple[np.ndarray, ...]], dict[str, np.ndarray]]:
        labels = {t: prepared.labels[t] for t in targets} if targets else prepared.labels
        sub = replace(prepared, masks=masks, labels=labels)
        inner = fit_benchmark(sub, inner_config, progress=False)
        choices = prepared.choices[held]
        ood = inner.ood(choices)
        no_cost = {**ood, "ood_cost": np.zeros(len(choices))}
        predicted, excess = inner.predict_with_excess(choices, inner.metrics, no_cost,
                                                      base_widening=False)
        out: dict[str, tuple[np.ndarray, ...]] = {}
        ood["reach"] = inner.reach_of(excess)  # excess holds every refitted target
        for target, (mean, std) in predicted.items():
            lab = prepared.labels[target]
            present = lab.present[held]
            y = np.where(present, lab.values[held], 1.0)
            out[target] = (present, to_model_space(target, y) - mean, std, excess[target],
                           inner.hole_measure(ood, target), inner.models[target].edge_excess(mean))
        return out, ood
    return refit


def evaluate(bench: SurrogateBenchmark, prepared: Prepared, split: str = "test"
             ) -> pd.DataFrame:
    """Per-target metrics on one split in original units, plus the coverage of the central
    90 % interval and the proper scores (:func:`anb.surrogates.intervals.scores`)."""
    mask = prepared.masks[split]
    rows = []
    names = [t for t in bench.metrics if t in prepared.labels]
    if not names:
        raise ValueError(f"the data has none of the benchmark's metrics {bench.metrics}")
    frame = bench.query(prepared.choices[mask], names)
    for target in names:
        lab = prepared.labels[target]
        present = lab.present[mask]
        if present.sum() < 2:
            continue
        y, pred = lab.values[mask][present], frame[target].to_numpy()[present]
        std = frame[f"{target}_std"].to_numpy()[present]
        rows.append({"target": target, "n": int(present.sum()),
                     "n_missing": int((~present).sum()), **regression_metrics(y, pred),
                     **scores(y, pred, std, bench.transforms[target] == "log")})
    return pd.DataFrame(rows, columns=None if rows else ["target"]).set_index("target")
