"""The bank's side of the sync: the bucket's replicator found through its entry point, the sync
daemon found and run in a background thread, the sync status (with or without a bucket) and the
spec's start-up notice of a bank without one. The sync itself is the installed sync package's
(``memlocal.replicators``, ``memlocal.daemons``; docs/plugins.md): nothing here imports it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Required, TypedDict

from ..errors import ConfigError, StoreError
from ..model import format_time, utcnow, validate_profile
from ..plugins import (DAEMONS, BreakerStatus, Daemon, PendingCounts, RecordStatus, Replica, Replicator, Retention,
                      SkippedObject, daemon_factories, replicator_factories)

if TYPE_CHECKING:
    from ..config import Config
    from ..store import Store

log = logging.getLogger("memlocal")

# The spec's start-up warning without a bucket is said once per process (a CLI command is one).
_warned_local_only = False
# ``meta`` key: when this database's local-only notice was given (``warn_local_only``).
LOCAL_ONLY_NOTICE_META_KEY = "notice.local_only"


class SyncStatus(TypedDict, total=False):
    """What :meth:`MemoryBank.sync_status` returns (``memlocal sync status --json``,
    ``GET /api/sync/status``): the replicator's ``ReplicatorStatus`` (memlocal.plugins) with
    ``localOnly`` false and no message; without a bucket, only the four required keys."""

    localOnly: Required[bool]
    message: Required[str | None]  # without a bucket: "no bucket configured (local only)"
    bucket: Required[dict[str, str | None] | None]
    database: Required[str]
    bucketIdentity: dict[str, Any] | None
    hydrated: dict[str, Any] | None
    breaker: BreakerStatus
    pending: PendingCounts
    lastPass: dict[str, Any] | None
    lastError: dict[str, Any] | None
    resolvedError: dict[str, Any] | None
    skipped: list[SkippedObject]
    record: RecordStatus
    passRunning: bool


def configured_replicator(config: "Config", store: "Store") -> Replicator | None:
    """The bucket's replicator from the first installed factory that makes one; ``None`` without a
    bucket. Without one, the sync package is not even imported (a local-only one-shot process
    would pay ~60 ms for it)."""
    for factory in replicator_factories() if config.get_str("bucket.name").strip() else ():
        from ..store.replica import StoreReplica

        replicator = factory(config, StoreReplica(store))
        if replicator is not None:
            return replicator
    return None


def installed_daemon(config: "Config", store: Replica, retention: Retention) -> Daemon | None:
    """The installed sync daemon's factory (:class:`memlocal.plugins.DaemonFactory`), looked up
    only when a daemon is started (loading the sync package costs a one-shot process such as
    ``memlocal recall`` more than its query)."""
    daemons = daemon_factories()
    if not daemons:
        raise ConfigError(f"no sync daemon is installed (entry point group {DAEMONS} is empty)")
    return daemons[0](config, store, retention)


class SyncDaemonHandle:
    """The sync daemon running in a background thread of this process (``memlocal serve --with-sync``)."""

    def __init__(self, daemon: Daemon) -> None:
        import threading

        self.daemon = daemon
        self.thread = threading.Thread(target=daemon.run, name="memlocal-sync-daemon", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop the daemon; returns once the pass in flight has finished."""
        self.daemon.stop()
        self.thread.join()


def sync_status(replicator: Replicator | None, store: "Store") -> SyncStatus:
    """The replicator's ``status()`` with ``"localOnly": False`` and no message; without a
    bucket, ``{"bucket": None, "localOnly": True, "message": "no bucket configured (local only)",
    "database": ...}``."""
    if replicator is None:
        return SyncStatus(bucket=None, localOnly=True, message="no bucket configured (local only)",
                          database=str(store.path))
    return SyncStatus(localOnly=False, message=None, **replicator.status())


def warn_local_only(store: "Store") -> None:
    """The spec's start-up warning of a bank without a bucket: once per database (its ``meta``
    remembers it was given, so a local-only user's every later command is quiet), and at most
    once per process (on stderr where nothing configured logging: Python's last-resort handler
    prints warnings). ``memlocal serve`` says it in its start-up lines whatever this remembers."""
    global _warned_local_only
    if _warned_local_only:
        return
    try:
        if store.meta_get(LOCAL_ONLY_NOTICE_META_KEY) is not None:
            return
        store.meta_set(LOCAL_ONLY_NOTICE_META_KEY, format_time(utcnow()))
    except StoreError:  # a read-only or busy file: say it (again) rather than not at all
        pass
    _warned_local_only = True
    log.warning("no bucket configured (set INTERNAL_S3_BUCKET or S3_BUCKET to sync): memories stay on this host only"
                " (said once per database; bucket.local_only_notice = false silences it)")


def refresh_if_stale(replicator: Replicator | None, config: "Config", profile: str, ttl: float | None = None) -> bool:
    """Pull ``profile``'s memories from the bucket if the last pull is older than ``ttl`` s
    (default ``sync.refresh_ttl_s``). One pull at a time per profile; a no-op returning
    ``False`` without a bucket, when fresh, or when the bucket cannot be reached (the local
    copy is served). ``True`` when a pull completed."""
    validate_profile(profile)
    if replicator is None:
        return False
    return replicator.refresh_if_stale(profile, config.get_float("sync.refresh_ttl_s") if ttl is None else ttl)


def refresh_for_read(replicator: Replicator | None, config: "Config", profile: str | None = None) -> float | None:
    """The read path's refresh policy: before answering a read of ``profile`` (``None``: a
    read of every profile), ask for a background pull from the bucket if the last one is
    older than ``sync.refresh_ttl_s``, and answer at once from the local index: a read never
    waits on the bucket. Returns the age in seconds of the local copy of ``profile``'s data
    (of the oldest profile for ``None``); ``None`` without a bucket or before a first pull."""
    if profile is not None:
        validate_profile(profile)
    if replicator is None:
        return None
    return replicator.request_refresh(profile, config.get_float("sync.refresh_ttl_s"))
