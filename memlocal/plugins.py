"""memlocal's extension points, each declared once as a typed Protocol (as datasette declares its
hooks in ``hookspecs.py``), and the data that crosses them.

An installed package plugs into memlocal through three entry point groups; the library finds
them with :func:`discover` and never imports a plugin by name (the sync package, ``memlocal_sync``,
registers one of each):

=========================  ====================================  ==========================================
entry point group          what it registers                     called with, returning
=========================  ====================================  ==========================================
``memlocal.replicators``   a :class:`ReplicatorFactory`          ``(config, replica)`` -> a :class:`Replicator`
                                                                 or ``None`` (no bucket: local only)
``memlocal.daemons``       a :class:`DaemonFactory`              ``(config, replica, retention)`` -> a
                                                                 :class:`Daemon` or ``None``
``memlocal.commands``      a ``click.Command`` (a group)         added to ``memlocal``; its commands use
                                                                 :mod:`memlocal.faces.cli.plugin`
=========================  ====================================  ==========================================

A plugin receives the store only as a :class:`Replica`, the replication port (``MemoryBank.replica``):
it reads the change log and applies what it learnt from the bucket in a :class:`ReplicaTransaction`.
Its own tables are a :class:`MigrationSet` (the one table mechanism of the library, the
integrations and the plugins), created with :meth:`Replica.migrate`; the plugin writes their SQL
itself and runs it through a :class:`PluginTables` handle limited to those tables, valid only
inside ``Replica.snapshot()`` or a transaction (where it commits together with the change). No
store row, store function, connection or cursor crosses. This module imports nothing that loads
the store: everything a plugin needs to know of memlocal's data is declared here, next to
:mod:`memlocal.model`. Import-linter contracts (pyproject.toml) hold the sync package to this
module and a few public library modules, directly and indirectly (docs/architecture.md).

The port holds only the store's own data (memories, notes, ``meta``, the change log), at most 35
methods (tests/test_plugins.py counts them). To give the sync something new of the store: add the
method to :class:`Replica` (a read) or :class:`ReplicaTransaction` (a change), implement it in
:mod:`memlocal.store.replica`, and, if it returns more than a plain value, a frozen dataclass here;
a table of the sync's own is a step of its migration set, its statements beside it in the sync
package (``memlocal_sync.tables``). docs/architecture.md lists every extension point, and
tests/test_plugins.py checks the installed plugins against these declarations.
"""

from __future__ import annotations

import functools
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import (TYPE_CHECKING, Any, Callable, Final, Iterable, Literal, Mapping, Protocol, Required, Sequence,
                    TypedDict)

from .errors import ValidationError
from .model import Memory, check_text, format_time, parse_time

if TYPE_CHECKING:
    import sqlite_utils

    from .config import Config

__all__ = [
    "AUTOMATION_ID_PATTERN",
    "COMMANDS",
    "DAEMONS",
    "EXTENSION_POINTS",
    "NOTE_MAX_BYTES",
    "REPLICATORS",
    "AccessDelta",
    "AutomationNote",
    "BreakerStatus",
    "Daemon",
    "DaemonFactory",
    "Kind",
    "NoteReplicator",
    "MigrationSet",
    "NoteState",
    "PendingCounts",
    "PluginTables",
    "RecordStatus",
    "Replica",
    "ReplicaTransaction",
    "Replicator",
    "ReplicatorFactory",
    "ReplicatorStatus",
    "Retention",
    "SignedRow",
    "SkippedObject",
    "Step",
    "discover",
    "read_foreign_note",
    "validate_automation_id",
]

REPLICATORS: Final = "memlocal.replicators"
DAEMONS: Final = "memlocal.daemons"
COMMANDS: Final = "memlocal.commands"


# --- automation notes, as they cross to the bucket --------------------------------------------

NOTE_MAX_BYTES: Final = 4096
AUTOMATION_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_AUTOMATION_ID_RE: Final = re.compile(AUTOMATION_ID_PATTERN)


