"""The synced kinds: memories and automation notes, as the one pipeline of a pass sees them.

A pass plans every kind with one decision table (``plan.plan_pass``, told the kind's key scheme
by ``plan.Kind``) and runs every kind's actions through one executor (``engine.SyncEngine``: the
worker pool, the conditional writes and their 412 loops, the batches of effects). What differs
between kinds is here, behind ``SyncedKind``:

- the key scheme: ``key(profile, id)`` (and ``plan``, the plan's view of it), ``prefix``;
- the codec: a local record <-> an object body (``encode``, ``decode``);
- the local side: the port's calls for the kind (``load``, ``load_many``), through ``SyncState``;
- the effects a write, a deletion or a pull of the kind commits (``state.Effect``);
- how a fetched object meets the local record (``resolve``): a memory's three-way merge of content
  and access counts (``plan.after_fetch``), a note's later-``updatedAt`` rule (``plan.note_winner``).

``MEMORY`` and ``NOTE`` are the two kinds. Pure of I/O except through the ``Pipeline`` a resolve
is handed (the engine's conditional PUT and re-id) and ``SyncState``'s reads.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Mapping, Protocol, Sequence, TypeVar

from memlocal.model import COUNT_MAX, Memory, compute_staleness, to_us
from memlocal.plugins import AutomationNote, NoteState

from . import plan
from .objects import (
    NOTE_PREFIX, PREFIX, content_hash, decode, decode_note, encode, encode_note, note_hash, note_key, object_key,
)
from .plan import Action, Local, after_fetch, note_winner
from .state import (
    Changed, DeletedRemote, DeleteLocal, Effect, Forget, LocalRows, NoteDeletedRemote, NoteDeleteLocal, NoteForget,
    NoteSynced, Synced, SyncState, as_note,
)

log = logging.getLogger("memlocal_sync.engine")  # the pass's own lines, as before the kinds had a module

R = TypeVar("R")  # a kind's local record
V = TypeVar("V")  # a kind's decoded object


@dataclass(frozen=True, slots=True)
class Counters:
    """The report's counters of one kind (``PassReport.counts``), by event."""

    created: str  # a CREATE's PUT (If-None-Match) landed
    pushed: str  # a conditional PUT (If-Match) of the local record landed
    pulled: str  # a remote object new here was taken
    updated: str  # a remote change replaced the local record
    deleted_local: str
    deleted_remote: str
    conflicts: str  # both sides changed: the kind's rule picked one


class Pipeline(Protocol):
    """What a kind's ``resolve`` may ask of the engine running it."""

    state: SyncState

    def push(self, kind: "SyncedKind[Any, Any]", record: Any, etag: str, counts: Counter[str], *,
             attempt: int) -> list[Effect]:
        """PUT ``record`` with ``If-Match: etag`` (a 412 re-reads and resolves again)."""
        ...

    def reid(self, memory_id: str, counts: Counter[str]) -> list[Effect]:
        """Give the local memory ``memory_id`` a new id (another host's owns it), then push it."""
        ...


class SyncedKind(Protocol, Generic[R, V]):
    """What the pipeline needs of one synced kind (module docstring)."""

    plan: plan.Kind
    prefix: str
    what: str  # how a report's error line names one ("" for a memory: "fetch mem-…: …")
    counters: Counters

    def key(self, profile: str, item_id: str) -> str:
        """The object key of item ``item_id`` (of ``profile``, for a kind that has profiles)."""
        ...

    def key_of(self, record: R) -> tuple[str, str, str]:
        """``(key, profile, id)`` of a local record."""
        ...

    def load(self, state: SyncState, item_id: str) -> R | None:
        """The local record as stored now (``None``: gone here)."""
        ...

    def load_many(self, state: SyncState, ids: Sequence[str], seen: Mapping[str, R] | None = None) -> dict[str, R]:
        """Several at once, for a pass's creates (``{}``: each is loaded by its worker; ``seen``:
        the records the plan was made with, by id, whose derived values a record read equal to
        one may keep)."""
        ...

    def encode(self, record: R) -> bytes:
        """The object body of a local record."""
        ...

    def decode(self, data: bytes, profile: str, item_id: str) -> V:
        """The object's body, checked (``objects.BadObject`` says why not)."""
        ...

    def outgoing(self, record: R) -> R:
        """The record as a CREATE writes it."""
        ...

    def written(self, record: R, etag: str, *, created: bool) -> list[Effect]:
        """The effects of this host's PUT of ``record`` (now at ``etag``)."""
        ...

    def after_create(self, pipeline: Pipeline, record: R, etag: str, counts: Counter[str]) -> list[Effect]:
        """What follows a CREATE (a memory's unmerged access bumps, merged in)."""
        ...

    def deleted_remote(self, item_id: str) -> Effect:
        """The effect of this host's deletion of the object (its base goes, the outbox clears)."""
        ...

    def delete_local(self, action: Action, seen: R | None) -> Effect:
        """Deleted in the bucket by another host: delete here (``seen``: the record the plan saw)."""
        ...

    def gone(self, state: SyncState, item_id: str, profile: str, record: R | None = None) -> list[Effect]:
        """The object vanished under a conditional write of ours: the deletion wins."""
        ...

    def forget(self, item_id: str) -> Effect:
        """The effect of forgetting an item gone on both sides (its base and outbox entry)."""
        ...

    def resolve(self, pipeline: Pipeline, remote: V, etag: str, data: bytes, counts: Counter[str], *,
                pull_only: bool, attempt: int) -> list[Effect]:
        """A fetched, decoded object (at ``etag``) against the local record and the base."""
        ...


