"""``memlocal sync status`` as data: shared by the CLI and the replicator (the dashboard, REST)."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from memlocal.errors import ValidationError
from memlocal.model import format_time, from_us, parse_time
from memlocal.plugins import RecordStatus, Replica, ReplicatorStatus

from .breaker import HostBreaker
from .bucket import BucketSettings
from .engine import pass_running
from .state import META_LAST_ERROR, META_LAST_PASS, META_MARKER, SyncState


def record_status(st: SyncState) -> RecordStatus:
    """The change record as this host follows it: ``cursor`` (the last segment applied),
    ``listsInFullUntil`` and ``why`` (a full listing on every pass, for changes no record
    explained), ``waitingFor`` (a missing segment waited for) and ``problems`` (the record's
    last bad segments, gaps and unexplained changes, newest last)."""
    cs = st.changes_state()
    until = cs.get("fullUntil")
    active = isinstance(until, (int, float)) and until > time.time()
    return RecordStatus(
        cursor=cs.get("cursor"),
        listsInFullUntil=format_time(from_us(int(float(until) * 1e6))) if active and until else None,
        why=cs.get("fullWhy") if active else None,
        waitingFor=cs.get("gap"),
        problems=[p for p in cs.get("problems") or [] if isinstance(p, dict)],
    )


def status_for(settings: BucketSettings | None, store: Replica) -> ReplicatorStatus:
    """``sync status`` of ``store`` against the bucket ``settings`` (also the replicator's
    ``status()``). ``hydrated``: when this index completed a pass of every profile against the
    bucket (``None``: never, so a bank opening here pulls it first); ``breaker``: the host's
    write-through circuit breaker (``closed``, ``open`` or ``half-open``); ``record``: the change
    record as this host follows it (``record_status``); ``lastError``: the last failed pass's
    error while it is current (no pass succeeded since), else ``None`` and ``resolvedError``
    holds it with the time of the pass that cleared it."""
    st = SyncState(store)
    breaker = HostBreaker(store, settings.identity, base_s=0, probe_lease_s=0) if settings else None
    last_pass, last_error = st.get_json(META_LAST_PASS), st.get_json(META_LAST_ERROR)
    resolved = None
    if last_error and last_pass and last_pass.get("result") not in _FAILED and _after(last_pass.get("finishedAt"), last_error.get("at")):
        # A later pass succeeded: the error is history, not the state of the sync.
        resolved, last_error = {**last_error, "resolvedAt": last_pass.get("finishedAt")}, None
    identity = st.get_json(META_MARKER)
    if isinstance(identity, dict) and isinstance(identity.get("probedAt"), (int, float)):
        # Stored as epoch seconds (compared with the clock); shown as every other time is.
        identity = {**identity, "probedAt": format_time(datetime.fromtimestamp(identity["probedAt"], timezone.utc))}
    return ReplicatorStatus(
        bucket=settings.to_dict() if settings else None,
        bucketIdentity=identity,
        hydrated=st.hydrated(settings.identity) if settings else None,
        breaker=breaker.state() if breaker else {"state": "closed"},
        database=str(store.path),
        pending=st.pending(),
        lastPass=last_pass,
        lastError=last_error,
        resolvedError=resolved,
        skipped=st.skipped(),
        record=record_status(st),
        passRunning=pass_running(store.path),
    )


_FAILED = ("failed", "errors")


def _after(later: Any, earlier: Any) -> bool:
    """``later`` is a recorded time after ``earlier`` (both ISO strings; unreadable: no)."""
    try:
        a, b = parse_time(later), parse_time(earlier)
    except (ValidationError, TypeError):
        return False
    return a is not None and b is not None and a > b
