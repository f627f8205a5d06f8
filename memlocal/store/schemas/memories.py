"""The memories' own schema (owned by ``memlocal.store.memories``): the ``memories`` table, the
change log ``sync_outbox``, ``meta``, ``automation_notes``, and the duplicate keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...hygiene.rules import text_key
from ..derive import derive_near_keys
from ..migrations import MigrationSet

if TYPE_CHECKING:
    import sqlite_utils


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


def _migration_7(db: sqlite_utils.Database) -> None:
    """Exact-duplicate keys (``memlocal.hygiene.rules``, docs/hygiene.md): ``text_key`` is the hash of
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


def _migration_9(db: sqlite_utils.Database) -> None:
    """Near-duplicate keys (``memlocal.hygiene.rules.near_key``): at the default threshold a save
    finds its near-duplicates with one index lookup instead of a full-text query whose cost
    grew with the profile."""
    c = db.conn
    c.execute("ALTER TABLE memories ADD COLUMN near_key TEXT")
    derive_near_keys(c)
    c.execute("CREATE INDEX memories_near_key ON memories (profile, near_key) WHERE near_key IS NOT NULL")


def _outbox_without_rowid(db: sqlite_utils.Database) -> None:
    """``sync_outbox`` keyed by the memory id itself (``WITHOUT ROWID``): a rowid table with a
    text primary key is two b-trees (the rows and the key's index), so every save wrote two
    pages of the change log; now one. Same columns, same rows."""
    c = db.conn
    c.execute("CREATE TABLE sync_outbox_keyed (id TEXT PRIMARY KEY NOT NULL, profile TEXT NOT NULL,"
              " op TEXT NOT NULL, queued_us INTEGER NOT NULL) WITHOUT ROWID")
    c.execute("INSERT INTO sync_outbox_keyed (id, profile, op, queued_us)"
              " SELECT id, profile, op, queued_us FROM sync_outbox WHERE id IS NOT NULL")
    c.execute("DROP TABLE sync_outbox")
    c.execute("ALTER TABLE sync_outbox_keyed RENAME TO sync_outbox")


# Steps 1 to 4 are named by their number in the single chain that came before named sets.
MEMORIES = MigrationSet("memories", {1: _migration_1, 2: _migration_3, 3: _migration_7, 4: _migration_9,
                                     5: _outbox_without_rowid}, legacy={1: 1, 2: 3, 3: 7, 4: 9})
