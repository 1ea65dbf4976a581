"""The SQL both engines share; an engine supplies its connection, clock, placeholders, the
claim's row-locking clause and how it lists tables (see :mod:`anb.jobs.sqlite`,
:mod:`anb.jobs.postgres`).

The schema's version (:mod:`anb.formats`, format ``queue``) is a row of the table
``anb_schema``, written when the queue is created and checked whenever it is opened; a queue
created before it (a lone ``anb_jobs`` table) is version 1 and gets the row."""
from __future__ import annotations

import json
import threading
import uuid
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from anb.formats import UNVERSIONED, check, current
from anb.jobs.queue import STATES, Capability, Job, JobQueue, JobSpec

TABLE = "anb_jobs"
#: ``(name, version)`` rows: the version of each format the database holds (``queue``).
SCHEMA_TABLE = "anb_schema"
COLUMNS = ("id", "arch", "device", "stage", "priority", "state", "attempts", "max_attempts",
           "payload", "next_stages", "worker", "lease_token", "lease_until", "last_error",
           "result", "created_at", "updated_at")
_SELECT = ", ".join(COLUMNS)
_OPEN = "state IN ('queued', 'leased')"  # the claim's partial index


def _row_job(row: Sequence[Any]) -> Job:
    data = dict(zip(COLUMNS, row, strict=True))
    data["payload"] = json.loads(data["payload"])
    data["next_stages"] = tuple(json.loads(data["next_stages"]))
    data["result"] = json.loads(data["result"]) if data["result"] is not None else None
    return Job(**data)


def _filters(ids: Sequence[int] | None, device: str | None, stage: str | None,
             ) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if ids is not None:
        ids = [int(i) for i in ids]
        clauses.append(f"id IN ({', '.join('?' * len(ids))})" if ids else "1 = 0")
        params += ids
    for name, value in (("device", device), ("stage", stage)):
        if value is not None:
            clauses.append(f"{name} = ?")
            params.append(value)
    return (" AND ".join(clauses) or "1 = 1"), params


