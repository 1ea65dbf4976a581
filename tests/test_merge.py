"""``anb merge``: round trip with the released dataset plus new CPU columns; conflicts and gaps."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_throughput.records.merge import MergeConflict, merge_records
from anb.collect_throughput.targets.base import RunSettings
from anb.collect_throughput.targets.local import LocalTarget
from anb.collect_throughput.targets.protocol_target import Schedule
from anb.collect_throughput.timing.protocol import load_device
from anb.records import load_dataset, load_records, model_info
from anb.searchspace.arch import as_arch
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

runner = CliRunner()
FAST = {"resolution": 64, "batch": 2, "stopping": {"budget_seconds": 0.2, "min_reps": 5},
        "warmup": {"max_seconds": 2.0}}


@pytest.fixture(scope="module")
def measured(tmp_path_factory, released_records):
    """Real cpu-ort results for two released architectures (one trained twice) and one new one."""
    out = tmp_path_factory.mktemp("results")
    duplicate = as_arch(released_records[0], ANB_SPACE)  # result_0 and result_443 share it
    archs = [duplicate, as_arch(released_records[100], ANB_SPACE),
             Sampler(11, space=ANB_SPACE).sample(1)[0]]
    LocalTarget(load_device("cpu-ort", FAST, space=ANB_SPACE.name), Schedule(anchors=())).measure(
        archs, out, RunSettings(progress=False))
    return out, archs


@pytest.mark.slow
def test_merge_round_trip_with_released_dataset(measured, dataset_tarball, released_frame,
                                                tmp_path):
    results, archs = measured
    result = runner.invoke(app, ["merge", str(results), "--accuracy", str(dataset_tarball),
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "merged 5139 records" in result.output and "conflicts 0" in result.output
    report = json.loads((tmp_path / "merge_report.json").read_text())
    assert report["keys_added"] == ["latency_cpu-ort", "throughput_cpu-ort"]
    assert report["device_only"] == [archs[2].id]
    assert len(report["duplicate_accuracy_archs"]) == 13
    assert report["gaps"]["throughput_cpu-ort"] == 5125 - 2  # every released arch but two
    assert report["gaps"]["throughput_tpuv2"] >= 37

    for table in (tmp_path / "dataset.csv", tmp_path / "dataset.parquet", tmp_path / "records"):
        frame = load_dataset(table, space=ANB_SPACE)
        assert len(frame) == 5139
        released = frame[frame["source"].str.startswith("result_")].set_index("source")
        ref = released_frame.set_index("source")
        for column in ("val_top1", "macs", "throughput_a100", "latency_zcu102"):
            pd.testing.assert_series_equal(released[column].sort_index(), ref[column].sort_index(),
                                           check_names=False)
        rows = frame[frame["arch_id"] == archs[0].id]
        assert len(rows) == 2 and rows["throughput_cpu-ort"].notna().all()
        assert rows["val_top1"].nunique() == 2  # both trainings kept, both get the measurement
        new = frame[frame["arch_id"] == archs[2].id]
        assert new["val_top1"].isna().all() and new["latency_cpu-ort"].notna().all()
        # a record without accuracy still has its analytic MACs and params
        info = model_info(archs[2], space=ANB_SPACE)
        assert new[["macs", "params"]].iloc[0].tolist() == list(info.values())
    records = {r["source"]: r for r in load_records(tmp_path / "records", space=ANB_SPACE)}
    full = records["result_0.json"]["platform_perf"]["latency_cpu-ort"]
    assert full["raw_times_s"] and full["environment"]["cpu"]  # the JSON keeps everything


def test_conflicts_are_reported_and_policies_apply(measured, released_records, tmp_path):
    results, archs = measured
    original = load_records(results, space=ANB_SPACE)
    altered = json.loads(json.dumps(original))
    for record in altered:
        record["platform_perf"]["latency_cpu-ort"]["latency_mean"] *= 2
        record["source"] = "rerun/" + record["source"]
    accuracy = released_records[:1] + released_records[100:101]
    merged, report = merge_records(accuracy, original + altered, space=ANB_SPACE)
    assert len(report.conflicts) == 3
    assert {c["key"] for c in report.conflicts} == {"latency_cpu-ort"}
    by_id = {as_arch(r, ANB_SPACE).id: r for r in merged}
    first = {as_arch(r, ANB_SPACE).id: r for r in original}
    assert by_id[archs[1].id]["platform_perf"]["latency_cpu-ort"]["latency_mean"] == \
        first[archs[1].id]["platform_perf"]["latency_cpu-ort"]["latency_mean"]
    merged, _ = merge_records(accuracy, original + altered, on_conflict="replace", space=ANB_SPACE)
    by_id = {as_arch(r, ANB_SPACE).id: r for r in merged}
    assert by_id[archs[1].id]["platform_perf"]["latency_cpu-ort"]["latency_mean"] == \
        2 * first[archs[1].id]["platform_perf"]["latency_cpu-ort"]["latency_mean"]
    with pytest.raises(MergeConflict, match="latency_cpu-ort"):
        merge_records(accuracy, original + altered, on_conflict="error", space=ANB_SPACE)
    # a device result disagreeing with a released value is a conflict too
    clash = json.loads(json.dumps(first[archs[0].id]))
    clash["platform_perf"] = {"throughput_a100": {"throughput_mean": 1.0, "throughput_std": 0.0}}
    _, report = merge_records(released_records[:1], [clash], space=ANB_SPACE)
    assert [c["key"] for c in report.conflicts] == ["throughput_a100"]


def test_merge_cli_errors_are_one_line(tmp_path):
    result = runner.invoke(app, ["merge", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "nope" in result.output
    result = runner.invoke(app, ["merge", str(tmp_path), "--out", str(tmp_path / "o"),
                                 "--on-conflict", "coin-flip"])
    assert result.exit_code == 2 and "coin-flip" in result.output


def test_model_info_is_the_released_convention(released_records):
    for record in released_records[:50]:
        assert model_info(as_arch(record, ANB_SPACE),
                          space=ANB_SPACE) == pytest.approx(record["model_info"], abs=1e-6)
