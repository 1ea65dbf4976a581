"""The job queue on a real PostgreSQL (started here on 127.0.0.1) and on SQLite, through one
interface: priority order, leases and expiry, exactly-once results, attempts, retry/cancel/bump."""
from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from anb.collect_throughput.queue.stages import (
    PRIORITY_ACCURACY,
    PRIORITY_CONVERT,
    PRIORITY_MEASURE,
    register_stages,
)
from anb.jobs.queue import Capability, JobSpec, open_queue
from anb.jobs.stages import chain, follow_up, get_stage
from tests.realservers import free_port, missing_postgres, postgres_server

MEASURE = [Capability("measure", "board-a")]
register_stages()  # the device stages, as a worker or `anb queue submit` registers them


@pytest.fixture(scope="module")
def pg_url():
    reason = missing_postgres()
    if reason:
        pytest.skip(reason)
    with postgres_server() as server:
        yield server.url


_dbs = iter(range(10**6))


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    """A fresh, empty queue on each engine (PostgreSQL: a new database per test)."""
    if request.param == "sqlite":
        return str(tmp_path / "queue.db")
    import psycopg

    base = request.getfixturevalue("pg_url")
    name = f"q{next(_dbs)}_{int(time.time() * 1000) % 10**8}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return base.rsplit("/", 1)[0] + "/" + name


def _specs(n, device="board-a", stage="measure", **kw):
    return [JobSpec(f"arch{i}", device, stage, **kw) for i in range(n)]


def test_claims_follow_priority_then_age_and_bump_jumps_the_queue(url):
    with open_queue(url) as q:
        ids = q.submit([JobSpec("late", "board-a", "measure", priority=30),
                        JobSpec("early", "board-a", "measure", priority=20),
                        JobSpec("late2", "board-a", "measure", priority=30),
                        JobSpec("last", "board-a", "measure", priority=60)])
        assert q.bump([ids[3]], 0) == 1
        order = [q.claim("w", MEASURE, 60).arch for _ in range(4)]
        assert order == ["last", "early", "late", "late2"]
        assert q.claim("w", MEASURE, 60) is None


def test_duplicate_submit_is_ignored(url):
    with open_queue(url) as q:
        assert len(q.submit(_specs(3))) == 3
        added = q.submit(_specs(4))  # only arch3 is new
        assert [j.arch for j in q.get(added)] == ["arch3"]
        ids = q.lookup(_specs(5))  # every spec's job, new or not; arch4 was never submitted
        assert ids[3] == added[0] and ids[4] is None
        assert [j.arch for j in q.get(ids[:4])] == ["arch0", "arch1", "arch2", "arch3"]
        assert sum(q.counts().values()) == 4


def test_expired_lease_is_re_leased_and_the_late_result_refused(url):
    with open_queue(url) as q:
        q.submit(_specs(1))
        a = q.claim("worker-a", MEASURE, 0.3)
        assert q.claim("worker-b", MEASURE, 60) is None  # leased and not expired
        time.sleep(0.5)
        b = q.claim("worker-b", MEASURE, 60)
        assert (b.id, b.attempts, b.worker) == (a.id, 2, "worker-b")
        assert "lease of worker worker-a expired" in b.last_error
        assert not q.heartbeat(a, 60)
        assert not q.complete(a, {"by": "a"})  # the killed/slow worker's result is refused
        assert q.fail(a, "late error") is None
        assert q.complete(b, {"by": "b"})
        assert not q.complete(b, {"by": "b again"})  # written exactly once
        (job,) = q.get([a.id])
        assert (job.state, job.result, job.lease_token) == ("done", {"by": "b"}, None)


def test_heartbeat_keeps_the_lease(url):
    with open_queue(url) as q:
        q.submit(_specs(1))
        a = q.claim("worker-a", MEASURE, 0.4)
        for _ in range(4):
            time.sleep(0.2)
            assert q.heartbeat(a, 0.4)
        assert q.claim("worker-b", MEASURE, 60) is None
        assert q.complete(a, {})


def test_failing_job_is_retried_then_failed_with_its_error(url):
    with open_queue(url) as q:
        q.submit(_specs(1, max_attempts=2))
        job = q.claim("w", MEASURE, 60)
        assert q.fail(job, "device 'board-a', step 'connect': refused") == "queued"
        job = q.claim("w", MEASURE, 60)
        assert job.attempts == 2
        assert q.fail(job, "device 'board-a', step 'run': boom") == "failed"
        assert q.claim("w", MEASURE, 60) is None
        (job,) = q.jobs(state="failed")
        assert job.last_error == "device 'board-a', step 'run': boom"
        assert q.retry() == 1
        job = q.claim("w", MEASURE, 60)
        assert job.attempts == 1  # fresh attempts


def test_permanent_error_fails_at_once(url):
    with open_queue(url) as q:
        q.submit(_specs(1, max_attempts=3))
        job = q.claim("w", MEASURE, 60)
        assert q.fail(job, "rejected model", retry=False) == "failed"


def test_expired_lease_on_last_attempt_is_reaped_as_failed(url):
    with open_queue(url) as q:
        q.submit(_specs(1, max_attempts=1))
        q.claim("worker-a", MEASURE, 0.2)
        time.sleep(0.4)
        assert q.claim("worker-b", MEASURE, 60) is None
        assert q.reap() == 1
        (job,) = q.jobs(state="failed")
        assert "worker-a expired on its last attempt" in job.last_error


