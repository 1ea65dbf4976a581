"""Jobs sharing a results folder never train one architecture twice: per-architecture flock
claims, checked with real processes (a claim held by another process, released by the OS when
that process is killed; two trainer jobs on the same folder and shard at once)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anb.collect_accuracy import claims
from anb.collect_accuracy.config import ConfigError
from anb.collect_accuracy.train import main
from anb.searchspace import ANB_SPACE, Arch, Sampler
from tests.trainer_helpers import CONFIG, REPO, child_env, torchrun_cmd

SMALL = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
OTHER = "e4k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
QUICK = ["--progress", "false", "--epochs", "1", "--eval_epochs", "1", "--max_steps", "2",
         "--max_val_steps", "1", "--min_res", "32", "--max_res", "32", "--val_res", "32"]
HOLDER = """
import sys, time
from pathlib import Path
from anb.collect_accuracy import claims
claim = claims.try_claim(Path(sys.argv[1]), sys.argv[2], claims.holder_info("job-holder"))
print("held" if claim else "busy", flush=True)
time.sleep(600)
"""


def _records(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (folder / "records").glob("*.json")}


def test_claim_is_exclusive_across_processes_and_dropped_when_the_holder_is_killed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "abc"],
                              env=child_env(), cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert claims.try_claim(tmp_path, "abc", claims.holder_info("job-me")) is None
        info = claims.read_holder(tmp_path, "abc")
        assert info["pid"] == holder.pid and info["job_id"] == "job-holder"
        assert f"job job-holder (host {info['host']}, pid {holder.pid}" in claims.describe(info)
        other = claims.try_claim(tmp_path, "xyz", claims.holder_info("job-me"))
        assert other is not None  # one lock per architecture
        other.release()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    claim = claims.try_claim(tmp_path, "abc", claims.holder_info("job-me"))
    assert claim is not None and claims.read_holder(tmp_path, "abc")["job_id"] == "job-me"
    claim.release()
    assert claims.read_holder(tmp_path, "abc") == {}


@pytest.mark.slow
def test_trainer_passes_over_an_architecture_claimed_elsewhere(tmp_path, capsys):
    out = tmp_path / "out"
    held = Arch.from_string(SMALL, ANB_SPACE)
    # another process holds the claim on SMALL for the whole run
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), held.id],
                              env=child_env(), cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        args = ["--config", str(CONFIG), "--folder", str(out), *QUICK,
                "--archs", f"{SMALL},{OTHER}"]
        assert main(args) == 0
        stdout = capsys.readouterr().out
        assert f"{held.id} busy: claimed by job job-holder" in stdout
        assert f"pid {holder.pid}" in stdout and "left to it" in stdout
        assert "'trained': 1" in stdout and "'busy': 1" in stdout
        assert sorted(_records(out)) == [Arch.from_string(OTHER, ANB_SPACE).id]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert main(args) == 0  # the holder is gone: its architecture is trained now
    stdout = capsys.readouterr().out
    assert "'trained': 1" in stdout and "'done': 1" in stdout and "'busy': 0" in stdout
    assert sorted(_records(out)) == sorted([held.id, Arch.from_string(OTHER, ANB_SPACE).id])


@pytest.mark.slow
def test_lock_can_be_switched_off(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--config", str(CONFIG), "--folder", str(out), *QUICK, "--archs", SMALL,
                 "--lock", "false"]) == 0
    assert len(_records(out)) == 1 and not (out / "locks").exists()


def _held(folder: Path) -> list[str]:
    """Architectures whose lock file names a live holder (released claims are emptied)."""
    return [p.stem for p in (folder / "locks").glob("*.lock") if p.stat().st_size]


@pytest.mark.slow
def test_two_jobs_on_one_folder_and_shard_never_train_an_architecture_twice(tmp_path):
    """Job A (one process) is frozen with SIGSTOP while it holds a claim; job B (torchrun, two
    processes, same command) runs the whole stream meanwhile; then A continues."""
    folder = tmp_path / "shared"
    num = 3
    ids = [a.id for a in Sampler(7, space=ANB_SPACE).sample(num)]
    base = [sys.executable, "-m", "anb.collect_accuracy.train", "--config", str(CONFIG),
            "--folder", str(folder), "--num_models", str(num), "--seed", "7",
            "--progress", "false", "--epochs", "4", "--eval_epochs", "1", "--batch_size", "16",
            "--max_steps", "3", "--val_batch_size", "60", "--global_batch", "32"]
    job_a = subprocess.Popen(base, env=child_env(), cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    held: list[str] = []
    deadline = time.time() + 300
    try:
        while not held:  # freeze A in the middle of an architecture, holding its claim
            assert job_a.poll() is None, "job A ended before it could be frozen"
            assert time.time() < deadline
            if list((folder / "checkpoints").glob("*.pt")):
                os.kill(job_a.pid, signal.SIGSTOP)
                held = _held(folder)
                if not held:  # between two architectures: let it run a little longer
                    os.kill(job_a.pid, signal.SIGCONT)
            time.sleep(0.02)
        (held_id,) = held
        done_before = sorted(_records(folder))
        job_b = subprocess.run(torchrun_cmd(folder, "--num_models", str(num), "--epochs", "4",
                                            "--eval_epochs", "1", "--global_batch", "32"),
                               env=child_env(), cwd=REPO, capture_output=True, text=True,
                               timeout=400)
        assert job_b.returncode == 0, job_b.stdout[-3000:] + job_b.stderr[-3000:]
        assert f"{held_id} busy: claimed by job local-" in job_b.stdout
        assert f"pid {job_a.pid}," in job_b.stdout and "left to it" in job_b.stdout
        assert sorted(_records(folder)) == sorted(set(ids) - {held_id})
    finally:
        os.kill(job_a.pid, signal.SIGCONT)
    out_a = job_a.communicate(timeout=300)[0]
    assert job_a.returncode == 0, out_a[-3000:]
    found = _records(folder)
    assert sorted(found) == sorted(ids)
    # every architecture trained exactly once, by one job
    finished = out_a.count("finished:") + job_b.stdout.count("finished:")
    assert finished == num, out_a + job_b.stdout
    for record in found.values():
        assert len(record["provenance"]["job_ids"]) == 1
    job_of = {arch_id: r["provenance"]["job_ids"][0] for arch_id, r in found.items()}
    assert len({job_of[i] for i in done_before + [held_id]}) == 1  # A's
    assert all(job_of[i] != job_of[held_id] for i in set(ids) - set(done_before) - {held_id})
    assert found[held_id]["provenance"]["world_size"] == 1
    assert not _held(folder) and not list((folder / "checkpoints").glob("*.pt"))


#: A case of the probe test: each rank's folder, each rank's host name.
Case = tuple[list[str], list[str]]


def _probe(rank: int, port: int, cases: list[Case], queue) -> None:
    """Run the probe in each case in turn (every rank of one process group), putting
    ``(case, rank, outcome)`` on ``queue``."""
    import torch
    import torch.distributed as dist

    from anb.collect_accuracy.distributed import DistInfo

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    world = len(cases[0][1])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    info = DistInfo(rank, world, 0, torch.device("cpu"), "probe-test")
    try:
        for case, (folders, hosts) in enumerate(cases):
            try:
                outcome: object = claims.probe_global(Path(folders[rank]), info,
                                                      host=hosts[rank])
            except ConfigError as err:
                outcome = str(err)
            queue.put((case, rank, outcome))
    finally:
        dist.destroy_process_group()


def _run_probe(cases: list[Case]) -> list[dict[int, object]]:
    """Each case's outcome by rank, from one set of processes (one per rank) that runs them
    all in turn."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    ranks = len(cases[0][1])
    procs = [ctx.Process(target=_probe, args=(r, port, cases, queue)) for r in range(ranks)]
    for proc in procs:
        proc.start()
    out: list[dict[int, object]] = [{} for _ in cases]
    for _ in range(ranks * len(cases)):
        case, rank, outcome = queue.get(timeout=120)
        out[case][rank] = outcome
    for proc in procs:
        proc.join(timeout=30)
    return out


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_cross_host_probe_refuses_node_local_locks(tmp_path):
    """Three ranks on "two hosts" (host names given to the probe). Global locks: every rank
    sees one folder, the lock of rank 0 is taken for node-b. Node-local locks are stood in by
    node-b seeing its own copy of the folder, where rank 0's lock does not exist. The three
    cases run in turn in one set of rank processes."""
    shared, local_b = str(tmp_path / "shared"), str(tmp_path / "node-b-view")
    two_hosts = ["node-a", "node-a", "node-b"]
    global_locks, local_locks, one_host = _run_probe([
        ([shared] * 3, two_hosts), ([shared, shared, local_b], two_hosts),
        ([shared] * 3, ["node-a"] * 3)])
    assert global_locks == {0: True, 1: True, 2: True}
    for rank in range(3):
        assert "has node-local locks (a lock taken on node-a was free on ['node-b'])" in \
            local_locks[rank]
        assert "claims.backend" in local_locks[rank]
    # one host: nothing to probe
    assert one_host == {0: False, 1: False, 2: False}
    assert not list((tmp_path / "shared" / "locks").glob(".probe-*"))


