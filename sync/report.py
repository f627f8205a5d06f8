"""What one pass did (``PassReport``): its outcome, its counters and the one line that says them.

Shared by the engine and its rooms (``changes``, ``feeds``, ``lister``, ``executor``), and read
without the engine by the daemon, the replicator and ``sync status``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from memlocal.humanize import plural


@dataclass
class PassReport:
    """What one pass did. ``result``: ok, errors (some actions failed), guarded (the mass-delete
    guard held deletions back), failed (the pass could not run: bucket unavailable, ...)."""

    scope: str = "all"
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
    result: str = "ok"
    reason: str = ""
    pages: int = 0
    objects: int = 0
    planned: dict[str, int] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    skipped: list[dict[str, str]] = field(default_factory=list)
    guards: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Things a person should know about this pass (a base reset and why, last-writer-wins).
    notes: list[str] = field(default_factory=list)
    # The pass failed because the bucket could not be used (unreachable, timed out, denied).
    unavailable: bool = False
    # ``record``: the pass followed the change record (no listing); ``full``: it listed the
    # bucket; ``scoped``: some profiles' prefixes, listed (the read path's refresh, --profile).
    mode: str = "full"
    segments: int = 0  # change segments read
    record_note: str = ""  # why the record was not followed, when it could have been

    @property
    def ok(self) -> bool:
        return self.result == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope, "startedAt": self.started_at, "finishedAt": self.finished_at,
            "durationS": round(self.duration_s, 3), "result": self.result, "reason": self.reason,
            "pages": self.pages, "objects": self.objects, "planned": dict(self.planned),
            "counts": dict(self.counts), "skipped": self.skipped, "guards": self.guards,
            "errors": self.errors[:20], "errorCount": len(self.errors), "notes": self.notes,
            "mode": self.mode, "segments": self.segments, "recordNote": self.record_note,
        }

    def summary(self) -> str:
        """One line for logs and the CLI, in the user's words (``pushed 2, deleted 1 here``)."""
        c = self.counts
        parts = [_COUNT_WORDS[k](c[k]) for k in _COUNT_WORDS if c[k]]
        if self.skipped:
            parts.append(f"skipped {plural(len(self.skipped), 'object')}")
        done = ", ".join(parts) or ("nothing to do" if self.result in ("ok", "guarded") else "nothing done")
        if self.mode == "record":
            return (f"{self.result}: {done} (change record: {plural(self.segments, 'new segment')}, "
                    f"no listing, {self.duration_s:.2f}s)")
        return (f"{self.result}: {done} ({plural(self.objects, 'object')} in "
                f"{plural(self.pages, 'listing page')}, {self.duration_s:.2f}s)")


# The pass's counters as a person would say them, in the order the summary lists them.
_COUNT_WORDS: dict[str, Callable[[int], str]] = {
    "pushed": lambda n: f"pushed {n}",
    "pulled": lambda n: f"pulled {n}",
    "updated": lambda n: f"updated {n}",
    "merged": lambda n: f"merged the access counts of {n}",
    "deleted_local": lambda n: f"deleted {n} here",
    "deleted_remote": lambda n: f"deleted {n} in the bucket",
    "adopted": lambda n: f"adopted {n} already in the bucket",
    "reid": lambda n: f"gave {n} a new id",
    "retired": lambda n: f"retired {plural(n, 'redundant copy', 'redundant copies')}",
    "conflicts": lambda n: plural(n, "conflict"),
    "notes_pushed": lambda n: f"pushed {plural(n, 'automation note')}",
    "notes_pulled": lambda n: f"pulled {plural(n, 'automation note')}",
    "notes_updated": lambda n: f"updated {plural(n, 'automation note')}",
    "notes_deleted_local": lambda n: f"deleted {plural(n, 'automation note')} here",
    "notes_deleted_remote": lambda n: f"deleted {plural(n, 'automation note')} in the bucket",
    "note_conflicts": lambda n: plural(n, "automation note conflict"),
}
