"""The architecture-aware ridge of ``anb adapt`` (anb/surrogates/adapt/embed.py): a new device
of another family than every known one is ranked from 20 measurements, its shrinkage is scored
by exact leave-one-out errors, and ``anb adapt`` fits and saves it on a non-default space."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr
from typer.testing import CliRunner

import anb
from anb.searchspace import get_space
from anb.searchspace.base import Space
from anb.searchspace.sampler import Sampler
from anb.surrogates.adapt.embed import BLOCKS, EmbedModel, arch_features
from anb.surrogates.adapt.model import EMBED_MIN_POINTS, AdaptedModel, op_components
from anb.surrogates.adapt.proxy import analytic_proxies, best_proxy

SPACE = get_space("nasbench201")
#: The new device's seconds per operation of each space, in the order of its units
#: (NAS-Bench-201: none, skip, conv 1x1, conv 3x3, pool; FBNet: k3_e1, k3_e1_g2, k3_e3, k3_e6,
#: k5_e1, k5_e1_g2, k5_e3, k5_e6, skip): launch-bound, whatever the MACs; pooling and grouped
#: convolutions slowest (no unit for them)
OP_SECONDS = {"nasbench201": np.array([0.0, 0.2, 0.5, 1.0, 1.5]),
              "fbnet": np.array([1.0, 2.0, 1.1, 1.3, 1.0, 2.0, 1.1, 1.3, 0.1])}


def two_family_table(seed: int = 0, space: Space = SPACE
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(choices, known log costs, new latency)`` of 1000 architectures: two known devices
    of one family (compute-bound: time follows MACs plus activation traffic) and a new device
    of another (a fixed time per operation, :data:`OP_SECONDS`), with 1 % noise."""
    rng = np.random.default_rng(seed)
    choices = Sampler(seed, space=space).sample_choices(1000)
    proxies = analytic_proxies(space, choices)
    known = np.log(np.stack([proxies["macs"] / 1e6 + proxies["activations"] / 1e5,
                             proxies["macs"] / 1e6 + 3 * proxies["activations"] / 1e5], 1))
    units = space.cost_units(choices)
    per_op = (OP_SECONDS[space.name][units.units] * units.counts).sum(1)
    latency = (0.3 + per_op) * np.exp(0.01 * rng.standard_normal(len(choices)))
    return choices, known, latency


@pytest.mark.parametrize("name", ["nasbench201", "fbnet"])
def test_a_device_of_another_family_is_ranked_from_20_measurements(name):
    """The known devices rank by MACs and traffic, the new one by its operations: the
    transfer without the architecture's features and the best single proxy both rank it
    poorly; the blend with the ridge on the architecture's operations ranks it well (FBNet:
    22 layers of 9 operations, too many (layer, operation) pairs for 20 rows: the count of
    each operation over the layers carries it)."""
    space = get_space(name)
    choices, known, latency = two_family_table(0, space)
    rows, test = np.arange(20), np.arange(20, 1000)
    ops = op_components(choices, space)
    kwargs = {"space": space}
    model = AdaptedModel.fit("latency_newbox", ["a", "b"], known[rows], ops[rows],
                             latency[rows], choices=choices[rows], **kwargs)
    transfer = AdaptedModel.fit("latency_newbox", ["a", "b"], known[rows], ops[rows],
                                latency[rows], **kwargs)
    truth = np.log(latency[test])
    mean = model.predict_log_cost(known[test], ops[test],
                                  **model.design_inputs(choices[test], space))[0]
    rho = spearmanr(mean, truth)[0]
    rho_transfer = spearmanr(transfer.predict_log_cost(known[test], ops[test])[0], truth)[0]
    proxies = analytic_proxies(space, choices)
    rho_proxy = spearmanr(best_proxy(proxies, rows, np.log(latency[rows]))[1][test], truth)[0]
    assert model.embed is not None and model.embed_blend >= 0.75 and model.proxy == ""
    assert rho > 0.95, rho
    assert rho > max(rho_transfer, rho_proxy) + 0.1, (rho, rho_transfer, rho_proxy)


