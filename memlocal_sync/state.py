"""The sync's side of the local SQLite file: base (of memories and of automation notes),
skipped objects, pass records.

The sync declares its own tables, and their statements, in :mod:`memlocal_sync.tables` (a
migration set, ``SYNC_TABLES``, versioned by the ``meta`` key ``sync.schema``), run by the
store's one migration runner; the store owns
``memories`` and its change log (the outbox and each row's ``access_delta``), written inside the
store's own transactions. This module sees the store only through the replication port
(:mod:`memlocal.plugins`): synced changes go through a ``ReplicaTransaction``
(``apply_remote``, ``insert_remote_absent``, ``delete_from_remote``, ``reid``, ``clear_outbox``;
``BEGIN IMMEDIATE``, durable commit) together with the sync's own rows. The engine hands this
module *effects* in batches so that a pass over 10k memories is a few dozen commits, not 10k.
Every effect is idempotent and re-reads the row it changes inside the transaction, so an access
bump or a deletion that lands while a request is in flight is never lost or undone.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Iterable, Literal, Sequence, Union

from memlocal.plugins import (
    AutomationNote,
    NoteState,
    PendingCounts,
    Replica,
    ReplicaTransaction,
    SkippedObject,
)
from memlocal.errors import MemoryBankError
from memlocal.model import Memory, format_time, from_us, to_us, utcnow

from . import tables
from .objects import content_hash, note_hash, note_key, object_key
from .plan import Base, Local
from .tables import DeleteRecord, JournalEntry, SkippedRow, SyncBase

log = logging.getLogger(__name__)

META_BUCKET = "sync.bucket"
META_LAST_PASS = "sync.last_pass"
META_LAST_ERROR = "sync.last_error"
META_MARKER = "sync.marker"  # the bucket identity marker this host synced with (sync.marker module)
META_NOTES = "sync.notes"  # things the next pass must say (a base reset at start-up, say)
# The bucket (and marker id) against which this index last completed a pass of every profile: a
# host without it pulls the bucket when a bank opens, before its first read (docs/sync.md).
META_HYDRATED = "sync.hydrated"
# The change record as this host follows it (``memlocal_sync.changes``): the marker it belongs
# to, the cursor (last segment applied) and when it was last confirmed, the last segment number
# known and when, and when the last full listing completed.
META_CHANGES = "sync.changes"
META_HOST = "sync.host"  # this database's random id, named in the segments it publishes


def ensure_schema(store: Replica) -> None:
    """Create or migrate the sync's tables in ``store`` (cheap when they are current)."""
    store.migrate(tables.SYNC_TABLES)


# --- effects ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocalRows:
    """The local side of a pass as read (``SyncState.local_rows``): entries whose content hash
    is known already, and the memories still to hash, with their unmerged access bumps."""

    ready: dict[str, Local]
    pending: list[tuple[Memory, int]]
    signatures: dict[str, str] = field(default_factory=dict)  # of the pending memories, by id

    @property
    def profiles(self) -> set[str]:
        return {e.profile for e in self.ready.values()} | {m.profile_name for m, _ in self.pending}

    def ids(self) -> set[str]:
        """The ids of every memory read."""
        return set(self.ready) | {m.id for m, _ in self.pending}


@dataclass(frozen=True, slots=True)
class Synced:
    """The bucket holds ``memory`` under ``etag``: record the base and fold it into the local row.

    ``content``: ``remote`` replaces the local content with the memory's (a pull); ``local``
    keeps the local content (our own push). The local access count becomes the memory's count
    plus whatever local delta is still unmerged (``sent_delta`` of it went out with this write).
    """

    memory: Memory
    etag: str
    base_hash: str
    sent_delta: int = 0
    content: Literal["remote", "local"] = "remote"
    set_staleness: bool = True
    # ``base_hash`` is ``memory``'s own content hash (False: an older base kept for a local edit),
    # so the base may record ``memory``'s content signature beside it.
    hash_is_memorys: bool = True
    # ``memory``'s content signature (``Replica.signature``), when already computed.
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class DeletedRemote:
    """The object is gone from the bucket because this host deleted it."""

    id: str


@dataclass(frozen=True, slots=True)
class DeleteLocal:
    """Another host deleted the memory: delete it here too (a deletion wins)."""

    id: str
    profile: str


