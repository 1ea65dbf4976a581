"""The queue on SQLite (the embedded default for one host): WAL mode, writers serialised by
``BEGIN IMMEDIATE``, so a claim's select-and-lease is atomic across processes."""
from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from anb.formats import NewerFormat
from anb.jobs.sql import TABLE, SqlQueue


class SqliteQueue(SqlQueue):
    """:class:`~anb.jobs.queue.JobQueue` in a SQLite file (created if absent)."""

    NOW = "((julianday('now') - 2440587.5) * 86400.0)"
    ID_TYPE = "INTEGER"  # an alias of the rowid: ids are never reused while rows remain
    REAL = "REAL"

    def __init__(self, path: str | Path, busy_timeout_s: float = 60.0, create: bool = True):
        path = Path(path)
        if path.is_dir():
            raise ValueError(f"queue path {str(path)!r} is a folder; allowed: a SQLite file")
        if not path.parent.is_dir():
            raise ValueError(f"queue path {str(path)!r}: folder {str(path.parent)!r} does not "
                             "exist")
        if not create and not path.exists():
            raise ValueError(f"queue {str(path)!r} does not exist; 'anb queue submit' creates "
                             "it (or name another with --queue / $ANB_QUEUE)")
        super().__init__(f"sqlite:///{path.resolve()}")
        self._conn = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None,
                                     check_same_thread=False)
        try:
            tables = {row[0] for row in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and TABLE not in tables:
                raise ValueError(f"holds the tables {sorted(tables)}, not {TABLE!r}")
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._create()
        except (sqlite3.DatabaseError, ValueError) as err:
            self._conn.close()
            if isinstance(err, NewerFormat):
                raise
            raise ValueError(f"{path} is not an anb queue database ({err}); give the file "
                             "'anb queue submit' created, or a new path") from None

    def _tables(self, cur: Any) -> set[str]:
        cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {row[0] for row in cur.fetchall()}

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        cur = self._conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()
