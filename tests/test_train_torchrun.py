"""Real 2-process torchrun (gloo) runs of the trainer on the bundled digits set, and resume
after a kill -9 of the whole process tree in the middle of the stream."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from anb.records import load_dataset
from anb.searchspace import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import ARGS, CONFIG, NUM_MODELS, REPO, TORCHRUN, child_env, torchrun_cmd

pytestmark = pytest.mark.timeout(600)  # a hung collective fails the test, not the suite
#: Every run here: two steps an epoch and one validation batch a rank (the stream, resume and
#: ranks are what is tested; each rank's batch is still reduced over both)
SHORT = ("--max_steps", "2", "--max_val_steps", "1")


def run_torchrun(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(torchrun_cmd(folder, *SHORT, *extra), env=child_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def expected_ids() -> list[str]:
    return [a.id for a in Sampler(7, space=ANB_SPACE).sample(NUM_MODELS)]


def records(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (folder / "records").glob("*.json")}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("uninterrupted")
    return folder, run_torchrun(folder, "--wandb_mode", "offline")


@pytest.mark.slow
def test_two_process_run_writes_one_record_per_architecture(uninterrupted):
    folder, proc = uninterrupted
    found = records(folder)
    assert sorted(found) == sorted(expected_ids())
    for arch_id, record in found.items():
        prov = record["provenance"]
        assert prov["arch_id"] == arch_id and prov["world_size"] == 2
        assert prov["seed"] == 7 and prov["shard"] == "0/1"
        assert [h["epoch"] for h in prov["val_history"]] == [1, 2]
        best = max(prov["val_history"], key=lambda h: h["val_top1"])
        assert record["metrics"]["val_top1"] == best["val_top1"]
        assert 0 <= record["metrics"]["val_top5"] <= 100 and record["metrics"]["train_time"] > 0
        assert prov["config"]["trainval"]["epochs"] == 3
    # written once by rank 0: one 'finished' line per architecture, no temp files, no checkpoints
    assert proc.stdout.count("finished:") == NUM_MODELS
    assert not list(folder.rglob("*.tmp")) and not list((folder / "checkpoints").glob("*"))
    assert len(list(folder.glob("config-*.ini"))) == 1
    # wandb: one offline run per architecture, from rank 0 only
    from anb.collect_accuracy.wandb_offline import find_runs, read_run

    runs = [read_run(p) for p in find_runs(folder / "wandb")]
    run_ids = sorted(r["provenance"]["run_id"] for r in found.values())
    assert sorted(r.run_id for r in runs) == run_ids
    assert all(r.exit_code == 0 and r.config["world_size"] == 2 for r in runs)
    frame = load_dataset(folder / "records", space=ANB_SPACE)
    assert sorted(frame["arch_id"]) == sorted(expected_ids())


@pytest.mark.slow
def test_rerun_of_a_finished_stream_trains_nothing(uninterrupted, tmp_path):
    folder, _ = uninterrupted
    before = {p: p.stat().st_mtime_ns for p in (folder / "records").glob("*.json")}
    proc = run_torchrun(folder)
    assert proc.stdout.count("already done") == NUM_MODELS
    assert "'trained': 0" in proc.stdout
    assert {p: p.stat().st_mtime_ns for p in (folder / "records").glob("*.json")} == before


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher and every worker at once (a lost node)."""
    parent = psutil.Process(proc.pid)
    for p in parent.children(recursive=True) + [parent]:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)


@pytest.mark.slow
def test_kill_minus_9_mid_stream_then_rerun_resumes(uninterrupted, tmp_path):
    ids = expected_ids()
    folder = tmp_path / "killed"
    proc = subprocess.Popen(torchrun_cmd(folder, *SHORT), env=child_env(), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = folder / "checkpoints" / f"{ids[1]}.pt"
    deadline = time.time() + 300
    while not ckpt.exists():  # the second architecture has finished an epoch: kill in the next
        assert proc.poll() is None, "trainer ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.02)
    kill_tree(proc)
    assert proc.returncode != 0
    assert sorted(records(folder)) == [ids[0]]
    first = (folder / "records" / f"{ids[0]}.json").read_bytes()

    rerun = run_torchrun(folder)
    assert f"{ids[0]} already done" in rerun.stdout
    assert f"{ids[1]} resuming from epoch" in rerun.stdout
    assert "'trained': 2" in rerun.stdout
    done = records(folder)
    assert sorted(done) == sorted(ids) == sorted(records(uninterrupted[0]))
    assert (folder / "records" / f"{ids[0]}.json").read_bytes() == first  # not retrained
    resumed = done[ids[1]]["provenance"]
    assert len(resumed["job_ids"]) == 2 and len(set(resumed["job_ids"])) == 2
    assert [h["epoch"] for h in resumed["val_history"]] == [1, 2]
    # per-epoch seeding + per-epoch data order: the resumed run reproduces the uninterrupted one
    reference = records(uninterrupted[0])
    for arch_id in ids:
        assert done[arch_id]["metrics"]["val_top1"] == reference[arch_id]["metrics"]["val_top1"]
        assert [h["val_loss"] for h in done[arch_id]["provenance"]["val_history"]] == \
            pytest.approx([h["val_loss"] for h in reference[arch_id]["provenance"]["val_history"]],
                          rel=1e-6)
    assert not list((folder / "checkpoints").glob("*"))


@pytest.mark.slow
def test_two_nodes_with_c10d_rendezvous_use_global_ranks(tmp_path):
    """Two single-process 'nodes' (LOCAL_RANK is 0 on both): only global rank 0 writes."""
    port = _free_port()
    folder = tmp_path / "multinode"
    cmd = [str(TORCHRUN), "--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
           "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "anb-test", "-m",
           "anb.collect_accuracy.train", "--config", str(CONFIG), "--folder", str(folder),
           *ARGS, *SHORT, "--num_models", "1", "--epochs", "1", "--eval_epochs", "1"]
    nodes = [subprocess.Popen(cmd, env=child_env(), cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    (record,) = records(folder).values()
    assert record["provenance"]["world_size"] == 2
    assert sum(o.count("finished:") for o in outputs) == 1


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
