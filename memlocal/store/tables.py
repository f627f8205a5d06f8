"""The one handle on an owner's own tables: statements limited, by SQLite itself, to the tables
the owner's migration set created.

Every owner of tables beside the store's own data (the sync, the injection audit, the semantic
vectors, the integrations) declares them the same way: a
:class:`~memlocal.plugins.MigrationSet` whose ``tables`` names them (and whose ``reads`` names the
store tables its statements may also read). Its statements run through a :class:`TableHandle` on
the connection of one snapshot, transaction or read, while that block lasts: an SQLite authorizer
refuses any other table (and, outside a write transaction, any write) while the handle's
statement is prepared. The store's own statements in the same transaction are free. The
authorizer (a :class:`_Guard`) is set once per connection and limits only while a handle's
statement runs; a handle's statements begin with a comment naming their limit, so the
connection's statement cache, keyed by the text, never hands a statement checked under one limit
to the store or to another limit. The sync receives its handle through the replication port
(``Replica.snapshot``, ``ReplicaTransaction.tables``); a library owner through
:meth:`Database.own_tables <memlocal.store.database.Database.own_tables>`.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from typing import Any, Final, Iterable, Iterator, Sequence

__all__ = ["Connection", "TableHandle"]

_OK: Final = sqlite3.SQLITE_OK
_DENY: Final = sqlite3.SQLITE_DENY
_FREE: Final = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION})
_WRITES: Final = frozenset({sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE})


class _Limit:
    """What one kind of handle may do: read ``readable``, and with ``write`` write ``tables``."""

    __slots__ = ("readable", "tables", "write", "tag")

    def __init__(self, tables: frozenset[str], readable: frozenset[str], write: bool, tag: str) -> None:
        self.tables = tables
        self.readable = readable
        self.write = write
        # The comment a handle's statements begin with: the statement cache of a connection is
        # keyed by the SQL text, so a statement prepared (and checked) under one limit is never
        # reused by the store's own statements or under another limit.
        self.tag = tag

    def authorize(self, action: int, table: str | None) -> int:
        if action in _FREE:
            return _OK
        if action == sqlite3.SQLITE_READ:
            return _OK if table in self.readable else _DENY
        if self.write and action in _WRITES:
            return _OK if table in self.tables else _DENY
        return _DENY  # DDL, PRAGMA, ATTACH, transaction control, ...


_limits: dict[tuple[frozenset[str], frozenset[str], bool], _Limit] = {}
_limits_lock = threading.Lock()


def _limit(tables: frozenset[str], readable: frozenset[str], write: bool) -> _Limit:
    key = (tables, readable, write)
    with _limits_lock:
        found = _limits.get(key)
        if found is None:
            found = _limits[key] = _Limit(tables, readable, write, f"/* own tables {len(_limits) + 1} */ ")
        return found


class _Guard:
    """A connection's authorizer, set once: free for the store's own statements, the limit of the
    handle whose statement is being prepared (or re-prepared by SQLite after a schema change)
    while it runs one. Set once because setting an authorizer expires every statement the
    connection has prepared: a guard set and cleared around each statement made the store
    prepare its own statements again after each of the handle's."""

    __slots__ = ("limit",)

    def __init__(self) -> None:
        self.limit: _Limit | None = None

    def __call__(self, action: int, table: str | None, _arg: str | None, _db: str | None,
                 _trigger: str | None) -> int:
        limit = self.limit
        return _OK if limit is None else limit.authorize(action, table)


class Connection(sqlite3.Connection):
    """The store's connections (``sqlite3.connect(..., factory=Connection)``): a connection that
    can carry its :class:`_Guard`, which a handle needs."""

    guard: _Guard | None = None


_guards_lock = threading.Lock()


def _guard(conn: sqlite3.Connection) -> _Guard:
    if not isinstance(conn, Connection):
        raise TypeError("a table handle needs a connection the store made (memlocal.store.tables.Connection)")
    guard = conn.guard
    if guard is None:
        with _guards_lock:
            guard = conn.guard
            if guard is None:
                guard = conn.guard = _Guard()
                conn.set_authorizer(guard)
    return guard


class TableHandle:
    """Statements on ``tables`` (reads and, with ``write``, writes) and reads of ``reads``, on the
    connection of one snapshot, transaction or read until :meth:`close` (the
    :class:`memlocal.plugins.PluginTables` a plugin is given)."""

    def __init__(self, conn: sqlite3.Connection, tables: frozenset[str], *, write: bool,
                 reads: frozenset[str] = frozenset()) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._limit = _limit(tables, tables | reads, write)

    @contextmanager
    def _limited(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        if conn is None:
            raise RuntimeError("a table handle is valid only inside its snapshot or transaction (the block that gave it)")
        guard = _guard(conn)
        guard.limit = self._limit
        try:
            yield conn
        finally:
            guard.limit = None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows."""
        with self._limited() as conn:
            return conn.execute(self._limit.tag + sql, params).fetchall()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run one statement for each of ``rows``; how many rows they changed."""
        with self._limited() as conn:
            return conn.executemany(self._limit.tag + sql, rows).rowcount

    def close(self) -> None:
        """The block that gave the handle is over."""
        self._conn = None
