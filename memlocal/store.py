"""The local SQLite index: one file per host, shared safely by several processes.

Decisions:
- WAL journal with ``synchronous=FULL``: a commit is fsynced before ``save`` returns, and readers
  never block the writer.
- The connection runs in autocommit mode and every write is an explicit ``BEGIN IMMEDIATE``
  transaction, so a writer takes the lock up front (no deadlock-prone lock upgrades) and waits
  ``busy_timeout`` (``store.busy_timeout_s``) for other processes; past that the write fails
  with one line saying so.
- sqlite-utils creates the schema and the FTS5 index with its sync triggers; the hot paths are
  plain SQL on the same connection.
- Timestamps are integer microseconds since the epoch (exact round trip, cheap ordering);
  ``NULL`` ``last_accessed_us`` means never accessed (Go's zero time in JSON).
- Schema changes are numbered migrations recorded in ``PRAGMA user_version``.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Final, Iterator, Sequence

from .errors import NotFoundError, StoreError
from .hygiene import near_key, text_key
from .model import Memory, from_us, to_us, utcnow  # noqa: F401 (re-exported: the store's time format)

if TYPE_CHECKING:
    # Imported only to migrate (and by ``Store.db``): opening an up-to-date database, which a
    # one-shot ``memlocal recall`` does, never pays for sqlite_utils and its plugin scan.
    import sqlite_utils

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
_SELECT_DELTA = "SELECT " + ", ".join(MEMORY_COLUMNS) + ", access_delta FROM memories"
# What a memory's content is made of, as stored: everything but access metadata and what is
# derived from the text (keys, features, rev). ``content_signature`` hashes exactly these.
SIGNATURE_COLUMNS: Final = ("id", "profile", "raw_input", "processed_content", "summary", "category", "source",
                            "confidence", "created_us", "is_active", "version", "extra")
_ACTIVE_AT: Final = SIGNATURE_COLUMNS.index("is_active")


def _signature(values: Sequence[Any]) -> str:
    # repr of str, int, float and None is exact and stable; surrogatepass: never fails.
    return hashlib.blake2b(repr(tuple(values)).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def content_signature(m: Memory) -> str:
    """A fingerprint of ``m``'s stored content columns (``SIGNATURE_COLUMNS``), equal to what
    :meth:`Store.content_signatures` computes from its row once stored. Two rows with the same
    signature have the same content, so the same content hash."""
    # The values memory_to_row writes for these columns (a REAL column reads back as a float).
    return _signature((m.id, m.profile_name, m.raw_input, m.processed_content, m.summary, m.category, m.source,
                       float(m.confidence), to_us(m.created_at), int(m.is_active), m.version, extra_json(m)))


# What a pull replaces when the bucket's content wins (access metadata is merged, not replaced).
_CONTENT_COLUMNS = ("raw_input", "processed_content", "summary", "category", "source", "confidence",
                    "created_us", "is_active", "version", "extra", "text_key", "raw_key", "near_key")


def _scope(profiles: Sequence[str] | None) -> tuple[str, list[Any]]:
    """A ``WHERE profile IN (...)`` clause for ``profiles`` (``None``: every profile)."""
    if profiles is None:
        return "", []
    return f" WHERE profile IN ({', '.join('?' for _ in profiles)})", list(profiles)


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
        created_at=from_us(created_us),  # type: ignore[arg-type]
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


def _id_batches(ids: Sequence[str]) -> Iterator[builtins.list[str]]:
    """``ids`` in lists short enough for one ``IN (...)`` (SQLite's default limit is 999 variables)."""
    for i in range(0, len(ids), 500):
        yield list(ids[i:i + 500])


_OUTBOX_UPSERT: Final = ("INSERT INTO sync_outbox (id, profile, op, queued_us) VALUES (?, ?, ?, ?)"
                         " ON CONFLICT(id) DO UPDATE SET profile = excluded.profile, op = excluded.op,"
                         " queued_us = excluded.queued_us")


def _record_outbox(c: sqlite3.Connection, memory_id: str, profile: str, op: str) -> None:
    """The change log entry of a save (``put``) or deletion (``delete``); the latest op wins."""
    c.execute(_OUTBOX_UPSERT, (memory_id, profile, op, to_us(utcnow())))


# An automation note as the store keeps it: its text and updatedAt in µs.
NoteState = tuple[str, int]


def _record_note_outbox(c: sqlite3.Connection, automation_id: str, op: str) -> None:
    """The change log entry of a note written (``put``) or cleared (``delete``); the latest wins."""
    c.execute(
        "INSERT INTO automation_outbox (automation_id, op, queued_us) VALUES (?, ?, ?)"
        " ON CONFLICT(automation_id) DO UPDATE SET op = excluded.op, queued_us = excluded.queued_us",
        (automation_id, op, to_us(utcnow())),
    )


# --- the persisted features (the recall index's tokens; memlocal.features) ---------------------

# What the store writes for a memory: its columns plus its derived features.
WRITE_COLUMNS = MEMORY_COLUMNS + ("features",)
# A memory pulled from the bucket, inserted with no local access bumps (``apply_remote``).
_INSERT_PULLED = (f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}, access_delta)"
                  f" VALUES ({', '.join('?' for _ in range(len(WRITE_COLUMNS) + 1))})")


def write_row(m: Memory) -> tuple[Any, ...]:
    """``memory_to_row(m)`` plus the memory's features (for an INSERT of ``WRITE_COLUMNS``)."""
    from .features import features_of

    return (*memory_to_row(m), features_of(m.processed_content, m.summary))


def derive_features(conn: sqlite3.Connection, profile: str | None = None) -> int:
    """Derive the features of every memory (of ``profile``) that has none yet; inside the
    caller's write transaction. Returns how many rows were derived."""
    from .features import features_of

    sql = "SELECT rowid, processed_content, summary FROM memories WHERE features IS NULL"
    rows = conn.execute(sql + (" AND profile = ?" if profile is not None else ""),
                        (profile,) if profile is not None else ()).fetchall()
    conn.executemany("UPDATE memories SET features = ? WHERE rowid = ?",
                     [(features_of(pc, sm), rid) for rid, pc, sm in rows])
    if profile is None:
        _stamp_features(conn)
    return len(rows)


