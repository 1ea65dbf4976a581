"""A surrogate for a new device from a few measured architectures (transfer from known devices).

A new device's cost is modelled twice from what anb already knows (the known devices' predicted
costs, by default their additive per-layer cost models, see :class:`BenchmarkKnown`), and the
two are blended in log space with the weight (0, 1/4, 1/2, 3/4 or 1) of lowest leave-one-out
error on the measured points (validation split, n = 20: mean tau 0.937 vs 0.936 for a fixed
1/2; latency_zcu102 0.966 vs 0.954):

- *ridge*: its log cost is a ridge regression on the known devices' predicted log costs
  (``-log throughput``, ``log latency``), shrinkage chosen by generalised cross-validation;
- *additive*: its time per image is a non-negative combination of the known devices' predicted
  times and the exact analytic per-operation costs (expand / depthwise 3x3 / depthwise 5x5 /
  squeeze-excite / project MACs, feature-map traffic, layer and SE-layer counts), fitted by
  non-negative least squares on relative error: a handful of parameters with physical signs.

Given the measured architectures themselves (``choices``), a third model joins the blend:

- *own*: the device's own additive per-layer cost model (:class:`LayerCostModel`) fitted on the
  measured rows alone, each layer's time backing off to per-operation speeds shared by all
  layers, so that a few rows fix a handful of speeds and more rows the per-layer detail. It
  owes nothing to the known devices: where none of them is a stand-in for the new one (an
  FPGA or a TPU whose whole board is new), it is what lifts the blend above the transfer
  ceiling as measurements come in (``benchmarks/new_device.py --protocol board``). On a new
  board with an analytic prior it joins from 10 rows: the prior's parts calibrated alone
  (:mod:`anb.surrogates.adapt.board_model`), from 20 rows anchored on them
  (:mod:`anb.surrogates.adapt.anchored`).

From :data:`EMBED_MIN_POINTS` measured rows a fourth part joins the blend:

- *embed*: a ridge regression on what anb knows of the architecture as well as of the known
  devices (their log costs, analytic MACs / parameters / traffic / layers, per-operation and
  per-(slot, unit) counts; :mod:`anb.surrogates.adapt.embed`), each block's shrinkage chosen
  by leave-one-out error: it carries across device families, where the other parts can only
  mix the known devices.

Never worse than simple: given ``choices``, the best single analytic proxy of the device's cost
(MACs, parameters, activation traffic or layer count, a log-log line fitted on the measured rows,
:mod:`anb.surrogates.adapt.proxy`) competes with the transfer blend on the same out-of-fold
error, and the one with the lower error predicts; its error is the std, and ``proxy`` says which
won (the ridge on the known devices alone is the blend weight 1 of the ridge). From
:data:`RANK_MIN_POINTS` rows (below :data:`OWN_MIN_POINTS`) every blend weighting and proxy
competes instead on how well its held-out predictions order the measured rows
(:func:`~anb.surrogates.adapt.choice.rank_choice`): squared error does not order the
candidates by rank where they differ, and the additive transfer is held unless that choice
beats it clearly (:data:`HOLD_SE`, :mod:`anb.surrogates.adapt.hold`). Below
:data:`RANK_MIN_POINTS` rows the pick predicts only where its squared error is under
:data:`FALLBACK_RATIO` times the additive model's. The std's error scores the whole choice
out of fold (each row under the weights or proxy chosen
without it: :mod:`anb.surrogates.adapt.choice`), as the winner's own error is optimistic. Below
:data:`CHOICE_MIN_POINTS` measured rows no choice is made: the additive model alone predicts,
as a leave-one-out choice among candidates on 5 rows is noise.

It joins from :data:`OWN_MIN_POINTS` measured rows. The blend weights (multiples of 1/4 summing
to 1) are those of lowest leave-one-out error (the own model: :data:`OWN_FOLDS`-fold beyond
that many rows). The std is that error combined with the disagreement of the models (their
spread about the blend, weighted by it), times a factor chosen on the validation split of the
leave-one-device-out benchmark (``benchmarks/new_device.py``), the small-sample widening of
:func:`small_sample_factor` (an error estimated from n rows) and the choice's regime
(:func:`choice_std_factor`); below :data:`OWN_MIN_POINTS` rows the error is the one
:func:`~anb.surrogates.adapt.interval.std_error` picks for that regime (at 5 rows shrunk
towards the spread of the measured costs). Architectures whose known-device
costs lie outside the measured range carry an ``ood`` flag and a wider std.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from anb import resources
from anb.formats import VERSION_FIELD, check, stamp
from anb.io import atomic_write_json, sha256_file
from anb.outputs import Kind, has_manifest_format, replace_folder
from anb.records import PERF_KINDS, is_perf_metric
from anb.searchspace.base import Space
from anb.surrogates.adapt import anchored
from anb.surrogates.adapt.board_prior import device_of, prior_components
from anb.surrogates.adapt.choice import Choice, ChoiceRule, choose
from anb.surrogates.adapt.embed import EmbedModel, arch_features
from anb.surrogates.adapt.interval import std_error
from anb.surrogates.adapt.proxy import fit_line, log_proxies, log_proxy
from anb.surrogates.adapt.proxy import loo_residuals as proxy_loo_residuals
from anb.surrogates.intervals import LEVEL, z_value
from anb.surrogates.layer_cost import LayerCostModel
from anb.version import __version__

FORMAT = "anb-adapted-surrogate"
#: The output folder ``anb adapt`` writes (see :mod:`anb.outputs`).
OUTPUT = Kind("adapted", "an anb adapted surrogate", has_manifest_format(FORMAT),
              replaceable=True)
MANIFEST = "manifest.json"
WEIGHTS_FILE = "adapted.npz"
#: Fewest measured architectures an adapted surrogate accepts.
MIN_POINTS = 5
#: std multiplier, chosen for 90 % coverage on the validation split (see benchmarks/new_device.py;
#: with the blend-weighted disagreement, both protocols, n = 10 / 20 / 50: 73 of 96 device cells
#: within 0.85-0.95 at 1.0, 68 at 1.1)
STD_FACTOR = 1.0
_ALPHAS = np.logspace(-4, 2, 13)
#: Weights of the ridge model in the average; with SELECT_BLEND the one with the lowest
#: leave-one-out error on the measured points is used, else 0.5.
BLENDS = (0.0, 0.25, 0.5, 0.75, 1.0)
SELECT_BLEND = True
#: The own model's out-of-fold errors come from this many folds (leave-one-out up to this many
#: measured rows; a fit takes about 12 ms at n = 20).
OWN_FOLDS = 20
#: Fewest measured rows the own model joins the blend from. Below it the leave-one-out choice
#: among 15 weightings is noise: on the validation splits at n = 20, the whole-board protocol
#: of benchmarks/new_device.py moved -0.001 / +0.001 (random / active picks) and HELP's
#: meta-valid devices lost 0.013 (NAS-Bench-201) and 0.018 (FBNet) Kendall tau; from n = 50 the
#: whole-board mean tau gains 0.009 (50), 0.022 (100) and 0.030 (200).
OWN_MIN_POINTS = 50
#: Fewest measured rows the architecture-aware ridge (:mod:`anb.surrogates.adapt.embed`) joins
#: the blend from. Chosen on the family_valid split of benchmarks/help_transfer.py (Titan X
#: unseen, phones and CPUs known): at n = 5 it lost (mean Spearman NAS-Bench-201 0.856 vs
#: 0.876 without it, FBNet 0.573 vs 0.620), at n = 10 it gained (0.949 vs 0.932, 0.832 vs
#: 0.772); at n = 20 over family_valid and valid (meta-train known, meta-valid unseen) its
#: full weight grid averaged 0.941 vs 0.926 without it and 0.939 with its weight capped at 1/2.
EMBED_MIN_POINTS = 10
#: Fewest measured rows the out-of-fold choices are made from (the blend weights, the proxy
#: against the transfer); below it the additive model alone predicts. At n = 5 a
#: leave-one-out choice among candidates is noise: on the settings splits of
#: benchmarks/help_transfer.py (valid, lomo, family_valid; 32 device cells per n, one draw
#: at n = 5) the additive model alone ranked at mean Spearman 0.852 with 5 cells more than
#: 0.02 below the best simple candidate (the best proxy, the ridge on the known devices),
#: against 0.844 and 6 for the leave-one-out blend and 0.816 and 8 with the proxy also
#: competing (what anb did); from n = 10 the choice helps (docs/decisions/help-transfer.md).
CHOICE_MIN_POINTS = 10
#: Fewest measured rows from which the choice compares rank agreement instead of squared
#: error (:func:`~anb.surrogates.adapt.choice.rank_choice`): every blend weighting and every
#: analytic proxy competes on the Spearman correlation of its held-out predictions with the
#: measurements, the least squared error among those within :data:`RANK_MARGIN` of the best
#: winning. Chosen on the settings splits of benchmarks/help_transfer.py (valid, lomo,
#: family_valid; 32 device cells, 5 draws at n = 20): at n = 20 mean Spearman 0.926 with no
#: cell more than 0.02 below the best simple candidate, against 0.922 and 2 cells for squared
#: error alone; at n = 10 a rank choice lost (0.898 and 4 cells against 0.907 and 3), so below
#: 20 rows squared error chooses. From :data:`OWN_MIN_POINTS` rows, where the own model's
#: joining was chosen on squared error and the rank choice was not compared, it chooses again.
RANK_MIN_POINTS = 20
#: Rank agreement within which the least squared error wins. Settings splits at n = 20:
#: margins 0 and 0.005 give mean Spearman 0.926 (no cell broken), 0.01 0.925, 0.02 0.923
#: (2 cells); the released dataset's latency_zcu102 (validation rows, 8 draws of 20 training
#: rows, the test fixture's base) broke the tie: mean tau 0.914 at 0.005 vs 0.914 at 0 (0.9141
#: vs 0.9138) and 0.912 for squared error alone, coverage 0.915 / 0.920 / 0.925. Ranking the
#: simplest candidate (proxy, ridge, additive, mix) first within the margin instead tied on
#: the settings splits but made the std of well-ranked devices (throughput_a100) up to 3.6
#: times the least error, as the choice without a row jumped to a simpler, worse-fitting part.
RANK_MARGIN = 0.005
#: From :data:`RANK_MIN_POINTS` rows (below :data:`OWN_MIN_POINTS`) the additive transfer
#: predicts unless the candidate the rank choice picks lowers the rows' squared out-of-fold
#: error by more than this many standard errors of the per-row difference
#: (:func:`~anb.surrogates.adapt.hold.held`; the std scores that held choice out of
#: fold): among some 40 candidates on 20 rows the rank choice alone picks, by chance, one
#: that fits the rows and ranks the device worse. Chosen on the settings splits of
#: benchmarks/help_transfer.py (valid, lomo, family_valid, both spaces; 32 device cells, 5
#: draws at n = 20): mean Spearman 0.926 for the rank choice alone, 0.929 / 0.931 / 0.929 /
#: 0.910 held at 1 / 1.5 / 2 / 3, no cell more than 0.02 below the best simple candidate up
#: to 2 (one at 3: family_valid FBNet, where the architecture-aware ridge must win: 0.905
#: alone, 0.905 / 0.905 / 0.884 / 0.698 held); holding the half ridge, half additive blend
#: instead 0.927 / 0.928 / 0.927 / 0.923. Below 20 rows (squared-error choice) it is not
#: applied: at n = 10 it gained on average (0.907 to 0.913 at 1.5, 3 cells broken either
#: way) but lost on a cross-family split (family_valid NAS-Bench-201 0.949 to 0.931).
HOLD_SE = 1.5

#: A pick of the out-of-fold choice (a richer blend or a proxy) below OWN_MIN_POINTS rows
#: predicts only where its squared out-of-fold error is under this share of the additive
#: transfer's: the richer blends' errors are optimistic (the embedding ridge's shrinkage
#: and the weights are chosen on the same rows), and where they win narrowly the additive
#: transfer ranks better. Chosen with benchmarks/adapt_calibration.py on the settings
#: splits (valid, lomo, family_valid; 32 device cells, 4 draws): see CHOICE_RULE.
FALLBACK_RATIO = 0.8
#: The out-of-fold choice (:class:`~anb.surrogates.adapt.choice.ChoiceRule`).
CHOICE_RULE = ChoiceRule(CHOICE_MIN_POINTS, RANK_MIN_POINTS, OWN_MIN_POINTS, RANK_MARGIN,
                         FALLBACK_RATIO, HOLD_SE)
#: The std's multiplier of the small-sample t factor by the regime of the choice: no choice
#: (below CHOICE_MIN_POINTS rows), squared error, rank agreement (up to OWN_MIN_POINTS; from
#: there 1: STD_FACTOR was chosen there), of the error
#: :func:`~anb.surrogates.adapt.interval.std_error` picks for that regime. Chosen with
#: benchmarks/adapt_calibration.py on the settings splits at n = 5 / 10 / 20 (32 device
#: cells, 4 draws each: HELP's rows, then rows drawn from the pool): among the multipliers
#: whose mean 90 % coverage lies in 0.85-0.95, the one with most fits inside that band
#: (0.29 / 0.27 / 0.31 of the fits, 0.15 / 0.25 / 0.31 before the error per regime, at 0.65 /
#: 1.15 / 1.05); most single devices still lie outside 0.85-0.95
#: (docs/decisions/help-transfer.md).
CHOICE_STD_FACTORS = (0.50, 0.85, 1.05)

class KnownDevices(Protocol):
    """Predicted log costs of the devices a surrogate already knows."""

    targets: list[str]

    def log_costs(self, choices: np.ndarray) -> np.ndarray:
        """``(n, len(targets))`` predicted ``-log throughput`` / ``log latency``."""


def log_cost(target: str, values: np.ndarray) -> np.ndarray:
    """``-log(throughput)`` or ``log(latency)``: larger is slower for both kinds."""
    return _log_cost_sign(target) * np.log(np.asarray(values, dtype=np.float64))


def op_components(choices: np.ndarray, space: Space) -> np.ndarray:
    """Exact per-operation totals of each architecture (``space.operation_costs``)."""
    return space.operation_costs(np.asarray(choices, dtype=np.int64))[0]


@dataclass
class AdaptedModel:
    """Fitted transfer model of one new device target (plain arrays; saved as ``.npz``)."""

    target: str
    known: list[str]
    ridge_coef: np.ndarray
    ridge_intercept: float
    ridge_alpha: float
    nnls_weights: np.ndarray
    known_scale: np.ndarray
    op_scale: np.ndarray
    level: float
    loo_rmse: float
    lo: np.ndarray
    hi: np.ndarray
    n_points: int
    std_factor: float = STD_FACTOR
    known_source: str = "layer_cost"
    #: weight of the ridge model; ``own_blend`` that of the own model, the rest the additive's
    blend: float = 0.5
    own_blend: float = 0.0
    #: the own model's collapsed per-(slot, unit) weights plus bias (empty: no own model) and
    #: its cost floor (:class:`LayerCostModel`'s ``weights_`` and ``floors_`` row)
    own_weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    own_floor: float = 0.0
    #: the analytic proxy that won the out-of-fold choice over the transfer ("": the transfer
    #: won, or no ``choices`` were given), its log-log line ``(intercept, slope)`` and the range
    #: of its log over the measured rows
    proxy: str = ""
    proxy_coef: np.ndarray = field(default_factory=lambda: np.zeros(2))
    proxy_range: np.ndarray = field(default_factory=lambda: np.zeros(2))
    #: the out-of-fold RMSE of the transfer blend that predicts (the least where a proxy
    #: won) and of the proxy of least such error (nan where not compared). ``loo_rmse``, the
    #: std's error, is the whole choice scored out of fold
    #: (:func:`~anb.surrogates.adapt.choice.choose`: each row under the blend weights /
    #: proxy chosen without it), at least the winner's RMSE up to rounding
    transfer_rmse: float = float("nan")
    proxy_rmse: float = float("nan")
    #: the board whose analytic prior (:mod:`anb.surrogates.adapt.board_prior`) extends the
    #: additive model's components ("": none; they follow ``ops`` in ``op_scale``)
    board_prior: str = ""
    #: the architecture-aware ridge (:mod:`anb.surrogates.adapt.embed`; None: not fitted,
    #: ``choices`` not given or an artifact of format 3) and its weight in the blend
    embed: EmbedModel | None = None
    embed_blend: float = 0.0

    # ---------------------------------------------------------------- fitting
    @classmethod
    def fit(cls, target: str, known: Sequence[str], known_log: np.ndarray, ops: np.ndarray,
            values: np.ndarray, op_scale: np.ndarray | None = None,
            known_scale: np.ndarray | None = None, std_factor: float = STD_FACTOR,
            known_source: str = "layer_cost", select_blend: bool = SELECT_BLEND,
            leave_one_out: bool = True, choices: np.ndarray | None = None,
            *, space: Space) -> AdaptedModel:
        """Fit on ``n`` measured rows: known-device log costs ``(n, m)``, op totals, values;
        with the rows' ``choices`` (of ``space``) also the own per-layer model, from
        :data:`OWN_MIN_POINTS` rows, and the best analytic proxy, which replaces the transfer
        where its leave-one-out error is lower (from :data:`RANK_MIN_POINTS` rows: every proxy
        and blend weighting competes on the rank agreement of its held-out predictions).

        The blend weights and ``loo_rmse`` come from the leave-one-out errors (O(n^2));
        ``leave_one_out=False`` uses the in-sample errors instead, for fits on thousands of
        rows (the transfer ceiling of ``benchmarks/new_device.py``, without ``choices``)."""
        check_target(target)
        values = np.asarray(values, dtype=np.float64)
        if len(values) < MIN_POINTS:
            raise ValueError(f"need at least {MIN_POINTS} measured architectures to adapt "
                             f"{target!r}, got {len(values)}")
        if not np.all(np.isfinite(values)) or np.any(values <= 0):
            bad = values[~(np.isfinite(values) & (values > 0))][0]
            raise ValueError(f"measured {target} values must be positive numbers, got {bad!r}")
        y = log_cost(target, values)
        prior = None if choices is None else prior_components(target, choices, space)
        if prior is not None:
            ops = np.concatenate([ops, prior], axis=1)
        known_scale = np.median(np.exp(known_log), 0) if known_scale is None else known_scale
        op_scale = np.median(ops, 0) + 1.0 if op_scale is None else op_scale
        alpha = _gcv_alpha(known_log, y)
        coef, intercept = _ridge(known_log, y, alpha)
        level = float(np.median(y))
        weights = _nnls(_basis(known_log, ops, known_scale, op_scale), np.exp(y - level))
        if leave_one_out:
            residuals = loo_residuals(known_log, ops, y, alpha, known_scale, op_scale, level)
        else:
            residuals = np.stack([known_log @ coef + intercept - y,
                                  _additive(known_log, ops, known_scale, op_scale, weights,
                                            level) - y], axis=1)
        if choices is not None and not leave_one_out:
            raise ValueError("the own per-layer model needs out-of-fold errors: "
                             "leave_one_out=False takes no choices")
        own_weights, own_floor, own_residuals = np.zeros(0), 0.0, np.zeros(len(y))
        new_board = all(device_of(k) != device_of(target) for k in known)
        anchored_fit = anchored.fit(target, choices, values, space) \
            if choices is not None and new_board and len(values) >= anchored.MIN_POINTS \
            else None
        if anchored_fit is not None:  # a new board with an analytic prior: its own model on it
            own_weights, own_floor, own_residuals = anchored_fit
        elif choices is not None and len(values) >= OWN_MIN_POINTS:
            own = _fit_own(target, choices, values, space)
            own_weights, own_floor = own.weights_[0], float(own.floors_[0])
            own_residuals = _own_residuals(target, choices, values, y, space)
        embed, embed_residuals = None, np.zeros(len(y))
        if choices is not None and len(y) >= EMBED_MIN_POINTS:
            features, block = arch_features(space, choices)
            embed, embed_residuals = EmbedModel.fit(known_log, features, block, y)
        residuals = np.column_stack([residuals, own_residuals, embed_residuals])
        grid = (_blend_grid(len(own_weights) > 0, embed is not None) if select_blend
                else [(0.5, 0.0, 0.0)])
        blended = np.column_stack([residuals @ [r, 1 - r - o - e, o, e] for r, o, e in grid])
        errors = np.sqrt(np.mean(blended**2, axis=0))
        logs = log_proxies(space, choices) if choices is not None else {}
        proxies = np.column_stack([proxy_loo_residuals(x, y) for x in logs.values()]
                                  ) if logs else np.zeros((len(y), 0))
        if leave_one_out:  # the std: the out-of-fold error of the choice itself
            picked = choose(blended, proxies, y, _fallback(grid), CHOICE_RULE)
        else:  # in-sample errors, no proxies: the winner's
            picked = Choice(int(np.argmin(errors)), float(errors.min()))
        proxy, proxy_coef, proxy_range = "", np.zeros(2), np.zeros(2)
        if picked.column < len(grid):
            blend, own_blend, embed_blend = grid[picked.column]
            transfer_rmse = float(errors[picked.column])
        else:
            blend, own_blend, embed_blend = grid[int(np.argmin(errors))]
            transfer_rmse = float(errors.min())
            proxy = list(logs)[picked.column - len(grid)]
            x = logs[proxy]
            proxy_coef, proxy_range = fit_line(x, y), np.array([x.min(), x.max()])
        proxy_rmse = float(np.sqrt(np.min(np.mean(proxies**2, axis=0)))) if logs else float("nan")
        std_rmse = picked.rmse
        if leave_one_out:
            std_factor = std_factor * small_sample_factor(len(y)) * choice_std_factor(len(y))
            if std_rmse > 0:  # the error the std scales, by regime (adapt.interval)
                std_factor *= std_error(std_rmse, float(errors[_fallback(grid)]), y,
                                        CHOICE_RULE) / std_rmse
        return cls(target, list(known), coef, float(intercept), float(alpha), weights,
                   np.asarray(known_scale, dtype=np.float64), np.asarray(op_scale, np.float64),
                   level, std_rmse, known_log.min(0),
                   known_log.max(0), len(y), std_factor, known_source, blend, own_blend,
                   own_weights, own_floor, proxy, proxy_coef, proxy_range,
                   float(transfer_rmse) if choices is not None else float("nan"), proxy_rmse,
                   device_of(target) if prior is not None else "", embed, embed_blend)

    # ---------------------------------------------------------------- prediction
    @property
    def has_own(self) -> bool:
        """Whether the own per-layer model is part of this model (fitted with ``choices``)."""
        return len(self.own_weights) > 0

    def own_log_cost(self, choices: np.ndarray, space: Space) -> np.ndarray | None:
        """The own per-layer model's log cost of ``choices`` (what :meth:`predict_log_cost`
        takes as ``own``); None without one."""
        if not self.has_own:
            return None
        model = LayerCostModel.of_weights([self.target], self.own_weights[None, :],
                                          np.array([self.own_floor]), space)
        return _log_cost_sign(self.target) * model.transform(choices)[:, 0]

    def proxy_log(self, choices: np.ndarray, space: Space) -> np.ndarray | None:
        """The log of the winning proxy of ``choices`` (what :meth:`predict_log_cost` takes as
        ``proxy``); None where the transfer won."""
        return log_proxy(space, choices, self.proxy) if self.proxy else None

    def prior_parts(self, choices: np.ndarray, space: Space) -> np.ndarray | None:
        """The board prior's components of ``choices`` (what :meth:`predict_log_cost` takes
        as ``prior``); None without a prior."""
        return prior_components(self.target, choices, space) if self.board_prior else None

    def design_inputs(self, choices: np.ndarray, space: Space
                      ) -> dict[str, np.ndarray | None]:
        """What :meth:`predict_log_cost` needs of the architectures themselves (``own``,
        ``proxy``, ``prior``, ``features``):
        ``model.predict_log_cost(K, ops, **model.design_inputs(choices, space))``."""
        features = arch_features(space, choices)[0] if self.embed_blend > 0 else None
        return {"own": self.own_log_cost(choices, space), "proxy": self.proxy_log(choices, space),
                "prior": self.prior_parts(choices, space), "features": features}

    def predict_log_cost(self, known_log: np.ndarray, ops: np.ndarray,
                         own: np.ndarray | None = None, proxy: np.ndarray | None = None,
                         prior: np.ndarray | None = None, features: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mean and std of the log cost, and the out-of-range flag, per row (``own``: the rows'
        :meth:`own_log_cost`, needed when the model has one; ``proxy``: their
        :meth:`proxy_log`, needed when a proxy won; ``prior``: their :meth:`prior_parts`,
        needed when the model has a board prior; ``features``: their
        :func:`~anb.surrogates.adapt.embed.arch_features`, needed when the embedding ridge is
        in the blend). The std widens by the parts' spread about the mean, each weighted as in
        the blend; a proxy's by how far the rows lie beyond the measured range of the proxy."""
        if self.proxy:
            if proxy is None:
                raise ValueError(f"adapted target {self.target!r} predicts from its "
                                 f"{self.proxy!r} proxy: pass proxy_log(choices)")
            lo, hi = self.proxy_range
            excess = np.maximum(np.maximum(lo - proxy, proxy - hi) / max(hi - lo, 1e-9), 0)
            std = self.std_factor * self.loo_rmse * (1.0 + excess)
            return self.proxy_coef[0] + self.proxy_coef[1] * proxy, std, excess > 0.1
        if self.board_prior:
            if prior is None:
                raise ValueError(f"adapted target {self.target!r} needs its board prior's "
                                 "components (prior_parts)")
            ops = np.concatenate([ops, prior], axis=1)
        ridge = known_log @ self.ridge_coef + self.ridge_intercept
        additive = _additive(known_log, ops, self.known_scale, self.op_scale,
                             self.nnls_weights, self.level)
        parts = [ridge, additive]
        weights = [self.blend, 1 - self.blend - self.own_blend - self.embed_blend]
        if self.has_own:
            if own is None:
                raise ValueError(f"adapted target {self.target!r} needs the own model's log "
                                 "costs (own_log_cost)")
            parts.append(own)
            weights.append(self.own_blend)
        if self.embed is not None and self.embed_blend > 0:
            if features is None:
                raise ValueError(f"adapted target {self.target!r} needs the architectures' "
                                 "features (adapt.embed.arch_features)")
            parts.append(self.embed.log_cost(known_log, features))
            weights.append(self.embed_blend)
        stacked, w = np.stack(parts, axis=1), np.array(weights)
        mean = stacked @ w
        spread = np.sqrt(((stacked - mean[:, None]) ** 2) @ w)
        span = np.maximum(self.hi - self.lo, 1e-9)
        excess = np.maximum(np.maximum(self.lo - known_log, known_log - self.hi) / span, 0).max(1)
        std = self.std_factor * np.sqrt(self.loo_rmse**2 + spread**2)
        return mean, std * (1.0 + excess), excess > 0.1

    def predict(self, known_log: np.ndarray, ops: np.ndarray, own: np.ndarray | None = None,
                proxy: np.ndarray | None = None, prior: np.ndarray | None = None,
                features: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mean and std in the target's model space (``log`` of its value), and the flag."""
        mean, std, ood = self.predict_log_cost(known_log, ops, own, proxy, prior, features)
        return _log_cost_sign(self.target) * mean, std, ood

    # ---------------------------------------------------------------- persistence
    def arrays(self) -> dict[str, np.ndarray]:
        return {"ridge_coef": self.ridge_coef, "nnls_weights": self.nnls_weights,
                "known_scale": self.known_scale, "op_scale": self.op_scale, "lo": self.lo,
                "hi": self.hi, "own_weights": self.own_weights, "proxy_coef": self.proxy_coef,
                "proxy_range": self.proxy_range,
                **(self.embed.arrays() if self.embed is not None else {})}

    def scalars(self) -> dict[str, Any]:
        return {"target": self.target, "known": self.known,
                "ridge_intercept": self.ridge_intercept, "ridge_alpha": self.ridge_alpha,
                "level": self.level, "loo_rmse": self.loo_rmse, "n_points": self.n_points,
                "std_factor": self.std_factor, "known_source": self.known_source,
                "blend": self.blend, "own_blend": self.own_blend, "own_floor": self.own_floor,
                "proxy": self.proxy, "transfer_rmse": _json_float(self.transfer_rmse),
                "proxy_rmse": _json_float(self.proxy_rmse), "board_prior": self.board_prior,
                "embed_blend": self.embed_blend,
                "embed_intercept": self.embed.intercept if self.embed is not None else None}


def device_metrics(target: str) -> list[str]:
    """Every metric of ``target``'s device (``throughput_zcu102`` -> both zcu102 metrics): what
    adapting ``target`` hides from the known devices, so that a sibling metric of the same board
    never stands in for the board being adapted."""
    check_target(target)
    device = target.partition("_")[2]
    return [f"{kind}_{device}" for kind in PERF_KINDS]


def check_target(target: str) -> None:
    kind, _, device = target.partition("_")
    if kind not in PERF_KINDS or not device:
        raise ValueError(f"target {target!r} is not a device metric; allowed: "
                         f"'throughput_<device>' or 'latency_<device>'")


def small_sample_factor(n_points: int) -> float:
    """How much wider Student's t quantile with ``n_points - 1`` degrees of freedom bounds
    the default central interval (:data:`~anb.surrogates.intervals.LEVEL`) than the normal
    one: the std is a leave-one-out error estimated from ``n_points`` rows (1.30 at 5 rows,
    1.11 at 10, 1.05 at 20, 1.02 at 50). Settings splits of benchmarks/help_transfer.py
    (valid, lomo, family_valid; 32 device cells per n): device cells below 0.85 coverage at
    n = 5 from 9 to 5 (mean 0.89 to 0.93); at n = 10 and 20 unchanged (9 and 13), mean 0.83
    to 0.86 and 0.86 to 0.87."""
    from scipy.stats import t  # fitting only

    return float(t.ppf(0.5 + LEVEL / 2, max(n_points - 1, 1)) / z_value(LEVEL))


def choice_std_factor(n_points: int) -> float:
    """The multiplier of :func:`small_sample_factor` for a fit on ``n_points`` rows: one of
    :data:`CHOICE_STD_FACTORS` by the regime of the out-of-fold choice (:data:`CHOICE_RULE`),
    1 from :data:`OWN_MIN_POINTS` rows."""
    no_choice, squared_error, rank = CHOICE_STD_FACTORS
    if n_points < CHOICE_RULE.choice_min:
        return no_choice
    if n_points < CHOICE_RULE.rank_from:
        return squared_error
    return rank if n_points < CHOICE_RULE.rank_below else 1.0


def _log_cost_sign(target: str) -> float:
    """-1 for throughput (log cost is ``-log throughput``), 1 for latency."""
    return -1.0 if target.startswith("throughput_") else 1.0


def _blend_grid(own: bool, embed: bool = False) -> list[tuple[float, float, float]]:
    """The (ridge, own, embedding) weights tried, the additive model taking the rest:
    quarters summing to at most 1 (a part not fitted weighs 0)."""
    owns = BLENDS if own else (0.0,)
    embeds = BLENDS if embed else (0.0,)
    return [(r, o, e) for e in embeds for o in owns for r in BLENDS if r + o + e <= 1.0 + 1e-9]


def _fallback(grid: list[tuple[float, float, float]]) -> int:
    """The column of ``grid`` that predicts without a choice: the additive model alone (the
    only column where blend selection is off)."""
    return grid.index((0.0, 0.0, 0.0)) if (0.0, 0.0, 0.0) in grid else 0


def _fit_own(target: str, choices: np.ndarray, values: np.ndarray, space: Space
             ) -> LayerCostModel:
    """The device's own additive per-layer cost model on the measured rows (back-off
    shrinkage as the packaged fit's; untrimmed: trimming never acts on fewer rows than twice
    the back-off's parameters)."""
    return LayerCostModel().fit(np.asarray(choices, dtype=np.int64),
                                {target: (values, np.ones(len(values), dtype=bool))}, space)


def _own_residuals(target: str, choices: np.ndarray, values: np.ndarray, y: np.ndarray,
                   space: Space) -> np.ndarray:
    """Out-of-fold log-cost errors of the own model (:data:`OWN_FOLDS` folds, row ``i`` in
    fold ``i mod OWN_FOLDS``: leave-one-out up to that many rows)."""
    fold = np.arange(len(y)) % OWN_FOLDS
    out = np.empty(len(y))
    for k in np.unique(fold):
        held = fold == k
        model = _fit_own(target, choices[~held], values[~held], space)
        out[held] = _log_cost_sign(target) * model.transform(choices[held])[:, 0] \
            - y[held]
    return out


def _basis(known_log: np.ndarray, ops: np.ndarray, known_scale: np.ndarray,
           op_scale: np.ndarray) -> np.ndarray:
    """Non-negative cost components: known devices' times and the analytic op totals."""
    return np.concatenate([np.exp(known_log) / known_scale, ops / op_scale,
                           np.ones((len(ops), 1))], axis=1)


def loo_residuals(known_log: np.ndarray, ops: np.ndarray, y: np.ndarray, alpha: float,
                  known_scale: np.ndarray, op_scale: np.ndarray, level: float) -> np.ndarray:
    """``(n, 2)`` leave-one-out errors of the ridge and additive parts on log costs ``y``
    (each refitted without its row, with the full fit's shrinkage, scales and level)."""
    out = np.empty((len(y), 2))
    for i in range(len(y)):
        rest = np.arange(len(y)) != i
        c, b = _ridge(known_log[rest], y[rest], alpha)
        w = _nnls(_basis(known_log[rest], ops[rest], known_scale, op_scale),
                  np.exp(y[rest] - level))
        out[i] = (known_log[i] @ c + b - y[i],
                  _additive(known_log[i:i + 1], ops[i:i + 1], known_scale, op_scale, w,
                            level)[0] - y[i])
    return out


def _additive(known_log: np.ndarray, ops: np.ndarray, known_scale: np.ndarray,
              op_scale: np.ndarray, weights: np.ndarray, level: float) -> np.ndarray:
    """The additive model's log cost: ``level`` plus the log of the weighted components."""
    return level + np.log(np.maximum(_basis(known_log, ops, known_scale, op_scale) @ weights,
                                     1e-12))


def _nnls(basis: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Non-negative weights minimising the relative error ``sum((basis @ w / cost - 1)^2)``."""
    from scipy.optimize import nnls  # fitting only: loading an adapted benchmark skips it

    return nnls(basis / cost[:, None], np.ones(len(cost)), maxiter=50 * basis.shape[1])[0]


def _ridge(X: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    mu_x, mu_y = X.mean(0), y.mean()
    Xc = X - mu_x
    coef = np.linalg.solve(Xc.T @ Xc + alpha * np.eye(X.shape[1]), Xc.T @ (y - mu_y))
    return coef, float(mu_y - mu_x @ coef)


def _gcv_alpha(X: np.ndarray, y: np.ndarray) -> float:
    """Ridge shrinkage with the lowest generalised cross-validation error."""
    Xc, yc = X - X.mean(0), y - y.mean()
    u, s, _ = np.linalg.svd(Xc, full_matrices=False)
    uty = u.T @ yc
    best, best_err = _ALPHAS[0], np.inf
    for alpha in _ALPHAS:
        shrink = s**2 / (s**2 + alpha)
        fitted = u @ (shrink * uty)
        dof = len(y) - 1 - shrink.sum()
        err = np.sum((yc - fitted) ** 2) / max(dof, 1e-9) ** 2
        if err < best_err:
            best, best_err = alpha, err
    return float(best)


# -------------------------------------------------------------------- known devices
class BenchmarkKnown:
    """Known devices of a fitted :class:`~anb.surrogates.SurrogateBenchmark`.

    ``source="layer_cost"`` (used when the benchmark has a layer-cost model): the known
    devices' additive per-layer cost predictions (compute-bound: saturation trimmed, and
    without the floor of a saturating base), which
    transfer better than the full surrogates' predictions (validation split of
    ``benchmarks/new_device.py``, n = 20: mean tau 0.938 vs 0.934); ``"surrogate"``: the
    surrogates' predicted means.
    """

    def __init__(self, bench: Any, exclude: Sequence[str] = (), source: str | None = None):
        self.bench = bench
        layer_cost = bench.builder.layer_cost
        lc_targets = list(layer_cost.targets_) if layer_cost is not None else []
        self.source = source or ("layer_cost" if any(is_perf_metric(t) for t in lc_targets)
                                 else "surrogate")
        if self.source not in ("layer_cost", "surrogate"):
            raise ValueError(f"unknown known-device source {self.source!r}; allowed: "
                             "'layer_cost', 'surrogate'")
        pool = lc_targets if self.source == "layer_cost" else bench.metrics
        self.targets = [m for m in pool if is_perf_metric(m) and m not in exclude]
        if not self.targets:
            raise ValueError(f"the surrogate benchmark knows no other device metric "
                             f"(it has {bench.metrics})")

    def log_costs(self, choices: np.ndarray) -> np.ndarray:
        if self.source == "layer_cost":
            layer_cost = self.bench.builder.layer_cost
            values = layer_cost.transform(choices, saturated=False)
            cols = [values[:, layer_cost.targets_.index(t)] for t in self.targets]
        else:
            dist = self.bench.predict_transformed(choices, self.targets)
            cols = [dist[t][0] for t in self.targets]
        return np.stack([_log_cost_sign(t) * c
                         for t, c in zip(self.targets, cols, strict=True)], axis=1)


# -------------------------------------------------------------------- artifact
class AdaptedBenchmark:
    """A base surrogate benchmark plus adapted device targets, queried together like any
    benchmark (``anb query``, ``anb search --benchmark``, :func:`anb.load` take its folder)."""

    def __init__(self, base: Any, models: dict[str, AdaptedModel], info: dict[str, Any]):
        self.base = base
        self.models = models
        self.info = info

    @property
    def space(self) -> Space:
        return self.base.space

    @property
    def metrics(self) -> list[str]:
        return list(self.base.metrics) + [m for m in self.models if m not in self.base.metrics]

    @property
    def devices(self) -> list[str]:
        return sorted(set(self.base.devices) | {m.split("_", 1)[1] for m in self.models})

    def choices(self, archs: Any) -> np.ndarray:
        """Raw choices of any architecture form the base benchmark accepts."""
        return self.base.choices(archs)

    def resolve(self, metrics: str | Sequence[str] | None) -> list[str]:
        """Validate metric names (the base's aliases allowed); ``None`` means all."""
        from anb.surrogates.benchmark import ALIASES

        if metrics is None:
            return self.metrics
        out = []
        for name in [metrics] if isinstance(metrics, str) else metrics:
            full = name if name in self.models else ALIASES.get(name, name)
            if full not in self.metrics:
                raise ValueError(f"unknown metric {name!r}; this benchmark knows {self.metrics} "
                                 f"(aliases {sorted(ALIASES)})")
            out.append(full)
        return out

    def predict_adapted(self, choices: np.ndarray, name: str
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Log-space mean and std of adapted target ``name`` and its out-of-range flag."""
        model = self.models[name]
        known = BenchmarkKnown(self.base, source=model.known_source)
        missing = [t for t in model.known if t not in known.targets]
        if missing:
            raise ValueError(f"adapted target {name!r} needs base metrics {missing}")
        known.targets = model.known
        return model.predict(known.log_costs(choices), op_components(choices, self.space),
                             **model.design_inputs(choices, self.space))

    def query(self, archs: Any, metrics: str | Sequence[str] | None = None, noise: bool = False,
              seed: int | None = None, level: float | None = None) -> Any:
        """Like ``SurrogateBenchmark.query`` (``arch``, ``<metric>``, ``<metric>_std``, then
        ``ood``, ``ood_distance``, ``ood_cost``), with ``<adapted>_ood`` after each adapted
        metric (its known-device costs lie outside the measured range); ``ood`` is also set
        where a queried adapted metric is flagged. With ``noise`` an adapted metric's draw
        uses its leave-one-out error as the observation noise; ``level``: ``<metric>_lo`` /
        ``_hi`` as the base's."""
        from anb.surrogates.benchmark import OOD_COLUMNS, check_query_args
        from anb.surrogates.identity import IDENTITY, identity
        from anb.surrogates.intervals import bounds
        from anb.surrogates.uncertainty.noise import standard_normal

        check_query_args(archs, noise, seed, level)
        names = self.resolve(metrics)
        choices = self.choices(archs)
        if noise and seed is None:
            seed = int(np.random.default_rng().integers(2**63))
        frame = self.base.query(choices, [m for m in names if m not in self.models], noise, seed,
                                level)
        for name in [m for m in names if m in self.models]:
            mu, sigma, flag = self.predict_adapted(choices, name)
            draw = mu
            if noise:
                assert seed is not None  # set above whenever noise is drawn
                draw = mu + self.models[name].loo_rmse * standard_normal(seed, choices, name,
                                                                         self.space)
            frame[name] = np.exp(draw)
            frame[f"{name}_std"] = np.exp(mu) * np.sqrt(np.expm1(sigma**2))
            if level is not None:
                frame[f"{name}_lo"], frame[f"{name}_hi"] = bounds(mu, sigma, True, level)
            frame[f"{name}_ood"] = flag
            frame["ood"] = frame["ood"].to_numpy(dtype=bool) | flag
        order = ["arch"] + [c for m in names for c in (m, f"{m}_std", f"{m}_lo", f"{m}_hi",
                                                       f"{m}_ood")
                            if c in frame.columns] + list(OOD_COLUMNS)
        frame = frame[order]
        frame.attrs[IDENTITY] = identity(self)
        return frame

    @property
    def identity(self) -> dict[str, Any]:
        """Which data this is: the base's identity and this adaptation's
        (:func:`anb.surrogates.identity.identity`)."""
        from anb.surrogates.identity import identity

        return identity(self)


def is_adapted(path: str | Path) -> bool:
    """Whether the folder ``path`` holds an adapted artifact (its manifest's ``format``)."""
    file = Path(path) / MANIFEST
    try:
        return json.loads(file.read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False  # the artifact loader reports what is wrong with it


def save_adapted(path: str | Path, base: str | Path, models: dict[str, AdaptedModel],
                 info: dict[str, Any] | None = None, overwrite: bool = False) -> Path:
    """Write ``<path>/`` (``adapted.npz`` + checksummed ``manifest.json``), replacing an adapted
    artifact there once the new one is complete (:func:`anb.outputs.replace_folder`: a folder
    holding anything else is refused unless ``overwrite``). ``base``: a packaged name or a
    folder, recorded so that the folder can be moved (:mod:`anb.surrogates.adapt.base`)."""
    from anb.surrogates.adapt.base import base_reference
    from anb.surrogates.artifact import read_manifest

    path = Path(path)
    base_path, reference = base_reference(base, path)
    base_manifest = read_manifest(base_path)
    with replace_folder(path, OUTPUT, overwrite) as tmp:
        arrays = {f"{name}.{key}": value for name, model in models.items()
                  for key, value in model.arrays().items()}
        np.savez(tmp / WEIGHTS_FILE, **arrays)  # type: ignore[arg-type]  # no key is allow_pickle
        manifest = {**(info or {}), "format": FORMAT, **stamp("adapted"),
                    "anb_version": __version__,
                    "base": {**reference, "manifest_sha256": base_manifest["manifest_sha256"]},
                    "targets": {name: model.scalars() for name, model in models.items()},
                    "files": {WEIGHTS_FILE: sha256_file(tmp / WEIGHTS_FILE)}}
        manifest["manifest_sha256"] = _digest(manifest)
        atomic_write_json(tmp / MANIFEST, manifest)
    return path


def read_adapted_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the adapted folder ``path``: its format, format version and every
    checksum verified (version 1 reads: no own model; 1-3: no embedding ridge)."""
    file = path / MANIFEST
    if not file.is_file():
        raise ValueError(f"{str(path)!r} is not an adapted surrogate: no {MANIFEST}")
    manifest = json.loads(file.read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{str(file)!r} is not an {FORMAT} manifest")
    check("adapted", manifest.get(VERSION_FIELD), str(file))
    if manifest.get("manifest_sha256") != _digest(manifest):
        raise ValueError(f"{str(file)!r} was modified after it was written (checksum mismatch)")
    for name, expected in manifest["files"].items():
        if sha256_file(path / name) != expected:
            raise ValueError(f"artifact file {name!r} is corrupted or tampered with")
    return manifest


def load_adapted(path: str | Path, base: str | Path | None = None,
                 n_jobs: int | None = None) -> AdaptedBenchmark:
    """Load an adapted artifact (checksums verified) with its base surrogate benchmark
    (``base``: another copy of it; ``n_jobs``: as :func:`anb.surrogates.artifact.load`)."""
    from anb.surrogates.adapt.base import resolve_base
    from anb.surrogates.artifact import load, read_manifest

    path = Path(path)
    manifest = read_adapted_manifest(path)
    base_path = Path(base) if base is not None else resolve_base(path, manifest["base"])
    if read_manifest(base_path)["manifest_sha256"] != manifest["base"]["manifest_sha256"]:
        raise ValueError(f"base surrogate {str(base_path)!r} is not the one this model was "
                         "adapted on (manifest checksum differs; a packaged base changes "
                         "with the anb version: adapt again)")
    models = {}
    with np.load(path / WEIGHTS_FILE, allow_pickle=False) as data:
        for name, scalars in manifest["targets"].items():
            arrays = {k: data[f"{name}.{k}"] for k in ("ridge_coef", "nnls_weights",
                                                      "known_scale", "op_scale", "lo", "hi",
                                                      "own_weights", "proxy_coef", "proxy_range")
                      if f"{name}.{k}" in data.files}  # v1: no own model; v1-2: no proxy
            floats = {k: float("nan") if scalars.get(k) is None else scalars[k]
                      for k in ("transfer_rmse", "proxy_rmse") if k in scalars}
            scalars = dict(scalars)
            intercept = scalars.pop("embed_intercept", None)  # v1-3: no embedding ridge
            embed = None if intercept is None else EmbedModel(
                data[f"{name}.embed_mean"], data[f"{name}.embed_scale"],
                data[f"{name}.embed_coef"], float(intercept), data[f"{name}.embed_lambdas"])
            models[name] = AdaptedModel(**{**scalars, **floats, **arrays}, embed=embed)
    help_base = manifest["base"].get("packaged") in resources.HELP_BENCHMARKS and base is None
    if help_base:  # measured rows from HELP's table, as the base answers them
        from anb.surrogates.packaged import load as load_packaged

        base_bench = load_packaged(manifest["base"]["packaged"], n_jobs=n_jobs, quiet=True)
    else:
        base_bench = load(base_path, n_jobs=n_jobs)
    return AdaptedBenchmark(base_bench, models, manifest)


def _json_float(value: float) -> float | None:
    """``value`` as strict JSON holds it (``None`` for nan and inf)."""
    return float(value) if np.isfinite(value) else None


def _digest(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
