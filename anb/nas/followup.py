"""After a search: fully train the chosen designs, re-test them on the device, and see which
designs stay on the front.

:func:`retrain` runs the accuracy trainer (a recipe of ``configs/accuracy``, default the full
one) on an explicit architecture list (a search's ``pareto.csv`` or any CSV with an ``arch``
column) and exports the results into one dataset. :func:`front_report` joins, per design, what
the search believed (surrogate accuracy, in-loop or predicted speed) with what was measured
afterwards (trained accuracy, re-measured speed from ``anb measure`` records), recomputes the
front on the measured values and names the designs that fall off it; it writes
``front_report.csv``, ``front_report.html`` (plotly) and ``summary.json``. An analytic
objective (``params``, ``macs``...: counted from the architecture, exact in the search too)
takes the search's value as its measured one (listed as ``exact`` in the summary).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from anb.extras import require
from anb.io import atomic_write, atomic_write_json, read_csv, read_json
from anb.nas.evaluators import ANALYTIC_METRICS
from anb.nas.objectives import Objective
from anb.nas.pareto import pareto_mask
from anb.nas.report import read_summary
from anb.outputs import Kind, has_files, prepare_folder
from anb.searchspace.space import ANB_SPACE

DEFAULT_RECIPE = "imagenet_full.ini"
#: The accuracy column ``front_report`` reads by default.
DEFAULT_ACCURACY_METRIC = "val_top1"
#: The folders ``anb retrain`` (resumed) and ``anb front-report`` write (see :mod:`anb.outputs`).
RETRAIN = Kind("retrain", "an anb retrain folder", has_files("archs.txt", "runs"))
FRONT_REPORT = Kind("front-report", "an anb front-report", has_files("front_report.csv"),
                    replaceable=True)


def recipe_path(config: str | Path) -> Path:
    """A recipe file, or the name of a shipped one (``configs/accuracy/<name>``)."""
    from anb.resources import config_path

    path = Path(config)
    return path if path.is_file() else config_path("accuracy", str(config))


def retrain(archs: str | Path, out: str | Path, config: str | Path = DEFAULT_RECIPE,
            extra: Sequence[str] = ()) -> tuple[int, Path | None]:
    """Train every architecture of ``archs`` under the recipe into ``<out>/runs`` and export
    ``<out>/accuracy.csv``; ``<out>/archs.txt`` lists them for ``anb measure --archs``. Return
    (trainer exit status, dataset path, or None when the trainer wrote no runs to export).
    ``out`` is new, empty or a retrain folder to resume."""
    from anb.collect_accuracy.config import load_config
    from anb.collect_accuracy.export import export
    from anb.collect_accuracy.train import main
    from anb.records import read_table, table_archs

    archs = Path(archs)
    if not archs.is_file():
        raise FileNotFoundError(f"architecture list {archs} does not exist (a search's "
                                "pareto.csv or a CSV with an 'arch' column or block{i}_* columns)")
    listed = table_archs(read_table(archs), repr(str(archs)), space=ANB_SPACE)
    recipe = recipe_path(config)
    load_config(recipe, extra)  # a bad recipe or override is refused before any folder
    out = prepare_folder(out, RETRAIN)
    atomic_write(out / "archs.txt", lambda t: t.write_text("".join(f"{a}\n" for a in listed)))
    runs = out / "runs"
    status = main(["--config", str(recipe), "--model.archs", str(archs),
                   "--logging.folder", str(runs), *extra])
    if not runs.is_dir():
        return status, None
    dataset = out / "accuracy.csv"
    export(dataset, [runs], parquet=False, space=ANB_SPACE)
    return status, dataset


def _measured_speed(folder: Path, metric: str) -> dict[str, float]:
    """Arch id -> ``metric`` (``<kind>_<device>``) in an ``anb measure`` results folder."""
    kind, _, device = metric.partition("_")
    if kind not in ("latency", "throughput") or not device:
        return {}
    found = {}
    for path in sorted((folder / device).glob("*.json")):
        perf = read_json(path).get("platform_perf", {})
        if metric in perf:
            found[path.stem] = float(perf[metric][f"{kind}_mean"])
    return found


def front_report(search: str | Path, out: str | Path, accuracy: str | Path | None = None,
                 measured: str | Path | None = None,
                 accuracy_metric: str = DEFAULT_ACCURACY_METRIC,
                 ) -> dict:
    """See module docstring. ``search``: a search's results folder (``pareto.csv``,
    ``summary.json`` naming the objectives); ``accuracy``: the trained dataset;
    ``measured``: an ``anb measure`` results folder."""
    from anb.records import load_dataset

    require("plotly", "measure", "the front report's plot")  # before anything is written
    search, out = Path(search), Path(out)
    if not (search / "pareto.csv").is_file():
        raise FileNotFoundError(f"{search}: no pareto.csv here; allowed: the results folder of "
                                "'anb search'")
    front = read_csv(search / "pareto.csv")
    objectives = [Objective.parse(o) for o in
                  read_summary(search)["objectives"]]
    if len(objectives) != 2:
        raise ValueError(f"the report needs a two-objective search; {search} has "
                         f"{[str(o) for o in objectives]}")
    _check_sources(objectives, accuracy, measured, accuracy_metric)
    table = front[["arch", "arch_id"]].copy()
    for o in objectives:
        table[f"{o.metric}_search"] = front[o.metric]
        table[f"{o.metric}_measured"] = np.nan
    if accuracy is not None:
        trained = load_dataset(accuracy, space=ANB_SPACE)
        if trained.empty or accuracy_metric not in trained:
            raise ValueError(f"--accuracy {str(accuracy)!r} holds no {accuracy_metric!r} "
                             "records; allowed: the dataset 'anb retrain' exported")
        acc = trained.set_index("arch_id")[accuracy_metric]
        table[f"{accuracy_metric}_measured"] = table["arch_id"].map(acc)
    for o in objectives:  # counted from the architecture: the search's value is exact
        if o.metric in ANALYTIC_METRICS:
            table[f"{o.metric}_measured"] = front[o.metric]
    if measured is not None:
        for o in objectives:
            if o.metric != accuracy_metric and o.metric not in ANALYTIC_METRICS:
                table[f"{o.metric}_measured"] = table["arch_id"].map(
                    _measured_speed(Path(measured), o.metric))
    cols = [f"{o.metric}_measured" for o in objectives]
    complete = table[cols].notna().all(axis=1).to_numpy()
    table["on_measured_front"] = False
    if complete.any():
        scores = np.stack([o.score(table.loc[complete, c].to_numpy(float))
                           for o, c in zip(objectives, cols, strict=True)], 1)
        table.loc[np.flatnonzero(complete)[pareto_mask(scores)], "on_measured_front"] = True
    table["falls_off"] = complete & ~table["on_measured_front"].to_numpy()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "front_report.csv", lambda t: table.to_csv(t, index=False))
    _plot(table, objectives, out / "front_report.html")
    summary = {"designs": len(table), "complete": int(complete.sum()),
               "objectives": [str(o) for o in objectives],
               "exact": [o.metric for o in objectives if o.metric in ANALYTIC_METRICS],
               "falls_off": table.loc[table["falls_off"], "arch"].tolist(),
               "missing": table.loc[~complete, "arch"].tolist()}
    for o in objectives:
        pair = table[[f"{o.metric}_search", f"{o.metric}_measured"]].dropna()
        if len(pair) >= 2 and o.metric not in ANALYTIC_METRICS:
            from scipy.stats import kendalltau

            summary[f"{o.metric}_kendall_tau"] = float(kendalltau(*pair.to_numpy().T)[0])
            summary[f"{o.metric}_mean_abs_error"] = float(pair.diff(axis=1).iloc[:, 1].abs().mean())
    atomic_write_json(out / "summary.json", summary)
    return summary


def _check_sources(objectives: list[Objective], accuracy: str | Path | None,
                   measured: str | Path | None, accuracy_metric: str) -> None:
    """Refuse an accuracy metric that is no objective of the search (when it matters) and a
    ``measured`` that is not an ``anb measure`` folder with records of a speed objective."""
    metrics = [o.metric for o in objectives]
    if accuracy_metric not in metrics and (accuracy is not None or
                                           accuracy_metric != DEFAULT_ACCURACY_METRIC):
        raise ValueError(f"--accuracy-metric {accuracy_metric!r} is not an objective of the "
                         f"search; its objectives: {metrics}")
    if measured is None:
        return
    folder = Path(measured)
    if not folder.is_dir():
        raise FileNotFoundError(f"--measured {str(measured)!r} is not a folder; allowed: the "
                                "results folder of 'anb measure'")
    speed = [m for m in metrics if m != accuracy_metric and m not in ANALYTIC_METRICS]
    if not speed:
        raise ValueError(f"--measured {str(measured)!r}: the search has no speed objective to "
                         f"compare with (its objectives: {metrics})")
    devices = [m.partition("_")[2] for m in speed]
    if not any(device and any((folder / device).glob("*.json")) for device in devices):
        raise ValueError(f"--measured {str(measured)!r} holds no records of the search's "
                         f"speed objectives {speed}; allowed: the results folder of "
                         "'anb measure' on that device")


def _plot(table: pd.DataFrame, objectives: list[Objective], path: Path) -> Path:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    a, b = (o.metric for o in objectives)
    fig = make_subplots(rows=1, cols=3, subplot_titles=(
        f"{a}: search vs measured", f"{b}: search vs measured", "front: search -> measured"))
    colour = np.where(table["falls_off"], "red", "royalblue")
    for col, m in ((1, a), (2, b)):
        x, y = table[f"{m}_search"], table[f"{m}_measured"]
        fig.add_trace(go.Scatter(x=x, y=y, mode="markers", marker={"color": colour},
                                 text=table["arch"], name=m), row=1, col=col)
        both = pd.concat([x, y]).dropna()
        if len(both):
            fig.add_trace(go.Scatter(x=[both.min(), both.max()], y=[both.min(), both.max()],
                                     mode="lines", line={"dash": "dash", "color": "grey"},
                                     showlegend=False), row=1, col=col)
        fig.update_xaxes(title_text=f"{m} (search)", row=1, col=col)
        fig.update_yaxes(title_text=f"{m} (measured)", row=1, col=col)
    fig.add_trace(go.Scatter(x=table[f"{a}_search"], y=table[f"{b}_search"], mode="markers",
                             marker={"symbol": "circle-open", "color": "grey"},
                             text=table["arch"], name="search"), row=1, col=3)
    fig.add_trace(go.Scatter(x=table[f"{a}_measured"], y=table[f"{b}_measured"],
                             mode="markers", marker={"color": colour}, text=table["arch"],
                             name="measured (red: falls off the front)"), row=1, col=3)
    fig.update_xaxes(title_text=a, row=1, col=3)
    fig.update_yaxes(title_text=b, row=1, col=3)
    fig.update_layout(title="Pareto follow-up: predicted vs measured", height=500, width=1500)
    return atomic_write(path, lambda t: fig.write_html(str(t), include_plotlyjs=True))
