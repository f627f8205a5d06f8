"""``memlocal sync status`` as data: shared by the CLI and the replicator (the dashboard, REST)."""

from __future__ import annotations

import time
from typing import Any

from memlocal.model import format_time, from_us
from memlocal.replication import Replica

from .breaker import HostBreaker
from .bucket import BucketSettings
from .engine import pass_running
from .state import META_LAST_ERROR, META_LAST_PASS, META_MARKER, SyncState


def record_status(st: SyncState) -> dict[str, Any]:
    """The change record as this host follows it: ``cursor`` (the last segment applied),
    ``listsInFullUntil`` and ``why`` (a full listing on every pass, for changes no record
    explained), ``waitingFor`` (a missing segment waited for) and ``problems`` (the record's
    last bad segments, gaps and unexplained changes, newest last)."""
    cs = st.changes_state()
    until = cs.get("fullUntil")
    active = isinstance(until, (int, float)) and until > time.time()
    return {
        "cursor": cs.get("cursor"),
        "listsInFullUntil": format_time(from_us(int(float(until) * 1e6))) if active and until else None,
        "why": cs.get("fullWhy") if active else None,
        "waitingFor": cs.get("gap"),
        "problems": [p for p in cs.get("problems") or [] if isinstance(p, dict)],
    }


def status_for(settings: BucketSettings | None, store: Replica) -> dict[str, Any]:
    """``sync status`` of ``store`` against the bucket ``settings`` (also the replicator's
    ``status()``). ``hydrated``: when this index completed a pass of every profile against the
    bucket (``None``: never, so a bank opening here pulls it first); ``breaker``: the host's
    write-through circuit breaker (``closed``, ``open`` or ``half-open``); ``record``: the change
    record as this host follows it (``record_status``)."""
    st = SyncState(store)
    breaker = HostBreaker(store, settings.identity, base_s=0, probe_lease_s=0) if settings else None
    return {
        "bucket": settings.to_dict() if settings else None,
        "bucketIdentity": st.get_json(META_MARKER),
        "hydrated": st.hydrated(settings.identity) if settings else None,
        "breaker": breaker.state() if breaker else {"state": "closed"},
        "database": str(store.path),
        "pending": st.pending(),
        "lastPass": st.get_json(META_LAST_PASS),
        "lastError": st.get_json(META_LAST_ERROR),
        "skipped": st.skipped(),
        "record": record_status(st),
        "passRunning": pass_running(store.path),
    }
