"""Write-through to the bucket, plugged into ``MemoryBank`` via the ``memlocal.replicators`` entry point.

A save commits locally with its outbox entry in the same transaction (the store records it), then
PUTs the object with ``If-None-Match: *`` under a short timeout and no retries
(``sync.put_timeout_s``): an unreachable bucket costs a save at most that long, the save still
succeeds, and the outbox entry stays for the next pass. Deletions go the same way.

``request_refresh`` is the read path's pull (the REST API calls it through
``MemoryBank.refresh_for_read``): it queues a pull-only pass of one profile (or discovers every
profile from the bucket with a delimiter listing of ``memory/`` and queues each, and pulls the
automation notes) on a background
thread and returns at once with the age of the local data, so a request never waits on the
bucket. ``refresh_if_stale`` is the blocking form, for callers that want the pull done.

``prepare`` is the pull on open (``MemoryBank`` calls it before its first read): a host whose
index has never completed a pass against this bucket pulls all of it (the engine's snapshot
path) on a background thread, and reads wait for it up to ``sync.hydrate_deadline_s``; a
hydrated host asks for a background refresh, as a REST read does. The write-through breaker is
the host's (``memlocal_sync.breaker``): its state is in the index, shared by every process.
Background pulls run on daemon threads, one job at a time under one gate; closing the bank
cancels the job in flight and waits for it to stop at its next step (its request in flight
answered or timed out), so no pull touches the database after it closed and a one-shot process
never waits at exit for the rest of a pull it no longer needs.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from memlocal.plugins import AutomationNote, Replica, ReplicatorFactory, ReplicatorStatus
from memlocal.config import Config
from memlocal.errors import MemoryBankError, SyncError
from memlocal.model import Memory, to_us, validate_profile

from . import changes, marker
from .breaker import HostBreaker
from .bucket import (
    BucketClient, BucketSettings, BucketUnavailable, ObjectMissing, PreconditionFailed,
)
from .clients import open_bucket
from .kinds import MEMORY, NOTE, MemoryRecord, NoteRecord
from .objects import PREFIX, content_hash, decode, object_key
from .report import PassOptions, PassReport
from .state import META_MARKER, Changed, Effect, SyncState

if TYPE_CHECKING:
    # The engine (and botocore's parsers, through the listing) is imported when a pull runs: a
    # save, above all one the open breaker sends straight to the outbox, never needs it.
    from .engine import SyncEngine

log = logging.getLogger(__name__)

def factory(config: Config, store: Replica) -> "S3Replicator | None":
    """The ``memlocal.replicators`` entry point: a replicator, or ``None`` without a bucket (the
    bank then runs local only, and ``MemoryBank.open`` says so once per process)."""
    settings = BucketSettings.from_config(config)
    return S3Replicator(config, store, settings) if settings is not None else None


class Refresher:
    """Background pulls for readers: a request never waits on the bucket.

    ``request(key, ttl)`` queues a refresh of ``key`` (a profile; ``None``: discover every
    profile from the bucket and queue each) unless one is queued or running already, or the last
    attempt is younger than ``ttl``; it returns at once. One worker thread runs them in turn: the
    pass lock is per database, so two pulls of one process could not run at once anyway. It is a
    daemon thread: a process exits without waiting for a pull it no longer needs.
    """

    def __init__(self, pull: Callable[[str], bool], discover: Callable[[], list[str]],
                 pull_notes: Callable[[], bool] | None = None) -> None:
        self._pull = pull
        self._discover = discover
        self._pull_notes = pull_notes
        self._queue: queue.SimpleQueue[tuple[str | None, float] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._inflight: set[str | None] = set()
        self._attempted: dict[str | None, float] = {}
        self._pulled: dict[str, float] = {}
        self._known: set[str] = set()
        self._closed = False

    def request(self, key: str | None, ttl: float) -> float | None:
        """Queue a refresh of ``key`` if due; the age in seconds of its data (``None``: never pulled)."""
        now = time.monotonic()
        with self._lock:
            due = (not self._closed and key not in self._inflight
                   and now - self._attempted.get(key, -1e18) >= ttl)
            if due:
                self._inflight.add(key)
                self._attempted[key] = now
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="memlocal-refresh", daemon=True)
                    self._thread.start()
                self._queue.put((key, ttl))
        return self.age(key)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._closed:
                return
            self._run(*item)

    def age(self, key: str | None) -> float | None:
        now = time.monotonic()
        with self._lock:
            if key is not None:
                t = self._pulled.get(key)
                return None if t is None else now - t
            if not self._known or any(p not in self._pulled for p in self._known):
                return None
            return max(now - self._pulled[p] for p in self._known)

    def _run(self, key: str | None, ttl: float) -> None:
        ok = False
        try:
            if key is None:
                profiles = self._discover()
                with self._lock:
                    self._known.update(profiles)
                for p in profiles:
                    self.request(p, ttl)
                if self._pull_notes is not None:  # notes belong to no profile: pulled with "every profile"
                    self._pull_notes()
                ok = True
            else:
                ok = self._pull(key)
        except Exception as exc:  # a background refresh must never raise into anything
            log.debug("background refresh of %s failed: %s", key or "every profile", exc)
        finally:
            with self._lock:
                self._inflight.discard(key)
                if ok and key is not None:
                    self._pulled[key] = time.monotonic()

    def close(self) -> None:
        """Run nothing more (what is queued is dropped; the pull in flight is the engine's to cancel)."""
        with self._lock:
            self._closed = True
        self._queue.put(None)


class _Hydration:
    """A fresh host's pull of the whole bucket, on a daemon thread; reads wait for it up to the
    deadline (``sync.hydrate_deadline_s``, counted from its start)."""

    def __init__(self, run: Callable[[], PassReport | None], deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self.started = time.monotonic()
        self.done = threading.Event()
        self.problem: str | None = None  # why the index may lack the bucket's memories
        self._run_fn = run
        threading.Thread(target=self._run, name="memlocal-hydrate", daemon=True).start()

    def _run(self) -> None:
        try:
            report = self._run_fn()
            if report is not None and report.result not in ("ok", "guarded"):
                self.problem = report.reason or report.result
        except SyncError as exc:  # another process's pass held the lock past the deadline
            self.problem = str(exc)
        except Exception as exc:  # containment: a read is answered from the local index regardless
            self.problem = f"{type(exc).__name__}: {exc}"
            log.debug("the pull on open failed", exc_info=True)
        finally:
            self.done.set()

    def wait(self) -> bool:
        """Wait for the pull until the deadline; whether it finished."""
        return self.done.wait(max(0.0, self.deadline_s - (time.monotonic() - self.started)))


class S3Replicator:
    """The bank's write-through hook for one store and one bucket."""

    def __init__(self, config: Config, store: Replica, settings: BucketSettings) -> None:
        self.config = config
        self.store = store
        self.settings = settings
        self.state = SyncState(store)
        put_timeout = config.get_float("sync.put_timeout_s")
        # One attempt: the outbox is the retry, and a save must not wait on backoff.
        self.bucket: BucketClient = open_bucket(settings, timeout_s=put_timeout, attempts=1, pool_size=4)
        # Reads tolerate one retry; still short, since a reader is waiting.
        self._read_bucket: BucketClient = open_bucket(settings, timeout_s=put_timeout, attempts=2,
                                                      pool_size=config.get_int("sync.workers") + 2,
                                                      page_size=config.get_int("sync.list_page_size"))
        self._engine: SyncEngine | None = None
        # The host's breaker (every process reads the same row of the index); the prober's lease
        # covers one write-through attempt and its recording.
        self.breaker = HostBreaker(store, settings.identity, base_s=config.get_float("sync.breaker_s"),
                                   probe_lease_s=2 * put_timeout + 1)
        self._prepared = False
        self._prepare_lock = threading.Lock()
        self._hydration: _Hydration | None = None
        self._notice: str | None = None  # what the first read must say (once) about the pull on open
        self._closed = False
        self._changes = changes.ChangeLog(self.bucket, retention_s=config.get_float("sync.change_retention_days") * 86400)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._last_pull: dict[str, float] = {}
        self._refresh_gate = threading.Lock()
        self.refresher = Refresher(self._pull, self._discover, self._pull_notes)
        try:
            if self.state.ensure_bucket(settings.identity):
                log.warning("bucket changed to %s: its base starts empty (nothing is deleted)", settings.describe())
        except MemoryBankError as exc:  # a read-only or busy database must not stop the bank opening
            log.warning("could not check the bucket identity: %s", exc)

    # --- saves --------------------------------------------------------------------------------

    def _writable(self) -> bool:
        """Whether write-through may write: the bucket's identity marker is known and the server
        honours conditional writes (or last-writer-wins is allowed). The first save of a host
        that has not met the bucket yet reads (or creates) the marker and probes it, once."""
        allow = self.config.get_bool("sync.allow_unconditional")
        reprobe_s = self.config.get_float("sync.reprobe_s")
        known = marker.writable(self.state, allow_unconditional=allow, reprobe_s=reprobe_s)
        if known is not None:
            return known
        try:
            marker.check(self.bucket, self.state, allow_unconditional=allow, reprobe_s=reprobe_s)
        except marker.ConditionsIgnored as exc:
            log.warning("write-through refused: %s", exc)
            return False
        except BucketUnavailable:
            raise
        except SyncError as exc:  # the marker is gone or unreadable: the next pass says why
            log.info("write-through held for the next pass: %s", exc)
            return False
        return True

    def _through(self, what: str, write: Callable[[], "list[Effect] | bool"], *, writable: bool = True,
                 conflict: Callable[[Exception], bool] | None = None) -> bool:
        """One write-through of any synced kind (``memlocal_sync.kinds``): the host's breaker, the
        bucket's writability (``writable``: its identity marker and conditional writes), then
        ``write()``, which makes the request and returns the effects to commit with it (a bool:
        the outcome, nothing to record), committed and published to the change record.
        ``conflict``: the outcome of a 412 or 404 (another host's change: the next pass's to
        merge). Never raises for the bucket: a failure leaves the write in the outbox."""
        if not self.breaker.allow():
            log.debug("%s stays in the outbox: the bucket failed recently", what)
            return False
        try:
            if writable and not self._writable():
                self.breaker.success()  # the bucket answered; writes are held for another reason
                return False
            result = write()
        except (PreconditionFailed, ObjectMissing) as exc:
            self.breaker.success()
            return conflict(exc) if conflict is not None else False
        except BucketUnavailable as exc:
            self.breaker.failure(str(exc))
            log.info("%s stays in the outbox: %s", what, exc)
            return False
        except Exception as exc:  # never fail a write that is already durable locally
            self.breaker.failure(f"{type(exc).__name__}: {exc}")
            log.warning("%s stays in the outbox: %s", what, exc)
            return False
        if isinstance(result, bool):
            return result
        self.breaker.success()
        try:
            self.state.apply(result)
        except MemoryBankError as exc:
            # The object is in the bucket; the next pass adopts it (same content, no duplicate).
            log.warning("%s reached the bucket but could not be recorded here (the next pass adopts it): %s", what, exc)
            return True
        self._publish()
        return True

    def push_saved(self, memory: Memory) -> bool:
        """Write ``memory`` through; ``True`` once the bucket has it as stored here. A new memory's
        object is created (``If-None-Match``); one the bucket already has from this host's last
        pass or write (a supersession's retired memory, both sides of a restore) is replaced
        only while it is still that version (``If-Match``: another host's change since is the
        next pass's to merge)."""
        key = object_key(memory.profile_name, memory.id)
        base = self.state.load_base(memory.id)

        def write() -> list[Effect] | bool:
            if base is None:
                record = MemoryRecord(memory, 0)
                body = MEMORY.encode(record)
                etag = self.bucket.create(key, body)
                return [*MEMORY.written(record, etag, created=True), Changed(key, etag, "put", len(body))]
            loaded = MEMORY.load(self.state, memory.id)  # the row as stored now, its unmerged bumps included
            if loaded is None:  # deleted here since: push_deleted's or the pass's
                return False
            if loaded.delta == 0 and content_hash(loaded.memory) == base.content_hash:
                return True  # the bucket has it already
            body = MEMORY.encode(loaded)
            etag = self.bucket.replace(key, body, base.etag)
            return [*MEMORY.written(loaded, etag, created=False), Changed(key, etag, "put", len(body))]

        def conflict(exc: Exception) -> bool:
            if isinstance(exc, ObjectMissing):  # deleted on another host: the next pass applies it
                return False
            if base is not None:
                log.info("%s changed in the bucket since this host last synced it: the next pass merges", key)
                return False
            # Either a concurrent pass (the daemon, woken by this very write) pushed our memory
            # first, or another host's memory holds this id (the next pass re-ids ours).
            if self._bucket_has_ours(key, memory):
                return True
            log.warning("%s already exists in the bucket: left in the outbox for the next pass", key)
            return False

        return self._through(f"save of {memory.id}", write, conflict=conflict)

    def _publish(self) -> None:
        """Publish the journal (this write, and any left by earlier ones) to the change record, so
        that other hosts' next passes see it without listing; one short attempt. A failure leaves
        it journalled for the next pass or save."""
        remembered = self.state.get_json(META_MARKER)
        if not isinstance(remembered, dict) or not remembered.get("id") or remembered.get("conditional") is not True:
            return  # no record on a server that ignores conditional writes
        try:
            changes.publish_journal(self._changes, self.state, str(remembered["id"]))
        except BucketUnavailable as exc:
            self.breaker.failure(str(exc))
            log.info("change record not published (the next pass publishes it): %s", exc)
        except Exception as exc:  # never fail a write that is already durable locally and in the bucket
            log.info("change record not published (the next pass publishes it): %s", exc)

    def _bucket_has_ours(self, key: str, memory: Memory) -> bool:
        """Whether the object at ``key`` is this very memory (same content), e.g. pushed by a pass."""
        if self.state.load_base(memory.id) is not None:
            return True  # the pass that pushed it has recorded it already
        try:
            body, _etag = self.bucket.get(key, 64 * 1024)
            theirs = decode(body, memory.profile_name, memory.id)
        except Exception:  # unreadable or bad: let the next pass decide
            return False
        return content_hash(theirs) == content_hash(memory)

    def is_synced(self, memory: Memory) -> bool:
        """Whether the bucket has ``memory`` as stored here (the base matches, nothing queued)."""
        return self.state.is_synced(memory)

    def push_deleted(self, memory: Memory) -> bool:
        key = object_key(memory.profile_name, memory.id)

        def write() -> list[Effect]:
            self.bucket.delete(key)
            # The delete record: other hosts apply this deliberate deletion without the guard.
            return [MEMORY.deleted_remote(memory.id), Changed(key, "", "delete")]

        return self._through(f"deletion of {memory.id}", write, writable=False)

    def push_note(self, automation_id: str, note: AutomationNote | None) -> bool:
        """Write an automation note through (``None``: delete its object); ``True`` once the
        bucket has it. Conditional like a save: ``If-Match`` the ETag this host synced, or
        ``If-None-Match: *`` for a note it never synced; a 412 (another host wrote the note
        meanwhile) leaves it to the next pass, which applies the conflict rule. Never raises."""
        key = NOTE.key("", automation_id)

        def write() -> list[Effect]:
            if note is None:
                self.bucket.delete(key)
                return [NOTE.deleted_remote(automation_id), Changed(key, "", "delete")]
            base = self.state.load_note_base(automation_id)
            record = NoteRecord(automation_id, (note.note, to_us(note.updated_at) or 0))
            body = NOTE.encode(record)
            etag = self.bucket.replace(key, body, base.etag) if base else self.bucket.create(key, body)
            return [*NOTE.written(record, etag, created=base is None), Changed(key, etag, "put", len(body))]

        def conflict(exc: Exception) -> bool:
            log.info("automation note %s changed in the bucket: left in the outbox for the next pass", automation_id)
            return False

        return self._through(f"automation note {automation_id}", write, conflict=conflict)

    # --- the read path's pull -------------------------------------------------------------------

    def refresh_if_stale(self, profile: str, ttl: float = 2.0) -> bool:
        """Pull ``profile`` if its last pull here is older than ``ttl`` seconds.

        Concurrent callers for one profile wait for the pull in progress and then find it fresh.
        If another process's pass holds the lock, this returns at once (that pass is pulling).
        """
        with self._locks_guard:
            lock = self._locks.setdefault(profile, threading.Lock())
        with lock:
            last = self._last_pull.get(profile)
            if last is not None and time.monotonic() - last < ttl:
                return False
            try:
                # Refreshes of other profiles in this process queue here (they are short); a pass
                # holding the lock file (the daemon, a cron run) is not waited for: it pulls too.
                with self._refresh_gate:
                    report = self._get_engine().run_pass(PassOptions(profiles=(profile,), pull_only=True,
                                                                     record=False))
            except SyncError as exc:
                log.debug("refresh of %s skipped: %s", profile, exc)
                return False
            except Exception:  # a read is answered from the local index whatever the pull hit
                log.exception("refresh of %s failed", profile)
                self._last_pull[profile] = time.monotonic()
                return False
            # Also after a failure, so an unreachable bucket is not asked on every read.
            self._last_pull[profile] = time.monotonic()
            return report.result in ("ok", "guarded")

    @contextmanager
    def _job(self) -> Iterator[bool]:
        """One background job's hold on the database: the gate, and whether the job may run
        (``False`` once the bank is closing). ``close`` takes the gate after cancelling, so it
        returns only when the job in flight has stopped: a job never uses the database, nor
        creates the engine (which creates the sync's tables), after the bank closed it."""
        with self._refresh_gate:
            yield not self._closed

    def _pull(self, profile: str) -> bool:
        """One pull-only pass of ``profile`` (the background refresh's job; none while the
        host's breaker is open)."""
        with self._job() as running:
            if not running or self.breaker.blocked():
                return False
            report = self._get_engine().run_pass(PassOptions(profiles=(profile,), pull_only=True, record=False,
                                                             trip_breaker=True))
        return report.result in ("ok", "guarded")

    def _pull_notes(self) -> bool:
        """One pull-only pass of the automation notes alone (the background refresh's job)."""
        with self._job() as running:
            if not running or self.breaker.blocked():
                return False
            report = self._get_engine().run_pass(PassOptions(profiles=(), notes=True, pull_only=True, record=False,
                                                             trip_breaker=True))
        return report.result in ("ok", "guarded")

    def _discover(self) -> list[str]:
        """``bucket_profiles`` for a background refresh of every profile: nothing while the
        host's breaker is open; a bucket that fails opens it."""
        with self._job() as running:
            if not running or self.breaker.blocked():
                return []
            try:
                return self.bucket_profiles()
            except BucketUnavailable as exc:
                self.breaker.failure(str(exc))
                raise

    # --- the pull on open ---------------------------------------------------------------------------

    def prepare(self, profile: str | None = None, *, wait: bool = True) -> str | None:
        """The pull on open. The first call decides: with ``sync.pull_on_open``, a host whose
        index has never completed a pass against this bucket pulls all of it on a background
        thread (unless the host's breaker is open); a hydrated host queues a background refresh
        of ``profile`` (``None``: every profile), as a REST read does. With ``wait`` (a read is
        about to be answered), wait for that first pull until ``sync.hydrate_deadline_s`` after
        it began; if it has not made the index ready by then, say so once (a warning) and let
        the read answer from what the index has. Never raises. Returns that notice, for the
        read that said it (it answers from part of the bucket: ``inject --json``'s ``partial``)."""
        with self._prepare_lock:
            first = not self._prepared
            self._prepared = True
            if first:
                self._start_open_pull(profile)
        if not wait or self._notice == "":
            return None
        hydration = self._hydration
        notice: str | None
        if hydration is not None and not hydration.wait():
            notice = (f"the pull of the bucket is still running after {hydration.deadline_s:g} s "
                      "(sync.hydrate_deadline_s)")
        elif hydration is not None:
            notice = hydration.problem and f"the pull of the bucket failed: {hydration.problem}"
        else:
            notice = self._notice
        with self._prepare_lock:
            if self._notice == "":
                return None
            self._notice = ""  # said (or nothing to say): later reads neither wait nor repeat it
        if notice:
            log.warning("answering from this host's index, which may lack memories from the bucket: %s", notice)
        return notice or None

    def _start_open_pull(self, profile: str | None) -> None:
        if not self.config.sync.pull_on_open:
            self._notice = ""
            return
        try:
            hydrated = self.state.hydrated(self.settings.identity)
        except MemoryBankError as exc:  # an unreadable index: reads will say why
            log.debug("pull on open skipped: %s", exc)
            self._notice = ""
            return
        if hydrated is not None:
            self._notice = ""
            self.request_refresh(profile, self.config.get_float("sync.refresh_ttl_s"))
            return
        if self.breaker.blocked():
            self._notice = ("the bucket failed recently and is not asked again until the circuit breaker's "
                            "window is over (see `memlocal sync status`)")
            return
        deadline = self.config.get_float("sync.hydrate_deadline_s")
        self._hydration = _Hydration(lambda: self._hydrate(deadline), deadline)

    def _hydrate(self, deadline: float) -> PassReport | None:
        with self._job() as running:
            if not running:
                return None
            # Another process's pass (a daemon starting beside it) is waited for up to the
            # deadline; it pulls every profile too, and this one then has nothing to do.
            return self._get_engine().hydrate(lock_timeout=deadline)

    def bucket_profiles(self) -> list[str]:
        """The profiles the bucket holds (one delimiter listing of ``memory/``) and this host's."""
        listing = self._read_bucket.list(PREFIX, delimiter="/")
        found: set[str] = set(self.store.profiles())
        for prefix in listing.prefixes:
            name = prefix[len(PREFIX):].rstrip("/")
            try:
                found.add(validate_profile(name))
            except Exception:  # a folder no memlocal wrote: not a profile
                continue
        return sorted(found)

    def request_refresh(self, profile: str | None, ttl: float) -> float | None:
        """Queue a background pull of ``profile`` (``None``: every profile, discovered from the
        bucket) if its last attempt is older than ``ttl`` s; never waits. Returns the age in
        seconds of the local copy (``None`` until a pull has completed)."""
        return self.refresher.request(profile, ttl)

    def status(self) -> ReplicatorStatus:
        """What ``memlocal sync status --json`` shows (the dashboard reads it through the bank)."""
        from .status import status_for

        return status_for(self.settings, self.store)

    def _get_engine(self) -> SyncEngine:
        if self._engine is None:
            if self._closed:  # a background pull that starts after the bank closed does nothing
                raise SyncError("the bank is closed")
            from .engine import SyncEngine

            self._engine = SyncEngine(self.config, self.store, bucket=self._read_bucket)
            if self._closed:  # closed while this pull was starting: it stops at once
                self._engine.cancel()
        return self._engine

    def close(self) -> None:
        """Stop the background pulls and release the bucket clients. A pull in flight is
        cancelled and waited for until it stops at its next step (its requests in flight
        answered or timed out, each within ``sync.put_timeout_s``); the rest of it is dropped.
        The bank closes its database after this returns, so no pull ever uses it closed."""
        self._closed = True
        self.refresher.close()
        # A job that created the engine before ``_closed`` was set is cancelled here; one that
        # creates it after sees ``_closed`` and cancels it itself (``_get_engine``).
        if self._engine is not None:
            self._engine.cancel()
        with self._refresh_gate:  # the job in flight (if any) has stopped; later ones do nothing
            pass
        self.bucket.close()
        self._read_bucket.close()


# The entry point, checked against its declaration (memlocal.plugins.ReplicatorFactory) by mypy.
_ENTRY_POINT: ReplicatorFactory = factory
