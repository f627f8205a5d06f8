"""The write-through circuit breaker, one per host: its state is a row of the index.

After a write-through failure or timeout, every process on the host (CLI commands, MCP servers,
the daemon, library users) sends its saves straight to the outbox for a back-off window
(``sync.breaker_s``, doubling on each consecutive failure up to 8x), without a request. After
the window, one process claims the half-open probe (a lease in the row, so a prober that dies
frees it) and tries the bucket; the others keep writing to the outbox until it answers. Its
success closes the breaker for everyone, its failure opens the next window. So a bucket that
accepts connections and never answers costs the host one timeout per window, not one per process.

Times are the wall clock (every process reads the same row); if the clock reads earlier than
the last failure (it was set back), the window counts as over.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Literal

from memlocal.errors import MemoryBankError
from memlocal.model import format_time, from_us
from memlocal.plugins import BreakerStatus, PluginTables, Replica

from . import tables
from .tables import BreakerRow

log = logging.getLogger(__name__)

MAX_FACTOR = 8
_US = 1_000_000


class HostBreaker:
    """The breaker of the bucket ``bucket`` (its identity) in the index ``store``."""

    def __init__(self, store: Replica, bucket: str, *, base_s: float, probe_lease_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.bucket = bucket
        self.base_s = base_s
        self.probe_lease_s = probe_lease_s
        self._clock = clock
        # When the index cannot be written (read-only, locked), this process keeps its own window.
        self._local_until = 0.0
        self._lock = threading.Lock()

    def _now_us(self) -> int:
        return int(self._clock() * _US)

    def _row(self, t: PluginTables | None = None) -> BreakerRow | None:
        if t is not None:
            return tables.breaker(t, self.bucket)
        with self.store.snapshot() as t:
            return tables.breaker(t, self.bucket)

    @staticmethod
    def _window_over(row: BreakerRow, now_us: int) -> bool:
        return now_us >= row.open_until_us or now_us < row.failed_us

    def blocked(self) -> bool:
        """Whether the breaker is open (within its window): no request should be made. Claims
        nothing: for the read path's background pulls, which never probe."""
        now = self._now_us()
        if self._clock() < self._local_until:
            return True
        try:
            row = self._row()
        except MemoryBankError:
            return False
        return row is not None and not self._window_over(row, now)

    def allow(self) -> bool:
        """Whether this caller may try the bucket: the breaker is closed, or its window is over
        and this caller is the one process that probes (until its lease runs out)."""
        if self._clock() < self._local_until:
            return False
        try:
            row = self._row()
            if row is None:
                return True
            now = self._now_us()
            if not self._window_over(row, now) or row.probe_until_us > now:
                return False
            with self.store.transaction() as c:
                row = self._row(c.tables)
                if row is None:
                    return True  # closed meanwhile
                if not self._window_over(row, now) or row.probe_until_us > now:
                    return False  # another process took the probe
                tables.breaker_probe(c.tables, self.bucket, now + int(self.probe_lease_s * _US))
            return True
        except MemoryBankError as exc:
            log.debug("circuit breaker state unreadable: %s", exc)
            return True

    def success(self) -> None:
        """The bucket answered: close the breaker (for every process of the host)."""
        self._local_until = 0.0
        try:
            if self._row() is None:
                return
            with self.store.transaction() as c:
                closed = tables.breaker_close(c.tables, self.bucket)
        except MemoryBankError as exc:
            log.debug("circuit breaker not closed in the index: %s", exc)
            return
        if closed:
            log.info("bucket answers again: write-through resumed")

    def failure(self, reason: str) -> float:
        """The bucket failed or timed out: open the breaker for the next window (doubling on each
        consecutive failure, up to 8x); returns the window in seconds."""
        now = self._now_us()
        with self._lock:
            try:
                with self.store.transaction() as c:
                    row = self._row(c.tables)
                    failures: int = (row.failures if row else 0) + 1
                    window: float = self.base_s * min(2 ** (failures - 1), MAX_FACTOR)
                    tables.breaker_failed(c.tables, self.bucket, failures, now + int(window * _US), reason[:500], now)
            except MemoryBankError as exc:
                window = self.base_s
                self._local_until = self._clock() + window
                log.debug("circuit breaker kept in this process only: %s", exc)
        log.warning("the bucket failed (%s): saves on this host go to the outbox for %.0f s "
                    "(the sync pass pushes them)", reason, window)
        return window

    def state(self) -> BreakerStatus:
        """What ``sync status`` shows: ``closed``, ``open`` (until when, why, since when,
        consecutive failures) or ``half-open`` (the window is over: the next try probes)."""
        try:
            row = self._row()
        except MemoryBankError:
            row = None
        if row is None:
            return {"state": "closed"}
        failures, until, probe, reason, opened, _failed = row
        now = self._now_us()
        state: Literal["open", "half-open"] = "half-open" if self._window_over(row, now) else "open"
        out = BreakerStatus(state=state, failures=failures, reason=reason, since=format_time(from_us(opened)),
                            openUntil=format_time(from_us(until)))
        if probe > now:
            out["probing"] = True
        return out
