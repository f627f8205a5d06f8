"""An S3-like bucket in this process's memory: the ``BucketClient`` protocol with S3's semantics.

For hosts that share one process (embedding, tools, tests of the sync's logic without a server)
and as the reference the bucket client contract is checked against (tests/test_bucket_contract.py
runs one suite against this client, moto_server and SeaweedFS, as litestream's
``replica_client_test.go`` runs one suite against every replica client). What it does, each as S3
does it:

- ETags are the quoted MD5 of the body (S3's for a single-part PUT);
- ``create`` is ``If-None-Match: *`` (``PreconditionFailed`` when the key exists), ``replace`` is
  ``If-Match`` (``PreconditionFailed`` on another ETag, ``ObjectMissing`` when the key is gone,
  as S3 and moto answer 404), each atomic against every other write;
- listings are in key order (UTF-8 byte order, S3's), ``page_size`` entries a page (keys and
  common prefixes together), with ``start_after``, a ``last`` key, ``max_pages`` and a delimiter,
  and ``pages`` counts the requests a server would have answered;
- ``get`` never hands out more than ``max_bytes`` (``ObjectTooLarge`` with the size and ETag);
- deleting a missing key succeeds; a bucket that does not exist answers ``BucketUnavailable``.

Several clients see one ``InMemoryServer`` (as hosts see one S3 endpoint); ``requests`` counts
what each client asked, by operation.
"""

from __future__ import annotations

import hashlib
import threading
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .bucket import BucketSettings, BucketUnavailable, Listing, ObjectMissing, ObjectTooLarge, PreconditionFailed
from .objects import Listed


@dataclass(slots=True)
class _Object:
    body: bytes
    etag: str
    modified: str


@dataclass
class _Bucket:
    objects: dict[str, _Object] = field(default_factory=dict)
    order: list[bytes] = field(default_factory=list)  # the keys, UTF-8, sorted (S3's listing order)


def _etag(body: bytes) -> str:
    return '"' + hashlib.md5(body, usedforsecurity=False).hexdigest() + '"'


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class InMemoryServer:
    """The buckets of one in-memory "endpoint", shared by every client made from it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def create_bucket(self, name: str) -> None:
        with self._lock:
            self._buckets.setdefault(name, _Bucket())

    def delete_bucket(self, name: str) -> None:
        """Remove a bucket and everything in it (clients of it then answer ``BucketUnavailable``)."""
        with self._lock:
            self._buckets.pop(name, None)

    def client(self, name: str, *, page_size: int = 1000) -> "InMemoryBucket":
        """A client of bucket ``name`` (which need not exist yet: ``check`` says so)."""
        return InMemoryBucket(BucketSettings(name=name, source="memory", endpoint="memory://"), self,
                              page_size=page_size)


class InMemoryBucket:
    """``BucketClient`` over an ``InMemoryServer``'s bucket ``settings.name``; thread-safe."""

    def __init__(self, settings: BucketSettings, server: InMemoryServer, *, page_size: int = 1000) -> None:
        self.settings = settings
        self.server = server
        self.page_size = max(1, page_size)
        self.requests: Counter[str] = Counter()  # by operation: LIST (per page), GET, PUT, DELETE, HEAD

    def _bucket(self) -> _Bucket:
        """The bucket; the caller holds the server's lock."""
        bucket = self.server._buckets.get(self.settings.name)
        if bucket is None:
            raise BucketUnavailable(f"bucket {self.settings.name} does not exist")
        return bucket

    def begin_pass(self, at: float | None = None) -> None:
        """No deadline here: the in-memory bucket always answers."""

    def end_pass(self) -> None:
        """No deadline here."""

    def check(self) -> None:
        """Raise ``BucketUnavailable`` unless the bucket exists."""
        with self.server._lock:
            self.requests["HEAD"] += 1
            self._bucket()

    def list(self, prefix: str, *, delimiter: str | None = None, start_after: str | None = None,
             last: str | None = None, max_pages: int | None = None) -> Listing:
        """As ``Bucket.list``: pages of ``page_size`` entries, each page a request."""
        objects: list[Listed] = []
        prefixes: list[str] = []
        pages = 0
        truncated = False
        marker = (start_after or "").encode()
        with self.server._lock:
            bucket = self._bucket()
            order = bucket.order
            low = prefix.encode()
            i = max(bisect_left(order, low), bisect_right(order, marker) if start_after is not None else 0)
            while True:
                pages += 1
                self.requests["LIST"] += 1
                entries = 0
                page_last = ""
                while i < len(order) and entries < self.page_size:
                    raw = order[i]
                    if not raw.startswith(low):
                        i = len(order)
                        break
                    key = raw.decode()
                    rest = key[len(prefix):]
                    if delimiter and delimiter in rest:
                        common = prefix + rest[: rest.index(delimiter) + len(delimiter)]
                        prefixes.append(common)
                        page_last = common
                        # S3 rolls every key under a common prefix into one entry.
                        i = bisect_left(order, common.encode() + b"\xff")
                    else:
                        obj = bucket.objects[key]
                        if last is None or key <= last:
                            objects.append(Listed(key, obj.etag, len(obj.body), obj.modified))
                        page_last = key
                        i += 1
                    entries += 1
                more = i < len(order) and order[i].startswith(low)
                if not more:
                    break
                if last is not None and page_last >= last:
                    break  # the rest is past the range (as ``Bucket.list`` stops paging)
                if max_pages is not None and pages >= max_pages:
                    truncated = True
                    break
        return Listing(objects, pages, tuple(prefixes), truncated)

    def get(self, key: str, max_bytes: int) -> tuple[bytes, str]:
        """The body and ETag of ``key``; ``ObjectTooLarge`` beyond ``max_bytes``."""
        with self.server._lock:
            self.requests["GET"] += 1
            obj = self._bucket().objects.get(key)
        if obj is None:
            raise ObjectMissing(f"GET {key}")
        if len(obj.body) > max_bytes:
            raise ObjectTooLarge(len(obj.body), max_bytes, obj.etag)
        return obj.body, obj.etag

    def _write(self, key: str, body: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        body = bytes(body)
        with self.server._lock:
            self.requests["PUT"] += 1
            bucket = self._bucket()
            current = bucket.objects.get(key)
            if if_none_match and current is not None:
                raise PreconditionFailed(f"PUT {key}: PreconditionFailed")
            if if_match is not None:
                if current is None:
                    raise ObjectMissing(f"PUT {key}")
                if current.etag != if_match:
                    raise PreconditionFailed(f"PUT {key}: PreconditionFailed")
            etag = _etag(body)
            if current is None:
                raw = key.encode()
                bucket.order.insert(bisect_left(bucket.order, raw), raw)
            bucket.objects[key] = _Object(body, etag, _now())
            return etag

    def create(self, key: str, body: bytes) -> str:
        """PUT only if ``key`` does not exist; the new ETag."""
        return self._write(key, body, if_none_match=True)

    def replace(self, key: str, body: bytes, etag: str) -> str:
        """PUT only if ``key`` still has ``etag``; the new ETag."""
        return self._write(key, body, if_match=etag)

    def put(self, key: str, body: bytes) -> str:
        """PUT unconditionally; the ETag."""
        return self._write(key, body)

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key succeeds."""
        with self.server._lock:
            self.requests["DELETE"] += 1
            bucket = self._bucket()
            if bucket.objects.pop(key, None) is not None:
                raw = key.encode()
                del bucket.order[bisect_left(bucket.order, raw)]

    def close(self) -> None:
        """Nothing to release (no connections)."""
