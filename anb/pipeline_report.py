"""The one HTML page ``anb pipeline`` ends with: what this machine measured against what the
adapted benchmark predicts for it (with intervals), the Pareto front searched for this device
(a plot, embedded as a base64 PNG: no scripts, no external files) and the out-of-distribution
flags."""
from __future__ import annotations

import base64
import html
from pathlib import Path

import numpy as np
import pandas as pd

from anb.io import atomic_write_text

#: The interval level the report shows (``query(level=LEVEL)``'s ``_lo`` / ``_hi``).
LEVEL = 0.9


def interval(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """The central interval of ``metric`` in a query made with ``level=LEVEL``."""
    return (frame[f"{metric}_lo"].to_numpy(dtype=float),
            frame[f"{metric}_hi"].to_numpy(dtype=float))


def measured_vs_predicted(measured: pd.DataFrame, predicted: pd.DataFrame, metric: str
                          ) -> pd.DataFrame:
    """One row per measured architecture (``measured``: ``arch``, ``metric``; ``predicted``:
    the adapted benchmark's query of the same architectures, same order)."""
    lo, hi = interval(predicted, metric)
    value = measured[metric].to_numpy(dtype=float)
    return pd.DataFrame({
        "arch": measured["arch"].to_numpy(), "measured": value,
        "predicted": predicted[metric].to_numpy(dtype=float), "lo": lo, "hi": hi,
        "inside": (value >= lo) & (value <= hi),
        "ood": predicted[f"{metric}_ood"].to_numpy(dtype=bool)})


def _table(frame: pd.DataFrame, floats: str = "{:.4g}") -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for _, row in frame.iterrows():
        cells = [floats.format(v) if isinstance(v, float) else html.escape(str(v)) for v in row]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def write_report(path: Path, device: str, metric: str, table: pd.DataFrame, loo_rmse: float,
                 front: pd.DataFrame, plot: Path, objectives: list[str], notes: list[str]
                 ) -> Path:
    """Write the page to ``path`` (atomically) and return it."""
    covered = int(table["inside"].sum())
    front_cols = [c for c in front.columns
                  if c == "arch" or c.split(":")[0] in {o.split(":")[0] for o in objectives}
                  or c.endswith("_std") or c == "ood"]
    image = base64.b64encode(plot.read_bytes()).decode() if plot.is_file() else None
    figure = (f'<img alt="Pareto front on {html.escape(device)}" '
              f'src="data:image/png;base64,{image}">' if image
              else "<p>No plot: matplotlib (the search extra) is not installed.</p>")
    body = [
        f"<h1>anb pipeline: {html.escape(device)}</h1>",
        "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>",
        f"<h2>Measured vs predicted: {html.escape(metric)}</h2>",
        f"<p>{covered} of {len(table)} measured values inside the central {LEVEL:.0%} interval "
        "of the predictive distribution (log-normal: asymmetric around the median). These "
        "architectures are the ones the device model was adapted on, "
        f"so this is in-sample; its leave-one-out log error is {loo_rmse:.4f}. "
        f"<code>ood</code>: the architecture is outside the measured range.</p>",
        _table(table),
        f"<h2>Pareto front on {html.escape(device)}</h2>",
        f"<p>Objectives: {html.escape(', '.join(objectives))}; predicted by the adapted "
        "benchmark. Out-of-distribution designs (<code>ood</code>) are flagged in the table "
        "and with black crosses in the plot.</p>",
        figure,
        f"<h3>Front ({len(front)} architectures, {int(front.get('ood', pd.Series([])).sum())} "
        "flagged out of distribution)</h3>",
        _table(front[front_cols]),
    ]
    style = ("body{font-family:sans-serif;max-width:72em;margin:2em auto}"
             "table{border-collapse:collapse;font-size:.85em}"
             "td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}")
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>anb pipeline: {html.escape(device)}</title><style>{style}</style></head>"
            f"<body>\n{chr(10).join(body)}\n</body></html>\n")
    atomic_write_text(path, page)
    return path
