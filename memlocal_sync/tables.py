"""The sync's own tables: their schema, their migrations, their rows and every statement on them.

The tables are a named migration set (``SYNC_TABLES``, stamped in ``meta`` under ``sync.schema``)
that the store's one migration runner applies (``Replica.migrate``), the same mechanism as the
library's and the integrations' tables (docs/storage.md, "Migrations"). The store hands the sync a
handle on exactly these tables (:class:`memlocal.plugins.PluginTables`: ``execute`` and
``executemany``), valid only inside the port's ``snapshot()`` (reads) or ``transaction()``
(``ReplicaTransaction.tables``: reads and writes that commit with the store-side changes of the
same transaction); a statement on any other table is refused by SQLite itself. Each function here
is one statement (or a few, batched) on that handle, with typed rows.

A new table or column is a new step of ``SYNC_TABLES`` (the next number), its name added to
``tables``; never a change to a step that shipped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Iterator, NamedTuple, Sequence

from memlocal.plugins import MigrationSet, PluginTables

if TYPE_CHECKING:
    import sqlite_utils

__all__ = [
    "META_SCHEMA",
    "SYNC_TABLES",
    "BreakerRow",
    "DeleteRecord",
    "JournalEntry",
    "SkippedRow",
    "SyncBase",
]

META_SCHEMA: Final = "sync.schema"


# --- the schema -----------------------------------------------------------------------------------
# The statements are those the typed schema steps of earlier releases rendered, word for word
# (``IF NOT EXISTS``: databases from before the sync owned its tables already have the first two).


def _step_1(db: sqlite_utils.Database) -> None:
    """``sync_base``: per memory, what this host last synced with the bucket (the object's ETag and
    the memory's content hash), the "base" of the three-way reconciliation. ``sync_skipped``:
    bucket objects that could not be used, with the reason, until they change or go away."""
    db.execute("CREATE TABLE IF NOT EXISTS sync_base (id TEXT PRIMARY KEY, profile TEXT NOT NULL,"
               " etag TEXT NOT NULL, content_hash TEXT NOT NULL, synced_us INTEGER NOT NULL)")
    db.execute("CREATE INDEX IF NOT EXISTS sync_base_profile ON sync_base (profile)")
    db.execute("CREATE TABLE IF NOT EXISTS sync_skipped (key TEXT PRIMARY KEY, etag TEXT NOT NULL,"
               " reason TEXT NOT NULL, seen_us INTEGER NOT NULL)")


def _step_2(db: sqlite_utils.Database) -> None:
    """``sync_note_base``: per automation note, what this host last synced with the bucket
    (``memlocal/automations/<id>.json``'s ETag and the note's content hash)."""
    db.execute("CREATE TABLE IF NOT EXISTS sync_note_base (automation_id TEXT PRIMARY KEY, etag TEXT NOT NULL,"
               " content_hash TEXT NOT NULL, synced_us INTEGER NOT NULL)")


def _step_3(db: sqlite_utils.Database) -> None:
    """``sync_base.row_sig``: the local row's content signature that the base's content hash was
    computed for (NULL: unknown, hash the row). A no-op pass then hashes nothing."""
    db.execute("ALTER TABLE sync_base ADD COLUMN row_sig TEXT")


def _step_4(db: sqlite_utils.Database) -> None:
    """``sync_breaker``: the write-through circuit breaker of every process on this host, per
    configured bucket (``memlocal_sync.breaker``): consecutive failures, until when it is open
    (wall clock, microseconds), until when one process holds the half-open probe, why, since when
    (the first failure) and the last failure."""
    db.execute("CREATE TABLE IF NOT EXISTS sync_breaker (bucket TEXT PRIMARY KEY, failures INTEGER NOT NULL,"
               " open_until_us INTEGER NOT NULL, probe_until_us INTEGER NOT NULL, reason TEXT NOT NULL,"
               " opened_us INTEGER NOT NULL, failed_us INTEGER NOT NULL)")


def _step_5(db: sqlite_utils.Database) -> None:
    """The change record's local side (``memlocal_sync.changes``): ``sync_journal``, what this host
    wrote to the bucket and has not published yet (written in the transaction that records the
    write, so a crash never loses one); ``sync_delete_record``, the delete records read from the
    bucket, which explain the disappearances they name (kept for the record's retention)."""
    db.execute("CREATE TABLE IF NOT EXISTS sync_journal (n INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL,"
               " etag TEXT NOT NULL, op TEXT NOT NULL, size INTEGER NOT NULL)")
    db.execute("CREATE TABLE IF NOT EXISTS sync_delete_record (key TEXT PRIMARY KEY, id TEXT NOT NULL,"
               " seq INTEGER NOT NULL, seen_us INTEGER NOT NULL)")


SYNC_TABLES: Final = MigrationSet(
    "sync", {1: _step_1, 2: _step_2, 3: _step_3, 4: _step_4, 5: _step_5}, stamp_key=META_SCHEMA,
    tables=("sync_base", "sync_skipped", "sync_note_base", "sync_breaker", "sync_journal", "sync_delete_record"))
SCHEMA_VERSION: Final = SYNC_TABLES.version


# --- the rows -------------------------------------------------------------------------------------


class SyncBase(NamedTuple):
    """What this host last synced of one object (``sync_base``; a note's, ``sync_note_base``,
    has ``profile`` ``""`` and no ``row_sig``): the memory or automation id, the object's ETag
    and the content hash; ``row_sig``, the local row's content signature (``Replica.signature``)
    that ``content_hash`` is the hash of (``None``: unknown)."""

    id: str
    profile: str
    etag: str
    content_hash: str
    row_sig: str | None = None


class SkippedRow(NamedTuple):
    """A bucket object the sync could not use (``sync_skipped``), until it changes or goes away."""

    key: str
    etag: str
    reason: str
    seen_us: int


class JournalEntry(NamedTuple):
    """A write of this host not yet published in the change record (``sync_journal``)."""

    n: int
    key: str
    etag: str
    op: str
    size: int


class DeleteRecord(NamedTuple):
    """A delete record read from the bucket (``sync_delete_record``)."""

    key: str
    id: str
    seq: int
    seen_us: int


class BreakerRow(NamedTuple):
    """The host's write-through circuit breaker of one bucket (``sync_breaker``); times are
    wall-clock microseconds."""

    failures: int
    open_until_us: int
    probe_until_us: int
    reason: str
    opened_us: int
    failed_us: int


# --- reads (inside ``Replica.snapshot()`` or a transaction) ---------------------------------------

_BASE: Final = "SELECT id, profile, etag, content_hash, row_sig FROM sync_base"
_NOTE_BASE: Final = "SELECT automation_id, '', etag, content_hash, NULL FROM sync_note_base"


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def _batches(ids: Sequence[str]) -> Iterator[list[str]]:
    """``ids`` in lists short enough for one ``IN (...)`` (SQLite's default limit is 999 variables)."""
    for i in range(0, len(ids), 500):
        yield list(ids[i:i + 500])


def bases(t: PluginTables, profiles: Sequence[str] | None = None,
          ids: Sequence[str] | None = None) -> list[SyncBase]:
    """The memories' bases (of ``profiles``; among ``ids``)."""
    where, params = ("", []) if profiles is None else (f" WHERE profile IN ({_marks(profiles)})", list(profiles))
    if ids is None:
        return [SyncBase._make(r) for r in t.execute(_BASE + where, params)]
    out: list[SyncBase] = []
    for part in _batches(ids):
        cond = f"{' AND' if where else ' WHERE'} id IN ({_marks(part)})"
        out += [SyncBase._make(r) for r in t.execute(_BASE + where + cond, [*params, *part])]
    return out


def base_ids(t: PluginTables) -> set[str]:
    return {r[0] for r in t.execute("SELECT id FROM sync_base")}


def has_base(t: PluginTables) -> bool:
    """Whether any memory has a base."""
    return bool(t.execute("SELECT 1 FROM sync_base LIMIT 1"))


def note_bases(t: PluginTables, automation_id: str | None = None) -> list[SyncBase]:
    """The automation notes' bases (of one note)."""
    if automation_id is None:
        return [SyncBase._make(r) for r in t.execute(_NOTE_BASE)]
    return [SyncBase._make(r) for r in t.execute(_NOTE_BASE + " WHERE automation_id = ?", (automation_id,))]


def skipped(t: PluginTables, prefix: str = "") -> list[SkippedRow]:
    """The objects skipped under ``prefix``, by key."""
    rows = t.execute("SELECT key, etag, reason, seen_us FROM sync_skipped WHERE substr(key, 1, ?) = ?"
                     " ORDER BY key", (len(prefix), prefix))
    return [SkippedRow._make(r) for r in rows]


def journal(t: PluginTables, limit: int) -> list[JournalEntry]:
    """The oldest ``limit`` writes not yet published."""
    rows = t.execute("SELECT n, key, etag, op, size FROM sync_journal ORDER BY n LIMIT ?", (limit,))
    return [JournalEntry(int(n), str(k), str(e), str(op), int(size)) for n, k, e, op, size in rows]


def delete_records(t: PluginTables) -> list[DeleteRecord]:
    return [DeleteRecord._make(r) for r in t.execute("SELECT key, id, seq, seen_us FROM sync_delete_record")]


def breaker(t: PluginTables, bucket: str) -> BreakerRow | None:
    rows = t.execute("SELECT failures, open_until_us, probe_until_us, reason, opened_us, failed_us"
                     " FROM sync_breaker WHERE bucket = ?", (bucket,))
    if not rows:
        return None
    r = rows[0]
    return BreakerRow(int(r[0]), int(r[1]), int(r[2]), str(r[3]), int(r[4]), int(r[5]))


# --- writes (inside ``Replica.transaction()``: ``ReplicaTransaction.tables``) ------------------------


def put_bases(t: PluginTables, rows: Sequence[SyncBase], synced_us: int) -> None:
    t.executemany(
        "INSERT INTO sync_base (id, profile, etag, content_hash, synced_us, row_sig) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(id) DO UPDATE SET profile = excluded.profile, etag = excluded.etag,"
        " content_hash = excluded.content_hash, synced_us = excluded.synced_us, row_sig = excluded.row_sig",
        [(b.id, b.profile, b.etag, b.content_hash, synced_us, b.row_sig) for b in rows])


def set_row_sigs(t: PluginTables, sigs: Sequence[tuple[str, str, str]]) -> None:
    """``(id, content_hash, row_sig)``: record ``row_sig`` in the base of ``id`` if its content
    hash is still ``content_hash``."""
    t.executemany("UPDATE sync_base SET row_sig = ? WHERE id = ? AND content_hash = ?",
                  [(sig, mid, content_hash) for mid, content_hash, sig in sigs])


def drop_bases(t: PluginTables, ids: Sequence[str]) -> None:
    for part in _batches(ids):
        t.execute(f"DELETE FROM sync_base WHERE id IN ({_marks(part)})", part)


def drop_profile_bases(t: PluginTables, profiles: Sequence[str] | None = None) -> int:
    """Drop the bases of ``profiles`` (``None``: every memory's); returns how many."""
    if profiles is None:
        return t.executemany("DELETE FROM sync_base", [()])
    return t.executemany(f"DELETE FROM sync_base WHERE profile IN ({_marks(profiles)})", [list(profiles)])


def put_note_base(t: PluginTables, base: SyncBase, synced_us: int) -> None:
    t.execute("INSERT INTO sync_note_base (automation_id, etag, content_hash, synced_us) VALUES (?, ?, ?, ?)"
              " ON CONFLICT(automation_id) DO UPDATE SET etag = excluded.etag,"
              " content_hash = excluded.content_hash, synced_us = excluded.synced_us",
              (base.id, base.etag, base.content_hash, synced_us))


def drop_note_bases(t: PluginTables, ids: Sequence[str] | None = None) -> None:
    """Drop the bases of the notes ``ids`` (``None``: every note's)."""
    if ids is None:
        t.execute("DELETE FROM sync_note_base")
        return
    for part in _batches(ids):
        t.execute(f"DELETE FROM sync_note_base WHERE automation_id IN ({_marks(part)})", part)


def skip(t: PluginTables, row: SkippedRow) -> None:
    t.execute("INSERT INTO sync_skipped (key, etag, reason, seen_us) VALUES (?, ?, ?, ?)"
              " ON CONFLICT(key) DO UPDATE SET etag = excluded.etag, reason = excluded.reason,"
              " seen_us = excluded.seen_us", row)


def unskip(t: PluginTables, keys: Sequence[str]) -> None:
    t.executemany("DELETE FROM sync_skipped WHERE key = ?", [(k,) for k in keys])


def journal_add(t: PluginTables, entries: Sequence[tuple[str, str, str, int]]) -> None:
    """Journal each ``(key, etag, op, size)``, in order."""
    t.executemany("INSERT INTO sync_journal (key, etag, op, size) VALUES (?, ?, ?, ?)", entries)


def journal_done(t: PluginTables, upto: int) -> None:
    """Drop the journal's entries up to ``n`` = ``upto`` (published)."""
    t.execute("DELETE FROM sync_journal WHERE n <= ?", (upto,))


def put_delete_records(t: PluginTables, records: Sequence[DeleteRecord]) -> None:
    t.executemany("INSERT INTO sync_delete_record (key, id, seq, seen_us) VALUES (?, ?, ?, ?)"
                  " ON CONFLICT(key) DO UPDATE SET seq = excluded.seq, seen_us = excluded.seen_us", records)


def drop_delete_records(t: PluginTables, keys: Sequence[str]) -> None:
    t.executemany("DELETE FROM sync_delete_record WHERE key = ?", [(k,) for k in keys])


def drop_delete_records_before(t: PluginTables, seen_before_us: int) -> None:
    t.execute("DELETE FROM sync_delete_record WHERE seen_us < ?", (seen_before_us,))


def clear(t: PluginTables) -> None:
    """Forget everything synced with the bucket: bases, skipped objects, delete records and the
    journal (not the breaker)."""
    for table in ("sync_base", "sync_note_base", "sync_skipped", "sync_delete_record", "sync_journal"):
        t.execute(f"DELETE FROM {table}")


def breaker_failed(t: PluginTables, bucket: str, failures: int, open_until_us: int, reason: str,
                   now_us: int) -> None:
    """Open the breaker until ``open_until_us`` after its ``failures``-th consecutive failure (the
    first failure's time is kept as ``opened_us``; any probe is over)."""
    t.execute("INSERT INTO sync_breaker (bucket, failures, open_until_us, probe_until_us, reason, opened_us,"
              " failed_us) VALUES (?, ?, ?, 0, ?, ?, ?) ON CONFLICT(bucket) DO UPDATE SET"
              " failures = excluded.failures, open_until_us = excluded.open_until_us, probe_until_us = 0,"
              " reason = excluded.reason, failed_us = excluded.failed_us",
              (bucket, failures, open_until_us, reason, now_us, now_us))


def breaker_probe(t: PluginTables, bucket: str, until_us: int) -> None:
    """This process holds the half-open probe until ``until_us``."""
    t.execute("UPDATE sync_breaker SET probe_until_us = ? WHERE bucket = ?", (until_us, bucket))


def breaker_close(t: PluginTables, bucket: str) -> bool:
    """Close the breaker; whether it was open."""
    return t.executemany("DELETE FROM sync_breaker WHERE bucket = ?", [(bucket,)]) > 0