@dataclass(frozen=True, slots=True)
class Forget:
    """Nothing left on either side: drop the base and any outbox entry."""

    id: str


@dataclass(frozen=True, slots=True)
class SkipObject:
    key: str
    etag: str
    reason: str


@dataclass(frozen=True, slots=True)
class Unskip:
    key: str


@dataclass(frozen=True, slots=True)
class NoteSynced:
    """The bucket holds ``note`` (text, updated_us) of automation ``id`` under ``etag``: record
    the base, and make it the local note if the local one is still ``expected`` (``None``:
    absent; ``note`` itself for a note this host pushed)."""

    id: str
    note: NoteState
    etag: str
    content_hash: str
    expected: NoteState | None


@dataclass(frozen=True, slots=True)
class NoteDeletedRemote:
    """The note's object is gone from the bucket because this host cleared the note."""

    id: str


@dataclass(frozen=True, slots=True)
class NoteDeleteLocal:
    """Another host cleared the note: clear it here too, if it is still ``expected``."""

    id: str
    expected: NoteState


@dataclass(frozen=True, slots=True)
class NoteForget:
    """No note on either side: drop the base and a queued clear."""

    id: str


@dataclass(frozen=True, slots=True)
class Changed:
    """This host wrote ``key`` (``put``, now at ``etag``) or deleted it (``delete``): journal it
    for the change record, in the same transaction as the write's own effect."""

    key: str
    etag: str
    op: str
    size: int = 0


Effect = Union[Synced, DeletedRemote, DeleteLocal, Forget, SkipObject, Unskip, NoteSynced, NoteDeletedRemote,
               NoteDeleteLocal, NoteForget, Changed]


