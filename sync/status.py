"""``memlocal sync status`` as data: shared by the CLI and the replicator (the dashboard, REST)."""

from __future__ import annotations

from typing import Any

from memlocal.replication import Replica

from .bucket import BucketSettings
from .engine import pass_running
from .state import META_LAST_ERROR, META_LAST_PASS, META_MARKER, SyncState


def status_for(settings: BucketSettings | None, store: Replica) -> dict[str, Any]:
    """``sync status`` of ``store`` against the bucket ``settings`` (also the replicator's ``status()``)."""
    st = SyncState(store)
    return {
        "bucket": settings.to_dict() if settings else None,
        "bucketIdentity": st.get_json(META_MARKER),
        "database": str(store.path),
        "pending": st.pending(),
        "lastPass": st.get_json(META_LAST_PASS),
        "lastError": st.get_json(META_LAST_ERROR),
        "skipped": st.skipped(),
        "passRunning": pass_running(store.path),
    }