# --- memories: memory/<profile>/<id>.json -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A memory as the pipeline handles it: the row and its unmerged local access bumps (and,
    when known already, the content hash and signature of its content: neither depends on the
    access fields)."""

    memory: Memory
    delta: int
    content_hash: str | None = None
    signature: str | None = None


class MemoryKind:
    """Memories: a profile's objects, merged three ways with their access counts (docs/sync.md)."""

    plan = plan.MEMORIES
    prefix = PREFIX
    what = ""
    counters = Counters("pushed", "merged", "pulled", "updated", "deleted_local", "deleted_remote", "conflicts")

    def key(self, profile: str, item_id: str) -> str:
        return object_key(profile, item_id)

    def key_of(self, record: MemoryRecord) -> tuple[str, str, str]:
        m = record.memory
        return object_key(m.profile_name, m.id), m.profile_name, m.id

    def load(self, state: SyncState, item_id: str) -> MemoryRecord | None:
        loaded = state.load_local(item_id)
        return None if loaded is None else MemoryRecord(*loaded)

    def load_many(self, state: SyncState, ids: Sequence[str],
                  seen: Mapping[str, MemoryRecord] | None = None) -> dict[str, MemoryRecord]:
        # A first push is thousands of creates: one read per memory on the workers (each taking
        # the store's lock) was a fifth of its CPU. A memory still as the plan read it keeps the
        # content hash and signature computed then (hashing it again was a tenth of a push's CPU).
        seen = seen or {}
        out: dict[str, MemoryRecord] = {}
        for m, d in state.store.memories_with_deltas(None, ids=list(ids)):
            before = seen.get(m.id)
            out[m.id] = (MemoryRecord(m, d, before.content_hash, before.signature)
                         if before is not None and before.memory == m else MemoryRecord(m, d))
        return out

    def encode(self, record: MemoryRecord) -> bytes:
        return encode(record.memory)

    def decode(self, data: bytes, profile: str, item_id: str) -> Memory:
        return decode(data, profile, item_id)

    def outgoing(self, record: MemoryRecord) -> MemoryRecord:
        # A create never carries unmerged local bumps: the bucket's count must not depend on
        # whether this PUT's base got recorded (see the adopt path). The delta merges after.
        m = record.memory
        if record.delta == 0 and m.access_count >= 0:  # (nothing to take out: no copy of the memory)
            return record
        return MemoryRecord(m.with_changes(access_count=max(0, m.access_count - record.delta)), record.delta,
                            record.content_hash, record.signature)

    def written(self, record: MemoryRecord, etag: str, *, created: bool) -> list[Effect]:
        m = record.memory
        digest = record.content_hash if record.content_hash is not None else content_hash(m)
        if created:
            return [Synced(m, etag, digest, 0, "local", set_staleness=False, signature=record.signature)]
        return [Synced(m, etag, digest, record.delta, "local", signature=record.signature)]

    def after_create(self, pipeline: Pipeline, record: MemoryRecord, etag: str, counts: Counter[str]) -> list[Effect]:
        """Merge the unmerged access bumps into what was just created (at ``etag``), and push it."""
        if record.delta <= 0:
            return []
        loaded = self.load(pipeline.state, record.memory.id)
        if loaded is None or loaded.delta <= 0:
            return []
        body = merged(record.memory, loaded.memory, loaded.delta)
        return pipeline.push(self, MemoryRecord(body, loaded.delta), etag, counts, attempt=1)

    def deleted_remote(self, item_id: str) -> Effect:
        return DeletedRemote(item_id)

    def delete_local(self, action: Action, seen: MemoryRecord | None) -> Effect:
        return DeleteLocal(action.id, action.profile)

    def gone(self, state: SyncState, item_id: str, profile: str, record: MemoryRecord | None = None) -> list[Effect]:
        return [DeleteLocal(item_id, profile)]

    def forget(self, item_id: str) -> Effect:
        return Forget(item_id)

    def resolve(self, pipeline: Pipeline, remote: Memory, etag: str, data: bytes, counts: Counter[str], *,
                pull_only: bool, attempt: int) -> list[Effect]:
        state = pipeline.state
        memory_id, profile = remote.id, remote.profile_name
        key = object_key(profile, memory_id)
        rhash = content_hash(remote)
        loaded = state.load_local(memory_id)
        local = (Local(loaded[0].id, loaded[0].profile_name, content_hash(loaded[0]), loaded[1],
                       inactive=not loaded[0].is_active) if loaded else None)
        decision = after_fetch(local, state.load_base(memory_id), profile, rhash, pull_only=pull_only,
                               remote_inactive=not remote.is_active)
        if decision.skip:
            return []
        effects: list[Effect] = []
        if decision.reid:
            effects += pipeline.reid(memory_id, counts)
            local, loaded = None, None
            decision = after_fetch(None, None, profile, rhash)
        if decision.conflict:
            counts["conflicts"] += 1
            log.warning("%s changed here and in the bucket: the bucket's content wins", key)
        if decision.content == "remote":
            if local is None:
                counts["pulled"] += 1
            elif local.content_hash == rhash and (base := state.load_base(memory_id)) is None:
                counts["adopted"] += 1
                # Our own earlier write whose record may never have been journalled.
                effects.append(Changed(key, etag, "put", len(data)))
            elif local.content_hash == rhash and base is not None and base.content_hash != rhash:
                counts["adopted"] += 1
                # Our own edit already in the bucket (a pass killed after its PUT, before it
                # recorded it): journalled now, or followers would see it only in a full listing.
                effects.append(Changed(key, etag, "put", len(data)))
            else:
                counts["updated"] += 1
            effects.append(Synced(remote, etag, decision.base_hash, 0, "remote"))
        else:
            assert loaded is not None
            # Keep our content; take the remote's access metadata (delta is added on apply).
            own = loaded[0].with_changes(access_count=remote.access_count, last_accessed_at=remote.last_accessed_at)
            effects.append(Synced(own, etag, decision.base_hash, 0, "local", set_staleness=False,
                                  hash_is_memorys=decision.base_hash == content_hash(own)))
        if decision.push and loaded is not None:
            source = remote if decision.content == "remote" else loaded[0]
            delta = loaded[1]
            # The local lastAccessedAt goes in even when the content is the remote's: it is
            # what the unmerged bumps set, and the merge takes the later of the two.
            body = merged(remote, source, delta, local_last=loaded[0].last_accessed_at)
            effects += pipeline.push(self, MemoryRecord(body, delta), etag, counts, attempt=attempt)
        return effects


