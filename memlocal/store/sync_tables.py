"""The sync's own tables behind typed operations (:class:`memlocal.plugins.SyncTableReads` and
:class:`memlocal.plugins.SyncTables`): the statements the replication port runs for the sync
package on the tables its :class:`~memlocal.plugins.PluginSchema` declares, so that no SQL text,
connection or cursor crosses the port. The sync owns the tables' schema and its migrations; the
store owns these statements, each a named method with typed rows."""

from __future__ import annotations

import re
import sqlite3
from typing import Any, Callable, Sequence

from ..plugins import (
    AddColumn,
    BreakerRow,
    Column,
    DeleteRecord,
    Index,
    JournalEntry,
    PluginSchema,
    SchemaChange,
    SkippedRow,
    SyncBase,
    Table,
)
from .memories import id_batches
from .migrations import MigrationSet

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")

Read = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


# --- a plugin's schema, rendered ------------------------------------------------------------------


def _name(name: str) -> str:
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return name


def _column(c: Column) -> str:
    sql = f"{_name(c.name)} {c.type}"
    if c.primary_key:
        return sql + " PRIMARY KEY" + (" AUTOINCREMENT" if c.autoincrement else "")
    return sql + (" NOT NULL" if c.not_null else "")


def render(change: SchemaChange) -> str:
    """The DDL statement of one typed schema change (``IF NOT EXISTS`` where SQLite has it)."""
    if isinstance(change, Table):
        return f"CREATE TABLE IF NOT EXISTS {_name(change.name)} ({', '.join(_column(c) for c in change.columns)})"
    if isinstance(change, Index):
        return (f"CREATE INDEX IF NOT EXISTS {_name(change.name)} ON {_name(change.table)}"
                f" ({', '.join(_name(c) for c in change.columns)})")
    if isinstance(change, AddColumn):
        return f"ALTER TABLE {_name(change.table)} ADD COLUMN {_column(change.column)}"
    raise TypeError(f"unknown schema change {change!r}")  # pragma: no cover


def migration_set(schema: PluginSchema) -> MigrationSet:
    """``schema`` as a migration set of the store's one runner: each step runs its statements."""
    def step(changes: Sequence[SchemaChange]) -> Callable[[Any], None]:
        statements = [render(c) for c in changes]  # checked now, before any step runs

        def run(db: Any) -> None:
            for sql in statements:
                db.execute(sql)
        return run

    return MigrationSet(schema.name, {n: step(changes) for n, changes in schema.steps.items()},
                        stamp_key=schema.stamp_key)


# --- the statements -------------------------------------------------------------------------------

_BASE = "SELECT id, profile, etag, content_hash, row_sig FROM sync_base"
_NOTE_BASE = "SELECT automation_id, '', etag, content_hash, NULL FROM sync_note_base"


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


class SyncTableReader:
    """The reads of :class:`memlocal.plugins.SyncTableReads`, through ``read`` (the store's
    locked, error-translating read, or a transaction's connection)."""

    def __init__(self, read: Read) -> None:
        self._read = read

    def bases(self, profiles: Sequence[str] | None = None, ids: Sequence[str] | None = None) -> list[SyncBase]:
        where, params = ("", []) if profiles is None else (f" WHERE profile IN ({_marks(profiles)})", list(profiles))
        if ids is None:
            return [SyncBase._make(r) for r in self._read(_BASE + where, params)]
        out: list[SyncBase] = []
        for part in id_batches(ids):
            cond = f"{' AND' if where else ' WHERE'} id IN ({_marks(part)})"
            out += [SyncBase._make(r) for r in self._read(_BASE + where + cond, [*params, *part])]
        return out

    def base_ids(self) -> set[str]:
        return {r[0] for r in self._read("SELECT id FROM sync_base", ())}

    def has_base(self) -> bool:
        return bool(self._read("SELECT 1 FROM sync_base LIMIT 1", ()))

    def note_bases(self, automation_id: str | None = None) -> list[SyncBase]:
        if automation_id is None:
            return [SyncBase._make(r) for r in self._read(_NOTE_BASE, ())]
        return [SyncBase._make(r) for r in self._read(_NOTE_BASE + " WHERE automation_id = ?", (automation_id,))]

    def skipped(self, prefix: str = "") -> list[SkippedRow]:
        rows = self._read("SELECT key, etag, reason, seen_us FROM sync_skipped WHERE substr(key, 1, ?) = ?"
                          " ORDER BY key", (len(prefix), prefix))
        return [SkippedRow._make(r) for r in rows]

    def journal(self, limit: int) -> list[JournalEntry]:
        rows = self._read("SELECT n, key, etag, op, size FROM sync_journal ORDER BY n LIMIT ?", (limit,))
        return [JournalEntry(int(n), str(k), str(e), str(op), int(size)) for n, k, e, op, size in rows]

    def delete_records(self) -> list[DeleteRecord]:
        return [DeleteRecord._make(r) for r in self._read("SELECT key, id, seq, seen_us FROM sync_delete_record", ())]

    def breaker(self, bucket: str) -> BreakerRow | None:
        rows = self._read("SELECT failures, open_until_us, probe_until_us, reason, opened_us, failed_us"
                          " FROM sync_breaker WHERE bucket = ?", (bucket,))
        if not rows:
            return None
        r = rows[0]
        return BreakerRow(int(r[0]), int(r[1]), int(r[2]), str(r[3]), int(r[4]), int(r[5]))


