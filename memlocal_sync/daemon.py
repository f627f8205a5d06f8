"""The sync daemon: an APScheduler 3.x interval job, woken early by watchfiles.

- The pass is one job (``max_instances=1``, ``coalesce=True``) on a one-thread executor, every
  ``sync.interval_s``; the first pass starts at once.
- watchfiles watches the database's *folder* (SQLite's ``-wal`` file comes and goes, so watching
  the file itself misses writes). A change wakes the job early if this host has something to push
  (a cheap query), so the daemon's own writes do not wake it again.
- A wake-up during a pass marks the pass dirty; the job runs again right after it.
- SIGTERM / SIGINT: stop watching, let the pass in flight finish, shut the scheduler down, exit.
- With ``retention.enabled`` (off by default), a second job prunes every profile by the
  configured policy every ``retention.interval_s``, on the same executor (never during a pass):
  the library hands the daemon that policy as a callback (``retention``; the bank's
  ``apply_retention``), so the daemon never opens a bank of its own.
- Passes never overlap across processes either: the engine's lock file; a tick that finds the
  lock held by another process (``memlocal sync run`` from cron, say) is skipped.
"""

from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Mapping, Sequence

from memlocal.config import Config
from memlocal.errors import SyncError
from memlocal.humanize import plural
from memlocal.plugins import DaemonFactory, Replica, Retention

from .bucket import BucketSettings
from .engine import SyncEngine, lock_path
from .report import PassOptions, PassReport

log = logging.getLogger(__name__)

JOB_ID = "memlocal-sync-pass"
RETENTION_JOB_ID = "memlocal-retention"




def factory(config: Config, store: Replica, retention: Retention | None = None) -> "SyncDaemon | None":
    """The ``memlocal.daemons`` entry point (``memlocal serve --with-sync``): a daemon sharing
    the caller's store (through the replication port) and running its ``retention`` policy, or
    ``None`` without a bucket. Its ``run()`` blocks until ``stop()``."""
    settings = BucketSettings.from_config(config)
    if settings is None:
        return None
    engine = SyncEngine(config, store, settings=settings)
    return SyncDaemon(engine, interval_s=config.get_float("sync.interval_s"),
                      debounce_s=config.get_float("sync.debounce_s"), close_engine=True, retention=retention)