def test_the_shrinkage_is_scored_by_exact_leave_one_out_refits():
    """Each row's residual is the ridge refitted without it (same standardisation and
    shrinkage) predicting it; the chosen shrinkage has the least such error of the grid
    points tried from the start."""
    choices, known, latency = two_family_table(1)
    rows = np.arange(15)
    features, block = arch_features(SPACE, choices[rows])
    y = np.log(latency[rows])
    model, residuals = EmbedModel.fit(known[rows], features, block, y)
    X = np.concatenate([known[rows], features], axis=1)
    groups = np.concatenate([np.zeros(known.shape[1], dtype=int), block])
    keep = model.scale > 0
    Z = (X[:, keep] - model.mean[keep]) / model.scale[keep]
    penalty = model.lambdas[groups[keep]]
    for i in range(len(y)):
        rest = np.arange(len(y)) != i
        # the primal ridge: intercept with prior variance 1e4, block b's coefficients 1/lambda_b
        F = np.column_stack([np.ones(rest.sum()), Z[rest]])
        A = F.T @ F + np.diag(np.concatenate([[1e-4], penalty]))
        beta = np.linalg.solve(A, F.T @ y[rest])
        assert beta[0] + Z[i] @ beta[1:] - y[i] == pytest.approx(residuals[i], abs=1e-6)
    assert len(model.lambdas) == len(BLOCKS)
    fitted = model.log_cost(known[rows], features)
    F = np.column_stack([np.ones(len(y)), Z])
    beta = np.linalg.solve(F.T @ F + np.diag(np.concatenate([[1e-4], penalty])), F.T @ y)
    np.testing.assert_allclose(fitted, F @ beta, atol=1e-6)


def test_too_few_rows_leave_the_ridge_out():
    choices, known, latency = two_family_table(2)
    rows = np.arange(EMBED_MIN_POINTS - 1)
    model = AdaptedModel.fit("latency_newbox", ["a", "b"], known[rows],
                             op_components(choices[rows], SPACE), latency[rows],
                             choices=choices[rows], space=SPACE)
    assert model.embed is None and model.embed_blend == 0.0
    assert model.design_inputs(choices[:3], SPACE)["features"] is None


def test_arch_features_name_each_block():
    """Analytic columns (the proxies and the op totals), one count per operation (the five
    NAS-Bench-201 operations, shared by the six edges) and one per (edge, operation)."""
    choices = SPACE.choices_from_index([0, 1, 15624])
    features, block = arch_features(SPACE, choices)
    n_analytic = len(analytic_proxies(SPACE, choices)) + op_components(choices, SPACE).shape[1]
    assert np.bincount(block).tolist() == [0, n_analytic, 5, 30]
    per_op = features[:, block == 2]
    np.testing.assert_array_equal(per_op.sum(1), [6, 6, 6])
    units = SPACE.cost_units(choices)
    np.testing.assert_array_equal(per_op[2], np.bincount(units.units[2], minlength=5))


def test_anb_adapt_at_20_on_the_help_nasbench201_base(tmp_path):
    """``anb adapt --base help-nasbench201`` at n = 20 (a stand-in device: the geometric mean
    of HELP's Eyeriss and Pixel 2 latencies, a column the base does not have): the folder holds
    the architecture-aware ridge (format 4) and predicts what the fitted model does."""
    from anb.cli import app
    from anb.formats import current
    from anb.resources import HELP_DIR
    from anb.surrogates import help_tables as ht
    from anb.surrogates.adapt.api import adapt

    table = ht.read_table(HELP_DIR, "nasbench201")
    rng = np.random.default_rng(0)
    rows = rng.choice(len(table), 60, replace=False)
    seen, held = rows[:20], rows[20:]
    truth = np.sqrt(table["eyeriss"] * table["pixel2"]).to_numpy()
    csv = tmp_path / "m.csv"
    pd.DataFrame({"arch": table["arch"].to_numpy()[seen],
                  "latency_newboard": truth[seen]}).to_csv(csv, index=False)
    result = CliRunner().invoke(app, ["adapt", "--device", "newboard", "--base",
                                      "help-nasbench201", "--measured", str(csv),
                                      "--out", str(tmp_path / "adapted")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "adapted" / "manifest.json").read_text())
    assert manifest["format_version"] == current("adapted") == 4
    scalars = manifest["targets"]["latency_newboard"]
    assert scalars["embed_intercept"] is not None
    fitted = adapt("newboard", csv, "help-nasbench201")[1]
    assert fitted.embed is not None and scalars["embed_blend"] == fitted.embed_blend
    adapted = anb.load(tmp_path / "adapted")
    archs = list(table["arch"].to_numpy()[held])
    frame = adapted.query(archs, "latency_newboard")
    choices = SPACE.to_choices(archs)
    mean = adapted.predict_adapted(choices, "latency_newboard")[0]
    np.testing.assert_allclose(frame["latency_newboard"], np.exp(mean))
    model = adapted.models["latency_newboard"]
    np.testing.assert_array_equal(model.embed.coef, fitted.embed.coef)
    assert spearmanr(frame["latency_newboard"], truth[held])[0] > 0.8
