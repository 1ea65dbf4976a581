"""Per-run reports of measured records (``anb measure --report``): one HTML page and one PNG per
architecture under ``<out>/<device>/reports/``, and an ``index.html`` linking them.

For every ``platform_perf`` entry of the device the PNG shows the time of each step in the
order it ran (warm-up steps, then the timed repetitions, the boundary marked) and the
utilisation sampled over the run (this process's and the machine's CPU %, resident memory and
its peak; see :class:`~anb.collect_throughput.board.runner.Sampler`). The HTML page embeds the
PNG and tabulates the figures: the value and its spread, the stopping reasons, the peak RSS,
the mean CPU use and, where the record holds them, quality fields (``quality``,
``val_top1_<device>``...). Only the record is read, so a report works for any target.
"""
from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from anb.io import atomic_write_bytes, atomic_write_text, read_json

REPORTS = "reports"
"""The folder under ``<out>/<device>/`` the reports go to."""
QUALITY_PREFIXES = ("quality", "val_top1_", "val_top5_", "top1_", "top5_", "agreement")
"""Record or entry fields shown as quality when present (another stage measures them)."""
MIB = 2 ** 20


def device_entries(record: Mapping[str, Any], device: str) -> dict[str, dict[str, Any]]:
    """The record's ``platform_perf`` entries of ``device`` (``latency_<device>`` and
    ``throughput_<device>``), in that order."""
    perf = record.get("platform_perf", {})
    return {key: perf[key] for key in (f"latency_{device}", f"throughput_{device}")
            if isinstance(perf.get(key), Mapping)}


