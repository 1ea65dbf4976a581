"""Workers on a shared queue: two worker processes on a real PostgreSQL with one killed (-9)
mid-job (the job is re-leased and finished exactly once), heartbeats holding a lease, priority
order, failing jobs ending failed with their error while the worker carries on, a hung board
timing out, and the ``anb queue`` / ``anb worker`` command line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_throughput.queue.stages import make_context, quality_payload
from anb.jobs.queue import Capability, JobSpec, open_queue
from anb.jobs.stages import STAGES, Stage, StageContext, chain
from anb.jobs.worker import Worker
from anb.searchspace.arch import as_arch
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.realservers import free_port, missing_postgres, postgres_server

REPO = Path(__file__).resolve().parents[1]
ARCHS = [str(a) for a in Sampler(3, space=ANB_SPACE).sample(3)]
DEVICE = """kind = "{kind}"
name = "{name}"
backend = "onnxruntime"
resolution = 32
threads = 1
clock = "wall"
[latency]
batch = 1
[warmup]
max_seconds = 2.0
max_steps = 50
[stopping]
min_reps = 5
budget_seconds = {budget}
rel_ci = {rel_ci}
"""


def _device_file(folder: Path, name: str = "host-cpu", budget: float = 1.0, remote: str = "",
                 rel_ci: float = 0.005) -> Path:
    """A device config; ``rel_ci`` near 0 makes each measurement run its whole ``budget``."""
    path = folder / f"{name}.toml"
    kind = "remote" if remote else "local"
    path.write_text(DEVICE.format(kind=kind, name=name, budget=budget, rel_ci=rel_ci) + remote)
    return path


@pytest.fixture(scope="module")
def pg_server():
    reason = missing_postgres()
    if reason:
        pytest.skip(reason)
    with postgres_server() as server:
        yield server


@pytest.fixture
def pg_url(pg_server):
    """A fresh database on the module's server."""
    import psycopg

    name = f"w{time.time_ns() % 10**12}"
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg_server.url.rsplit("/", 1)[0] + "/" + name


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _worker_process(url: str, name: str, device: Path, tmp: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "anb", "worker", "--queue", url, "--device", str(device),
         "--stages", "measure", "--lease", "2", "--poll", "0.2", "--name", name,
         "--store", str(tmp / "store"), "--out", str(tmp / "results")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)


@pytest.mark.slow
def test_two_workers_one_killed_mid_job_every_job_done_once(pg_url, tmp_path):
    device = _device_file(tmp_path, budget=2.0)
    with open_queue(pg_url) as q:
        q.submit([JobSpec(a, "host-cpu", "measure", priority=30) for a in ARCHS])
    a = _worker_process(pg_url, "worker-a", device, tmp_path)
    b = None
    try:
        with open_queue(pg_url) as q:
            # worker-b starts once worker-a holds a lease: started together, a slow start of
            # worker-a on a loaded machine let worker-b finish all three jobs first
            victim = _wait(lambda: next((j for j in q.jobs(state="leased")
                                         if j.worker == "worker-a"), None), 120,
                           "worker-a to lease a job")
            b = _worker_process(pg_url, "worker-b", device, tmp_path)  # both share the queue
            a.send_signal(signal.SIGKILL)  # mid-job: leased, measurement not finished
            a.wait(timeout=30)
            assert q.get([victim.id])[0].state == "leased" and b.poll() is None
            _wait(lambda: q.counts().get(("host-cpu", "measure", "done")) == 3, 240,
                  "worker-b to finish every job")
            jobs = {j.id: j for j in q.jobs(limit=10)}
        b.send_signal(signal.SIGTERM)  # stops after its current job (none): exit 0
        out, _ = b.communicate(timeout=60)
        assert b.returncode == 0, out
        assert "worker-b: done 3, failed 0, re-queued 0, lost 0" in out
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
    again = jobs[victim.id]
    assert (again.state, again.worker, again.attempts) == ("done", "worker-b", 2)
    assert "lease of worker worker-a expired" in again.last_error
    assert all(j.attempts == 1 for i, j in jobs.items() if i != victim.id)
    files = sorted((tmp_path / "results" / "host-cpu").glob("*.json"))
    assert len(files) == 3
    for job in jobs.values():  # the record on disk is the one result the queue accepted
        record = json.loads((tmp_path / "results" / "host-cpu" /
                             f"{job.result['record']['provenance']['throughput']['arch_id']}"
                             ".json").read_text())
        entry = record["platform_perf"]["latency_host-cpu"]
        assert entry == job.result["record"]["platform_perf"]["latency_host-cpu"]
        assert entry["unit"] == "ms" and entry["n"] >= 3


