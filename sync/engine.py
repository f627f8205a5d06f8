"""One reconciliation pass: snapshot, plan (``sync.plan``), then the effects.

Memories and automation notes run through the same pipeline: one decision table
(``plan.plan_pass``) and one executor (``SyncEngine._execute``), parameterised by the synced kind
(``memlocal_sync.kinds``: its key scheme, codec, local side, effects and resolution).

The pass holds a lock file beside the database (``<db>.sync.lock``, an OS file lock via
``filelock``), so passes never overlap, across processes too; the kernel drops the lock when a
process dies, so a SIGKILLed daemon never leaves a stale lock.

Bucket requests run on a thread pool (``sync.workers``); each action's worker does its requests
(a 412 read-modify-write loop included) and returns *effects*, which this thread commits in
batches. A crash between a PUT and the commit of its effect leaves an object whose base was never
recorded; the next pass finds it (local and remote, no base), sees the same content, and adopts it,
so nothing is duplicated and nothing is lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, InvalidStateError, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from filelock import FileLock, Timeout

from memlocal.config import Config
from memlocal.errors import SyncError, fold_whitespace
from memlocal.humanize import plural, printable
from memlocal.model import format_time, new_id, parse_time, utcnow
from memlocal.plugins import Replica

from . import marker
from .breaker import HostBreaker
from .bucket import (
    BucketClient, BucketSettings, BucketUnavailable, Listing, ObjectMissing, ObjectTooLarge, PreconditionFailed,
)
from .clients import open_bucket
from . import changes, converge, objects, prepared, snapshot
from .kinds import MEMORY, NOTE, NoteRecord, SyncedKind
from .objects import (
    NOTE_PREFIX,
    PREFIX,
    SUFFIX,
    BadObject,
    Listed,
    content_hash,
    decode,
    encode,
    object_key,
    parse_key,
    profile_prefix,
)
from .plan import (
    NOTES_SCOPE, Action, Base, Guard, Local, Op, Plan, first_copy, held_summary, hold_deletions, plan_notes, plan_pass,
    unusable,
)
from .state import (
    META_LAST_ERROR,
    Changed,
    META_LAST_PASS,
    DeleteLocal,
    Effect,
    SkipObject,
    SyncState,
    Synced,
    Unskip,
)

log = logging.getLogger(__name__)

# Read-modify-write attempts on 412 before an access merge is left for the next pass.
MERGE_ATTEMPTS = 8
# Changes named by the segments a pass reads, beyond which a full listing (with snapshots) is
# the better way to catch up.
RECORD_MAX_CHANGES = 2000
# Delete records a record pass verifies with a GET each (a 404 says the object is gone); more,
# and the pass lists in full instead (a listing shows every disappearance at once).
VERIFY_MAX = 64
# A change a full listing found that no segment explains is a suspect for this long (a pass
# publishes its segments when it ends) before it counts as a writer that keeps no record.
FOREIGN_GRACE_S = 600.0
# Suspects kept at most (the first few name the writer in `sync status`).
MAX_SUSPECTS = 50
# Effects are committed when this many are waiting, or this many seconds after the last commit.
BATCH_SIZE = 500
BATCH_SECONDS = 0.5
# Local memories read per query for the creates of a pass (``SyncEngine._with_locals``).
PRELOAD = 500
# How often a pass waiting for another process's pass looks whether it was cancelled.
LOCK_POLL_S = 0.05

Progress = Callable[[int, int], None]


def lock_path(db_path: Path) -> Path:
    """The pass lock: a file beside the database (so every process using it finds the same one)."""
    return db_path.with_name(db_path.name + ".sync.lock")


def pass_running(db_path: Path) -> bool:
    """Whether some process holds the pass lock of ``db_path`` right now."""
    lock = FileLock(str(lock_path(db_path)), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    lock.release()
    return False


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


class PassCancelled(SyncError):
    """The pass was cancelled (``SyncEngine.cancel``: its process is closing the bank)."""


class SyncEngine:
    """Runs reconciliation passes for one database against one bucket."""

    def __init__(self, config: Config, store: Replica, *, bucket: BucketClient | None = None,
                 settings: BucketSettings | None = None) -> None:
        settings = settings or (bucket.settings if bucket else BucketSettings.from_config(config))
        if settings is None:
            raise SyncError("no bucket configured: set INTERNAL_S3_BUCKET or S3_BUCKET (or bucket.name in the config file)")
        self.config = config
        self.store = store
        self.state = SyncState(store)
        self.settings = settings
        self.workers = config.get_int("sync.workers")
        self.max_object_bytes = config.get_int("sync.max_object_bytes")
        self.mass_delete_min = config.get_int("sync.mass_delete_min")
        self.snapshot_min = config.get_int("sync.snapshot_min_objects")
        # A snapshot's cap, compressed and unpacked (read streaming: ``snapshot.entries``).
        self.snapshot_max_bytes = config.sync.snapshot_max_bytes
        self.push_snapshot_min = config.sync.push_snapshot_min
        objects.set_max_clock_skew(config.sync.max_clock_skew_s)  # (the bodies this process reads)
        # Bodies taken from snapshots for this pass's fetches, by key (read by the workers).
        self._from_snapshot: dict[str, bytes] = {}
        self.max_delete_share = config.get_float("sync.max_delete_share")
        self.allow_unconditional = config.get_bool("sync.allow_unconditional")
        self.bucket: BucketClient = bucket or open_bucket(
            settings, timeout_s=config.get_float("sync.timeout_s"), attempts=config.get_int("sync.attempts"),
            pool_size=self.workers + 2, page_size=config.get_int("sync.list_page_size"),
            deadline_s=config.sync.deadline_s)
        self._remote_ids: set[str] = set()
        # Objects found gone under a conditional write of this pass (an access merge's 404, or
        # a 412 whose re-read answers 404): deletions counted by the guard with the plan's.
        self._gone: list[_Gone] = []
        self._gone_lock = threading.Lock()
        self._cancelled = threading.Event()
        self.breaker = HostBreaker(store, settings.identity, base_s=config.get_float("sync.breaker_s"),
                                   probe_lease_s=2 * config.get_float("sync.put_timeout_s") + 1)
        self._snapshot_modified: dict[str, str] = {}  # snapshot key -> LastModified (listed)
        # The thread preparing this pass's snapshots (``_start_feeds``) and the event that stops it.
        self._feeding: tuple[threading.Thread, threading.Event] | None = None
        self.full_listing_s = config.get_float("sync.full_listing_s")
        self.foreign_listing_s = config.sync.foreign_listing_s
        self.deadline_s = config.sync.deadline_s
        self.reprobe_s = config.get_float("sync.reprobe_s")
        self.changes = changes.ChangeLog(self.bucket, retention_s=config.get_float("sync.change_retention_days") * 86400)

    def close(self) -> None:
        self.bucket.close()

    def cancel(self) -> None:
        """Stop the pass in flight (and any later one) soon: no new request is started, requests
        in flight finish, what was applied stays applied. For a process closing its bank while a
        background pull runs, so that it can exit without waiting for the pull."""
        self._cancelled.set()

    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise PassCancelled("the pass was cancelled")

    # --- the pass -------------------------------------------------------------------------------

    def run_pass(self, *, force: bool = False, reupload: bool = False, profiles: Sequence[str] | None = None,
                 pull_only: bool = False, progress: Progress | None = None, lock_timeout: float = 0.0,
                 record: bool = True, notes: bool | None = None, trip_breaker: bool = False,
                 full: bool = False, started: float | None = None) -> PassReport:
        """One pass over every profile (or ``profiles``; ``[]``: none) and, with ``notes`` (by
        default: when every profile is in scope), the automation notes. Never raises for bucket
        trouble: the report says ``failed`` and why. Raises ``SyncError`` if another pass holds
        the lock. ``full``: list the bucket even if the change record says nothing changed.

        A pass that completes closes the host's write-through breaker (the bucket answers);
        with ``trip_breaker``, one that fails for the bucket opens it (the read path's pulls,
        which run unasked and must not each wait out a sick bucket).

        ``started``: the ``time.monotonic()`` value the pass's deadline (``sync.deadline_s``) runs
        from, when earlier than the pass (a cron ``sync run``: its process's start); at most half
        the deadline before the pass, so that a slow start never leaves a healthy bucket no time."""
        report = self._locked_pass(lock_timeout, force=force, reupload=reupload, profiles=profiles,
                                   pull_only=pull_only, progress=progress,
                                   notes=profiles is None if notes is None else notes, full=full, started=started)
        assert report is not None
        return self._finish(report, record=record, trip_breaker=trip_breaker)

    def hydrate(self, lock_timeout: float) -> PassReport | None:
        """A fresh host's pull of the whole bucket (listed, snapshots read meanwhile; every profile and the
        automation notes, pull only), recorded as a pass. ``None`` without a pass when, once the
        lock is held, this index has completed a pass of every profile against the bucket (it
        waited for another process's pass, which did it). A failure for the bucket opens the
        host's breaker."""
        report = self._locked_pass(lock_timeout, force=False, reupload=False, profiles=None, pull_only=True,
                                   progress=None, notes=True, unless_hydrated=True)
        return None if report is None else self._finish(report, record=True, trip_breaker=True)

    def _locked_pass(self, lock_timeout: float, *, unless_hydrated: bool = False, **kwargs: Any) -> PassReport | None:
        self._check_cancelled()  # a cancelled engine touches neither the database nor the bucket
        lock = FileLock(str(lock_path(self.store.path)), timeout=lock_timeout)
        # Waiting for another process's pass is cancellable too: a bank closing while its pull
        # on open waits for that pass must not wait out the deadline.
        deadline = time.monotonic() + lock_timeout
        while True:
            try:
                lock.acquire(timeout=min(LOCK_POLL_S, max(0.0, deadline - time.monotonic())))
                break
            except Timeout:
                self._check_cancelled()
                if time.monotonic() >= deadline:
                    raise SyncError(f"another sync pass is running on {self.store.path}") from None
        try:
            if unless_hydrated and self.state.hydrated(self.settings.identity) is not None:
                return None
            return self._pass(**kwargs)
        finally:
            lock.release()

    def _finish(self, report: PassReport, *, record: bool, trip_breaker: bool) -> PassReport:
        if record and not self._cancelled.is_set():  # a pass its closing bank stopped is no outcome
            self._record(report)
        if report.result == "failed" and report.unavailable:
            if trip_breaker:
                self.breaker.failure(report.reason)
        elif report.result != "failed":
            self.breaker.success()
        if report.result != "failed" and not self._cancelled.is_set():
            try:  # a pulled rescan's redaction: the old bytes leave this file too (docs/hygiene.md)
                self.store.after_pass()
            except Exception as exc:
                log.warning("could not purge replaced text from the database: %s", exc)
        return report

    def _record(self, report: PassReport) -> None:
        try:
            self.state.set_json(META_LAST_PASS, report.to_dict())
            if report.result in ("failed", "errors"):
                message = report.reason or (report.errors[0] if report.errors else report.result)
                self.state.set_json(META_LAST_ERROR, {"at": report.finished_at, "message": message})
        except Exception as exc:  # the pass's own outcome matters more than its record
            log.warning("could not record the sync pass: %s", exc)

    def _pass(self, *, force: bool, reupload: bool, profiles: Sequence[str] | None, pull_only: bool,
              progress: Progress | None, notes: bool, full: bool = False, started: float | None = None) -> PassReport:
        t0 = time.monotonic()
        # Every request of the pass waits at most what is left of sync.deadline_s (bucket.py).
        self.bucket.begin_pass(None if started is None else max(started, t0 - self.deadline_s / 2))
        scope = "all" if profiles is None else ",".join([*profiles, *(["automation notes"] if notes else [])])
        report = PassReport(scope=scope, started_at=format_time(utcnow()))
        try:
            if self.state.ensure_bucket(self.settings.identity):
                log.warning("bucket changed to %s: starting from an empty base (nothing is deleted)",
                            self.settings.describe())
            # The identity marker first: it decides whether an empty listing may delete anything.
            identity = marker.check(self.bucket, self.state, allow_unconditional=self.allow_unconditional,
                                    reupload=reupload, pull_only=pull_only, reprobe_s=self.reprobe_s)
            self._check_cancelled()
            report.notes += self.state.pop_notes() + identity.notes
            for note in report.notes:
                log.warning("%s", note)
            if reupload:
                self.state.forget_base(profiles)
            self._reconcile(report, identity, force=force, reupload=reupload, profiles=profiles,
                            pull_only=pull_only, progress=progress, notes=notes, full=full)
            if report.errors and report.result == "ok":
                report.result = "errors"
                report.reason = f"{len(report.errors)} operations failed; first: {report.errors[0]}"
            if not report.errors and profiles is None:
                # Every profile pulled: this host is hydrated (a fresh host's open no longer waits).
                self.state.set_hydrated(self.settings.identity, identity.id)
        except BucketUnavailable as exc:
            report.result, report.reason, report.unavailable = "failed", str(exc), True
        except marker.MarkerGone as exc:
            report.result, report.reason = "guarded", str(exc)
        except SyncError as exc:
            report.result, report.reason = "failed", str(exc)
        except Exception as exc:  # containment: a pass records itself whatever went wrong
            if self._cancelled.is_set():  # its bank was closed under it: expected, not a fault
                report.result, report.reason = "failed", "the pass was cancelled"
                return report
            log.exception("sync pass failed")
            report.result = "failed"
            report.reason = f"internal error: {type(exc).__name__}: {fold_whitespace(exc)[:300]}"
        finally:
            self._stop_feeds()  # (a pass that failed while its snapshots were being read)
            self.bucket.end_pass()
            report.duration_s = time.monotonic() - t0
            report.finished_at = format_time(utcnow())
        if report.result == "failed" and self._cancelled.is_set():
            log.debug("sync pass cancelled: %s", report.reason)
        elif report.result == "failed":
            log.warning("sync pass failed: %s", report.reason)
        elif any(report.counts.values()) or report.skipped or report.notes:
            log.info("sync pass %s", report.summary())  # one INFO line per pass that did something
        else:
            log.debug("sync pass %s", report.summary())
        return report

    def _reconcile(self, report: PassReport, identity: marker.Identity, *, force: bool, reupload: bool,
                   profiles: Sequence[str] | None, pull_only: bool, progress: Progress | None, notes: bool,
                   full: bool) -> None:
        """The pass after the marker check: read the change record, then either the changes it
        names (``mode`` ``record``) or a full listing (``full``), plan, act, publish."""
        view = self._record_view(identity, profiles=profiles, pull_only=pull_only, reupload=reupload, full=full)
        report.mode = "record" if view.incremental else "full" if profiles is None and not pull_only else "scoped"
        report.segments = len(view.segments)
        if view.reason:
            report.record_note = view.reason
        prefixes = [profile_prefix(None)] if profiles is None else [profile_prefix(p) for p in profiles]
        snapshots: dict[str, list[str]] = {}
        feeds: dict[str, prepared.Feed] = {}
        early: _EarlyTake | None = None
        # A fresh host lists the bucket like any other (a snapshot never stands for a listing:
        # docs/sync.md, "What a hint may do"); it reads its snapshots while the listing runs.
        listed_snapshots = self._list_snapshots(None) if view.fresh else None
        side = self._record_side(view.segments, report) if view.incremental else None
        if view.incremental and side is None:  # nothing changed anywhere: the marker and one LIST
            self._finish_record(report, identity, view, pull_only=pull_only)
            return
        if side is not None:
            local, listing, base, outbox_deletes, notes = side
        else:
            # The local side is read *before* the listing, in one read transaction. A local
            # change made after this snapshot (a save written through, with its base, while the
            # listing runs) then looks like "in the bucket, unknown here", a fetch that re-reads
            # the current row, never like "synced, then gone from the bucket", which would delete
            # it here; and memories, base and outbox are seen at one moment.
            hashes = not pull_only
            with self.store.snapshot():
                base = self.state.base_entries(profiles)
                local_rows = self.state.local_rows(profiles, hashes=hashes, base=base)
                outbox_deletes = self.state.outbox_deletes(profiles)
            snapshots = listed_snapshots if listed_snapshots is not None else self._list_snapshots(profiles)
            # A profile this host has nothing of (a fresh host's case) will take most of its
            # memories from its snapshot: fetched, decoded and made into rows on a thread of its
            # own (and a helper process) from now on, while the listing waits on the server, and
            # inserted chunk by chunk as they come once the pass has its plan (``_read_snapshots``).
            known_profiles = {b.profile for b in base.values()} | local_rows.profiles
            fresh = {p: keys for p, keys in snapshots.items() if p not in known_profiles}
            feeds = self._start_feeds(fresh) if fresh else {}
        known_bad: dict[str, tuple[str, str]] = {}
        for prefix in prefixes:
            known_bad.update(self.state.known_bad(prefix))
        if side is None:
            # What a fresh profile's snapshot holds is pulled as the listing confirms it, part
            # by part, instead of after the whole listing (``_EarlyTake``).
            early = _EarlyTake(self, feeds, set(base) | local_rows.ids() | set(outbox_deletes), known_bad,
                               report) if feeds else None
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlocal-sync-local") as helper:
                local_future = helper.submit(self.state.local_entries_from, local_rows)
                listing = []
                for prefix in prefixes:
                    objects, pages = self._list(prefix, early)
                    listing.extend(objects)
                    report.pages += pages
                local = local_future.result()
            self._check_cancelled()
            if hashes:
                self.state.remember_signatures(local_rows, local, base)
            if early is not None:
                early.finish(local, base, known_bad, listing)
        if not view.incremental:
            self._ignore_listed_deletes(view, listing, report)
        explained = self.state.explained()
        plan = plan_pass(
            local, listing, base, outbox_deletes, known_bad,
            max_object_bytes=self.max_object_bytes, mass_delete_min=self.mass_delete_min,
            max_delete_share=self.max_delete_share, verified=identity.verified,
            force=force, pull_only=pull_only, explained=explained,
        )
        report.objects = plan.objects
        report.planned = dict(plan.counts())
        if report.mode == "full" and view.cursor is not None:
            self._suspect_unexplained(identity.id, plan, base, local, view, listing)
        self._remote_ids = {k.key.rsplit("/", 1)[-1][:-5] for k in listing}
        effects: list[Effect] = [SkipObject(s.key, s.etag, s.reason) for s in plan.skips
                                 if s.persist and known_bad.get(s.key, ("", ""))[0] != s.etag]
        if report.mode != "record":  # only a listing shows that a skipped object is gone
            listed = {k.key for k in listing}
            effects += [Unskip(key) for key in known_bad if key not in listed]
        self.state.apply(effects)
        note_plan: Plan | None = None
        notes_seen: dict[str, NoteRecord] = {}
        if notes:  # automation notes belong to no profile: full passes (and the read path's pull)
            note_plan, notes_seen = self._plan_notes(report, verified=identity.verified, force=force,
                                                     pull_only=pull_only)
        if plan.guards or (note_plan is not None and note_plan.guards):
            # One guard for the whole pass: whichever rule tripped, for memories or for notes,
            # no unexplained local deletion of either goes through.
            plan.actions = [a for a in plan.actions if not (a.op is Op.DELETE_LOCAL and a.id not in explained)]
            if note_plan is not None:
                note_plan.actions = [a for a in note_plan.actions if a.op is not Op.DELETE_LOCAL]
        # Profiles this pass changes are written by a later pass that finds them settled.
        busy = {a.profile for a in plan.actions} | {g.profile for g in plan.guards}
        # The unexplained local deletions wait for the guard's count of every deletion of the
        # pass, those its conditional writes find too (``_guarded_deletions``).
        deferred: dict[str, list[Action]] = {
            MEMORY.what: [a for a in plan.actions if a.op is Op.DELETE_LOCAL and a.id not in explained]}
        plan.actions = [a for a in plan.actions if not (a.op is Op.DELETE_LOCAL and a.id not in explained)]
        if note_plan is not None:
            deferred[NOTE.what] = [a for a in note_plan.actions if a.op is Op.DELETE_LOCAL]
            note_plan.actions = [a for a in note_plan.actions if a.op is not Op.DELETE_LOCAL]
        if report.mode != "record":
            if early is not None:
                busy |= early.profiles()
            self._read_snapshots(plan, snapshots, report, set(local) | set(base), feeds,
                                 early.waiting if early is not None else None)
            self._stop_feeds()
        self._check_cancelled()
        with self._gone_lock:
            self._gone = []
        self._execute(MEMORY, plan, report, pull_only=pull_only, progress=progress)
        if note_plan is not None:
            self._execute(NOTE, note_plan, report, pull_only=pull_only, progress=None, seen=notes_seen)
        self._check_cancelled()

        def synced(kind: SyncedKind[Any, Any]) -> Counter[str]:
            if kind is NOTE:
                return Counter({NOTES_SCOPE: len(self.state.note_entries()[1])})
            # A record pass's base is the ids it reconciles: the guard's share is of the profile.
            every = self.state.base_entries(profiles) if report.mode == "record" else base
            return Counter(b.profile for b in every.values())

        guards = self._guarded_deletions(report, [(MEMORY, plan), (NOTE, note_plan)], deferred,
                                         {MEMORY.what: {}, NOTE.what: notes_seen}, explained, synced,
                                         force=force, pull_only=pull_only, progress=progress)
        self._check_cancelled()
        busy |= self._converge(busy, report, pull_only=pull_only)
        if not pull_only and not report.errors and report.mode in ("full", "scoped"):
            self._write_snapshots(listing, base, snapshots, report, busy, marker_id=identity.id or None,
                                  seq=view.tail if identity.conditional else None)
        if not pull_only and not report.errors and not guards:
            self._write_pushed_snapshots(plan, report, marker_id=identity.id or None,
                                         seq=view.tail if identity.conditional else None)
        self._collect_skips(plan, report, prefixes)
        if note_plan is not None:
            self._collect_skips(note_plan, report, [NOTE_PREFIX])
        if guards:
            report.guards = [{"profile": g.profile, "deletions": g.deletions, "synced": g.synced,
                              "reason": g.reason} for g in guards]
            report.result = "guarded"
            applied = report.counts["deleted_local"]
            done = (f"only the {plural(applied, 'deletion')} other hosts recorded in the bucket "
                    f"{'was' if applied == 1 else 'were'} applied here" if applied
                    else "nothing was deleted locally")
            report.reason = ("mass-delete guard: " + "; ".join(dict.fromkeys(g.reason for g in guards))
                             + f"; {held_summary(guards)}: {done} (run `memlocal sync run --force` to apply, "
                             "or `--reupload` to push local memories and notes back)")
        self._finish_record(report, identity, view, pull_only=pull_only)

    # --- the change record (docs/sync.md, "The change record") ----------------------------------

    def _record_view(self, identity: marker.Identity, *, profiles: Sequence[str] | None, pull_only: bool,
                     reupload: bool, full: bool) -> "_RecordView":
        """Whether this pass may follow the change record instead of listing, and the segments
        it reads. Scoped and pull-only passes list their prefixes as before and leave the record
        alone; on a server that ignores conditional writes the record is never used (two hosts
        could take one segment number). The record is a hint: a bad segment, a gap, changes a
        full listing found that no record explains, or delete records to verify by the dozen
        send the pass to a full listing (docs/sync.md, "What a hint may do")."""
        if profiles is None and pull_only and identity.id and self.snapshot_min > 0 and self.state.is_empty():
            # A fresh host's pull (hydration on open): it lists, and reads its snapshots while it
            # does; the record's cursor is left to its first full pass.
            return _RecordView(False, [], None, "", None, fresh=True)
        if profiles is not None or pull_only or not identity.conditional or not identity.id:
            return _RecordView(False, [], None)
        now = self.changes.clock()
        cs = self.state.changes_state()
        same = cs.get("marker") == identity.id and identity.verified
        cursor = cs.get("cursor") if same else None
        reason = ""
        trusted = isinstance(cursor, int) and now - float(cs.get("checked") or 0) < self.changes.trust_s
        if not same or cursor is None:
            reason = "no change record followed yet for this bucket: listed in full"
        elif not trusted:
            reason = "the change record was last read too long ago (sync.change_retention_days / 2): listed in full"
        reading = changes.Reading()
        holes = [h for h in cs.get("holes") or [] if isinstance(h, int)] if same else []
        if trusted:
            assert isinstance(cursor, int)

            def gap_over(gap: int) -> bool:  # waited out since this host first saw it
                return cs.get("gap") == gap and now - float(cs.get("gapSince") or now) >= changes.GAP_WAIT_S

            try:
                reading = self.changes.read_new(identity.id, cursor, holes=holes, pass_gap=gap_over)
            except changes.Untrusted as exc:
                trusted, reason = False, f"the change record cannot be trusted ({exc}): listed in full"
        segments = reading.segments
        tail = reading.end if trusted else self.changes.find_tail()
        why_full = self._record_hints(identity.id, reading, cursor if trusted else None, holes, now, cs) if same else []
        # Delete records are kept only for ids this host has: the others explain nothing here.
        deletes = [(c.key, parsed[1], seg.seq) for seg in segments for c in seg.changes
                   if c.op == "delete" and (parsed := parse_key(c.key)) is not None]
        known = self.state.base_for({d[1] for d in deletes}) if deletes else {}
        if known:
            self.state.record_deletes([d for d in deletes if d[1] in known])
        due = (full or reupload or self.full_listing_s <= 0
               or now - float(cs.get("fullAt") or 0) >= self.full_listing_s)
        if not same and not full and self.snapshot_min > 0 and self.state.is_empty():
            return _RecordView(False, [], tail, reason, None, fresh=True, last=tail)
        size = sum(len(seg.changes) for seg in segments)
        # Each delete record for an object this host holds is verified with a GET, and so is one
        # for a key it does not hold that a segment names a PUT of (``_record_side``).
        put_keys = {c.key for seg in segments for c in seg.changes if c.op == "put"}
        verify = len(known) + len({d[0] for d in deletes if d[1] not in known and d[0] in put_keys})
        last = max(reading.last, tail)
        if trusted and not due and not why_full and size <= RECORD_MAX_CHANGES and verify <= VERIFY_MAX:
            return _RecordView(True, segments, tail, "", cursor, last=last)
        if trusted and size > RECORD_MAX_CHANGES:
            reason = f"{size} changes recorded since the last pass: listed in full (snapshots apply)"
        elif trusted and verify > VERIFY_MAX:
            reason = f"{verify} delete records to verify: listed in full (a listing shows what is gone)"
        elif trusted and why_full and not (full or due):
            reason = "; ".join(why_full) + ": listed in full"
        return _RecordView(False, segments, tail, reason if not (full or due) or not trusted else "",
                           cursor if trusted else None, last=last)

    def _record_hints(self, marker_id: str, reading: changes.Reading, cursor: int | None, holes: list[int],
                      now: float, cs: dict[str, Any]) -> list[str]:
        """Keep what the record's reading says about the record itself (its bad segments, a gap
        waited for, the gaps moved past, changes no record explained) in the change-record state
        for ``sync status``, and say why this pass must list in full (none: it may follow it)."""
        why: list[str] = []
        values: dict[str, Any] = {}
        stamp = format_time(utcnow())
        problems = [p for p in cs.get("problems") or [] if isinstance(p, dict)]
        for line in reading.skipped:
            log.warning("change record: %s", line)
            problems.append({"at": stamp, "what": f"skipped {line}"})
        if reading.skipped:
            why.append(f"{plural(len(reading.skipped), 'change segment')} skipped ({reading.skipped[0]}"
                       f"{', …' if len(reading.skipped) > 1 else ''})")
        if cursor is not None:
            if reading.gap is not None and reading.end < reading.gap:  # waiting for it
                if cs.get("gap") != reading.gap:
                    values.update(gap=reading.gap, gapSince=now)
                    problems.append({"at": stamp, "what": f"a gap in the change record: segment {reading.gap} is missing while later ones exist: "
                                                          f"waiting up to {changes.GAP_WAIT_S:g} s for it"})
                why.append(f"waiting for missing change segment {reading.gap}")
            else:
                if reading.gap is not None:
                    problems.append({"at": stamp, "what": f"moved past missing change segment(s) "
                                                          f"{', '.join(map(str, reading.missing[:5]))} after "
                                                          f"{changes.GAP_WAIT_S:g} s"})
                if cs.get("gap") is not None:
                    values.update(gap=None, gapSince=None)
            kept = [h for h in holes if h not in reading.filled and reading.end - h < 900]
            if reading.end >= reading.last:
                kept += [m for m in reading.missing if m not in kept]
            if kept != holes:
                values["holes"] = kept[-changes.MAX_HOLES:]
            # Changes a full listing found unexplained: explained by the segments read since, or,
            # once older than FOREIGN_GRACE_S (a pass publishes its segments when it ends), the
            # sign of a writer that keeps no record: list in full on every pass for a while.
            suspects = cs.get("suspects") or {}
            if isinstance(suspects, dict) and suspects:
                named = {(c.key, c.etag if c.op == "put" else "") for seg in reading.segments for c in seg.changes}
                left = {k: v for k, v in suspects.items()
                        if isinstance(v, list) and len(v) == 2 and (k, v[0]) not in named}
                aged = sorted(k for k, v in left.items() if now - float(v[1]) >= FOREIGN_GRACE_S)
                if aged and self.foreign_listing_s > 0:
                    what = (f"a full listing found {plural(len(aged), 'change')} that no change record explains "
                            f"({', '.join(aged[:3])}{', …' if len(aged) > 3 else ''}): a writer that keeps no record "
                            f"(another implementation of the layout, a person with the AWS CLI) writes this bucket")
                    values.update(fullUntil=now + self.foreign_listing_s, fullWhy=what)
                    problems.append({"at": stamp, "what": what})
                    log.warning("listing the bucket in full on every pass for %gs: %s", self.foreign_listing_s, what)
                left = {k: v for k, v in left.items() if k not in aged}
                if left != suspects:
                    values["suspects"] = left
        until = values.get("fullUntil", cs.get("fullUntil"))
        if isinstance(until, (int, float)) and now < float(until):
            why.append("changes no record explains were seen (sync.foreign_listing_s)")
        if len(problems) != len(cs.get("problems") or []):
            values["problems"] = problems[-20:]
        if values:
            self.state.update_changes(marker_id, **values)
        return why

    def _record_side(self, segments: Sequence[changes.Segment], report: PassReport) -> (
            tuple[dict[str, Local], list[Listed], dict[str, Any], dict[str, str], bool] | None):
        """The plan's three sides for the ids the segments name and the ids with local work,
        with a listing made of the base's ETags and the segments' changes; ``None`` when there
        is nothing at all to do. A delete record stands for "gone" only once a GET of its object
        answers 404: a record for an object still there is ignored (and reported)."""
        latest: dict[str, changes.Change] = {}
        deleted: set[str] = set()  # keys any segment read here records a deletion of
        named: dict[str, set[str]] = {}  # the ETags the segments read here name for each key's PUTs
        for seg in segments:
            for c in seg.changes:
                latest[c.key] = c
                if c.op == "delete":
                    deleted.add(c.key)
                else:
                    named.setdefault(c.key, set()).add(c.etag)
        note_work = any(k.startswith(NOTE_PREFIX) for k in latest) or bool(self.store.outbox(kind="note"))
        ids = {parsed[1] for k in latest if (parsed := parse_key(k)) is not None} | self.state.local_work_ids()
        if not ids and not note_work:
            return None
        with self.store.snapshot():
            base = self.state.base_for(ids)
            rows = self.store.memories_with_deltas(None, ids=sorted(ids))
            outbox_deletes = self.state.outbox_deletes()
        local = {m.id: Local(m.id, m.profile_name, content_hash(m), d, inactive=not m.is_active) for m, d in rows}
        listing: dict[str, Listed] = {}
        for mid, b in base.items():
            key = object_key(b.profile, mid)
            listing[key] = Listed(key, b.etag, 0)
        claimed: list[str] = []
        for key, c in latest.items():
            parsed = parse_key(key)
            if parsed is None:
                continue
            if key in deleted and (key in listing or key in named):
                # A memory this host has, deleted in some segment read here: verified below even
                # when a later segment names a PUT (a writer that published late: its PUT may
                # have come before the deletion), so no delete record is lost to the order. And
                # one it does not hold (or holds at another ETag) that some segment names a PUT
                # of: a delete record never cancels that fetch on its own (a forged, replayed or
                # late record, or a re-creation after the deletion): the GET decides.
                claimed.append(key)
            elif c.op == "put" and key in listing and listing[key].etag == c.etag and len(named[key]) > 1:
                # The last segment names this host's own version, and another names a different
                # one: segments go out after their PUTs, in any order (a writer publishes when
                # its pass ends, a killed one at its next pass), so the one named last need not
                # be the newest. Only the bucket says which is current: verified below.
                claimed.append(key)
                report.counts["verified"] += 1
            elif c.op == "put":
                listing[key] = Listed(key, c.etag, c.size)
            else:
                listing.pop(key, None)
        present = self._still_there(claimed)
        for key in claimed:
            if key in present:
                listing[key] = Listed(key, present[key], 0)
            else:
                listing.pop(key, None)
        # One id under two profiles, neither held here: the plan keeps the older object, as a
        # full listing shows it (``plan.first_copy``): their LastModified, one LIST each (rare).
        keys_of: dict[str, list[str]] = {}
        for key in listing:
            if (parsed := parse_key(key)) is not None and parsed[1] not in base:
                keys_of.setdefault(parsed[1], []).append(key)
        for key in (k for keys in keys_of.values() if len(keys) > 1 for k in keys):
            shown = [o for o in self.bucket.list(key, max_pages=1).objects if o.key == key]
            if shown:
                listing[key] = shown[0]
            else:
                listing.pop(key, None)
        self._report_ignored(sorted(k for k in present if k in deleted), report)
        return local, [listing[k] for k in sorted(listing)], base, outbox_deletes, note_work

    def _still_there(self, keys: Sequence[str]) -> dict[str, str]:
        """Which of ``keys`` the bucket still holds, with their ETags: one GET of a byte range
        each, in parallel (a 404 is the only answer that means gone)."""
        if not keys:
            return {}

        def look(key: str) -> tuple[str, str | None]:
            try:
                _data, etag = self.bucket.get(key, 0)  # a non-empty object is over 0 bytes
                return key, etag
            except ObjectTooLarge as exc:
                return key, exc.etag
            except ObjectMissing:
                return key, None

        with ThreadPoolExecutor(max_workers=min(self.workers, len(keys)), thread_name_prefix="memlocal-sync-verify") as pool:
            found = list(pool.map(look, keys))
        return {k: e for k, e in found if e is not None}

    def _ignore_listed_deletes(self, view: "_RecordView", listing: Sequence[Listed], report: PassReport) -> None:
        """A listing is the truth: a delete record read in this pass (or kept from an earlier
        one) for an object the listing shows is ignored, reported, and forgotten."""
        listed = {o.key for o in listing}
        latest: dict[str, str] = {}
        for seg in view.segments:
            for c in seg.changes:
                latest[c.key] = c.op
        ignored = {k for k, op in latest.items() if op == "delete" and k in listed}
        kept = self.state.delete_records()
        stale = {k for k in kept if k in listed}
        if stale:
            self.state.forget_delete_records(stale)
        self._report_ignored(sorted(ignored | stale), report)

    def _report_ignored(self, keys: Sequence[str], report: PassReport) -> None:
        if not keys:
            return
        note = (f"ignored {plural(len(keys), 'delete record')} for objects still in the bucket "
                f"({', '.join(keys[:3])}{', …' if len(keys) > 3 else ''}): a record deletes nothing the bucket holds")
        report.notes.append(note)
        log.warning("%s", note)

    def _suspect_unexplained(self, marker_id: str, plan: Plan, base: dict[str, Any], local: dict[str, Local],
                             view: "_RecordView", listing: Sequence[Listed]) -> None:
        """After a full listing that followed a trusted cursor: the changes it found (objects new
        or changed since this host's base, objects gone) that no segment read in this pass names
        become suspects; a later pass that reads their segments clears them (``_record_hints``)."""
        named = {(c.key, c.etag if c.op == "put" else "") for seg in view.segments for c in seg.changes}
        found: dict[str, str] = {}
        for a in plan.actions:
            if a.op is Op.FETCH and (a.id in base or a.id not in local):  # not our own unrecorded PUT
                found[object_key(a.profile, a.id)] = a.etag
        listed = {o.key for o in listing}
        for mid, b in base.items():  # gone from the bucket (deletions the guard held included)
            key = object_key(b.profile, mid)
            if key not in listed and mid in local:
                found[key] = ""
        unexplained = {k: e for k, e in found.items() if (k, e) not in named}
        if not unexplained:
            return
        now = self.changes.clock()
        suspects = self.state.changes_state().get("suspects")
        suspects = dict(suspects) if isinstance(suspects, dict) else {}
        for k, e in sorted(unexplained.items())[:MAX_SUSPECTS]:
            if k not in suspects or suspects[k][0] != e:
                suspects[k] = [e, now]
        self.state.update_changes(marker_id, suspects=dict(list(suspects.items())[-MAX_SUSPECTS:]))

    def _finish_record(self, report: PassReport, identity: marker.Identity, view: "_RecordView", *,
                       pull_only: bool) -> None:
        """After the pass: move the cursor (only past a pass that applied everything), publish
        this host's journal, and now and then compact the record."""
        if pull_only or not identity.conditional or not identity.id:
            return
        now = time.time()
        clean = report.result == "ok" and not report.errors
        if clean and view.tail is not None:
            last = max(view.tail, view.last or 0)  # a writer's next segment goes past every one seen
            if view.incremental:
                self.state.update_changes(identity.id, cursor_from=view.cursor, cursor=view.tail, checked=now,
                                          tail=last, now=now)
            else:
                self.state.update_changes(identity.id, cursor=view.tail, checked=now, fullAt=now,
                                          tail=last, now=now)
        try:
            report.counts["segments_published"] += changes.publish_journal(self.changes, self.state, identity.id)
            if clean and report.mode == "full" and view.tail is not None:
                # Compaction lists the record and reads its oldest segment's age: skipped until
                # the last one's ``due`` (no segment can have aged out before), so a full pass
                # made every few minutes does not pay two requests to delete nothing.
                if float(self.state.changes_state().get("compactDue") or 0) <= self.changes.clock():
                    done = self.changes.compact()
                    report.counts["segments_compacted"] += done.deleted
                    self.state.update_changes(identity.id, compactDue=done.due)
                self.state.forget_deletes_before(int((now - self.changes.retention_s) * 1e6))
        except BucketUnavailable:
            raise
        except Exception as exc:  # the journal stays; the next pass or save publishes it
            log.warning("change record not published: %s", exc)
            report.errors.append(f"change record: {exc}")

    def _converge(self, touched: set[str], report: PassReport, *, pull_only: bool) -> set[str]:
        """Hygiene across hosts once the pull is done (``sync.converge``) in the profiles this pass
        touched; a pull-only pass leaves them to the next full pass. The profiles it changed;
        its trouble is reported, never the end of the pass."""
        try:
            if pull_only:
                converge.defer(self.state, touched)
                return set()
            return converge.run(self.state, self.bucket, touched, report.counts,
                                duplicates=self.config.get_bool("dedup.enabled"))
        except BucketUnavailable:
            raise
        except Exception as exc:  # containment: the pass's own work is done and recorded
            log.exception("converging duplicates and successors failed")
            report.errors.append(f"converge: {type(exc).__name__}: {fold_whitespace(exc)[:200]}")
            return set()

    # --- the listing (docs/sync.md, "Listing") ------------------------------------------------------

    def _list(self, prefix: str, early: _EarlyTake | None = None) -> tuple[list[Listed], int]:
        """Every object under ``prefix``, in key order, and the pages that took.

        A prefix that fits one page costs one request, as before. Past it, the rest of the
        profile whose keys the first page ended in is listed as one listing per first hex digit
        of the id (``…/mem-3`` from the last key seen, then ``…/mem-4`` … ``…/mem-f``; ids are
        ``mem-`` plus random hex, so these hold about the same number of keys), plus two ranges
        for whatever odd keys sort between and after them; in parallel on ``sync.workers``
        threads. What comes after that profile is listed the same way, from just past its last
        possible key. Together they cover every key once at least (a key two of them see is kept
        once), whatever the bucket holds. On S3 the pages of a listing are sequential round
        trips; this makes them parallel, and the client's parsing overlaps the server's work.
        ``early``: handed the objects of each part on this thread as it is listed (a key two
        parts see may come twice), while the other parts are still being listed, and woken
        when one of its snapshot feeds has finished."""
        found: dict[str, Listed] = {}
        pages = 0
        pending: dict[Future[Any], bool] = {}  # the listings running: whether each is a first page

        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="memlocal-sync-list") as pool:
            def came(part: Listing, first: bool) -> None:
                # What follows a first page is asked for before its objects are handed on.
                nonlocal pages
                pages += part.pages
                if first and part.truncated and part.objects:
                    last = part.objects[-1].key
                    parts = _id_listings(last)
                    if parts is None:  # not a memory key: go on page by page from it
                        pending[pool.submit(self.bucket.list, prefix, start_after=last, max_pages=1)] = True
                    else:
                        pending.update((pool.submit(self.bucket.list, sub or prefix, start_after=lo, last=hi), False)
                                       for sub, lo, hi in parts)
                        # past every key of that profile
                        pending[pool.submit(self.bucket.list, prefix, start_after=parts[-1][2], max_pages=1)] = True
                found.update((o.key, o) for o in part.objects)
                if early is not None:
                    early.listed(part.objects)

            try:
                # The first page on this thread (its kept-alive connection): a prefix that fits one
                # page costs that one request, as before. The other parts, each as it comes, in
                # any order (the first error to come is raised).
                came(self.bucket.list(prefix, max_pages=1), True)
                while pending:
                    woken = early.woken() if early is not None else None
                    for future in wait([*pending, *([woken] if woken else [])], return_when=FIRST_COMPLETED).done:
                        if future is woken:
                            assert early is not None
                            early.listed(())
                        else:
                            came(future.result(), pending.pop(future))
            finally:
                for future in pending:  # the parts not started yet are not started; the others end
                    future.cancel()
        return [found[k] for k in sorted(found)], pages

    # --- snapshots (docs/sync.md, "Snapshots") ------------------------------------------------------

    def _list_snapshots(self, profiles: Sequence[str] | None) -> dict[str, list[str]]:
        """The snapshot keys in the bucket, by profile (one listing; none when snapshots are off)."""
        if self.snapshot_min <= 0 or (profiles is not None and not profiles):  # (none: a notes-only pull)
            return {}
        out: dict[str, list[str]] = {}
        for obj in self.bucket.list(snapshot.SNAPSHOT_PREFIX).objects:
            parsed = snapshot.parse_snapshot_key(obj.key)
            if parsed is not None and (profiles is None or parsed[0] in profiles):
                out.setdefault(parsed[0], []).append(obj.key)
                self._snapshot_modified[obj.key] = obj.modified
        return out

    def _snapshot_aging(self, key: str) -> bool:
        """Whether a snapshot is a quarter of the record's retention old: rewritten then, so that the
        snapshot a fresh host reads is never far behind the bucket (fewer objects to fetch)."""
        try:
            written = parse_time(self._snapshot_modified.get(key, "")).timestamp()  # type: ignore[union-attr]
        except Exception:
            return False  # no time from the server: written when the profile changes
        return time.time() - written >= self.changes.trust_s / 2

    def _start_feeds(self, snapshots: dict[str, list[str]]) -> dict[str, prepared.Feed]:
        """Start reading the first readable snapshot of each profile on a thread of its own: each
        entry decoded and made ready to insert (content hash, MD5, store row), in a helper process
        for a large snapshot (``memlocal_sync.prepared``), else here, chunk by chunk into the
        profile's feed. Runs beside the listing and the inserts; never raises (a snapshot that
        cannot be used here is read again, or its objects fetched, after the plan);
        ``_stop_feeds`` ends it."""
        feeds = {profile: prepared.Feed() for profile in snapshots}
        stop = threading.Event()

        def run() -> None:
            for profile, keys in snapshots.items():
                feed, read = feeds[profile], False
                try:
                    if not stop.is_set() and not self._cancelled.is_set():
                        read = self._feed_snapshot(profile, keys, feed, stop)
                except Exception as exc:  # containment: this is only a head start
                    log.info("snapshot of %s not read ahead: %s", profile, exc)
                finally:
                    feed.finish(read)  # always: the pass may be waiting for it

        thread = threading.Thread(target=run, name="memlocal-sync-snapshots", daemon=True)
        self._feeding = (thread, stop)
        thread.start()
        return feeds

    def _stop_feeds(self) -> None:
        """Stop the snapshot thread of ``_start_feeds`` (its helper process killed) and wait for it."""
        feeding, self._feeding = self._feeding, None
        if feeding is not None:
            feeding[1].set()
            feeding[0].join()

    def _feed_snapshot(self, profile: str, keys: Sequence[str], feed: prepared.Feed, stop: threading.Event) -> bool:
        """Put the entries of the first of ``keys`` that reads as a snapshot of ``profile``,
        prepared, into ``feed``; whether one was read whole (``False``: none reads, or stopped)."""
        def stopped() -> bool:
            return stop.is_set() or self._cancelled.is_set()

        for key in keys:
            try:
                data, _etag = self.bucket.get(key, self.snapshot_max_bytes)
                if len(data) >= prepared.HELPER_MIN_BYTES and self._helper_allowed():
                    try:
                        # A helper that sends nothing for half the pass's deadline is hung: killed,
                        # and the snapshot read here. Half: the deadline of the pass's next request
                        # runs from the bucket's last answer, which came before that wait.
                        return prepared.stream_in_helper(data, profile, self.max_object_bytes, feed.put, stopped,
                                                         timeout_s=self.deadline_s / 2, chunk=prepared.CHUNK,
                                                         max_bytes=self.snapshot_max_bytes)
                    except BadObject:
                        raise
                    except Exception as exc:  # the helper is only a second core: read here (again)
                        log.info("snapshot %s read here (the helper process failed: %s)", key, exc)
                # Decoded and hashed here; the store makes the rows as the pass inserts the entries.
                entries = list(snapshot.entries(data, profile, self.snapshot_max_bytes,
                                                snapshot.entry_cap(self.max_object_bytes)))
                for i in range(0, len(entries), prepared.CHUNK):
                    ready = prepared.prepare_entries(dict(entries[i:i + prepared.CHUNK]), profile,
                                                     self.max_object_bytes, stopped)
                    if ready is None:
                        return False
                    feed.put(ready)
                return True
            except (ObjectMissing, ObjectTooLarge, BadObject) as exc:
                log.info("snapshot %s not used: %s", key, exc)
        return False

    def _helper_allowed(self) -> bool:
        """A helper process decodes and hashes a large snapshot when there is a second core."""
        return prepared.helper_available()

    def _first_snapshot(self, profile: str, keys: Sequence[str]) -> dict[str, tuple[str, bytes]] | None:
        """The entries of the first of ``keys`` that reads as a snapshot of ``profile``
        (``snapshot.read``), or ``None``."""
        for key in keys:
            try:
                data, _etag = self.bucket.get(key, self.snapshot_max_bytes)
                return snapshot.read(data, profile, self.snapshot_max_bytes, snapshot.entry_cap(self.max_object_bytes))
            except (ObjectMissing, ObjectTooLarge, BadObject) as exc:
                log.info("snapshot %s not used: %s", key, exc)
        return None

    def _read_snapshots(self, plan: Plan, snapshots: dict[str, list[str]], report: PassReport,
                        known: set[str], feeds: dict[str, prepared.Feed] | None = None,
                        read: Mapping[str, dict[str, _Prefetched]] | None = None) -> None:
        """For each profile with many objects to fetch, take their bodies from its snapshot where
        the snapshot's ETag is the listing's and the body is the one that ETag names (the listing
        is the truth); the rest are fetched.

        A memory new to this host (no local row, no base: a fresh host's case) is pulled here
        at once, in batches; the others go through the usual fetch, with the body in hand.
        ``feeds``: snapshots being read and prepared since the listing began (``_start_feeds``),
        taken chunk by chunk as they come, so that the inserts overlap the preparing; ``read``:
        entries taken from those feeds already and not used yet (``_EarlyTake.waiting``)."""
        self._from_snapshot = {}
        if self.snapshot_min <= 0:
            return
        feeds = feeds or {}
        fetches: dict[str, dict[str, Action]] = {}
        for action in plan.actions:
            if action.op is Op.FETCH and action.etag:
                fetches.setdefault(action.profile, {})[_planned_key(action)] = action
        taken: set[str] = set()  # keys pulled here: their fetches are done
        effects: list[Effect] = []
        for profile, wanted in fetches.items():
            if profile not in snapshots or (len(wanted) < self.snapshot_min and profile not in feeds):
                continue  # (a snapshot read ahead is used whatever is left to fetch)
            feed = feeds.get(profile)
            chunks: Iterable[dict[str, _Prefetched] | dict[str, tuple[str, bytes]]] = ()
            if feed is not None:
                chunks = chain([(read or {}).get(profile, {})], feed.chunks())
            used = 0
            for chunk in chunks:
                used += self._take_snapshot_entries(chunk, wanted, known, taken, effects, report)
                # Inserted in batches, and whenever the next chunk is not ready yet: what the feed
                # prepares meanwhile is the next batch's.
                if len(effects) >= BATCH_SIZE * 4 or (len(effects) >= BATCH_SIZE and feed is not None
                                                      and not feed.pending()):
                    self._check_cancelled()  # what was applied stays applied
                    self.state.apply(effects)
                    effects = []
            if feed is None or not feed.read:  # not read ahead (or that failed): read here, whole
                entries = self._first_snapshot(profile, snapshots[profile])
                if entries is not None:
                    used += self._take_snapshot_entries(
                        {k: v for k, v in entries.items() if k not in taken}, wanted, known, taken, effects, report)
            report.counts["from_snapshot"] += used
        self.state.apply(effects)
        if taken:
            plan.actions = [a for a in plan.actions if not (a.op is Op.FETCH and _planned_key(a) in taken)]

    def _take_snapshot_entries(self, entries: dict[str, _Prefetched] | dict[str, tuple[str, bytes]],
                               wanted: dict[str, Action], known: set[str], taken: set[str], effects: list[Effect],
                               report: PassReport) -> int:
        """The entries (prepared, or ``(etag, body)``) that stand for a planned fetch: the
        listing's ETag, the body that ETag names, within the size limit. A memory this host does
        not know is pulled (its effect appended, its key added to ``taken``); a known one keeps
        its fetch, with the body in hand (``_from_snapshot``). Returns how many were used."""
        used = 0
        for obj_key, entry in entries.items():
            action = wanted.get(obj_key)
            if action is None or obj_key in taken or obj_key in self._from_snapshot:
                continue
            if isinstance(entry, prepared.Prepared):
                pre: _Prefetched | None = entry
                etag, body = entry.etag, entry.body
                # Its body's MD5 (32 hex digits) is the listed ETag: only an MD5 ETag can be
                # equal to it (``snapshot.etag_md5``, without checking the digits a second time).
                matches = bool(entry.md5) and entry.md5 == action.etag.strip('"').lower()
            else:
                pre = None
                etag, body = entry
                matches = snapshot.body_matches(body, action.etag)
            if etag != action.etag or len(body) > self.max_object_bytes or not matches:
                continue
            used += 1
            if action.id in known:
                self._from_snapshot[obj_key] = body
                continue
            taken.add(obj_key)
            if pre is not None and pre.memory is None:
                report.counts["skipped_objects"] += 1
                effects.append(SkipObject(obj_key, action.etag, pre.reason))
                continue
            if pre is not None and pre.memory is not None:
                effects.append(Synced(pre.memory, action.etag, pre.hash, 0, "remote"))
            else:
                try:
                    remote = decode(body, action.profile, action.id)
                except BadObject as exc:
                    report.counts["skipped_objects"] += 1
                    effects.append(SkipObject(obj_key, action.etag, exc.reason))
                    continue
                effects.append(Synced(remote, action.etag, content_hash(remote), 0, "remote"))
            report.counts["pulled"] += 1
        return used

    def _write_snapshots(self, listing: list[Listed], base: dict[str, Any],
                         snapshots: dict[str, list[str]], report: PassReport, busy: set[str], *,
                         marker_id: str | None = None, seq: int | None = None) -> None:
        """Write the snapshot of each profile that agrees with the bucket, has at least
        ``sync.snapshot_min_objects`` objects, and whose snapshot in the bucket is not current.
        A snapshot only holds objects whose exact memory this host has (base ETag = listed ETag,
        content unchanged, no unmerged access bumps); a profile with any other is skipped."""
        if self.snapshot_min <= 0:
            return
        by_profile: dict[str, list[Listed]] = {}
        for obj in listing:  # grouped by the key's profile part; the keys are checked below
            profile, sep, _rest = obj.key[len(PREFIX):].partition("/")
            if sep:
                by_profile.setdefault(profile, []).append(obj)
        for profile, objects in by_profile.items():
            if len(objects) < self.snapshot_min or profile in busy:
                continue  # (a fresh host's pull: every profile is busy, nothing to check)
            objects = [o for o in objects if (parse_key(o.key) or ("", ""))[0] == profile]
            if len(objects) < self.snapshot_min:
                continue
            current = snapshots.get(profile, [])
            name = snapshot.digest((o.key, o.etag) for o in objects)
            if any(snapshot.parse_snapshot_key(k) == (profile, name) and not self._snapshot_aging(k) for k in current):
                continue  # the bucket's snapshot is this listing's (and young enough for a fresh host)
            # Read now (only for a snapshot to write): whatever changed since the pass began
            # fails the checks below, and the profile waits for a later pass.
            local = {m.id: (m, delta) for m, delta in self.store.memories_with_deltas([profile])}
            entries: list[tuple[str, str, bytes]] = []
            for obj in objects:
                mid = obj.key.rsplit("/", 1)[-1][:-5]
                b, here = base.get(mid), local.get(mid)
                if (b is None or here is None or b.etag != obj.etag or here[1] != 0
                        or here[0].profile_name != profile or content_hash(here[0]) != b.content_hash):
                    break
                entries.append((obj.key, obj.etag, encode(here[0])))
            else:
                key, body = snapshot.build(profile, entries, marker=marker_id, seq=seq,
                                           created_at=format_time(utcnow()))
                try:
                    self.bucket.put(key, body)
                    for old in current:
                        if old != key:
                            self.bucket.delete(old)
                    report.counts["snapshots"] += 1
                except BucketUnavailable as exc:  # a snapshot is an optimisation: never fail a pass
                    log.info("snapshot of %s not written: %s", profile, exc)

    def _write_pushed_snapshots(self, plan: Plan, report: PassReport, *, marker_id: str | None,
                                seq: int | None) -> None:
        """After a push of many memories (``sync.push_snapshot_min`` creates of one profile in
        this pass: a first push, an import), write the profile's snapshot now, from what this
        host synced (each memory whose base is its current content, without unmerged bumps),
        rather than leave it to a later full pass that finds the profile settled: a fresh host
        right after a first push then reads the whole bank in one GET instead of fetching what
        its hydrate deadline allows. A hint like any snapshot: the fresh host lists, and takes an
        entry only where the listing shows its ETag and its body is the one that ETag names."""
        if self.snapshot_min <= 0 or self.push_snapshot_min <= 0:
            return
        created = Counter(a.profile for a in plan.actions if a.op is Op.CREATE)
        for profile, n in sorted(created.items()):
            if n < max(self.push_snapshot_min, self.snapshot_min):
                continue
            self._check_cancelled()
            base = self.state.base_entries([profile])
            entries: list[tuple[str, str, bytes]] = []
            for memory, delta in self.store.memories_with_deltas([profile]):
                b = base.get(memory.id)
                if b is not None and delta == 0 and b.profile == profile and content_hash(memory) == b.content_hash:
                    entries.append((object_key(profile, memory.id), b.etag, encode(memory)))
            if len(entries) < self.snapshot_min:
                continue
            key, body = snapshot.build(profile, entries, marker=marker_id, seq=seq, created_at=format_time(utcnow()))
            try:
                older = [k for k in self._list_snapshots([profile]).get(profile, []) if k != key]
                self.bucket.put(key, body)
                for old in older:
                    self.bucket.delete(old)
                report.counts["snapshots"] += 1
            except BucketUnavailable as exc:  # a snapshot is an optimisation: never fail a pass
                log.info("snapshot of %s not written after the push: %s", profile, exc)

    def _collect_skips(self, plan: Plan, report: PassReport, prefixes: list[str]) -> None:
        seen = {s.key for s in plan.skips}
        unrecorded = [s for s in report.skipped if s["key"] not in seen]  # could not even be recorded
        report.skipped = [{"key": s.key, "reason": s.reason} for s in plan.skips] + unrecorded
        seen.update(s["key"] for s in unrecorded)
        # Objects found bad during this pass (their bodies) are in the table now.
        for prefix in prefixes:
            for key, (_etag, reason) in sorted(self.state.known_bad(prefix).items()):
                if key not in seen:
                    report.skipped.append({"key": key, "reason": reason})
                    seen.add(key)
        report.counts["skipped"] = len(report.skipped)

    def _execute(self, kind: SyncedKind[Any, Any], plan: Plan, report: PassReport, *, pull_only: bool,
                 progress: Progress | None, seen: Mapping[str, Any] | None = None) -> None:
        """Run ``plan``'s actions of ``kind`` on the worker pool and commit their effects in
        batches (``seen``: the local records the plan was made with, by id). Bucket trouble
        stops the rest and is raised once the actions in flight are done; any other failure is
        reported for that action alone."""
        seen = seen or {}
        actions = plan.actions
        total = len(actions)
        if not total:
            if progress:
                progress(0, 0)
            return
        buffer: list[Effect] = []
        last_flush = time.monotonic()
        done = 0
        failure: BucketUnavailable | None = None
        cancelled = False

        def flush() -> None:
            nonlocal last_flush
            if buffer:
                self._apply_contained(buffer, report)
                buffer.clear()
            last_flush = time.monotonic()

        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="memlocal-sync") as pool:
            pending: set[Future[tuple[list[Effect], Counter[str]]]] = set()
            queue = self._with_locals(kind, actions)
            futures: dict[Future[Any], Action] = {}
            # Finished futures arrive here: O(1) per completion, where ``wait()`` on the pending
            # set re-arms a waiter on every pending future each time one finishes.
            completed: SimpleQueue[Future[Any]] = SimpleQueue()

            def submit_more() -> None:
                # Keep the queue bounded so a cancelled pass stops quickly.
                while not cancelled and not self._cancelled.is_set() and len(pending) < self.workers * 4:
                    item = next(queue, None)
                    if item is None:
                        return
                    action, loaded = item
                    fut = pool.submit(self._run_action, kind, action, pull_only, loaded, seen.get(action.id))
                    futures[fut] = action
                    pending.add(fut)
                    fut.add_done_callback(completed.put)

            def next_finished() -> list[Future[Any]]:
                try:
                    finished = [completed.get(timeout=BATCH_SECONDS)]
                except Empty:
                    return []
                while True:
                    try:
                        finished.append(completed.get_nowait())
                    except Empty:
                        return finished

            submit_more()
            while pending:
                for fut in next_finished():
                    pending.discard(fut)
                    action = futures.pop(fut)
                    done += 1
                    try:
                        effects, counts = fut.result()
                        buffer.extend(effects)
                        report.counts.update(counts)
                    except BucketUnavailable as exc:
                        if failure is None:
                            failure = exc
                        cancelled = True
                    except Exception as exc:  # one item's trouble must not stop the others
                        log.exception("sync %s of %s%s failed", action.op.value, kind.what, action.id)
                        report.errors.append(f"{action.op.value} {kind.what}{action.id}: {exc}")
                if progress:
                    progress(done, total)
                if len(buffer) >= BATCH_SIZE or time.monotonic() - last_flush >= BATCH_SECONDS:
                    flush()
                submit_more()
        flush()
        if failure is not None:
            raise failure

    def _apply_contained(self, effects: list[Effect], report: PassReport) -> None:
        """Commit a batch of effects; if the batch fails, commit them one by one, so that one
        effect the database refuses (whatever the reason) is reported alone and never ends the
        pass: a pulled object that cannot be stored becomes a skipped object."""
        try:
            self.state.apply(effects)
            return
        except Exception as exc:
            log.warning("a batch of %d sync effects failed (%s): applying them one by one", len(effects), exc)
        for eff in effects:
            try:
                self.state.apply([eff])
            except Exception as exc:
                reason = f"cannot be stored here: {fold_whitespace(exc)[:200]}"
                if isinstance(eff, Synced):
                    key = object_key(eff.memory.profile_name, eff.memory.id)
                    log.warning("skipping %s: %s", printable(key), printable(reason))
                    report.counts["skipped_objects"] += 1
                    try:
                        self.state.apply([SkipObject(key, eff.etag, reason)])
                    except Exception:  # the report still lists it
                        report.skipped.append({"key": key, "reason": reason})
                else:
                    report.errors.append(f"{type(eff).__name__} {getattr(eff, 'id', getattr(eff, 'key', ''))}: {reason}")

    # --- one action of any kind (runs on a worker thread) ------------------------------------------

    def _with_locals(self, kind: SyncedKind[Any, Any], actions: Sequence[Action]) -> Iterator[tuple[Action, Any]]:
        """The actions, each CREATE with its local record, read ``PRELOAD`` ids at a time as the
        queue reaches them (``SyncedKind.load_many``; a kind that reads none: ``None``)."""
        for start in range(0, len(actions), PRELOAD):
            chunk = actions[start:start + PRELOAD]
            ids = [a.id for a in chunk if a.op is Op.CREATE]
            loaded = kind.load_many(self.state, ids) if ids else {}
            for action in chunk:
                yield action, loaded.get(action.id)

    def _run_action(self, kind: SyncedKind[Any, Any], action: Action, pull_only: bool, loaded: Any = None,
                    seen: Any = None) -> tuple[list[Effect], Counter[str]]:
        """One planned action: its requests, and the effects to commit (``loaded``: the local
        record of a CREATE, read ahead; ``seen``: the record the plan saw)."""
        counts: Counter[str] = Counter()
        op = action.op
        if op is Op.CREATE:
            effects = self._create(kind, action.id, counts, loaded)
        elif op is Op.FETCH:
            effects = self._fetch(kind, action.id, action.profile, action.etag, counts, pull_only=pull_only)
        elif op is Op.UPDATE:
            # The remote is still at the base ETag, so its count is ours minus the unmerged delta.
            record = kind.load(self.state, action.id)
            effects = [] if record is None else self.push(kind, record, action.etag, counts, attempt=1)
        elif op is Op.DELETE_REMOTE:
            key = kind.key(action.profile, action.id)
            self.bucket.delete(key)
            counts[kind.counters.deleted_remote] += 1
            effects = [kind.deleted_remote(action.id), Changed(key, "", "delete")]
        elif op is Op.DELETE_LOCAL:
            counts[kind.counters.deleted_local] += 1
            effects = [kind.delete_local(action, seen)]
        elif op is Op.FORGET:
            effects = [kind.forget(action.id)]
        elif op is Op.REID:
            effects = self.reid(action.id, counts)
        else:  # pragma: no cover
            raise AssertionError(op)
        return effects, counts

    def _create(self, kind: SyncedKind[Any, Any], item_id: str, counts: Counter[str], loaded: Any = None) -> list[Effect]:
        """PUT a local record the bucket does not have (``If-None-Match: *``). ``loaded``: the
        record, read ahead (``None``: read here; one deleted since is not recreated, its outbox
        entry says so)."""
        record = loaded if loaded is not None else kind.load(self.state, item_id)
        if record is None:
            return []
        sent = kind.outgoing(record)
        key, profile, _id = kind.key_of(sent)
        body = kind.encode(sent)
        try:
            etag = self.bucket.create(key, body)
        except PreconditionFailed:
            # Someone holds that key: our own earlier PUT, or another host's.
            return self._fetch(kind, item_id, profile, "", counts)
        counts[kind.counters.created] += 1
        return [*kind.written(sent, etag, created=True), Changed(key, etag, "put", len(body)),
                *kind.after_create(self, sent, etag, counts)]

    def push(self, kind: SyncedKind[Any, Any], record: Any, etag: str, counts: Counter[str], *,
             attempt: int) -> list[Effect]:
        """PUT ``record`` with ``If-Match: etag`` (also ``Pipeline.push``, for the kinds'
        ``resolve``). A 412 re-reads the object and resolves again (up to ``MERGE_ATTEMPTS``
        writes); a 404 means it was deleted on another host meanwhile: the deletion wins."""
        key, profile, item_id = kind.key_of(record)
        data = kind.encode(record)
        try:
            new_etag = self.bucket.replace(key, data, etag)
        except PreconditionFailed:
            counts["precondition_failed"] += 1
            if attempt >= MERGE_ATTEMPTS:
                raise SyncError(f"{key} kept changing: gave up after {attempt} conditional writes; next pass retries") from None
            return self._fetch(kind, item_id, profile, "", counts, attempt=attempt + 1, merging=True)
        except ObjectMissing:
            return self._found_gone(kind, item_id, profile, record)
        counts[kind.counters.pushed] += 1
        return [*kind.written(record, new_etag, created=False), Changed(key, new_etag, "put", len(data))]

    def _fetch(self, kind: SyncedKind[Any, Any], item_id: str, profile: str, listed_etag: str, counts: Counter[str], *,
               pull_only: bool = False, attempt: int = 1, merging: bool = False) -> list[Effect]:
        """GET an object, decode it, and let the kind resolve it against the local record; an
        object too large or unreadable is skipped (remembered with its ETag), never applied."""
        key = kind.key(profile, item_id)
        try:
            # A body from the profile's snapshot, under the listed ETag, stands for the GET.
            cached = self._from_snapshot.pop(key, None) if attempt == 1 and listed_etag else None
            data, etag = (cached, listed_etag) if cached is not None else self.bucket.get(key, self.max_object_bytes)
        except ObjectMissing:
            if merging:
                # Our conditional write was refused and the object is gone: deleted on another
                # host meanwhile, as when the PUT itself answers 404 (SeaweedFS answers If-Match
                # on a missing key with 412): the deletion wins, subject to the guard.
                return self._found_gone(kind, item_id, profile)
            return []  # gone since the listing: the next pass sees the deletion
        except ObjectTooLarge as exc:
            counts["skipped_objects"] += 1
            return [SkipObject(key, exc.etag or listed_etag, str(exc))]
        try:
            remote = kind.decode(data, profile, item_id)
        except BadObject as exc:
            counts["skipped_objects"] += 1
            log.warning("skipping %s: %s", printable(key), printable(exc.reason))
            return [SkipObject(key, etag or listed_etag, exc.reason)]
        return kind.resolve(self, remote, etag, data, counts, pull_only=pull_only, attempt=attempt)

    def _found_gone(self, kind: SyncedKind[Any, Any], item_id: str, profile: str, record: Any = None) -> list[Effect]:
        """An object gone under a conditional write of ours: deleted elsewhere, and the deletion
        wins, but it is a deletion like any other: counted by the mass-delete guard with the
        plan's (``_guarded_deletions``), so nothing is deleted here yet."""
        effects = kind.gone(self.state, item_id, profile, record)
        if effects:
            with self._gone_lock:
                self._gone.append(_Gone(kind, item_id, profile, effects))
        return []

    def _guarded_deletions(self, report: PassReport, plans: Sequence[tuple[SyncedKind[Any, Any], Plan | None]],
                           deferred: Mapping[str, list[Action]], seen: Mapping[str, Mapping[str, Any]],
                           explained: set[str],
                           synced: Callable[[SyncedKind[Any, Any]], Counter[str]], *, force: bool,
                           pull_only: bool, progress: Progress | None) -> list[Guard]:
        """Every local deletion of the pass meets one guard, whatever path found it: the plan's
        (an object gone from the listing or the record), and those found under a conditional
        write (``_found_gone``: an access merge answered 404). If any rule trips, for memories or
        for notes, none of the unexplained ones is applied (the plan's guards included); else
        they are applied now. Returns the guards."""
        with self._gone_lock:
            gone, self._gone = self._gone, []
        guards: list[Guard] = [g for _kind, p in plans if p is not None for g in p.guards]
        if not force and not guards:
            for kind, _p in plans:
                counted: Counter[str] = Counter(kind.plan.scope(a.profile) for a in deferred.get(kind.what, []))
                counted.update(kind.plan.scope(g.profile) for g in gone if g.kind is kind and not _explains(explained, g))
                if counted:
                    guards += hold_deletions(counted, synced(kind), empty_unverified=False,
                                             minimum=self.mass_delete_min, share=self.max_delete_share,
                                             noun=kind.plan.noun)
        if guards and not force:
            for g in gone:  # the held ones stay: the next pass finds them gone again
                if _explains(explained, g):
                    self._apply_gone(g, report)
            return guards
        for kind, _p in plans:
            actions = deferred.get(kind.what, [])
            if actions:
                self._execute(kind, Plan(actions=actions), report, pull_only=pull_only, progress=None,
                              seen=seen.get(kind.what))
        for g in gone:
            self._apply_gone(g, report)
        return guards

    def _apply_gone(self, g: "_Gone", report: PassReport) -> None:
        report.counts[g.kind.counters.deleted_local] += 1
        self._apply_contained(list(g.effects), report)

    # --- automation notes: memlocal/automations/<id>.json (docs/sync.md, "Automation notes") ----

    def _plan_notes(self, report: PassReport, *, verified: bool, force: bool,
                    pull_only: bool) -> tuple[Plan, dict[str, NoteRecord]]:
        """List and plan the automation notes (few and small: one listing, no change record, no
        snapshots); bucket trouble raises ``BucketUnavailable`` like the memories' part. Returns
        the plan and the local notes it saw, which ``_execute`` runs as the kind ``NOTE``."""
        notes, base, deletes = self.state.note_entries()
        # (Not in the report's ``pages``/``objects``: those describe the listing of ``memory/``.)
        listing = self.bucket.list(NOTE_PREFIX)
        known_bad = self.state.known_bad(NOTE_PREFIX)
        plan = plan_notes(
            {a: self.state.note_side(a, n) for a, n in notes.items()}, listing.objects, base, deletes, known_bad,
            max_object_bytes=self.max_object_bytes, mass_delete_min=self.mass_delete_min,
            max_delete_share=self.max_delete_share, verified=verified, force=force, pull_only=pull_only,
        )
        for op, n in plan.counts().items():
            report.planned[f"note_{op}"] = n
        listed = {o.key for o in listing.objects}
        effects: list[Effect] = [SkipObject(s.key, s.etag, s.reason) for s in plan.skips
                                 if s.persist and known_bad.get(s.key, ("", ""))[0] != s.etag]
        effects += [Unskip(key) for key in known_bad if key not in listed]
        self.state.apply(effects)
        return plan, {a: NoteRecord(a, n) for a, n in notes.items()}

    def reid(self, memory_id: str, counts: Counter[str]) -> list[Effect]:
        """Give our memory a fresh id (another host's memory owns ``memory_id``), then push it
        (also ``Pipeline.reid``, for the kinds' ``resolve``)."""
        for _ in range(16):
            candidate = new_id()
            if candidate not in self._remote_ids and not self.store.exists(candidate):
                break
        else:  # pragma: no cover - 2^32 ids
            raise SyncError("could not draw an unused memory id")
        moved = self.state.reid(memory_id, candidate)
        if moved is None:
            return []
        counts["reid"] += 1
        log.warning("memory id %s is taken in the bucket by another memory: ours is now %s", memory_id, candidate)
        return self._create(MEMORY, candidate, counts)


