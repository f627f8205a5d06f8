"""The sync's side of the local SQLite file: base, outbox, skipped objects, pass records.

The tables are created by migration 3 in ``memlocal.store`` (the store owns the schema). All
writes go through ``Store.transaction`` (``BEGIN IMMEDIATE``, durable commit); the engine hands
this module *effects* in batches so that a pass over 10k memories is a few dozen commits, not
10k. Every effect is idempotent and re-reads the row it changes inside the transaction, so an
access bump or a deletion that lands while a request is in flight is never lost or undone.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Sequence, Union

from memlocal.model import Memory, utcnow
from memlocal.store import MEMORY_COLUMNS, Store, memory_to_row, row_to_memory, to_us

from .objects import content_hash, object_key
from .plan import Base, Local

META_BUCKET = "sync.bucket"
META_LAST_PASS = "sync.last_pass"
META_LAST_ERROR = "sync.last_error"

_COLS = ", ".join(MEMORY_COLUMNS)
_CONTENT_COLUMNS = ("raw_input", "processed_content", "summary", "category", "source", "confidence",
                    "created_us", "is_active", "version", "extra")


# --- effects ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Synced:
    """The bucket holds ``memory`` under ``etag``: record the base and fold it into the local row.

    ``content``: ``remote`` replaces the local content with the memory's (a pull); ``local``
    keeps the local content (our own push). The local access count becomes the memory's count
    plus whatever local delta is still unmerged (``sent_delta`` of it went out with this write).
    """

    memory: Memory
    etag: str
    base_hash: str
    sent_delta: int = 0
    content: Literal["remote", "local"] = "remote"
    set_staleness: bool = True


@dataclass(frozen=True, slots=True)
class DeletedRemote:
    """The object is gone from the bucket because this host deleted it."""

    id: str


@dataclass(frozen=True, slots=True)
class DeleteLocal:
    """Another host deleted the memory: delete it here too (a deletion wins)."""

    id: str
    profile: str


@dataclass(frozen=True, slots=True)
class Forget:
    """Nothing left on either side: drop the base and any outbox entry."""

    id: str


@dataclass(frozen=True, slots=True)
class SkipObject:
    key: str
    etag: str
    reason: str


@dataclass(frozen=True, slots=True)
class Unskip:
    key: str


Effect = Union[Synced, DeletedRemote, DeleteLocal, Forget, SkipObject, Unskip]


class SyncState:
    """Reads and writes of the sync tables on one ``Store``."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # --- snapshots for the plan ---------------------------------------------------------------

    @staticmethod
    def _scope(profiles: Sequence[str] | None, column: str = "profile") -> tuple[str, list[str]]:
        if profiles is None:
            return "", []
        return f" WHERE {column} IN ({', '.join('?' for _ in profiles)})", list(profiles)

    def local_entries(self, profiles: Sequence[str] | None = None, *, hashes: bool = True) -> dict[str, Local]:
        """The local side of the plan. ``hashes=False`` (a pull-only refresh, which never pushes
        content) reads three columns instead of every row whole."""
        return self.local_entries_from(self.local_rows(profiles, hashes=hashes), hashes=hashes)

    def local_rows(self, profiles: Sequence[str] | None = None, *, hashes: bool = True) -> list[tuple[Any, ...]]:
        """The rows ``local_entries`` is made of (the snapshot; one read)."""
        where, params = self._scope(profiles)
        if not hashes:
            return self.store.read(f"SELECT id, profile, access_delta FROM memories{where}", params)
        return self.store.read(f"SELECT {_COLS}, access_delta FROM memories{where}", params)

    @staticmethod
    def local_entries_from(rows: Sequence[tuple[Any, ...]], *, hashes: bool = True) -> dict[str, Local]:
        """``local_entries`` of rows read by ``local_rows`` (CPU only: the content hashes)."""
        if not hashes:
            return {r[0]: Local(r[0], r[1], "", int(r[2])) for r in rows}
        out: dict[str, Local] = {}
        for row in rows:
            memory = row_to_memory(row)
            out[memory.id] = Local(memory.id, memory.profile_name, content_hash(memory), int(row[-1]))
        return out

    def base_entries(self, profiles: Sequence[str] | None = None) -> dict[str, Base]:
        where, params = self._scope(profiles)
        rows = self.store.read(f"SELECT id, profile, etag, content_hash FROM sync_base{where}", params)
        return {r[0]: Base(r[0], r[1], r[2], r[3]) for r in rows}

    def outbox_deletes(self, profiles: Sequence[str] | None = None) -> dict[str, str]:
        where, params = self._scope(profiles)
        where = (where + " AND" if where else " WHERE") + " op = 'delete'"
        return {r[0]: r[1] for r in self.store.read(f"SELECT id, profile FROM sync_outbox{where}", params)}

    def known_bad(self, prefix: str = "") -> dict[str, tuple[str, str]]:
        rows = self.store.read("SELECT key, etag, reason FROM sync_skipped WHERE substr(key, 1, ?) = ?",
                               (len(prefix), prefix))
        return {r[0]: (r[1], r[2]) for r in rows}

    def load_local(self, memory_id: str) -> tuple[Memory, int] | None:
        rows = self.store.read(f"SELECT {_COLS}, access_delta FROM memories WHERE id = ?", (memory_id,))
        return (row_to_memory(rows[0]), int(rows[0][-1])) if rows else None

    def load_base(self, memory_id: str) -> Base | None:
        rows = self.store.read("SELECT id, profile, etag, content_hash FROM sync_base WHERE id = ?", (memory_id,))
        return Base(*rows[0]) if rows else None

    # --- the outbox (written inside the bank's own transactions) -------------------------------

    @staticmethod
    def record_outbox(conn: sqlite3.Connection, memory: Memory, op: Literal["put", "delete"]) -> None:
        conn.execute(
            "INSERT INTO sync_outbox (id, profile, op, queued_us) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(id) DO UPDATE SET profile = excluded.profile, op = excluded.op,"
            " queued_us = excluded.queued_us",
            (memory.id, memory.profile_name, op, to_us(utcnow())),
        )

    # --- effects ----------------------------------------------------------------------------------

    def apply(self, effects: Iterable[Effect]) -> None:
        """Apply effects in order, in one durable transaction."""
        effects = list(effects)
        if not effects:
            return
        now_us = to_us(utcnow())
        with self.store.transaction() as c:
            for eff in effects:
                if isinstance(eff, Synced):
                    self._apply_synced(c, eff, now_us)
                elif isinstance(eff, DeletedRemote):
                    c.execute("DELETE FROM sync_base WHERE id = ?", (eff.id,))
                    c.execute("DELETE FROM sync_outbox WHERE id = ? AND op = 'delete'", (eff.id,))
                elif isinstance(eff, DeleteLocal):
                    c.execute("DELETE FROM memories WHERE id = ? AND profile = ?", (eff.id, eff.profile))
                    c.execute("DELETE FROM sync_base WHERE id = ?", (eff.id,))
                    c.execute("DELETE FROM sync_outbox WHERE id = ?", (eff.id,))
                elif isinstance(eff, Forget):
                    c.execute("DELETE FROM sync_base WHERE id = ?", (eff.id,))
                    c.execute("DELETE FROM sync_outbox WHERE id = ? AND NOT EXISTS"
                              " (SELECT 1 FROM memories WHERE id = ?)", (eff.id, eff.id))
                elif isinstance(eff, SkipObject):
                    c.execute("INSERT INTO sync_skipped (key, etag, reason, seen_us) VALUES (?, ?, ?, ?)"
                              " ON CONFLICT(key) DO UPDATE SET etag = excluded.etag, reason = excluded.reason,"
                              " seen_us = excluded.seen_us", (eff.key, eff.etag, eff.reason, now_us))
                elif isinstance(eff, Unskip):
                    c.execute("DELETE FROM sync_skipped WHERE key = ?", (eff.key,))
                else:  # pragma: no cover - a new effect type without a branch is a bug
                    raise TypeError(f"unknown effect {eff!r}")

    @staticmethod
    def _apply_synced(c: sqlite3.Connection, eff: Synced, now_us: int | None) -> None:
        m = eff.memory
        row = c.execute("SELECT access_delta, last_accessed_us, profile FROM memories WHERE id = ?", (m.id,)).fetchone()
        if row is None:
            deleted_here = c.execute("SELECT 1 FROM sync_outbox WHERE id = ? AND op = 'delete'", (m.id,)).fetchone()
            if eff.content == "remote" and not deleted_here:
                cols = _COLS + ", access_delta"
                c.execute(f"INSERT INTO memories ({cols}) VALUES ({', '.join('?' for _ in range(len(MEMORY_COLUMNS) + 1))})",
                          (*memory_to_row(m), 0))
        elif row[2] != m.profile_name:
            return  # the id belongs to a memory of another profile here: never touch it
        else:
            delta, last_us = int(row[0]), row[1]
            remaining = max(0, delta - eff.sent_delta)
            remote_last = to_us(m.last_accessed_at)
            last = max(last_us or 0, remote_last or 0) or None
            sets = ["access_count = ?", "access_delta = ?", "last_accessed_us = ?"]
            params: list[Any] = [m.access_count + remaining, remaining, last]
            if eff.set_staleness:
                sets.append("staleness = ?")
                params.append(m.staleness_score)
            if eff.content == "remote":
                full = dict(zip(MEMORY_COLUMNS, memory_to_row(m)))
                for col in _CONTENT_COLUMNS:
                    sets.append(f"{col} = ?")
                    params.append(full[col])
            c.execute(f"UPDATE memories SET {', '.join(sets)} WHERE id = ?", (*params, m.id))
        c.execute(
            "INSERT INTO sync_base (id, profile, etag, content_hash, synced_us) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT(id) DO UPDATE SET profile = excluded.profile, etag = excluded.etag,"
            " content_hash = excluded.content_hash, synced_us = excluded.synced_us",
            (m.id, m.profile_name, eff.etag, eff.base_hash, now_us),
        )
        c.execute("DELETE FROM sync_outbox WHERE id = ? AND op = 'put'", (m.id,))
        c.execute("DELETE FROM sync_skipped WHERE key = ?", (object_key(m.profile_name, m.id),))

    def reid(self, old_id: str, new_id: str) -> Memory | None:
        """Move the local memory ``old_id`` to ``new_id`` (another host owns ``old_id``).

        No deletion is queued for ``old_id``: the bucket's object under it is not ours.
        """
        with self.store.transaction() as c:
            cols = ", ".join(("?" if col == "id" else col) for col in MEMORY_COLUMNS)
            cur = c.execute(f"INSERT INTO memories ({_COLS}, access_delta) SELECT {cols}, access_delta"
                            " FROM memories WHERE id = ?", (new_id, old_id))
            if cur.rowcount == 0:
                return None
            c.execute("DELETE FROM memories WHERE id = ?", (old_id,))
            c.execute("UPDATE sync_outbox SET id = ? WHERE id = ?", (new_id, old_id))
            c.execute("DELETE FROM sync_base WHERE id = ?", (old_id,))
        loaded = self.load_local(new_id)
        return loaded[0] if loaded else None

    # --- bucket identity, records, status -----------------------------------------------------

    def ensure_bucket(self, identity: str) -> bool:
        """Tie the base to one bucket. Another bucket (or endpoint) starts from an empty base, so
        that its different contents read as "not synced yet", never as deletions. Returns
        whether the base was reset."""
        current = self.store.meta_get(META_BUCKET)
        if current == identity:
            return False
        with self.store.transaction() as c:
            had_base = c.execute("SELECT 1 FROM sync_base LIMIT 1").fetchone() is not None
            c.execute("DELETE FROM sync_base")
            c.execute("DELETE FROM sync_skipped")
            c.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                      (META_BUCKET, identity))
        return had_base

    def forget_base(self, profiles: Sequence[str] | None = None) -> int:
        """Drop the base (``sync run --reupload``): every local memory then counts as not yet
        in the bucket and every remote one as new; nothing is deleted either way."""
        where, params = self._scope(profiles)
        with self.store.transaction() as c:
            return c.execute(f"DELETE FROM sync_base{where}", params).rowcount

    def get_json(self, key: str) -> Any:
        text = self.store.meta_get(key)
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    def set_json(self, key: str, value: Any) -> None:
        self.store.meta_set(key, json.dumps(value, ensure_ascii=False, sort_keys=True))

    def pending(self) -> dict[str, int]:
        """What this host has that the bucket does not (yet)."""
        saves = self.store.read("SELECT count(*) FROM memories m WHERE NOT EXISTS"
                                " (SELECT 1 FROM sync_base b WHERE b.id = m.id)")[0][0]
        deletes = self.store.read("SELECT count(*) FROM sync_outbox WHERE op = 'delete'")[0][0]
        access = self.store.read("SELECT count(*) FROM memories m WHERE m.access_delta > 0 AND EXISTS"
                                 " (SELECT 1 FROM sync_base b WHERE b.id = m.id)")[0][0]
        outbox = self.store.read("SELECT count(*) FROM sync_outbox")[0][0]
        return {"total": saves + deletes + access, "saves": saves, "deletes": deletes,
                "accessUpdates": access, "outbox": outbox}

    def has_local_work(self) -> bool:
        """Cheap check for the daemon's wake-ups: anything to push?"""
        return bool(
            self.store.read("SELECT 1 FROM sync_outbox LIMIT 1")
            or self.store.read("SELECT 1 FROM memories m WHERE m.access_delta > 0 OR NOT EXISTS"
                               " (SELECT 1 FROM sync_base b WHERE b.id = m.id) LIMIT 1")
        )

    def skipped(self) -> list[dict[str, Any]]:
        from memlocal.model import format_time
        from memlocal.store import from_us

        rows = self.store.read("SELECT key, etag, reason, seen_us FROM sync_skipped ORDER BY key")
        return [{"key": k, "etag": e, "reason": r, "seenAt": format_time(from_us(s))} for k, e, r, s in rows]
