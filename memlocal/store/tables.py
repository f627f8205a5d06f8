"""The one handle on an owner's own tables: statements limited, by SQLite itself, to the tables
the owner's migration set created.

Every owner of tables beside the store's own data (the sync, the injection audit, the semantic
vectors, the integrations) declares them the same way: a
:class:`~memlocal.plugins.MigrationSet` whose ``tables`` names them (and whose ``reads`` names the
store tables its statements may also read). Its statements run through a :class:`TableHandle` on
the connection of one snapshot, transaction or read, while that block lasts: an SQLite authorizer,
set for each statement's preparation only, refuses any other table (and, outside a write
transaction, any write). The store's own statements in the same transaction are free. The sync
receives its handle through the replication port (``Replica.snapshot``,
``ReplicaTransaction.tables``); a library owner through :meth:`Database.own_tables
<memlocal.store.database.Database.own_tables>`.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Sequence

__all__ = ["TableHandle"]


class TableHandle:
    """Statements on ``tables`` (reads and, with ``write``, writes) and reads of ``reads``, on the
    connection of one snapshot, transaction or read until :meth:`close` (the
    :class:`memlocal.plugins.PluginTables` a plugin is given)."""

    def __init__(self, conn: sqlite3.Connection, tables: frozenset[str], *, write: bool,
                 reads: frozenset[str] = frozenset()) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._tables = tables
        self._readable = tables | reads
        self._write = write

    def _authorize(self, action: int, table: str | None, _arg: str | None, _db: str | None,
                   _trigger: str | None) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            return sqlite3.SQLITE_OK if table in self._readable else sqlite3.SQLITE_DENY
        if self._write and action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE):
            return sqlite3.SQLITE_OK if table in self._tables else sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_DENY

    @contextmanager
    def _limited(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        if conn is None:
            raise RuntimeError("a table handle is valid only inside its snapshot or transaction (the block that gave it)")
        # Setting an authorizer expires the connection's prepared statements, so a statement
        # prepared earlier without it is prepared again under it: nothing slips past.
        conn.set_authorizer(self._authorize)
        try:
            yield conn
        finally:
            conn.set_authorizer(None)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (an ``INSERT ... RETURNING`` gives its new keys)."""
        with self._limited() as conn:
            return conn.execute(sql, params).fetchall()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run one statement for each of ``rows``; how many rows they changed."""
        with self._limited() as conn:
            return conn.executemany(sql, rows).rowcount

    def close(self) -> None:
        """The block that gave the handle is over."""
        self._conn = None
