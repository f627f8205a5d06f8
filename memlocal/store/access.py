"""The store's write-behind queue: access bumps, and other best-effort writes (the injection audit
rows), on a background thread with its own connection, so that the caller never waits for them.

Recall and injection both mark what they returned (``MemoryBank.recall``,
``MemoryBank.build_context_block``); the bank owns one :class:`AccessMarker` and drains it on
close. What is queued is a store operation, so the queue lives with the store.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence

from ..model import utcnow
from .database import LAZY_CHECKPOINT_COMMITS
from .memories import Store

log = logging.getLogger("memlocal")


def _done(value: int) -> "Future[int]":
    future: Future[int] = Future()
    future.set_result(value)
    return future


class AccessMarker:
    """Marks memories accessed, and runs other best-effort writes (the injection audit rows), on
    a background thread with its own SQLite connection.

    The caller never waits and never sees a failure (it is logged): the spec calls MarkAccessed
    best-effort, and the audit trail is a record, not a gate. The connection commits with
    ``synchronous=NORMAL``: in WAL mode that keeps the database consistent and skips the fsync, so
    a power cut may lose the last few bumps or audit rows, which the spec allows. ``close`` drains
    what is queued.

    Checkpoints run on a second thread and connection (a passive checkpoint and a writer do not
    block each other in WAL mode): copying thousands of pages into the database file takes tens
    of milliseconds, and a bump a query waits for must not queue behind one.
    """

    _WRITES, _CHECKPOINTS = "memlocal-access", "memlocal-checkpoint"

    def __init__(self, path: Path, busy_timeout_s: float) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self._executors: dict[str, ThreadPoolExecutor] = {}  # by lane: one thread each
        self._stores: dict[str, Store] = {}  # by lane: each thread's own connection
        self._checkpoint_queued = False
        self._pending: set[Future[int]] = set()
        self._last_write: Future[int] | None = None  # the last bump or write queued (one thread: FIFO)
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, profile: str, ids: Sequence[str], now: datetime | None = None, *,
               written: Callable[[bool], None] | None = None) -> Future[int]:
        """Queue the bump; the future resolves to the number of memories updated (0 on failure).
        ``written`` is called once it is done, with whether it was written (``False``: it failed,
        or the marker was closed and dropped it)."""
        if not ids:
            if written is not None:
                written(True)
            return _done(0)
        return self._queue(self._run, f"{len(ids)} access marks of profile {profile}", profile, tuple(ids), now,
                           written, dropped=None if written is None else lambda: written(False), write=True)

    def submit_write(self, write: Callable[[Store], int], what: str) -> Future[int]:
        """Queue a best-effort write on the queue's connection (an injection audit row,
        ``memlocal.services.audit.record``), after the bumps queued before it; resolves to what ``write``
        returns (0 on failure, which is logged with ``what``)."""
        return self._queue(self._run_write, what, write, what, write=True)

    def settle(self, timeout: float | None = None) -> None:
        """Wait until the bumps and writes queued so far are written (not the checkpoints): the
        bank's own reads see its own writes."""
        last = self._last_write
        if last is not None and not last.done():
            wait_futures([last], timeout=timeout)

    def _queue(self, fn: Callable[..., int], what: str, *args: object,
               dropped: Callable[[], None] | None = None, write: bool = False, lane: str = _WRITES) -> Future[int]:
        with self._lock:
            closed = self._closed
            if not closed:
                executor = self._executors.get(lane)
                if executor is None:
                    executor = self._executors[lane] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=lane)
                future = executor.submit(fn, *args)
                self._pending.add(future)
                if write:
                    self._last_write = future
        if closed:
            if write:  # a checkpoint is a head start, not a write: nothing is lost without it
                log.warning("bank closed: %s dropped", what)
            if dropped is not None:
                dropped()  # outside the lock: it may take it
            return _done(0)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future[int]) -> None:
        with self._lock:
            self._pending.discard(future)

    def _open(self, lane: str = _WRITES) -> Store:
        """The connection of ``lane`` (only its own thread calls this)."""
        store = self._stores.get(lane)
        if store is None:
            store = self._stores[lane] = Store(self.path, busy_timeout_s=self.busy_timeout_s)
            store.conn.execute("PRAGMA synchronous = NORMAL")
        return store

    def submit_checkpoint(self) -> Future[int]:
        """Queue a checkpoint of the log (:meth:`memlocal.store.Database.checkpoint`): what the
        caller's best-effort commits left undone, done here, off its path. One queued at a time:
        another asked for meanwhile would find nothing more to copy."""
        with self._lock:
            if self._checkpoint_queued:
                return _done(0)
            self._checkpoint_queued = True
        return self._queue(self._run_checkpoint, "a checkpoint of the log", lane=self._CHECKPOINTS,
                           dropped=self._checkpoint_done)

    def _checkpoint_done(self) -> None:
        with self._lock:
            self._checkpoint_queued = False

    def _run_checkpoint(self) -> int:
        self._checkpoint_done()  # from here on a new one may queue: it would copy what follows
        try:
            self._open(self._CHECKPOINTS).checkpoint()
            return 1
        except Exception as exc:  # the next one, or SQLite's own at a durable commit, does it
            log.warning("could not checkpoint %s: %s", self.path, exc)
            return 0

    def _run(self, profile: str, ids: tuple[str, ...], now: datetime | None,
             written: Callable[[bool], None] | None = None) -> int:
        ok = False
        try:
            store = self._open()
            updated = store.mark_accessed(profile, ids, now or utcnow())
            ok = True
            report, written = written, None
            if report is not None:  # committed: a query waiting for these rows goes on now
                report(True)
            if store.lazy_commits >= LAZY_CHECKPOINT_COMMITS:
                store.lazy_commits = 0
                self.submit_checkpoint()
            return updated
        except Exception as exc:  # best-effort by design: log, never raise into the run
            log.warning("could not mark %d memories of profile %s accessed: %s", len(ids), profile, exc)
            return 0
        finally:
            if written is not None:
                written(ok)

    def _run_write(self, write: Callable[[Store], int], what: str) -> int:
        try:
            return write(self._open())
        except Exception as exc:  # a record, not a gate: log, never raise into the run
            log.warning("could not write %s: %s", what, exc)
            return 0

    def drain(self, timeout: float | None = None) -> None:
        """Wait for every queued mark, write and checkpoint (tests and shutdown), including the
        checkpoints the writes queue meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            wait_futures(pending, timeout=left)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            executors, self._executors = self._executors, {}
        for lane in (self._WRITES, self._CHECKPOINTS):
            executor = executors.get(lane)
            if executor is not None:
                executor.shutdown(wait=True)
        stores, self._stores = self._stores, {}
        for store in stores.values():
            store.close()
