"""``anb measure``: resumable, shardable, loses nothing when killed; clear errors on bad input."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_throughput.arch_lists import SAMPLE_LIMIT, read_arch_list, shard_of
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.cli_helpers import range_refused

FAST = ["--resolution", "64", "--budget", "0.2", "--batch", "2", "--no-progress",
        "--anchors", "none"]
ARCHS = Sampler(3, space=ANB_SPACE).sample(4)
runner = CliRunner()


def _measure(*args: str):
    return runner.invoke(app, ["measure", "cpu-ort", *args, *FAST])


def _done(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "cpu-ort").glob("*.json")}


@pytest.mark.slow
def test_measure_resumes_and_only_fills_what_is_missing(tmp_path):
    archs = ",".join(map(str, ARCHS[:2]))
    result = _measure("--archs", archs, "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "measured 2, skipped 0" in result.output
    done = _done(tmp_path)
    assert set(done) == {a.id for a in ARCHS[:2]}
    for record in done.values():
        assert set(record["platform_perf"]) == {"latency_cpu-ort", "throughput_cpu-ort"}
    # drop one key of one architecture: only that measurement is redone
    victim = ARCHS[0].id
    kept = done[victim]["platform_perf"]["latency_cpu-ort"]
    del done[victim]["platform_perf"]["throughput_cpu-ort"]
    (tmp_path / "cpu-ort" / f"{victim}.json").write_text(json.dumps(done[victim]))
    result = _measure("--archs", archs, "--out", str(tmp_path))
    assert "measured 1, skipped 1" in result.output
    again = _done(tmp_path)
    assert again[victim]["platform_perf"]["latency_cpu-ort"] == kept
    assert "throughput_cpu-ort" in again[victim]["platform_perf"]
    assert again[ARCHS[1].id] == done[ARCHS[1].id]


@pytest.mark.slow
def test_shards_split_the_list_disjointly(tmp_path):
    listing = tmp_path / "archs.txt"
    listing.write_text("# four sampled architectures\n" + "\n".join(map(str, ARCHS)) + "\n")
    for i in range(2):
        result = _measure("--archs", str(listing), "--out", str(tmp_path / f"s{i}"),
                          "--shard", f"{i}/2")
        assert result.exit_code == 0, result.output
    parts = [set(_done(tmp_path / f"s{i}")) for i in range(2)]
    assert parts[0].isdisjoint(parts[1])
    assert parts[0] | parts[1] == {a.id for a in ARCHS}
    assert [a.id for a in shard_of(read_arch_list(str(listing), space=ANB_SPACE), "1/2")] == \
        [ARCHS[1].id, ARCHS[3].id]


@pytest.mark.slow
def test_arch_list_from_released_dataset_is_deduplicated(dataset_tarball):
    archs = read_arch_list(dataset_tarball, space=ANB_SPACE)
    assert len(archs) == 5125  # 5,138 records, 13 architectures trained twice
    assert [a.id for a in read_arch_list("sample:3:3",
                                         space=ANB_SPACE)] == [a.id for a in ARCHS[:3]]


def test_long_comma_separated_list_is_not_taken_for_a_file_name():
    many = Sampler(1, space=ANB_SPACE).sample(40)  # ~2,000 characters: longer than any file name
    assert [a.id for a in read_arch_list(",".join(map(str, many)),
                                         space=ANB_SPACE)] == [a.id for a in many]


@pytest.mark.parametrize("args, message", [
    (["--archs", "e9k3l1", "--out", "x"], "e9k3l1"),
    (["--archs", "sample:x", "--out", "x"], "sample:x"),
    (["--archs", "missing/list.txt", "--out", "x"], "missing/list.txt"),
    (["--archs", "sample:2", "--out", "x", "--shard", "3/2"], "shard"),
    (["--archs", "sample:2", "--out", "x", "--clock", "sundial"], "clock='sundial'"),
    (["--archs", f"sample:{10**12}", "--out", "x"], "holds 104,485,552,128"),
    (["--archs", f"sample:{SAMPLE_LIMIT + 1}", "--out", "x"], f"at most {SAMPLE_LIMIT:,}"),
])
def test_bad_input_exits_nonzero_with_one_line(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _measure(*args)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    assert not (tmp_path / "x" / "cpu-ort").exists() or not list((tmp_path / "x").rglob("*.json"))


@pytest.mark.slow
def test_killed_job_keeps_finished_work_and_resumes(tmp_path):
    """A real process killed mid-list: finished records are intact, the rerun completes."""
    out = tmp_path / "out"
    cmd = [str(Path(sys.executable).with_name("anb")), "measure", "cpu-ort", "--archs",
           ",".join(map(str, ARCHS)), "--out", str(out), *FAST]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list((out / "cpu-ort").glob("*.json"))) < 1:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = _done(out)
    assert 1 <= len(first) < len(ARCHS)
    assert not [p for p in (out / "cpu-ort").iterdir() if p.name.endswith(".tmp")]
    result = _measure("--archs", ",".join(map(str, ARCHS)), "--out", str(out))
    assert result.exit_code == 0, result.output
    final = _done(out)
    assert set(final) == {a.id for a in ARCHS}
    for arch_id, record in first.items():  # nothing measured before the kill was redone
        for key, entry in record["platform_perf"].items():
            assert final[arch_id]["platform_perf"][key] == entry


@pytest.mark.slow
def test_interleaved_blocks_measure_everything_once(tmp_path):
    archs = ",".join(map(str, ARCHS[:3]))
    result = _measure("--archs", archs, "--out", str(tmp_path), "--interleave", "2")
    assert result.exit_code == 0, result.output
    assert "measured 3, skipped 0" in result.output
    done = _done(tmp_path)
    assert set(done) == {a.id for a in ARCHS[:3]}
    together = [r["platform_perf"]["latency_cpu-ort"]["interleaved_with"] for r in done.values()
                if "interleaved_with" in r["platform_perf"]["latency_cpu-ort"]]
    assert sorted(together) == [2, 2]  # the block of two; the third ran alone
    assert "measured 0, skipped 3" in _measure("--archs", archs, "--out", str(tmp_path),
                                               "--interleave", "2").output
    bad = _measure("--archs", archs, "--out", str(tmp_path), "--interleave", "0")
    assert bad.exit_code == 2 and range_refused(bad.output, "--interleave", ">=", "1")
