"""A worker: claim a job it can do, keep its lease alive, run the stage, report, repeat.

It takes only the stages it was given, and device stages only for its devices. While a handler
runs, a thread renews the lease every third of its length; if the claim is lost (the lease
expired and another worker took the job, or the job was cancelled) the result is refused by the
queue and nothing is published. Failures never stop the worker: a
:class:`~anb.jobs.errors.JobError` (e.g. a board's transport error: unreachable, auth, missing
runtime, rejected model, timeout) or any other exception is recorded as the job's error, naming
device and step; transient ones (a ``JobError`` that says so, unexpected exceptions) go back to
the queue while attempts are left, the others (``ValueError``, ``FileNotFoundError``) fail at
once.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from anb.jobs.errors import JobError
from anb.jobs.queue import Capability, Job, JobQueue, QueueUnavailable
from anb.jobs.stages import StageContext, follow_up, get_stage, handler, publish

log = logging.getLogger(__name__)


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerStats:
    done: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)


class Worker:
    """Runs jobs from ``queue`` (see module docstring)."""

    def __init__(self, queue: JobQueue, stages: list[str], ctx: StageContext,
                 name: str | None = None, lease_seconds: float = 60.0,
                 poll_seconds: float = 2.0):
        if lease_seconds <= 0 or poll_seconds <= 0:
            raise ValueError("lease_seconds and poll_seconds must be positive")
        for s in stages:
            get_stage(s)
        self.queue, self.stages, self.ctx = queue, list(stages), ctx
        self.name = name or default_name()
        self.lease_seconds, self.poll_seconds = lease_seconds, poll_seconds
        self.stats = WorkerStats()
        self.stop = threading.Event()

    def capabilities(self) -> list[Capability]:
        caps = []
        for s in self.stages:
            if get_stage(s).needs_device:
                caps += [Capability(s, d) for d in sorted(self.ctx.devices)]
            else:
                caps.append(Capability(s))
        if not caps:
            raise ValueError(f"worker {self.name!r} can do nothing: device stages "
                             f"{self.stages} need --device")
        return caps

    def _heartbeat(self, job: Job, done: threading.Event, lost: threading.Event) -> None:
        while not done.wait(self.lease_seconds / 3):
            try:
                if not self.queue.heartbeat(job, self.lease_seconds):
                    lost.set()
                    log.warning("%s: lost the lease of job %d", self.name, job.id)
                    return
            except Exception as err:  # noqa: BLE001 - a database blip: try again next beat
                log.warning("%s: heartbeat of job %d failed: %s", self.name, job.id, err)

    def process(self, job: Job) -> str:
        """Run one claimed job; returns what became of it (done/queued/failed/lost)."""
        done, lost = threading.Event(), threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(job, done, lost), daemon=True)
        beat.start()
        try:
            result = handler(job.stage)(job, self.ctx)
        except JobError as err:
            outcome = self._fail(job, str(err), err.transient)
        except (ValueError, FileNotFoundError) as err:
            outcome = self._fail(job, f"device {job.device!r}, step {job.stage!r}: {err}", False)
        except Exception as err:  # noqa: BLE001 - one bad job never stops the worker
            log.debug("%s", traceback.format_exc())
            outcome = self._fail(job, f"device {job.device!r}, step {job.stage!r}: "
                                 f"{type(err).__name__}: {err}", True)
        else:
            if self._persist(lambda: self.queue.complete(job, result, follow_up(job, result))):
                publish(job, result, self.ctx.out)
                self.stats.done += 1
                outcome = "done"
            else:
                self.stats.lost += 1
                outcome = "lost"
                log.warning("%s: job %d finished after its lease was lost; result refused",
                            self.name, job.id)
        finally:
            done.set()
            beat.join()
        return outcome

    def _persist(self, call: Callable[[], Any]) -> Any:
        """``call()`` the queue, waiting out a database restart for up to two leases (after
        that the job is re-leased anyway and this worker's word would be refused)."""
        deadline = time.monotonic() + 2 * self.lease_seconds
        while True:
            try:
                return call()
            except QueueUnavailable as err:
                if time.monotonic() > deadline:
                    log.error("%s: giving up on the queue: %s", self.name, err)
                    return None
                log.warning("%s: %s; retrying", self.name, err)
                time.sleep(self.poll_seconds)

    def _fail(self, job: Job, error: str, transient: bool) -> str:
        state = self._persist(lambda: self.queue.fail(job, error, retry=transient))
        self.stats.errors.append(error)
        if state == "failed":
            self.stats.failed += 1
        elif state == "queued":
            self.stats.retried += 1
        log.warning("%s: job %d (%s %s %s) %s: %s", self.name, job.id, job.stage, job.device,
                    job.arch, state or "lost", error)
        return state or "lost"

    def run(self, max_jobs: int | None = None, idle_exit: bool = False) -> WorkerStats:
        """Claim and run jobs until stopped (``stop`` set, SIGTERM/SIGINT in :func:`serve`),
        ``max_jobs`` were run, or (``idle_exit``) nothing is left to claim."""
        caps = self.capabilities()
        ran = 0
        while not self.stop.is_set() and (max_jobs is None or ran < max_jobs):
            try:
                job = self.queue.claim(self.name, caps, self.lease_seconds)
                if job is None:
                    self.queue.reap()
            except QueueUnavailable as err:  # the database restarts: wait, reconnect
                log.warning("%s: %s; waiting", self.name, err)
                self.stop.wait(self.poll_seconds)
                continue
            if job is None:
                if idle_exit:
                    break
                self.stop.wait(self.poll_seconds)
                continue
            ran += 1
            log.info("%s: job %d %s %s %s (attempt %d/%d)", self.name, job.id, job.stage,
                     job.device, job.arch, job.attempts, job.max_attempts)
            self.process(job)
        return self.stats


def serve(worker: Worker, **kwargs: Any) -> WorkerStats:
    """:meth:`Worker.run` that stops after the current job on SIGTERM/SIGINT."""
    def stop(signum, frame):
        log.info("%s: signal %d, stopping after the current job", worker.name, signum)
        worker.stop.set()

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return worker.run(**kwargs)
    finally:
        for s, h in old.items():
            signal.signal(s, h)

