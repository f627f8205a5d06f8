"""A rescan: today's detectors and ``secrets.extra_patterns`` applied to what is already stored.

A credential saved before a detector knew its shape stays in every place the memory went. A
rescan (``memlocal redact --rescan``, ``import --rescan``, :meth:`memlocal.MemoryBank.rescan`)
redacts it there, as a save would have:

- every stored memory of the profile (or of every profile), **every version in its history**
  (superseded memories are rows like any other), its rawInput, processedContent, summary and
  unknown fields; automation notes; the audit trail's rows;
- what changed is rewritten through the normal synced path: each memory in one transaction with
  its change-log entry, then written through to the bucket (``Replicator.push_saved``) like any
  update; other hosts take the redacted object on their next pass, like any update;
- the old bytes are then purged from the database file (``Store.purge_replaced``: the full-text
  index merged, ``VACUUM``, the log truncated); another host's store does the same after the pass
  that pulled the redacted text (a trigger notes it, ``Replica.after_pass`` purges);
- the report names what changed by id and kind, never a value. ``dry_run`` changes nothing.

The CLI then runs sync passes, so the profile's snapshot is written again from the redacted
objects (and the old one deleted). What a rescan cannot reach is in docs/hygiene.md, "Rescan".
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from ..services import audit
from ..model import Memory, cut_preview, utcnow
from ..plugins import AutomationNote, Replicator
from ..services.redact import merge_kinds, redact, redact_json
from ..store import Store, from_us, to_us

# Memories rewritten per transaction (a rescan of a large bank never holds the lock for long).
BATCH: Final = 500
# Rounds of a batch's rewrite: a memory changed by another writer between the read and the write
# is read and redacted again (Store.rewrite never writes over what it did not read).
ROUNDS: Final = 3


@dataclass(frozen=True, slots=True)
class Rescanned:
    """One stored thing a rescan redacted: ``what`` is ``memory``, ``note`` or ``audit``."""

    what: str
    id: str
    profile: str | None
    kinds: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """As ``--json`` shows it."""
        return {"what": self.what, "id": self.id, "profile": self.profile, "kinds": list(self.kinds)}


@dataclass(slots=True)
class RescanReport:
    """What a rescan looked at and changed (or, with ``dry_run``, would change)."""

    dry_run: bool
    scanned: dict[str, int] = field(default_factory=lambda: {"memories": 0, "notes": 0, "audit": 0})
    changed: list[Rescanned] = field(default_factory=list)
    pushed: int = 0  # memories and notes the bucket took at once (the rest: the next pass)
    purged: bool = False
    purge_s: float = 0.0

    def by_kind(self) -> dict[str, int]:
        """How many things held each kind."""
        return dict(Counter(k for c in self.changed for k in c.kinds))

    def to_dict(self) -> dict[str, Any]:
        """The report as ``memlocal redact --rescan --json`` prints it."""
        return {"dryRun": self.dry_run, "scanned": dict(self.scanned), "count": len(self.changed),
                "byKind": self.by_kind(), "changed": [c.to_dict() for c in self.changed],
                "pushed": self.pushed, "purged": self.purged, "purgeSeconds": round(self.purge_s, 6)}


def redacted_memory(memory: Memory) -> tuple[Memory, tuple[str, ...]]:
    """``memory`` with its texts and unknown fields redacted, and the kinds found (none: the
    memory itself). The summary keeps the save's rule: a preview never holds half a marker."""
    raw, processed, summary = redact(memory.raw_input), redact(memory.processed_content), redact(memory.summary)
    extra, extra_kinds = redact_json(dict(memory.extra)) if memory.extra else (memory.extra, ())
    kinds = merge_kinds((raw.kinds, processed.kinds, summary.kinds, extra_kinds))
    if not kinds:
        return memory, ()
    return memory.with_changes(raw_input=raw.text, processed_content=processed.text,
                               summary=cut_preview(summary.text) if summary.kinds else memory.summary,
                               extra=extra), kinds


def rewrite(store: Store, changes: list[tuple[Memory, Memory]]) -> list[Memory]:
    """``store.rewrite(changes)`` (pairs: as read, redacted), then again for each memory another
    writer changed since its read, read again and redacted again, for at most ``ROUNDS`` rounds
    (one still changing after them is left to the next rescan). Returns the memories rewritten,
    as stored now."""
    done: list[Memory] = []
    for _ in range(ROUNDS):
        written = store.rewrite(changes)
        done += written
        ids = {m.id for m in written}
        again: list[tuple[Memory, Memory]] = []
        for before, _after in changes:
            now = store.find(before.id) if before.id not in ids else None
            if now is not None and now.profile_name == before.profile_name:  # None: deleted meanwhile
                new, kinds = redacted_memory(now)
                if kinds:
                    again.append((now, new))
        if not again:
            break
        changes = again
    return done


def rescan(store: Store, replicator: Replicator | None, profile: str | None = None, *,
           dry_run: bool = False) -> RescanReport:
    """Redact what ``store`` holds of ``profile`` (``None``: every profile, the notes and the
    audit rows too) with today's detectors, writing through ``replicator``; see the module
    docstring (the bank's :meth:`~memlocal.MemoryBank.rescan` calls this)."""
    report = RescanReport(dry_run=dry_run)
    pending: list[tuple[Memory, Memory]] = []

    def flush() -> None:
        if not pending or dry_run:
            pending.clear()
            return
        written = rewrite(store, pending)
        if replicator is not None:
            for m in written:  # after the commit, as every save: the outbox retries what fails
                report.pushed += bool(replicator.push_saved(m))
        pending.clear()

    for memory in (store.iter_profile(profile) if profile is not None else store.iter_all()):
        report.scanned["memories"] += 1
        new, kinds = redacted_memory(memory)
        if kinds:
            report.changed.append(Rescanned("memory", memory.id, memory.profile_name, kinds))
            pending.append((memory, new))
            if len(pending) >= BATCH:
                flush()
    flush()
    if profile is None:
        _rescan_notes(store, replicator, report)
        _rescan_audit(store, report)
    if report.changed and not dry_run:
        t0 = time.perf_counter()
        store.purge_replaced()
        report.purged, report.purge_s = True, time.perf_counter() - t0
    return report


def _rescan_notes(store: Store, replicator: Replicator | None, report: RescanReport) -> None:
    for automation_id, note, _updated in store.notes():
        report.scanned["notes"] += 1
        found = redact(note)
        if not found.kinds:
            continue
        report.changed.append(Rescanned("note", automation_id, None, found.kinds))
        if report.dry_run:
            continue
        now_us = to_us(utcnow())
        assert now_us is not None
        store.note_put(automation_id, found.text, now_us)
        if replicator is not None:
            stored = AutomationNote(automation_id, found.text, from_us(now_us))
            report.pushed += bool(replicator.push_note(automation_id, stored))


def _rescan_audit(store: Store, report: RescanReport) -> None:
    """The audit trail keeps ids, sizes and a keyed hash, never a text: only its profile names
    could hold one (written by an older memlocal, before names holding credentials were refused)."""
    rows = audit.profiles(store)
    report.scanned["audit"] = len(rows)
    changed = []
    for row_id, profile in rows:
        found = redact(profile)
        if found.kinds:
            report.changed.append(Rescanned("audit", str(row_id), None, found.kinds))
            changed.append((found.text, row_id))
    if changed and not report.dry_run:
        audit.rename_profiles(store, changed)
