"""The replication port's names, declared in :mod:`memlocal.plugins` (the one module of what
crosses between memlocal and a plugin such as the sync package); kept here so that code written
against ``memlocal.replication`` keeps working. New code imports :mod:`memlocal.plugins`."""

from __future__ import annotations

from .plugins import AccessDelta, MigrationSet, NoteState, PreparedRow, Replica, ReplicaTransaction, SignedRow, Step

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