def validate_automation_id(automation_id: object) -> str:
    """Return ``automation_id`` if valid, else raise ``ValidationError``."""
    if not isinstance(automation_id, str) or not _AUTOMATION_ID_RE.fullmatch(automation_id):
        raise ValidationError(
            f"invalid automation id {automation_id!r}: use 1-128 characters of A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return automation_id


@dataclass(frozen=True, slots=True)
class AutomationNote:
    """The note of one automation."""

    automation_id: str
    note: str
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape, also the body of its bucket object ``memlocal/automations/<id>.json``."""
        return {"automationId": self.automation_id, "note": self.note, "updatedAt": format_time(self.updated_at)}


def read_foreign_note(data: object) -> AutomationNote:
    """Read an automation note another writer stored (another host, another implementation),
    else raise ``ValidationError`` with a reason. Deterministic, like ``model.read_foreign``.

    Made valid: surrounding whitespace of the note is trimmed (as a write here trims it), any
    RFC 3339 offset or precision of ``updatedAt`` (kept to the microsecond, in UTC), unknown
    fields are ignored; a note over ``NOTE_MAX_BYTES`` is kept as written (the cap bounds what
    *we* write; the object size cap bounds what is read). Refused: not an object, an invalid
    ``automationId``, a note that is not valid Unicode text or is empty (a cleared note has no
    object), a missing or invalid ``updatedAt``.
    """
    if not isinstance(data, dict):
        raise ValidationError("an automation note must be a JSON object")
    automation_id = validate_automation_id(data.get("automationId"))
    text = check_text(data.get("note"), "note").strip()
    if not text:
        raise ValidationError("the note is empty (a cleared note has no object)")
    updated = parse_time(data.get("updatedAt"))
    if updated is None:
        raise ValidationError("updatedAt is missing or the zero time")
    return AutomationNote(automation_id, text, updated)


# An automation note as the store keeps it: its text and updatedAt in µs.
NoteState = tuple[str, int]


# --- tables: the one mechanism for every owner's tables ------------------------------------------

# One step: receives a sqlite_utils view of the connection, inside the step's transaction.
Step = Callable[["sqlite_utils.Database"], None]


@dataclass(frozen=True)
class MigrationSet:
    """One owner's numbered schema steps (the library's, an integration's, the sync's), applied in
    order by the store's one runner (``memlocal.store.migrations.run``; for a plugin,
    :meth:`Replica.migrate`), each step stamped in ``meta`` (docs/storage.md, "Migrations").

    ``tables``: the tables the set creates; the owner's handle on its tables (a plugin's
    :class:`PluginTables`, the library's ``Database.own_tables``) reaches these and no other.
    ``reads``: tables of the store the owner's statements also read, never write (a library
    owner's only, such as the semantic vectors' join with ``memories``; a plugin reads the
    store through the port's methods)."""

    name: str
    steps: Mapping[int, Step]
    # The ``meta`` key of the set's version (default ``schema.<name>``).
    stamp_key: str = ""
    # Step number -> its number in the old single chain (``PRAGMA user_version``), for the
    # steps that existed before named sets.
    legacy: Mapping[int, int] = field(default_factory=dict)
    tables: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if sorted(self.steps) != list(range(1, len(self.steps) + 1)):
            raise ValueError(f"migration set {self.name}: steps must be numbered 1, 2, 3, ... without gaps")

    @property
    def key(self) -> str:
        return self.stamp_key or f"schema.{self.name}"

    @property
    def version(self) -> int:
        return max(self.steps, default=0)

    def current(self, stamps: Mapping[str, str], user_version: int) -> int:
        """The set's version in a database with these ``meta`` stamps and ``user_version``."""
        if self.key in stamps:
            return int(stamps[self.key])
        return max((step for step, old in self.legacy.items() if old <= user_version), default=0)