@pytest.mark.slow
def test_worker_rides_out_a_database_restart(pg_server, pg_url, tmp_path):
    ctx = make_context(tmp_path / "store", None, [str(_device_file(tmp_path))])
    with open_queue(pg_url) as q:
        q.submit([JobSpec(a, "host-cpu", "export", priority=i) for i, a in enumerate(ARCHS)])
        worker = Worker(q, ["export"], ctx, "steady", lease_seconds=10, poll_seconds=0.2)
        run = threading.Thread(target=worker.run, kwargs={"idle_exit": True}, daemon=True)
        run.start()
        _wait(lambda: q.jobs(state="done"), 60, "the first job")
        pg_server.restart()  # every connection is dropped
        run.join(timeout=120)
        worker.stop.set()  # a worker that never got the database back must not hang the test
        assert not run.is_alive()
    with open_queue(pg_url) as q:
        jobs = q.jobs()
    assert [(j.state, j.attempts) for j in jobs] == [("done", 1)] * 3
    assert worker.stats.done == 3


def _hold(job, ctx) -> dict:
    """The handler of this file's ``hold`` stage: a long job that needs no CPU (it waits
    ``job.payload["seconds"]``)."""
    time.sleep(job.payload["seconds"])
    return {}


@pytest.mark.slow
def test_heartbeats_hold_the_lease_of_a_long_job(tmp_path, monkeypatch):
    url = str(tmp_path / "q.db")
    # the job takes four 2 s leases; a lease of 2 s leaves its heartbeat (every lease / 3)
    # room on a loaded machine. The stage is registered as a vendor's would be: the worker's
    # heartbeat is the same for every stage
    lease = 2.0
    monkeypatch.setitem(STAGES, "hold", Stage("hold", 10, False, f"{__name__}:_hold"))
    with open_queue(url) as q, open_queue(url) as thief:
        q.submit([JobSpec(ARCHS[0], "host-cpu", "hold", payload={"seconds": 4 * lease})])
        worker = Worker(q, ["hold"], StageContext(tmp_path / "store"), "slow",
                        lease_seconds=lease, poll_seconds=0.1)
        run = threading.Thread(target=worker.run, kwargs={"idle_exit": True})
        run.start()
        _wait(lambda: q.jobs(state="leased"), 30, "the worker to claim the job")
        stolen = []
        began = time.monotonic()
        while run.is_alive():  # the job outlasts several leases
            stolen.append(thief.claim("thief", [Capability("hold")], 60))
            time.sleep(0.05)
        run.join()
        (job,) = q.jobs()
    assert time.monotonic() - began > 3 * lease
    assert stolen and not any(stolen)
    assert (job.state, job.attempts, worker.stats.done) == ("done", 1, 1)


@pytest.mark.slow
def test_worker_takes_jobs_in_priority_order(tmp_path):
    url = str(tmp_path / "q.db")
    ctx = make_context(tmp_path / "store", None, [str(_device_file(tmp_path))])
    with open_queue(url) as q:
        q.submit([JobSpec(ARCHS[0], "host-cpu", "export", priority=20),
                  JobSpec(ARCHS[1], "host-cpu", "export", priority=5),
                  JobSpec(ARCHS[2], "host-cpu", "export", priority=20)])
        Worker(q, ["export"], ctx, "w", poll_seconds=0.1).run(idle_exit=True)
        done = sorted(q.jobs(state="done"), key=lambda j: j.updated_at)
    assert [j.arch for j in done] == [ARCHS[1], ARCHS[0], ARCHS[2]]


HUNG = """#!/bin/sh
# Stand-in for a board that hangs: it takes the runner's place and never answers.
exec sleep 300
"""


