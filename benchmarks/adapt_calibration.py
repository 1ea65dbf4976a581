"""How the adapted model's choice and std were chosen per n, on the settings splits only.

    .venv/bin/python benchmarks/adapt_calibration.py collect --out DIR
        [--on valid,lomo,family_valid] [--spaces nasbench201,fbnet] [--n 5,10,20] [--draws 4]
    .venv/bin/python benchmarks/adapt_calibration.py collect-released --out DIR [--n 10,20]
        [--draws 3]
    .venv/bin/python benchmarks/adapt_calibration.py score --out DIR

``collect`` fits ``anb adapt``'s model (:class:`~anb.surrogates.adapt.model.AdaptedModel`, as
``benchmarks/help_transfer.py`` does) on every unseen device of the splits meant for choosing
settings (``valid``: HELP's meta-valid devices unseen; ``lomo``: each meta-train device left
out; ``family_valid``: the Titan X unseen, phones and CPUs known; never a reported split), and
keeps, per fit, every candidate's out-of-fold errors on the measured rows and its predictions on
the device's query rows (each blend weighting, each analytic proxy's line), with the yardsticks
(the ridge of HELP's docs and the best proxy). Draw 0 is HELP's protocol; at n <= 10, where
the protocol measures its fixed reference rows, the further draws measure n rows drawn from
the pool, so that a rule is chosen on more than one row set per device.

``collect-released`` keeps the same for the other settings dataset, the released dataset's
validation split, as ``benchmarks/new_device.py --on val`` fits it (both protocols, random and
active rows; it reproduces that script's coverage exactly).

``score`` replays choice rules and std factors on what ``collect`` kept (seconds) and prints,
per n, the mean Spearman, the device cells more than 0.02 below the best simple candidate and
the device cells with 90 % coverage (:func:`anb.surrogates.intervals.coverage`) outside
0.85-0.95; then, under the model's rule, the errors a std can scale
(:mod:`anb.surrogates.adapt.interval`) with CRPS and NLL.
"""
from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

import anb.surrogates.adapt.model as adapt_model
from anb.resources import HELP_DIR
from anb.searchspace import get_space
from anb.searchspace.base import Space
from anb.surrogates import help_tables as ht
from anb.surrogates import intervals
from anb.surrogates.adapt import choice, interval
from anb.surrogates.adapt.embed import arch_features
from anb.surrogates.adapt.model import AdaptedModel, op_components
from anb.surrogates.adapt.proxy import analytic_proxies, best_proxy, fit_line, log_proxies

#: The splits meant for choosing settings (help_tables.SPLITS; never a reported one).
SETTINGS_SPLITS = ("valid", "lomo", "family_valid")
#: The coverage band each device should lie in.
LOW, HIGH = 0.85, 0.95


@contextmanager
def recorded_choice() -> Iterator[dict[str, Any]]:
    """Keeps the arguments of the model's out-of-fold choice during a fit (the study's one
    seam into :meth:`AdaptedModel.fit`)."""
    seen: dict[str, Any] = {}
    original = adapt_model.choose

    def spy(blends: np.ndarray, proxies: np.ndarray, y: np.ndarray, fallback: int,
            rule: choice.ChoiceRule) -> choice.Choice:
        seen.update(blends=blends, proxies=proxies, y=y, fallback=fallback)
        return original(blends, proxies, y, fallback, rule)

    adapt_model.choose = spy  # type: ignore[assignment]
    try:
        yield seen
    finally:
        adapt_model.choose = original  # type: ignore[assignment]


