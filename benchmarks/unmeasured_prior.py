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
from anb.surrogates.layer_cost import LayerCostModel, layer_design
from anb.surrogates.uncertainty.terms import UNMEASURED_STD

#: Share of each (kind, target) cell's architectures the chosen std must cover.
COVERAGE = 0.85


def fit_without_se(prepared: Prepared) -> tuple[LayerCostModel, np.ndarray]:
    """The default config's layer-cost model of every time target, fitted on the published
    train + val architectures without squeeze-excite (never the test rows), and those rows."""
    config = FitConfig()
    choices = prepared.choices
    rows = ((prepared.masks["train"] | prepared.masks["val"])
            & ~(choices[:, :, 3] == 1).any(axis=1))
    times = [t for t in prepared.labels if transform_for(t) == "log"]
    model = LayerCostModel(trim=config.layer_cost_trim,
                           saturating=config.layer_cost_saturating).fit(
        choices[rows], {t: (prepared.labels[t].values[rows], prepared.labels[t].present[rows])
                        for t in times}, prepared.space)
    return model, choices[rows]


def leave_one_kind_out(model: LayerCostModel, archs: np.ndarray, level: float = LEVEL
                       ) -> pd.DataFrame:
    """Per (kind, target) the fitted speed over the median of the other kinds', and per
    architecture the std per unit of share its ``level`` interval needs to hold the move of
    log time when the kind takes that median (column ``need``, an array per cell)."""
    shared = np.flatnonzero(model.groups_ == 0)  # one per analytic cost, in names' order
    names = dict(zip(shared, model.space.unit_costs().names, strict=True))
    seen = (layer_design(archs, model.space) @ model.mapping_ != 0).any(axis=0)
    exercised = [k for k in shared if seen[k]]
    units = model.space.cost_units(archs).flat()
    base = model.transform(archs)
    weights = model.weights_.copy()
    z = z_value(level)
    rows = []
    for k in exercised:
        others = [j for j in exercised if j != k]
        held = (model.mapping_[:-1, k] != 0).astype(np.float64)  # units holding this kind
        share = model.hole_share(archs, held[units])
        for i, target in enumerate(model.targets_):
            theta = model.params_[target].copy()
            median = float(np.median(theta[others]))
            ratio = theta[k] / median
            theta[k] = median
            model.weights_ = weights.copy()
            model.weights_[i] = model.mapping_ @ theta
            try:
                move = np.abs(model.transform(archs)[:, i] - base[:, i])
            finally:
                model.weights_ = weights
            rows.append({"kind": names[k],
                         "target": target, "speed_over_median": ratio,
                         "median_move": float(np.median(move)),
                         "median_share": float(np.median(share[:, i])),
                         "need": move / (z * np.maximum(share[:, i], 1e-12))})
    return pd.DataFrame(rows)


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


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
