"""The queue on PostgreSQL (many hosts): claims take the first open row with
``FOR UPDATE SKIP LOCKED``, so concurrent workers never wait on, or take, the same job."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from anb.extras import require
from anb.jobs.queue import QueueUnavailable
from anb.jobs.sql import TABLE, SqlQueue


class PostgresQueue(SqlQueue):
    """:class:`~anb.jobs.queue.JobQueue` in a PostgreSQL database (table created if absent)."""

    NOW = "extract(epoch from statement_timestamp())::double precision"  # once per statement
    LOCK = "FOR UPDATE SKIP LOCKED"
    ID_TYPE = "BIGSERIAL"
    REAL = "DOUBLE PRECISION"

    def __init__(self, url: str, connect_timeout_s: int = 10):
        psycopg = require("psycopg", "postgres", "the PostgreSQL queue")
        super().__init__(url)
        self._psycopg, self._timeout = psycopg, connect_timeout_s
        try:
            self._connect()
        except psycopg.OperationalError as err:
            raise RuntimeError(f"cannot connect to the queue database {url!r}: "
                               f"{str(err).strip()}") from None
        self._create()

    def _connect(self) -> None:
        self._conn = self._psycopg.connect(self.url, autocommit=True,
                                           connect_timeout=self._timeout)

    def submit(self, jobs):
        added = super().submit(jobs)
        if len(added) >= 100:  # fresh statistics, so claims walk the open index in order
            with self._lock, self._transaction() as cur:
                cur.execute(f"ANALYZE {TABLE}")
        return added

    def _tables(self, cur: Any) -> set[str]:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        return {row[0] for row in cur.fetchall()}

    def _sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def _create(self) -> None:
        with self._transaction() as cur:
            # Two workers starting together would both try CREATE TABLE: serialise them.
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (TABLE,))
            self._create_in(cur)

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        try:
            if self._conn.broken or self._conn.closed:  # the server restarted: reconnect
                self._connect()
            with self._conn.transaction(), self._conn.cursor() as cur:
                yield cur
        except self._psycopg.OperationalError as err:
            raise QueueUnavailable(f"queue database {self.url!r}: {str(err).strip()}") from err

    def close(self) -> None:
        self._conn.close()
