"""HELP's new-device protocol: how well does ``anb adapt`` know an unseen device from 20 latencies?

    .venv/bin/python benchmarks/help_transfer.py [--spaces nasbench201,fbnet] [--on test|valid]
        [--n 5,10,20] [--draws 10] [--data anb/data/help] [--select random|active]
        [--plot OUT.png]
        (--on valid: meta-valid unseen; --on lomo: each meta-train device left out in turn;
        --on mobile_cpu-gpu|gpu-mobile_cpu|cpu_gpu-accelerator: a device family none of the
        known devices belongs to, family_valid the one of them to choose settings on; device
        lists in help_tables.FAMILIES / CROSS_FAMILY)

"proxy rho" is the best single analytic proxy (MACs, true MACs, params, activations, layer
count; fitted log-log on the n measurements, chosen by leave-one-out error: adapt_proxy.py).

The external yardstick of HELP (Lee et al., NeurIPS 2021) on its own tables and protocol
(``docs/background/help.md``, :mod:`anb.surrogates.help_tables`): per space (NAS-Bench-201, FBNet)
the known devices are HELP's meta-train and meta-valid columns; anb fits its base benchmark's
layer-cost models on those columns only (as ``fit_benchmark`` does, default config, all rows:
HELP's known devices are fully measured). For each unseen (meta-test) device ``anb adapt``'s model
(:class:`~anb.surrogates.adapt.model.AdaptedModel`, transferring from the base's layer-cost models
of the known devices, exactly what ``anb adapt`` does) is fitted on the allowed measurements only:
n = 20 (HELP's 10 reference architectures plus 10 drawn from the device's training pool, 10 draws),
n = 10 (the reference architectures) and n = 5 (the first 5). Scores on the device's 800-row query
set: Spearman rho (HELP's metric), Kendall tau, the fraction of measured latencies inside the
adapted 90 % interval and two proper scores of the predictive distribution of the log latency
(CRPS and NLL, lower is better: :mod:`anb.surrogates.intervals`). Beside it, in the same run:
the ridge baseline of docs/background/help.md (ridge of the log latency on the known devices'
measured log latencies, fitted on the same measurements; shrinkage by scikit-learn's
``RidgeCV`` default, leave-one-out among 0.1, 1, 10) and HELP's published Spearman (20
measurements).

Every setting of the adapted model is anb's default, chosen on anb's own data; the settings
tried for this benchmark (the known devices' source, finer operation totals per space) were
compared with ``--on valid`` (HELP's meta-valid devices unseen, meta-train known) and by
leaving each meta-train device out (meta-train + meta-valid known), never on a meta-test
device. Goals (issue 47, printed met or missed under the table: :func:`goal_lines`): at n = 20
mean Spearman >= :data:`GOAL_MEAN` on HELP's split and on the cross-family splits whose unseen
devices are GPUs, an FPGA or an ASIC, each device at or above every published figure beside it;
on every split and n, no device more than :data:`NEVER_WORSE_MARGIN` below the best simple
candidate (the ridge or the best proxy) and 90 % coverage within :data:`COVERAGE_BAND`. What was
tried against each miss: docs/decisions/help-transfer.md.

The adapted model includes, from ``EMBED_MIN_POINTS`` (10) measurements, the
architecture-aware ridge of :mod:`anb.surrogates.adapt.embed`; that threshold and its weight
grid were chosen on ``--on family_valid`` and ``--on valid``, never on a reported split.
"NASFLAT rho" is NASFLAT's published mean on HELP's split at n = 20 (:data:`NASFLAT`); "HELP
rerun rho" HELP re-run by NASFLAT's authors, per device (:data:`RERUN`). Below
``CHOICE_MIN_POINTS`` (10) measurements the additive transfer alone predicts (no out-of-fold
choice); every std is widened by the small-sample t quantile times a factor per regime of the
choice (``CHOICE_STD_FACTORS``); from ``RANK_MIN_POINTS`` (20) the choice compares the rank
agreement of held-out predictions instead of squared error and the additive transfer is held
unless that choice beats it clearly (``HOLD_SE``); below that a pick replaces the additive
transfer only where its squared error is under ``FALLBACK_RATIO`` (0.8) times the
transfer's; all chosen on ``--on valid``, ``lomo`` and ``family_valid``
(``benchmarks/adapt_calibration.py`` replays the last two).

What was tried and measured to choose these settings:
docs/decisions/help-transfer.md (the site's "How the numbers were chosen").
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pandas as pd
from scipy.stats import kendalltau, spearmanr

from anb.resources import HELP_DIR
from anb.searchspace import get_space
from anb.surrogates import help_tables as ht
from anb.surrogates import intervals
from anb.surrogates.adapt.model import AdaptedModel, BenchmarkKnown, op_components
from anb.surrogates.adapt.proxy import analytic_proxies, best_proxy
from anb.surrogates.adapt.select import design_features, select
from anb.surrogates.fit import FitConfig, fit_benchmark, fit_layer_cost, prepare

#: HELP's published Spearman at 20 measurements (docs/background/help.md, "Published results")
PUBLISHED = {
    "nasbench201": {"titan_rtx_256": 0.987, "gold_6226": 0.989, "fpga": 0.985, "pixel2": 0.802,
                    "raspi4": 0.890, "eyeriss": 0.940, "mean": 0.932},
    "fbnet": {"raspi4": 0.887, "eyeriss": 0.943, "fpga": 0.892, "mean": 0.910},
}
#: NASFLAT's published mean Spearman on HELP's split at 20 measurements (Akhauri & Abdelfattah,
#: "On Latency Predictors for Neural Architecture Search", MLSys 2024); on its cross-family
#: tasks it reports 0.81-0.87 where the unseen devices are GPUs, FPGAs or an ASIC and
#: 0.58-0.73 where they are phones or CPUs (its own device splits, not these). Its public
#: repository (abdelfattah-lab/nasflat_latency, commit 8292434) holds no per-device result
#: file of NASFLAT itself: see RERUN.
NASFLAT = {"nasbench201": 0.959, "fbnet": 0.961}
#: Per-device Spearman of HELP re-run by NASFLAT's authors on HELP's split, the best
#: per-device figures published for it (abdelfattah-lab/nasflat_latency, commit 8292434,
#: correlation_trainer/HELP/meta_results/meta_test_results_11111.txt (NAS-Bench-201) and
#: _11114.txt (FBNet); the files do not state the number of measurements).
RERUN = {
    "nasbench201": {"titan_rtx_256": 0.997, "gold_6226": 0.985, "fpga": 0.989, "pixel2": 0.874,
                    "raspi4": 0.909, "eyeriss": 0.977, "mean": 0.955},
    "fbnet": {"fpga": 0.943, "raspi4": 0.950, "eyeriss": 0.970, "mean": 0.954},
}


def ridge_baseline(known_log: np.ndarray, y: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The ridge of docs/background/help.md: log latency on the known devices' log latencies,
    fitted on ``rows``."""
    from sklearn.linear_model import RidgeCV

    return RidgeCV().fit(known_log[rows], y[rows]).predict(known_log)