def derive_near_keys(conn: sqlite3.Connection) -> None:
    """Set every memory's :func:`memlocal.hygiene.near_key` (migration 9, and again whenever the
    tokenizer changes); inside the caller's write transaction."""
    rows = conn.execute("SELECT id, processed_content FROM memories").fetchall()
    conn.executemany("UPDATE memories SET near_key = ? WHERE id = ?", [(near_key(p), i) for i, p in rows])


def _stamp_features(conn: sqlite3.Connection) -> None:
    from .features import FEATURES_META_KEY, fingerprint

    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                 (FEATURES_META_KEY, fingerprint()))


# --- migrations ----------------------------------------------------------------------------------


def _migration_1(db: sqlite_utils.Database) -> None:
    db.table("memories").create(
        {
            "id": str,
            "profile": str,
            "raw_input": str,
            "processed_content": str,
            "summary": str,
            "category": str,
            "source": str,
            "confidence": float,
            "created_us": int,
            "last_accessed_us": int,
            "access_count": int,
            "staleness": float,
            "is_active": int,
            "version": int,
            "extra": str,
            # Access bumps not yet merged into the bucket's copy (sync adds them, then zeroes this).
            "access_delta": int,
        },
        pk="id",
        not_null={"profile", "raw_input", "processed_content", "summary", "category", "source",
                  "confidence", "created_us", "access_count", "staleness", "is_active", "version", "extra",
                  "access_delta"},
        defaults={"extra": "{}", "access_count": 0, "staleness": 0.0, "is_active": 1, "version": 1,
                  "access_delta": 0},
    )
    db.table("memories").create_index(["profile", "created_us", "id"], index_name="memories_profile_created")
    db.table("memories").enable_fts(["processed_content", "summary"], create_triggers=True, tokenize="porter unicode61")
    db.table("automation_notes").create({"automation_id": str, "note": str, "updated_us": int}, pk="automation_id")
    db.table("meta").create({"key": str, "value": str}, pk="key")


def _migration_2(db: sqlite_utils.Database) -> None:
    """Change tracking for the recall index (owned by ``memlocal.recall``; see docs/relevance.md).

    ``profile_revs`` holds, per profile, a counter bumped by every insert, scoring-relevant update
    and delete of its memories (``resets`` counts deletions and moves out), and each memory row
    carries the ``rev`` of its last change. A process that caches a profile's recall index asks
    one indexed row whether anything changed and then reads only the rows with a newer ``rev``;
    triggers keep this true for every writer (other processes, the sync, the sqlite3 shell).
    The FTS update trigger is narrowed to the indexed text columns, so that an access bump no
    longer rewrites the full-text index.
    """
    c = db.conn
    c.execute("ALTER TABLE memories ADD COLUMN rev INTEGER NOT NULL DEFAULT 0")
    c.execute("CREATE INDEX memories_profile_rev ON memories (profile, rev)")
    c.execute(
        "CREATE TABLE profile_revs (profile TEXT PRIMARY KEY, rev INTEGER NOT NULL DEFAULT 0,"
        " resets INTEGER NOT NULL DEFAULT 0)"
    )
    c.execute("INSERT INTO profile_revs (profile) SELECT DISTINCT profile FROM memories")
    # Not "INSERT OR IGNORE": inside a trigger the outer statement's conflict policy wins, and
    # an upsert's is ABORT. This form cannot conflict.
    bump = (
        "INSERT INTO profile_revs (profile) SELECT NEW.profile"
        " WHERE NOT EXISTS (SELECT 1 FROM profile_revs WHERE profile = NEW.profile);"
        " UPDATE profile_revs SET rev = rev + 1 WHERE profile = NEW.profile;"
        " UPDATE memories SET rev = (SELECT rev FROM profile_revs WHERE profile = NEW.profile)"
        " WHERE id = NEW.id;"
    )
    c.execute(f"CREATE TRIGGER memories_rev_ai AFTER INSERT ON memories BEGIN {bump} END")
    # Only columns that change a score, a rendering or membership; never rev itself.
    c.execute(
        "CREATE TRIGGER memories_rev_au AFTER UPDATE OF profile, processed_content, summary, category,"
        " confidence, created_us, last_accessed_us, access_count, is_active ON memories BEGIN"
        " UPDATE profile_revs SET rev = rev + 1, resets = resets + 1"
        " WHERE profile = OLD.profile AND OLD.profile <> NEW.profile;"
        f" {bump} END"
    )
    c.execute(
        "CREATE TRIGGER memories_rev_ad AFTER DELETE ON memories BEGIN"
        " UPDATE profile_revs SET rev = rev + 1, resets = resets + 1 WHERE profile = OLD.profile; END"
    )
    c.execute("DROP TRIGGER IF EXISTS memories_au")
    c.execute(
        "CREATE TRIGGER memories_au AFTER UPDATE OF processed_content, summary ON memories BEGIN"
        " INSERT INTO memories_fts (memories_fts, rowid, processed_content, summary)"
        " VALUES ('delete', old.rowid, old.processed_content, old.summary);"
        " INSERT INTO memories_fts (rowid, processed_content, summary)"
        " VALUES (new.rowid, new.processed_content, new.summary); END"
    )


def _migration_3(db: sqlite_utils.Database) -> None:
    """The store's change log: ``sync_outbox``, the durable queue of saves and deletions not yet
    known to be in the bucket, written by the store inside the transaction of each change.

    (The sync's own tables, ``sync_base`` and ``sync_skipped``, used to be created here too; the
    sync package now creates and migrates them itself. Databases made before keep them, and the
    sync's ``CREATE TABLE IF NOT EXISTS`` finds them in place.)
    """
    db.table("sync_outbox").create(
        {"id": str, "profile": str, "op": str, "queued_us": int},
        pk="id", not_null={"profile", "op", "queued_us"},
    )


