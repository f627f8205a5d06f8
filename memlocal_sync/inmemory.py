"""An S3-like bucket in this process's memory: the ``BucketClient`` protocol with S3's semantics,
and ``memory://<name>`` endpoints that the engine, the write-through and the CLI run on in-process.

For hosts that share one process (embedding, tools, the engine's own tests without a server) and
as the reference the bucket client contract is checked against (tests/test_bucket_contract.py
runs one suite against this client, moto_server and SeaweedFS, as litestream's
``replica_client_test.go`` runs one suite against every replica client). What it does, each as S3
does it:

- ETags are the quoted MD5 of the body (S3's for a single-part PUT);
- ``create`` is ``If-None-Match: *`` (``PreconditionFailed`` when the key exists), ``replace`` is
  ``If-Match`` (``PreconditionFailed`` on another ETag, ``ObjectMissing`` when the key is gone,
  as S3 and moto answer 404), each atomic against every other write;
- listings are in key order (UTF-8 byte order, S3's), ``page_size`` entries a page (keys and
  common prefixes together), each page its own request (a later page continues after the last
  key of the one before, as S3's continuation token does), with ``start_after``, a ``last`` key,
  ``max_pages`` and a delimiter;
- ``get`` never hands out more than ``max_bytes`` (``ObjectTooLarge`` with the size and ETag);
- deleting a missing key succeeds; a bucket that does not exist answers ``BucketUnavailable``.

Endpoints. ``bucket.endpoint = "memory://<name>"`` (``memlocal_sync.clients.open_bucket``) names a
process-wide ``InMemoryEndpoint`` that code of this process made (``endpoint(name)``: a test, a
program embedding memlocal): every client made for that name in this process, whatever opened it
(the engine, the replicator, a daemon, the CLI run in-process), sees the same buckets, which exist
as soon as a client names them. A config alone makes none (``made``): a process that runs the bank
from its config and names one nobody made reaches no bucket, and says so. An endpoint is what a client talks
to, as an HTTP proxy in front of a server would be: several endpoints can front one
``InMemoryServer`` (``endpoint(name, server=...)``), each with its own faults and request log:

- ``fail(n, status, code, when)``: the next ``n`` requests (that ``when(method, path)`` picks)
  are answered with that S3 error; 5xx and 429 are retried by the client up to its attempts, as
  botocore's retries do; ``down()``/``up()``: nothing answers (connection refused);
  ``freeze()``/``thaw()``: requests wait unanswered, each until the client's timeout or the
  pass's deadline (``sync.deadline_s``);
- ``before(hook)``/``after(hook)``: ``hook(method, path, headers)`` runs before a request reaches
  the buckets, or once they answered but before the client sees it (to race another writer), and
  stays until it returns ``True``;
- ``requests``: ``(method, path, status)`` of every answered request, ``received``: every request
  (answered or not), ``count(method, status)``.

Requests are named as S3's HTTP requests (path-style): ``PUT /<bucket>/<key>`` with
``If-None-Match``/``If-Match`` headers, ``GET /<bucket>/<key>`` with a ``Range``,
``GET /<bucket>?list-type=2&prefix=...`` for a listing page, ``DELETE``, ``HEAD /<bucket>``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, TypeVar
from urllib.parse import quote, urlencode

from .bucket import BucketSettings, BucketUnavailable, Listing, ObjectMissing, ObjectTooLarge, PreconditionFailed
from .objects import Listed

SCHEME = "memory://"

_T = TypeVar("_T")
# One listing page: its objects, common prefixes, last entry (where the next page starts) and
# whether more follow.
_Page = tuple[list[Listed], list[str], str, bool]
Hook = Callable[[str, str, dict[str, str]], bool]


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
    """The buckets of one in-memory "server", shared by every endpoint and client made from it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def create_bucket(self, name: str) -> None:
        with self._lock:
            self._buckets.setdefault(name, _Bucket())

    def client(self, name: str, *, page_size: int = 1000) -> "InMemoryBucket":
        """A client of bucket ``name`` (which need not exist yet: ``check`` says so), through an
        endpoint of its own with no faults."""
        return InMemoryBucket(BucketSettings(name=name, source="memory", endpoint=SCHEME), InMemoryEndpoint("", self),
                              page_size=page_size)