def records_seen(rows: LocalRows, local: Mapping[str, Local]) -> dict[str, MemoryRecord]:
    """The memories the plan read whole (``rows.pending``), with the content hash and signature
    computed for them, as ``seen`` records for the pass's ``MemoryKind.load_many``."""
    signatures = rows.signatures
    return {m.id: MemoryRecord(m, delta, entry.content_hash, signatures.get(m.id))
            for m, delta in rows.pending if (entry := local.get(m.id)) is not None}


def merged(remote: Memory, content: Memory, delta: int, *, local_last: datetime | None = None) -> Memory:
    """``content``'s content with the remote's access count plus ``delta`` and the latest
    lastAccessedAt of the remote, ``content`` and ``local_last`` (data, not an arbiter: a max is
    order-independent, so every host and the bucket converge on the later value). Staleness
    recomputed."""
    last_candidates = [t for t in (remote.last_accessed_at, content.last_accessed_at, local_last) if t is not None]
    last = max(last_candidates) if last_candidates else None
    count = min(COUNT_MAX, remote.access_count + delta)  # nothing pushed back leaves 0 … 2^53
    result = content.with_changes(access_count=count, last_accessed_at=last)
    return result.with_changes(staleness_score=compute_staleness(
        category=result.category, confidence=result.confidence, access_count=count,
        created_at=result.created_at, last_accessed_at=last,
    ))


