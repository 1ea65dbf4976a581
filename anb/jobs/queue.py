"""The job queue interface: (architecture, device, stage) jobs with priorities, leases, attempts.

A job moves ``queued -> leased -> done | failed``; a failure with attempts left, or a lease that
expires (the worker was killed, the machine lost), puts it back to ``queued``; ``cancelled`` is
set by hand. Claims are atomic and in priority order (lower first, then oldest): SQLite
serialises writers, PostgreSQL uses ``FOR UPDATE SKIP LOCKED``. Each claim gets a fresh lease
token; ``heartbeat``, ``complete`` and ``fail`` only act while the caller still holds that token,
so after a lease expiry and a re-claim the late worker's result is refused and a result is
written exactly once.

Open a queue with :func:`open_queue`: a path or ``sqlite:///path`` (one host, embedded), or
``postgresql://user@host:port/db`` (many hosts). Both engines implement :class:`JobQueue`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

STATES = ("queued", "leased", "done", "failed", "cancelled")


class QueueUnavailable(RuntimeError):
    """The queue's database cannot be reached just now (restarting, network); the next call
    reconnects. Workers wait and try again."""


@dataclass(frozen=True)
class JobSpec:
    """A job to submit. ``priority`` lower runs first (0 jumps the queue); ``next_stages`` are
    queued one after another as each finishes (see :meth:`JobQueue.complete`)."""

    arch: str
    device: str
    stage: str
    priority: int = 50
    max_attempts: int = 3
    payload: dict[str, Any] = field(default_factory=dict)
    next_stages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("arch", "device", "stage"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"job {name}={value!r} is invalid; allowed: a non-empty string")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int) \
                or self.priority < 0:
            raise ValueError(f"job priority={self.priority!r} is invalid; allowed: an integer >= 0")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or self.max_attempts < 1:
            raise ValueError(f"job max_attempts={self.max_attempts!r} is invalid; allowed: an "
                             "integer >= 1")


@dataclass(frozen=True)
class Job:
    """A job as stored. ``lease_token`` identifies the current claim (None unless leased)."""

    id: int
    arch: str
    device: str
    stage: str
    priority: int
    state: str
    attempts: int
    max_attempts: int
    payload: dict[str, Any]
    next_stages: tuple[str, ...]
    worker: str | None
    lease_token: str | None
    lease_until: float | None
    last_error: str | None
    result: dict[str, Any] | None
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class Capability:
    """What a worker can do: ``stage`` for ``device`` (None: for any device, host-only stages)."""

    stage: str
    device: str | None = None


class JobQueue(ABC):
    """A shared job queue on a database engine (see module docstring)."""

    url: str

    @abstractmethod
    def submit(self, jobs: Iterable[JobSpec]) -> list[int]:
        """Queue ``jobs``; one already present for the same (arch, device, stage) is left as it
        is. Returns the ids of the jobs added."""

    @abstractmethod
    def claim(self, worker: str, capabilities: Sequence[Capability], lease_seconds: float,
              ) -> Job | None:
        """Lease the first job (by priority, then age) this worker can do, or None."""

    @abstractmethod
    def heartbeat(self, job: Job, lease_seconds: float) -> bool:
        """Extend ``job``'s lease; False if the claim was lost (expired and re-leased, or
        cancelled): the caller should stop, its result would be refused."""

    @abstractmethod
    def complete(self, job: Job, result: dict[str, Any], follow_up: JobSpec | None = None,
                 ) -> bool:
        """Store ``result`` and mark ``job`` done, and queue ``follow_up`` in the same
        transaction. False (nothing written) if the claim was lost."""

    @abstractmethod
    def fail(self, job: Job, error: str, retry: bool = True) -> str | None:
        """Record ``error``; back to ``queued`` while attempts are left (and ``retry``), else
        ``failed``. Returns the new state, or None if the claim was lost."""

    @abstractmethod
    def release(self, job: Job) -> bool:
        """Give an unfinished job back (worker stopping): queued again, the attempt not counted."""

    @abstractmethod
    def retry(self, ids: Sequence[int] | None = None, device: str | None = None,
              stage: str | None = None) -> int:
        """Re-queue failed/cancelled jobs (all, or by id/device/stage) with fresh attempts."""

    @abstractmethod
    def cancel(self, ids: Sequence[int] | None = None, device: str | None = None,
               stage: str | None = None) -> int:
        """Cancel queued/leased jobs (by id/device/stage; at least one filter)."""

    @abstractmethod
    def bump(self, ids: Sequence[int], priority: int = 0) -> int:
        """Set the priority of open jobs ``ids`` (0 jumps the queue)."""

    @abstractmethod
    def lookup(self, specs: Sequence[JobSpec]) -> list[int | None]:
        """The id of the job stored for each spec's (arch, device, stage), None where there is
        none: after :meth:`submit`, the ids of all of them, new or already queued."""

    @abstractmethod
    def get(self, ids: Sequence[int]) -> list[Job]:
        """The jobs ``ids`` (missing ids are left out)."""

    @abstractmethod
    def jobs(self, state: str | None = None, device: str | None = None,
             stage: str | None = None, limit: int = 100) -> list[Job]:
        """Jobs filtered by state/device/stage, in claim order."""

    @abstractmethod
    def counts(self) -> dict[tuple[str, str, str], int]:
        """Number of jobs per (device, stage, state)."""

    @abstractmethod
    def reap(self) -> int:
        """Mark leased jobs whose lease expired with no attempts left ``failed``; returns how
        many (expired ones with attempts left are simply claimable again)."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    def __enter__(self) -> JobQueue:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_queue(url: str, create: bool = True) -> JobQueue:
    """A queue on ``url``: ``postgresql://...`` / ``postgres://...``, ``sqlite:///path`` or a
    plain file path (SQLite). ``create=False``: a SQLite file must already exist."""
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        from anb.jobs.postgres import PostgresQueue

        return PostgresQueue(text)
    if text.startswith("sqlite://"):
        text = text[len("sqlite://"):]
        if not text.startswith("/"):
            raise ValueError(f"queue url {url!r} is invalid; allowed: sqlite:///absolute/path")
    elif "://" in text:
        raise ValueError(f"queue url {url!r} is invalid; allowed: postgresql://..., "
                         "sqlite:///path or a file path")
    from anb.jobs.sqlite import SqliteQueue

    return SqliteQueue(text, create=create)