@pytest.mark.slow
def test_queue_backend_claims_through_the_shared_job_queue(tmp_path, capsys):
    """claims.backend = queue on SQLite: an architecture leased by another job is left to it;
    once that lease expires (the job died), a rerun trains it; finished jobs are done."""
    from anb.collect_accuracy.config import load_config, recipe_hash
    from anb.jobs.queue import open_queue

    archs = Sampler(9, space=ANB_SPACE).sample(2)
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    args = ["--config", str(CONFIG), "--folder", str(tmp_path / "out"), "--archs",
            ",".join(str(a) for a in archs), *QUICK, "--claims.backend", "queue",
            "--claims.queue_url", url]
    other = claims.QueueClaims(url, recipe_hash(load_config(CONFIG, args[2:]), 1), 600)
    held = other.try_claim(str(archs[0]), archs[0].id, "job-elsewhere")
    assert held is not None
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{archs[0].id} busy: claimed by job job-elsewhere" in out and "left to it" in out
    assert sorted(p.stem for p in (tmp_path / "out" / "records").glob("*.json")) == [archs[1].id]
    held.lease_s = 0.01  # the other job dies: its lease runs out and the job is taken over
    assert held.renew()
    time.sleep(0.1)
    assert main(args) == 0
    found = sorted(p.stem for p in (tmp_path / "out" / "records").glob("*.json"))
    assert found == sorted(a.id for a in archs)
    queue = open_queue(url)
    states = {job.arch: job.state for job in queue.jobs(stage=claims.QUEUE_STAGE)}
    assert states == {str(archs[0]): "done", str(archs[1]): "done"}
    assert held.renew() is False  # the late worker's lease is gone
    bad = main([*args[:-1], ""])
    assert bad == 2 and "'claims.queue_url'" in capsys.readouterr().err