class SqlQueue(JobQueue):
    """:class:`JobQueue` in portable SQL (``?`` placeholders, ``RETURNING``, ``ON CONFLICT``)."""

    NOW: str  # SQL expression: the database's clock in seconds since the epoch
    LOCK: str = ""  # row-locking clause of the claim's sub-select
    ID_TYPE: str
    REAL: str

    def __init__(self, url: str):
        self.url = url
        self._lock = threading.Lock()  # one connection; the heartbeat thread shares it

    # -- engine hooks ---------------------------------------------------------------------
    @abstractmethod
    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A cursor inside a write transaction (committed on exit, rolled back on error)."""

    @abstractmethod
    def _tables(self, cur: Any) -> set[str]:
        """The names of the tables in the queue's database (schema)."""

    def _sql(self, text: str) -> str:
        return text

    def _create(self) -> None:
        with self._transaction() as cur:
            self._create_in(cur)

    def _create_in(self, cur: Any) -> None:
        existing = self._tables(cur)
        version = current("queue") if TABLE not in existing else UNVERSIONED
        if SCHEMA_TABLE in existing:
            cur.execute(self._sql(f"SELECT version FROM {SCHEMA_TABLE} WHERE name = ?"),
                        ("queue",))
            row = cur.fetchone()
            version = row[0] if row else version
        check("queue", version, self.url)
        cur.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (name TEXT PRIMARY KEY, "
                    "version INTEGER NOT NULL)")
        cur.execute(self._sql(f"INSERT INTO {SCHEMA_TABLE} (name, version) VALUES (?, ?) "
                              "ON CONFLICT (name) DO NOTHING"), ("queue", version))
        cur.execute(self._sql(f"""
            CREATE TABLE IF NOT EXISTS {TABLE} (
                id {self.ID_TYPE} PRIMARY KEY,
                arch TEXT NOT NULL, device TEXT NOT NULL, stage TEXT NOT NULL,
                priority INTEGER NOT NULL, state TEXT NOT NULL DEFAULT 'queued',
                attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL,
                payload TEXT NOT NULL, next_stages TEXT NOT NULL,
                worker TEXT, lease_token TEXT, lease_until {self.REAL}, last_error TEXT,
                result TEXT, created_at {self.REAL} NOT NULL, updated_at {self.REAL} NOT NULL,
                UNIQUE (arch, device, stage),
                CHECK (state IN ({", ".join(f"'{s}'" for s in STATES)})))"""))
        cur.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_open ON {TABLE} (priority, id) "
                    f"WHERE {_OPEN}")

    # -- writes ---------------------------------------------------------------------------
    def _insert(self, cur: Any, spec: JobSpec) -> int | None:
        cur.execute(self._sql(
            f"INSERT INTO {TABLE} (arch, device, stage, priority, max_attempts, payload, "
            f"next_stages, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, {self.NOW}, "
            f"{self.NOW}) ON CONFLICT (arch, device, stage) DO NOTHING RETURNING id"),
            (spec.arch, spec.device, spec.stage, spec.priority, spec.max_attempts,
             json.dumps(spec.payload, sort_keys=True), json.dumps(list(spec.next_stages))))
        row = cur.fetchone()
        return int(row[0]) if row else None

    def submit(self, jobs: Iterable[JobSpec]) -> list[int]:
        added = []
        with self._lock, self._transaction() as cur:
            for spec in jobs:
                new = self._insert(cur, spec)
                if new is not None:
                    added.append(new)
        return added

    def claim(self, worker: str, capabilities: Sequence[Capability], lease_seconds: float,
              ) -> Job | None:
        if not capabilities:
            raise ValueError("claim() needs at least one capability (stage[, device])")
        caps, params = [], []
        for cap in capabilities:
            if cap.device is None:
                caps.append("stage = ?")
                params.append(cap.stage)
            else:
                caps.append("(stage = ? AND device = ?)")
                params += [cap.stage, cap.device]
        token = uuid.uuid4().hex
        sql = self._sql(f"""
            UPDATE {TABLE} SET state = 'leased', worker = ?, lease_token = ?,
                lease_until = {self.NOW} + ?, attempts = attempts + 1, updated_at = {self.NOW},
                last_error = CASE WHEN state = 'leased'
                    THEN 'lease of worker ' || worker || ' expired (attempt ' || attempts || ')'
                    ELSE last_error END
            WHERE id = (SELECT id FROM {TABLE}
                        WHERE {_OPEN} AND (state = 'queued'
                                           OR (state = 'leased' AND lease_until < {self.NOW}))
                          AND attempts < max_attempts AND ({" OR ".join(caps)})
                        ORDER BY priority, id LIMIT 1 {self.LOCK})
            RETURNING {_SELECT}""")
        with self._lock, self._transaction() as cur:
            cur.execute(sql, (worker, token, float(lease_seconds), *params))
            row = cur.fetchone()
        return _row_job(row) if row else None

    def _held(self, cur: Any, job: Job, sets: str, params: Sequence[Any]) -> bool:
        cur.execute(self._sql(
            f"UPDATE {TABLE} SET {sets}, updated_at = {self.NOW} "
            "WHERE id = ? AND state = 'leased' AND lease_token = ?"),
            (*params, job.id, job.lease_token))
        return cur.rowcount == 1

    def heartbeat(self, job: Job, lease_seconds: float) -> bool:
        with self._lock, self._transaction() as cur:
            return self._held(cur, job, f"lease_until = {self.NOW} + ?", (float(lease_seconds),))

    def complete(self, job: Job, result: dict[str, Any], follow_up: JobSpec | None = None,
                 ) -> bool:
        with self._lock, self._transaction() as cur:
            ok = self._held(cur, job, "state = 'done', result = ?, lease_token = NULL, "
                            "lease_until = NULL", (json.dumps(result, sort_keys=True),))
            if ok and follow_up is not None:
                self._insert(cur, follow_up)
            return ok

    def fail(self, job: Job, error: str, retry: bool = True) -> str | None:
        state = "queued" if retry and job.attempts < job.max_attempts else "failed"
        with self._lock, self._transaction() as cur:
            ok = self._held(cur, job, "state = ?, last_error = ?, lease_token = NULL, "
                            "lease_until = NULL", (state, str(error)))
        return state if ok else None

    def release(self, job: Job) -> bool:
        with self._lock, self._transaction() as cur:
            return self._held(cur, job, "state = 'queued', attempts = attempts - 1, "
                              "lease_token = NULL, lease_until = NULL, worker = NULL", ())

    def _update(self, sets: str, where: str, params: Sequence[Any]) -> int:
        with self._lock, self._transaction() as cur:
            cur.execute(self._sql(f"UPDATE {TABLE} SET {sets}, updated_at = {self.NOW} "
                                  f"WHERE {where}"), params)
            return cur.rowcount

    def retry(self, ids: Sequence[int] | None = None, device: str | None = None,
              stage: str | None = None) -> int:
        where, params = _filters(ids, device, stage)
        return self._update("state = 'queued', attempts = 0, lease_token = NULL, "
                            "lease_until = NULL, worker = NULL",
                            f"state IN ('failed', 'cancelled') AND {where}", params)

    def cancel(self, ids: Sequence[int] | None = None, device: str | None = None,
               stage: str | None = None) -> int:
        if ids is None and device is None and stage is None:
            raise ValueError("cancel needs ids, a device or a stage (refusing to cancel all)")
        where, params = _filters(ids, device, stage)
        return self._update("state = 'cancelled', lease_token = NULL, lease_until = NULL",
                            f"state IN ('queued', 'leased') AND {where}", params)

    def bump(self, ids: Sequence[int], priority: int = 0) -> int:
        if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
            raise ValueError(f"priority={priority!r} is invalid; allowed: an integer >= 0")
        where, params = _filters(ids, None, None)
        return self._update("priority = ?", f"state IN ('queued', 'leased') AND {where}",
                            [priority, *params])

    def reap(self) -> int:
        return self._update(
            "state = 'failed', lease_token = NULL, last_error = 'lease of worker ' || worker || "
            "' expired on its last attempt (' || attempts || ')'",
            f"state = 'leased' AND lease_until < {self.NOW} AND attempts >= max_attempts", ())

    # -- reads ----------------------------------------------------------------------------
    def _select(self, sql: str, params: Sequence[Any]) -> list[Any]:
        with self._lock, self._transaction() as cur:
            cur.execute(self._sql(sql), params)
            return cur.fetchall()

    def lookup(self, specs: Sequence[JobSpec]) -> list[int | None]:
        out = []
        with self._lock, self._transaction() as cur:
            for spec in specs:
                cur.execute(self._sql(f"SELECT id FROM {TABLE} WHERE arch = ? AND device = ? "
                                      "AND stage = ?"), (spec.arch, spec.device, spec.stage))
                row = cur.fetchone()
                out.append(int(row[0]) if row else None)
        return out

    def get(self, ids: Sequence[int]) -> list[Job]:
        where, params = _filters(ids, None, None)
        return [_row_job(r) for r in self._select(
            f"SELECT {_SELECT} FROM {TABLE} WHERE {where} ORDER BY id", params)]

    def jobs(self, state: str | None = None, device: str | None = None,
             stage: str | None = None, limit: int = 100) -> list[Job]:
        if state is not None and state not in STATES:
            raise ValueError(f"state={state!r} is invalid; allowed: {list(STATES)}")
        where, params = _filters(None, device, stage)
        if state is not None:
            where += " AND state = ?"
            params.append(state)
        return [_row_job(r) for r in self._select(
            f"SELECT {_SELECT} FROM {TABLE} WHERE {where} ORDER BY priority, id LIMIT ?",
            [*params, int(limit)])]

    def counts(self) -> dict[tuple[str, str, str], int]:
        rows = self._select(f"SELECT device, stage, state, COUNT(*) FROM {TABLE} "
                            "GROUP BY device, stage, state ORDER BY device, stage, state", ())
        return {(d, s, st): int(n) for d, s, st, n in rows}