def _migration_4(db: sqlite_utils.Database) -> None:
    """The persisted recall index (owned by ``memlocal.recall``; see docs/storage.md).

    - ``memories.features``: the formula's own tokens of the memory (its stemmed terms and its
      clusters, :mod:`memlocal.features`), written by the store in the same transaction as the
      memory; ``NULL`` means "not derived yet" (a row written by raw SQL, or whose text changed
      under a writer that does not derive them), found through a partial index and derived
      lazily by the next recall of that profile.
    - ``memory_features``: a contentless FTS5 table (``detail=none``) of the active memories'
      features plus a profile scope token, kept by triggers from that column. A fresh process
      finds a query's candidates and their document frequencies there, without tokenising the
      bank. It replaces the FTS5 index over the raw text, which nothing read.
    - ``profile_revs.active`` / ``.accesses``: per profile, the number of active memories and
      the sum of their accessCount (the IDF's N and the maturity), kept by triggers.

    Every existing memory's features are derived here (back-fill), stamped with
    ``features.fingerprint()`` in ``meta``.
    """
    from .features import FTS_TOKENIZE

    c = db.conn
    for name in ("memories_ai", "memories_ad", "memories_au"):
        c.execute(f"DROP TRIGGER IF EXISTS {name}")
    c.execute("DROP TABLE IF EXISTS memories_fts")
    c.execute("ALTER TABLE memories ADD COLUMN features TEXT")
    c.execute("CREATE INDEX memories_features_stale ON memories (profile) WHERE features IS NULL")
    # What is indexed, row by row: the FTS5 table reads its documents from here (external
    # content), and its own triggers forget exactly what they indexed, whatever order the
    # memories' triggers run in. Plain SQL keeps this table, so no write can desynchronise it.
    c.execute("CREATE TABLE memory_features_docs (rowid INTEGER PRIMARY KEY, features TEXT NOT NULL)")
    c.execute(
        "CREATE VIRTUAL TABLE memory_features USING fts5(features, content='memory_features_docs',"
        f" content_rowid='rowid', detail=none, columnsize=0, tokenize=\"{FTS_TOKENIZE}\")"
    )
    fts_add = "INSERT INTO memory_features (rowid, features) VALUES (NEW.rowid, NEW.features);"
    fts_drop = ("INSERT INTO memory_features (memory_features, rowid, features)"
                " VALUES ('delete', OLD.rowid, OLD.features);")
    c.execute(f"CREATE TRIGGER memory_features_docs_ai AFTER INSERT ON memory_features_docs BEGIN {fts_add} END")
    c.execute(f"CREATE TRIGGER memory_features_docs_ad AFTER DELETE ON memory_features_docs BEGIN {fts_drop} END")
    c.execute(f"CREATE TRIGGER memory_features_docs_au AFTER UPDATE ON memory_features_docs BEGIN {fts_drop}"
              f" {fts_add} END")
    # The document of an active memory with features: its profile's scope token, then its features.
    doc = "INSERT INTO memory_features_docs (rowid, features) SELECT NEW.rowid, '=' || hex(NEW.profile) || ' ' || NEW.features WHERE NEW.is_active = 1 AND NEW.features IS NOT NULL"
    c.execute(f"CREATE TRIGGER memories_features_ai AFTER INSERT ON memories BEGIN {doc}; END")
    c.execute("CREATE TRIGGER memories_features_ad AFTER DELETE ON memories BEGIN"
              " DELETE FROM memory_features_docs WHERE rowid = OLD.rowid; END")
    # When the text changed but the writer left the features as they were (a raw SQL update,
    # the sync's), they are stale: the row leaves the index and its features are cleared.
    text_changed = "(OLD.processed_content IS NOT NEW.processed_content OR OLD.summary IS NOT NEW.summary)"
    stale = f"{text_changed} AND NEW.features IS OLD.features"
    c.execute(
        "CREATE TRIGGER memories_features_au AFTER UPDATE OF profile, features, is_active, processed_content,"
        " summary ON memories WHEN OLD.profile IS NOT NEW.profile OR OLD.features IS NOT NEW.features"
        f" OR OLD.is_active IS NOT NEW.is_active OR {text_changed} BEGIN"
        " DELETE FROM memory_features_docs WHERE rowid = OLD.rowid;"
        f" {doc} AND NOT ({stale});"
        f" UPDATE memories SET features = NULL WHERE rowid = NEW.rowid AND NEW.features IS NOT NULL AND {stale};"
        " END"
    )
    c.execute("ALTER TABLE profile_revs ADD COLUMN active INTEGER NOT NULL DEFAULT 0")
    c.execute("ALTER TABLE profile_revs ADD COLUMN accesses INTEGER NOT NULL DEFAULT 0")
    c.execute("INSERT INTO profile_revs (profile) SELECT DISTINCT profile FROM memories"
              " WHERE profile NOT IN (SELECT profile FROM profile_revs)")
    c.execute(
        "UPDATE profile_revs SET active = (SELECT count(*) FROM memories m WHERE m.profile = profile_revs.profile"
        " AND m.is_active = 1), accesses = (SELECT coalesce(sum(access_count), 0) FROM memories m"
        " WHERE m.profile = profile_revs.profile AND m.is_active = 1)"
    )
    ensure = ("INSERT INTO profile_revs (profile) SELECT NEW.profile"
              " WHERE NOT EXISTS (SELECT 1 FROM profile_revs WHERE profile = NEW.profile);")
    plus = ("UPDATE profile_revs SET active = active + 1, accesses = accesses + NEW.access_count"
            " WHERE profile = NEW.profile AND NEW.is_active = 1;")
    minus = ("UPDATE profile_revs SET active = active - 1, accesses = accesses - OLD.access_count"
             " WHERE profile = OLD.profile AND OLD.is_active = 1;")
    c.execute(f"CREATE TRIGGER memories_counts_ai AFTER INSERT ON memories BEGIN {ensure} {plus} END")
    c.execute(f"CREATE TRIGGER memories_counts_ad AFTER DELETE ON memories BEGIN {minus} END")
    c.execute(f"CREATE TRIGGER memories_counts_au AFTER UPDATE OF profile, is_active, access_count ON memories"
              f" BEGIN {minus} {ensure} {plus} END")
    derive_features(c)