def fit_known(table: pd.DataFrame, space_name: str, known: tuple[str, ...]) -> BenchmarkKnown:
    """The known devices of anb's base benchmark of the ``known`` columns (all rows), as
    ``anb adapt`` transfers from it: their layer-cost models, fitted as ``fit_benchmark``
    fits them (default config, its training rows); the rest of a base, which the transfer
    does not read, is not fitted."""
    space = get_space(space_name)
    frame = ht.to_frame(table, space, known)
    prepared = prepare(frame, None, split="random", seed=0, space=space)
    layer_cost = fit_layer_cost(prepared, FitConfig())
    return BenchmarkKnown(SimpleNamespace(builder=SimpleNamespace(layer_cost=layer_cost),
                                          metrics=list(layer_cost.targets_)))


def save_base(space_name: str, data: Path, out: Path) -> None:
    """Fit anb's base benchmark on every HELP device column of ``space_name`` and save it."""
    from anb.surrogates.artifact import save

    space = get_space(space_name)
    table = ht.read_table(data, space_name)
    columns = [c for c in table.columns if c not in ("index", "arch", "op_idx")]
    frame = ht.to_frame(table, space, columns)
    prepared = prepare(frame, None, split="random", seed=0, space=space)
    save(fit_benchmark(prepared, FitConfig(), progress=False), out)
    print(f"{space_name}: base benchmark of {len(columns)} HELP devices -> {out}")