class PluginTables(Protocol):
    """A plugin's handle on its own tables (those its :class:`MigrationSet` names in ``tables``),
    given by :meth:`Replica.snapshot` (reads) and :attr:`ReplicaTransaction.tables` (reads and
    writes, committed with the transaction). Valid only inside that block; SQLite refuses a
    statement on any other table (an authorizer), and a snapshot's handle refuses writes."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows."""
        ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run one statement for each of ``rows``; how many rows they changed."""
        ...


# --- the replication port: the store as a plugin sees it ---------------------------------------

# What a kind-generic method of the port acts on: memories or automation notes, which share it
# where the two pair (their change logs).
Kind = Literal["memory", "note"]


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

    @property
    def tables(self) -> PluginTables:
        """The plugin's own tables, read and written inside this transaction."""
        ...

    def meta_get(self, key: str) -> str | None:
        """A ``meta`` value as this transaction sees it (``None``: not set)."""
        ...

    def meta_set(self, key: str, value: str) -> None: ...

    def meta_delete(self, key: str) -> None: ...

    def apply_remote(self, memory: Memory, *, content: Literal["remote", "local"] = "remote", sent_delta: int = 0,
                     set_staleness: bool = True) -> bool:
        """Fold a memory the bucket holds into the local row (see ``StoreReplica``)."""
        ...

    def insert_remote_absent(self, memories: Sequence[Memory]) -> set[str]:
        """``apply_remote`` of the items whose id is absent here, in a few statements."""
        ...

    def apply_pushed(self, writes: Sequence[tuple[Memory, int, bool]]) -> set[str]:
        """``apply_remote(memory, content="local", sent_delta=…, set_staleness=…)`` of each
        ``(memory, sent_delta, set_staleness)`` (distinct ids: this host's own writes), in a few
        statements; the ids done (not those of another profile here)."""
        ...

    def delete_from_remote(self, memory_id: str, profile: str) -> None: ...

    def clear_outbox(self, item_id: str, op: str | None = None, *, only_if_absent: bool = False,
                     kind: Kind = "memory") -> None:
        """Drop the outbox entry of the memory or note ``item_id`` (of ``op`` only, if given; only
        when the item is gone, with ``only_if_absent``): the bucket has the change."""
        ...

    def reid(self, old_id: str, new_id: str) -> bool: ...

    def merge_access(self, memory_id: str, count: int, last_accessed: datetime | None) -> bool:
        """Add ``count`` accesses (and a lastAccessedAt, the later kept) to a memory as unmerged
        local bumps: those of a copy retired as its duplicate. ``False`` if the memory is gone."""
        ...

    def apply_remote_note(self, automation_id: str, note: NoteState, expected: NoteState | None) -> bool: ...

    def delete_note_from_remote(self, automation_id: str, expected: NoteState) -> bool: ...


class Replica(Protocol):
    """The local database as a replicator sees it."""

    @property
    def path(self) -> Path:
        """The database file (the replicator's lock and status name it)."""
        ...

    def migrate(self, tables: MigrationSet) -> None:
        """Create or migrate the replicator's own tables (cheap when current); the handles of
        ``snapshot`` and ``ReplicaTransaction.tables`` then reach ``tables.tables``."""
        ...

    def transaction(self) -> AbstractContextManager[ReplicaTransaction]: ...

    def snapshot(self) -> AbstractContextManager[PluginTables]:
        """One read transaction: every read inside sees the same committed state, this port's
        methods and the plugin's own tables through the handle it yields (reads only)."""
        ...

    def meta_get(self, key: str) -> str | None: ...

    def meta_set(self, key: str, value: str) -> None: ...

    def after_pass(self) -> None:
        """Called when a pass that did not fail ends: the store finishes what the pulled changes
        left to do (the purge of the bytes of a text another host's rescan redacted,
        docs/hygiene.md, "Rescan")."""
        ...

    # --- the change log and the memories ---------------------------------------------------------

    def outbox(self, profiles: Sequence[str] | None = None, op: str | None = None, *,
               kind: Kind = "memory") -> dict[str, tuple[str, str]]:
        """The change log of ``kind``: ``{id: (profile, op)}`` with ``op`` ``put`` or ``delete``
        (of ``op`` only, if given; a note's profile is ``""``, and ``profiles`` scopes memories only)."""
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
        (``memlocal.hygiene.rules.converge``): those sharing profile and exact-duplicate key with
        another (whatever their categories, as at save), and those superseding a memory that
        does not name them as its successor."""
        ...

    def exists(self, memory_id: str) -> bool: ...

    def profiles(self) -> dict[str, int]: ...

    def signature(self, memory: Memory) -> str:
        """``memory``'s content signature, equal to its ``SignedRow.signature`` once stored."""
        ...

    # --- automation notes ------------------------------------------------------------------------

    def note_get(self, automation_id: str) -> NoteState | None: ...

    def notes(self) -> list[tuple[str, str, int]]: ...