@dataclass(frozen=True, slots=True)
class _Gone:
    """An item whose object vanished under a conditional write of this pass (its effects held
    until the guard has counted every deletion of the pass)."""

    kind: Any  # SyncedKind
    id: str
    profile: str
    effects: tuple[Effect, ...] | list[Effect]


def _explains(explained: set[str], gone: _Gone) -> bool:
    """Whether a delete record explains ``gone`` (delete records name memories only)."""
    return gone.kind is MEMORY and gone.id in explained


class _EarlyTake:
    """A fresh profile's snapshot entries pulled while the listing still runs.

    A fresh host's pass used to list the whole bucket, plan, and only then insert what the
    snapshots hold: the inserts followed the listing. Here each part of the listing, as it comes
    (``SyncEngine._list``), confirms the keys it shows, and once a profile's snapshot has been
    read whole (its feed finished: until then the second core is the snapshot helper's, and where
    the listing ends first nothing is taken here at all), an entry of a profile this host has
    nothing of is pulled once its key is confirmed with the entry's ETag, by the same rule as
    after the plan (``_take_snapshot_entries``: the listed ETag, the body it names,
    within the size cap). What the plan would do with such a key is known before the listing
    ends: nothing here holds its id (no local row, no base, no queued deletion) and the object
    is usable, so the plan fetches it. A hint still decides nothing alone: an entry whose key no
    listing shows, or shows with another ETag, is never used. ``finish`` then hands the plan those
    memories as synced (local rows and bases, as a later pass would read them), so that it
    plans nothing more for them; an id that the whole listing shows under two profiles is
    resolved by the plan as for any memory this host holds."""

    def __init__(self, engine: SyncEngine, feeds: Mapping[str, prepared.Feed], held: set[str],
                 known_bad: Mapping[str, tuple[str, str]], report: PassReport) -> None:
        self._engine, self._feeds, self._held, self._known_bad, self._report = engine, feeds, held, known_bad, report
        # Keys the listing showed (their fetch as the plan would make it), not matched yet.
        self._confirmed: dict[str, dict[str, Action]] = {p: {} for p in feeds}
        # Entries read from the feeds whose keys the listing has not shown (yet): the plan's.
        self.waiting: dict[str, dict[str, _Prefetched]] = {p: {} for p in feeds}
        self._parts: list[Sequence[Listed]] = []  # parts listed, their keys not read yet
        self._taken: set[str] = set()
        self._effects: list[Effect] = []
        self._applied: list[Effect] = []
        engine._from_snapshot = {}
        self._wake: Future[None] = Future()
        for feed in feeds.values():
            feed.notify = self._chunk_came

    def _chunk_came(self) -> None:  # on the feeds' thread
        try:
            self._wake.set_result(None)
        except InvalidStateError:  # set already, by another feed the pass has not taken yet
            pass

    def woken(self) -> Future[None] | None:
        """Done once a feed has finished (``None`` once every feed has been taken whole): the
        listing's wait includes it, so that the entries are taken then, not only as parts of the
        listing come."""
        return None if all(feed.ended for feed in self._feeds.values()) else self._wake

    def listed(self, objects: Sequence[Listed]) -> None:
        """A part of the listing: confirm its keys, take the entries that match, insert them."""
        if objects:
            self._parts.append(objects)
        self._take()

    def _confirm(self) -> None:
        """The keys of the parts listed so far, read once a feed has finished (until then, and
        where none finishes before the listing ends, no key is read twice: the plan reads them)."""
        cap = self._engine.max_object_bytes
        for objects in self._parts:
            for obj in objects:
                parsed = parse_key(obj.key)
                if parsed is None or parsed[0] not in self._confirmed or parsed[1] in self._held:
                    continue
                if obj.key not in self._taken and unusable(obj, self._known_bad, cap) is None:
                    self._confirmed[parsed[0]][obj.key] = Action(Op.FETCH, parsed[1], parsed[0], obj.etag)
        self._parts = []

    def _take(self) -> None:
        if self._wake.done():  # a new one before the feeds are read: a chunk put after sets it
            self._wake = Future()
        if not any(feed.finished for feed in self._feeds.values()):
            return
        self._confirm()
        for profile, feed in self._feeds.items():
            if not feed.finished:
                # Its chunks wait in the feed until it has them all: while the snapshot is being
                # read, the second core is its helper's. Where the listing is the shorter
                # (a fast server) nothing is taken here at all, as before this class.
                continue
            waiting, confirmed = self.waiting[profile], self._confirmed[profile]
            for chunk in feed.chunks(wait=False):
                waiting.update(chunk)
            ready = {key: waiting.pop(key) for key in [k for k in confirmed if k in waiting]}
            if ready:
                used = self._engine._take_snapshot_entries(ready, confirmed, set(), self._taken, self._effects,
                                                           self._report)
                self._report.counts["from_snapshot"] += used
                for key in ready:  # matched or not, decided: a mismatch is the plan's fetch
                    del confirmed[key]
        if self._effects:  # one transaction for what a part or a chunk confirmed (hundreds at most)
            self._engine._check_cancelled()  # what was applied stays applied
            self._engine.state.apply(self._effects)
            self._applied += self._effects
            self._effects = []

    def finish(self, local: dict[str, Local], base: dict[str, Base],
               known_bad: dict[str, tuple[str, str]], listing: Sequence[Listed] = ()) -> None:
        """The listing is over: take what the feeds sent since, then add what was pulled to the
        plan's sides (``local``, ``base``) and what was found unusable to ``known_bad``. A memory
        taken whose id the whole ``listing`` shows under another profile too, where that copy is
        the older (``plan.first_copy``), is taken back: the plan fetches the other, as on every
        host (docs/sync.md, "One id, one profile")."""
        self._take()
        pulled = {e.memory.id: e for e in self._applied if isinstance(e, Synced)}
        if pulled:
            cap = self._engine.max_object_bytes
            copies: dict[str, list[tuple[str, Listed]]] = {}
            for obj in listing:
                parsed = parse_key(obj.key)
                if parsed is not None and unusable(obj, known_bad, cap) is None:
                    copies.setdefault(parsed[1], []).append((parsed[0], obj))
            undo = [DeleteLocal(mid, e.memory.profile_name) for mid, e in pulled.items()
                    if len(copies.get(mid, ())) > 1 and first_copy(copies[mid]) != e.memory.profile_name]
            if undo:
                self._engine.state.apply(undo)
                self._report.counts["pulled"] -= len(undo)
                for d in undo:
                    del pulled[d.id]
                    self._taken.discard(object_key(d.profile, d.id))
        if pulled:
            stored = self._engine.state.base_entries(list(self._feeds))
            for mid, synced in pulled.items():
                b = stored.get(mid)
                if b is not None and b.etag == synced.etag and b.profile == synced.memory.profile_name:
                    base[mid] = b
                    local[mid] = Local(mid, b.profile, synced.base_hash, 0, inactive=not synced.memory.is_active)
        for skip in self._applied:
            if isinstance(skip, SkipObject):
                known_bad[skip.key] = (skip.etag, skip.reason)

    def profiles(self) -> set[str]:
        """The profiles this took memories into (changed by this pass)."""
        return {parsed[0] for key in self._taken if (parsed := parse_key(key)) is not None}


