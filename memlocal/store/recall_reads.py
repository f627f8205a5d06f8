"""The reads recall makes of one snapshot (:mod:`memlocal.recall`: the in-memory index and the
cold path): every statement over ``memories``, ``profile_revs`` and the FTS5 table
``memory_features`` that ranking needs, behind named methods, so that the store owns the SQL on
its tables and recall holds none (docs/relevance.md describes the paths; docs/storage.md the
tables).

A row is a tuple in :data:`ROW_COLUMNS`' order (the ranking loops read it by position: a named
tuple per row would cost a Python call per memory read); :meth:`RecallReads.index_rows` and
:meth:`RecallReads.changed` add ``processed_content`` (the second pass's word count).
"""

from __future__ import annotations

import heapq
import sqlite3
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any, Final, Iterable, Iterator, Sequence

from ..model import Memory
from ..relevance.scoring import HALF_LIFE_DAYS, USAGE_FLOOR, US_PER_DAY
from .database import Database
from .memories import row_to_memory, select_by_ids
from .schemas.recall import WAITING_SQL

# The columns of a row, in order. The text is read only for a row without stored features
# (``NULL``: derived lazily, by the caller).
ROW_COLUMNS: Final = ("id", "created_us", "last_accessed_us", "access_count", "confidence", "category", "features",
                      "is_active", "processed_content if features is NULL", "summary if features is NULL")
Row = Sequence[Any]

_ROW_SQL: Final = (
    "SELECT id, created_us, last_accessed_us, access_count, confidence, category, features, is_active,"
    " CASE WHEN features IS NULL THEN processed_content END, CASE WHEN features IS NULL THEN summary END"
    " FROM memories WHERE profile = ?"
)
# What the in-memory index reads of a row: the above and the text, for its word count (the
# second pass's length normalisation, ``ProfileIndex.words``).
_INDEX_ROW_SQL: Final = _ROW_SQL.replace(" FROM memories", ", processed_content FROM memories", 1)

# The FTS5 match drives (CROSS JOIN keeps that order; "+" keeps the profile index out), then each
# hit is one rowid lookup in ``memories``.
_HIT_SQL: Final = (
    "SELECT m.id, m.created_us, m.last_accessed_us, m.access_count, m.confidence, m.category, m.features"
    " FROM memory_features f CROSS JOIN memories m ON m.rowid = f.rowid"
    " WHERE memory_features MATCH ? AND +m.profile = ? AND m.is_active = 1 AND m.features IS NOT NULL"
)
_COUNT_SQL: Final = "SELECT count(*) FROM memory_features WHERE memory_features MATCH ?"
# The profile's active memories waiting for the FTS5 index (recall schema step 10: the rows above
# the watermark, about a batch; "+" keeps the profile's indexes out of that rowid range).
_WAITING_SQL: Final = _ROW_SQL.replace("FROM memories WHERE profile = ?",
                                       f"FROM memories m WHERE {WAITING_SQL} AND +m.profile = ?")
_STALE_SQL: Final = (_ROW_SQL.replace("FROM memories", "FROM memories INDEXED BY memories_features_stale")
                     + " AND features IS NULL AND is_active = 1")