def candidate_predictions(model: AdaptedModel, K: np.ndarray, ops: np.ndarray,
                          choices: np.ndarray, measured: np.ndarray, y_measured: np.ndarray,
                          space: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per candidate column (the blend grid, then the proxies, as the choice sees them) on
    ``choices`` (known-device log costs ``K``, op totals ``ops``): the mean, the std's
    out-of-range widening and the blend's spread (widened), so that the std of an error
    ``rmse`` is ``factor * sqrt((rmse * widening)^2 + spread^2)``. ``measured``: the measured
    rows' choices, ``y_measured`` their log costs (the proxies' lines)."""
    grid = adapt_model._blend_grid(model.has_own, model.embed is not None)
    features = arch_features(space, choices)[0] if model.embed is not None else None
    prior, own = model.prior_parts(choices, space), model.own_log_cost(choices, space)
    means, widen, spread = [], [], []
    for r, o, e in grid:
        part = replace(model, blend=r, own_blend=o, embed_blend=e, proxy="", std_factor=1.0)
        mean, with_error, _ = replace(part, loo_rmse=1.0).predict_log_cost(
            K, ops, own=own, prior=prior, features=features)
        without = replace(part, loo_rmse=0.0).predict_log_cost(K, ops, own=own, prior=prior,
                                                               features=features)[1]
        means.append(mean)
        widen.append(np.sqrt(np.maximum(with_error**2 - without**2, 0.0)))
        spread.append(without)
    at_measured = log_proxies(space, measured)
    for name, x in log_proxies(space, choices).items():
        x_measured = at_measured[name]
        part = replace(model, proxy=name, proxy_coef=fit_line(x_measured, y_measured),
                       proxy_range=np.array([x_measured.min(), x_measured.max()]),
                       std_factor=1.0, loo_rmse=1.0)
        mean, std, _ = part.predict_log_cost(K, ops, proxy=x)
        means.append(mean)
        widen.append(std)
        spread.append(np.zeros(len(mean)))
    return np.stack(means, 1), np.stack(widen, 1), np.stack(spread, 1)


def measured(proto: ht.Protocol, latency: np.ndarray, n: int, draw: int) -> np.ndarray:
    """The measured rows of one draw: HELP's protocol (draw 0, and every draw beyond its 10
    reference rows), else ``n`` rows drawn from the device's pool."""
    rng = np.random.default_rng(draw)
    if draw == 0 or n > len(proto.reference):
        return ht.measured_rows(proto, latency, n, rng)
    return rng.choice(ht.pool_rows(proto, latency), n, replace=False)


class FitData(NamedTuple):
    """What a dataset gives every fit :func:`keep_fit` keeps, one row per architecture: the
    known devices' log costs, the operation totals, the choices, the device's log costs and
    the log proxies."""

    known: np.ndarray
    ops: np.ndarray
    choices: np.ndarray
    y: np.ndarray
    logs: np.ndarray


#: The arrays ``collect`` keeps per fit: the candidates' out-of-fold errors on the measured
#: rows and their query predictions (:func:`candidate_predictions`), the log costs, and where
#: the rows lie (known-device log costs, log proxies, measured and query rows).
ARRAYS = ("blends", "proxies", "y", "mean", "widen", "spread", "truth", "known_rows",
          "known_query", "logs_rows", "logs_query")


def keep_fit(cells: list[dict[str, Any]], arrays: dict[str, np.ndarray], cell: dict[str, Any],
             seen: dict[str, Any], model: AdaptedModel, data: FitData, rows: np.ndarray,
             query: np.ndarray, space: Space) -> None:
    """Keep one fit of ``model`` on ``rows``, scored on ``query``: ``cell`` with the recorded
    choice's fallback (:func:`recorded_choice`) appended to ``cells``, and its
    :data:`ARRAYS` in ``arrays`` under the cell's index: the recorded choice's ``blends``,
    ``proxies`` and ``y``, the candidates' query predictions (:func:`candidate_predictions`)
    and where the rows lie."""
    known, ops, choices, y, logs = data
    mean, widen, spread = candidate_predictions(model, known[query], ops[query], choices[query],
                                                choices[rows], y[rows], space)
    key = str(len(cells))
    cells.append({**cell, "fallback": seen["fallback"]})
    values = {"blends": seen["blends"], "proxies": seen["proxies"], "y": seen["y"],
              "mean": mean, "widen": widen, "spread": spread, "truth": y[query],
              "known_rows": known[rows], "known_query": known[query],
              "logs_rows": logs[rows], "logs_query": logs[query]}
    for name in ARRAYS:
        arrays[f"{key}.{name}"] = np.asarray(values[name], np.float64)