def score(pred: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    return float(spearmanr(pred, y)[0]), float(kendalltau(pred, y)[0])


def active_rows(proto: ht.Protocol, latency: np.ndarray, n: int, features: np.ndarray,
                seed: int) -> np.ndarray:
    """HELP's reference rows, then ``n - 10`` chosen from the same pool by ``anb adapt
    --suggest``'s selection (:func:`~anb.surrogates.adapt.select.select`: spread over the
    known devices' costs and the op totals, around the reference rows) instead of drawn."""
    reference = np.array(proto.reference[:n])
    extra = n - len(reference)
    if extra <= 0:
        return reference
    pool = np.setdiff1d(ht.pool_rows(proto, latency), reference)
    picked = pool[select(features[pool], extra, measured=features[reference], seed=seed)]
    return np.concatenate([reference, picked])


#: What each (device, n) row scores, averaged over the draws and, in the mean rows, devices.
SCORES = ("rho", "tau", "cov", "crps", "nll", "ridge", "proxy")


def run_space(space_name: str, on: str, ns: list[int], draws: int, data: Path,
              selection: str = "random") -> list[dict]:
    """Every (unseen device, n) of one space: mean scores over the draws."""
    proto = ht.protocol(space_name)
    table = ht.read_table(data, space_name)
    choices = ht.choices(table, space_name)
    ops = op_components(choices, get_space(space_name))
    out = []
    for known, unseen in proto.splits(on):
        out += _run_split(space_name, on, ns, draws, table, choices, ops, known, unseen,
                          selection)
    return out


def _run_split(space_name: str, on: str, ns: list[int], draws: int, table: pd.DataFrame,
               choices: np.ndarray, ops: np.ndarray, known: tuple[str, ...],
               unseen: tuple[str, ...], selection: str) -> list[dict]:
    """The unseen devices of one ``(known, unseen)`` split, the base fitted on ``known``."""
    proto = ht.protocol(space_name)
    space = get_space(space_name)
    base = fit_known(table, space_name, known)
    K = base.log_costs(choices)
    measured_known = np.log(table[list(known)].to_numpy(np.float64))
    features = design_features(K, ops)
    proxies = analytic_proxies(space, choices)
    out = []
    for device in unseen:
        latency = table[device].to_numpy(np.float64)
        y, query = np.log(latency), ht.query_rows(proto, latency)
        for n in ns:
            res: dict[str, list[float]] = {k: [] for k in SCORES}
            for draw in range(draws if n > len(proto.reference) else 1):
                rows = (ht.measured_rows(proto, latency, n, np.random.default_rng(draw))
                        if selection == "random"
                        else active_rows(proto, latency, n, features, draw))
                model = AdaptedModel.fit(ht.target(device), base.targets, K[rows], ops[rows],
                                         latency[rows], known_source=base.source,
                                         choices=choices[rows], space=space)
                mean, std, _ = model.predict_log_cost(K[query], ops[query],
                                                      **model.design_inputs(choices[query], space))
                rho, tau = score(mean, y[query])
                res["rho"].append(rho)
                res["tau"].append(tau)
                res["cov"].append(intervals.coverage(y[query], mean, std, log=False))
                res["crps"].append(intervals.crps(y[query], mean, std, log=False))
                res["nll"].append(intervals.nll(y[query], mean, std, log=False))
                res["ridge"].append(score(ridge_baseline(measured_known, y, rows)[query],
                                          y[query])[0])
                res["proxy"].append(score(best_proxy(proxies, rows, y[rows])[1][query],
                                          y[query])[0])
            out.append({"space": space_name, "device": device, "n": n,
                        "help": PUBLISHED[space_name].get(device) if on == "test" else None,
                        "rerun": RERUN[space_name].get(device) if on == "test" else None,
                        **{k: float(np.mean(v)) for k, v in res.items()}})
            print(_line(out[-1]), flush=True)
    return out


#: Mean Spearman goal at n = 20 per split (issue 47): HELP's split above NASFLAT's 0.959 /
#: 0.961; cross-family splits whose unseen devices are GPUs, FPGAs or an ASIC.
GOAL_MEAN = {"test": 0.965, "mobile_cpu-gpu": 0.80, "cpu_gpu-accelerator": 0.80}
#: A device may rank at most this far below the best simple candidate (never worse than simple).
NEVER_WORSE_MARGIN = 0.02
#: Each device's 90 % interval coverage goal.
COVERAGE_BAND = (0.85, 0.95)


def goal_lines(rows: list[dict], on: str) -> list[str]:
    """Issue 47's goals over the device rows of one run, each with ``met`` or ``missed`` and the
    cells that miss it."""
    lines = []
    for n in sorted({r["n"] for r in rows}):
        part = [r for r in rows if r["n"] == n]
        worse = [r for r in part if r["rho"] < max(r["ridge"], r["proxy"]) - NEVER_WORSE_MARGIN]
        low, high = COVERAGE_BAND
        under = sum(r["cov"] < low for r in part)
        over = sum(r["cov"] > high for r in part)
        lines.append(f"n = {n}: never worse than simple (within {NEVER_WORSE_MARGIN}): "
                     f"{_verdict(not worse)}" + "".join(
                         f", {r['space']} {r['device']} {r['rho']:.3f} vs "
                         f"{max(r['ridge'], r['proxy']):.3f}" for r in worse))
        lines.append(f"n = {n}: coverage {low}-{high}: {_verdict(not under and not over)}, "
                     f"{len(part) - under - over} of {len(part)} devices within, {under} under, "
                     f"{over} over")
    twenty = [r for r in rows if r["n"] == 20]
    for space in dict.fromkeys(r["space"] for r in twenty):
        part = [r for r in twenty if r["space"] == space]
        if on in GOAL_MEAN:
            mean = float(np.mean([r["rho"] for r in part]))
            lines.append(f"n = 20: {space} mean Spearman >= {GOAL_MEAN[on]}: "
                         f"{_verdict(mean >= GOAL_MEAN[on])} ({mean:.3f})")
        below = [r for r in part if not _beats_all(r)]
        lines.append(f"n = 20: {space} above the ridge, the best proxy and every published "
                     f"figure on every device: {_verdict(not below)}"
                     + "".join(f", {r['device']} {r['rho']:.3f}" for r in below))
    return lines


def _beats_all(r: dict) -> bool:
    """Whether a row's Spearman is above its ridge, its best proxy and every published figure
    beside it."""
    published = [r[k] for k in ("help", "rerun", "nasflat") if r.get(k) is not None]
    return r["rho"] > max(r["ridge"], r["proxy"], *published)


def _verdict(met: bool) -> str:
    return "met" if met else "missed"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _line(r: dict) -> str:
    beats = "" if r["n"] != 20 else ("yes" if _beats_all(r) else "no")
    return (f"| {r['space']} | {r['device']} | {r['n']} | {_fmt(r['help'])} | "
            f"{_fmt(r.get('rerun'))} | {_fmt(r.get('nasflat'))} | "
            f"{_fmt(r['ridge'])} | {_fmt(r['proxy'])} | {_fmt(r['rho'])} | {_fmt(r['tau'])} | "
            f"{_fmt(r['cov'])} | {r['crps']:.4f} | {r['nll']:.2f} | {beats} |")


#: The mean curves :func:`plot` draws: label -> row key.
CURVES = {"anb adapt": "rho", "ridge": "ridge", "best proxy": "proxy"}


def mean_curves(rows: list[dict]) -> dict[str, list[float]]:
    """Per :data:`CURVES` label, the mean over the devices of ``rows`` (one space) at each n,
    in increasing n."""
    ns = sorted({r["n"] for r in rows})
    return {label: [float(np.mean([r[key] for r in rows if r["n"] == n])) for n in ns]
            for label, key in CURVES.items()}


def plot(rows: list[dict], on: str, path: Path) -> None:
    """Mean Spearman against n per space: anb, the ridge and the best proxy, each unseen
    device's anb line faint behind them; on HELP's split the published means of HELP, of its
    re-run by NASFLAT's authors and of NASFLAT, drawn at n = 20."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spaces = list(dict.fromkeys(r["space"] for r in rows))
    fig, axes = plt.subplots(1, len(spaces), figsize=(5.5 * len(spaces), 4.2), squeeze=False)
    for ax, space_name in zip(axes[0], spaces, strict=True):
        part = [r for r in rows if r["space"] == space_name]
        ns = sorted({r["n"] for r in part})
        for device in dict.fromkeys(r["device"] for r in part):
            ax.plot(ns, [r["rho"] for r in part if r["device"] == device], color="C0",
                    alpha=0.25, lw=1)
        for (label, means), color in zip(mean_curves(part).items(), ("C0", "C1", "C2"),
                                         strict=True):
            ax.plot(ns, means, color=color, lw=2.5, marker="o", label=label)
        if on == "test":
            for value, label, marker in ((PUBLISHED[space_name]["mean"], "HELP, n = 20", "s"),
                                         (RERUN[space_name]["mean"], "HELP re-run (n unstated)",
                                          "D"),
                                         (NASFLAT[space_name], "NASFLAT, n = 20", "*")):
                ax.plot([20], [value], marker=marker, ms=9, ls="none", color="k",
                        mfc="none" if marker != "*" else "k", label=label)
        ax.set(title=f"{space_name}, split {on}", xlabel="measurements n", xticks=ns,
               ylabel="mean Spearman on the query set")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spaces", default="nasbench201,fbnet")
    parser.add_argument("--on", choices=ht.SPLITS, default="test")
    parser.add_argument("--n", default="5,10,20")
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--data", type=Path, default=HELP_DIR)
    parser.add_argument("--select", choices=("random", "active"), default="random",
                        help="how the measurements beyond HELP's 10 reference architectures "
                             "are chosen: drawn (HELP's protocol) or by anb adapt --suggest")
    parser.add_argument("--save-base", type=Path, default=None,
                        help="fit a base benchmark of --spaces (one) on all of HELP's device "
                             "columns, save it to this folder and stop (a base for a device "
                             "HELP never measured, e.g. new_device.py --real)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="also draw the mean Spearman against n per space (PNG)")
    args = parser.parse_args()
    if args.save_base is not None:
        save_base(args.spaces, args.data, args.save_base)
        return
    began = time.perf_counter()
    ns = [int(v) for v in args.n.split(",")]
    print("| space | device | n | HELP rho | HELP rerun rho | NASFLAT rho | ridge rho | "
          "proxy rho | anb rho | anb tau | anb 90% cov | anb CRPS | anb NLL | beats all |")
    print("|" + "---|" * 14)
    rows = []
    for space_name in args.spaces.split(","):
        result = run_space(space_name, args.on, ns, args.draws, args.data, args.select)
        rows += result
        for n in ns:
            part = [r for r in result if r["n"] == n]
            mean = {k: float(np.mean([r[k] for r in part])) for k in SCORES}
            test = args.on == "test"
            print(_line({"space": space_name, "device": "mean", "n": n, **mean,
                         "help": PUBLISHED[space_name]["mean"] if test else None,
                         "rerun": RERUN[space_name]["mean"] if test else None,
                         "nasflat": NASFLAT[space_name] if test and n == 20 else None}))
    print("\n".join(goal_lines(rows, args.on)))
    if args.plot is not None:
        plot(rows, args.on, args.plot)
        print(f"wrote {args.plot}")
    print(f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