# --- automation notes: memlocal/automations/<id>.json (docs/sync.md, "Automation notes") ---------


@dataclass(frozen=True, slots=True)
class NoteRecord:
    """An automation note as the pipeline handles it: its id and the stored ``(text, updated_us)``."""

    id: str
    state: NoteState


class NoteKind:
    """Automation notes: one object per automation, no profile, no access counts; a conflict goes
    to the later ``updatedAt`` (``plan.note_winner``)."""

    plan = plan.NOTES
    prefix = NOTE_PREFIX
    what = "automation note "
    counters = Counters("notes_pushed", "notes_pushed", "notes_pulled", "notes_updated", "notes_deleted_local",
                        "notes_deleted_remote", "note_conflicts")

    def key(self, profile: str, item_id: str) -> str:
        return note_key(item_id)

    def key_of(self, record: NoteRecord) -> tuple[str, str, str]:
        return note_key(record.id), "", record.id

    def load(self, state: SyncState, item_id: str) -> NoteRecord | None:
        current = state.store.note_get(item_id)
        return None if current is None else NoteRecord(item_id, current)

    def load_many(self, state: SyncState, ids: Sequence[str],
                  seen: Mapping[str, NoteRecord] | None = None) -> dict[str, NoteRecord]:
        return {}  # few, and small: each is read by its worker

    def encode(self, record: NoteRecord) -> bytes:
        return encode_note(as_note(record.id, record.state))

    def decode(self, data: bytes, profile: str, item_id: str) -> AutomationNote:
        return decode_note(data, item_id)

    def outgoing(self, record: NoteRecord) -> NoteRecord:
        return record

    def written(self, record: NoteRecord, etag: str, *, created: bool) -> list[Effect]:
        return [NoteSynced(record.id, record.state, etag, note_hash(as_note(record.id, record.state)), record.state)]

    def after_create(self, pipeline: Pipeline, record: NoteRecord, etag: str, counts: Counter[str]) -> list[Effect]:
        return []

    def deleted_remote(self, item_id: str) -> Effect:
        return NoteDeletedRemote(item_id)

    def delete_local(self, action: Action, seen: NoteRecord | None) -> Effect:
        assert seen is not None  # the plan deletes only a note it saw here
        return NoteDeleteLocal(action.id, seen.state)

    def gone(self, state: SyncState, item_id: str, profile: str, record: NoteRecord | None = None) -> list[Effect]:
        record = record or self.load(state, item_id)
        return [] if record is None else [NoteDeleteLocal(item_id, record.state)]

    def forget(self, item_id: str) -> Effect:
        return NoteForget(item_id)

    def resolve(self, pipeline: Pipeline, remote: AutomationNote, etag: str, data: bytes, counts: Counter[str], *,
                pull_only: bool, attempt: int) -> list[Effect]:
        """Take the remote note, keep ours (and push it), or adopt the same."""
        nid = remote.automation_id
        theirs: NoteState = (remote.note, to_us(remote.updated_at) or 0)
        rhash = note_hash(remote)
        current = self.load(pipeline.state, nid)
        if current is None:
            counts["notes_pulled"] += 1
            return [NoteSynced(nid, theirs, etag, rhash, None)]
        lhash = note_hash(as_note(nid, current.state))
        if lhash == rhash:  # the same note (our own earlier PUT, or written alike): adopt it
            return [NoteSynced(nid, theirs, etag, rhash, current.state)]
        base = pipeline.state.load_note_base(nid)
        local_edit = base is None or lhash != base.content_hash
        remote_edit = base is None or rhash != base.content_hash
        if local_edit and remote_edit:
            counts["note_conflicts"] += 1
            winner = note_winner((current.state[1], current.state[0]), (theirs[1], theirs[0]))
            log.warning("%s changed here and in the bucket: the %s note wins (the later updatedAt)", note_key(nid),
                        "local" if winner == "local" else "bucket's")
        else:
            winner = "local" if local_edit else "remote"
        if winner == "remote":
            counts["notes_updated"] += 1
            return [NoteSynced(nid, theirs, etag, rhash, current.state)]
        if pull_only:
            return []  # ours wins, and a read-only pass writes nothing: the next full pass pushes it
        return pipeline.push(self, current, etag, counts, attempt=attempt)


MEMORY = MemoryKind()
NOTE = NoteKind()
