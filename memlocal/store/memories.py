"""Memories in the local SQLite index: their rows, CRUD, lists and the hygiene look-ups.

Decisions:
- sqlite-utils creates the schema and the FTS5 index with its sync triggers; the hot paths are
  plain SQL on the same connection (:class:`memlocal.store.database.Database`).
- Timestamps are integer microseconds since the epoch (exact round trip, cheap ordering);
  ``NULL`` ``last_accessed_us`` means never accessed (Go's zero time in JSON).
- Every write records its change in the change log (``sync_outbox``, ``automation_outbox``) in
  the same transaction; the sync reads and applies changes only through the replication port
  (:mod:`memlocal.plugins`, implemented by :mod:`memlocal.store.replica`).
"""

from __future__ import annotations

import builtins
import json
import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import Any, Final, Iterable, Iterator, Sequence

from ..errors import NotFoundError, StoreError
from ..relevance.features import features_of
from ..hygiene.rules import near_key, text_key
from ..plugins import NoteState
from ..model import Memory, from_us, to_us, utcnow  # noqa: F401 (re-exported: the store's time format)
from .database import Database
from .derive import derive_features, derive_text_keys
from .schemas import CORE_SETS
from .schemas.lineage import COPIED_FROM_SQL
from .schemas.recall import INDEX_PENDING_SQL, WAITING_SQL


MEMORY_COLUMNS = (
    "id",
    "profile",
    "raw_input",
    "processed_content",
    "summary",
    "category",
    "source",
    "confidence",
    "created_us",
    "last_accessed_us",
    "access_count",
    "staleness",
    "is_active",
    "version",
    "extra",
    # Derived, never read back into a Memory: hygiene.text_key of processedContent and rawInput,
    # for the exact-duplicate lookup (migration 7), and hygiene.near_key of processedContent for
    # the near-duplicate lookup at the default threshold (migration 9). Every writer goes
    # through memory_to_row.
    "text_key",
    "raw_key",
    "near_key",
)
_SELECT = "SELECT " + ", ".join(MEMORY_COLUMNS) + " FROM memories"
_TEXT_KEY, _RAW_KEY, _NEAR_KEY = (MEMORY_COLUMNS.index(c) for c in ("text_key", "raw_key", "near_key"))
_MATCH_COLUMNS = ", ".join(f"m.{c}" for c in MEMORY_COLUMNS)  # a memory's row, joined as ``m``
SELECT_WITH_DELTA = "SELECT " + ", ".join(MEMORY_COLUMNS) + ", access_delta FROM memories"


def select_by_ids(n: int) -> str:
    """The statement reading ``n`` memories of one profile by id (parameters: the ids, then the
    profile; rows for :func:`row_to_memory`)."""
    # "+profile": look rows up by primary key, not by scanning the profile index
    return f"{_SELECT} WHERE id IN ({', '.join('?' * n)}) AND +profile = ?"


def row_to_memory(row: Sequence[Any]) -> Memory:
    (mid, profile, raw, processed, summary, category, source, confidence, created_us,
     last_us, access_count, staleness, is_active, version, extra) = row[:15]
    return Memory(
        id=mid,
        profile_name=profile,
        raw_input=raw,
        processed_content=processed,
        summary=summary,
        category=category,
        source=source,
        confidence=confidence,
        created_at=from_us(created_us),
        last_accessed_at=from_us(last_us),
        access_count=access_count,
        staleness_score=staleness,
        is_active=bool(is_active),
        version=version,
        extra=json.loads(extra) if extra and extra != "{}" else {},
    )


def extra_json(m: Memory) -> str:
    """The ``extra`` column: the memory's unknown fields as sorted JSON."""
    return json.dumps(dict(m.extra), sort_keys=True, ensure_ascii=False) if m.extra else "{}"


def memory_to_row(m: Memory) -> tuple[Any, ...]:
    return (
        m.id,
        m.profile_name,
        m.raw_input,
        m.processed_content,
        m.summary,
        m.category,
        m.source,
        m.confidence,
        to_us(m.created_at),
        to_us(m.last_accessed_at),
        m.access_count,
        m.staleness_score,
        int(m.is_active),
        m.version,
        extra_json(m),
        text_key(m.processed_content),
        text_key(m.raw_input) if m.raw_input != m.processed_content else None,
        near_key(m.processed_content),
    )


_CREATED_US = MEMORY_COLUMNS.index("created_us")


def _oldest_first(rows: Sequence[Sequence[Any]]) -> builtins.list[Sequence[Any]]:
    """``rows`` (of ``_SELECT``) once each, by createdAt then id: SQLite's ``ORDER BY created_us, id``
    (ids compare alike: UTF-8's byte order is the code points' order)."""
    unique = {r[0]: r for r in rows}
    return sorted(unique.values(), key=lambda r: (r[_CREATED_US], r[0]))


def id_batches(ids: Sequence[str]) -> Iterator[builtins.list[str]]:
    """``ids`` in lists short enough for one ``IN (...)`` (SQLite's default limit is 999 variables)."""
    for i in range(0, len(ids), 500):
        yield list(ids[i:i + 500])


# Whether a memory waits for the FTS5 batch (recall schema step 10).
_ANY_WAITING: Final = f"SELECT 1 FROM memories m WHERE {WAITING_SQL} LIMIT 1"

_OUTBOX_INSERT: Final = "INSERT INTO sync_outbox (id, profile, op, queued_us) VALUES "
_OUTBOX_ON_CONFLICT: Final = (" ON CONFLICT(id) DO UPDATE SET profile = excluded.profile, op = excluded.op,"
                              " queued_us = excluded.queued_us")
_OUTBOX_UPSERT: Final = _OUTBOX_INSERT + "(?, ?, ?, ?)" + _OUTBOX_ON_CONFLICT


def _record_outbox(c: sqlite3.Connection, memory_id: str, profile: str, op: str) -> None:
    """The change log entry of a save (``put``) or deletion (``delete``); the latest op wins."""
    c.execute(_OUTBOX_UPSERT, (memory_id, profile, op, to_us(utcnow())))


