"""A memory's history and its end: the supersession chain, restore, delete, prune and the
configured retention policy (docs/hygiene.md, "Supersession" and "Retention").

:class:`memlocal.MemoryBank` delegates here with its store and replicator: every write is
written through to the bucket as a save or a deletion is, and every memory returned is redacted
as the faces show it (:func:`memlocal.services.shown.shown`).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import NotFoundError
from ..model import Memory, utcnow, validate_id, validate_profile
from ..services.shown import shown

if TYPE_CHECKING:
    from datetime import datetime

    from ..config import Config
    from ..hygiene.rules import RetentionRule
    from ..plugins import Replicator
    from ..store import Store


@dataclass(frozen=True, slots=True)
class Pruned:
    """A memory a prune removed (or would remove), and why."""

    memory: Memory
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"memory": self.memory.to_dict(), "reason": self.reason}


def delete(store: "Store", replicator: "Replicator | None", profile: str, memory_id: str) -> Memory:
    """Delete one memory of ``profile`` (``NotFoundError`` if it is not there), the deletion
    written through to the bucket."""
    validate_profile(profile)
    validate_id(memory_id)
    memory = store.delete(profile, memory_id)
    if replicator is not None:
        replicator.push_deleted(memory)
    return shown(memory)


def restore(store: "Store", replicator: "Replicator | None", profile: str, memory_id: str) -> Memory:
    """Undo a supersession (:meth:`memlocal.MemoryBank.restore`): both memories written through
    to the bucket like saves. Returns the restored memory."""
    validate_profile(profile)
    validate_id(memory_id)
    old, successor = store.restore(profile, memory_id)
    if replicator is not None:
        for m in (old, successor):
            if m is not None:
                replicator.push_saved(m)
    return shown(old)


def history(store: "Store", profile: str, memory_id: str) -> builtins.list[Memory]:
    """The supersession chain through ``memory_id``, oldest first (just that memory when it
    never superseded nor was superseded). Links to deleted memories end the chain."""
    validate_profile(profile)
    validate_id(memory_id)
    start = store.get(profile, memory_id)
    chain = [start]
    seen = {start.id}
    for step in ("supersedes", "superseded_by"):
        cur = start
        while True:
            nxt = getattr(cur, step)
            if nxt is None or nxt in seen:
                break
            found = store.get_many(profile, [nxt]).get(nxt)
            if found is None:
                break
            seen.add(found.id)
            if step == "supersedes":
                chain.insert(0, found)
            else:
                chain.append(found)
            cur = found
    return [shown(m) for m in chain]


def prune(store: "Store", replicator: "Replicator | None", profile: str, rule: "RetentionRule", *,
          dry_run: bool = False, now: "datetime | None" = None) -> builtins.list[Pruned]:
    """Delete (or with ``dry_run`` only list) the memories of ``profile`` that ``rule`` selects,
    through :func:`delete` (so the deletions reach the bucket), oldest first."""
    from ..hygiene.rules import retention_reason

    validate_profile(profile)
    when = now or utcnow()
    chosen = []
    for m in store.iter_profile(profile, oldest_first=True):
        reason = retention_reason(m, rule, when)
        if reason is not None:
            chosen.append(Pruned(shown(m), reason))
    if not dry_run:
        for p in chosen:
            try:
                delete(store, replicator, profile, p.memory.id)
            except NotFoundError:
                pass  # deleted meanwhile: the outcome is the same
    return chosen


def retention_rule(config: "Config") -> "RetentionRule | None":
    """The configured retention policy (``retention.*``), or ``None`` when it is off."""
    from ..hygiene.rules import RetentionRule

    if not config.retention.enabled:
        return None
    cats = [c.strip() for c in config.get_str("retention.categories").split(",") if c.strip()]
    staleness = config.get_float("retention.staleness_above")
    return RetentionRule.build(staleness_above=staleness, older_than=config.get_str("retention.older_than") or None,
                               categories=cats)


def apply_retention(store: "Store", replicator: "Replicator | None", config: "Config", *,
                    now: "datetime | None" = None) -> dict[str, int]:
    """Run the configured policy over every profile (the sync daemon's retention job);
    ``{profile: memories pruned}``, empty when the policy is off."""
    rule = retention_rule(config)
    if rule is None:
        return {}
    out = {}
    for profile in store.profiles():
        pruned = prune(store, replicator, profile, rule, now=now)
        if pruned:
            out[profile] = len(pruned)
    return out
