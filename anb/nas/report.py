"""Write a search's results: history CSV, best / Pareto front, a plot and a summary JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from anb.extras import optional
from anb.formats import VERSION_FIELD, check, stamp
from anb.io import atomic_write, atomic_write_json, read_json
from anb.nas.search import SearchResult
from anb.outputs import Kind, has_files
from anb.version import __version__

#: The results folder ``anb search`` writes and resumes (in-loop measurements are kept there;
#: see :mod:`anb.outputs`).
SEARCH = Kind("search", "anb search results", has_files("summary.json", "history.csv"))
#: ``summary.json``'s ``format``; with its ``format_version`` it versions the results folder.
SEARCH_FORMAT = "anb-search"


def summary_header() -> dict:
    """What every search's ``summary.json`` starts with: its format, version and anb's."""
    return {"format": SEARCH_FORMAT, **stamp("search"), "anb_version": __version__}


def read_summary(folder: Path) -> dict:
    """A search results folder's ``summary.json``, its format version checked (results of a
    newer anb are refused, :class:`anb.formats.NewerFormat`; those written before versions
    hold none and read as version 1)."""
    file = folder / "summary.json"
    summary = read_json(file)
    if not isinstance(summary, dict) or summary.get("format", SEARCH_FORMAT) != SEARCH_FORMAT:
        raise ValueError(f"{file}: not the summary.json of 'anb search' results")
    check("search", summary.get(VERSION_FIELD), str(file))
    return summary


def headline(summary: dict, metrics: list[str]) -> list[str]:
    """The best design with its std per metric, flagged when the surrogate extrapolates, and
    then the best design inside the data; without a feasible design, the least violating one
    and by how much it violates each constraint."""
    def shown(row: dict) -> str:
        return " ".join(f"{m}={row[m]:.4g}" + (f"+-{row[m + '_std']:.2g}" if m + "_std" in row
                                                else "") for m in metrics)

    if summary.get("feasible") is False:
        broken = ", ".join(f"{name} by {gap:.4g}" for name, gap in summary["violations"].items())
        return [f"no feasible design: none of the {summary['evaluations']} evaluated designs "
                f"meets {', '.join(summary['constraints']) or 'the constraints'}; the least "
                f"violating is {summary['best']['arch']} {shown(summary['best'])} "
                f"(violates {broken})"]

    flag = " (OUT OF DISTRIBUTION: extrapolated, not supported by the data)" \
        if summary.get("best_out_of_distribution") else ""
    lines = [f"best {summary['best']['arch']} {shown(summary['best'])}{flag}"]
    if summary.get("best_in_distribution"):
        lines.append(f"best in distribution: {summary['best_in_distribution']['arch']} "
                     + shown(summary["best_in_distribution"]))
    return lines


def write_report(result: SearchResult, out: Path) -> dict:
    """Write ``history.csv``, ``pareto.csv``, ``search.png`` (with the ``search`` extra's
    matplotlib) and ``summary.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    history = result.history()
    atomic_write(out / "history.csv", lambda tmp: history.to_csv(tmp, index=False))
    front = result.pareto_front()
    atomic_write(out / "pareto.csv", lambda tmp: front.to_csv(tmp, index=False))
    best = result.best()
    objectives = result.problem.objectives
    summary = {
        **summary_header(), "space": {"name": result.problem.space.name,
                                              "version": result.problem.space.version},
        "algorithm": result.algorithm, "seed": result.seed,
        "evaluations": len(history),
        "objectives": [str(o) for o in objectives],
        "constraints": [str(c) for c in result.problem.constraints],
        "feasible_share": float(history["feasible"].mean()),
        "feasible": bool(history["feasible"].any()),
        "best": json.loads(best.to_json()), "pareto_size": len(front), **result.info,
    }
    if not summary["feasible"]:  # "best" is then the least violating design
        summary["violations"] = result.violations(int(best["step"]))
    if "ood" in history:
        summary["best_out_of_distribution"] = bool(best["ood"])
        summary["supported_only"] = result.problem.supported_only
        summary["out_of_distribution_share"] = float(history["ood"].mean())
        if best["ood"]:
            supported = result.best_supported()
            summary["best_in_distribution"] = None if supported is None else \
                json.loads(supported.to_json())
    if len(objectives) > 1:
        volume, reference = result.hypervolume()
        summary["hypervolume"] = volume
        summary["hypervolume_reference"] = reference  # worst score per objective (max form)
    atomic_write_json(out / "summary.json", summary)
    _plot(result, history, front, out / "search.png")
    return summary


def _plot(result: SearchResult, history: pd.DataFrame, front: pd.DataFrame, path: Path) -> None:
    """The incumbent trace (one objective) or the evaluated designs and the front (two or
    more: the first two objectives); none without matplotlib (the ``search`` extra)."""
    matplotlib = optional("matplotlib")
    if matplotlib is None:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    objectives = result.problem.objectives
    fig, ax = plt.subplots(figsize=(6, 4))
    if len(objectives) == 1:
        ax.plot(result.incumbent_trace())
        ax.set(xlabel="evaluations", ylabel=f"best {objectives[0]}", title=result.algorithm)
    else:
        x, y = objectives[0].metric, objectives[1].metric
        ax.scatter(history[x], history[y], s=3, alpha=0.3, label="evaluated")
        ax.scatter(front[x], front[y], s=12, color="C3", label="Pareto front")
        if "ood" in history and history["ood"].any():
            flagged = history[history["ood"].astype(bool)]
            ax.scatter(flagged[x], flagged[y], s=14, marker="x", color="k",
                       label="out of distribution")
        if f"{x}_std" in front and f"{y}_std" in front:
            ax.errorbar(front[x], front[y], xerr=front[f"{x}_std"], yerr=front[f"{y}_std"],
                        fmt="none", ecolor="C3", alpha=0.4, lw=0.8)
        ax.set(xlabel=str(objectives[0]), ylabel=str(objectives[1]), title=result.algorithm)
        ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)