def step_times_ms(entry: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The warm-up steps' and the timed repetitions' per-step times (ms), in run order."""
    warm = np.asarray(entry.get("warmup_times_s", []), dtype=float) * 1e3
    timed = np.asarray(entry.get("raw_times_s", []), dtype=float) * 1e3
    return warm, timed


def quality_fields(record: Mapping[str, Any], entries: Mapping[str, Mapping[str, Any]],
                   ) -> dict[str, Any]:
    """Quality figures found in the record or its entries (flattened one level: a
    ``quality`` table's ``top1`` becomes ``quality.top1``)."""
    found: dict[str, Any] = {}
    for where, table in [("", record), *((f"{k}.", e) for k, e in entries.items())]:
        for name, value in table.items():
            if not str(name).startswith(QUALITY_PREFIXES):
                continue
            if isinstance(value, Mapping):
                found.update({f"{where}{name}.{k}": v for k, v in value.items()
                              if isinstance(v, (int, float, str, bool))})
            elif isinstance(value, (int, float, str, bool)):
                found[f"{where}{name}"] = value
    return found


def _figure(entries: Mapping[str, Mapping[str, Any]], title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(entries), 2, figsize=(12, 3.6 * len(entries)), squeeze=False)
    for row, (key, entry) in zip(axes, entries.items(), strict=True):
        warm, timed = step_times_ms(entry)
        ax = row[0]
        ax.plot(np.arange(len(warm)), warm, ".", color="tab:orange", label="warm-up step")
        ax.plot(len(warm) + np.arange(len(timed)), timed, ".-", color="tab:blue",
                label=f"timed repetition (x{entry.get('inner', 1)} steps)")
        ax.axvline(len(warm) - 0.5, color="grey", ls="--", lw=1)
        ax.set(xlabel="step (in run order)", ylabel="time per step (ms)", title=key)
        ax.legend(fontsize=8)
        _utilisation_axes(row[1], entry)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


def _utilisation_axes(ax: Any, entry: Mapping[str, Any]) -> None:
    stats = entry.get("utilisation") or {}
    samples = stats.get("samples") or []
    if not samples:
        ax.text(0.5, 0.5, "no utilisation sampled", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return
    t = [s["t"] for s in samples]
    for field, label, colour in (("process_cpu_percent", "process CPU %", "tab:blue"),
                                 ("system_cpu_percent", "machine CPU %", "tab:grey")):
        values = [np.nan if s.get(field) is None else s[field] for s in samples]
        ax.plot(t, values, color=colour, label=label)
    warm_s = float(np.sum(entry.get("warmup_times_s", [])))
    ax.axvline(warm_s, color="grey", ls="--", lw=1, label="~end of warm-up")
    ax.set(xlabel="time since the run began (s)", ylabel="CPU %",
           title="utilisation over the run")
    mem = ax.twinx()
    rss = [np.nan if s.get("rss_bytes") is None else s["rss_bytes"] / MIB for s in samples]
    mem.plot(t, rss, color="tab:green", label="RSS (MiB)")
    if entry.get("peak_rss_bytes"):
        mem.axhline(entry["peak_rss_bytes"] / MIB, color="tab:green", ls=":",
                    label=f"peak RSS ({stats.get('peak_rss_source', 'sampled')})")
    mem.set_ylabel("resident memory (MiB)")
    mem.set_ylim(bottom=0, top=1.15 * max([r for r in rss if r == r] +
                                          [(entry.get("peak_rss_bytes") or 0) / MIB, 1]))
    ax.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    more = mem.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="lower right")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def entry_figures(key: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """One table row of an entry's figures (also the index's)."""
    kind = key.split("_", 1)[0]
    stats = entry.get("utilisation") or {}
    peak = entry.get("peak_rss_bytes")
    return {"key": key, "value": entry.get(f"{kind}_mean"), "unit": entry.get("unit"),
            "std": entry.get(f"{kind}_std"), "cv": entry.get("cv"), "ci_rel": entry.get("ci_rel"),
            "repetitions": entry.get("n"), "inner": entry.get("inner"),
            "warm-up steps": len(entry.get("warmup_times_s", [])),
            "warm-up stop": entry.get("warmup_stop_reason"), "stop": entry.get("stop_reason"),
            "peak RSS (MiB)": round(peak / MIB, 1) if peak else None,
            "process CPU % (mean)": stats.get("mean_process_cpu_percent"),
            "machine CPU % (mean)": stats.get("mean_system_cpu_percent"),
            "fingerprint": entry.get("protocol_fingerprint")}


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r.values())
                   + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


STYLE = ("<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;"
         "margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}"
         "img{max-width:100%}</style>")


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title>{STYLE}</head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n")


def write_report(record: Mapping[str, Any], arch_id: str, device: str, folder: str | Path,
                 ) -> tuple[Path, Path]:
    """``<arch_id>.html`` and ``<arch_id>.png`` of ``record``'s ``device`` entries in
    ``folder`` (written atomically); a record with none of them is an error naming it."""
    arch = record.get("provenance", {}).get("throughput", {}).get("arch", arch_id)
    entries = device_entries(record, device)
    if not entries:
        raise ValueError(f"record {arch_id}: no latency_{device} or throughput_{device} entry "
                         "to report")
    title = f"{device}: {arch}"
    png = _figure(entries, title)
    folder = Path(folder)
    png_path = atomic_write_bytes(folder / f"{arch_id}.png", png)
    quality = quality_fields(record, entries)
    env = next(iter(entries.values())).get("environment", {})
    facts = {k: env.get(k) for k in ("host", "cpu", "board_runtime", "transport", "device_name")
             if env.get(k) is not None}
    body = (f"<p>architecture <code>{html.escape(str(arch))}</code> "
            f"(id {html.escape(arch_id)}), measured at "
            f"{html.escape(_fmt(next(iter(entries.values())).get('measured_at')))}</p>"
            f"<h2>Figures</h2>{_table([entry_figures(k, e) for k, e in entries.items()])}"
            f"<h2>Quality</h2>"
            + (_table([{"field": k, "value": v} for k, v in quality.items()]) if quality
               else "<p>not measured in this record</p>")
            + f"<h2>Where</h2>{_table([{'field': k, 'value': v} for k, v in facts.items()])}"
            f"<h2>Over the run</h2><img alt='time per step and utilisation over the run' "
            f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    html_path = atomic_write_text(folder / f"{arch_id}.html", _page(title, body))
    return html_path, png_path


def write_reports(device_folder: str | Path, arch_ids: Iterable[str]) -> list[Path]:
    """Reports of the records ``<device_folder>/<arch_id>.json`` of ``arch_ids`` into
    ``<device_folder>/reports/`` (one HTML + PNG each) and its ``index.html`` (every report in
    that folder); returns the HTML pages written."""
    device_folder = Path(device_folder)
    device, folder = device_folder.name, device_folder / REPORTS
    pages = [write_report(read_json(device_folder / f"{arch_id}.json"), arch_id, device,
                          folder)[0] for arch_id in arch_ids]
    rows = []
    for page in sorted(folder.glob("*.html")):
        if page.name == "index.html":
            continue
        record_path = device_folder / f"{page.stem}.json"
        if not record_path.is_file():
            continue
        for key, entry in device_entries(read_json(record_path), device).items():
            rows.append({"report": page.name, **entry_figures(key, entry)})
    links = "".join(f"<li><a href='{html.escape(r['report'])}'>{html.escape(r['report'])}</a> "
                    f"{html.escape(r['key'])}</li>" for r in rows)
    atomic_write_text(folder / "index.html",
                      _page(f"{device}: measurement reports",
                            _table([{k: v for k, v in r.items() if k != 'fingerprint'}
                                    for r in rows]) + f"<ul>{links}</ul>"))
    return pages
