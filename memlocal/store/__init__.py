"""The local SQLite index: one file per host, shared safely by several processes.

- :mod:`.database`: the file itself (connection, transactions, ``meta``, integrity) and the
  migrations' entry point;
- :mod:`.migrations`: the one migration mechanism (named sets, one runner); the sets of the
  library live in :mod:`.schemas`, one module per owner;
- :mod:`.derive`: what is derived from every row's text at once (features, near-duplicate keys);
- :mod:`.memories`: :class:`Store`, the memories (CRUD, lists, hygiene look-ups, notes);
- :mod:`.recall_reads`: the reads recall makes of a snapshot (its SQL, owned here);
- :mod:`.replica`: the store behind the replication port (:mod:`memlocal.plugins`), the only
  thing the sync package is given (``MemoryBank.replica``, or ``StoreReplica(store)``);
- :mod:`.tables`: the one handle on an owner's own tables (the sync's, the audit trail's, the
  semantic vectors', an integration's), limited to its migration set's tables
  (``Database.own_tables``);
- :mod:`.local`: an integration's table of local rows (``LocalTable``), on that handle.
"""

from __future__ import annotations

from typing import Any

from ..model import from_us, to_us, utcnow
from ..plugins import NoteState
from .database import LAZY_CHECKPOINT_COMMITS, Database
from .derive import derive_features, derive_near_keys
from .memories import (
    MEMORY_COLUMNS,
    WRITE_COLUMNS,
    IdTakenError,
    Page,
    Store,
    extra_json,
    memory_to_row,
    row_to_memory,
    write_row,
)
from .migrations import LEGACY_VERSION, MigrationSet
from .schemas import LEGACY_CHAIN

# The old single chain of migrations, by ``user_version`` (tests build old databases with it).
MIGRATIONS = LEGACY_CHAIN
SCHEMA_VERSION = LEGACY_VERSION



def __getattr__(name: str) -> Any:
    # The port's implementation loads on first use: it imports memlocal.plugins' port, which a
    # process that never syncs does not need.
    if name in ("StoreReplica", "content_signature"):
        from . import replica

        return getattr(replica, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LAZY_CHECKPOINT_COMMITS",
    "MEMORY_COLUMNS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "StoreReplica",
    "WRITE_COLUMNS",
    "content_signature",
    "Database",
    "IdTakenError",
    "MigrationSet",
    "NoteState",
    "Page",
    "Store",
    "derive_features",
    "derive_near_keys",
    "extra_json",
    "from_us",
    "memory_to_row",
    "row_to_memory",
    "to_us",
    "utcnow",
    "write_row",
]
