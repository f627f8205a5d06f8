"""The purge of replaced secrets (owned by ``memlocal.bank.rescan``, docs/hygiene.md, "Rescan"): a
trigger that notes, in ``meta``, that a memory's text gained a redaction marker (a rescan here,
or another host's rescan pulled), so the store purges the old bytes from the file after it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..migrations import MigrationSet

if TYPE_CHECKING:
    import sqlite_utils

# The meta key the trigger sets and ``Store.purge_replaced`` clears.
PURGE_PENDING = "secrets.purge_pending"

_MARKER = "'[REDACTED:'"


def _markers(row: str, column: str) -> str:
    """SQL: how many markers ``row.column`` holds (as characters: the count times the marker's length)."""
    return f"(length({row}.{column}) - length(replace({row}.{column}, {_MARKER}, '')))"


def _purge_trigger(db: sqlite_utils.Database) -> None:
    """A text that gains a marker replaced a credential: the old text is still in the file (a
    freed cell, a free page, the full-text index's segments, the WAL) until the purge."""
    # (Not INSERT OR REPLACE: an outer upsert's conflict rule would override the trigger's.)
    note = (f"INSERT INTO meta (key, value) SELECT '{PURGE_PENDING}', '1'"
            f" WHERE NOT EXISTS (SELECT 1 FROM meta WHERE key = '{PURGE_PENDING}');")
    gained = " OR ".join(f"{_markers('NEW', c)} > {_markers('OLD', c)}"
                         for c in ("raw_input", "processed_content", "summary", "extra"))
    db.conn.execute("CREATE TRIGGER memories_secret_replaced AFTER UPDATE OF raw_input, processed_content,"
                    f" summary, extra ON memories WHEN {gained} BEGIN {note} END")
    db.conn.execute("CREATE TRIGGER automation_notes_secret_replaced AFTER UPDATE OF note ON automation_notes"
                    f" WHEN {_markers('NEW', 'note')} > {_markers('OLD', 'note')} BEGIN {note} END")


SECRETS = MigrationSet("secrets", {1: _purge_trigger})
