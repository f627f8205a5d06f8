"""The optional semantic signal's schema (owned by ``memlocal.recall.semantic``): ``memory_vectors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..migrations import MigrationSet

if TYPE_CHECKING:
    import sqlite_utils


def _migration_5(db: sqlite_utils.Database) -> None:
    """Vectors of the optional semantic signal (owned by ``memlocal.recall.semantic``; docs/relevance.md).

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


# Each step is named by its number in the single chain that came before named sets.
# ``memlocal.recall.semantic`` runs its statements on them through ``Database.own_tables(SEMANTIC)``:
# it writes its vectors and reads the memories (their text, their profile's revision) beside them.
SEMANTIC = MigrationSet("semantic", {1: _migration_5}, legacy={1: 5}, tables=("memory_vectors",),
                        reads=("memories", "profile_revs"))