def collect(splits: list[str], spaces: list[str], ns: list[int], draws: int,
            out: Path) -> None:
    """Fit every (split, space, unseen device, n, draw) and keep its candidates in
    ``<out>/<split>-<space>.npz`` (arrays ``<cell>.<name>``) and ``.json`` (the cells)."""
    from help_transfer import fit_known, ridge_baseline, score

    out.mkdir(parents=True, exist_ok=True)
    for split in splits:
        for space_name in spaces:
            proto, space = ht.protocol(space_name), get_space(space_name)
            table = ht.read_table(HELP_DIR, space_name)
            choices = ht.choices(table, space_name)
            ops, proxies = op_components(choices, space), analytic_proxies(space, choices)
            logs = np.column_stack(list(log_proxies(space, choices).values()))
            cells: list[dict[str, Any]] = []
            arrays: dict[str, np.ndarray] = {}
            for known, unseen in proto.splits(split):
                base = fit_known(table, space_name, known)
                K = base.log_costs(choices)
                measured_known = np.log(table[list(known)].to_numpy(np.float64))
                for device in unseen:
                    latency = table[device].to_numpy(np.float64)
                    y, query = np.log(latency), ht.query_rows(proto, latency)
                    for n in ns:
                        for draw in range(draws):
                            rows = measured(proto, latency, n, draw)
                            with recorded_choice() as seen:
                                model = AdaptedModel.fit(
                                    ht.target(device), base.targets, K[rows], ops[rows],
                                    latency[rows], known_source=base.source,
                                    choices=choices[rows], space=space)
                            cell = {
                                "device": device, "n": n, "draw": draw,
                                "ridge": score(ridge_baseline(measured_known, y, rows)[query],
                                               y[query])[0],
                                "proxy": score(best_proxy(proxies, rows, y[rows])[1][query],
                                               y[query])[0]}
                            keep_fit(cells, arrays, cell, seen, model,
                                     FitData(K, ops, choices, y, logs), rows, query, space)
                    print(f"{split} {space_name} {device}: {len(cells)} fits", flush=True)
            np.savez_compressed(out / f"{split}-{space_name}.npz", **arrays)
            (out / f"{split}-{space_name}.json").write_text(json.dumps(cells))


def collect_released(protocols: list[str], ns: list[int], reps: int, out: Path) -> None:
    """The same per fit for the released dataset's validation split, as
    ``benchmarks/new_device.py --on val`` fits it (``--protocol metric``: each device metric
    hidden in turn; ``board``: each board's metrics at once; random and active rows, ``reps``
    each), into ``<out>/released_<protocol>-anb.npz`` / ``.json`` (no ridge or proxy
    yardstick: ``ridge`` and ``proxy`` are -1)."""
    from new_device import (
        ACTIVE_POOL,
        BOARDS,
        _value,
        log_cost_labels,
        measured_rows,
        transfer_costs,
    )

    from anb import resources
    from anb.records import is_perf_metric
    from anb.searchspace.space import ANB_SPACE
    from anb.surrogates.adapt.select import design_features
    from anb.surrogates.fit import prepare

    out.mkdir(parents=True, exist_ok=True)
    prepared = prepare(resources.RELEASED_DATASET, space=ANB_SPACE)
    train, val = prepared.masks["train"], prepared.masks["val"]
    devices = [t for t in prepared.labels if is_perf_metric(t)]
    choices, labels = prepared.choices, prepared.labels
    ops = op_components(choices, ANB_SPACE)
    logs = np.column_stack(list(log_proxies(ANB_SPACE, choices).values()))
    y_all = log_cost_labels(labels, devices)
    for protocol in protocols:
        groups = ({t: [t] for t in devices} if protocol == "metric"
                  else {b: [t for t in ts if t in devices] for b, ts in BOARDS.items()})
        cells: list[dict[str, Any]] = []
        arrays: dict[str, np.ndarray] = {}
        for hidden in groups.values():
            others = [d for d in devices if d not in hidden]
            KL = transfer_costs(choices, labels, train, others)
            feats = design_features(KL, ops)
            pool_all = np.flatnonzero(np.all([np.isfinite(y_all[t]) for t in hidden], 0) & train)
            for n in ns:
                for rep in range(reps):
                    picks = measured_rows(pool_all, n, rep, feats, ACTIVE_POOL)
                    for t in hidden:
                        y, ev = y_all[t], np.flatnonzero(np.isfinite(y_all[t]) & val)
                        for mode, rows in picks.items():
                            with recorded_choice() as seen:
                                model = AdaptedModel.fit(t, others, KL[rows], ops[rows],
                                                         _value(t, y[rows]), choices=choices[rows],
                                                         space=ANB_SPACE)
                            cell = {"device": t, "n": n, "draw": 2 * rep + (mode == "active"),
                                    "ridge": -1.0, "proxy": -1.0}
                            keep_fit(cells, arrays, cell, seen, model,
                                     FitData(KL, ops, choices, y, logs), rows, ev, ANB_SPACE)
            print(f"released {protocol} {'/'.join(hidden)}: {len(cells)} fits", flush=True)
        np.savez_compressed(out / f"released_{protocol}-anb.npz", **arrays)
        (out / f"released_{protocol}-anb.json").write_text(json.dumps(cells))


