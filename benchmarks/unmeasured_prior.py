"""The unmeasured-work prior, chosen by leaving one measured kind of work out.

    nice .venv/bin/python benchmarks/unmeasured_prior.py [--coverage 0.85]

A kind of work no training architecture had (squeeze-excite's, when none was trained with it)
takes the median speed of the kinds seen, and the std of a query widens by
``UNMEASURED_STD`` (``anb/surrogates/features.py``) times the share of its prediction resting
on the units holding that work. This script chooses that std without reading a label of the
architectures it is reported on (``benchmarks/shift.py --families no_se``): the additive
layer-cost model (the default config's trim and floors) is fitted on the published train + val
architectures without squeeze-excite, and each kind of work they do hold is in turn given the
median speed of the others, as if it had never been measured. Per (kind, time target) cell:
that kind's fitted speed over the median, the median move of log time, the median share of
the prediction on the units holding the kind, and the std per unit of share whose central
90 % interval holds the move on ``--coverage`` of the architectures. The chosen std is the
largest of these: every cell covered at that share or more (the move alone: the model's other
std terms only widen it).

The same leave-one-kind-out chooses the accuracy rule (``IDLE_RULE["identity"]`` in
``anb/surrogates/layer_cost.py``): the layer-cost model of top-1, fitted on the same
architectures, gives each kind seen in turn the others' mean, median or no effect; the rule
whose median move of top-1 (pp), averaged over the kinds, is smallest is the one shipped.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse

import numpy as np
import pandas as pd

from anb import resources
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import FitConfig, prepare
from anb.surrogates.data import transform_for
from anb.surrogates.fit import Prepared
from anb.surrogates.intervals import LEVEL, z_value
from anb.surrogates.layer_cost import IDLE_RULE, IDLE_RULES, LayerCostModel, layer_design
from anb.surrogates.uncertainty.terms import UNMEASURED_STD

#: Share of each (kind, target) cell's architectures the chosen std must cover.
COVERAGE = 0.85
#: The accuracy target whose rule is chosen.
ACCURACY = "val_top1"


def fit_without_se(prepared: Prepared, accuracy: bool = False
                   ) -> tuple[LayerCostModel, np.ndarray]:
    """The default config's layer-cost model of every time target (``accuracy``: of
    :data:`ACCURACY` alone), fitted on the published train + val architectures without
    squeeze-excite (never the test rows), and those rows."""
    config = FitConfig()
    choices = prepared.choices
    rows = ((prepared.masks["train"] | prepared.masks["val"])
            & ~(choices[:, :, 3] == 1).any(axis=1))
    targets = ([ACCURACY] if accuracy
               else [t for t in prepared.labels if transform_for(t) == "log"])
    model = LayerCostModel(trim=config.layer_cost_trim,
                           saturating=config.layer_cost_saturating).fit(
        choices[rows], {t: (prepared.labels[t].values[rows], prepared.labels[t].present[rows])
                        for t in targets}, prepared.space)
    return model, choices[rows]


def exercised_kinds(model: LayerCostModel, archs: np.ndarray) -> dict[int, str]:
    """The shared analytic-cost parameters ``archs`` exercise, with their kinds' names."""
    shared = np.flatnonzero(model.groups_ == 0)  # one per analytic cost, in names' order
    names = dict(zip(shared, model.space.unit_costs().names, strict=True))
    seen = (layer_design(archs, model.space) @ model.mapping_ != 0).any(axis=0)
    return {int(k): names[k] for k in shared if seen[k]}


def moved(model: LayerCostModel, archs: np.ndarray, target: int, params: np.ndarray
          ) -> np.ndarray:
    """Target ``target``'s prediction (model space) on ``archs`` with the parameters
    ``params``, minus the fitted one; the model is left as it was fitted."""
    weights = model.weights_.copy()
    base = model.transform(archs)[:, target]
    try:
        model.weights_[target] = model.mapping_ @ params
        return model.transform(archs)[:, target] - base
    finally:
        model.weights_ = weights


