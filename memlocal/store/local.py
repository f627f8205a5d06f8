"""An integration's own table of local rows, behind a typed interface (no SQL leaves the store).

What an integration keeps beside its memories that is not a memory (the Claude memory tool's
directories and blank files) lives in a table of its own, created by its own migration set, with
the shape ``(profile, path, kind, text)``: one row per path of a profile. :class:`LocalTable` is
all an integration gets of it (through ``MemoryBank.local_table``, which redacts what it reads);
the table is local to the host and never synced. Its statements run through the one handle on an
owner's tables (``Database.own_tables`` of the integration's set, :mod:`memlocal.store.tables`),
which reaches that set's tables and no other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Final, Iterable

if TYPE_CHECKING:
    from ..plugins import MigrationSet
    from .database import Database

_NAME: Final = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class LocalRow:
    """One row of an integration's table: a path of the profile, its kind and its text."""

    path: str
    kind: str
    text: str = ""


class LocalTable:
    """The rows of one integration's table (``name``, one of the tables its migration set
    ``owner`` names), profile by profile."""

    def __init__(self, database: "Database", owner: "MigrationSet", name: str,
                 shown: Callable[[str], str] = str) -> None:
        if not _NAME.fullmatch(name):
            raise ValueError(f"a local table's name is [a-z][a-z0-9_]*, got {name!r}")
        if name not in owner.tables:
            raise ValueError(f"migration set {owner.name} does not name the table {name!r} in its tables")
        self._db = database
        self._owner = owner
        self._shown = shown
        self.name = name

    def rows(self, profile: str) -> list[LocalRow]:
        """Every row of ``profile``, by path, its path and text as ``shown`` gives them (the bank
        passes its redaction: another tool may have written the table)."""
        shown = self._shown
        with self._db.own_tables(self._owner) as handle:
            rows = handle.execute(f"SELECT path, kind, text FROM {self.name} WHERE profile = ? ORDER BY path",
                                  (profile,))
        return [LocalRow(shown(p), k, shown(t)) for p, k, t in rows]

    def put(self, profile: str, rows: Iterable[LocalRow]) -> None:
        """Insert or replace ``rows`` (by path), in one transaction."""
        values = [(profile, r.path, r.kind, r.text) for r in rows]
        if not values:
            return
        with self._db.own_tables(self._owner, write=True) as handle:
            handle.executemany(f"INSERT INTO {self.name} (profile, path, kind, text) VALUES (?, ?, ?, ?) "
                             "ON CONFLICT (profile, path) DO UPDATE SET kind = excluded.kind, text = excluded.text",
                             values)

    def delete(self, profile: str, path: str, *, below: bool = False) -> None:
        """Delete the row of ``path`` (``below``: and every row under ``path/``; ``path`` "" with
        ``below``: the profile's every row)."""
        with self._db.own_tables(self._owner, write=True) as handle:
            if below and path == "":
                handle.execute(f"DELETE FROM {self.name} WHERE profile = ?", (profile,))
                return
            handle.execute(f"DELETE FROM {self.name} WHERE profile = ? AND path = ?", (profile, path))
            if below:
                handle.execute(f"DELETE FROM {self.name} WHERE profile = ? AND substr(path, 1, ?) = ?",
                             (profile, len(path) + 1, path + "/"))
