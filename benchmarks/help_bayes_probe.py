"""Probe (not shipped in ``anb adapt``): a per-unit Bayesian transfer on HELP's protocol.

    .venv/bin/python benchmarks/help_bayes_probe.py SPACE {valid,lomo,test} [--draws 5]

The new device's time is ``b + sum_d a_d c_d(x) + sum_u delta_u phi_u(x)``: ``c_d`` the known
devices' additive layer-cost predictions (over their medians), ``phi`` the space's unit design
(:func:`~anb.surrogates.layer_cost.layer_design`), Gaussian priors on ``a`` (one scale) and
``delta`` (one scale times each unit's RMS known-device weight, the weights read back from the
layer-cost columns by least squares), noise proportional to the time; the two prior scales and
the noise by marginal likelihood. Printed per unseen device (n = 20, Spearman / 90 % coverage):
``old`` :class:`~anb.surrogates.adapt.model.AdaptedModel` as shipped, ``bayes`` the Bayesian model
alone (posterior predictive std, delta method), ``tri`` a three-way blend of ridge, additive and
Bayesian parts in quarters chosen by leave-one-out (closed-form GP leave-one-out for the
Bayesian part), its std the shipped formula. Results: docs/decisions/help-transfer.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import help_transfer as H
import numpy as np
from scipy.optimize import minimize
from scipy.stats import spearmanr

from anb.searchspace import get_space
from anb.searchspace.space import ANB_SPACE
from anb.surrogates import help_tables as ht
from anb.surrogates import intervals
from anb.surrogates.adapt.model import AdaptedModel, op_components
from anb.surrogates.layer_cost import layer_design


def fit_bayes(X: np.ndarray, t: np.ndarray, m: int, scale: np.ndarray) -> dict:
    """Posterior of ``[b, a (m), delta]`` given design ``X`` and relative times ``t``."""
    def parts(th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        prior = np.concatenate([[100.0], np.full(m, np.exp(2 * th[0])),
                                (np.exp(th[1]) * scale) ** 2])
        return prior, (X * prior) @ X.T + np.diag((np.exp(th[2]) * t) ** 2)

    def nll(th: np.ndarray) -> float:
        try:
            low = np.linalg.cholesky(parts(th)[1])
        except np.linalg.LinAlgError:
            return 1e10
        a = np.linalg.solve(low, t)
        return 0.5 * a @ a + np.log(np.diag(low)).sum()

    starts = [np.array(s, float) for s in np.stack(np.meshgrid(
        [-3, -1, 1], [-4, -2, 0], [-4, -2]), -1).reshape(-1, 3)]
    th = minimize(nll, min(starts, key=nll), method="L-BFGS-B",
                  bounds=[(-8, 4), (-10, 3), (-7, 0)]).x
    prior, k = parts(th)
    kinv = np.linalg.inv(k)
    xp = X * prior
    loo = np.maximum(t - (kinv @ t) / np.diag(kinv), 1e-3)
    return {"mean": xp.T @ kinv @ t, "cov": np.diag(prior) - xp.T @ kinv @ xp,
            "sigma": float(np.exp(th[2])), "loo": np.log(loo / t)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("space")
    parser.add_argument("on", choices=ht.SPLITS)
    parser.add_argument("--draws", type=int, default=5)
    args = parser.parse_args()
    table = ht.read_table(H.DATA, args.space)
    space, proto = get_space(args.space), ht.protocol(args.space)
    choices = ht.choices(table, args.space)
    ops, units = op_components(choices, space), layer_design(choices, space)
    res: dict[str, dict[str, list]] = {}
    for known, unseen in proto.splits(args.on):
        K = H.fit_known(table, args.space, known).log_costs(choices)
        weights = np.linalg.lstsq(units[:2000], np.exp(K[:2000]), rcond=None)[0][:-1]
        for device in unseen:
            latency = table[device].to_numpy(np.float64)
            y, q = np.log(latency), ht.query_rows(proto, latency)
            for draw in range(args.draws):
                rows = ht.measured_rows(proto, latency, 20, np.random.default_rng(draw))
                old = AdaptedModel.fit(ht.target(device), list(known), K[rows], ops[rows],
                                       latency[rows], space=ANB_SPACE)
                ks, level = old.known_scale, old.level
                scale = np.sqrt(np.mean((weights / ks) ** 2, 1)) + 1e-6

                post = fit_bayes(_design(K, units, ks, rows), np.exp(y[rows] - level),
                                 K.shape[1], scale)
                xq = _design(K, units, ks, q)
                mu = np.maximum(xq @ post["mean"], 1e-3)
                var = np.einsum("ij,jk,ik->i", xq, post["cov"], xq) + (post["sigma"] * mu) ** 2
                bayes, bstd = level + np.log(mu), np.sqrt(np.maximum(var, 0)) / mu
                ridge = K[q] @ old.ridge_coef + old.ridge_intercept
                old_mean, old_std, _ = old.predict_log_cost(K[q], ops[q])
                additive = (old_mean - old.blend * ridge) / max(1 - old.blend, 1e-12) \
                    if old.blend < 1 else ridge
                loo = _component_loo(old, K[rows], ops[rows], y[rows])
                table_l = np.column_stack([loo, post["loo"]])
                grid = [(i / 4, j / 4, 1 - (i + j) / 4) for i in range(5) for j in range(5 - i)]
                errs = [np.sqrt(np.mean((table_l @ np.array(w)) ** 2)) for w in grid]
                w = np.array(grid[int(np.argmin(errs))])
                tri = np.stack([ridge, additive, bayes], 1) @ w
                tri_std = np.sqrt(min(errs) ** 2 + (0.5 * (ridge - additive)) ** 2)
                for name, mean, std in (("old", old_mean, old_std), ("bayes", bayes, bstd),
                                        ("tri", tri, tri_std)):
                    res.setdefault(name, {}).setdefault(device, []).append(
                        (spearmanr(mean, y[q])[0],
                         intervals.coverage(y[q], mean, std, log=False)))
    for name, per in res.items():
        cells = {d: np.mean(v, 0) for d, v in per.items()}
        mean = np.mean(list(cells.values()), 0)
        print(name, " ".join(f"{d} {r:.3f}/{c:.2f}" for d, (r, c) in cells.items()),
              f"| mean {mean[0]:.4f}/{mean[1]:.3f}")


def _design(K: np.ndarray, units: np.ndarray, known_scale: np.ndarray, rows: np.ndarray
            ) -> np.ndarray:
    """Bias, known devices' times over their medians, unit design (its bias dropped)."""
    return np.concatenate([np.ones((len(rows), 1)), np.exp(K[rows]) / known_scale,
                           units[rows, :-1]], axis=1)


def _component_loo(model: AdaptedModel, K: np.ndarray, ops: np.ndarray, y: np.ndarray
                   ) -> np.ndarray:
    """Leave-one-out log errors of the ridge and additive parts (as ``AdaptedModel.fit``)."""
    from anb.surrogates.adapt.model import loo_residuals

    return loo_residuals(K, ops, y, model.ridge_alpha, model.known_scale, model.op_scale,
                         model.level)


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
