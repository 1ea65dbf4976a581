"""Evaluation reports: a metrics table (CSV + Markdown) and one parity plot per target."""
from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from anb.extras import require
from anb.io import atomic_write, atomic_write_text
from anb.outputs import Kind, has_files
from anb.surrogates.benchmark import SurrogateBenchmark
from anb.surrogates.fit import Prepared
from anb.surrogates.intervals import LEVEL

#: The folder ``anb evaluate --report`` writes (see :mod:`anb.outputs`).
REPORT = Kind("evaluate-report", "an anb evaluate report", has_files("metrics.csv"),
              replaceable=True)


def markdown_table(frame: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub Markdown table (no extra dependency)."""
    frame = frame.reset_index()
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(f"{v:.{digits}f}" if isinstance(v, (float, np.floating)) else str(v)
                              for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def parity_plots(bench: SurrogateBenchmark, prepared: Prepared, folder: Path,
                 split: str = "test") -> list[Path]:
    """One PNG per target: predicted vs measured with the central 90 % interval as error
    bars (:mod:`anb.surrogates.intervals`)."""
    require("matplotlib", "fit", "parity plots").use("Agg")
    import matplotlib.pyplot as plt

    mask = prepared.masks[split]
    names = [t for t in bench.metrics if t in prepared.labels]
    pred = bench.query(prepared.choices[mask], names, level=LEVEL)
    paths = []
    for target in names:
        lab = prepared.labels[target]
        ok = lab.present[mask]
        y, mu = lab.values[mask][ok], pred[target].to_numpy()[ok]
        below = mu - pred[f"{target}_lo"].to_numpy()[ok]  # the central interval: asymmetric
        above = pred[f"{target}_hi"].to_numpy()[ok] - mu  # for a log target
        fig, ax = plt.subplots(figsize=(4.2, 4.2), dpi=110)
        ax.errorbar(y, mu, yerr=np.stack([below, above]), fmt=".", ms=3, alpha=0.5,
                    elinewidth=0.5)
        lo, hi = float(min(y.min(), mu.min())), float(max(y.max(), mu.max()))
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xlabel(f"measured {target}")
        ax.set_ylabel(f"predicted {target}")
        ax.set_title(f"{target} ({split}, n={len(y)})", fontsize=9)
        fig.tight_layout()
        path = folder / f"parity_{target}.png"
        atomic_write(path, partial(fig.savefig, format="png"))
        plt.close(fig)
        paths.append(path)
    return paths


def write_report(metrics: pd.DataFrame, folder: str | Path, name: str = "metrics") -> list[Path]:
    """Write ``<name>.csv`` and ``<name>.md`` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    csv = atomic_write_text(folder / f"{name}.csv", metrics.to_csv())
    md = atomic_write_text(folder / f"{name}.md", markdown_table(metrics))
    return [csv, md]
