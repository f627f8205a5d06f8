"""The lineage of copies (owned by profile copy, rename and import, ``MemoryBank.copy_profile``):
an index of each copy's ``copiedFrom`` extra field (``memlocal.hygiene.rules.COPIED_FROM``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..migrations import MigrationSet

if TYPE_CHECKING:
    import sqlite_utils

# The expression the index is on; queries must spell it the same way to use it.
COPIED_FROM_SQL = "json_extract(extra, '$.copiedFrom')"


def _copied_from_index(db: sqlite_utils.Database) -> None:
    """Which memories of a profile are copies of a given id: an import that finds a line's id
    taken by another profile looks here first, so importing the same file twice adds nothing."""
    db.conn.execute(f"CREATE INDEX memories_copied_from ON memories (profile, {COPIED_FROM_SQL})"
                    f" WHERE {COPIED_FROM_SQL} IS NOT NULL")


LINEAGE = MigrationSet("lineage", {1: _copied_from_index})
