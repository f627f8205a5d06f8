"""The store behind the replication port (:mod:`memlocal.plugins`): the change log and the
synced changes, the only way the sync package reads or changes memories and notes.

The sync package never writes ``memories`` itself: it reads the change log (the outbox and each
row's ``access_delta``) and applies what it learnt from the bucket through a
:class:`ReplicaTransaction` (``StoreReplica.transaction()``), in which the sync's own tables (its
base) commit together with the change.
"""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Iterable, Iterator, Literal, Sequence

from ..model import COUNT_MAX, Memory, compute_staleness, from_us, to_us
from ..plugins import AccessDelta, Kind, NoteState, SignedRow
from .database import set_meta
from .memories import (
    SELECT_WITH_DELTA,
    WRITE_COLUMNS,
    Store,
    extra_json,
    id_batches,
    insert_rows,
    row_to_memory,
    write_row,
)
from .tables import TableHandle

if TYPE_CHECKING:
    from ..plugins import MigrationSet

# What a memory's content is made of, as stored: everything but access metadata and what is
# derived from the text (keys, features, rev). ``content_signature`` hashes exactly these.
SIGNATURE_COLUMNS: Final = ("id", "profile", "raw_input", "processed_content", "summary", "category", "source",
                            "confidence", "created_us", "is_active", "version", "extra")
_ACTIVE_AT: Final = SIGNATURE_COLUMNS.index("is_active")

# What a pull replaces when the bucket's content wins (access metadata is merged, not replaced).
_CONTENT_COLUMNS = ("raw_input", "processed_content", "summary", "category", "source", "confidence",
                    "created_us", "is_active", "version", "extra", "text_key", "raw_key", "near_key")

# A memory pulled from the bucket, inserted with no local access bumps (``apply_remote``).
_PULLED_COLUMNS: Final = (*WRITE_COLUMNS, "access_delta")
_INSERT_PULLED = (f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}, access_delta)"
                  f" VALUES ({', '.join('?' for _ in range(len(WRITE_COLUMNS) + 1))})")


