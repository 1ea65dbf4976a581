"""What makes measured numbers comparable (issue 12): protocol fingerprints on resume and merge
(item 3), work files (item 7), machine state and pinning (item 8), per-request latency (item 9)
and anchor architectures re-measured per block, with the drift ``anb merge`` reports."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_throughput.backends.torch_backend import TorchBackend
from anb.collect_throughput.records.anchors import ANCHORS, anchor_drift, read_anchor_rows
from anb.collect_throughput.records.folder import ProtocolMismatch
from anb.collect_throughput.records.merge import MixedProtocols, merge_records
from anb.collect_throughput.targets.base import RunSettings
from anb.collect_throughput.targets.local import LocalTarget, measure
from anb.collect_throughput.targets.protocol_target import Schedule
from anb.collect_throughput.timing.environment import parse_nvidia_smi
from anb.collect_throughput.timing.protocol import (
    FINGERPRINT_FIELDS,
    LATER_FINGERPRINT_FIELDS,
    Protocol,
    StoppingRule,
    WarmupRule,
    load_device,
    protocol_difference,
)
from anb.searchspace.arch import EFFICIENTNET_B0, as_arch
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

runner = CliRunner()
ARCHS = Sampler(5, space=ANB_SPACE).sample(3)
NO_ANCHORS, QUIET = Schedule(anchors=()), RunSettings(progress=False)
FAST = {"resolution": 32, "batch": 1, "stopping": {"budget_seconds": 0.1, "min_reps": 3,
                                                    "min_rep_seconds": 0.0},
        "warmup": {"max_seconds": 1.0, "min_steps": 2, "window": 1}}


def _device(**changes):
    return load_device("cpu-ort", {**FAST, **changes}, space=ANB_SPACE.name)


def _records(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "cpu-ort").glob("*.json")}


# field: (settings that make the change valid, applied to both sides; the change itself)
FINGERPRINT_CASES = {
    "device": ({}, {"device": "cpu-ort2"}),
    "backend": ({}, {"backend": "torch"}),
    "kind": ({}, {"kind": "throughput"}),
    "batch": ({}, {"batch": 2}),
    "resolution": ({}, {"resolution": 64}),
    "precision": ({}, {"precision": "fp16"}),
    "threads": ({"clock": "wall"}, {"threads": 2}),
    "layout": ({}, {"layout": "channels_last"}),
    "inputs": ({"imagenet_dir": "/data/a"}, {"inputs": "imagenet"}),
    "clock": ({"clock": "wall"}, {"clock": "cpu"}),
    "pinned": ({"pinned": True}, {"pinned": False}),
    "compile": ({}, {"compile": True}),
    "cudnn_benchmark": ({"cudnn_benchmark": True}, {"cudnn_benchmark": False}),
    "allow_fallbacks": ({"allow_fallbacks": False}, {"allow_fallbacks": True}),
    "calibration_images": ({}, {"calibration_images": 32}),
    "quantization": ({"quantization": "per-channel"}, {"quantization": "dpu"}),
    "warmup": ({}, {"warmup": WarmupRule(min_steps=7)}),
    "stopping": ({}, {"stopping": StoppingRule(budget_seconds=0.5)}),
    "cuda_graphs": ({"backend": "cuda", "clock": "wall"}, {"cuda_graphs": True}),
    "space": ({}, {"space": "nasbench201"}),
}


#: The fingerprints of the shipped device configs, as stored results carry them.
SHIPPED_FINGERPRINTS = {
    "3090": {"latency_3090": "109083a304188e8a", "throughput_3090": "b2b1e9224fe72921"},
    "a100": {"latency_a100": "f290b20cf3ccf20b", "throughput_a100": "3e79b4bb72cc3737"},
    "cpu-int8": {"latency_cpu-int8": "23d211fe592369c1",
                 "throughput_cpu-int8": "bcaf6d6008d32b38"},
    "cpu-ort": {"latency_cpu-ort": "636c634d2f4255de", "throughput_cpu-ort": "35ea32c6bddafdd5"},
    "cpu-torch": {"latency_cpu-torch": "51648fba3badf249",
                  "throughput_cpu-torch": "d15fe432a844b6a6"},
    "h100": {"latency_h100": "04fb096770ab5059", "throughput_h100": "89e5a2a338b0f5e5"},
    "rpi4-ort": {"latency_rpi4-ort": "e6166a3820f5ee3d", "throughput_rpi4-ort": "90aa7ff3b73a3314"},
    "tpuv2": {"throughput_tpuv2": "3d9e66a9fb8b71d3"},
    "tpuv3": {"throughput_tpuv3": "42203b62fc6808bb"},
}


@pytest.mark.parametrize("device", sorted(SHIPPED_FINGERPRINTS))
def test_shipped_device_fingerprints_are_pinned(device):
    """Catches: a change to the fingerprint code (or a shipped config) that moves every
    fingerprint at once: equality checks between two freshly computed fingerprints still pass,
    but results stored before no longer resume or merge. Literal hex strings."""
    protocols = load_device(device, space=ANB_SPACE.name).protocols
    assert {p.key: p.fingerprint for p in protocols} == SHIPPED_FINGERPRINTS[device]


def test_fingerprint_follows_every_setting_that_changes_the_number():
    """One case per fingerprinted field; each changes exactly that setting (so removing any
    field from FINGERPRINT_FIELDS, or a later field from LATER_FINGERPRINT_FIELDS, fails)."""
    base = next(iter(_device().protocols))
    assert base.fingerprint == next(iter(_device().protocols)).fingerprint
    for name, (setup, change) in FINGERPRINT_CASES.items():
        before = base.replace(**setup)
        after = before.replace(**change)
        assert getattr(after, name) != getattr(before, name), name  # the case changes it
        changed = {k for k, v in after.as_dict().items() if before.as_dict()[k] != v}
        assert changed == {name}, (name, changed)  # and nothing else
        assert after.fingerprint != before.fingerprint, name
        assert protocol_difference(before.as_dict(), after.as_dict()).startswith(name), name
    # a field added to the fingerprint needs its case here
    assert set(FINGERPRINT_CASES) == {*FINGERPRINT_FIELDS, *LATER_FINGERPRINT_FIELDS}
    # where the images lie is not part of the protocol
    a = base.replace(inputs="imagenet", imagenet_dir="/data/a")
    assert a.fingerprint == base.replace(inputs="imagenet", imagenet_dir="/b").fingerprint


def test_resume_never_reuses_a_result_of_another_protocol(tmp_path):
    summary = LocalTarget(_device(), NO_ANCHORS).measure(ARCHS[:1], tmp_path, QUIET)
    assert summary.measured == [ARCHS[0].id]
    entry = _records(tmp_path)[ARCHS[0].id]["platform_perf"]["latency_cpu-ort"]
    assert entry["protocol_fingerprint"] == next(iter(_device().protocols)).fingerprint
    again = LocalTarget(_device(), NO_ANCHORS).measure(ARCHS[:1], tmp_path, QUIET)
    assert again.skipped == [ARCHS[0].id]
    with pytest.raises(ProtocolMismatch, match=r"resolution: 32 -> 64"):
        LocalTarget(_device(resolution=64), NO_ANCHORS).measure(ARCHS[:1], tmp_path, QUIET)
    result = runner.invoke(app, ["measure", "cpu-ort", "--archs", str(ARCHS[0]), "--out",
                                 str(tmp_path), "--resolution", "32", "--batch", "1",
                                 "--budget", "0.5", "--no-progress", "--anchors", "none"])
    assert result.exit_code == 2 and "stopping.budget_seconds: 0.1 -> 0.5" in result.output


@pytest.mark.slow
def test_merge_refuses_two_protocols_in_one_column(tmp_path):
    LocalTarget(_device(), NO_ANCHORS).measure(ARCHS[:1], tmp_path / "a", QUIET)
    LocalTarget(_device(resolution=64), NO_ANCHORS).measure(ARCHS[1:2], tmp_path / "b", QUIET)
    from anb.collect_throughput.records.merge import load_results

    results = load_results([tmp_path / "a", tmp_path / "b"], space=ANB_SPACE)
    fps = {r["platform_perf"]["latency_cpu-ort"]["protocol_fingerprint"] for r in results}
    assert len(fps) == 2
    with pytest.raises(MixedProtocols) as err:
        merge_records([], results, space=ANB_SPACE)
    for fp in fps:
        assert fp in str(err.value)
    assert "resolution: 32 -> 64" in str(err.value) or "resolution: 64 -> 32" in str(err.value)
    cli = runner.invoke(app, ["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                              str(tmp_path / "m")])
    assert cli.exit_code == 2 and "--allow-mixed-protocols" in cli.output
    assert not (tmp_path / "m" / "records").exists()
    _, report = merge_records([], results, allow_mixed_protocols=True, space=ANB_SPACE)
    assert sorted(report.protocols["latency_cpu-ort"]) == sorted(fps)


@pytest.mark.slow
def test_work_files_are_removed_unless_kept(tmp_path):
    work = tmp_path / "work"
    LocalTarget(_device(), Schedule(anchors=())).measure(
        ARCHS[:2], tmp_path / "a", RunSettings(workdir=work, progress=False))
    assert list(work.glob("*.onnx")) == []
    LocalTarget(_device(), Schedule(anchors=())).measure(
        ARCHS[:2], tmp_path / "b", RunSettings(workdir=work, progress=False, keep_work=True))
    assert sorted(p.name for p in work.glob("*.onnx")) == sorted(f"{a.id}_fp32.onnx"
                                                                 for a in ARCHS[:2])


@pytest.mark.slow
def test_records_carry_machine_state_and_pinned_configs_pin(tmp_path):
    before = os.sched_getaffinity(0)
    summary = LocalTarget(_device(), NO_ANCHORS).measure(ARCHS[:1], tmp_path, QUIET)
    assert os.sched_getaffinity(0) == before  # restored after the run
    assert summary.pinned_cpus == [max(before)]
    entry = _records(tmp_path)[ARCHS[0].id]["platform_perf"]["throughput_cpu-ort"]
    env = entry["environment"]
    assert env["cpu_affinity"] == [max(before)]  # measured while pinned
    assert env["cpu"] and "cpu_governor" in env
    for state in (env["state_start"], env["state_end"]):
        assert "load_average" in state and isinstance(state["busy_processes"], list)
    unpinned = LocalTarget(_device(pinned=False), Schedule(anchors=())).measure(
        ARCHS[1:2], tmp_path / "u", RunSettings(progress=False))
    assert unpinned.pinned_cpus is None


def test_nvidia_smi_state_is_parsed():
    """The GPU state query (its output format; the command itself waits for a GPU)."""
    line = "NVIDIA A100-SXM4-40GB, 535.104.05, P0, 1410, 1215, 1410, 65.30, 400.00, 34, 0"
    (row,) = parse_nvidia_smi(line + "\n")
    assert row["name"] == "NVIDIA A100-SXM4-40GB" and row["clocks.sm"] == "1410"
    assert row["power.draw"] == "65.30" and row["temperature.gpu"] == "34"


class SyncCountingBackend(TorchBackend):
    """The real CPU back-end with a counting stand-in for a device sync (no async device
    here): latency must sync after every request, throughput never."""

    def __init__(self):
        self.syncs = 0

    def sync(self):
        def count():
            self.syncs += 1
        return count


def test_latency_synchronises_every_request(tmp_path):
    protocol = Protocol(device="cpu-torch", backend="torch", kind="latency", resolution=32,
                        warmup=WarmupRule(min_steps=2, window=1, max_seconds=1.0),
                        stopping=StoppingRule(min_reps=3, max_reps=3, budget_seconds=1.0,
                                              min_rep_seconds=0.1))
    backend = SyncCountingBackend()
    m = measure(ARCHS[0], protocol, tmp_path, backend)
    requests = len(m.warmup_times_s) + len(m.times_s) * m.inner
    assert m.inner > 1 and backend.syncs == requests
    backend = SyncCountingBackend()
    measure(ARCHS[0], protocol.replace(kind="throughput"), tmp_path, backend)
    assert backend.syncs == 0


@pytest.mark.slow
def test_anchors_are_measured_per_block_and_stored_with_results(tmp_path):
    # two small anchors: what is checked is where they are measured and stored, not their size
    anchors = (as_arch("e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1", ANB_SPACE), ARCHS[2])
    summary = LocalTarget(_device(), Schedule(anchors=anchors, anchor_every=1)).measure(
        ARCHS[:2], tmp_path, RunSettings(progress=False))
    assert len(summary.anchor_sessions) == 2  # one before each architecture
    rows = read_anchor_rows(tmp_path / "cpu-ort" / "anchors.jsonl")
    assert len(rows) == 2 * 2 * 2  # sessions x anchors x kinds
    assert {r["arch_id"] for r in rows} == {a.id for a in anchors}
    records = _records(tmp_path)
    sessions = [records[a.id]["platform_perf"]["latency_cpu-ort"]["anchor_session"]
                for a in ARCHS[:2]]
    assert sessions == summary.anchor_sessions
    assert set(records) == {a.id for a in ARCHS[:2]}  # anchors are not result records
    merged = runner.invoke(app, ["merge", str(tmp_path), "--out", str(tmp_path / "m")])
    assert merged.exit_code == 0, merged.output
    assert "anchors: latency_cpu-ort: 2 session(s)" in merged.output
    report = json.loads((tmp_path / "m" / "merge_report.json").read_text())
    assert len(report["anchor_drift"]["throughput_cpu-ort"]["sessions"]) == 2


def test_default_anchors_are_efficientnet_b0_and_the_extremes():
    from anb.searchspace.counting import count

    macs = [count(a, space=ANB_SPACE).macs for a in ANCHORS]
    assert ANCHORS[0] == EFFICIENTNET_B0 and macs[1] < macs[0] < macs[2]


def test_anchor_drift_reports_a_slower_machine():
    rows = []
    for session, host, speed, t in (("s1", "a", 1.0, "2026-01-01"), ("s2", "b", 0.9, "2026-01-02")):
        for arch, value in (("x", 100.0), ("y", 50.0), ("z", 10.0)):
            rows.append({"session": session, "host": host, "arch_id": arch,
                         "key": "throughput_d", "value": value * speed, "measured_at": t,
                         "protocol_fingerprint": "f"})
    drift = anchor_drift(rows)["throughput_d"]
    assert [s["host"] for s in drift["sessions"]] == ["a", "b"]
    assert drift["sessions"][1]["ratio_to_first"] == pytest.approx(0.9)
    assert drift["max_drift"] == pytest.approx(0.1)


def test_a_busy_process_is_seen():
    import subprocess
    import sys

    from anb.collect_throughput.timing.environment import busy_processes

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        import time

        time.sleep(0.2)
        busy = busy_processes(threshold_percent=5.0, window_s=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert spinner.pid in [p["pid"] for p in busy]
