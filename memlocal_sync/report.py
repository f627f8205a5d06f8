"""What one pass is asked (``PassOptions``) and what it did (``PassReport``: its outcome, its
counters and the one line that says them).

Shared by the engine and its rooms (``changes``, ``feeds``, ``lister``, ``executor``); the
daemon, the CLI, the replicator and ``sync status`` build the options and read the report
without importing the engine.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from memlocal.humanize import plural

# A pass's progress callback: (actions done, actions planned).
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class PassOptions:
    """What one pass (``SyncEngine.run_pass``) is asked to do; the defaults are a plain pass of
    every profile that waits for no other process's pass.

    ``profiles``: only these (``None``: every profile; ``()``: none, for a notes-only pull);
    ``notes``: the automation notes too (``None``: when every profile is in scope, see
    ``syncs_notes``); ``pull_only``: write nothing to the bucket (the read path's refreshes);
    ``force``: apply the local deletions the mass-delete guard would hold back; ``reupload``:
    forget what was synced (push what the bucket lacks, pull the rest, delete nothing);
    ``full``: list the bucket even if the change record says nothing changed; ``progress``:
    called as actions complete; ``lock_timeout``: seconds to wait for another process's pass
    (then ``SyncError``); ``record``: record the report for ``sync status``; ``trip_breaker``: a
    pass that fails for the bucket opens the host's write-through breaker (the read path's
    pulls, which run unasked and must not each wait out a sick bucket); ``started``: the
    ``time.monotonic()`` value the pass's deadline (``sync.deadline_s``) runs from, when earlier
    than the pass (a cron ``sync run``: its process's start), at most half the deadline before
    the pass, so that a slow start never leaves a healthy bucket no time."""

    profiles: tuple[str, ...] | None = None
    notes: bool | None = None
    pull_only: bool = False
    force: bool = False
    reupload: bool = False
    full: bool = False
    progress: Progress | None = None
    lock_timeout: float = 0.0
    record: bool = True
    trip_breaker: bool = False
    started: float | None = None

    def __post_init__(self) -> None:
        # A list handed in is copied into a tuple (the options stay what they were when built);
        # a bare string would otherwise be read as one profile per character.
        if isinstance(self.profiles, str):
            raise TypeError(f"PassOptions.profiles takes a sequence of profile names, not the string {self.profiles!r}")
        if self.profiles is not None and not isinstance(self.profiles, tuple):
            object.__setattr__(self, "profiles", tuple(self.profiles))

    @property
    def syncs_notes(self) -> bool:
        """Whether the pass reconciles the automation notes (``notes``, by default: when every
        profile is in scope; notes belong to no profile)."""
        return self.profiles is None if self.notes is None else self.notes


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