def leave_one_kind_out(model: LayerCostModel, archs: np.ndarray, level: float = LEVEL
                       ) -> pd.DataFrame:
    """Per (kind, target) the fitted speed over the median of the other kinds', and per
    architecture the std per unit of share its ``level`` interval needs to hold the move of
    log time when the kind takes that median (column ``need``, an array per cell)."""
    kinds = exercised_kinds(model, archs)
    units = model.space.cost_units(archs).flat()
    z = z_value(level)
    rows = []
    for k, kind in kinds.items():
        others = [j for j in kinds if j != k]
        held = (model.mapping_[:-1, k] != 0).astype(np.float64)  # units holding this kind
        share = model.hole_share(archs, held[units])
        for i, target in enumerate(model.targets_):
            theta = model.params_[target].copy()
            median = float(np.median(theta[others]))
            ratio = theta[k] / median
            theta[k] = median
            move = np.abs(moved(model, archs, i, theta))
            rows.append({"kind": kind,
                         "target": target, "speed_over_median": ratio,
                         "median_move": float(np.median(move)),
                         "median_share": float(np.median(share[:, i])),
                         "need": move / (z * np.maximum(share[:, i], 1e-12))})
    return pd.DataFrame(rows)


def accuracy_rules(model: LayerCostModel, archs: np.ndarray) -> pd.DataFrame:
    """Per (kind seen, rule of ``IDLE_RULES``): the kind's fitted effect on top-1, the rule's
    value from the other kinds, and the median absolute and the mean move of top-1 (pp) on
    ``archs`` when the kind takes that value (``model``: of :data:`ACCURACY` alone)."""
    kinds = exercised_kinds(model, archs)
    theta = model.params_[ACCURACY]
    rows = []
    for k, kind in kinds.items():
        others = theta[[j for j in kinds if j != k]]
        for rule, value_of in IDLE_RULES.items():
            params = theta.copy()
            params[k] = value_of(others)
            move = moved(model, archs, 0, params)
            rows.append({"kind": kind, "rule": rule, "effect": theta[k], "value": params[k],
                         "median_abs_move": float(np.median(np.abs(move))),
                         "mean_move": float(move.mean())})
    return pd.DataFrame(rows)


def chosen_rule(table: pd.DataFrame) -> str:
    """The rule whose median absolute move, averaged over the kinds, is smallest."""
    return str(table.groupby("rule")["median_abs_move"].mean().idxmin())


def chosen_std(cells: pd.DataFrame, coverage: float = COVERAGE) -> float:
    """The smallest std per unit of share that covers at least ``coverage`` of every cell."""
    return float(max(np.quantile(need, coverage) for need in cells["need"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coverage", type=float, default=COVERAGE,
                        help="share of each cell's architectures to cover (default 0.85)")
    args = parser.parse_args()
    if not 0 < args.coverage < 1:
        parser.error(f"--coverage must be strictly between 0 and 1, got {args.coverage}")
    prepared = prepare(resources.RELEASED_DATASET, None, space=ANB_SPACE)
    model, archs = fit_without_se(prepared)
    cells = leave_one_kind_out(model, archs)
    need = chosen_std(cells, args.coverage)
    std = float(np.ceil(need * 100) / 100)
    cells[f"std_for_{args.coverage:g}"] = [np.quantile(n, args.coverage) for n in cells["need"]]
    pd.set_option("display.width", 200)
    print(f"{len(archs)} architectures without squeeze-excite (train + val), "
          f"{cells['kind'].nunique()} kinds x {cells['target'].nunique()} time targets\n")
    print(cells.drop(columns="need").round(3).to_string(index=False))
    for value, name in ((UNMEASURED_STD, "UNMEASURED_STD (shipped)"),
                        (std, "chosen (the largest cell's need rounded up to 0.01)"),
                        (1 / np.sqrt(3), "1/sqrt(3) (before)")):
        covered = np.array([np.mean(n <= value) for n in cells["need"]])
        print(f"{name}: {value:.3f}; cells covered >= {args.coverage:g}: "
              f"{int((covered >= args.coverage).sum())} of {len(covered)}, lowest "
              f"{covered.min():.3f}")
    print(f"\nlargest cell's need {need:.4f}: chosen std {std:.2f}; shipped "
          f"{UNMEASURED_STD:.2f} ({'the same' if std == UNMEASURED_STD else 'DIFFERENT'})")
    accuracy, archs = fit_without_se(prepared, accuracy=True)
    rules = accuracy_rules(accuracy, archs)
    print(f"\n{ACCURACY}: each kind seen given the others' effect by each rule (pp)\n")
    print(rules.round(3).to_string(index=False))
    summary = rules.groupby("rule")[["median_abs_move", "mean_move"]].mean()
    print("\naveraged over the kinds\n" + summary.round(3).to_string())
    rule, shipped = chosen_rule(rules), IDLE_RULE["identity"]
    print(f"\nchosen accuracy rule: {rule}; shipped {shipped} "
          f"({'the same' if rule == shipped else 'DIFFERENT'})")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
