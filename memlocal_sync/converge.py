"""Hygiene across hosts, after a pass has pulled the bucket: the retirements that
``memlocal.hygiene.rules.converge`` decides, written to the bucket first and then here.

Two hosts that saved the same text, or superseded the same memory, before seeing each other's
write hold two active memories where one is meant. Once a pass has pulled, every host computes
the same retirements from what the bucket holds (docs/hygiene.md, "Across hosts"). Each
retirement is a conditional write of the retired copy (``If-Match`` the ETag this host synced):
only one host's write of a given retirement can succeed, and only that host merges a duplicate's
access count into the winner, so counts are merged at most once. A 412 means another host wrote
the object meanwhile: the next pass fetches it and decides again.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Iterable, Sequence

from memlocal.hygiene.rules import SUPERSEDED_BY, Retirement, converge
from memlocal.model import Memory

from .bucket import ObjectMissing, PreconditionFailed
from .objects import content_hash, encode, object_key
from .state import Changed, Synced, SyncState

if TYPE_CHECKING:
    from .bucket import BucketClient

log = logging.getLogger(__name__)


class InBucket:
    """``id in in_bucket``: the local copy of the memory is the one the bucket holds (a base
    whose content hash is the local content's), computed once per id."""

    def __init__(self, state: SyncState, profile: str) -> None:
        self.state = state
        self.profile = profile
        self._known: dict[str, bool] = {}

    def __contains__(self, memory_id: object) -> bool:
        if not isinstance(memory_id, str):
            return False
        if memory_id not in self._known:
            base = self.state.load_base(memory_id)
            loaded = self.state.load_local(memory_id) if base is not None else None
            self._known[memory_id] = (loaded is not None and base is not None and base.profile == self.profile
                                      and loaded[0].profile_name == self.profile
                                      and base.content_hash == content_hash(loaded[0]))
        return self._known[memory_id]


def plan(state: SyncState, profiles: Sequence[str] | None, *, duplicates: bool) -> list[tuple[str, Retirement]]:
    """``(profile, retirement)`` for every profile in scope (pure decisions over the local store)."""
    replica = state.store
    by_profile: dict[str, list[Memory]] = {}
    for m in replica.convergence_candidates(profiles):
        by_profile.setdefault(m.profile_name, []).append(m)
    out: list[tuple[str, Retirement]] = []
    for profile, candidates in sorted(by_profile.items()):
        cache: dict[str, Memory | None] = {m.id: m for m in candidates}

        def get(memory_id: str, profile: str = profile, cache: dict[str, Memory | None] = cache) -> Memory | None:
            if memory_id not in cache:
                loaded = replica.memory_with_delta(memory_id)
                cache[memory_id] = loaded[0] if loaded is not None and loaded[0].profile_name == profile else None
            return cache[memory_id]

        out += [(profile, r) for r in converge(candidates, get, InBucket(state, profile), duplicates=duplicates)]
    return out


# Profiles a pull-only pass changed, which the next full pass converges (``meta``, JSON list).
META_PENDING = "sync.converge_pending"


def defer(state: SyncState, profiles: Iterable[str]) -> None:
    """Remember ``profiles`` for the next full pass (a pull-only pass writes nothing to the bucket)."""
    wanted = set(profiles)
    if not wanted:
        return
    have = state.get_json(META_PENDING)
    have = set(have) if isinstance(have, list) else set()
    if not wanted <= have:
        state.set_json(META_PENDING, sorted(have | wanted))


def run(state: SyncState, bucket: "BucketClient", touched: Iterable[str], counts: Counter[str], *,
        duplicates: bool) -> set[str]:
    """Decide and write this host's retirements in the profiles this pass ``touched`` and those a
    pull-only pass deferred (a profile nothing reached since its last convergence has nothing new
    to converge, so a pass with nothing to do costs nothing here); returns the profiles whose
    objects changed. One retirement's failure is left to the next pass."""
    pending = state.get_json(META_PENDING)
    profiles = sorted(set(touched) | (set(pending) if isinstance(pending, list) else set()))
    if not profiles:
        return set()
    changed: set[str] = set()
    for profile, r in plan(state, profiles, duplicates=duplicates):
        loaded, base = state.load_local(r.loser), state.load_base(r.loser)
        if loaded is None or base is None or not loaded[0].is_active:
            continue
        loser, delta = loaded
        retired = loser.with_changes(is_active=False, extra={**loser.extra, SUPERSEDED_BY: r.winner})
        key = object_key(profile, r.loser)
        body = encode(retired)
        try:
            etag = bucket.replace(key, body, base.etag)
        except (PreconditionFailed, ObjectMissing):
            continue  # another host changed or deleted it meanwhile: the next pass decides again
        changed.add(profile)
        counts["retired"] += 1
        if r.duplicate and loser.access_count:
            with state.store.transaction() as t:
                t.merge_access(r.winner, loser.access_count, loser.last_accessed_at)
        # Journalled for the change record: other hosts' cheap passes see the retirement.
        state.apply([Synced(retired, etag, content_hash(retired), delta, "remote"), Changed(key, etag, "put", len(body))])
        log.info("%s retired: %s of %s (the bucket's copies converge)", r.loser,
                 "a duplicate" if r.duplicate else "a concurrent successor", r.winner)
    if pending:
        state.set_json(META_PENDING, [])
    return changed