class _Injected(Exception):
    """A request the endpoint answered itself (``fail``), or left unanswered (``freeze``, ``down``)."""

    def __init__(self, status: int, code: str, message: str = "injected fault") -> None:
        super().__init__(f"{status} {code}")
        self.status, self.code, self.message = status, code, message


class Faults:
    """The faults a test sets on what a client talks to, and the log of what it answered: the
    in-memory endpoint's (``InMemoryEndpoint``) and the suite's HTTP proxy's (tests/s3server.py's
    ``FaultProxy``) alike, so that a test of the engine's decisions runs on either.

    ``fail``: the next ``n`` matching requests are answered with an S3 error; ``before``/``after``:
    hooks around serving a request; ``freeze``/``thaw``: requests wait unanswered; ``delay_s``: a
    wait before each request; ``requests``: ``(method, path, status)`` of every answered request,
    ``received``: every request read, answered or not."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fail_remaining = 0
        self.fail_status = 503
        self.fail_code = "SlowDown"
        self.fail_when: Callable[[str, str], bool] = lambda method, path: True
        self.delay_s = 0.0
        self.frozen = False
        self.received = 0
        self.requests: list[tuple[str, str, int]] = []
        self.hooks: list[Hook] = []
        self.after_hooks: list[Hook] = []
        self._thaw = threading.Event()
        self._thaw.set()

    def fail(self, n: int, status: int = 503, code: str = "SlowDown",
             when: Callable[[str, str], bool] | None = None) -> None:
        """Answer the next ``n`` matching requests with an S3 error instead of serving them."""
        with self.lock:
            self.fail_remaining, self.fail_status, self.fail_code = n, status, code
            self.fail_when = when or (lambda method, path: True)

    def before(self, hook: Hook) -> None:
        """Run ``hook(method, path, headers)`` before serving a request, until it returns True."""
        with self.lock:
            self.hooks.append(hook)

    def after(self, hook: Hook) -> None:
        """Run ``hook(method, path, headers)`` once a request was served, before its client sees
        the answer; it stays until it returns True."""
        with self.lock:
            self.after_hooks.append(hook)

    def freeze(self) -> None:
        """From now on, requests are never answered (each waits out its client's timeout)."""
        with self.lock:
            self._thaw.clear()
            self.frozen = True

    def thaw(self) -> None:
        """Answer again; requests held while frozen fail as unanswered."""
        with self.lock:
            self.frozen = False
            self._thaw.set()

    def count(self, method: str | None = None, status: int | None = None) -> int:
        """How many answered requests had ``method`` and ``status`` (``None``: any)."""
        with self.lock:
            return sum(1 for m, _p, s in self.requests
                       if (method is None or m == method) and (status is None or s == status))

    def _run_hooks(self, hooks: list[Hook], method: str, path: str, headers: dict[str, str]) -> None:
        with self.lock:
            current = list(hooks)
        for hook in current:  # outside the lock: a hook may make requests of its own
            if hook(method, path, headers):
                with self.lock:
                    if hook in hooks:
                        hooks.remove(hook)

    def _injected(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str] | None:
        """A request about to be served, once it was not held (``frozen``): the before hooks,
        the delay, then ``(status, code)`` when it is to fail (logged as answered so), else ``None``."""
        self._run_hooks(self.hooks, method, path, headers)
        if self.delay_s:
            time.sleep(self.delay_s)
        with self.lock:
            if not (self.fail_remaining > 0 and self.fail_when(method, path)):
                return None
            self.fail_remaining -= 1
            self.requests.append((method, path, self.fail_status))
            return self.fail_status, self.fail_code


class InMemoryEndpoint(Faults):
    """What the clients of ``memory://<name>`` talk to: a server's buckets, through the faults a
    test sets (``Faults``: ``fail``, ``freeze``, hooks; and ``down``), with a log of the requests
    it answered."""

    def __init__(self, name: str, server: InMemoryServer, *, autocreate: bool = False) -> None:
        super().__init__()
        self.name = name
        self.server = server
        self.autocreate = autocreate  # a bucket a client names exists (``memory://`` endpoints)
        self.is_down = False
        self.down_reason = "connection refused"

    @property
    def endpoint(self) -> str:
        """The URL a config names it by (``bucket.endpoint``)."""
        return SCHEME + self.name

    def client(self, settings: BucketSettings, *, timeout_s: float = 30.0, attempts: int = 1, page_size: int = 1000,
               deadline_s: float | None = None) -> "InMemoryBucket":
        """A client of bucket ``settings.name`` through this endpoint (made first, for a
        ``memory://`` endpoint)."""
        if self.autocreate:
            self.server.create_bucket(settings.name)
        return InMemoryBucket(settings, self, page_size=page_size, timeout_s=timeout_s, attempts=attempts,
                              deadline_s=deadline_s)

    def down(self, reason: str = "connection refused") -> None:
        """Nothing answers: every request fails at once (``reason``), as against a port nothing
        listens on."""
        with self.lock:
            self.is_down, self.down_reason = True, reason

    def up(self) -> "InMemoryEndpoint":
        """Answer again (after ``down``)."""
        with self.lock:
            self.is_down = False
        return self

    def close(self) -> None:
        """Thaw whatever waits (the end of a test)."""
        self.thaw()

    def serve(self, method: str, path: str, headers: dict[str, str], op: Callable[[], _T], wait_s: float) -> _T:
        """One request: the faults, then ``op`` (the buckets' answer), then the after hooks.
        ``wait_s``: how long the client waits for an answer (a frozen endpoint's requests). The
        log has S3's statuses: 204 for a DELETE, 206 for a GET of a byte range."""
        with self.lock:
            self.received += 1
            down, frozen, reason = self.is_down, self.frozen, self.down_reason
        if down:
            raise _Injected(0, "ConnectionRefused", reason)
        if frozen:
            self._thaw.wait(wait_s)
            raise _Injected(0, "Timeout", f"no answer within {wait_s:g} s")
        failing = self._injected(method, path, headers)
        if failing is not None:
            raise _Injected(*failing)
        status = 204 if method == "DELETE" else 206 if "Range" in headers else 200
        try:
            return op()
        except PreconditionFailed:
            status = 412
            raise
        except ObjectMissing:
            status = 404
            raise
        except ObjectTooLarge:
            status = 206
            raise
        except BucketUnavailable:
            status = 404
            raise
        finally:
            self._run_hooks(self.after_hooks, method, path, headers)
            with self.lock:
                self.requests.append((method, path, status))


_REGISTRY: dict[str, InMemoryEndpoint] = {}
_REGISTRY_LOCK = threading.Lock()


def endpoint(name: str, *, server: InMemoryServer | None = None) -> InMemoryEndpoint:
    """The process's endpoint ``memory://<name>``, made on first use (with a new server, or in
    front of ``server``). Its buckets exist as soon as a client names them."""
    with _REGISTRY_LOCK:
        found = _REGISTRY.get(name)
        if found is None:
            found = _REGISTRY[name] = InMemoryEndpoint(name, server or InMemoryServer(), autocreate=True)
        elif server is not None and found.server is not server:
            raise ValueError(f"memory://{name} already fronts another server")
        return found


def made(name: str) -> InMemoryEndpoint:
    """The endpoint ``memory://<name>`` that code of this process made (``endpoint``); else one
    that nothing answers behind (not registered): a config alone never makes a bucket, so a
    process that runs the bank from its config (the CLI, a daemon, ``serve``) and names a
    ``memory://`` endpoint reaches no bucket, and says so, rather than one that ends with it."""
    with _REGISTRY_LOCK:
        found = _REGISTRY.get(name)
    if found is not None:
        return found
    missing = InMemoryEndpoint(name, InMemoryServer())
    missing.down(f"no in-process endpoint {SCHEME}{name} in this process (a memory:// endpoint is made by "
                 "the code that runs the bank, memlocal_sync.inmemory.endpoint: for tests and embedding)")
    return missing


def forget(name: str) -> None:
    """Drop the endpoint ``memory://<name>`` (a later ``endpoint(name)`` starts empty)."""
    with _REGISTRY_LOCK:
        gone = _REGISTRY.pop(name, None)
    if gone is not None:
        gone.close()


def registered(prefix: str = "") -> list[str]:
    """The names of this process's endpoints (those starting with ``prefix``)."""
    with _REGISTRY_LOCK:
        return sorted(name for name in _REGISTRY if name.startswith(prefix))


def endpoint_name(url: str) -> str | None:
    """``memory://<name>`` -> ``name``; ``None`` for any other URL."""
    if not url.startswith(SCHEME):
        return None
    return url[len(SCHEME):].rstrip("/")


class InMemoryBucket:
    """``BucketClient`` of bucket ``settings.name`` through an ``InMemoryEndpoint``; thread-safe.

    As ``Bucket``: ``attempts`` tries in all for a request answered 5xx, 429 or not at all,
    ``timeout_s`` the longest wait for one answer, ``deadline_s`` the longest a pass waits with
    no answer at all (``begin_pass``); no sleeps between attempts (nothing here is overloaded)."""

    def __init__(self, settings: BucketSettings, endpoint: InMemoryEndpoint | InMemoryServer, *,
                 page_size: int = 1000, timeout_s: float = 30.0, attempts: int = 1,
                 deadline_s: float | None = None) -> None:
        self.settings = settings
        self.endpoint = endpoint if isinstance(endpoint, InMemoryEndpoint) else InMemoryEndpoint("", endpoint)
        self.server = self.endpoint.server
        self.name = settings.name
        self.page_size = max(1, page_size)
        self.timeout_s = timeout_s
        self.attempts = max(1, attempts)
        self.deadline_s = deadline_s
        self._answered_at: float | None = None  # within a pass: its start, then the last answer
        self.requests: Counter[str] = Counter()  # by operation: LIST (per page), GET, PUT, DELETE, HEAD
        self._count_lock = threading.Lock()

    def begin_pass(self, at: float | None = None) -> None:
        """A pass starts: ``deadline_s`` runs from ``at`` (default now), then from each answer."""
        self._answered_at = time.monotonic() if at is None else at

    def end_pass(self) -> None:
        self._answered_at = None

    def _left(self) -> float:
        if self.deadline_s is None or self._answered_at is None:
            return self.timeout_s
        return min(self.timeout_s, self._answered_at + self.deadline_s - time.monotonic())

    def _request(self, op_name: str, what: str, method: str, path: str, headers: dict[str, str],
                 op: Callable[[], _T]) -> _T:
        """``op`` as one request through the endpoint, with the client's attempts and deadline;
        the endpoint's injected answers translated as ``Bucket`` translates the server's."""
        with self._count_lock:
            self.requests[op_name] += 1
        last: _Injected | None = None
        for _attempt in range(self.attempts):
            wait_s = self._left()
            if wait_s <= 0:
                raise BucketUnavailable(f"cannot reach bucket {self.name}: no answer for {self.deadline_s:g} s "
                                        f"(sync.deadline_s) during {what}")
            try:
                result = self.endpoint.serve(method, path, headers, op, wait_s)
            except _Injected as exc:
                last = exc
                if exc.status in (0, 429) or exc.status >= 500:
                    if exc.status:  # an answer, even an error, restarts the deadline
                        self._answered()
                    continue
                self._answered()
                raise self._translate(exc, what) from None
            except (PreconditionFailed, ObjectMissing, ObjectTooLarge, BucketUnavailable):
                self._answered()
                raise
            self._answered()
            return result
        assert last is not None
        raise self._translate(last, what) from None

    def _answered(self) -> None:
        if self._answered_at is not None:
            self._answered_at = time.monotonic()

    def _translate(self, exc: _Injected, what: str) -> Exception:
        if exc.status == 0:
            return BucketUnavailable(f"cannot reach bucket {self.name} at {self.endpoint.endpoint}: {exc.message} "
                                     f"during {what}")
        if exc.status == 412:
            return PreconditionFailed(f"{what}: {exc.code}")
        if exc.code == "NoSuchBucket":
            return BucketUnavailable(f"bucket {self.name} does not exist")
        if exc.status == 404:
            return ObjectMissing(what)
        if exc.status == 403:
            return BucketUnavailable(f"access to bucket {self.name} denied ({exc.code}) during {what}")
        return BucketUnavailable(f"bucket {self.name} answered {exc.status} {exc.code} during {what}: {exc.message}")

    def _path(self, key: str = "") -> str:
        return f"/{self.name}/{quote(key, safe='/~')}" if key else f"/{self.name}"

    def _bucket(self) -> _Bucket:
        """The bucket; the caller holds the server's lock."""
        bucket = self.server._buckets.get(self.name)
        if bucket is None:
            raise BucketUnavailable(f"bucket {self.name} does not exist")
        return bucket

    # --- operations ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raise ``BucketUnavailable`` unless the bucket exists."""

        def head() -> None:
            with self.server._lock:
                self._bucket()

        self._request("HEAD", "HEAD bucket", "HEAD", self._path(), {}, head)

    def list(self, prefix: str, *, delimiter: str | None = None, start_after: str | None = None,
             last: str | None = None, max_pages: int | None = None) -> Listing:
        """As ``Bucket.list``: pages of ``page_size`` entries, each page a request."""
        objects: list[Listed] = []
        prefixes: list[str] = []
        pages = 0
        truncated = False
        after = start_after  # where the next page starts (S3's continuation token)
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": str(self.page_size)}
            if delimiter:
                query["delimiter"] = delimiter
            if after is not None:
                query["start-after"] = after
            start = after

            def page() -> _Page:
                return self._page(prefix, delimiter, start)

            page_objects, page_prefixes, page_last, more = self._request(
                "LIST", f"LIST {prefix}", "GET", f"/{self.name}?{urlencode(query)}", {}, page)
            pages += 1
            objects += [o for o in page_objects if last is None or o.key <= last]
            prefixes += page_prefixes
            if not more:
                break
            if last is not None and page_last >= last:
                break  # the rest is past the range (as ``Bucket.list`` stops paging)
            if max_pages is not None and pages >= max_pages:
                truncated = True
                break
            after = page_last
        return Listing(objects, pages, tuple(prefixes), truncated)

    def _page(self, prefix: str, delimiter: str | None, after: str | None) -> "_Page":
        """One page: its objects, common prefixes, last entry and whether more follow."""
        objects: list[Listed] = []
        prefixes: list[str] = []
        page_last = ""
        low = prefix.encode()
        with self.server._lock:
            bucket = self._bucket()
            order = bucket.order
            i = bisect_left(order, low)
            if after is not None:
                i = max(i, bisect_right(order, after.encode()))
            entries = 0
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
                    # S3 rolls every key under a common prefix into one entry; the next page
                    # starts past all of them.
                    i = bisect_left(order, common.encode() + b"\xff")
                    page_last = common + "\U0010ffff"
                else:
                    obj = bucket.objects[key]
                    objects.append(Listed(key, obj.etag, len(obj.body), obj.modified))
                    page_last = key
                    i += 1
                entries += 1
            more = i < len(order) and order[i].startswith(low)
        return objects, prefixes, page_last, more

    def get(self, key: str, max_bytes: int) -> tuple[bytes, str]:
        """The body and ETag of ``key``; ``ObjectTooLarge`` beyond ``max_bytes``."""

        def read() -> tuple[bytes, str]:
            with self.server._lock:
                obj = self._bucket().objects.get(key)
            if obj is None:
                raise ObjectMissing(f"GET {key}")
            if len(obj.body) > max_bytes:
                raise ObjectTooLarge(len(obj.body), max_bytes, obj.etag)
            return obj.body, obj.etag

        return self._request("GET", f"GET {key}", "GET", self._path(key), {"Range": f"bytes=0-{max_bytes}"}, read)

    def _write(self, key: str, body: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        body = bytes(body)
        headers: dict[str, str] = {}
        if if_none_match:
            headers["If-None-Match"] = "*"
        if if_match is not None:
            headers["If-Match"] = if_match

        def write() -> str:
            with self.server._lock:
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

        return self._request("PUT", f"PUT {key}", "PUT", self._path(key), headers, write)

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

        def remove() -> None:
            with self.server._lock:
                bucket = self._bucket()
                if bucket.objects.pop(key, None) is not None:
                    raw = key.encode()
                    del bucket.order[bisect_left(bucket.order, raw)]

        self._request("DELETE", f"DELETE {key}", "DELETE", self._path(key), {}, remove)

    def close(self) -> None:
        """Nothing to release (no connections)."""