@pytest.mark.slow
def test_failing_jobs_end_failed_with_their_error_and_the_worker_carries_on(tmp_path):
    hung = tmp_path / "hung-board-python"
    hung.write_text(HUNG)
    hung.chmod(0o755)
    dead = _device_file(tmp_path, "dead-board", remote=f"""[remote]
transport = "ssh://pi@127.0.0.1:{free_port()}"
connect_timeout = 3
""")
    stuck = _device_file(tmp_path, "stuck-board", remote=f"""[remote]
transport = "local://"
python = "{hung}"
workdir = "{tmp_path / 'board'}"
timeout = 2
""")
    bare = _device_file(tmp_path, "bare-board", remote=f"""[remote]
transport = "local://"
python = "/usr/bin/python3"
workdir = "{tmp_path / 'board'}"
""")  # Debian's own Python: no numpy, no onnxruntime
    good = _device_file(tmp_path, "host-cpu", budget=0.3)
    url = str(tmp_path / "q.db")
    ctx = make_context(tmp_path / "store", tmp_path / "results",
                       [str(dead), str(stuck), str(bare), str(good)])
    with open_queue(url) as q:
        q.submit([JobSpec(ARCHS[0], "bare-board", "measure", priority=0, max_attempts=3),
                  JobSpec(ARCHS[0], "dead-board", "measure", priority=1, max_attempts=2),
                  JobSpec(ARCHS[0], "stuck-board", "measure", priority=2, max_attempts=1),
                  JobSpec("e9k9l9-not-an-arch", "host-cpu", "measure", priority=3),
                  JobSpec(ARCHS[1], "host-cpu", "measure", priority=4)])
        worker = Worker(q, ["measure"], ctx, "w", poll_seconds=0.1)
        stats = worker.run(idle_exit=True)
        jobs = {j.device + ("!" if "not" in j.arch else ""): j for j in q.jobs()}
    assert (stats.done, stats.failed, stats.retried) == (1, 4, 1)
    # a board without the runtime fails at once (retrying cannot help), naming the step
    assert (jobs["bare-board"].state, jobs["bare-board"].attempts) == ("failed", 1)
    assert jobs["bare-board"].last_error.startswith(
        "device 'bare-board', step 'import_runtime' (missing): No module named")
    assert (jobs["dead-board"].state, jobs["dead-board"].attempts) == ("failed", 2)
    assert jobs["dead-board"].last_error.startswith(
        "device 'dead-board', step 'connect' (unreachable)")
    assert (jobs["stuck-board"].state, jobs["stuck-board"].attempts) == ("failed", 1)
    assert jobs["stuck-board"].last_error.startswith(
        "device 'stuck-board', step 'run' (timeout): no answer within 2 s")
    bad = jobs["host-cpu!"]  # bad input: failed at once, no retry
    assert (bad.state, bad.attempts) == ("failed", 1)
    assert bad.last_error.startswith("device 'host-cpu', step 'measure': ")
    assert jobs["host-cpu"].state == "done"
    assert len(list((tmp_path / "results" / "host-cpu").glob("*.json"))) == 1
    assert list((tmp_path / "board").iterdir()) == []


def test_queue_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where `anb worker`'s default --store would go
    runner = CliRunner()
    url = str(tmp_path / "q.db")
    device = _device_file(tmp_path)
    archs = tmp_path / "archs.txt"
    archs.write_text("\n".join(ARCHS[:2]) + "\n")

    def anb(*args):
        result = runner.invoke(app, [*args, "--queue", url])
        return result.exit_code, result.output

    code, out = anb("queue", "submit", "--archs", str(archs), "--device", str(device),
                    "--stages", "measure,export")
    assert code == 0 and "queued 2 job(s) (0 already in the queue)" in out
    assert "stages export->measure" in out
    code, out = anb("queue", "submit", "--archs", str(archs), "--device", str(device),
                    "--stages", "export")
    assert "queued 0 job(s) (2 already in the queue)" in out
    code, out = anb("queue", "bump", "2", "--priority", "0")
    assert code == 0 and "set priority 0 on 1 job(s)" in out
    with open_queue(url) as q:
        first = q.claim("w", [Capability("export")], 60)
        assert (first.id, first.priority, first.payload["device_config"]["name"]) == \
            (2, 0, "host-cpu")
        q.fail(first, "device 'host-cpu', step 'export': boom", retry=False)
    code, out = anb("queue", "status")
    assert code == 0
    assert [ln.split() for ln in out.splitlines()[:2]] == [
        ["device", "stage", "queued", "leased", "done", "failed", "cancelled"],
        ["host-cpu", "export", "1", "0", "0", "1", "0"]]
    assert "#2 export host-cpu" in out and "boom" in out
    code, out = anb("queue", "retry", "2")
    assert "re-queued 1 job(s)" in out
    code, out = anb("queue", "cancel", "--device", "host-cpu")
    assert "cancelled 2 job(s)" in out
    code, out = anb("queue", "status", "--json")
    assert json.loads(out)["counts"] == [{"device": "host-cpu", "stage": "export",
                                          "state": "cancelled", "jobs": 2}]
    code, out = anb("queue", "cancel")
    assert code == 2 and "refusing to cancel all" in out
    search = tmp_path / "search"  # a search's output folder: its Pareto front
    search.mkdir()
    (search / "pareto.csv").write_text("arch,latency\n" + f"{ARCHS[2]},1.0\n{ARCHS[0]},2.0\n")
    code, out = anb("queue", "submit", "--archs", str(search), "--device", str(device),
                    "--priority", "7")
    assert code == 0 and "queued 2 job(s)" in out
    with open_queue(url) as q:
        assert [(j.arch, j.priority) for j in q.jobs(stage="measure")] == [(ARCHS[2], 7),
                                                                          (ARCHS[0], 7)]
    code, out = anb("queue", "submit", "--archs", str(archs), "--device", "no-such-board")
    assert code == 2 and "--device 'no-such-board'" in out
    code, out = anb("queue", "submit", "--archs", str(archs), "--device", str(device),
                    "--stages", "measure,flash")
    assert code == 2 and "stage='flash' is invalid" in out
    code, out = anb("worker", "--stages", "measure")
    assert code == 2 and "device stages ['measure'] need --device" in out
    assert not (tmp_path / "anb-store").exists()  # bad input writes nothing