def load_cells(folder: Path) -> list[dict[str, Any]]:
    """Every cell ``collect`` kept, its arrays loaded (``split``, ``space`` added)."""
    out = []
    for index in sorted(folder.glob("*.json")):
        split, _, space_name = index.stem.partition("-")
        with np.load(index.with_suffix(".npz")) as data:
            for key, cell in enumerate(json.loads(index.read_text())):
                out.append({**cell, "split": split, "space": space_name,
                            **{name: data[f"{key}.{name}"] for name in ARRAYS
                               if f"{key}.{name}" in data.files}})
    return out


#: A choice: the column (blends, then proxies) and the std's error, from out-of-fold errors
#: ``(blends, proxies, y, fallback)``.
Rule = Callable[[np.ndarray, np.ndarray, np.ndarray, int], choice.Choice]


def ruled(rule: choice.ChoiceRule) -> Rule:
    """:func:`anb.surrogates.adapt.choice.choose` under ``rule``."""
    def run(blends: np.ndarray, proxies: np.ndarray, y: np.ndarray,
            fallback: int) -> choice.Choice:
        return choice.choose(blends, proxies, y, fallback, rule)
    return run


def proxy_by_rank(margin: float, base: choice.ChoiceRule) -> Rule:
    """``base``'s pick, unless the proxy whose held-out predictions order the measured rows
    best does so by more than ``margin`` (Spearman) over the pick's: then that proxy (the
    std's error: this rule scored out of fold)."""
    def pick(blends: np.ndarray, proxies: np.ndarray, y: np.ndarray, fallback: int,
             n: int) -> int:
        column = base.pick(blends, proxies, y, fallback, n)
        agreement = choice.rank_agreement(np.column_stack([blends, proxies]), y)
        best = blends.shape[1] + int(np.argmax(agreement[blends.shape[1]:]))
        return best if agreement[best] > agreement[column] + margin else column

    def run(blends: np.ndarray, proxies: np.ndarray, y: np.ndarray,
            fallback: int) -> choice.Choice:
        candidates, n = np.column_stack([blends, proxies]), len(y)
        keep = np.ones(n, dtype=bool)
        errors = np.empty(n)
        for i in range(n):
            keep[i] = False
            errors[i] = candidates[i, pick(blends[keep], proxies[keep], y[keep], fallback, n)]
            keep[i] = True
        return choice.Choice(pick(blends, proxies, y, fallback, n),
                             float(np.sqrt(np.mean(errors**2))))
    return run


#: The error a std scales, from the choice's out-of-fold RMSE, the additive transfer's and
#: the measured log costs.
StdError = Callable[[float, float, np.ndarray], float]


def shipped_error(choice_rmse: float, transfer_rmse: float, y: np.ndarray) -> float:
    """The model's: :func:`anb.surrogates.adapt.interval.std_error` under its choice rule."""
    return interval.std_error(choice_rmse, transfer_rmse, y, adapt_model.CHOICE_RULE)


def replay(cells: list[dict[str, Any]], rule: Rule, error: StdError = shipped_error
           ) -> list[dict[str, Any]]:
    """Spearman of every cell under ``rule``, and each query row's error over its std before
    the factor per n (``scaled``: coverage at factor ``f`` is the share of
    ``scaled <= z * f``), the std's error given by ``error`` (multiplying the whole std, as
    the model's ``std_factor`` does)."""
    from scipy.stats import spearmanr

    out = []
    for c in cells:
        picked = rule(c["blends"], c["proxies"], c["y"], c["fallback"])
        column, rmse = picked.column, picked.rmse
        mean = c["mean"][:, column]
        transfer = float(np.sqrt(np.mean(c["blends"][:, c["fallback"]] ** 2)))
        ratio = error(rmse, transfer, c["y"]) / rmse if rmse > 0 else 1.0
        std = ratio * np.hypot(rmse * c["widen"][:, column], c["spread"][:, column])
        out.append({**{k: c[k] for k in ("split", "space", "device", "n", "draw", "ridge",
                                         "proxy")},
                    "rho": float(spearmanr(mean, c["truth"])[0]),
                    "scaled": np.abs(c["truth"] - mean) / std,
                    "error": c["truth"] - mean, "std": std,
                    "picked_proxy": column >= c["blends"].shape[1]})
    return out