def _migration_5(db: sqlite_utils.Database) -> None:
    """Vectors of the optional semantic signal (owned by ``memlocal.semantic``; docs/relevance.md).

    ``memory_vectors``: one unit vector per memory (float32 bytes) and the model that made it.
    Written on save when ``semantic.enabled``, back-filled lazily otherwise; a trigger drops a
    memory's vector when its text changes, and deleting the memory deletes it.
    """
    c = db.conn
    c.execute("CREATE TABLE memory_vectors (id TEXT PRIMARY KEY, model TEXT NOT NULL, vector BLOB NOT NULL)")
    c.execute("CREATE TRIGGER memories_vectors_ad AFTER DELETE ON memories BEGIN"
              " DELETE FROM memory_vectors WHERE id = OLD.id; END")
    c.execute("CREATE TRIGGER memories_vectors_au AFTER UPDATE OF id, processed_content ON memories"
              " WHEN OLD.id IS NOT NEW.id OR OLD.processed_content IS NOT NEW.processed_content BEGIN"
              " DELETE FROM memory_vectors WHERE id = OLD.id; END")


def _migration_6(db: sqlite_utils.Database) -> None:
    """The injection audit trail (owned by ``memlocal.audit``; see docs/hygiene.md).

    One ``injections`` row per rendered memory block: when, which profile, the block's size and
    a hash of the query (never its text); ``injection_memories`` holds which memories were in it
    and in which tier, indexed by memory id so "which runs saw this memory?" is one lookup. Rows
    are capped and expire (``audit.max_rows``, ``audit.retention_days``); the memories of a
    pruned row go with it (``ON DELETE CASCADE``; the store runs with foreign keys on).
    """
    c = db.conn
    c.execute(
        "CREATE TABLE injections (id INTEGER PRIMARY KEY AUTOINCREMENT, at_us INTEGER NOT NULL,"
        " profile TEXT NOT NULL, query_hash TEXT NOT NULL, chars INTEGER NOT NULL)"
    )
    c.execute("CREATE INDEX injections_profile ON injections (profile, id)")
    c.execute("CREATE INDEX injections_at ON injections (at_us)")
    c.execute(
        "CREATE TABLE injection_memories (injection_id INTEGER NOT NULL REFERENCES injections (id)"
        " ON DELETE CASCADE, memory_id TEXT NOT NULL, tier TEXT NOT NULL, rank INTEGER NOT NULL,"
        " PRIMARY KEY (injection_id, memory_id)) WITHOUT ROWID"
    )
    c.execute("CREATE INDEX injection_memories_memory ON injection_memories (memory_id, injection_id)")


def _migration_7(db: sqlite_utils.Database) -> None:
    """Exact-duplicate keys (``memlocal.hygiene``, docs/hygiene.md): ``text_key`` is the hash of
    the normalised processedContent, ``raw_key`` that of the rawInput when it differs (else NULL),
    each indexed per profile so a save finds an active duplicate with one lookup."""
    c = db.conn
    c.execute("ALTER TABLE memories ADD COLUMN text_key TEXT")
    c.execute("ALTER TABLE memories ADD COLUMN raw_key TEXT")
    rows = c.execute("SELECT id, raw_input, processed_content FROM memories").fetchall()
    c.executemany(
        "UPDATE memories SET text_key = ?, raw_key = ? WHERE id = ?",
        [(text_key(p), text_key(r) if r != p else None, i) for i, r, p in rows],
    )
    c.execute("CREATE INDEX memories_text_key ON memories (profile, text_key)")
    c.execute("CREATE INDEX memories_raw_key ON memories (profile, raw_key) WHERE raw_key IS NOT NULL")


def _migration_8(db: sqlite_utils.Database) -> None:
    """The change log of automation notes: ``automation_outbox``, one row per note written
    (``put``) or cleared (``delete``) here and not yet known to be in the bucket, recorded by the
    store inside the transaction of the change (as ``sync_outbox`` for memories). Every note
    that exists already is queued, so a host upgraded with notes pushes them (docs/sync.md).
    """
    c = db.conn
    c.execute("CREATE TABLE automation_outbox (automation_id TEXT PRIMARY KEY, op TEXT NOT NULL,"
              " queued_us INTEGER NOT NULL)")
    c.execute("INSERT INTO automation_outbox (automation_id, op, queued_us)"
              " SELECT automation_id, 'put', updated_us FROM automation_notes")


def _migration_9(db: sqlite_utils.Database) -> None:
    """Near-duplicate keys (``memlocal.hygiene.near_key``): at the default threshold a save
    finds its near-duplicates with one index lookup instead of a full-text query whose cost
    grew with the profile."""
    c = db.conn
    c.execute("ALTER TABLE memories ADD COLUMN near_key TEXT")
    derive_near_keys(c)
    c.execute("CREATE INDEX memories_near_key ON memories (profile, near_key) WHERE near_key IS NOT NULL")


# Numbered schema migrations, applied in order inside one transaction each.
MIGRATIONS: dict[int, Callable[[sqlite_utils.Database], None]] = {
    1: _migration_1,
    2: _migration_2,
    3: _migration_3,
    4: _migration_4,
    5: _migration_5,
    6: _migration_6,
    7: _migration_7,
    8: _migration_8,
    9: _migration_9,
}
SCHEMA_VERSION = max(MIGRATIONS)


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