@dataclass(frozen=True, slots=True)
class _RecordView:
    """What the change record says for one pass: follow it (``incremental``) or list in full;
    the segments read; the cursor once the pass completes (``tail``: the last segment number
    read before the listing, never past a gap still waited for); why the record was not
    followed (``reason``); the cursor the pass started from (``None``: untrusted or none);
    ``last``: the highest segment number known (where this host's next segment goes)."""

    incremental: bool
    segments: list["changes.Segment"]
    tail: int | None
    reason: str = ""
    cursor: int | None = None
    fresh: bool = False  # a host with nothing yet (it reads its snapshots while it lists)
    last: int | None = None


_Prefetched = prepared.Prepared


# Sorts after any character a key can hold: ``<profile prefix>`` + this is past the profile's keys.
_PAST: str = "\U0010ffff"
_HEX: str = "0123456789abcdef"


def _planned_key(action: Action) -> str:
    """The object key of a planned action (its profile and id come from a checked key)."""
    return f"{PREFIX}{action.profile}/{action.id}{SUFFIX}"


def _id_listings(last: str) -> list[tuple[str | None, str | None, str | None]] | None:
    """The listings (prefix, ``start_after``, ``last``) that cover every key of ``last``'s profile
    after ``last``; a ``None`` prefix is the pass's own. ``None`` when ``last`` is not a memory key.

    One per first hex digit of the id from ``last``'s own on (a prefix listing: the server reads
    and returns only those keys), and two ranges for the keys that no such prefix holds: those
    between ``mem-9…`` and ``mem-a`` (``mem-A…``, ``mem-~``) and those after ``mem-f…`` (``zz.json``,
    ``sub/…``). Keys between two consecutive digits' prefixes can only be the next prefix itself,
    which its listing holds."""
    parsed = parse_key(last)
    if parsed is None:
        return None
    profile = profile_prefix(parsed[0])
    head = f"{profile}mem-"
    digit = last[len(head)]
    out: list[tuple[str | None, str | None, str | None]] = [(head + digit, last, None)]
    out += [(head + h, None, None) for h in _HEX if h > digit]
    if digit <= "9":
        out.append((profile, head + "9" + _PAST, head + "a"))
    out.append((profile, head + "f" + _PAST, profile + _PAST))
    return out