def proper_scores(scored: list[dict[str, Any]], factor: Callable[[int], float]
                  ) -> dict[int, tuple[float, float]]:
    """Per n: mean CRPS and NLL of the fits (log cost) under the std factor per n."""
    out: dict[int, tuple[float, float]] = {}
    for n in sorted({r["n"] for r in scored}):
        rows = [r for r in scored if r["n"] == n]
        zeros = [np.zeros(len(r["error"])) for r in rows]
        out[n] = (float(np.mean([intervals.crps(r["error"], o, factor(n) * r["std"], False)
                                 for r, o in zip(rows, zeros, strict=True)])),
                  float(np.mean([intervals.nll(r["error"], o, factor(n) * r["std"], False)
                                 for r, o in zip(rows, zeros, strict=True)])))
    return out


def with_coverage(scored: list[dict[str, Any]], factor: Callable[[int], float]
                  ) -> list[dict[str, Any]]:
    """``scored`` with each cell's 90 % coverage under the std factor per n (the same
    interval as :func:`anb.surrogates.intervals.coverage`)."""
    z = intervals.z_value()
    return [{**r, "cov": float(np.mean(r["scaled"] <= z * factor(r["n"])))} for r in scored]


def summary(scored: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Per n: mean Spearman; device cells (draws averaged) more than 0.02 below the best
    simple candidate; device cells and single fits with coverage outside 0.85-0.95."""
    out: dict[int, dict[str, float]] = {}
    for n in sorted({r["n"] for r in scored}):
        rows = [r for r in scored if r["n"] == n]
        devices: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for r in rows:
            devices.setdefault((r["split"], r["space"], r["device"]), []).append(r)
        mean = {key: {k: float(np.mean([r[k] for r in group]))
                      for k in ("rho", "ridge", "proxy", "cov")}
                for key, group in devices.items()}
        out[n] = {"rho": float(np.mean([m["rho"] for m in mean.values()])),
                  "broken": sum(m["rho"] < max(m["ridge"], m["proxy"]) - 0.02
                                for m in mean.values()),
                  "cov_low": sum(m["cov"] < LOW for m in mean.values()),
                  "cov_high": sum(m["cov"] > HIGH for m in mean.values()),
                  "devices": len(mean),
                  "fits_in": float(np.mean([LOW <= r["cov"] <= HIGH for r in rows])),
                  "cov": float(np.mean([r["cov"] for r in rows])),
                  "proxy_share": float(np.mean([r["picked_proxy"] for r in rows]))}
    return out


def t_factor(n: int) -> float:
    """The small-sample t factor the std multipliers multiply."""
    return adapt_model.small_sample_factor(n)


#: Multipliers of the t factor tried per n.
FACTORS = np.round(np.arange(0.3, 2.01, 0.05), 2)


def best_factor(scored: list[dict[str, Any]], n: int) -> float:
    """The multiplier of the t factor at ``n`` rows that puts the most single fits' coverage
    inside 0.85-0.95 among those whose mean coverage lies inside it (ties: mean coverage
    nearest 0.9)."""
    rows = [r for r in scored if r["n"] == n]

    def merit(f: float) -> tuple[bool, float, float]:
        s = summary(with_coverage(rows, lambda m: f * t_factor(m)))[n]
        return LOW <= s["cov"] <= HIGH, s["fits_in"], -abs(s["cov"] - 0.9)

    return float(max(FACTORS, key=merit))


def score_cells(cells: list[dict[str, Any]]) -> None:
    """Print the rules and std factors compared (the chosen ones: docs/decisions)."""
    rule = adapt_model.CHOICE_RULE
    variants: list[tuple[str, Rule]] = [
        ("no fallback ratio", ruled(replace(rule, fallback_ratio=None)))]
    for ratio in (0.9, 0.8, 0.7, 0.6, 0.5):
        variants.append((f"fallback ratio {ratio}", ruled(replace(rule, fallback_ratio=ratio))))
    for margin in (0.1, 0.3):
        variants.append((f"fallback ratio {rule.fallback_ratio}, proxy by rank margin "
                         f"{margin}", proxy_by_rank(margin, rule)))
    print("| rule | std | n | mean rho | cells broken | cov < 0.85 | cov > 0.95 | devices | "
          "fits in 0.85-0.95 | mean cov | proxy picked |")
    print("|" + "---|" * 11)
    for name, run in variants:
        scored = replay(cells, run)
        ns = sorted({r["n"] for r in scored})
        chosen = {n: best_factor(scored, n) for n in ns}
        for label, factor in (("t", t_factor),
                              ("t x " + "/".join(f"{chosen[n]:.2f}" for n in ns),
                               lambda m, chosen=chosen: chosen[m] * t_factor(m))):
            for n, s in summary(with_coverage(scored, factor)).items():
                print(f"| {name} | {label} | {n} | {s['rho']:.3f} | {s['broken']} | "
                      f"{s['cov_low']} | {s['cov_high']} | {s['devices']} | "
                      f"{s['fits_in']:.2f} | {s['cov']:.3f} | {s['proxy_share']:.2f} |",
                      flush=True)


def score_std_errors(cells: list[dict[str, Any]]) -> None:
    """Print, under the model's choice rule, the errors a std can scale (the multiplier per
    n re-chosen for each): per n the device cells under / over 0.85-0.95 coverage, the
    single fits inside, mean coverage, CRPS and NLL."""
    errors: list[tuple[str, StdError]] = [
        ("per regime (shipped)", shipped_error),
        ("the choice's at every n", lambda choice_rmse, transfer_rmse, y: choice_rmse),
        ("the transfer's at every n", lambda choice_rmse, transfer_rmse, y: transfer_rmse)]
    for weight in (0.3, 0.5, 0.7):
        errors.append((f"the transfer's shrunk ({weight}) at every n",
                       lambda choice_rmse, transfer_rmse, y, weight=weight:
                       interval.error_scale(transfer_rmse, y, weight)))
    print("| std error | n | multiplier of t | cov < 0.85 | cov > 0.95 | devices | "
          "fits in 0.85-0.95 | mean cov | CRPS | NLL |")
    print("|" + "---|" * 10)
    for name, error in errors:
        scored = replay(cells, ruled(adapt_model.CHOICE_RULE), error)
        chosen = {n: best_factor(scored, n) for n in sorted({r["n"] for r in scored})}

        def factor(m: int, chosen: dict[int, float] = chosen) -> float:
            return chosen[m] * t_factor(m)

        scores = proper_scores(scored, factor)
        for n, s in summary(with_coverage(scored, factor)).items():
            print(f"| {name} | {n} | {chosen[n]:.2f} | {s['cov_low']} | {s['cov_high']} | "
                  f"{s['devices']} | {s['fits_in']:.2f} | {s['cov']:.3f} | "
                  f"{scores[n][0]:.4f} | {scores[n][1]:.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=("collect", "collect-released", "score"))
    parser.add_argument("--out", type=Path, required=True,
                        help="the folder collect writes the candidates to and score reads")
    parser.add_argument("--on", default=",".join(SETTINGS_SPLITS))
    parser.add_argument("--spaces", default="nasbench201,fbnet")
    parser.add_argument("--n", default="5,10,20")
    parser.add_argument("--draws", type=int, default=4)
    args = parser.parse_args()
    splits = args.on.split(",")
    reported = [s for s in splits if s not in SETTINGS_SPLITS]
    if reported:
        parser.error(f"--on {','.join(reported)}: settings are chosen only on "
                     f"{', '.join(SETTINGS_SPLITS)}")
    if args.step == "collect-released":  # the released dataset's val split, n 10 and 20
        collect_released(["metric", "board"], [int(v) for v in args.n.split(",")],
                         args.draws, args.out)
    elif args.step == "collect":
        collect(splits, args.spaces.split(","), [int(v) for v in args.n.split(",")],
                args.draws, args.out)
    else:
        cells = load_cells(args.out)
        score_cells(cells)
        score_std_errors(cells)


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