def _record_outbox_many(c: sqlite3.Connection, entries: Sequence[tuple[str, str, str, int]]) -> None:
    """Many change log entries (``_OUTBOX_UPSERT``'s rule for each) in a few statements: one
    statement per entry would hand the GIL back and forth once per entry, and an import's writer
    thread then waits for the thread that reads the lines each time."""
    _insert_values(c, _OUTBOX_INSERT, 4, entries, _OUTBOX_ON_CONFLICT)




def _record_note_outbox(c: sqlite3.Connection, automation_id: str, op: str) -> None:
    """The change log entry of a note written (``put``) or cleared (``delete``); the latest wins."""
    c.execute(
        "INSERT INTO automation_outbox (automation_id, op, queued_us) VALUES (?, ?, ?)"
        " ON CONFLICT(automation_id) DO UPDATE SET op = excluded.op, queued_us = excluded.queued_us",
        (automation_id, op, to_us(utcnow())),
    )


# --- the persisted features (the recall index's tokens; memlocal.relevance.features) ---------------------

# What the store writes for a memory: its columns plus its derived features.
WRITE_COLUMNS = MEMORY_COLUMNS + ("features",)
# What Store.rewrite may change of a memory (its fields, named as the columns), and the columns
# each decides: a text's keys and features are written with it (raw_key reads both texts,
# features the processed text and the summary).
_REWRITABLE: Final = {
    "raw_input": ("raw_input", "raw_key"),
    "processed_content": ("processed_content", "text_key", "raw_key", "near_key", "features"),
    "summary": ("summary", "features"),
    "extra": ("extra",),
}
_TEXTS: Final = ("raw_input", "processed_content", "summary")


# A new memory's row with the rev it will have (the profile's next): the insert trigger then has
# no reason to write the row a second time (recall schema step 4).
_INSERT: Final = (f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}, rev) VALUES ({', '.join('?' for _ in WRITE_COLUMNS)},"
                  " coalesce((SELECT rev FROM profile_revs WHERE profile = ?), 0) + 1)")


def write_row(m: Memory) -> tuple[Any, ...]:
    """``memory_to_row(m)`` plus the memory's features (for an INSERT of ``WRITE_COLUMNS``)."""
    return (*memory_to_row(m), features_of(m.processed_content, m.summary))


def insert_rows(c: sqlite3.Connection, rows: Sequence[Sequence[Any]], columns: Sequence[str] = WRITE_COLUMNS,
                rows_per_statement: int = 500) -> None:
    """INSERT ``rows`` into ``memories`` with a few multi-row statements rather than one per row.

    Why: the triggers that maintain the recall index write into an FTS5 table, and FTS5 writes
    its pending terms out as a new segment at the end of every statement that ran a trigger; one
    statement per row meant a segment (and the merging of segments) per memory, about three
    quarters of an import's SQL time. The rows, triggers and constraints are the same; a failing
    row aborts its statement, as ``executemany`` would, inside the caller's transaction."""
    if not rows:
        return
    rows, columns = _with_revs(c, rows, columns)
    _insert_values(c, f"INSERT INTO memories ({', '.join(columns)}) VALUES ", len(columns), rows,
                   rows_per_statement=rows_per_statement)


def _insert_values(c: sqlite3.Connection, head: str, width: int, rows: Sequence[Sequence[Any]], tail: str = "",
                   rows_per_statement: int = 500) -> None:
    """``head`` + a multi-row ``VALUES`` list + ``tail`` for ``rows`` (each ``width`` values), in
    as few statements as SQLite's limit on bound variables allows (32766 by default since 3.32;
    999 before)."""
    per = max(1, min(rows_per_statement, c.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width))
    one = "(" + ", ".join("?" * width) + ")"
    for i in range(0, len(rows), per):
        part = rows[i:i + per]
        c.execute(head + ", ".join([one] * len(part)) + tail, list(chain.from_iterable(part)))


def _with_revs(c: sqlite3.Connection, rows: Sequence[Sequence[Any]],
               columns: Sequence[str]) -> tuple[Sequence[Sequence[Any]], Sequence[str]]:
    """``rows`` with the ``rev`` each will have once inserted in order: the insert trigger bumps
    the profile's rev once per row, and a row that already holds the bumped value is not
    written again (recall schema step 4). A wrong guess costs only that second write."""
    if "rev" in columns or "profile" not in columns:
        return rows, columns
    at = columns.index("profile")
    names = sorted({row[at] for row in rows})
    rev: dict[str, int] = {}
    for part in id_batches(names):
        rev.update(c.execute(f"SELECT profile, rev FROM profile_revs WHERE profile IN ({', '.join('?' * len(part))})",
                             part).fetchall())
    out = []
    for row in rows:
        profile = row[at]
        rev[profile] = rev.get(profile, 0) + 1
        out.append((*row, rev[profile]))
    return out, (*columns, "rev")


@dataclass(frozen=True, slots=True)
class Page:
    """A page of memories, newest first, with the total the page was cut from."""

    memories: list[Memory]
    total: int
    limit: int
    offset: int

    def __iter__(self) -> Iterator[Memory]:
        return iter(self.memories)

    def __len__(self) -> int:
        return len(self.memories)

    def to_dict(self) -> dict[str, Any]:
        return {
            "memories": [m.to_dict() for m in self.memories],
            "total": self.total,
            "limit": self.limit,
            "offset": self.offset,
        }


class IdTakenError(StoreError):
    """Raised internally when a freshly drawn id already exists; the caller draws another."""


