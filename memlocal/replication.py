"""The replication port: everything a replicator (the sync package, ``memlocal_sync``) receives
from memlocal's store, and the data that crosses it.

The library hands a replicator one :class:`Replica` (``Store.replica``); the replicator never
sees the store, its connection or its SQL. It reads the change log (the outbox, each memory's
unmerged access bumps, the notes' outbox) and applies what it learnt from the bucket through a
:class:`ReplicaTransaction`, the unit of work in which its own tables (its base) commit together
with the change. Its own tables are declared as a :class:`MigrationSet` and created with
:meth:`Replica.migrate`. An import-linter contract (pyproject.toml) keeps the sync package's
imports from memlocal to this module and a few public library modules (docs/architecture.md).

To give the sync something new: add the method to :class:`Replica` (a read) or
:class:`ReplicaTransaction` (a change), implement it in :mod:`memlocal.store.replica`, and, if it
returns more than a plain value, a frozen dataclass here.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol, Sequence

from .model import Memory
from .store.memories import NoteState
from .store.migrations import MigrationSet, Step

__all__ = [
    "AccessDelta",
    "MigrationSet",
    "NoteState",
    "PreparedRow",
    "Replica",
    "ReplicaTransaction",
    "SignedRow",
    "Step",
]

# A memory as the store writes it (``Replica.prepare``): opaque to the replicator, which may
# compute it off the write lock and hand it back to ``apply_remote`` / ``insert_remote_absent``.
PreparedRow = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class AccessDelta:
    """A memory's id, profile and access bumps not yet merged into the bucket."""

    id: str
    profile: str
    delta: int


@dataclass(frozen=True, slots=True)
class SignedRow:
    """A memory's content signature (``Replica.signature``) as stored, with its access bumps."""

    id: str
    profile: str
    delta: int
    active: bool
    signature: str


class ReplicaTransaction(Protocol):
    """One durable write transaction (``Replica.transaction()``): the store-side changes a pull or
    push makes, and the replicator's writes to its own tables, commit together or not at all."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement on the replicator's own tables; returns the rows changed."""
        ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement per row on the replicator's own tables."""
        ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Read the replicator's own tables inside the transaction."""
        ...

    def meta_set(self, key: str, value: str) -> None: ...

    def meta_delete(self, key: str) -> None: ...

    def apply_remote(self, memory: Memory, *, content: Literal["remote", "local"] = "remote", sent_delta: int = 0,
                     set_staleness: bool = True, row: PreparedRow | None = None) -> bool:
        """Fold a memory the bucket holds into the local row (see ``StoreReplica``)."""
        ...

    def insert_remote_absent(self, items: Sequence[tuple[Memory, PreparedRow | None]]) -> set[str]:
        """``apply_remote`` of the items whose id is absent here, in a few statements."""
        ...

    def delete_from_remote(self, memory_id: str, profile: str) -> None: ...

    def clear_outbox(self, memory_id: str, op: str | None = None, *, only_if_absent: bool = False) -> None: ...

    def reid(self, old_id: str, new_id: str) -> bool: ...

    def merge_access(self, memory_id: str, count: int, last_accessed: datetime | None) -> bool:
        """Add ``count`` accesses (and a lastAccessedAt, the later kept) to a memory as unmerged
        local bumps: those of a copy retired as its duplicate. ``False`` if the memory is gone."""
        ...

    def apply_remote_note(self, automation_id: str, note: NoteState, expected: NoteState | None) -> bool: ...

    def delete_note_from_remote(self, automation_id: str, expected: NoteState) -> bool: ...

    def clear_note_outbox(self, automation_id: str) -> None: ...


class Replica(Protocol):
    """The local database as a replicator sees it."""

    @property
    def path(self) -> Path:
        """The database file (the replicator's lock and status name it)."""
        ...

    def migrate(self, migrations: MigrationSet) -> None:
        """Create or migrate the replicator's own tables (cheap when current)."""
        ...

    def transaction(self) -> AbstractContextManager[ReplicaTransaction]: ...

    def snapshot(self) -> AbstractContextManager[Any]:
        """One read transaction: every read inside sees the same committed state."""
        ...

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Read the replicator's own tables."""
        ...

    def meta_get(self, key: str) -> str | None: ...

    def meta_set(self, key: str, value: str) -> None: ...

    # --- the change log and the memories ---------------------------------------------------------

    def outbox(self, profiles: Sequence[str] | None = None, op: str | None = None) -> dict[str, tuple[str, str]]:
        """The change log: ``{id: (profile, op)}`` with ``op`` ``put`` or ``delete``."""
        ...

    def access_deltas(self, profiles: Sequence[str] | None = None) -> list[AccessDelta]: ...

    def changed_ids(self) -> set[str]:
        """Ids with a change the bucket may not have: queued in the outbox, or with unmerged
        access bumps."""
        ...

    def memories_with_deltas(self, profiles: Sequence[str] | None = None,
                             ids: Sequence[str] | None = None) -> list[tuple[Memory, int]]: ...

    def content_signatures(self, profiles: Sequence[str] | None = None) -> list[SignedRow]: ...

    def memory_with_delta(self, memory_id: str) -> tuple[Memory, int] | None: ...

    def convergence_candidates(self, profiles: Sequence[str] | None = None) -> list[Memory]:
        """Active memories another active memory may make redundant across hosts
        (``memlocal.hygiene.converge``): those sharing profile, category and exact-duplicate key
        with another, and those superseding a memory that does not name them as its successor."""
        ...

    def exists(self, memory_id: str) -> bool: ...

    def profiles(self) -> dict[str, int]: ...

    def prepare(self, memory: Memory) -> PreparedRow:
        """The row the store would write for ``memory`` (CPU only: call it off the write lock)."""
        ...

    def signature(self, memory: Memory) -> str:
        """``memory``'s content signature, equal to its ``SignedRow.signature`` once stored."""
        ...

    # --- automation notes ------------------------------------------------------------------------

    def note_get(self, automation_id: str) -> NoteState | None: ...

    def notes(self) -> list[tuple[str, str, int]]: ...

    def note_outbox(self) -> dict[str, str]: ...
