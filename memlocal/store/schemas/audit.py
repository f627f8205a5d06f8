"""The injection audit trail's schema (owned by ``memlocal.services.audit``): ``injections`` and
``injection_memories``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..migrations import MigrationSet

if TYPE_CHECKING:
    import sqlite_utils


def _migration_6(db: sqlite_utils.Database) -> None:
    """The injection audit trail (owned by ``memlocal.services.audit``; see docs/hygiene.md).

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


# Each step is named by its number in the single chain that came before named sets.
# ``memlocal.services.audit`` runs its statements on them through ``Database.own_tables(AUDIT)``.
AUDIT = MigrationSet("audit", {1: _migration_6}, legacy={1: 6}, tables=("injections", "injection_memories"))
