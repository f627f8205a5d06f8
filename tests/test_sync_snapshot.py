"""A pass reads the local side before it lists the bucket (docs/benchmarks.md, "no-op pass").

A save written through while a pass is listing the bucket must never be taken for a memory that
another host deleted: the pass saw the listing without it, but its local snapshot must not see
the memory with a recorded base either.
"""

from __future__ import annotations

from typing import Any, Callable

from s3server import S3, Host

from memlocal_sync.bucket import Bucket, BucketSettings, Listing
from memlocal_sync.engine import SyncEngine

P = "prof"


class SaveAfterListing(Bucket):
    """The real bucket client; right after the pass's listing comes back, ``hook`` runs once (a
    save on the same host, written through to the bucket with its base)."""

    def __init__(self, settings: BucketSettings, hook: Callable[[], Any]) -> None:
        super().__init__(settings, timeout_s=5.0, attempts=2)
        self.hook: Callable[[], Any] | None = hook

    def list(self, prefix: str) -> Listing:
        listing = super().list(prefix)
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return listing


def test_a_save_written_through_during_the_listing_is_kept(hosts: Callable[..., Host], s3: S3) -> None:
    a = hosts("a")
    first = a.bank.save(P, "saved before the pass")
    assert first.synced
    saved = []
    settings = BucketSettings.from_config(a.config)
    assert settings is not None
    bucket = SaveAfterListing(settings, lambda: saved.append(a.bank.save(P, "saved while the pass lists")))
    engine = SyncEngine(a.config, a.bank.store, bucket=bucket)
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
