"""A pass reads the local side before it lists the bucket (docs/benchmarks.md, "no-op pass").

A save written through while a pass is listing the bucket must never be taken for a memory that
another host deleted: the pass saw the listing without it, but its local snapshot must not see
the memory with a recorded base either.
"""

from __future__ import annotations

from typing import Callable

import pytest
from s3server import S3, FaultProxy, Host

from memlocal_sync.engine import SyncEngine
from memlocal import SaveRequest

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

P = "prof"


def test_a_save_written_through_during_the_listing_is_kept(hosts: Callable[..., Host], s3: S3,
                                                          fault_proxy: FaultProxy) -> None:
    a = hosts("a", bucket__endpoint=fault_proxy.endpoint)
    first = a.bank.save(SaveRequest(P, "saved before the pass"))
    assert first.synced
    saved = []

    def save_after_listing(method: str, path: str, headers: dict[str, str]) -> bool:
        # The server has answered the pass's listing; the pass has not seen it yet. A save on the
        # same host, written through with its base (another request through the proxy), lands now.
        if method != "GET" or "list-type=2" not in path:
            return False
        saved.append(a.bank.save(SaveRequest(P, "saved while the pass lists")))
        return True

    fault_proxy.after(save_after_listing)
    engine = SyncEngine(a.config, a.bank.replica)
    try:
        report = engine.run_pass()
    finally:
        engine.close()
    assert report.ok, report.reason
    assert saved and saved[0].synced  # in the bucket, with its base, before the pass went on
    assert report.counts["deleted_local"] == 0
    assert a.ids(P) == {first.memory.id, saved[0].memory.id}
    assert set(s3.keys()) == {f"memory/{P}/{first.memory.id}.json", f"memory/{P}/{saved[0].memory.id}.json"}
    # The next pass finds both sides agreeing.
    again = a.sync()
    assert again.ok and not again.planned


def test_a_listed_time_reads_as_s3_writes_it() -> None:
    """LastModified of a listed object (what ages a snapshot and orders two copies of an id) as
    S3's listing writes it: milliseconds, cut (not rounded), and ``Z``."""
    from datetime import datetime, timedelta, timezone

    from memlocal_sync.bucket import _listed_time

    at = datetime(2026, 12, 7, 14, 0, 5, 999999, tzinfo=timezone.utc)
    assert _listed_time(at) == "2026-12-07T14:00:05.999Z"
    assert _listed_time(at.replace(microsecond=0)) == "2026-12-07T14:00:05.000Z"
    assert _listed_time(None) == ""
    for n in range(200):
        when = at - timedelta(days=n * 37, microseconds=n * 7919)
        assert _listed_time(when) == f"{when:%Y-%m-%dT%H:%M:%S}.{when.microsecond // 1000:03d}Z"