class Store:
    """The SQLite file: schema, durable writes and the queries the bank needs.

    One connection per ``Store``; a re-entrant lock makes it usable from the background thread
    that marks memories accessed.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                str(self.path),
                timeout=busy_timeout_s,
                isolation_level=None,  # autocommit: transactions are explicit BEGIN IMMEDIATE
                check_same_thread=False,
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from None
        self.conn = conn
        try:
            self._configure()
            self._migrate()
            self._check_features()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"cannot use database {self.path}: {exc}") from None

    @cached_property
    def db(self) -> "sqlite_utils.Database":
        """A sqlite_utils view of the connection (made on first use: importing sqlite_utils
        loads its plugins, which a fresh process answering one recall should not pay for)."""
        import sqlite_utils

        return sqlite_utils.Database(self.conn)

    def _configure(self) -> None:
        c = self.conn
        c.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.DatabaseError(f"could not switch to WAL journal (got {mode})")
        # FULL: in WAL mode the commit fsyncs the log, so an acknowledged save survives power loss.
        c.execute("PRAGMA synchronous = FULL")
        c.execute("PRAGMA foreign_keys = ON")

    def _migrate(self) -> None:
        current = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if current > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {current} is newer than this memlocal ({SCHEMA_VERSION}); upgrade memlocal"
            )
        if current == SCHEMA_VERSION:
            return
        db = self.db
        for version in sorted(v for v in MIGRATIONS if v > current):
            with self.transaction():
                # Another process may have migrated while we waited for the write lock.
                now = self.conn.execute("PRAGMA user_version").fetchone()[0]
                if now >= version:
                    continue
                MIGRATIONS[version](db)
                self.conn.execute(f"PRAGMA user_version = {version}")

    def _check_features(self) -> None:
        """Re-derive every memory's features and near-duplicate key when they were made by another
        tokenizer (the stamp in ``meta`` differs from this code's fingerprint): once, on open."""
        from .features import FEATURES_META_KEY, fingerprint

        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (FEATURES_META_KEY,)).fetchone()
        if row is not None and row[0] == fingerprint():
            return
        with self.transaction() as c:
            row = c.execute("SELECT value FROM meta WHERE key = ?", (FEATURES_META_KEY,)).fetchone()
            if row is not None and row[0] == fingerprint():
                return  # another process re-derived them while we waited for the lock
            # Clearing first lets the triggers remove each old document with the values it was
            # indexed with; deriving then indexes the new ones.
            c.execute("UPDATE memories SET features = NULL WHERE features IS NOT NULL")
            derive_features(c)
            derive_near_keys(c)  # made of the same terms

    def derive_stale_features(self, profile: str) -> int:
        """Derive the features that ``profile``'s memories lack (rows written without them);
        best effort: returns how many were derived, 0 when the database cannot be written now."""
        with self._lock:
            if not self.conn.execute("SELECT 1 FROM memories WHERE profile = ? AND features IS NULL LIMIT 1",
                                     (profile,)).fetchone():
                return 0
            try:
                with self.transaction() as c:
                    return derive_features(c, profile)
            except (sqlite3.Error, StoreError):
                return 0  # read-only file, or locked for too long: the query derives them in memory

    def close(self) -> None:
        with self._lock:
            try:
                self.conn.close()
            except sqlite3.Error:
                pass

    # --- transactions -------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """An immediate write transaction. SQLite's ``busy_timeout`` is the one wait for another
        process's lock; past it the write fails with ``StoreError`` (no retry loop on top, which
        would make a writer wait a multiple of the setting).

        ``durable=False`` commits without the fsync (``synchronous=NORMAL`` for this one
        transaction): in WAL mode the database stays consistent and every reader sees the commit
        at once, but a power cut may undo it. Only for best-effort writes (access bumps); the next
        durable commit fsyncs the log, these frames included."""
        with self._lock:
            # 1 is NORMAL; a connection already on NORMAL (the background marker's) is left as is.
            relax = not durable and self.conn.execute("PRAGMA synchronous").fetchone()[0] != 1
            if relax:
                self.conn.execute("PRAGMA synchronous = NORMAL")
            try:
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) and "busy" not in str(exc):
                        raise
                    raise StoreError(
                        f"database {self.path} stayed locked by another process for store.busy_timeout_s "
                        f"({self.busy_timeout_s:g} s)"
                    ) from None
                try:
                    yield self.conn
                except BaseException:
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                    raise
                else:
                    self.conn.execute("COMMIT")
            finally:
                if relax:
                    self.conn.execute("PRAGMA synchronous = FULL")

    def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same committed state (WAL snapshot)."""
        with self._lock:
            if self.conn.in_transaction:  # already inside a transaction of this connection
                yield self.conn
                return
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                if self.conn.in_transaction:
                    self.conn.execute("COMMIT")

    # --- memories -----------------------------------------------------------------------------

    def insert(self, memory: Memory) -> None:
        """Insert a new memory durably, with its outbox entry in the same transaction;
        ``IdTakenError`` if its id exists (in any profile)."""
        placeholders = ", ".join("?" for _ in WRITE_COLUMNS)
        row = write_row(memory)  # tokenised before the write lock is taken
        try:
            with self.transaction() as c:
                c.execute(f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}) VALUES ({placeholders})", row)
                _record_outbox(c, memory.id, memory.profile_name, "put")
        except sqlite3.IntegrityError as exc:
            if "memories.id" in str(exc) or "UNIQUE" in str(exc):
                raise IdTakenError(f"id {memory.id} already exists") from None
            raise

    def import_batch(self, memories: Sequence[Memory]) -> list[str]:
        """Insert many memories in one durable transaction, never overwriting.

        Returns one outcome per memory: ``imported``, ``unchanged`` (the id is already in that
        profile) or a rejection reason (the id belongs to another profile).
        """
        placeholders = ", ".join("?" for _ in WRITE_COLUMNS)
        insert = f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}) VALUES ({placeholders})"
        outcomes: list[str] = []
        rows = [write_row(m) for m in memories]  # tokenised before the write lock is taken
        with self.transaction() as c:
            owner: dict[str, str] = {}  # id -> profile of the ids already here
            for part in _id_batches([m.id for m in memories]):
                owner.update(c.execute(f"SELECT id, profile FROM memories WHERE id IN ({', '.join('?' * len(part))})",
                                       part).fetchall())
            new: list[tuple[Any, ...]] = []
            for memory, write in zip(memories, rows):
                profile = owner.get(memory.id)
                if profile is None:
                    owner[memory.id] = memory.profile_name  # a repeated id later in the batch is "unchanged"
                    new.append(write)
                    outcomes.append("imported")
                elif profile == memory.profile_name:
                    outcomes.append("unchanged")
                else:
                    outcomes.append(f"id {memory.id} already belongs to a memory of profile {profile}")
            c.executemany(insert, new)
            queued = to_us(utcnow())
            c.executemany(_OUTBOX_UPSERT, [(w[0], w[1], "put", queued) for w in new])
        return outcomes

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

    def get_many(
        self, profile: str, ids: Sequence[str], *, conn: sqlite3.Connection | None = None
    ) -> dict[str, Memory]:
        """The memories of ``profile`` among ``ids`` (absent ones are left out), by id."""
        if not ids:
            return {}
        # "+profile": look rows up by primary key, not by scanning the profile index
        sql = f"{_SELECT} WHERE id IN ({', '.join('?' for _ in ids)}) AND +profile = ?"
        if conn is not None:
            rows = conn.execute(sql, (*ids, profile)).fetchall()
        else:
            rows = self.read(sql, (*ids, profile))
        return {r[0]: row_to_memory(r) for r in rows}

    def exists(self, memory_id: str) -> bool:
        return bool(self.read("SELECT 1 FROM memories WHERE id = ?", (memory_id,)))

    def list(self, profile: str, limit: int, offset: int, *, category: str | None = None,
             active_only: bool = False) -> Page:
        clause, params = ("profile = ?", [profile]) if category is None else (
            "profile = ? AND category = ?", [profile, category])
        if active_only:
            clause += " AND is_active = 1"
        with self._lock:
            total = self.conn.execute(f"SELECT count(*) FROM memories WHERE {clause}", params).fetchone()[0]
            rows = self.conn.execute(
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
        with self._lock:
            total = self.conn.execute(f"SELECT count(*) FROM memories{clause}", params).fetchone()[0]
            rows = self.conn.execute(
                f"{_SELECT}{clause} ORDER BY created_us DESC, id DESC LIMIT ? OFFSET ?", [*params, limit, offset]
            ).fetchall()
        return Page([row_to_memory(r) for r in rows], total, limit, offset)

    def iter_all(self) -> builtins.list[Memory]:
        """Every memory, by profile name and newest first within a profile."""
        return [row_to_memory(r) for r in self.read(f"{_SELECT} ORDER BY profile, created_us DESC, id DESC")]

    def iter_profile(self, profile: str, *, active_only: bool = False) -> builtins.list[Memory]:
        sql = f"{_SELECT} WHERE profile = ?" + (" AND is_active = 1" if active_only else "")
        return [row_to_memory(r) for r in self.read(sql, (profile,))]

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
        from .model import compute_staleness

        now_us = to_us(now)
        updated = 0
        with self.transaction(durable=False) as c:
            for mid in dict.fromkeys(ids):
                row = c.execute(
                    "SELECT category, confidence, access_count, created_us, last_accessed_us FROM memories"
                    " WHERE id = ? AND profile = ?",
                    (mid, profile),
                ).fetchone()
                if row is None:
                    continue  # deleted meanwhile: nothing to bump
                category, confidence, count, created_us, last_us = row
                last = max(last_us or 0, now_us or 0)
                staleness = compute_staleness(
                    category=category,
                    confidence=confidence,
                    access_count=count + 1,
                    created_at=from_us(created_us),  # type: ignore[arg-type]
                    last_accessed_at=from_us(last),
                    now=now,
                )
                c.execute(
                    "UPDATE memories SET access_count = access_count + 1, access_delta = access_delta + 1,"
                    " last_accessed_us = ?, staleness = ? WHERE id = ?",
                    (last, staleness, mid),
                )
                updated += 1
        return updated

    # --- hygiene: duplicates and supersession (memlocal.hygiene) -------------------------------

    def find_by_keys(self, profile: str, keys: Sequence[str]) -> builtins.list[Memory]:
        """Active memories of ``profile`` whose processedContent or rawInput has one of these
        :func:`memlocal.hygiene.text_key` values, oldest first (callers confirm on the text)."""
        if not keys:
            return []
        marks = ", ".join("?" for _ in keys)
        # Two index lookups (memories_text_key, memories_raw_key): with an OR, SQLite scanned the
        # whole profile, which made every save O(profile size).
        rows = self.read(
            f"{_SELECT} WHERE rowid IN (SELECT rowid FROM memories WHERE profile = ? AND text_key IN ({marks})"
            f" UNION SELECT rowid FROM memories WHERE profile = ? AND raw_key IN ({marks}))"
            " AND is_active = 1 ORDER BY created_us, id",
            (profile, *keys, profile, *keys),
        )
        return [row_to_memory(r) for r in rows]

    def find_by_near_key(self, profile: str, key: str) -> builtins.list[Memory]:
        """Active memories of ``profile`` with this :func:`memlocal.hygiene.near_key`, oldest
        first (callers confirm with the rule itself)."""
        rows = self.read(f"{_SELECT} WHERE profile = ? AND near_key = ? AND is_active = 1 ORDER BY created_us, id",
                         (profile, key))
        return [row_to_memory(r) for r in rows]

    def similar(self, profile: str, terms: Sequence[str], limit: int) -> builtins.list[Memory]:
        """Up to ``limit`` active memories of ``profile`` that share the most (rarest) of
        ``terms`` (the formula's stems, :func:`memlocal.text.terms`), best first: bm25 over the
        recall index ``memory_features`` (migration 4), scoped by the profile's token."""
        from .features import scope_token, term_token

        if not terms or limit <= 0:
            return []
        match = f"{scope_token(profile)} AND ({' OR '.join(term_token(t) for t in dict.fromkeys(terms))})"
        cols = ", ".join(f"m.{c}" for c in MEMORY_COLUMNS)
        try:
            rows = self.read(
                f"SELECT {cols} FROM memory_features f JOIN memories m ON m.rowid = f.rowid"
                " WHERE memory_features MATCH ? AND m.profile = ? AND m.is_active = 1"
                " ORDER BY f.rank LIMIT ?",
                (match, profile, limit),
            )
        except sqlite3.OperationalError:  # a query FTS5 cannot parse: no candidates, no merge
            return []
        return [row_to_memory(r) for r in rows]

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
        from .errors import ValidationError
        from .hygiene import SUPERSEDED_BY, SUPERSEDES

        placeholders = ", ".join("?" for _ in MEMORY_COLUMNS)
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
                    c.execute(f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS)}) VALUES ({placeholders})",
                              memory_to_row(new))
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

    def profiles(self) -> dict[str, int]:
        """Memory count per profile, largest first."""
        rows = self.read("SELECT profile, count(*) FROM memories GROUP BY profile ORDER BY count(*) DESC, profile")
        return {p: n for p, n in rows}

    def profile_activity(self) -> builtins.list[tuple[str, int, int]]:
        """``(profile, memory count, last activity in µs)`` per profile, newest activity first;
        a profile's activity is its latest createdAt or lastAccessedAt."""
        rows = self.read(
            "SELECT profile, count(*), max(max(created_us, coalesce(last_accessed_us, 0))) AS act"
            " FROM memories GROUP BY profile ORDER BY act DESC, profile"
        )
        return [(p, n, act) for p, n, act in rows]

    def count(self) -> int:
        return self.read("SELECT count(*) FROM memories")[0][0]

    # --- the change log and synced changes (the sync's narrow interface) -----------------------
    #
    # The sync package never writes ``memories`` itself: it reads the change log (the outbox and
    # each row's ``access_delta``) and applies what it learnt from the bucket through these
    # methods. Those that take ``conn`` run inside the caller's ``transaction()``, so that the
    # sync's own tables (its base) commit in the same transaction as the change.

    def outbox(self, profiles: Sequence[str] | None = None, op: str | None = None) -> dict[str, tuple[str, str]]:
        """The change log: ``{id: (profile, op)}`` with ``op`` ``put`` or ``delete``."""
        where, params = _scope(profiles)
        if op is not None:
            where = (where + " AND" if where else " WHERE") + " op = ?"
            params.append(op)
        return {r[0]: (r[1], r[2]) for r in self.read(f"SELECT id, profile, op FROM sync_outbox{where}", params)}

    def changed_ids(self) -> set[str]:
        """Ids with a change the bucket may not have: queued in the outbox, or with unmerged
        access bumps (what a sync pass that follows the change record reconciles)."""
        rows = self.read("SELECT id FROM sync_outbox UNION SELECT id FROM memories WHERE access_delta > 0")
        return {r[0] for r in rows}

    def access_deltas(self, profiles: Sequence[str] | None = None) -> builtins.list[tuple[str, str, int]]:
        """``(id, profile, access_delta)`` of every memory: the cheap local side of a pull."""
        where, params = _scope(profiles)
        return [(r[0], r[1], int(r[2])) for r in self.read(f"SELECT id, profile, access_delta FROM memories{where}", params)]

    def memories_with_deltas(self, profiles: Sequence[str] | None = None,
                             ids: Sequence[str] | None = None) -> builtins.list[tuple[Memory, int]]:
        """Every memory (of ``profiles``; among ``ids``) with its access bumps not yet merged
        into the bucket."""
        where, params = _scope(profiles)
        if ids is None:
            rows = self.read(f"{_SELECT_DELTA}{where}", params)
        else:
            rows = []
            for part in _id_batches(ids):
                cond = f"id IN ({', '.join('?' * len(part))})"
                rows += self.read(f"{_SELECT_DELTA}{where}{' AND ' if where else ' WHERE '}{cond}", [*params, *part])
        return [(row_to_memory(r), int(r[-1])) for r in rows]

    def content_signatures(self, profiles: Sequence[str] | None = None) -> builtins.list[tuple[str, str, int, bool, str]]:
        """``(id, profile, access_delta, is_active, signature)`` of every memory (of
        ``profiles``): :func:`content_signature` of each row, read without building memories. The
        sync pairs a signature with the content hash it computed for it, so that an unchanged
        memory is not hashed again on every pass."""
        where, params = _scope(profiles)
        cols = ", ".join(SIGNATURE_COLUMNS)
        rows = self.read(f"SELECT {cols}, access_delta FROM memories{where}", params)
        return [(r[0], r[1], int(r[-1]), bool(r[_ACTIVE_AT]), _signature(r[:-1])) for r in rows]

    def memory_with_delta(self, memory_id: str) -> tuple[Memory, int] | None:
        rows = self.read(f"{_SELECT_DELTA} WHERE id = ?", (memory_id,))
        return (row_to_memory(rows[0]), int(rows[0][-1])) if rows else None

    def apply_remote(self, conn: sqlite3.Connection, memory: Memory, *, content: str = "remote",
                     sent_delta: int = 0, set_staleness: bool = True,
                     row: tuple[Any, ...] | None = None) -> bool:
        """Fold a memory the bucket holds into the local row, inside ``conn``'s transaction.

        ``content``: ``remote`` takes the memory's content (inserting it if absent, unless its
        deletion here is still queued); ``local`` keeps the local content (our own push). The
        access count becomes the memory's plus whatever local delta is still unmerged
        (``sent_delta`` of it went out with the write that produced ``memory``); lastAccessedAt
        the later of both. The put is cleared from the outbox. ``False`` (nothing changed) if
        the id belongs to a memory of another profile here. ``row``: ``write_row(memory)``, when
        the caller computed it already (off the write lock).
        """
        m = memory
        here = conn.execute("SELECT access_delta, last_accessed_us, profile FROM memories WHERE id = ?", (m.id,)).fetchone()
        if here is None:
            deleted_here = conn.execute("SELECT 1 FROM sync_outbox WHERE id = ? AND op = 'delete'", (m.id,)).fetchone()
            if content == "remote" and not deleted_here:
                conn.execute(_INSERT_PULLED, (*(row or write_row(m)), 0))
        elif here[2] != m.profile_name:
            return False  # never touch a memory of another profile
        else:
            delta, last_us = int(here[0]), here[1]
            remaining = max(0, delta - sent_delta)
            remote_last = to_us(m.last_accessed_at)
            last = max(last_us or 0, remote_last or 0) or None
            sets = ["access_count = ?", "access_delta = ?", "last_accessed_us = ?"]
            params: builtins.list[Any] = [m.access_count + remaining, remaining, last]
            if set_staleness:
                sets.append("staleness = ?")
                params.append(m.staleness_score)
            if content == "remote":
                full = dict(zip(WRITE_COLUMNS, row or write_row(m)))
                for col in (*_CONTENT_COLUMNS, "features"):
                    sets.append(f"{col} = ?")
                    params.append(full[col])
            conn.execute(f"UPDATE memories SET {', '.join(sets)} WHERE id = ?", (*params, m.id))
        conn.execute("DELETE FROM sync_outbox WHERE id = ? AND op = 'put'", (m.id,))
        return True

    def insert_remote_absent(self, conn: sqlite3.Connection,
                             items: Sequence[tuple[Memory, tuple[Any, ...] | None]]) -> set[str]:
        """``apply_remote(conn, memory, content="remote", row=row)`` for each of ``items`` (distinct
        ids) whose id this database does not hold, in a few statements (a fresh host pulls
        thousands): each is inserted unless its deletion here is still queued, and its put is
        cleared from the outbox. Returns the ids it took; the others are left to ``apply_remote``."""
        ids = [m.id for m, _ in items]
        present: set[str] = set()
        deleted: set[str] = set()
        for part in _id_batches(ids):
            marks = ", ".join("?" * len(part))
            present.update(r[0] for r in conn.execute(f"SELECT id FROM memories WHERE id IN ({marks})", part))
            deleted.update(r[0] for r in conn.execute(
                f"SELECT id FROM sync_outbox WHERE op = 'delete' AND id IN ({marks})", part))
        absent = [(m, row) for m, row in items if m.id not in present]
        conn.executemany(_INSERT_PULLED, [(*(row or write_row(m)), 0) for m, row in absent if m.id not in deleted])
        conn.executemany("DELETE FROM sync_outbox WHERE id = ? AND op = 'put'", [(m.id,) for m, _ in absent])
        return {m.id for m, _ in absent}

    def delete_from_remote(self, conn: sqlite3.Connection, memory_id: str, profile: str) -> None:
        """Another host deleted the memory: delete it here, with any queued change of it."""
        conn.execute("DELETE FROM memories WHERE id = ? AND profile = ?", (memory_id, profile))
        conn.execute("DELETE FROM sync_outbox WHERE id = ?", (memory_id,))

    def clear_outbox(self, conn: sqlite3.Connection, memory_id: str, op: str | None = None,
                     *, only_if_absent: bool = False) -> None:
        """Drop the outbox entry of ``memory_id`` (of ``op`` only, if given; only when the memory
        is gone, with ``only_if_absent``): the bucket has the change."""
        sql = "DELETE FROM sync_outbox WHERE id = ?"
        params: builtins.list[Any] = [memory_id]
        if op is not None:
            sql += " AND op = ?"
            params.append(op)
        if only_if_absent:
            sql += " AND NOT EXISTS (SELECT 1 FROM memories WHERE id = ?)"
            params.append(memory_id)
        conn.execute(sql, params)

    def reid(self, conn: sqlite3.Connection, old_id: str, new_id: str) -> bool:
        """Move the memory ``old_id`` to ``new_id`` with its outbox entry; ``False`` if absent.

        No deletion is queued for ``old_id``: the bucket's object under it is another memory.
        """
        cols = ", ".join(("?" if col == "id" else col) for col in WRITE_COLUMNS)
        cur = conn.execute(f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}, access_delta)"
                           f" SELECT {cols}, access_delta FROM memories WHERE id = ?", (new_id, old_id))
        if cur.rowcount == 0:
            return False
        conn.execute("DELETE FROM memories WHERE id = ?", (old_id,))
        conn.execute("UPDATE sync_outbox SET id = ? WHERE id = ?", (new_id, old_id))
        return True

    # --- automation notes (memlocal.automation) and their change log ---------------------------
    #
    # A note is ``(text, updated_us)``. Writes record their change in ``automation_outbox`` in
    # the same transaction; the sync reads that log and applies what the bucket holds through the
    # conditional methods below, which change a note only if it is still what the sync saw, so a
    # note written here while a pass runs is never overwritten or deleted by that pass.

    def note_get(self, automation_id: str) -> NoteState | None:
        """The note of ``automation_id`` as ``(text, updated_us)``, or ``None``."""
        rows = self.read("SELECT note, updated_us FROM automation_notes WHERE automation_id = ?", (automation_id,))
        return (rows[0][0], rows[0][1]) if rows else None

    def notes(self) -> builtins.list[tuple[str, str, int]]:
        """Every note as ``(automation_id, text, updated_us)``, most recently written first."""
        rows = self.read("SELECT automation_id, note, updated_us FROM automation_notes"
                         " ORDER BY updated_us DESC, automation_id")
        return [(a, n, u) for a, n, u in rows]

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

    def note_outbox(self) -> dict[str, str]:
        """The notes' change log: ``{automation_id: op}`` with ``op`` ``put`` or ``delete``."""
        return {r[0]: r[1] for r in self.read("SELECT automation_id, op FROM automation_outbox")}

    @staticmethod
    def _note_is(conn: sqlite3.Connection, automation_id: str, expected: NoteState | None) -> bool:
        row = conn.execute("SELECT note, updated_us FROM automation_notes WHERE automation_id = ?",
                           (automation_id,)).fetchone()
        return (None if row is None else (row[0], row[1])) == expected

    def apply_remote_note(self, conn: sqlite3.Connection, automation_id: str, note: NoteState,
                          expected: NoteState | None) -> bool:
        """The bucket holds ``note``: make it the local note, inside ``conn``'s transaction, if
        the local note is still ``expected`` (``None``: absent; pass ``note`` itself for a note
        this host pushed). Its put leaves the outbox. ``False`` (nothing changed) when the
        note changed here meanwhile: that change stays queued."""
        if not self._note_is(conn, automation_id, expected):
            return False
        conn.execute(
            "INSERT INTO automation_notes (automation_id, note, updated_us) VALUES (?, ?, ?)"
            " ON CONFLICT(automation_id) DO UPDATE SET note = excluded.note, updated_us = excluded.updated_us",
            (automation_id, *note),
        )
        conn.execute("DELETE FROM automation_outbox WHERE automation_id = ? AND op = 'put'", (automation_id,))
        return True

    def delete_note_from_remote(self, conn: sqlite3.Connection, automation_id: str, expected: NoteState) -> bool:
        """Another host removed the note: remove it here if it is still ``expected``."""
        if not self._note_is(conn, automation_id, expected):
            return False
        conn.execute("DELETE FROM automation_notes WHERE automation_id = ?", (automation_id,))
        conn.execute("DELETE FROM automation_outbox WHERE automation_id = ?", (automation_id,))
        return True

    def clear_note_outbox(self, conn: sqlite3.Connection, automation_id: str) -> None:
        """The bucket has this host's deletion of the note: drop it from the outbox (unless the
        note was written again meanwhile)."""
        conn.execute("DELETE FROM automation_outbox WHERE automation_id = ? AND op = 'delete'"
                     " AND NOT EXISTS (SELECT 1 FROM automation_notes WHERE automation_id = ?)",
                     (automation_id, automation_id))

    # --- key/value metadata -------------------------------------------------------------------

    def meta_get(self, key: str) -> str | None:
        rows = self.read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def meta_set(self, key: str, value: str) -> None:
        with self.transaction() as c:
            c.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def integrity_check(self) -> str:
        return self.read("PRAGMA integrity_check")[0][0]