# --- what a replicator reports (``Replicator.status``) -------------------------------------------

class PendingCounts(TypedDict):
    """What this host has that the bucket does not (yet)."""

    total: int
    saves: int  # memories never synced
    deletes: int  # deletions queued
    accessUpdates: int  # synced memories with unmerged access bumps
    outbox: int  # entries of the change log
    automationNotes: int  # notes queued (writes and clears)


class SkippedObject(TypedDict):
    """A bucket object the sync could not use, until it changes or goes away."""

    key: str
    etag: str
    reason: str
    seenAt: str


class BreakerStatus(TypedDict, total=False):
    """The host's write-through circuit breaker: ``closed``; ``open`` (until ``openUntil``,
    why, since when, consecutive failures); ``half-open`` (the window is over: the next try
    probes; ``probing`` while one process holds the probe)."""

    state: Required[Literal["closed", "open", "half-open"]]
    failures: int
    reason: str
    since: str
    openUntil: str
    probing: bool


class RecordStatus(TypedDict):
    """The change record as this host follows it."""

    cursor: int | None  # the last segment applied
    listsInFullUntil: str | None  # a full listing on every pass until then ...
    why: str | None  # ... for this reason (changes no record explained)
    waitingFor: int | None  # a missing segment waited for
    problems: list[dict[str, Any]]  # the record's last bad segments, gaps, unexplained changes


class ReplicatorStatus(TypedDict):
    """What ``Replicator.status()`` returns: ``memlocal sync status --json``,
    ``GET /api/sync/status`` and the dashboard's sync panel (with ``localOnly`` and ``message``
    added by ``MemoryBank.sync_status``)."""

    bucket: dict[str, str | None] | None  # name, source, endpoint, region
    bucketIdentity: dict[str, Any] | None  # the identity marker as this host last met it
    hydrated: dict[str, Any] | None  # when a pass of every profile completed (None: never)
    breaker: BreakerStatus
    database: str
    pending: PendingCounts
    lastPass: dict[str, Any] | None  # the last pass's report
    lastError: dict[str, Any] | None  # the last failed pass's error while it is current
    resolvedError: dict[str, Any] | None  # the last error once a later pass cleared it
    skipped: list[SkippedObject]
    record: RecordStatus
    passRunning: bool


# --- what a plugin provides ---------------------------------------------------------------------