# The two orders of a profile's memories the store indexes (memlocal/store/schemas/recall.py,
# step 3): by anchor, newest first (the order of recency), and by access count (of usage).
_ANCHOR_SQL: Final = "max(created_us, coalesce(last_accessed_us, created_us))"
# Each order is two reads (recall schema step 8: the indexes hold only the memories a recall
# returned): by anchor, the never-accessed by createdAt (their anchor) merged with the accessed;
# by access count, the used ones, then the others (all of usage 0) in any order.
_WALK_X_NEW_SQL: Final = _ROW_SQL + " AND is_active = 1 AND last_accessed_us IS NULL ORDER BY created_us DESC"
_WALK_X_SEEN_SQL: Final = _ROW_SQL + f" AND is_active = 1 AND last_accessed_us IS NOT NULL ORDER BY {_ANCHOR_SQL} DESC"
_WALK_Y_USED_SQL: Final = _ROW_SQL + " AND is_active = 1 AND access_count > 0 ORDER BY access_count DESC"
_WALK_Y_REST_SQL: Final = _ROW_SQL + " AND is_active = 1 AND NOT access_count > 0"
# A class's rows ordered by the score SQLite computes with the formula's constants; only a hint
# for the order of reading (every row read is scored in Python), so it needs SQLite's math
# functions (3.35+, on in Python's builds; without them the class is read whole).
_CLASS_SQL: Final = (
    "SELECT m.id, m.created_us, m.last_accessed_us, m.access_count, m.confidence, m.category, m.features,"
    f" (? * pow(0.5, (max(0, ? - max(m.created_us, coalesce(m.last_accessed_us, m.created_us)))"
    f" / {float(US_PER_DAY)!r}) / {float(HALF_LIFE_DAYS)!r})"
    f" + ? * (1.0 - {1.0 - USAGE_FLOOR!r} / (1.0 + log10(1 + max(0, m.access_count)))) + ?)"
    " * (0.5 + 0.5 * m.confidence) AS hint"
    " FROM memory_features f CROSS JOIN memories m ON m.rowid = f.rowid"
    " WHERE memory_features MATCH ? AND +m.profile = ? AND m.is_active = 1 AND m.features IS NOT NULL"
    " ORDER BY hint DESC"
)


def _neg_anchor(r: Row) -> int:
    anchor: int = max(r[1], r[2] or r[1])
    return -anchor