class SyncDaemon:
    """Runs ``engine`` passes on an interval and on local writes until ``stop()`` or a signal."""

    def __init__(self, engine: SyncEngine, *, interval_s: float, debounce_s: float = 1.0,
                 on_pass: Callable[[PassReport], None] | None = None, close_engine: bool = False,
                 retention: Retention | None = None,
                 jobs: Sequence[tuple[str, float, Callable[[], Mapping[str, int]]]] = ()) -> None:
        self.engine = engine
        self.retention = retention
        # The library's own scheduled jobs, (name, interval_s, job): the bridge to Claude's
        # memory stores (bridge.claude_profiles). Each runs on the passes' executor, never during one.
        self.jobs = list(jobs)
        self.interval_s = interval_s
        self.debounce_s = max(0.05, debounce_s)
        self.on_pass = on_pass
        self.close_engine = close_engine
        self.db_path = Path(engine.store.path).resolve()
        self.passes = 0
        self.retention_runs = 0
        self.last_report: PassReport | None = None
        self._stop = threading.Event()
        self._dirty = threading.Event()
        self._mu = threading.Lock()
        self._running = False
        self._scheduler: Any = None

    # --- control -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the daemon to exit after the pass in flight (safe from a signal handler)."""
        self._stop.set()

    def wake(self) -> None:
        """Run a pass now, or right after the one in flight."""
        with self._mu:
            self._dirty.set()
            if self._running or self._scheduler is None or self._stop.is_set():
                return
        try:
            self._scheduler.modify_job(JOB_ID, next_run_time=datetime.now(timezone.utc))
        except Exception as exc:  # the scheduler is shutting down
            log.debug("wake-up ignored: %s", exc)

    # --- the job -------------------------------------------------------------------------------

    def _job(self) -> None:
        with self._mu:
            self._running = True
        try:
            while True:
                self._dirty.clear()
                self._one_pass()
                with self._mu:
                    if self._stop.is_set() or not self._dirty.is_set():
                        self._running = False
                        return
        except BaseException:
            with self._mu:
                self._running = False
            raise

    def _one_pass(self) -> None:
        try:
            report = self.engine.run_pass(PassOptions(lock_timeout=0.0))  # another process's pass: skip this one
        except SyncError as exc:  # another process's pass holds the lock
            log.info("pass skipped: %s", exc)
            return
        except Exception:  # the daemon outlives one bad pass
            log.exception("sync pass crashed")
            return
        self.passes += 1
        self.last_report = report
        if report.result == "guarded":
            log.warning("sync stopped by the guard: %s", report.reason)
        if self.on_pass is not None:
            self.on_pass(report)

    def _retention_job(self) -> None:
        """Apply the configured retention policy (``retention.*``) through the bank's normal
        delete path, so the deletions reach the bucket. Off unless ``retention.enabled``."""
        if self.retention is None:
            return
        try:
            pruned = self.retention()
        except Exception:  # the daemon outlives one bad run
            log.exception("retention run failed")
            return
        self.retention_runs += 1
        if pruned:
            log.info("retention pruned %s", ", ".join(f"{n} of {p}" for p, n in sorted(pruned.items())))

    def _scheduled_job(self, name: str, job: Callable[[], Mapping[str, int]]) -> None:
        """One run of a library job (the bridge); the daemon outlives a failed run."""
        try:
            done = job()
        except Exception:
            log.exception("%s failed", name)
            return
        if any(done.values()):
            log.info("%s: %s", name, ", ".join(f"{n} changes for {p}" for p, n in sorted(done.items())))

    # --- the loop ------------------------------------------------------------------------------

    def _watch_filter(self, _change: Any, path: str) -> bool:
        name = Path(path).name
        db = self.db_path.name
        # The database and its journal; not -shm (readers touch it) nor our lock file.
        return name in (db, db + "-wal", db + "-journal") and name != lock_path(self.db_path).name

    def run(self) -> None:
        """Block until stopped. Installs SIGTERM/SIGINT handlers when run on the main thread."""
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler

        scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=1)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=timezone.utc,
        )
        scheduler.add_job(self._job, "interval", seconds=self.interval_s, id=JOB_ID,
                          next_run_time=datetime.now(timezone.utc), coalesce=True, max_instances=1)
        config = self.engine.config
        if config.retention.enabled and self.retention is None:
            log.warning("retention.enabled is set but this daemon was given no retention policy: not pruning")
        elif config.retention.enabled:
            # Same one-thread executor: a retention run never overlaps a pass. First run after
            # one interval, so a daemon started by mistake can still be stopped first.
            every = config.get_float("retention.interval_s")
            scheduler.add_job(self._retention_job, "interval", seconds=every, id=RETENTION_JOB_ID,
                              coalesce=True, max_instances=1)
            log.info("retention policy on: pruning every %gs", every)
        for name, every, job in self.jobs:  # first run at once, after the first pass
            scheduler.add_job(self._scheduled_job, "interval", seconds=every, id=name, args=(name, job),
                              next_run_time=datetime.now(timezone.utc), coalesce=True, max_instances=1)
            log.info("%s every %gs", name, every)
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            def handler(signum: int, _frame: FrameType | None) -> None:
                log.info("signal %d: finishing the pass in flight, then exiting", signum)
                self.stop()

            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, handler)
        self._scheduler = scheduler
        scheduler.start()
        log.info("sync daemon: %s, every %gs, watching %s", self.engine.settings.describe(),
                 self.interval_s, self.db_path.parent)
        try:
            self._watch()
        finally:
            self._stop.set()
            scheduler.shutdown(wait=True)  # waits for the pass in flight
            self._scheduler = None
            for signum, old in previous.items():
                signal.signal(signum, old)
            if self.close_engine:
                self.engine.close()
            log.info("sync daemon stopped after %s", plural(self.passes, "pass"))

    def _watch(self) -> None:
        import watchfiles

        try:
            for _changes in watchfiles.watch(
                self.db_path.parent,
                watch_filter=self._watch_filter,
                debounce=int(self.debounce_s * 1000),
                step=50,
                stop_event=self._stop,
                recursive=False,
                raise_interrupt=False,
            ):
                if self._stop.is_set():
                    break
                try:
                    work = self.engine.state.has_local_work()
                except Exception:
                    work = True
                if work:
                    log.debug("local writes: waking the sync")
                    self.wake()
        except Exception as exc:  # e.g. no inotify: the interval still runs
            if not self._stop.is_set():
                log.warning("cannot watch %s (%s): syncing on the interval only", self.db_path.parent, exc)
                self._stop.wait()


# The entry point, checked against its declaration (memlocal.plugins.DaemonFactory) by mypy.
_ENTRY_POINT: DaemonFactory = factory