def test_workers_take_only_what_they_can_do(url):
    with open_queue(url) as q:
        q.submit([JobSpec("a", "board-b", "measure"), JobSpec("a", "board-a", "export"),
                  JobSpec("b", "board-a", "measure")])
        job = q.claim("w", [Capability("measure", "board-a")], 60)
        assert (job.arch, job.device) == ("b", "board-a")
        assert q.claim("w", [Capability("measure", "board-a")], 60) is None
        job = q.claim("host-only", [Capability("export")], 60)  # any device's export
        assert (job.stage, job.device) == ("export", "board-a")


def test_cancel_takes_a_running_job_from_its_worker(url):
    with open_queue(url) as q:
        q.submit(_specs(2))
        job = q.claim("w", MEASURE, 60)
        with pytest.raises(ValueError, match="refusing to cancel all"):
            q.cancel()
        assert q.cancel([job.id]) == 1
        assert not q.heartbeat(job, 60)
        assert not q.complete(job, {})
        assert q.release(q.claim("w", MEASURE, 60))
        assert q.claim("w", MEASURE, 60).attempts == 1  # a release does not count an attempt


def test_complete_queues_the_next_stage_in_the_same_transaction(url):
    with open_queue(url) as q:
        q.submit([chain("a", "board-a", ["measure", "export", "accuracy"])])
        job = q.claim("w", [Capability("export")], 60)
        assert job.next_stages == ("measure", "accuracy")
        assert q.complete(job, {"model": "m.onnx"}, follow_up(job, {}))
        job = q.claim("w", MEASURE, 60)
        assert (job.priority, job.next_stages) == (PRIORITY_MEASURE, ("accuracy",))
        assert q.complete(job, {}, follow_up(job, {"latency_ms": 12.4}))
        (acc,) = q.jobs(stage="accuracy")
        assert acc.priority == PRIORITY_ACCURACY + 12  # quicker models go first


def test_concurrent_claims_hand_out_each_job_once(url):
    n, workers = 120, 4
    with open_queue(url) as q:
        q.submit(_specs(n))
    claimed: list[list[int]] = [[] for _ in range(workers)]
    refused: list[int] = []

    def work(k):
        with open_queue(url) as mine:
            while (job := mine.claim(f"w{k}", MEASURE, 60)) is not None:
                claimed[k].append(job.id)
                if not mine.complete(job, {"by": k}):
                    refused.append(job.id)  # someone else was handed the same job

    threads = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [i for c in claimed for i in c]
    assert refused == []
    assert sorted(flat) == list(range(1, n + 1))  # every job claimed exactly once
    with open_queue(url) as q:
        assert q.counts() == {("board-a", "measure", "done"): n}


def _sql(url, statement, params=()):
    """Run one statement on the queue's database, outside anb; its rows (if any)."""
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(statement.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []
    with sqlite3.connect(url) as conn:
        rows = conn.execute(statement, params).fetchall()
    conn.close()
    return rows


def test_the_schema_version_is_recorded_read_from_older_queues_and_a_newer_one_refused(url):
    """A new queue records its schema version; one made before versions (no anb_schema
    table) opens as version 1 and gets the row; one of a newer version is refused."""
    from anb.formats import NewerFormat, current

    with open_queue(url) as q:
        q.submit(_specs(2))
    assert _sql(url, "SELECT name, version FROM anb_schema") == [("queue", current("queue"))]
    _sql(url, "DROP TABLE anb_schema")
    with open_queue(url) as q:
        assert len(q.jobs()) == 2
    assert _sql(url, "SELECT name, version FROM anb_schema") == [("queue", 1)]
    _sql(url, "UPDATE anb_schema SET version = ?", (current("queue") + 1,))
    with pytest.raises(NewerFormat, match=f"format version {current('queue') + 1}, newer than "
                                          f"version {current('queue')} this anb reads"):
        open_queue(url)


def test_bad_queue_urls_are_clear(tmp_path):
    with pytest.raises(ValueError, match="allowed: postgresql://"):
        open_queue("redis://localhost/0")
    with pytest.raises(ValueError, match="is a folder"):
        open_queue(str(tmp_path))
    with pytest.raises(ValueError, match="does not exist"):
        open_queue(str(tmp_path / "missing" / "q.db"))
    with pytest.raises(ValueError, match="priority=-1"):
        JobSpec("a", "d", "measure", priority=-1)
    if missing_postgres() is None:
        with pytest.raises(RuntimeError, match="cannot connect to the queue database"):
            open_queue(f"postgresql://anb@127.0.0.1:{free_port()}/postgres")


def test_stage_priorities_are_the_reference_practice():
    # docs/background/devices.md, "Remote benchmarking queue (Archai)": conversion +
    # quantization 20, device benchmark 30, onnxruntime accuracy 60, priority 0 jumps the queue.
    assert (PRIORITY_CONVERT, PRIORITY_MEASURE, PRIORITY_ACCURACY) == (20, 30, 60)
    assert get_stage("convert").priority == 20 and get_stage("measure").priority == 30
    assert not get_stage("convert").needs_device and get_stage("measure").needs_device
    bumped = chain("a", "d", ["export", "measure"], priority=0)
    assert bumped.priority == 0