class RecallReads:
    """The reads of one read transaction (the caller's: ``Store.snapshot()``, or
    :meth:`read_only`'s own connection for a background build)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @classmethod
    @contextmanager
    def snapshot(cls, db: Database) -> Iterator["RecallReads"]:
        """The reads of ``db``'s read transaction on this thread (:meth:`Database.snapshot`: the
        one open, or a new one): the connection stays with the store."""
        with db.snapshot() as conn:
            yield cls(conn)

    @classmethod
    @contextmanager
    def read_only(cls, path: Path, busy_timeout_s: float) -> Iterator["RecallReads"]:
        """A snapshot on a connection of its own, read-only, usable from another thread (the
        recall index's background build)."""
        conn = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA query_only = 1")
            conn.execute("BEGIN")
            yield cls(conn)
            conn.execute("COMMIT")
        finally:
            conn.close()

    def memories(self, profile: str, ids: Sequence[str]) -> dict[str, Memory]:
        """The memories of ``profile`` among ``ids`` (absent ones are left out), by id: what
        :meth:`Store.get_many` reads, in this snapshot."""
        if not ids:
            return {}
        return {r[0]: row_to_memory(r) for r in self._conn.execute(select_by_ids(len(ids)), (*ids, profile))}

    # -- the profile's counters (profile_revs, kept by triggers) --

    def revision(self, profile: str) -> tuple[int, int]:
        """The profile's change counter and reset counter (0, 0 when it has no row)."""
        row = self._conn.execute("SELECT rev, resets FROM profile_revs WHERE profile = ?", (profile,)).fetchone()
        return (row[0], row[1]) if row is not None else (0, 0)

    def totals(self, profile: str) -> tuple[int, int]:
        """The profile's active memories and their accesses in all."""
        row = self._conn.execute("SELECT active, accesses FROM profile_revs WHERE profile = ?", (profile,)).fetchone()
        return (row[0], row[1]) if row is not None else (0, 0)

    def others_active(self, profile: str) -> bool:
        """Whether another profile has an active memory."""
        return self._conn.execute("SELECT 1 FROM profile_revs WHERE profile <> ? AND active > 0 LIMIT 1",
                                  (profile,)).fetchone() is not None

    # -- the in-memory index's rows --

    def index_rows(self, profile: str, batch: int) -> Iterator[list[Row]]:
        """The profile's active rows (with ``processed_content``), ``batch`` at a time."""
        cur = self._conn.execute(_INDEX_ROW_SQL + " AND is_active = 1", (profile,))
        while True:
            rows = cur.fetchmany(batch)
            if not rows:
                return
            yield rows

    def changed(self, profile: str, since_rev: int) -> Iterator[Row]:
        """The profile's rows (active or not, with ``processed_content``) changed after ``since_rev``."""
        return self._conn.execute(_INDEX_ROW_SQL + " AND rev > ?", (profile, since_rev))

    def ids(self, profile: str) -> set[str]:
        """Every memory id of the profile."""
        return {mid for (mid,) in self._conn.execute("SELECT id FROM memories WHERE profile = ?", (profile,))}

    # -- the cold path's rows --

    def stale(self, profile: str) -> list[Row]:
        """The profile's active rows whose features are not derived yet (raw SQL writes)."""
        return self._conn.execute(_STALE_SQL, (profile,)).fetchall()

    def waiting(self, profile: str) -> list[Row]:
        """The profile's active rows not in the FTS5 index yet (waiting for their batch)."""
        return self._conn.execute(_WAITING_SQL, (profile,)).fetchall()

    def count(self, match: str) -> int:
        """How many documents of the FTS5 index an expression matches."""
        n: int = self._conn.execute(_COUNT_SQL, (match,)).fetchone()[0]
        return n

    def matching(self, match: str, profile: str) -> Iterator[Row]:
        """The profile's active, derived rows an FTS5 expression matches (the first 7 columns)."""
        return self._conn.execute(_HIT_SQL, (match, profile))

    def by_ids(self, profile: str, ids: Sequence[str]) -> Iterator[Row]:
        """The profile's active rows among ``ids``."""
        marks = ", ".join("?" for _ in ids)
        return self._conn.execute(_ROW_SQL + f" AND is_active = 1 AND id IN ({marks})", (profile, *ids))

    def preferences(self, profile: str) -> Iterator[Row]:
        """The profile's active preferences."""
        return self._conn.execute(_ROW_SQL + " AND is_active = 1 AND category = 'preference'", (profile,))

    def by_anchor(self, profile: str) -> Iterator[Row]:
        """The profile's active rows by anchor (the later of createdAt and lastAccessedAt), newest first."""
        conn = self._conn
        return heapq.merge(conn.execute(_WALK_X_NEW_SQL, (profile,)), conn.execute(_WALK_X_SEEN_SQL, (profile,)),
                           key=_neg_anchor)

    def by_count(self, profile: str) -> Iterator[Row]:
        """The profile's active rows by access count, highest first."""
        conn = self._conn
        return chain(conn.execute(_WALK_Y_USED_SQL, (profile,)), conn.execute(_WALK_Y_REST_SQL, (profile,)))

    def by_hint(self, match: str, profile: str, weights: Iterable[float], now_us: int,
                cap: int | None) -> Iterator[Row]:
        """The profile's active rows an FTS5 expression matches (the first 7 columns and the hint),
        by the score SQLite computes for them, best first, at most ``cap``: ``weights`` are the
        formula's (recency, usage, topic × the class's topic)."""
        wr, wu, wt = weights
        sql = _CLASS_SQL if cap is None else f"{_CLASS_SQL} LIMIT {int(cap)}"
        return self._conn.execute(sql, (wr, now_us, wu, wt, match, profile))

    def has_math(self) -> bool:
        """Whether SQLite has its math functions (``by_hint`` needs them)."""
        try:
            self._conn.execute("SELECT pow(0.5, 1.0), log10(10.0)").fetchone()
            return True
        except sqlite3.OperationalError:
            return False


__all__ = ["ROW_COLUMNS", "RecallReads", "Row"]