class Store(Database):
    """The memories of one SQLite file: durable writes and the queries the bank needs (the
    connection, transactions and ``meta`` are :class:`Database`'s)."""

    # The library's own tables, migrated on open (memlocal.store.schemas).
    migration_sets = CORE_SETS

    def _opened(self) -> None:
        self._check_derived()

    def _check_derived(self) -> None:
        """Derive again what the store keeps of each memory's text when the code that made it
        differs from this process's: the recall features (stamped in ``meta`` with
        :func:`memlocal.relevance.features.fingerprint`) and the duplicate keys (``text_key``, ``raw_key``,
        ``near_key``, stamped with :func:`memlocal.hygiene.rules.keys_fingerprint`). Once, on open, in
        one transaction; a duplicate is then always found by its key, a memory by its features.
        The near key is made of the tokenizer's terms, so a new tokenizer derives the keys too."""
        from ..relevance.features import FEATURES_META_KEY, fingerprint
        from ..hygiene.rules import KEYS_META_KEY, keys_fingerprint

        wanted = {FEATURES_META_KEY: fingerprint(), KEYS_META_KEY: keys_fingerprint()}

        def stale(c: sqlite3.Connection) -> set[str]:
            have = dict(c.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", tuple(wanted)).fetchall())
            return {key for key, value in wanted.items() if have.get(key) != value}

        if not stale(self.conn):
            return
        with self.transaction() as c:
            todo = stale(c)  # another process may have derived them while we waited for the lock
            if FEATURES_META_KEY in todo:
                # Clearing first lets the triggers remove each old document with the values it
                # was indexed with; deriving then indexes the new ones (and stamps them).
                c.execute("UPDATE memories SET features = NULL WHERE features IS NOT NULL")
                derive_features(c)
            if todo:
                derive_text_keys(c)  # every key, stamped

    def derive_stale_features(self, profile: str) -> int:
        """Derive the features that ``profile``'s memories lack (rows written without them);
        best effort: returns how many were derived, 0 when the database cannot be written now."""
        # INDEXED BY: the partial index answers in one probe; the planner, without
        # statistics, may otherwise pick another (profile, ...) index and scan the profile.
        probe = ("SELECT 1 FROM memories INDEXED BY memories_features_stale"
                 " WHERE profile = ? AND features IS NULL LIMIT 1", (profile,))
        if not self.read(*probe):  # on a read connection: a query never waits for a commit here
            return 0
        if not self._lock.acquire(blocking=False):
            return 0  # this process is writing: the query derives them in memory rather than wait
        try:
            if not self.conn.execute(*probe).fetchone():
                return 0
            try:
                with self.transaction() as c:
                    return derive_features(c, profile)
            except (sqlite3.Error, StoreError):
                return 0  # read-only file, or locked for too long: the query derives them in memory
        finally:
            self._lock.release()


    # --- memories -----------------------------------------------------------------------------

    def insert(self, memory: Memory) -> None:
        """Insert a new memory durably, with its outbox entry in the same transaction;
        ``IdTakenError`` if its id exists (in any profile)."""
        row = write_row(memory)  # tokenised before the write lock is taken
        try:
            with self.transaction() as c:
                c.execute(_INSERT, (*row, memory.profile_name))
                _record_outbox(c, memory.id, memory.profile_name, "put")
        except sqlite3.IntegrityError as exc:
            if "memories.id" in str(exc) or "UNIQUE" in str(exc):
                raise IdTakenError(f"id {memory.id} already exists") from None
            raise

    def import_batch(self, memories: Sequence[Memory], copied: dict[str, str] | None = None,
                     rows: Sequence[tuple[Any, ...]] | None = None) -> list[str]:
        """Insert many memories in one durable transaction, never overwriting.

        Returns one outcome per memory: ``imported``, ``unchanged`` (the id is already in that
        profile, or that profile already holds a copy of it), or ``copied:<new id>``: the id
        belongs to a memory of another profile, so the memory is stored as a copy with a new id
        (``copiedFrom`` names the id it had). ``copied`` (old id -> new id) collects those new ids
        across batches; links (``supersedes``/``supersededBy``) to ids already in it are moved.
        ``rows``: each memory's :func:`write_row`, when the caller derived them already.
        """
        from ..hygiene.rules import copy_of, relinked
        from ..model import new_id

        copied = {} if copied is None else copied
        outcomes: list[str] = []
        # Tokenised before the write lock is taken.
        row_of = dict(zip([m.id for m in memories], rows if rows is not None else map(write_row, memories)))
        with self.transaction() as c:
            owner: dict[str, str] = {}  # id -> profile of the ids already here
            for part in id_batches([m.id for m in memories]):
                owner.update(c.execute(f"SELECT id, profile FROM memories WHERE id IN ({', '.join('?' * len(part))})",
                                       part).fetchall())
            # (profile, copiedFrom) -> id of the copies already here: a line whose copy is in its
            # profile is unchanged, whether or not its own id is still taken.
            copies: dict[tuple[str, str], str] = {}
            by_profile: dict[str, builtins.list[str]] = {}
            for m in memories:
                by_profile.setdefault(m.profile_name, []).append(m.id)
            for name, wanted in by_profile.items():
                for part in id_batches(wanted):
                    copies.update(((name, src), mid) for mid, src in c.execute(
                        f"SELECT id, {COPIED_FROM_SQL} FROM memories WHERE profile = ? AND {COPIED_FROM_SQL}"
                        f" IN ({', '.join('?' * len(part))})", (name, *part)).fetchall())
            new: list[tuple[Any, ...]] = []
            for memory in memories:
                profile = owner.get(memory.id)
                if (memory.profile_name, memory.id) in copies:
                    outcomes.append("unchanged")
                elif profile is None:
                    owner[memory.id] = memory.profile_name  # a repeated id later in the batch is "unchanged"
                    moved = relinked(memory, copied)
                    new.append(row_of[memory.id] if moved is memory else write_row(moved))
                    outcomes.append("imported")
                elif profile == memory.profile_name:
                    outcomes.append("unchanged")
                else:
                    fresh = new_id()
                    while fresh in owner or c.execute("SELECT 1 FROM memories WHERE id = ?", (fresh,)).fetchone():
                        fresh = new_id()  # a collision is checked, never assumed away
                    copied[memory.id] = fresh
                    owner[fresh] = memory.profile_name
                    copies[(memory.profile_name, memory.id)] = fresh
                    new.append(write_row(copy_of(memory, fresh, memory.profile_name, copied)))
                    outcomes.append(f"copied:{fresh}")
            insert_rows(c, new)
            queued = to_us(utcnow())
            _record_outbox_many(c, [(w[0], w[1], "put", queued) for w in new])
        return outcomes

    def import_batches(self, batches: Iterable[Sequence[Memory]], copied: dict[str, str] | None = None
                       ) -> Iterator[builtins.list[str]]:
        """:meth:`import_batch` of each batch in turn, yielding its outcomes once it is durable.

        Pipelined: while one batch is written on a writer thread (SQLite lets go of the GIL
        while it writes), this thread takes the next batch from ``batches`` (an import reads and
        checks its lines there) and derives its rows. A batch is handed to the writer only once
        the one before it is durable, so a failure stops the import at the failing batch: the
        batches before it are stored, none after it, and the error is raised here.
        """
        copied = {} if copied is None else copied
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlocal-import") as writer:
            pending: Future[builtins.list[str]] | None = None
            for memories in batches:
                rows = [write_row(m) for m in memories]
                if pending is not None:
                    yield pending.result()
                pending = writer.submit(self.import_batch, memories, copied, rows)
            if pending is not None:
                yield pending.result()

    def relink(self, ids: Sequence[str], copied: dict[str, str]) -> int:
        """Move the links of the memories ``ids`` that point at an old id of ``copied`` to its new
        id (an import's forward references, once every line is in), durably and through the
        change log; how many memories changed."""
        from ..hygiene.rules import relinked

        changed = 0
        with self.transaction() as c:
            for part in id_batches(ids):
                rows = c.execute(f"{_SELECT} WHERE id IN ({', '.join('?' * len(part))})", part).fetchall()
                for row in rows:
                    memory = row_to_memory(row)
                    moved = relinked(memory, copied)
                    if moved is not memory:
                        c.execute("UPDATE memories SET extra = ? WHERE id = ?", (extra_json(moved), moved.id))
                        _record_outbox(c, moved.id, moved.profile_name, "put")
                        changed += 1
        return changed

    def copy_profile(self, source: str, target: str, *, move: bool) -> builtins.list[tuple[Memory, Memory]]:
        """Copy every memory of ``source`` into the empty profile ``target`` under new ids, and with
        ``move`` delete the originals (a rename), in one durable transaction with every change in
        the change log. Returns ``(original, copy)`` pairs, oldest first.

        ``NotFoundError`` when ``source`` has no memory; ``ValidationError`` when ``target`` has
        some (a copy never merges into, nor overwrites, a profile).
        """
        from ..errors import ValidationError
        from ..hygiene.rules import copy_of
        from ..model import new_id

        with self.transaction() as c:
            held = c.execute("SELECT count(*) FROM memories WHERE profile = ?", (target,)).fetchone()[0]
            if held:
                raise ValidationError(f"profile {target} already has {held} memor{'y' if held == 1 else 'ies'}; "
                                      "copy or rename into a profile that has none")
            rows = c.execute(f"SELECT {', '.join(MEMORY_COLUMNS)}, features FROM memories WHERE profile = ?"
                             " ORDER BY created_us, id", (source,)).fetchall()
            if not rows:
                raise NotFoundError(f"profile {source} has no memories")
            originals = [row_to_memory(r) for r in rows]
            ids: dict[str, str] = {}
            for m in originals:
                fresh = new_id()
                while fresh in ids.values() or c.execute("SELECT 1 FROM memories WHERE id = ?", (fresh,)).fetchone():
                    fresh = new_id()  # a collision is checked, never assumed away
                ids[m.id] = fresh
            copies = [copy_of(m, ids[m.id], target, ids) for m in originals]
            # The features depend on the text only: the copy reuses the original's.
            insert_rows(c, [(*memory_to_row(m), r[-1]) for m, r in zip(copies, rows)])
            queued = to_us(utcnow())
            _record_outbox_many(c, [(m.id, target, "put", queued) for m in copies])
            if move:
                for part in id_batches([m.id for m in originals]):
                    c.execute(f"DELETE FROM memories WHERE id IN ({', '.join('?' * len(part))})", part)
                _record_outbox_many(c, [(m.id, source, "delete", queued) for m in originals])
        return list(zip(originals, copies))

    def upsert(self, memory: Memory) -> None:
        """Insert or fully replace a memory as it is, recording no change (test fixtures, tools)."""
        cols = ", ".join(WRITE_COLUMNS)
        placeholders = ", ".join("?" for _ in WRITE_COLUMNS)
        updates = ", ".join(f"{c} = excluded.{c}" for c in WRITE_COLUMNS if c != "id")
        row = write_row(memory)
        with self.transaction() as c:
            c.execute(
                f"INSERT INTO memories ({cols}) VALUES ({placeholders}) ON CONFLICT(id) DO UPDATE SET {updates}",
                row,
            )

    def get(self, profile: str, memory_id: str) -> Memory:
        rows = self.read(f"{_SELECT} WHERE id = ? AND profile = ?", (memory_id, profile))
        if not rows:
            raise NotFoundError(f"no memory {memory_id} in profile {profile}")
        return row_to_memory(rows[0])

    def find(self, memory_id: str) -> Memory | None:
        """A memory by id in any profile (ids are unique across the store)."""
        rows = self.read(f"{_SELECT} WHERE id = ?", (memory_id,))
        return row_to_memory(rows[0]) if rows else None

    def get_many(self, profile: str, ids: Sequence[str]) -> dict[str, Memory]:
        """The memories of ``profile`` among ``ids`` (absent ones are left out), by id."""
        if not ids:
            return {}
        return {r[0]: row_to_memory(r) for r in self.read(select_by_ids(len(ids)), (*ids, profile))}

    def exists(self, memory_id: str) -> bool:
        return bool(self.read("SELECT 1 FROM memories WHERE id = ?", (memory_id,)))

    def list(self, profile: str, limit: int, offset: int, *, category: str | None = None,
             active_only: bool = False) -> Page:
        clause, params = ("profile = ?", [profile]) if category is None else (
            "profile = ? AND category = ?", [profile, category])
        if active_only:
            clause += " AND is_active = 1"
        with self.snapshot() as conn:  # the total and the page at one moment
            total = conn.execute(f"SELECT count(*) FROM memories WHERE {clause}", params).fetchone()[0]
            rows = conn.execute(
                f"{_SELECT} WHERE {clause} ORDER BY created_us DESC, id DESC LIMIT ? OFFSET ?",
                (*params, limit, offset),
            ).fetchall()
        return Page([row_to_memory(r) for r in rows], total, limit, offset)

    def list_all(self, limit: int, offset: int, *, q: str | None = None, category: str | None = None) -> Page:
        """Memories of every profile, newest first, optionally filtered by ``category`` and by
        ``q``: a substring of rawInput, processedContent or summary (SQLite ``lower()``, so the
        match ignores case for ASCII letters only)."""
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if category is not None:
            where.append("category = ?")
            params.append(category)
        if q:
            where.append("(instr(lower(raw_input), lower(?)) OR instr(lower(processed_content), lower(?))"
                         " OR instr(lower(summary), lower(?)))")
            params += [q, q, q]
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        with self.snapshot() as conn:  # the total and the page at one moment
            total = conn.execute(f"SELECT count(*) FROM memories{clause}", params).fetchone()[0]
            rows = conn.execute(
                f"{_SELECT}{clause} ORDER BY created_us DESC, id DESC LIMIT ? OFFSET ?", [*params, limit, offset]
            ).fetchall()
        return Page([row_to_memory(r) for r in rows], total, limit, offset)

    def iter_all(self, *, oldest_first: bool = False) -> Iterator[Memory]:
        """Every memory, by profile name and newest first within a profile (``oldest_first``:
        oldest first), streamed from one read snapshot (``Database.iter_rows``): committed rows
        only, never all of them in memory at once."""
        order = "created_us, id" if oldest_first else "created_us DESC, id DESC"
        return map(row_to_memory, self.iter_rows(f"{_SELECT} ORDER BY profile, {order}"))

    def iter_profile(self, profile: str, *, active_only: bool = False, oldest_first: bool = False) -> Iterator[Memory]:
        """The memories of ``profile`` (``active_only``: not superseded), newest first
        (``oldest_first``: oldest first), streamed as :meth:`iter_all`."""
        order = "created_us, id" if oldest_first else "created_us DESC, id DESC"
        sql = f"{_SELECT} WHERE profile = ?" + (" AND is_active = 1" if active_only else "") + f" ORDER BY {order}"
        return map(row_to_memory, self.iter_rows(sql, (profile,)))

    def iter_with_extra(self, profile: str, name: str) -> builtins.list[Memory]:
        """The active memories of ``profile`` that carry the extra field ``name`` (an
        integration's files or items), found in SQL without reading the profile's others."""
        sql = (f"{_SELECT} WHERE profile = ? AND is_active = 1 AND extra != '{{}}' "
               "AND json_type(extra, ?) IS NOT NULL")
        return [row_to_memory(r) for r in self.read(sql, (profile, f'$."{name}"'))]

    def delete(self, profile: str, memory_id: str) -> Memory:
        """Delete durably, with its outbox entry, and return what was deleted; ``NotFoundError``
        if absent."""
        with self.transaction() as c:
            row = c.execute(f"{_SELECT} WHERE id = ? AND profile = ?", (memory_id, profile)).fetchone()
            if row is None:
                raise NotFoundError(f"no memory {memory_id} in profile {profile}")
            memory = row_to_memory(row)
            c.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            _record_outbox(c, memory_id, profile, "delete")
        return memory

    def mark_accessed(self, profile: str, ids: Sequence[str], now: datetime) -> int:
        """accessCount + 1, lastAccessedAt = now and staleness recomputed, in one transaction.

        The bump is also added to ``access_delta`` so that the sync can merge it into the bucket
        without losing other hosts' bumps. Returns how many memories were updated. The commit is
        not fsynced (``transaction(durable=False)``): the spec calls MarkAccessed best-effort, and
        the fsync was most of a warm recall's time.
        """
        if not ids:
            return 0
        from ..model import compute_staleness

        now_us = to_us(now)
        wanted = list(dict.fromkeys(ids))
        with self.transaction(durable=False) as c:
            # One read of every row and one prepared UPDATE run for each: a recall's bump is a
            # handful of statements, not two per memory.
            rows = []
            for at in range(0, len(wanted), 500):  # under SQLite's limit on bound parameters
                part = wanted[at:at + 500]
                rows += c.execute(
                    "SELECT id, category, confidence, access_count, created_us, last_accessed_us FROM memories"
                    f" WHERE +profile = ? AND id IN ({', '.join('?' for _ in part)})",
                    (profile, *part),
                ).fetchall()  # a deleted one is missing: nothing to bump
            updates = []
            for mid, category, confidence, count, created_us, last_us in rows:
                last = max(last_us or 0, now_us or 0)
                staleness = compute_staleness(
                    category=category,
                    confidence=confidence,
                    access_count=count + 1,
                    created_at=from_us(created_us),
                    last_accessed_at=from_us(last),
                    now=now,
                )
                updates.append((last, staleness, mid))
            if not updates:
                return 0
            # One new rev for the whole bump, set with the rows (recall step 5: the triggers
            # then neither bump the profile's rev per memory nor write each row twice).
            c.execute("INSERT INTO profile_revs (profile) SELECT ? WHERE NOT EXISTS"
                      " (SELECT 1 FROM profile_revs WHERE profile = ?)", (profile, profile))
            c.execute("UPDATE profile_revs SET rev = rev + 1 WHERE profile = ?", (profile,))
            (rev,) = c.execute("SELECT rev FROM profile_revs WHERE profile = ?", (profile,)).fetchone()
            c.executemany(
                "UPDATE memories SET access_count = access_count + 1, access_delta = access_delta + 1,"
                " last_accessed_us = ?, staleness = ?, rev = ? WHERE id = ?",
                [(last, staleness, rev, mid) for last, staleness, mid in updates],
            )
        return len(updates)

    # --- hygiene: duplicates and supersession (memlocal.hygiene.rules) -------------------------------

    def find_by_keys(self, profile: str, keys: Sequence[str], *, near_key: str | None = None
                     ) -> tuple[builtins.list[Memory], builtins.list[Memory]]:
        """Active memories of ``profile`` whose processedContent or rawInput has one of these
        :func:`memlocal.hygiene.rules.text_key` values, oldest first (callers confirm on the text); and,
        read by the same query, those with this :func:`memlocal.hygiene.rules.near_key` (``[]``
        without one): a save's two duplicate checks in one statement."""
        if not keys:
            return [], (self.find_by_near_key(profile, near_key) if near_key is not None else [])
        marks = ", ".join("?" for _ in keys)
        # One index probe per key column (memories_text_key, memories_raw_key, memories_near_key):
        # with an OR, SQLite scanned the whole profile, which made every save O(profile size).
        # UNION ALL and the order made here: a UNION, an IN (subquery) or an ORDER BY each built
        # a temporary b-tree, which cost more than the rest of the lookup.
        near = f" UNION ALL {_SELECT} WHERE profile = ? AND near_key = ? AND is_active = 1" if near_key is not None else ""
        rows = self.read(
            f"{_SELECT} WHERE profile = ? AND text_key IN ({marks}) AND is_active = 1"
            f" UNION ALL {_SELECT} WHERE profile = ? AND raw_key IN ({marks}) AND is_active = 1{near}",
            (profile, *keys, profile, *keys, *((profile, near_key) if near_key is not None else ())),
        )
        if not rows:  # a new text, the common case of a save
            return [], []
        ordered = _oldest_first(rows)
        wanted = set(keys)
        exact = [row_to_memory(r) for r in ordered if r[_TEXT_KEY] in wanted or r[_RAW_KEY] in wanted]
        return exact, [row_to_memory(r) for r in ordered if near_key is not None and r[_NEAR_KEY] == near_key]

    def find_by_near_key(self, profile: str, key: str) -> builtins.list[Memory]:
        """Active memories of ``profile`` with this :func:`memlocal.hygiene.rules.near_key`, oldest
        first (callers confirm with the rule itself)."""
        # Ordered here: given an ORDER BY, the planner preferred memories_profile_created and read
        # the whole profile on every save (and a sort needs a temporary b-tree).
        rows = self.read(f"{_SELECT} WHERE profile = ? AND near_key = ? AND is_active = 1", (profile, key))
        return [row_to_memory(r) for r in _oldest_first(rows)]

    def similar(self, profile: str, terms: Sequence[str], limit: int) -> builtins.list[Memory]:
        """Up to ``limit`` active memories of ``profile`` that share the most (rarest) of
        ``terms`` (the formula's stems, :func:`memlocal.relevance.text.terms`), best first: bm25 over the
        recall index ``memory_features`` (migration 4), scoped by the profile's token. The
        memories still waiting for the FTS5 batch are indexed first (a durable write)."""
        if not terms or limit <= 0:
            return []
        self.index_pending()  # bm25 ranks what the index holds: the memories still waiting too
        return [row_to_memory(r) for r in self._matches(_MATCH_COLUMNS, profile, terms, limit)]

    def similar_texts(self, profile: str, terms: Sequence[str], limit: int, *,
                      required: Sequence[str] = ()) -> builtins.list[tuple[str, str]]:
        """``(id, processedContent)`` of what :meth:`similar` would match, without writing (a
        save's update check: no commit of its own, and two columns rather than whole rows):
        up to ``limit`` bm25 matches of ``terms`` among the indexed memories, or with
        ``required``, those holding every one of these terms, newest first (an AND read in rowid
        order: a few postings, where an OR of common terms ranks thousands); then every active
        memory of ``profile`` still waiting for the FTS5 batch (fewer than a batch), newest
        first, whatever its terms."""
        if not terms or limit <= 0:
            return []
        waiting = self.read(f"SELECT m.id, m.processed_content FROM memories m WHERE {WAITING_SQL}"
                            " AND +m.profile = ? ORDER BY m.rowid DESC", (profile,))
        return [*self._matches("m.id, m.processed_content", profile, terms, limit, required), *waiting]

    def _matches(self, cols: str, profile: str, terms: Sequence[str], limit: int,
                 required: Sequence[str] = ()) -> builtins.list[tuple[Any, ...]]:
        """``cols`` of the indexed active memories of ``profile`` matching ``terms`` (bm25 order)
        or holding all of ``required`` (newest first), at most ``limit``."""
        from ..relevance.features import scope_token, term_token

        if required:
            match = " AND ".join([scope_token(profile), *(term_token(t) for t in dict.fromkeys(required))])
        else:
            match = f"{scope_token(profile)} AND ({' OR '.join(term_token(t) for t in dict.fromkeys(terms))})"
        try:
            return self.read(
                f"SELECT {cols} FROM memory_features f JOIN memories m ON m.rowid = f.rowid"
                " WHERE memory_features MATCH ? AND m.profile = ? AND m.is_active = 1"
                + (" ORDER BY f.rowid DESC LIMIT ?" if required else " ORDER BY f.rank LIMIT ?"),
                (match, profile, limit),
            )
        except sqlite3.OperationalError:  # a query FTS5 cannot parse: no candidates, no merge
            return []

    def index_pending(self) -> None:
        """Index in FTS5 the new memories still waiting for their batch (those above the watermark,
        recall schema step 10), durably; best effort: left waiting when the database cannot be
        written now (the cold path reads waiting memories directly, so no query misses them)."""
        if not self.read(_ANY_WAITING):  # without the lock
            return
        with self._lock:
            if not self.conn.execute(_ANY_WAITING).fetchone():
                return
            try:
                with self.transaction() as c:
                    for sql in INDEX_PENDING_SQL:
                        c.execute(sql)
            except (sqlite3.Error, StoreError):
                pass

    def supersede(
        self,
        profile: str,
        old_id: str,
        new: Memory,
        *,
        insert: bool,
    ) -> tuple[Memory, Memory]:
        """In one durable transaction: store ``new`` (``insert``) or mark the stored ``new`` as
        superseding, and retire ``old_id`` (``isActive: false``, ``supersededBy``).

        Returns ``(new, old)`` as stored. ``NotFoundError`` if ``old_id`` is not in ``profile``;
        ``ValidationError`` if it is already inactive or ``new`` already supersedes another.
        Both memories are recorded in the outbox (the change log) in the same transaction.
        """
        from ..errors import ValidationError
        from ..hygiene.rules import SUPERSEDED_BY, SUPERSEDES

        with self.transaction() as c:
            row = c.execute(f"{_SELECT} WHERE id = ? AND profile = ?", (old_id, profile)).fetchone()
            if row is None:
                raise NotFoundError(f"no memory {old_id} in profile {profile} to supersede")
            old = row_to_memory(row)
            if not old.is_active:
                by = old.extra.get(SUPERSEDED_BY)
                raise ValidationError(f"{old_id} is already inactive" + (f" (superseded by {by})" if by else ""))
            if insert:
                new = new.with_changes(extra={**new.extra, SUPERSEDES: old_id})
                try:
                    # As ``insert``'s: with its features (it waits for the FTS5 batch, so the
                    # next update check finds it) and the rev it will have.
                    c.execute(_INSERT, (*write_row(new), profile))
                except sqlite3.IntegrityError:
                    raise IdTakenError(f"id {new.id} already exists") from None
            else:
                cur = c.execute(f"{_SELECT} WHERE id = ? AND profile = ?", (new.id, profile)).fetchone()
                if cur is None:
                    raise NotFoundError(f"no memory {new.id} in profile {profile}")
                new = row_to_memory(cur)
                prior = new.extra.get(SUPERSEDES)
                if prior not in (None, old_id):
                    raise ValidationError(f"{new.id} already supersedes {prior}")
                new = new.with_changes(extra={**new.extra, SUPERSEDES: old_id})
                c.execute("UPDATE memories SET extra = ? WHERE id = ?", (extra_json(new), new.id))
            old = old.with_changes(is_active=False, extra={**old.extra, SUPERSEDED_BY: new.id})
            c.execute("UPDATE memories SET is_active = 0, extra = ? WHERE id = ?", (extra_json(old), old_id))
            _record_outbox(c, new.id, profile, "put")
            _record_outbox(c, old_id, profile, "put")
        return new, old

    def restore(self, profile: str, old_id: str) -> tuple[Memory, Memory | None]:
        """Undo a supersession, in one durable transaction: ``old_id`` (superseded) is active
        again without its ``supersededBy``, and its successor (still stored) loses the
        ``supersedes`` that pointed at it and stays active. Returns ``(old, successor)`` as
        stored; ``NotFoundError`` if ``old_id`` is not in ``profile``, ``ValidationError`` if
        it is active. Both are recorded in the outbox (the change log)."""
        from ..errors import ValidationError
        from ..hygiene.rules import SUPERSEDED_BY, SUPERSEDES

        with self.transaction() as c:
            row = c.execute(f"{_SELECT} WHERE id = ? AND profile = ?", (old_id, profile)).fetchone()
            if row is None:
                raise NotFoundError(f"no memory {old_id} in profile {profile} to restore")
            old = row_to_memory(row)
            if old.is_active:
                raise ValidationError(f"{old_id} is active: nothing to restore")
            successor: Memory | None = None
            by = old.extra.get(SUPERSEDED_BY)
            if isinstance(by, str):
                cur = c.execute(f"{_SELECT} WHERE id = ? AND profile = ?", (by, profile)).fetchone()
                if cur is not None:
                    successor = row_to_memory(cur)
                    if successor.extra.get(SUPERSEDES) == old_id:
                        successor = successor.with_changes(
                            extra={k: v for k, v in successor.extra.items() if k != SUPERSEDES})
                        c.execute("UPDATE memories SET extra = ? WHERE id = ?", (extra_json(successor), successor.id))
                        _record_outbox(c, successor.id, profile, "put")
            old = old.with_changes(is_active=True, extra={k: v for k, v in old.extra.items() if k != SUPERSEDED_BY})
            c.execute("UPDATE memories SET is_active = 1, extra = ? WHERE id = ?", (extra_json(old), old_id))
            _record_outbox(c, old_id, profile, "put")
        return old, successor

    def profiles(self) -> dict[str, int]:
        """Memory count per profile, largest first."""
        rows = self.read("SELECT profile, count(*) FROM memories GROUP BY profile ORDER BY count(*) DESC, profile")
        return {p: n for p, n in rows}

    def active_counts(self) -> dict[str, int]:
        """Active (not superseded) memory count per profile, for the profiles that have memories."""
        rows = self.read("SELECT profile, sum(is_active) FROM memories GROUP BY profile")
        return {p: int(n or 0) for p, n in rows}

    def profile_activity(self) -> builtins.list[tuple[str, int, int]]:
        """``(profile, memory count, last activity in µs)`` per profile, newest activity first;
        a profile's activity is its latest createdAt or lastAccessedAt."""
        rows = self.read(
            "SELECT profile, count(*), max(max(created_us, coalesce(last_accessed_us, 0))) AS act"
            " FROM memories GROUP BY profile ORDER BY act DESC, profile"
        )
        return [(p, n, act) for p, n, act in rows]

    def count(self) -> int:
        count: int = self.read("SELECT count(*) FROM memories")[0][0]
        return count

    # --- automation notes (memlocal.services.automation) and their change log ---------------------------
    #
    # A note is ``(text, updated_us)``. Writes record their change in ``automation_outbox`` in
    # the same transaction; the sync reads that log and applies what the bucket holds through the
    # replication port's conditional changes (memlocal.store.replica), which change a note only if
    # it is still what the sync saw, so a note written here while a pass runs is never overwritten
    # or deleted by that pass.

    def note_get(self, automation_id: str) -> NoteState | None:
        """The note of ``automation_id`` as ``(text, updated_us)``, or ``None``."""
        rows = self.read("SELECT note, updated_us FROM automation_notes WHERE automation_id = ?", (automation_id,))
        return (rows[0][0], rows[0][1]) if rows else None

    def notes(self) -> builtins.list[tuple[str, str, int]]:
        """Every note as ``(automation_id, text, updated_us)``, most recently written first."""
        rows = self.read("SELECT automation_id, note, updated_us FROM automation_notes"
                         " ORDER BY updated_us DESC, automation_id")
        return [(a, n, u) for a, n, u in rows]

    # --- a rescan's rewrite and the purge of what it replaced (memlocal.bank.rescan) -------------------

    def rewrite(self, changes: Sequence[tuple[Memory, Memory]]) -> builtins.list[Memory]:
        """Write rewritten texts (rawInput, processedContent, summary) and unknown fields of
        stored memories, each change a pair (the memory as read, as rewritten), in one durable
        transaction, each recorded in the change log like a save (so the bucket gets it).

        Only the fields the rewrite changed are written, with the keys and features they decide,
        and only while the memory still holds what was read in them (check-and-set; the texts
        are checked together, since the keys and features read them together): a change made
        since the read to any other field (a supersession's link, the access counts, the
        category) stays, and a memory whose rewritten fields another writer changed meanwhile is
        not written (the caller reads it again). Returns the memories rewritten, as stored now:
        one deleted or changed since it was read is not."""
        plans: builtins.list[tuple[Memory, Memory, tuple[str, ...], tuple[str, ...], dict[str, Any]]] = []
        for before, after in changes:
            fields = tuple(f for f in _REWRITABLE if getattr(before, f) != getattr(after, f))
            if not fields:
                continue
            checked = (*(_TEXTS if set(fields) & set(_TEXTS) else ()), *(("extra",) if "extra" in fields else ()))
            row = dict(zip(WRITE_COLUMNS, write_row(after)))  # tokenised before the lock
            cols = tuple(dict.fromkeys(c for f in fields for c in _REWRITABLE[f]))
            plans.append((before, after, checked, cols, row))
        done: builtins.list[Memory] = []
        with self.transaction() as c:
            for before, after, checked, cols, row in plans:
                found = c.execute(f"{_SELECT} WHERE id = ? AND profile = ?",
                                  (before.id, before.profile_name)).fetchone()
                if found is None:
                    continue  # deleted since the read: its queued deletion stays
                now = row_to_memory(found)
                if any(getattr(now, f) != getattr(before, f) for f in checked):
                    continue  # changed since the read: not overwritten with a stale text
                c.execute(f"UPDATE memories SET {', '.join(f'{col} = ?' for col in cols)} WHERE id = ?",
                          (*(row[col] for col in cols), before.id))
                _record_outbox(c, before.id, before.profile_name, "put")
                done.append(now.with_changes(**{f: getattr(after, f) for f in checked}))
        return done

    def purge_pending(self) -> bool:
        """Whether a text gained a redaction marker since the last purge (the trigger of
        ``schemas.secrets`` notes it: a rescan here, or another host's rescan pulled)."""
        from .schemas.secrets import PURGE_PENDING

        return self.meta_get(PURGE_PENDING) is not None

    def purge_replaced(self) -> None:
        """Take the bytes of replaced texts out of the database file: the full-text index
        merged into one segment (``optimize``: the old terms and their delete markers go), then
        ``VACUUM`` (the file written again from its live rows: no freed cell, no free page keeps
        a byte), then a ``TRUNCATE`` checkpoint (the log emptied to zero bytes). Clears the
        pending note first, so that the vacuum drops its row too."""
        from .schemas.secrets import PURGE_PENDING

        note = "INSERT OR REPLACE INTO meta (key, value) VALUES (?, '1')"
        with self._lock, self.translated(f"cannot purge {self.path}"):
            try:
                self.conn.execute("DELETE FROM meta WHERE key = ?", (PURGE_PENDING,))
                self.conn.execute("INSERT INTO memory_features (memory_features) VALUES ('optimize')")
                self.conn.execute("VACUUM")
                busy = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error:
                self.conn.execute(note, (PURGE_PENDING,))  # the purge is still owed: a later pass retries
                raise
            if busy:  # a reader held the log: its frames are reused, not truncated; noted for the next time
                self.conn.execute(note, (PURGE_PENDING,))

    def note_put(self, automation_id: str, note: str, updated_us: int) -> None:
        """Write a note durably, with its outbox entry."""
        with self.transaction() as c:
            c.execute(
                "INSERT INTO automation_notes (automation_id, note, updated_us) VALUES (?, ?, ?)"
                " ON CONFLICT(automation_id) DO UPDATE SET note = excluded.note, updated_us = excluded.updated_us",
                (automation_id, note, updated_us),
            )
            _record_note_outbox(c, automation_id, "put")

    def note_delete(self, automation_id: str) -> bool:
        """Remove a note durably, with its outbox entry; ``True`` if there was one."""
        with self.transaction() as c:
            if c.execute("DELETE FROM automation_notes WHERE automation_id = ?", (automation_id,)).rowcount == 0:
                return False
            _record_note_outbox(c, automation_id, "delete")
            return True