def _signature(values: Sequence[Any]) -> str:
    # repr of str, int, float and None is exact and stable; surrogatepass: never fails.
    return hashlib.blake2b(repr(tuple(values)).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def content_signature(m: Memory) -> str:
    """A fingerprint of ``m``'s stored content columns (``SIGNATURE_COLUMNS``), equal to what
    :meth:`StoreReplica.content_signatures` computes from its row once stored. Two rows with the
    same signature have the same content, so the same content hash."""
    # The values memory_to_row writes for these columns (a REAL column reads back as a float).
    return _signature((m.id, m.profile_name, m.raw_input, m.processed_content, m.summary, m.category, m.source,
                       float(m.confidence), to_us(m.created_at), int(m.is_active), m.version, extra_json(m)))


def _scope(profiles: Sequence[str] | None) -> tuple[str, list[Any]]:
    """A ``WHERE profile IN (...)`` clause for ``profiles`` (``None``: every profile)."""
    if profiles is None:
        return "", []
    return f" WHERE profile IN ({', '.join('?' for _ in profiles)})", list(profiles)


class StoreReplica:
    """A :class:`~memlocal.store.Store` as the replication port (:class:`memlocal.plugins.Replica`)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        # The tables the plugin's migration sets name: the only ones its handles reach.
        self._tables: frozenset[str] = frozenset()

    @property
    def path(self) -> Path:
        return self._store.path

    def migrate(self, tables: MigrationSet) -> None:
        self._tables |= frozenset(tables.tables)  # (named even when the file cannot be migrated now)
        self._store.migrate(tables)

    @contextmanager
    def transaction(self) -> Iterator[ReplicaTransaction]:
        with self._store.transaction() as conn:
            tx = ReplicaTransaction(conn, self._tables)
            try:
                yield tx
            finally:
                tx.tables.close()

    @contextmanager
    def snapshot(self) -> Iterator[TableHandle]:
        with self._store.snapshot() as conn:  # the connection stays here: only the limited handle leaves
            tables = TableHandle(conn, self._tables, write=False)
            try:
                yield tables
            finally:
                tables.close()

    def meta_get(self, key: str) -> str | None:
        return self._store.meta_get(key)

    def after_pass(self) -> None:
        """Once a pass ends: when a pulled memory or note replaced a credential by its marker
        (another host's rescan), purge the old bytes from this file as the rescan did there."""
        if self._store.purge_pending():
            self._store.purge_replaced()

    def meta_set(self, key: str, value: str) -> None:
        self._store.meta_set(key, value)

    def exists(self, memory_id: str) -> bool:
        return self._store.exists(memory_id)

    def profiles(self) -> dict[str, int]:
        return self._store.profiles()

    def signature(self, memory: Memory) -> str:
        return content_signature(memory)

    def note_get(self, automation_id: str) -> NoteState | None:
        return self._store.note_get(automation_id)

    def notes(self) -> list[tuple[str, str, int]]:
        return self._store.notes()

    # --- the change log -----------------------------------------------------------------------

    def outbox(self, profiles: Sequence[str] | None = None, op: str | None = None, *,
               kind: Kind = "memory") -> dict[str, tuple[str, str]]:
        """The change log of ``kind``: ``{id: (profile, op)}`` with ``op`` ``put`` or ``delete``
        (a note's profile is ``""``)."""
        if kind == "note":
            where, params = (" WHERE op = ?", [op]) if op is not None else ("", [])
            return {r[0]: ("", r[1]) for r in self._store.read(f"SELECT automation_id, op FROM automation_outbox{where}",
                                                               params)}
        where, params = _scope(profiles)
        if op is not None:
            where = (where + " AND" if where else " WHERE") + " op = ?"
            params.append(op)
        return {r[0]: (r[1], r[2]) for r in self._store.read(f"SELECT id, profile, op FROM sync_outbox{where}", params)}

    def changed_ids(self) -> set[str]:
        """Ids with a change the bucket may not have: queued in the outbox, or with unmerged
        access bumps (what a sync pass that follows the change record reconciles)."""
        rows = self._store.read("SELECT id FROM sync_outbox UNION SELECT id FROM memories WHERE access_delta > 0")
        return {r[0] for r in rows}

    def access_deltas(self, profiles: Sequence[str] | None = None) -> list[AccessDelta]:
        """``(id, profile, access_delta)`` of every memory: the cheap local side of a pull."""
        where, params = _scope(profiles)
        return [AccessDelta(r[0], r[1], int(r[2])) for r in self._store.read(f"SELECT id, profile, access_delta FROM memories{where}", params)]

    def memories_with_deltas(self, profiles: Sequence[str] | None = None,
                             ids: Sequence[str] | None = None) -> list[tuple[Memory, int]]:
        """Every memory (of ``profiles``; among ``ids``) with its access bumps not yet merged
        into the bucket."""
        where, params = _scope(profiles)
        if ids is None:
            rows = self._store.read(f"{SELECT_WITH_DELTA}{where}", params)
        else:
            rows = []
            for part in id_batches(ids):
                cond = f"id IN ({', '.join('?' * len(part))})"
                rows += self._store.read(f"{SELECT_WITH_DELTA}{where}{' AND ' if where else ' WHERE '}{cond}", [*params, *part])
        return [(row_to_memory(r), int(r[-1])) for r in rows]

    def content_signatures(self, profiles: Sequence[str] | None = None) -> list[SignedRow]:
        """``(id, profile, access_delta, is_active, signature)`` of every memory (of
        ``profiles``): :func:`content_signature` of each row, read without building memories. The
        sync pairs a signature with the content hash it computed for it, so that an unchanged
        memory is not hashed again on every pass."""
        where, params = _scope(profiles)
        cols = ", ".join(SIGNATURE_COLUMNS)
        rows = self._store.read(f"SELECT {cols}, access_delta FROM memories{where}", params)
        return [SignedRow(r[0], r[1], int(r[-1]), bool(r[_ACTIVE_AT]), _signature(r[:-1])) for r in rows]

    def memory_with_delta(self, memory_id: str) -> tuple[Memory, int] | None:
        rows = self._store.read(f"{SELECT_WITH_DELTA} WHERE id = ?", (memory_id,))
        return (row_to_memory(rows[0]), int(rows[0][-1])) if rows else None

    def convergence_candidates(self, profiles: Sequence[str] | None = None) -> list[Memory]:
        """See :meth:`memlocal.plugins.Replica.convergence_candidates`: one pass over the
        active rows, the duplicate test an index probe of ``memories_text_key``."""
        where, params = _scope(profiles)
        scope = where.replace(" WHERE", " AND") if where else ""
        # Two selects (an OR made SQLite test both sides on every row); ``extra != '{}'`` skips
        # the JSON of the many memories without extra fields.
        rows = self._store.read(
            f"{SELECT_WITH_DELTA} WHERE rowid IN (SELECT m.rowid FROM memories m WHERE m.is_active = 1{scope} AND"
            " EXISTS (SELECT 1 FROM memories d WHERE d.profile = m.profile AND d.text_key = m.text_key"
            " AND d.is_active = 1 AND d.id != m.id)"
            f" UNION SELECT m.rowid FROM memories m WHERE m.is_active = 1{scope} AND m.extra != '{{}}'"
            " AND json_extract(m.extra, '$.supersedes') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM memories o"
            " WHERE o.id = json_extract(m.extra, '$.supersedes')"
            " AND json_extract(o.extra, '$.supersededBy') IS m.id))",
            [*params, *params],
        )
        return [row_to_memory(r) for r in rows]


def _merged_access(m: Memory, delta: Any, last_us: int | None, sent_delta: int) -> tuple[int, int, int | None]:
    """A row's ``(access_count, access_delta, last_accessed_us)`` once ``m`` (the bucket's, which
    carried ``sent_delta`` of the row's unmerged ``delta``) is folded in: the bucket's count plus
    the delta still unmerged, and the later lastAccessedAt of both."""
    remaining = max(0, int(delta) - sent_delta)
    last = max(last_us or 0, to_us(m.last_accessed_at) or 0) or None
    return m.access_count + remaining, remaining, last


class ReplicaTransaction:
    """The replication port's unit of work: one durable store transaction (see
    :class:`memlocal.plugins.ReplicaTransaction`)."""

    def __init__(self, conn: sqlite3.Connection, tables: frozenset[str] = frozenset()) -> None:
        self._conn = conn
        self._tables = TableHandle(conn, tables, write=True)

    @property
    def tables(self) -> TableHandle:
        return self._tables

    def meta_get(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row is not None else None

    def meta_set(self, key: str, value: str) -> None:
        set_meta(self._conn, key, value)

    def meta_delete(self, key: str) -> None:
        self._conn.execute("DELETE FROM meta WHERE key = ?", (key,))

    # --- memories: synced changes ---------------------------------------------------------------

    def apply_remote(self, memory: Memory, *, content: Literal["remote", "local"] = "remote",
                     sent_delta: int = 0, set_staleness: bool = True) -> bool:
        """Fold a memory the bucket holds into the local row.

        ``content``: ``remote`` takes the memory's content (inserting it if absent, unless its
        deletion here is still queued); ``local`` keeps the local content (our own push). The
        access count becomes the memory's plus whatever local delta is still unmerged
        (``sent_delta`` of it went out with the write that produced ``memory``); lastAccessedAt
        the later of both. The put is cleared from the outbox. ``False`` (nothing changed) if
        the id belongs to a memory of another profile here.
        """
        m = memory
        here = self._conn.execute("SELECT access_delta, last_accessed_us, profile FROM memories WHERE id = ?", (m.id,)).fetchone()
        if here is None:
            deleted_here = self._conn.execute("SELECT 1 FROM sync_outbox WHERE id = ? AND op = 'delete'", (m.id,)).fetchone()
            if content == "remote" and not deleted_here:
                self._conn.execute(_INSERT_PULLED, (*write_row(m), 0))
        elif here[2] != m.profile_name:
            return False  # never touch a memory of another profile
        else:
            sets = ["access_count = ?", "access_delta = ?", "last_accessed_us = ?"]
            params: list[Any] = list(_merged_access(m, here[0], here[1], sent_delta))
            if set_staleness:
                sets.append("staleness = ?")
                params.append(m.staleness_score)
            if content == "remote":
                full = dict(zip(WRITE_COLUMNS, write_row(m)))
                for col in (*_CONTENT_COLUMNS, "features"):
                    sets.append(f"{col} = ?")
                    params.append(full[col])
            self._conn.execute(f"UPDATE memories SET {', '.join(sets)} WHERE id = ?", (*params, m.id))
        self._conn.execute("DELETE FROM sync_outbox WHERE id = ? AND op = 'put'", (m.id,))
        return True

    def insert_remote_absent(self, memories: Sequence[Memory]) -> set[str]:
        """``apply_remote(memory, content="remote")`` for each of ``memories`` (distinct ids)
        whose id this database does not hold, in a few statements (a fresh host pulls
        thousands): each is inserted unless its deletion here is still queued, and its put is
        cleared from the outbox. Returns the ids it took; the others are left to ``apply_remote``."""
        ids = [m.id for m in memories]
        present: set[str] = set()
        deleted: set[str] = set()
        for part in id_batches(ids):
            marks = ", ".join("?" * len(part))
            present.update(r[0] for r in self._conn.execute(f"SELECT id FROM memories WHERE id IN ({marks})", part))
            deleted.update(r[0] for r in self._conn.execute(
                f"SELECT id FROM sync_outbox WHERE op = 'delete' AND id IN ({marks})", part))
        absent = [m for m in memories if m.id not in present]
        # Multi-row statements, as an import's: FTS5 writes a segment per statement, not per row.
        insert_rows(self._conn, [(*write_row(m), 0) for m in absent if m.id not in deleted], _PULLED_COLUMNS)
        taken = [m.id for m in absent]
        for part in id_batches(taken):
            self._conn.execute(f"DELETE FROM sync_outbox WHERE op = 'put' AND id IN ({', '.join('?' * len(part))})", part)
        return set(taken)

    def apply_pushed(self, writes: Sequence[tuple[Memory, int, bool]]) -> set[str]:
        """``apply_remote(memory, content="local", sent_delta=…, set_staleness=…)`` for each of
        ``writes`` (``(memory, sent_delta, set_staleness)``, distinct ids): this host's own
        writes, whose content the local row keeps, in a few statements (a first push confirms
        thousands). A row is written only where a value changes: an access bump that landed
        while its PUT was in flight, a later lastAccessedAt, the staleness; an UPDATE of an
        unchanged row would fire the rev and count triggers for nothing. The puts are cleared from
        the outbox. Returns the ids done: all but those held here under another profile."""
        by_id = {m.id: (m, sent, staleness) for m, sent, staleness in writes}
        here: dict[str, tuple[Any, ...]] = {}
        for part in id_batches(list(by_id)):
            marks = ", ".join("?" * len(part))
            for r in self._conn.execute("SELECT id, access_count, access_delta, last_accessed_us, profile, staleness"
                                        f" FROM memories WHERE id IN ({marks})", part):
                here[r[0]] = r[1:]
        done: list[str] = []
        counts: list[tuple[Any, ...]] = []
        stale: list[tuple[Any, ...]] = []
        for mid, (m, sent, set_staleness) in by_id.items():
            row = here.get(mid)
            if row is not None:
                count, delta, last_us, profile, staleness = row
                if profile != m.profile_name:
                    continue  # never touch a memory of another profile
                values = _merged_access(m, delta, last_us, sent)
                if set_staleness and (*values, m.staleness_score) != (count, delta, last_us, staleness):
                    stale.append((*values, m.staleness_score, mid))
                elif not set_staleness and values != (count, delta, last_us):
                    counts.append((*values, mid))
            done.append(mid)
        if counts:
            self._conn.executemany("UPDATE memories SET access_count = ?, access_delta = ?, last_accessed_us = ?"
                                   " WHERE id = ?", counts)
        if stale:
            self._conn.executemany("UPDATE memories SET access_count = ?, access_delta = ?, last_accessed_us = ?,"
                                   " staleness = ? WHERE id = ?", stale)
        for part in id_batches(done):
            self._conn.execute(f"DELETE FROM sync_outbox WHERE op = 'put' AND id IN ({', '.join('?' * len(part))})", part)
        return set(done)

    def delete_from_remote(self, memory_id: str, profile: str) -> None:
        """Another host deleted the memory: delete it here, with any queued change of it."""
        self._conn.execute("DELETE FROM memories WHERE id = ? AND profile = ?", (memory_id, profile))
        self._conn.execute("DELETE FROM sync_outbox WHERE id = ?", (memory_id,))

    def clear_outbox(self, item_id: str, op: str | None = None,
                     *, only_if_absent: bool = False, kind: Kind = "memory") -> None:
        """Drop the outbox entry of the memory or note ``item_id`` (of ``op`` only, if given; only
        when the item is gone, with ``only_if_absent``: a note written again meanwhile keeps its
        queued change): the bucket has the change."""
        table, key, items = (("automation_outbox", "automation_id", "automation_notes") if kind == "note"
                             else ("sync_outbox", "id", "memories"))
        sql = f"DELETE FROM {table} WHERE {key} = ?"
        params: list[Any] = [item_id]
        if op is not None:
            sql += " AND op = ?"
            params.append(op)
        if only_if_absent:
            sql += f" AND NOT EXISTS (SELECT 1 FROM {items} WHERE {key} = ?)"
            params.append(item_id)
        self._conn.execute(sql, params)

    def reid(self, old_id: str, new_id: str) -> bool:
        """Move the memory ``old_id`` to ``new_id`` with its outbox entry; ``False`` if absent.

        No deletion is queued for ``old_id``: the bucket's object under it is another memory.
        """
        cols = ", ".join(("?" if col == "id" else col) for col in WRITE_COLUMNS)
        cur = self._conn.execute(f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}, access_delta)"
                           f" SELECT {cols}, access_delta FROM memories WHERE id = ?", (new_id, old_id))
        if cur.rowcount == 0:
            return False
        self._conn.execute("DELETE FROM memories WHERE id = ?", (old_id,))
        self._conn.execute("UPDATE sync_outbox SET id = ? WHERE id = ?", (new_id, old_id))
        return True

    def merge_access(self, memory_id: str, count: int, last_accessed: datetime | None) -> bool:
        """Add ``count`` accesses (and a lastAccessedAt, the later kept) to a memory, as unmerged
        local bumps that the sync then merges into the bucket, staleness recomputed. ``False`` if
        the memory is gone."""
        row = self._conn.execute("SELECT category, confidence, access_count, created_us, last_accessed_us"
                                 " FROM memories WHERE id = ?", (memory_id,)).fetchone()
        if row is None:
            return False
        category, confidence, have, created_us, last_us = row
        # Counts stay in their domain (0 to 2^53): a hostile object's huge count must not grow.
        added = max(0, min(have + max(0, count), COUNT_MAX) - have)
        last = max(last_us or 0, to_us(last_accessed) or 0) or None
        staleness = compute_staleness(category=category, confidence=confidence, access_count=have + added,
                                      created_at=from_us(created_us),
                                      last_accessed_at=from_us(last))
        self._conn.execute("UPDATE memories SET access_count = access_count + ?, access_delta = access_delta + ?,"
                           " last_accessed_us = ?, staleness = ? WHERE id = ?",
                           (added, added, last, staleness, memory_id))
        return True

    def _note_is(self, automation_id: str, expected: NoteState | None) -> bool:
        row = self._conn.execute("SELECT note, updated_us FROM automation_notes WHERE automation_id = ?",
                           (automation_id,)).fetchone()
        return (None if row is None else (row[0], row[1])) == expected

    def apply_remote_note(self, automation_id: str, note: NoteState,
                          expected: NoteState | None) -> bool:
        """The bucket holds ``note``: make it the local note, if
        the local note is still ``expected`` (``None``: absent; pass ``note`` itself for a note
        this host pushed). Its put leaves the outbox. ``False`` (nothing changed) when the
        note changed here meanwhile: that change stays queued."""
        if not self._note_is(automation_id, expected):
            return False
        self._conn.execute(
            "INSERT INTO automation_notes (automation_id, note, updated_us) VALUES (?, ?, ?)"
            " ON CONFLICT(automation_id) DO UPDATE SET note = excluded.note, updated_us = excluded.updated_us",
            (automation_id, *note),
        )
        self._conn.execute("DELETE FROM automation_outbox WHERE automation_id = ? AND op = 'put'", (automation_id,))
        return True

    def delete_note_from_remote(self, automation_id: str, expected: NoteState) -> bool:
        """Another host removed the note: remove it here if it is still ``expected``."""
        if not self._note_is(automation_id, expected):
            return False
        self._conn.execute("DELETE FROM automation_notes WHERE automation_id = ?", (automation_id,))
        self._conn.execute("DELETE FROM automation_outbox WHERE automation_id = ?", (automation_id,))
        return True
