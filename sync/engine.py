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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from filelock import FileLock, Timeout

from memlocal.config import Config
from memlocal.errors import SyncError, fold_whitespace
from memlocal.humanize import plural
from memlocal.model import format_time, utcnow
from memlocal.plugins import Replica

from . import marker
from .breaker import HostBreaker
from .bucket import (
    BucketClient, BucketSettings, BucketUnavailable, ObjectMissing, ObjectTooLarge,
)
from .clients import open_bucket
from .executor import Executor, Progress
from .feeds import SnapshotFeeds
from . import changes, converge, objects, prepared
from .lister import Lister, EarlyTake
from .kinds import MEMORY, NOTE, NoteRecord, SyncedKind
from .objects import (
    NOTE_PREFIX,
    Listed,
    content_hash,
    object_key,
    parse_key,
    profile_prefix,
)
from .plan import (
    NOTES_SCOPE, Action, Local, Op, Plan, held_summary, plan_notes, plan_pass,
)
from .report import PassReport
from .state import (
    META_LAST_ERROR,
    META_LAST_PASS,
    Effect,
    SkipObject,
    SyncState,
    Unskip,
)

log = logging.getLogger(__name__)

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
# How often a pass waiting for another process's pass looks whether it was cancelled.
LOCK_POLL_S = 0.05


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


class PassCancelled(SyncError):
    """The pass was cancelled (``SyncEngine.cancel``: its process is closing the bank)."""


class SyncEngine(Lister, SnapshotFeeds, Executor):
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
        self._gone = []
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
        early: EarlyTake | None = None
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
            # by part, instead of after the whole listing (``EarlyTake``).
            early = EarlyTake(self, feeds, set(base) | local_rows.ids() | set(outbox_deletes), known_bad,
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
        note_work = any(k.startswith(NOTE_PREFIX) for k in latest) or bool(self.store.note_outbox())
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