class Replicator(Protocol):
    """Write-through to the bucket, provided by the ``sync`` package through an entry point.

    The store records each change in its own change log (the outbox) inside the change's
    transaction; ``push_*`` run after the commit and report whether the bucket now has it.
    """

    def push_saved(self, memory: Memory) -> bool: ...

    def push_deleted(self, memory: Memory) -> bool: ...

    def is_synced(self, memory: Memory) -> bool:
        """Whether the bucket holds this memory as stored here (nothing of it pending)."""
        ...

    def push_note(self, automation_id: str, note: "AutomationNote | None") -> bool:
        """Write an automation note (``None``: its removal) through to the bucket, after the
        store committed it with its outbox entry; ``True`` once the bucket has it. Never raises."""
        ...

    def refresh_if_stale(self, profile: str, ttl: float) -> bool:
        """Pull ``profile`` from the bucket if its last pull is older than ``ttl`` seconds."""
        ...

    def request_refresh(self, profile: str | None, ttl: float) -> float | None:
        """Queue a background pull of ``profile`` (``None``: every profile the bucket holds) if
        its last attempt is older than ``ttl`` s, without waiting; the local data's age in
        seconds (``None`` before the first pull)."""
        ...

    def status(self) -> ReplicatorStatus:
        """What ``memlocal sync status --json`` shows: the bucket and its source, what is pending,
        the last pass and error, skipped objects (the dashboard's sync panel)."""
        ...

    def prepare(self, profile: str | None = None, *, wait: bool = True) -> str | None:
        """The pull on open, called before every read (cheap after the first call). The first
        call pulls the whole bucket on a background thread when this index has never completed a
        pass against it (else queues a background refresh of ``profile``); with ``wait``, waits
        for that pull until ``sync.hydrate_deadline_s`` after it began, then lets the read answer
        from the local index (saying so once, and returning what it said to that read: it
        answers from part of the bucket). Never raises."""
        ...

    def close(self) -> None: ...


class NoteReplicator(Protocol):
    """Write-through of notes (what :class:`memlocal.services.automation.AutomationNotes` needs of a :class:`Replicator`)."""

    def push_note(self, automation_id: str, note: "AutomationNote | None") -> bool:
        """Write ``note`` (``None``: its removal) to the bucket; ``True`` once the bucket has it."""
        ...


class ReplicatorFactory(Protocol):
    """The ``memlocal.replicators`` entry point: a replicator of ``replica`` for the configured
    bucket, or ``None`` without one (``MemoryBank.open`` then runs local only)."""

    def __call__(self, config: "Config", replica: Replica, /) -> Replicator | None: ...


class Daemon(Protocol):
    """A sync daemon (``memlocal serve --with-sync`` runs it on a thread of its own)."""

    def run(self) -> None:
        """Run passes until :meth:`stop`."""
        ...

    def stop(self) -> None:
        """Ask :meth:`run` to return once the pass in flight has finished."""
        ...


# The retention policy the library hands a daemon: prunes every profile, returns
# ``{profile: memories pruned}`` (``MemoryBank.apply_retention``).
Retention = Callable[[], Mapping[str, int]]


class DaemonFactory(Protocol):
    """The ``memlocal.daemons`` entry point: a daemon sharing ``replica`` and running
    ``retention`` on its schedule, or ``None`` without a bucket."""

    def __call__(self, config: "Config", replica: Replica, retention: Retention, /) -> Daemon | None: ...


# Every entry point group and what its entries are (tests/test_plugins.py checks the installed
# ones against it; the commands are click commands, checked there).
EXTENSION_POINTS: Final[Mapping[str, object]] = {
    REPLICATORS: ReplicatorFactory,
    DAEMONS: DaemonFactory,
    COMMANDS: "click.Command",
}


@functools.cache
def discover(group: str) -> tuple[Any, ...]:
    """The objects registered under an entry point group, loaded. Looked up once per process:
    ``entry_points`` reads every installed distribution's metadata (~15 ms), and what is
    installed does not change under a running process."""
    from importlib.metadata import entry_points

    return tuple(ep.load() for ep in entry_points(group=group))


def replicator_factories() -> tuple[ReplicatorFactory, ...]:
    """The installed :class:`ReplicatorFactory` entries."""
    return discover(REPLICATORS)


def daemon_factories() -> tuple[DaemonFactory, ...]:
    """The installed :class:`DaemonFactory` entries."""
    return discover(DAEMONS)