class SyncTableWriter(SyncTableReader):
    """:class:`memlocal.plugins.SyncTables`: the reads and the writes, inside one store
    transaction (``conn``), with the store-side changes of the same ``ReplicaTransaction``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(lambda sql, params: conn.execute(sql, params).fetchall())
        self._conn = conn

    def put_bases(self, bases: Sequence[SyncBase], synced_us: int) -> None:
        self._conn.executemany(
            "INSERT INTO sync_base (id, profile, etag, content_hash, synced_us, row_sig) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(id) DO UPDATE SET profile = excluded.profile, etag = excluded.etag,"
            " content_hash = excluded.content_hash, synced_us = excluded.synced_us, row_sig = excluded.row_sig",
            [(b.id, b.profile, b.etag, b.content_hash, synced_us, b.row_sig) for b in bases])

    def set_row_sigs(self, sigs: Sequence[tuple[str, str, str]]) -> None:
        self._conn.executemany("UPDATE sync_base SET row_sig = ? WHERE id = ? AND content_hash = ?",
                               [(sig, mid, content_hash) for mid, content_hash, sig in sigs])

    def drop_bases(self, ids: Sequence[str]) -> None:
        for part in id_batches(ids):
            self._conn.execute(f"DELETE FROM sync_base WHERE id IN ({_marks(part)})", part)

    def drop_profile_bases(self, profiles: Sequence[str] | None = None) -> int:
        if profiles is None:
            return self._conn.execute("DELETE FROM sync_base").rowcount
        return self._conn.execute(f"DELETE FROM sync_base WHERE profile IN ({_marks(profiles)})", list(profiles)).rowcount

    def put_note_base(self, base: SyncBase, synced_us: int) -> None:
        self._conn.execute(
            "INSERT INTO sync_note_base (automation_id, etag, content_hash, synced_us) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(automation_id) DO UPDATE SET etag = excluded.etag,"
            " content_hash = excluded.content_hash, synced_us = excluded.synced_us",
            (base.id, base.etag, base.content_hash, synced_us))

    def drop_note_bases(self, ids: Sequence[str] | None = None) -> None:
        if ids is None:
            self._conn.execute("DELETE FROM sync_note_base")
            return
        for part in id_batches(ids):
            self._conn.execute(f"DELETE FROM sync_note_base WHERE automation_id IN ({_marks(part)})", part)

    def skip(self, row: SkippedRow) -> None:
        self._conn.execute("INSERT INTO sync_skipped (key, etag, reason, seen_us) VALUES (?, ?, ?, ?)"
                           " ON CONFLICT(key) DO UPDATE SET etag = excluded.etag, reason = excluded.reason,"
                           " seen_us = excluded.seen_us", row)

    def unskip(self, keys: Sequence[str]) -> None:
        self._conn.executemany("DELETE FROM sync_skipped WHERE key = ?", [(k,) for k in keys])

    def journal_add(self, key: str, etag: str, op: str, size: int) -> None:
        self._conn.execute("INSERT INTO sync_journal (key, etag, op, size) VALUES (?, ?, ?, ?)", (key, etag, op, size))

    def journal_done(self, upto: int) -> None:
        self._conn.execute("DELETE FROM sync_journal WHERE n <= ?", (upto,))

    def put_delete_records(self, records: Sequence[DeleteRecord]) -> None:
        self._conn.executemany("INSERT INTO sync_delete_record (key, id, seq, seen_us) VALUES (?, ?, ?, ?)"
                               " ON CONFLICT(key) DO UPDATE SET seq = excluded.seq, seen_us = excluded.seen_us",
                               records)

    def drop_delete_records(self, keys: Sequence[str]) -> None:
        self._conn.executemany("DELETE FROM sync_delete_record WHERE key = ?", [(k,) for k in keys])

    def drop_delete_records_before(self, seen_before_us: int) -> None:
        self._conn.execute("DELETE FROM sync_delete_record WHERE seen_us < ?", (seen_before_us,))

    def clear(self) -> None:
        for table in ("sync_base", "sync_note_base", "sync_skipped", "sync_delete_record", "sync_journal"):
            self._conn.execute(f"DELETE FROM {table}")

    def breaker_failed(self, bucket: str, failures: int, open_until_us: int, reason: str, now_us: int) -> None:
        self._conn.execute(
            "INSERT INTO sync_breaker (bucket, failures, open_until_us, probe_until_us, reason, opened_us,"
            " failed_us) VALUES (?, ?, ?, 0, ?, ?, ?) ON CONFLICT(bucket) DO UPDATE SET"
            " failures = excluded.failures, open_until_us = excluded.open_until_us, probe_until_us = 0,"
            " reason = excluded.reason, failed_us = excluded.failed_us",
            (bucket, failures, open_until_us, reason, now_us, now_us))

    def breaker_probe(self, bucket: str, until_us: int) -> None:
        self._conn.execute("UPDATE sync_breaker SET probe_until_us = ? WHERE bucket = ?", (until_us, bucket))

    def breaker_close(self, bucket: str) -> bool:
        return self._conn.execute("DELETE FROM sync_breaker WHERE bucket = ?", (bucket,)).rowcount > 0