class SyncState:
    """Reads and writes of the sync tables on one ``Replica`` (created here if missing)."""

    def __init__(self, store: Replica) -> None:
        self.store = store
        try:
            ensure_schema(store)
        except MemoryBankError as exc:  # a read-only or busy database must not stop the bank opening
            log.warning("could not create the sync's tables: %s", exc)

    # --- snapshots for the plan ---------------------------------------------------------------

    def local_entries(self, profiles: Sequence[str] | None = None, *, hashes: bool = True) -> dict[str, Local]:
        """The local side of the plan. ``hashes=False`` (a pull-only refresh, which never pushes
        content) reads three columns instead of every row whole."""
        with self.store.snapshot():
            base = self.base_entries(profiles) if hashes else {}
            rows = self.local_rows(profiles, hashes=hashes, base=base)
        return self.local_entries_from(rows)

    def local_rows(self, profiles: Sequence[str] | None = None, *, hashes: bool = True,
                   base: dict[str, Base] | None = None) -> LocalRows:
        """What ``local_entries`` is made of, read at one moment (call it inside the store's
        ``snapshot()``). A memory whose content signature is the one ``base`` recorded with its
        content hash takes that hash as it is; only the others are read whole, to be hashed
        (``local_entries_from``). Without ``hashes`` (a pull-only refresh, which never pushes
        content): ids, profiles and deltas only."""
        if not hashes:
            return LocalRows({r.id: Local(r.id, r.profile, "", r.delta) for r in self.store.access_deltas(profiles)}, [])
        base = base or {}
        ready: dict[str, Local] = {}
        stale: dict[str, str] = {}
        for r in self.store.content_signatures(profiles):
            b = base.get(r.id)
            if b is not None and b.row_sig == r.signature and b.profile == r.profile:
                ready[r.id] = Local(r.id, r.profile, b.content_hash, r.delta, inactive=not r.active)
            else:
                stale[r.id] = r.signature
        if len(stale) > len(ready):  # mostly unknown (a first pass after an upgrade): one scan
            pending = [r for r in self.store.memories_with_deltas(profiles) if r[0].id in stale]
        else:
            pending = self.store.memories_with_deltas(profiles, ids=list(stale)) if stale else []
        return LocalRows(ready, pending, stale)

    def remember_signatures(self, rows: LocalRows, local: dict[str, Local], base: dict[str, Base]) -> int:
        """Record the content signature of each memory just hashed whose hash is its base's (an
        unchanged memory whose signature was not known: a base from before signatures, or a row
        rewritten to the same content), so the next pass takes its hash as it is. Guarded by the
        hash, so a base that changed meanwhile is left alone. Returns how many were recorded."""
        known = [(mid, local[mid].content_hash, sig) for mid, sig in rows.signatures.items()
                 if mid in local and (b := base.get(mid)) is not None and b.content_hash == local[mid].content_hash]
        if known:
            with self.store.transaction() as c:
                tables.set_row_sigs(c.tables, known)
        return len(known)

    @staticmethod
    def local_entries_from(rows: LocalRows) -> dict[str, Local]:
        """``local_entries`` of rows read by ``local_rows`` (CPU only: the content hashes of the
        memories that need one)."""
        return {**rows.ready, **{m.id: Local(m.id, m.profile_name, content_hash(m), delta, inactive=not m.is_active)
                                 for m, delta in rows.pending}}

    def base_entries(self, profiles: Sequence[str] | None = None) -> dict[str, Base]:
        with self.store.snapshot() as t:
            return {b.id: b for b in tables.bases(t, profiles)}

    def outbox_deletes(self, profiles: Sequence[str] | None = None) -> dict[str, str]:
        return {mid: profile for mid, (profile, _op) in self.store.outbox(profiles, op="delete").items()}

    def known_bad(self, prefix: str = "") -> dict[str, tuple[str, str]]:
        with self.store.snapshot() as t:
            return {r.key: (r.etag, r.reason) for r in tables.skipped(t, prefix)}

    def note_entries(self) -> tuple[dict[str, NoteState], dict[str, Base], set[str]]:
        """The automation notes' sides of the plan, read at one moment: the local notes
        ``{id: (text, updated_us)}``, the base and the queued clears."""
        with self.store.snapshot() as t:
            notes = {a: (n, u) for a, n, u in self.store.notes()}
            bases = tables.note_bases(t)
            deletes = set(self.store.outbox(op="delete", kind="note"))
        return notes, {b.id: b for b in bases}, deletes

    @staticmethod
    def note_side(automation_id: str, note: NoteState) -> Local:
        """How the plan sees a local note: as a memory with no profile and no access bumps, by its
        content hash (a conflict's winner is decided after the fetch, ``plan.note_winner``)."""
        return Local(automation_id, "", note_hash(as_note(automation_id, note)))

    def load_note_base(self, automation_id: str) -> Base | None:
        with self.store.snapshot() as t:
            bases = tables.note_bases(t, automation_id)
        return bases[0] if bases else None

    def load_local(self, memory_id: str) -> tuple[Memory, int] | None:
        return self.store.memory_with_delta(memory_id)

    def load_base(self, memory_id: str) -> Base | None:
        with self.store.snapshot() as t:
            bases = tables.bases(t, ids=[memory_id])
        return bases[0] if bases else None

    # --- effects ----------------------------------------------------------------------------------

    def apply(self, effects: Iterable[Effect]) -> None:
        """Apply effects in order, in one durable transaction."""
        effects = list(effects)
        if not effects:
            return
        now_us = to_us(utcnow())
        # The journal's entries (``Changed``) are written last, in their order, in one statement:
        # nothing else reads or writes the journal, so they commute with every other effect, and
        # a push's Synced effects (each followed by its Changed) then make long runs.
        journal = [eff for eff in effects if type(eff) is Changed]
        if journal:
            effects = [eff for eff in effects if type(eff) is not Changed]
        with self.store.transaction() as c:
            t = c.tables
            i = 0
            while i < len(effects):
                eff = effects[i]
                if isinstance(eff, Synced):
                    # A run of consecutive Synced effects of distinct ids goes in a few statements
                    # (a fresh host's pull is thousands of them); ids are independent rows, so
                    # only a repeated id has to wait for the next run.
                    run: list[Synced] = []
                    seen: set[str] = set()
                    for nxt in islice(effects, i, None):
                        if not isinstance(nxt, Synced) or nxt.memory.id in seen:
                            break
                        run.append(nxt)
                        seen.add(nxt.memory.id)
                    i += len(run)
                    # Ids are independent rows: this host's own writes (the local content kept)
                    # and the pulls go their own ways.
                    own = [e for e in run if e.content == "local"]
                    if own:
                        self._apply_pushed(c, own, now_us)
                        run = [e for e in run if e.content != "local"] if len(own) < len(run) else []
                    if run:
                        self._apply_synced(c, run, now_us)
                    continue
                i += 1
                if isinstance(eff, DeletedRemote):
                    tables.drop_bases(t, [eff.id])
                    c.clear_outbox(eff.id, "delete")
                elif isinstance(eff, DeleteLocal):
                    c.delete_from_remote(eff.id, eff.profile)
                    tables.drop_bases(t, [eff.id])
                elif isinstance(eff, Forget):
                    tables.drop_bases(t, [eff.id])
                    c.clear_outbox(eff.id, only_if_absent=True)
                elif isinstance(eff, SkipObject):
                    tables.skip(t, SkippedRow(eff.key, eff.etag, eff.reason, now_us))
                elif isinstance(eff, Unskip):
                    tables.unskip(t, [eff.key])
                elif isinstance(eff, NoteSynced):
                    c.apply_remote_note(eff.id, eff.note, eff.expected)
                    tables.put_note_base(t, SyncBase(eff.id, "", eff.etag, eff.content_hash), now_us)
                    tables.unskip(t, [note_key(eff.id)])
                elif isinstance(eff, NoteDeletedRemote):
                    tables.drop_note_bases(t, [eff.id])
                    c.clear_outbox(eff.id, "delete", only_if_absent=True, kind="note")
                elif isinstance(eff, NoteDeleteLocal):
                    c.delete_note_from_remote(eff.id, eff.expected)
                    tables.drop_note_bases(t, [eff.id])
                elif isinstance(eff, NoteForget):
                    tables.drop_note_bases(t, [eff.id])
                    c.clear_outbox(eff.id, "delete", only_if_absent=True, kind="note")
                else:  # pragma: no cover - a new effect type without a branch is a bug
                    raise TypeError(f"unknown effect {eff!r}")
            if journal:
                tables.journal_add(t, [(e.key, e.etag, e.op, e.size) for e in journal])

    def _apply_pushed(self, c: ReplicaTransaction, run: list[Synced], now_us: int) -> None:
        """Fold ``run`` (Synced effects of distinct ids whose local content stays: this host's
        own writes) into the store in a few statements (``apply_pushed``), and record their bases."""
        done = c.apply_pushed([(e.memory, e.sent_delta, e.set_staleness) for e in run])
        self._record_bases(c, [e for e in run if e.memory.id in done], now_us)

    def _apply_synced(self, c: ReplicaTransaction, run: list[Synced], now_us: int) -> None:
        """Fold ``run`` (Synced effects of distinct ids) into the store and record their bases."""
        pulled = [e for e in run if e.content == "remote"]
        inserted = c.insert_remote_absent([e.memory for e in pulled]) if len(pulled) > 1 else set()
        recorded: list[Synced] = []
        for eff in run:
            if eff.memory.id not in inserted and not c.apply_remote(
                    eff.memory, content=eff.content, sent_delta=eff.sent_delta,
                    set_staleness=eff.set_staleness):
                continue  # the id belongs to a memory of another profile here
            recorded.append(eff)
        self._record_bases(c, recorded, now_us)

    def _record_bases(self, c: ReplicaTransaction, recorded: list[Synced], now_us: int) -> None:
        """The bases of ``recorded`` (each effect's object, as synced), and their keys no longer skipped."""
        store = self.store
        tables.put_bases(
            c.tables, [SyncBase(e.memory.id, e.memory.profile_name, e.etag, e.base_hash,
                      (e.signature or store.signature(e.memory)) if e.hash_is_memorys else None) for e in recorded],
            now_us)
        tables.unskip(c.tables, [object_key(e.memory.profile_name, e.memory.id) for e in recorded])

    def reid(self, old_id: str, new_id: str) -> Memory | None:
        """Move the local memory ``old_id`` to ``new_id`` (another host owns ``old_id``).

        No deletion is queued for ``old_id``: the bucket's object under it is not ours.
        """
        with self.store.transaction() as c:
            if not c.reid(old_id, new_id):
                return None
            tables.drop_bases(c.tables, [old_id])
        loaded = self.load_local(new_id)
        return loaded[0] if loaded else None

    # --- bucket identity, records, status -----------------------------------------------------

    def ensure_bucket(self, identity: str) -> bool:
        """Tie the base to one bucket. Another bucket (or endpoint) starts from an empty base, so
        that its different contents read as "not synced yet", never as deletions. Returns
        whether the base was reset."""
        current = self.store.meta_get(META_BUCKET)
        if current == identity:
            return False
        with self.store.transaction() as c:
            had_base = tables.has_base(c.tables) or bool(tables.note_bases(c.tables))
            tables.clear(c.tables)
            c.meta_delete(META_MARKER)
            c.meta_delete(META_HYDRATED)
            c.meta_delete(META_CHANGES)
            c.meta_set(META_BUCKET, identity)
        if had_base:
            self.add_note(f"the configured bucket changed to {identity.replace('|', ' ')}: starting from an "
                          "empty base, nothing deleted")
        return had_base

    def reset_base(self) -> None:
        """Forget everything synced with the bucket (another bucket under the same name): its
        contents then read as "not synced yet", never as deletions. The outbox stays."""
        with self.store.transaction() as c:
            tables.clear(c.tables)
            c.meta_delete(META_HYDRATED)
            c.meta_delete(META_CHANGES)

    def hydrated(self, bucket: str) -> dict[str, Any] | None:
        """When this index completed a pass of every profile against ``bucket`` (its identity:
        endpoint and name) and the marker it met, or ``None`` (never: a fresh host)."""
        value = self.get_json(META_HYDRATED)
        return value if isinstance(value, dict) and value.get("bucket") == bucket else None

    def set_hydrated(self, bucket: str, marker_id: str) -> None:
        """Record that a pass of every profile against ``bucket`` completed (kept until the
        configured bucket or its marker changes)."""
        current = self.hydrated(bucket)
        if current is None or current.get("marker") != marker_id:
            self.set_json(META_HYDRATED, {"bucket": bucket, "marker": marker_id, "at": format_time(utcnow())})

    # --- the change record's local side (memlocal_sync.changes) --------------------------------

    def host_id(self) -> str:
        """This database's random id (made once), named in the segments it publishes."""
        current = self.store.meta_get(META_HOST)
        if current:
            return current
        import secrets

        self.store.meta_set(META_HOST, secrets.token_hex(8))
        return self.store.meta_get(META_HOST) or ""

    def changes_state(self) -> dict[str, Any]:
        state = self.get_json(META_CHANGES)
        return state if isinstance(state, dict) else {}

    def update_changes(self, marker_id: str, **values: Any) -> None:
        """Merge ``values`` into the change-record state of ``marker_id`` (another marker's state
        is dropped). ``cursor_from``/``cursor``: move the cursor only if it is still there;
        ``tail``: only forward."""
        with self.store.transaction() as c:
            stored = c.meta_get(META_CHANGES)
            try:
                state = json.loads(stored) if stored is not None else {}
            except ValueError:
                state = {}
            if not isinstance(state, dict) or state.get("marker") != marker_id:
                state = {"marker": marker_id}
            expected = values.pop("cursor_from", "any")
            if "cursor" in values and expected != "any" and state.get("cursor") != expected:
                values.pop("cursor")
                values.pop("checked", None)
            tail = values.pop("tail", None)
            if tail is not None and (not isinstance(state.get("tail"), int) or tail >= state["tail"]):
                state["tail"] = tail
                state["tailAt"] = values.get("now", state.get("tailAt"))
            values.pop("now", None)
            state.update(values)
            c.meta_set(META_CHANGES, json.dumps(state, sort_keys=True))

    def journal(self, limit: int) -> list[JournalEntry]:
        """The oldest ``limit`` writes not yet published: ``(n, key, etag, op, size)``."""
        with self.store.snapshot() as t:
            return tables.journal(t, limit)

    def journal_done(self, upto: int) -> None:
        with self.store.transaction() as c:
            tables.journal_done(c.tables, upto)

    def record_deletes(self, records: Iterable[tuple[str, str, int]]) -> None:
        """Keep delete records read from the bucket: ``(key, id, seq)``."""
        now_us = to_us(utcnow())
        with self.store.transaction() as c:
            tables.put_delete_records(c.tables, [DeleteRecord(k, i, s, now_us) for k, i, s in records])

    def delete_records(self) -> set[str]:
        """The keys of the delete records kept."""
        with self.store.snapshot() as t:
            return {r.key for r in tables.delete_records(t)}

    def forget_delete_records(self, keys: Iterable[str]) -> None:
        """Drop delete records a listing contradicts (their object is in the bucket)."""
        with self.store.transaction() as c:
            tables.drop_delete_records(c.tables, list(keys))

    def explained(self) -> set[str]:
        """Ids whose disappearance a delete record explains."""
        with self.store.snapshot() as t:
            return {r.id for r in tables.delete_records(t)}

    def forget_deletes_before(self, before_us: int) -> None:
        with self.store.transaction() as c:
            tables.drop_delete_records_before(c.tables, before_us)

    def is_empty(self) -> bool:
        """No memory here and nothing synced: a fresh host."""
        with self.store.snapshot() as t:
            return not self.store.profiles() and not tables.has_base(t)

    def local_work_ids(self) -> set[str]:
        """Ids with something for the bucket: queued saves and deletions, unmerged access bumps.
        (A memory written without a change-log entry, as ``Store.upsert`` does, waits for the
        next full listing.)"""
        return self.store.changed_ids()

    def base_for(self, ids: Iterable[str]) -> dict[str, Base]:
        with self.store.snapshot() as t:
            return {b.id: b for b in tables.bases(t, ids=list(ids))}

    def add_note(self, note: str) -> None:
        """Keep ``note`` for the next pass's report (said once, then dropped)."""
        notes = self.get_json(META_NOTES)
        notes = notes if isinstance(notes, list) else []
        if note not in notes:
            self.set_json(META_NOTES, [*notes[-19:], note])

    def pop_notes(self) -> list[str]:
        notes = self.get_json(META_NOTES)
        if not notes:
            return []
        with self.store.transaction() as c:
            c.meta_delete(META_NOTES)
        return [str(n) for n in notes] if isinstance(notes, list) else []

    def forget_base(self, profiles: Sequence[str] | None = None) -> int:
        """Drop the base (``sync run --reupload``): every local memory then counts as not yet
        in the bucket and every remote one as new; nothing is deleted either way."""
        with self.store.transaction() as c:
            if profiles is None:  # automation notes belong to no profile: a full reupload only
                tables.drop_note_bases(c.tables)
            return tables.drop_profile_bases(c.tables, profiles)

    def get_json(self, key: str) -> Any:
        text = self.store.meta_get(key)
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    def set_json(self, key: str, value: Any) -> None:
        self.store.meta_set(key, json.dumps(value, ensure_ascii=False, sort_keys=True))

    def _local_vs_base(self) -> tuple[int, int]:
        """(memories with no base, memories with a base and unmerged access bumps)."""
        with self.store.snapshot() as t:
            base = tables.base_ids(t)
            deltas = self.store.access_deltas()
        saves = access = 0
        for r in deltas:
            if r.id not in base:
                saves += 1
            elif r.delta > 0:
                access += 1
        return saves, access

    def is_synced(self, memory: Memory) -> bool:
        """Whether the last sync recorded exactly this content and no outbox entry waits."""
        base = self.load_base(memory.id)
        if base is None or base.content_hash != content_hash(memory):
            return False
        return memory.id not in self.store.outbox()

    def pending(self) -> PendingCounts:
        """What this host has that the bucket does not (yet)."""
        saves, access = self._local_vs_base()
        outbox = self.store.outbox()
        deletes = sum(1 for _p, op in outbox.values() if op == "delete")
        notes = len(self.store.outbox(kind="note"))
        return PendingCounts(total=saves + deletes + access + notes, saves=saves, deletes=deletes,
                             accessUpdates=access, outbox=len(outbox), automationNotes=notes)

    def has_local_work(self) -> bool:
        """Check for the daemon's wake-ups: anything to push?"""
        if self.store.outbox() or self.store.outbox(kind="note"):
            return True
        saves, access = self._local_vs_base()
        return bool(saves or access)

    def skipped(self) -> list[SkippedObject]:
        with self.store.snapshot() as t:
            return [SkippedObject(key=r.key, etag=r.etag, reason=r.reason, seenAt=format_time(from_us(r.seen_us)))
                    for r in tables.skipped(t)]


def as_note(automation_id: str, note: NoteState) -> AutomationNote:
    """A stored note ``(text, updated_us)`` as an ``AutomationNote``."""
    return AutomationNote(automation_id, note[0], from_us(note[1]))