def _two_class_network(tmp_path, arch: str):
    """A 2-class image folder (3 images each) and a state_dict of ``arch`` for 2 classes."""
    import numpy as np
    import torch
    from PIL import Image

    from anb.searchspace.model import build_model

    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(3):
            pixels = rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / label / f"{i}.png")
    torch.manual_seed(0)
    torch.save(build_model(as_arch(arch, ANB_SPACE), num_classes=2,
                           space=ANB_SPACE).state_dict(), tmp_path / "w.pt")
    return tmp_path / "images", tmp_path / "w.pt"


@pytest.mark.slow
def test_stage_chain_export_convert_measure_accuracy_on_a_board(tmp_path):
    board = _device_file(tmp_path, "lab-board", budget=0.3, remote=f"""[remote]
transport = "local://"
python = "{sys.executable}"
workdir = "{tmp_path / 'board'}"
""")
    url = str(tmp_path / "q.db")
    ctx = make_context(tmp_path / "store", tmp_path / "results", [str(board)])
    images, weights = _two_class_network(tmp_path, ARCHS[0])
    payload = {"quality": quality_payload(images, weights, count=6)}
    with open_queue(url) as q:
        q.submit([chain(ARCHS[0], "lab-board", ["accuracy", "measure", "export", "convert"],
                        payload=payload)])
        stats = Worker(q, ["export", "convert", "measure", "accuracy"], ctx, "w",
                       poll_seconds=0.1).run(idle_exit=True)
        jobs = sorted(q.jobs(), key=lambda j: j.updated_at)
    assert stats.done == 4
    assert [j.stage for j in jobs] == ["export", "convert", "measure", "accuracy"]
    assert [j.priority for j in jobs[:3]] == [20, 20, 30]
    export, convert, measure, accuracy = (j.result for j in jobs)
    assert convert["models"]["latency_lab-board"]["model"] == export["model"]  # reused
    assert len(list((tmp_path / "store" / "lab-board").glob("*.onnx"))) == 1
    assert jobs[3].priority == 60 + round(measure["latency_ms"])
    # the network on its image folder, fp32 on the board vs fp32 on the host: the same numbers
    assert accuracy["top1_agreement"] == 1.0 and accuracy["images"] == 6
    assert accuracy["max_abs_error"] < 1e-4 and accuracy["logits_cosine_min"] > 0.99999
    assert accuracy["top1"] == accuracy["host_top1"]
    arch_id = measure["record"]["provenance"]["throughput"]["arch_id"]
    record = json.loads((tmp_path / "results" / "lab-board" / f"{arch_id}.json").read_text())
    assert record["platform_perf"]["latency_lab-board"]["latency_mean"] == pytest.approx(
        measure["latency_ms"])
    assert record["quality"]["lab-board"]["top1"] == accuracy["top1"]
    assert record["quality"]["lab-board"]["where"] == "board"
    # the queue holds the accepted records too: any host can write them out for 'anb merge'
    result = CliRunner().invoke(app, ["queue", "results", "--out", str(tmp_path / "from-queue"),
                                      "--queue", url])
    assert result.exit_code == 0 and "wrote 1 record(s)" in result.output
    assert json.loads((tmp_path / "from-queue" / "lab-board" / f"{arch_id}.json").read_text()) \
        == record
