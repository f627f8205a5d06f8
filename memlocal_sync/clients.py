"""The one factory of bucket clients: every place that makes one (the engine, the write-through,
the daemon, the CLI) asks ``open_bucket`` (a module of its own: it knows both implementations,
which know nothing of each other)."""

from __future__ import annotations

from .bucket import Bucket, BucketClient, BucketSettings
from .inmemory import endpoint_name, made


def open_bucket(settings: BucketSettings, *, timeout_s: float, attempts: int, pool_size: int = 10,
                page_size: int = 1000, deadline_s: float | None = None) -> BucketClient:
    """The client of the configured bucket: the S3 client (``Bucket``), or for an endpoint
    ``memory://<name>`` the in-memory bucket of the endpoint ``name`` that code of this process
    made (``memlocal_sync.inmemory.endpoint``: the engine, the write-through and the CLI in one
    process, with no server; the engine's tests run on it); none made, a client that reaches
    nothing and says why (``inmemory.made``)."""
    name = endpoint_name(settings.endpoint or "")
    if name is not None:
        return made(name).client(settings, timeout_s=timeout_s, attempts=attempts, page_size=page_size,
                                     deadline_s=deadline_s)
    return Bucket(settings, timeout_s=timeout_s, attempts=attempts, pool_size=pool_size, page_size=page_size,
                  deadline_s=deadline_s)
