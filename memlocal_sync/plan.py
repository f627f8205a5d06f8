"""The reconciliation decisions, as pure functions over snapshots: no I/O, no clock, no randomness.

Three-way reconciliation per memory id, between

- **local**: the memory in this host's SQLite file (its content hash and unmerged access delta),
- **remote**: the bucket listing entry ``memory/<profile>/<id>.json`` (ETag, size), and
- **base**: what this host last synced for that id (the object's ETag and the content hash),
  which is how a disappearance is told apart from a creation, as rclone bisync does.

=====  ======  ====  ===========================================================================
local  remote  base  decision
=====  ======  ====  ===========================================================================
yes    no      no    CREATE: PUT with ``If-None-Match: *`` (a 412 means the id is taken: FETCH)
no     yes     no    FETCH the new remote memory (DELETE_REMOTE if the outbox holds its deletion)
yes    yes     no    FETCH: the same content is ours (adopt it); other content means another host
                     owns the id: re-id ours (REID happens after the fetch, see ``after_fetch``)
yes    no      yes   DELETE_LOCAL: deleted on another host (a deletion wins over access changes);
                     subject to the mass-delete guard
no     yes     yes   DELETE_REMOTE: deleted here
no     no      yes   FORGET the base: deleted on both sides
yes    yes     yes   remote ETag moved: FETCH (then merge); else local access delta or content
                     edit: UPDATE with ``If-Match`` the base ETag; else nothing at all
=====  ======  ====  ===========================================================================

Timestamps never decide anything here. A remote object that is too large or already known to be
bad (same ETag) is skipped: it never deletes or changes the local memory.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Collection, Iterable, Literal, Mapping

from memlocal.errors import ValidationError
from memlocal.model import parse_time

from .objects import Listed, parse_key, parse_note_key
from .tables import SyncBase


class Op(str, Enum):
    """What one action does; the engine turns each into bucket requests and local writes."""

    CREATE = "create"
    FETCH = "fetch"
    UPDATE = "update"
    DELETE_LOCAL = "delete_local"
    DELETE_REMOTE = "delete_remote"
    FORGET = "forget"
    REID = "reid"


@dataclass(frozen=True, slots=True)
class Local:
    """A local memory as the plan sees it."""

    id: str
    profile: str
    content_hash: str
    access_delta: int = 0
    inactive: bool = False  # isActive false (superseded): wins a conflict, as a deletion does


# What this host last synced for one id (a memory's or a note's): the sync table's row as it is
# (``memlocal_sync.tables.SyncBase``: id, profile, etag, content_hash, row_sig), read for every pass.
Base = SyncBase


@dataclass(frozen=True, slots=True)
class Action:
    """One unit of work. ``etag``: the listed ETag for FETCH, the ETag to match for UPDATE."""

    op: Op
    id: str
    profile: str
    etag: str = ""


@dataclass(frozen=True, slots=True)
class Skip:
    """A bucket object left alone this pass.

    ``persist``: a property of the object itself (bad key, too large, bad body), remembered with
    its ETag until it changes; otherwise a conflict that a later pass resolves.
    """

    key: str
    etag: str
    reason: str
    persist: bool = True


@dataclass(frozen=True, slots=True)
class Guard:
    """Local deletions the mass-delete guard held back for one profile."""

    profile: str
    deletions: int
    synced: int
    reason: str


@dataclass(slots=True)
class Plan:
    """The actions of one pass, the objects it leaves alone, and the deletions held back."""

    actions: list[Action] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)
    objects: int = 0  # entries in the listing

    def counts(self) -> Counter[str]:
        return Counter(a.op.value for a in self.actions)


@dataclass(frozen=True, slots=True)
class Kind:
    """What the three-way plan needs to know of one synced kind (memories, automation notes):
    its key scheme, how its deletions are guarded, and whether its ids are names.

    The decision table (``plan_pass``'s) is the same for every kind; the kinds differ in
    these facts only."""

    # The plan's name for the kind (the guard's wording: "memories", "automation notes").
    noun: str
    # A bucket key -> (profile, id), or ``None`` if the key is not one of this kind's.
    parse_key: Callable[[str], tuple[str, str] | None]
    # The skip reason of a key under the kind's prefix that is not one of its keys.
    not_a_key: str
    # A profile -> the guard's scope of its deletions.
    scope: Callable[[str], str]
    # Ids are names (an automation's own name), not random draws: the same id on two hosts is
    # the same thing, so "local and remote, no base" is always fetched and resolved, even by a
    # pull-only pass; a memory's id there may be another host's memory, resolved by a re-id,
    # which only a full pass writes.
    ids_are_names: bool
    # Whether an empty listing (for the unverified-bucket rule) counts every entry listed under
    # the prefix (memories), or only this kind's usable and unusable objects (notes).
    empty_counts_every_entry: bool


MEMORIES = Kind("memories", parse_key, "not a memory key (expected memory/<profile>/mem-<8 hex>.json)",
                lambda profile: profile, ids_are_names=False, empty_counts_every_entry=True)


def plan_pass(
    local: Mapping[str, Local],
    listing: Iterable[Listed],
    base: Mapping[str, Base],
    outbox_deletes: Mapping[str, str],
    known_bad: Mapping[str, tuple[str, str]],
    *,
    max_object_bytes: int,
    mass_delete_min: int,
    max_delete_share: float = 0.5,
    verified: bool = False,
    force: bool = False,
    pull_only: bool = False,
    explained: Collection[str] = frozenset(),
    kind: Kind = MEMORIES,
) -> Plan:
    """Decide one pass over the given scope (every profile, or those the caller snapshotted), of
    one ``kind`` (memories unless given; ``plan_notes`` passes ``NOTES``).

    ``outbox_deletes``: id -> profile of local deletions not yet known to be in the bucket.
    ``known_bad``: key -> (ETag, reason) of objects already found unusable. ``pull_only``: plan
    only what changes the local side (the REST read path's refresh). ``verified``: the bucket's
    identity marker is the one this host synced with (``sync.marker``); without that, an empty
    listing deletes nothing. Local deletions beyond ``mass_delete_min`` and over
    ``max_delete_share`` of the synced memories, of a profile or of the whole scope, are held
    (``hold_deletions``). ``explained``: ids whose deletion another host recorded in the bucket
    (a delete record, ``memlocal_sync.changes``): applied whatever the guard says.
    """
    plan = Plan()
    by_id: dict[str, list[tuple[str, Listed]]] = {}
    bad: dict[str, tuple[str, Listed]] = {}  # id -> (profile, entry) of unusable objects
    for entry in listing:
        plan.objects += 1
        if entry.key.endswith("/"):
            continue  # a "folder" marker some tools create
        parsed = kind.parse_key(entry.key)
        if parsed is None:
            plan.skips.append(Skip(entry.key, entry.etag, kind.not_a_key))
            continue
        profile, mid = parsed
        skip = unusable(entry, known_bad, max_object_bytes)
        if skip is not None:
            plan.skips.append(skip)
            bad[mid] = (profile, entry)
            continue
        by_id.setdefault(mid, []).append((profile, entry))

    deletions: Counter[str] = Counter()
    ids = sorted(set(local) | set(by_id) | set(base) | set(outbox_deletes) | set(bad))
    for mid in ids:
        loc, b = local.get(mid), base.get(mid)
        deleting = mid in outbox_deletes and loc is None
        home = loc.profile if loc else b.profile if b else outbox_deletes.get(mid)
        candidates = by_id.get(mid, [])
        bad_here = bad.get(mid)
        if home is None and len(candidates) > 1:  # one id under several profiles (almost never)
            home = first_copy(candidates)
        if home is None:
            home = candidates[0][0] if candidates else bad_here[0] if bad_here else None
        remote: Listed | None = None
        for profile, entry in candidates:
            if profile == home and remote is None:
                remote = entry
            else:
                # The same id under another profile: the one this host holds (or, holding none,
                # the older object) is the memory; this copy is left alone, every pass.
                plan.skips.append(Skip(entry.key, entry.etag, two_profiles(mid, home), persist=False))
        foreign = bool(candidates) and remote is None
        remote_bad = bad_here is not None and bad_here[0] == home and remote is None

        def add(op: Op, etag: str = "") -> None:
            assert home is not None
            plan.actions.append(Action(op, mid, home, etag))

        if remote_bad:
            # An unusable object never changes or deletes the local item; a local deletion
            # may still remove it (a deletion wins).
            if loc is None and (b is not None or deleting) and not pull_only:
                add(Op.DELETE_REMOTE)
            continue
        if loc is not None and remote is None and b is None:
            if foreign and not pull_only:
                add(Op.REID)  # another host's memory holds our id under its own profile
            elif not pull_only:
                add(Op.CREATE)
        elif loc is None and remote is not None and b is None:
            if deleting:
                if not pull_only:
                    add(Op.DELETE_REMOTE)
            else:
                add(Op.FETCH, remote.etag)
        elif loc is None and remote is None:
            if b is not None or deleting:
                add(Op.FORGET)  # gone on both sides (or a deletion of something never pushed)
        elif loc is not None and remote is not None and b is None:
            if kind.ids_are_names or not pull_only:
                add(Op.FETCH, remote.etag)  # adopt our own earlier PUT, resolve, or re-id on a collision
        elif loc is not None and remote is None and b is not None:
            add(Op.DELETE_LOCAL)
            if mid not in explained:
                deletions[kind.scope(home or "")] += 1
        elif loc is None and remote is not None and b is not None:
            if not pull_only:
                add(Op.DELETE_REMOTE)
        elif loc is not None and remote is not None and b is not None:
            if remote.etag != b.etag:
                add(Op.FETCH, remote.etag)
            elif (loc.access_delta > 0 or loc.content_hash != b.content_hash) and not pull_only:
                add(Op.UPDATE, b.etag)

    if deletions and not force:
        synced = Counter(kind.scope(x.profile) for x in base.values())
        empty = plan.objects == 0 if kind.empty_counts_every_entry else not by_id and not bad
        plan.guards = hold_deletions(deletions, synced, empty_unverified=empty and not verified,
                                     minimum=mass_delete_min, share=max_delete_share, noun=kind.noun)
        if plan.guards:  # either rule holds every unexplained local deletion of the pass
            plan.actions = [a for a in plan.actions if not (a.op is Op.DELETE_LOCAL and a.id not in explained)]
    return plan


def two_profiles(mid: str, home: str | None) -> str:
    """The skip reason of a copy of ``mid`` under another profile than ``home``'s."""
    return (f"id {mid} is also used in profile {home}, whose copy is the memory (the one hosts hold, or "
            f"the older object): this one is left alone")


def first_copy(candidates: Iterable[tuple[str, Listed]]) -> str:
    """The profile of the copy that is the memory, of one id that a host holding none of them sees
    under several profiles: the older object (the listing's LastModified), then the profile
    name, so that every host, a fresh one included, picks the same (docs/sync.md, "One id,
    one profile"). A hint's time is data here, never a clock: the listing says it."""
    def age(pe: tuple[str, Listed]) -> tuple[float, str]:
        try:
            when = parse_time(pe[1].modified) if pe[1].modified else None
        except (ValueError, ValidationError):  # a server's odd format: no age, name order
            when = None
        return (when.timestamp() if when is not None else float("inf"), pe[0])

    return min(candidates, key=age)[0]


def unusable(entry: Listed, known_bad: Mapping[str, tuple[str, str]], max_object_bytes: int) -> Skip | None:
    """Why a listed object is skipped without reading it (known bad at this ETag, too large)."""
    known = known_bad.get(entry.key)
    if known is not None and known[0] == entry.etag:
        return Skip(entry.key, entry.etag, known[1])
    if entry.size > max_object_bytes:
        return Skip(entry.key, entry.etag, f"object is {entry.size} bytes; the cap is {max_object_bytes}")
    return None


def hold_deletions(deletions: Mapping[str, int], synced: Mapping[str, int], *, empty_unverified: bool,
                   minimum: int, share: float, noun: str = "memories") -> list[Guard]:
    """The mass-delete guard (rclone bisync's ``--max-delete``, as a share and a minimum count),
    one table for memories (scopes are profiles) and automation notes (one scope).

    Three rules, all evaluated; if any trips, *every* scope's deletions are held (one guard per
    scope with deletions, each giving every reason), so that no rule can let part of a wipe
    through while another holds the rest:

    - an empty listing whose identity marker is not verified yet deletes nothing;
    - per scope: more than ``minimum`` deletions and more than ``share`` of its synced items;
    - the whole pass: the same bounds over every scope (many small profiles emptied at once).
    """
    if not deletions:
        return []
    reasons: list[str] = []
    total, total_synced = sum(deletions.values()), sum(synced.values())
    if empty_unverified:
        reasons.append(f"the bucket lists no {'objects' if noun == 'memories' else noun} but {total_synced} {noun} were synced from it and its identity "
                       f"marker is not verified yet: an emptied or wrong bucket never deletes local {noun}")
    bounds = f"(more than sync.max_delete_share = {share:g} and sync.mass_delete_min = {minimum})"
    for scope in sorted(deletions):
        n = deletions[scope]
        if n > minimum and n > share * synced.get(scope, 0):
            where = f" of profile {scope}" if noun == "memories" else ""
            reasons.append(f"would delete {n} of the {synced.get(scope, 0)} synced {noun}{where} {bounds}")
    if total > minimum and total > share * total_synced:
        reasons.append(f"would delete {total} of the {total_synced} synced {noun} in this pass {bounds}")
    if not reasons:
        return []
    reason = "; ".join(reasons)
    return [Guard(scope, deletions[scope], synced.get(scope, 0), reason) for scope in sorted(deletions)]


def held_summary(guards: Iterable[Guard], noun: str = "memories") -> str:
    """What a held pass did not delete, in full: ``held back 12 local deletions of memories
    (big 6, alice 2, ...)``."""
    guards = list(guards)
    total = sum(g.deletions for g in guards)
    parts = ", ".join(f"{g.profile} {g.deletions}" for g in guards if g.profile != NOTES_SCOPE)
    notes = sum(g.deletions for g in guards if g.profile == NOTES_SCOPE)
    detail = ", ".join(x for x in (parts and f"profiles {parts}", notes and f"automation notes {notes}") if x)
    return f"held back {total} local deletions ({detail})"


@dataclass(frozen=True, slots=True)
class AfterFetch:
    """What to do once a remote object has been read and validated.

    ``reid``: our local memory is a different one under the same id: give ours a new id first.
    ``skip``: leave both sides alone for now (a later full pass resolves it).
    ``content``: whose content the local copy (and any push) carries. ``base_hash``: the content
    hash to record with the fetched ETag. ``push``: write the merged object back with ``If-Match``.
    """

    reid: bool = False
    skip: bool = False
    content: Literal["remote", "local"] = "remote"
    base_hash: str = ""
    push: bool = False
    conflict: bool = False


def after_fetch(local: Local | None, base: Base | None, remote_profile: str, remote_hash: str,
                *, pull_only: bool = False, remote_inactive: bool = False) -> AfterFetch:
    """Decide how a fetched remote memory meets the local one (both sides' current state).

    Access counts are merged by the caller (remote count + local unmerged delta, lastAccessedAt
    the later of the two); this decides content and whether the merge must be pushed. When both
    sides changed the content and only one side made the memory inactive (superseded it), that
    side wins, as a deletion wins over an edit (docs/hygiene.md).
    """
    if local is None:
        return AfterFetch(content="remote", base_hash=remote_hash)
    if base is None:
        if local.profile == remote_profile and local.content_hash == remote_hash:
            # Our own object (a PUT whose base was never recorded), or an identical copy.
            return AfterFetch(content="remote", base_hash=remote_hash,
                              push=local.access_delta > 0 and not pull_only)
        # A different memory under our id: ours takes a new id (not on the read-only path).
        return AfterFetch(reid=not pull_only, skip=pull_only, content="local")
    local_edit = local.content_hash != base.content_hash
    remote_edit = remote_hash != base.content_hash
    if local_edit and (not remote_edit or (local.inactive and not remote_inactive)):
        # Only our content changed: keep it, take the remote's access metadata, push the merge.
        # The base keeps the old hash, so a pull-only refresh leaves the edit pending.
        return AfterFetch(content="local", base_hash=base.content_hash, push=not pull_only)
    # The remote's content wins when it changed (also on a true conflict: the bucket is the
    # shared copy and no clock may decide); local access bumps are still merged.
    return AfterFetch(content="remote", base_hash=remote_hash,
                      push=local.access_delta > 0 and not pull_only,
                      conflict=local_edit and remote_edit and local.content_hash != remote_hash)


# --- automation notes: memlocal/automations/<id>.json -------------------------------------------
#
# The same three sides per automation id, with the same table as memories, except that an id is
# an automation's own name, not a random draw: the same id on two hosts is the same automation,
# so "local and remote, no base" is a conflict to resolve (``note_winner``), never a re-id.

NOTES_SCOPE = "automation notes"


def _note_key(key: str) -> tuple[str, str] | None:
    nid = parse_note_key(key)
    return None if nid is None else ("", nid)


# Automation notes as a synced kind: no profiles (one guard scope), ids are the automations' names.
NOTES = Kind(NOTES_SCOPE, _note_key,
             "not an automation note key (expected memlocal/automations/<automation id>.json)",
             lambda _profile: NOTES_SCOPE, ids_are_names=True, empty_counts_every_entry=False)


def note_winner(local: tuple[int, str], remote: tuple[int, str]) -> Literal["local", "remote"]:
    """Which of two different notes of one automation wins: the later ``updatedAt``; on a tie
    the larger text (code point order). A total order on the notes themselves, so every host
    picks the same winner whichever syncs first."""
    return "local" if local > remote else "remote"


def plan_notes(
    local: Mapping[str, Local],
    listing: Iterable[Listed],
    base: Mapping[str, Base],
    outbox_deletes: Iterable[str],
    known_bad: Mapping[str, tuple[str, str]],
    *,
    max_object_bytes: int,
    mass_delete_min: int,
    max_delete_share: float = 0.5,
    verified: bool = False,
    force: bool = False,
    pull_only: bool = False,
) -> Plan:
    """Decide the automation notes of one full pass: ``plan_pass`` of the kind ``NOTES``, whose
    local side is a ``Local`` with no profile and no access bumps (``Action.profile`` is empty).

    =====  ======  ====  ======================================================================
    local  remote  base  decision
    =====  ======  ====  ======================================================================
    yes    no      no    CREATE (``If-None-Match: *``; a 412 means another host's: FETCH)
    no     yes     no    FETCH (DELETE_REMOTE if the outbox holds this host's clear of it)
    yes    yes     no    FETCH, then the same note is adopted, a different one is a conflict
    yes    no      yes   DELETE_LOCAL: cleared on another host (guarded like memories)
    no     yes     yes   DELETE_REMOTE: cleared here (a deletion wins, as for memories)
    no     no      yes   FORGET the base
    yes    yes     yes   remote ETag moved: FETCH (then resolve); else a local edit: UPDATE
                         with ``If-Match`` the base ETag; else nothing
    =====  ======  ====  ======================================================================
    """
    return plan_pass(local, listing, base, dict.fromkeys(outbox_deletes, ""), known_bad, max_object_bytes=max_object_bytes,
                     mass_delete_min=mass_delete_min, max_delete_share=max_delete_share, verified=verified,
                     force=force, pull_only=pull_only, kind=NOTES)
