"""Per-run utilisation and reports: a real onnxruntime measurement on this CPU records the peak
RSS and CPU use sampled while it ran, and ``anb measure --report`` writes an HTML page and a PNG
per architecture (time per step in run order with the warm-up marked, utilisation over the run,
quality where the record holds it)."""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_throughput.records.run_report import (
    entry_figures,
    quality_fields,
    step_times_ms,
    write_report,
    write_reports,
)
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

ARCHS = Sampler(0, space=ANB_SPACE).sample(2)
DEVICE = "report-cpu"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _config(tmp_path: Path) -> Path:
    config = tmp_path / f"{DEVICE}.toml"
    config.write_text(f"""kind = "local"
name = "{DEVICE}"
backend = "onnxruntime"
resolution = 32
threads = 1
[latency]
batch = 1
[warmup]
max_seconds = 1.0
[stopping]
min_reps = 5
budget_seconds = 0.4
""")
    return config


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """Two architectures measured on this CPU with --report (the CLI, for real)."""
    tmp = tmp_path_factory.mktemp("reports")
    result = CliRunner().invoke(app, ["measure", str(_config(tmp)), "--archs",
                                      ",".join(map(str, ARCHS)), "--out", str(tmp / "out"),
                                      "--anchors", "none", "--no-progress", "--report"])
    assert result.exit_code == 0, result.output
    assert "reports: 2 -> " in result.output
    return tmp / "out" / DEVICE


def _record(folder: Path, arch) -> dict:
    return json.loads((folder / f"{arch.id}.json").read_text())


def test_local_measurement_records_peak_rss_and_cpu_over_the_run(measured):
    """Bug class: no memory footprint or CPU use in a local record, a peak read from the
    process lifetime, or a sampler that misses part of the run."""
    entry = _record(measured, ARCHS[0])["platform_perf"][f"latency_{DEVICE}"]
    stats = entry["utilisation"]
    samples = stats["samples"]
    assert stats["peak_rss_source"] == "VmHWM"
    assert entry["peak_rss_bytes"] == stats["peak_rss_bytes"] >= \
        max(s["rss_bytes"] for s in samples) >= stats["rss_start_bytes"] > 0
    # sampled from warm-up to the last repetition, every 0.1 s
    assert samples[-1]["t"] >= 0.9 * entry["elapsed_seconds"]
    assert len(samples) >= int(entry["elapsed_seconds"] / 0.1) // 2
    # one onnxruntime thread busy timing: the process uses the CPU, the mean is the samples'
    cpu = [s["process_cpu_percent"] for s in samples]
    assert stats["mean_process_cpu_percent"] == pytest.approx(sum(cpu) / len(cpu))
    assert stats["mean_process_cpu_percent"] > 5  # busy, even on a shared machine
    assert "shared_by" not in stats


def test_report_pages_hold_the_records_figures_and_an_embedded_png(measured):
    """Bug class: a report whose figures are not the record's, a missing or broken PNG, or a
    page that needs files beside it."""
    reports = measured / "reports"
    for arch in ARCHS:
        record = _record(measured, arch)
        entry = record["platform_perf"][f"latency_{DEVICE}"]
        page = (reports / f"{arch.id}.html").read_text()
        png = (reports / f"{arch.id}.png").read_bytes()
        assert png.startswith(PNG_MAGIC)
        embedded = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
        assert embedded and base64.b64decode(embedded.group(1)) == png
        assert str(arch) in page
        row = entry_figures(f"latency_{DEVICE}", entry)
        assert row["peak RSS (MiB)"] == round(entry["peak_rss_bytes"] / 2 ** 20, 1)
        assert f"<td>{row['peak RSS (MiB)']:.4g}</td>" in page
        assert f"<td>{entry['latency_mean']:.4g}</td>" in page
        assert f"<td>{len(entry['warmup_times_s'])}</td>" in page
        assert "not measured in this record" in page  # no quality measured here
    index = (reports / "index.html").read_text()
    assert all(f"href='{a.id}.html'" in index for a in ARCHS)
    # reports are not records: the results folder still merges
    from anb.records import load_records

    assert len(load_records(measured, space=ANB_SPACE)) == 2


def test_steps_are_in_run_order_with_the_warmup_first(measured):
    entry = _record(measured, ARCHS[0])["platform_perf"][f"latency_{DEVICE}"]
    warm, timed = step_times_ms(entry)
    assert warm.tolist() == [t * 1e3 for t in entry["warmup_times_s"]]
    assert timed.tolist() == [t * 1e3 for t in entry["raw_times_s"]]
    assert len(warm) >= 1 and len(timed) == entry["n"]


def test_report_shows_quality_where_the_record_holds_it(measured, tmp_path):
    """Bug class: quality measured on the device left out of the report."""
    record = _record(measured, ARCHS[0])
    record["quality"] = {"top1": 0.8125, "images": 64}
    record[f"val_top1_{DEVICE}"] = 0.7969
    record["platform_perf"][f"latency_{DEVICE}"]["agreement_top1"] = 0.953
    found = quality_fields(record, {f"latency_{DEVICE}": record["platform_perf"][
        f"latency_{DEVICE}"]})
    assert found == {"quality.top1": 0.8125, "quality.images": 64,
                     f"val_top1_{DEVICE}": 0.7969,
                     f"latency_{DEVICE}.agreement_top1": 0.953}
    page = write_report(record, ARCHS[0].id, DEVICE, tmp_path)[0].read_text()
    for value in ("0.8125", "0.7969", "0.953", f"val_top1_{DEVICE}"):
        assert value in page
    assert "not measured in this record" not in page


def test_a_record_without_the_devices_entries_is_refused(measured, tmp_path):
    record = _record(measured, ARCHS[0])
    with pytest.raises(ValueError, match=rf"record {ARCHS[0].id}: no latency_other or "
                                         r"throughput_other entry"):
        write_report(record, ARCHS[0].id, "other", tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_reports_of_a_resumed_run_keep_the_index_whole(measured, tmp_path):
    """The index lists every report in the folder, not only this run's."""
    write_reports(measured, [ARCHS[1].id])
    index = (measured / "reports" / "index.html").read_text()
    assert all(f"href='{a.id}.html'" in index for a in ARCHS)


def test_interleaved_blocks_say_their_utilisation_is_shared(tmp_path):
    from anb.collect_throughput.targets.devices import load_any_device
    from anb.collect_throughput.targets.local import measure_interleaved

    device = load_any_device(_config(tmp_path), {"stopping": {"budget_seconds": 0.2}},
                             space=ANB_SPACE.name)
    ms = measure_interleaved(ARCHS, device.protocols[0], tmp_path)
    assert [m.extra["utilisation"]["shared_by"] for m in ms] == [2, 2]
    assert ms[0].extra["peak_rss_bytes"] == ms[1].extra["peak_rss_bytes"] > 0
