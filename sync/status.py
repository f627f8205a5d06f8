"""``memlocal sync status`` as data: shared by the CLI and the replicator (the dashboard, REST)."""

from __future__ import annotations

from typing import Any

from memlocal.replication import Replica

from .breaker import HostBreaker
from .bucket import BucketSettings
from .engine import pass_running
from .state import META_LAST_ERROR, META_LAST_PASS, META_MARKER, SyncState


def status_for(settings: BucketSettings | None, store: Replica) -> dict[str, Any]:
    """``sync status`` of ``store`` against the bucket ``settings`` (also the replicator's
    ``status()``). ``hydrated``: when this index completed a pass of every profile against the
    bucket (``None``: never, so a bank opening here pulls it first); ``breaker``: the host's
    write-through circuit breaker (``closed``, ``open`` or ``half-open``)."""
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
        "passRunning": pass_running(store.path),
    }
