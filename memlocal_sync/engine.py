"""One reconciliation pass: snapshot, plan (``sync.plan``), then the effects.

Memories and automation notes run through the same pipeline: one decision table
(``plan.plan_pass``) and one executor (``executor.Executor._execute``), parameterised by the synced
kind (``memlocal_sync.kinds``: its key scheme, codec, local side, effects and resolution).

This module holds the pass itself (``run_pass``, asked with one ``report.PassOptions``) and its
lock, and runs the steps in order; the code of each step is a room mixed into ``SyncEngine``:
the change record's reading (``changes.RecordReader``), the listing with its early take
(``lister.Lister``), the snapshot feeds (``feeds.SnapshotFeeds``) and the executor
(``executor.Executor``) (docs/sync.md, "The engine's rooms").

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
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from memlocal.config import Config
from memlocal.errors import SyncError, fold_whitespace
from memlocal.humanize import plural
from memlocal.model import format_time, utcnow
from memlocal.plugins import Replica

from . import changes, converge, marker, objects, prepared
from .breaker import HostBreaker
from .bucket import BucketClient, BucketSettings, BucketUnavailable
from .changes import RecordReader, RecordView
from .clients import open_bucket
from .executor import Executor
from .feeds import SnapshotFeeds
from .kinds import MEMORY, NOTE, NoteRecord, SyncedKind, records_seen
from .lister import EarlyTake, Lister
from .objects import NOTE_PREFIX, profile_prefix
from .plan import NOTES_SCOPE, Action, Guard, Op, Plan, held_summary, plan_notes, plan_pass
from .report import PassOptions, PassReport
from .state import META_LAST_ERROR, META_LAST_PASS, Effect, SkipObject, SyncState, Unskip

log = logging.getLogger(__name__)

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


class SyncEngine(RecordReader, Lister, SnapshotFeeds, Executor):
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
        self._written: dict[str, tuple[str, bytes]] | None = None  # (``_write_pushed_snapshots``)
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

    def run_pass(self, options: PassOptions = PassOptions()) -> PassReport:
        """One pass over every profile (or ``options.profiles``) and, when ``options.syncs_notes``,
        the automation notes (``PassOptions`` says what each option does). Never raises for
        bucket trouble: the report says ``failed`` and why. Raises ``SyncError`` if another pass
        holds the lock past ``options.lock_timeout``. A pass that completes closes the host's
        write-through breaker (the bucket answers); with ``options.trip_breaker``, one that fails
        for the bucket opens it."""
        report = self._locked_pass(options)
        assert report is not None
        return self._finish(report, record=options.record, trip_breaker=options.trip_breaker)

    def hydrate(self, lock_timeout: float) -> PassReport | None:
        """A fresh host's pull of the whole bucket (listed, snapshots read meanwhile; every profile and the
        automation notes, pull only), recorded as a pass. ``None`` without a pass when, once the
        lock is held, this index has completed a pass of every profile against the bucket (it
        waited for another process's pass, which did it). A failure for the bucket opens the
        host's breaker."""
        options = PassOptions(pull_only=True, notes=True, lock_timeout=lock_timeout, trip_breaker=True)
        report = self._locked_pass(options, unless_hydrated=True)
        return None if report is None else self._finish(report, record=options.record,
                                                        trip_breaker=options.trip_breaker)

    def _locked_pass(self, options: PassOptions, *, unless_hydrated: bool = False) -> PassReport | None:
        self._check_cancelled()  # a cancelled engine touches neither the database nor the bucket
        lock_timeout = options.lock_timeout
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
            return self._pass(options)
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

    def _pass(self, options: PassOptions) -> PassReport:
        profiles, notes, started = options.profiles, options.syncs_notes, options.started
        reupload, pull_only = options.reupload, options.pull_only
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
            self._reconcile(report, identity, options)
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

    def _reconcile(self, report: PassReport, identity: marker.Identity, options: PassOptions) -> None:
        """The pass after the marker check: read the change record, then either the changes it
        names (``mode`` ``record``) or a full listing (``full``), plan, act, publish."""
        force, reupload, full, progress = options.force, options.reupload, options.full, options.progress
        profiles, pull_only, notes = options.profiles, options.pull_only, options.syncs_notes
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
        self._written = {} if not pull_only and self._pushed_snapshot_profiles(plan) else None
        # The memories the plan read whole, hashed: a create of one unchanged since keeps its hash.
        self._execute(MEMORY, plan, report, pull_only=pull_only, progress=progress,
                      seen=records_seen(local_rows, local) if side is None and not pull_only else None)
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
        uploading = None
        if not pull_only and not report.errors and not guards:
            uploading = self._write_pushed_snapshots(plan, marker_id=identity.id or None,
                                                     seq=view.tail if identity.conditional else None)
        self._written = None
        try:
            self._close_pass(report, plan, note_plan, guards, prefixes, identity, view, pull_only=pull_only)
        finally:
            if uploading is not None:  # the push-end snapshot, written meanwhile
                report.counts["snapshots"] += uploading.result()

    def _close_pass(self, report: PassReport, plan: Plan, note_plan: Plan | None, guards: list[Guard],
                    prefixes: list[str], identity: marker.Identity, view: RecordView, *, pull_only: bool) -> None:
        """The pass's report of skips and guards, then its change record published."""
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
