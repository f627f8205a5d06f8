"""The one migration mechanism: named migration sets, each run by :func:`run`.

A :class:`~memlocal.plugins.MigrationSet` is one owner's schema history (``memories``, ``recall``, ``semantic``,
``audit``, ``automation``, ``sync``, ...): numbered steps applied in order, each in its own
``BEGIN IMMEDIATE`` transaction together with the set's version stamp in ``meta``
(``schema.<name>`` unless the set names another key). Another process may migrate the same file
at the same moment: each step re-reads the stamp once it holds the write lock and skips what is
done. Sets are independent: a new table is a new set (or a new step of its owner's set), never a
change to another owner's numbering (docs/storage.md, "Migrations").

Before named sets, the library's schema was one numbered chain stamped in ``PRAGMA
user_version`` (1 to 9, ``LEGACY_VERSION``). Those steps now belong to the sets of their owners,
each with its old number in ``MigrationSet.legacy``. A database below version 9 first runs the
old steps it lacks in their old order, stamped in ``user_version`` as before (so every existing
file upgrades exactly as it always did); a set with no stamp of its own in ``meta`` then counts
its old steps as applied. Only steps added after the chain write ``meta`` stamps.

sqlite-utils 4 has a ``Migrations`` helper; it is not used here: it records applied steps by name
in its own table (the stamps already written in users' databases, ``user_version`` and
``sync.schema``, would not be read), it wraps steps in ``db.atomic()`` rather than an immediate
transaction that re-checks the stamp under the write lock, and asking it what is pending imports
sqlite_utils on every open.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol

# The set itself is declared beside the port (a plugin declares its tables with it too).
from ..plugins import MigrationSet, Step

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import sqlite_utils

__all__ = ["LEGACY_VERSION", "MigrationSet", "Step", "run", "versions"]

# The last version of the single numbered chain (``PRAGMA user_version``) before named sets.
LEGACY_VERSION = 9

class _Database(Protocol):
    """What :func:`run` needs of :class:`memlocal.store.database.Database`."""

    conn: sqlite3.Connection

    @property
    def db(self) -> "sqlite_utils.Database": ...

    def transaction(self) -> "AbstractContextManager[sqlite3.Connection]": ...


def _stamps(conn: sqlite3.Connection, sets: Iterable[MigrationSet]) -> dict[str, str]:
    keys = [s.key for s in sets]
    try:
        rows = conn.execute(f"SELECT key, value FROM meta WHERE key IN ({', '.join('?' for _ in keys)})",
                            keys).fetchall()
    except sqlite3.OperationalError:  # a fresh file: no meta table yet
        return {}
    return {k: v for k, v in rows}


def versions(conn: sqlite3.Connection, sets: Iterable[MigrationSet]) -> dict[str, int]:
    """Each set's version in the database (0: never applied)."""
    sets = list(sets)
    stamps = _stamps(conn, sets)
    user_version = conn.execute("PRAGMA user_version").fetchone()[0]
    return {s.name: s.current(stamps, user_version) for s in sets}


def run(database: _Database, sets: Iterable[MigrationSet], *, legacy_version: int | None = None) -> None:
    """Apply every pending step of ``sets``, set by set in order, all in one transaction: a
    database moves to this release's schema or stays where it was, and a fresh file pays one
    commit (one fsync) rather than one per step (about thirty).

    ``legacy_version``: first bring ``PRAGMA user_version`` up to it by running the sets' old
    steps (``legacy``) in their old order. ``sqlite3.DatabaseError`` when a set's stamp is newer
    than its steps."""
    sets = list(sets)
    conn = database.conn
    legacy = legacy_version is not None and conn.execute("PRAGMA user_version").fetchone()[0] < legacy_version
    if not legacy and _current(conn, sets):
        return
    with database.transaction() as c:
        # Another process may have migrated while we waited for the write lock: read again.
        if legacy:
            _run_legacy(database, c, {old: s.steps[step] for s in sets for step, old in s.legacy.items()})
        now = versions(c, sets)
        if _current(c, sets, now):
            return
        db = database.db
        for s in sets:
            for step in range(now[s.name] + 1, s.version + 1):
                s.steps[step](db)
                c.execute("INSERT INTO meta (key, value) VALUES (?, ?)"
                          " ON CONFLICT(key) DO UPDATE SET value = excluded.value", (s.key, str(step)))


def _current(conn: sqlite3.Connection, sets: list[MigrationSet], now: dict[str, int] | None = None) -> bool:
    """Whether every set is at its version (``sqlite3.DatabaseError`` if one is newer)."""
    now = versions(conn, sets) if now is None else now
    for s in sets:
        if now[s.name] > s.version:
            raise sqlite3.DatabaseError(
                f"schema {s.name} version {now[s.name]} is newer than this memlocal ({s.version}); upgrade memlocal")
    return all(now[s.name] == s.version for s in sets)


def _run_legacy(database: _Database, c: sqlite3.Connection, chain: Mapping[int, Step]) -> None:
    """The old single chain's steps above ``user_version``, in order, each stamped there (inside
    the caller's transaction)."""
    current = c.execute("PRAGMA user_version").fetchone()[0]
    db = database.db
    for version in sorted(v for v in chain if v > current):
        chain[version](db)
        c.execute(f"PRAGMA user_version = {int(version)}")
