"""The bucket: which one (and why), a boto3 client with bounded retries, and error translation.

boto3 is imported lazily, on the first request, so opening a bank (which loads the replicator
through its entry point) costs nothing when no request is made. The client is created once and
shared by the pass's worker threads (boto3 clients are thread-safe; sessions are not).

Throttling, 5xx and connection errors are retried by botocore's "standard" retry mode
(exponential backoff with jitter, ``sync.attempts`` attempts in all). What is left is translated:
``PreconditionFailed`` (412, or S3's 409 ConditionalRequestConflict), ``ObjectMissing`` (404),
``ObjectTooLarge``, and ``BucketUnavailable`` (a ``SyncError``) for everything that means the
bucket cannot be used right now: unreachable, no such bucket, denied, retries exhausted.

PUTs to an S3-compatible endpoint with explicit keys take a leaner path to the wire (``_Wire``):
one SigV4-signed request (``_Signer``: botocore's signature, the signing key kept for the day)
written at once on a kept-alive ``TCP_NODELAY`` socket per thread (``_Connection``), about a
third of the CPU of the earlier lean path (botocore's signer on ``http.client``), itself a third of
botocore's: a push's PUTs were most of its CPU.
Anything but a plain answer (2xx, 412, 404, 403) is sent again through botocore, with its
retries and its translation.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import socket
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Protocol, TypeVar, runtime_checkable

from memlocal.config import Config
from memlocal.errors import SyncError, fold_whitespace

from .objects import Listed


_T = TypeVar("_T")

class PreconditionFailed(Exception):
    """The conditional write lost: the object exists (create) or moved on (If-Match)."""


class ObjectMissing(Exception):
    """The object is not (or no longer) in the bucket."""


class ObjectTooLarge(Exception):
    """The object is over ``sync.max_object_bytes``: it is skipped, never read whole."""

    def __init__(self, size: int, cap: int, etag: str = "") -> None:
        super().__init__(f"object is {size} bytes; the cap is {cap}")
        self.size = size
        self.etag = etag


class BucketUnavailable(SyncError):
    """The bucket cannot be used right now (one line saying why)."""


class _EmptyObject(Exception):
    """A Range request on a 0-byte object (416 InvalidRange)."""


@dataclass(frozen=True, slots=True)
class BucketSettings:
    """The bucket in use and where its name came from (e.g. ``env:INTERNAL_S3_BUCKET``)."""

    name: str
    source: str
    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None

    @classmethod
    def from_config(cls, config: Config) -> "BucketSettings | None":
        """The configured bucket, or ``None`` when none is (local only)."""
        name = config.get_str("bucket.name").strip()
        if not name:
            return None
        bucket = config.bucket
        return cls(
            name=name,
            source=config.source("bucket.name"),
            endpoint=bucket.endpoint or None,
            region=bucket.region or None,
            access_key_id=bucket.access_key_id or None,  # both or neither: checked at load
            secret_access_key=bucket.secret_access_key or None,
        )

    @property
    def identity(self) -> str:
        """What the base state was recorded against: another bucket means another base."""
        return f"{self.endpoint or 'aws'}|{self.name}"

    def describe(self) -> str:
        where = f" at {self.endpoint}" if self.endpoint else ""
        return f"{self.name}{where} (from {self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "endpoint": self.endpoint, "region": self.region}


@dataclass(frozen=True, slots=True)
class Listing:
    """Every object under a prefix, how many listing pages that took, and (for a listing with
    a delimiter) the common prefixes one level down, e.g. ``memory/alice/``."""

    objects: list[Listed]
    pages: int
    prefixes: tuple[str, ...] = ()
    truncated: bool = False  # stopped at ``max_pages`` with more keys in the range


@runtime_checkable
class BucketClient(Protocol):
    """The bucket operations the sync needs (as litestream's ``ReplicaClient``): one request
    each, errors translated to ``PreconditionFailed``, ``ObjectMissing``, ``ObjectTooLarge`` and
    ``BucketUnavailable``. ``Bucket`` is the S3 implementation; the engine and the replicator
    depend on this interface only."""

    settings: BucketSettings

    def check(self) -> None:
        """Raise ``BucketUnavailable`` unless the bucket exists and answers."""
        ...

    def list(self, prefix: str, *, delimiter: str | None = None, start_after: str | None = None,
             last: str | None = None, max_pages: int | None = None) -> Listing:
        """Every object under ``prefix`` (with ``delimiter``, the common prefixes too); with
        ``start_after``/``last``, only the keys in that range (``start_after`` < key ≤ ``last``);
        ``max_pages`` stops early (``Listing.truncated``)."""
        ...

    def get(self, key: str, max_bytes: int) -> tuple[bytes, str]:
        """The body and ETag of ``key``, at most ``max_bytes`` of it (else ``ObjectTooLarge``)."""
        ...

    def create(self, key: str, body: bytes) -> str:
        """PUT only if ``key`` does not exist; the new ETag."""
        ...

    def replace(self, key: str, body: bytes, etag: str) -> str:
        """PUT only if ``key`` still has ``etag``; the new ETag."""
        ...

    def put(self, key: str, body: bytes) -> str:
        """PUT unconditionally (objects only this host writes, such as snapshots); the ETag."""
        ...

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key succeeds."""
        ...

    def begin_pass(self, at: float | None = None) -> None:
        """A pass starts (``time.monotonic()`` value ``at``, default now): ``sync.deadline_s`` runs
        from then, or from the bucket's last answer (a client without a deadline ignores it)."""
        ...

    def end_pass(self) -> None:
        """The pass that ``begin_pass`` started is over."""
        ...

    def close(self) -> None: ...


def _translate(exc: Exception, bucket: str, what: str) -> Exception:
    """botocore's exception -> ours (returned, for the caller to raise)."""
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
            return PreconditionFailed(f"{what}: {code or status}")
        if code in ("NoSuchKey", "NotFound") or (status == 404 and code != "NoSuchBucket"):
            return ObjectMissing(what)
        if code == "InvalidRange" or status == 416:
            return _EmptyObject(what)
        if code == "NoSuchBucket":
            return BucketUnavailable(f"bucket {bucket} does not exist")
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled") or status == 403:
            return BucketUnavailable(f"access to bucket {bucket} denied ({code or status}) during {what}")
        message = fold_whitespace(err.get("Message", ""))
        return BucketUnavailable(f"bucket {bucket} answered {status} {code} during {what}: {message}".rstrip(": "))
    if isinstance(exc, bx.NoCredentialsError):
        return BucketUnavailable(
            f"no credentials for bucket {bucket}: set INTERNAL_S3_ACCESS_KEY_ID/SECRET_ACCESS_KEY "
            "(or S3_..., or the config file), or configure boto3's credential chain"
        )
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError,
                        bx.ConnectionClosedError, bx.ConnectionError, bx.HTTPClientError)):
        return BucketUnavailable(f"cannot reach bucket {bucket}: {fold_whitespace(exc)}")
    if isinstance(exc, bx.BotoCoreError):
        return BucketUnavailable(f"bucket {bucket}: {fold_whitespace(exc)}")
    return exc


_LOADER: Any = None
_SHARED_SESSION: Any = None
_SESSION_LOCK = threading.Lock()


def _new_session() -> Any:
    """A boto3 session on the process's one botocore data loader (its caches hold the parsed
    service models: a loader of its own would parse botocore's S3 model again, ~0.3 s per client).
    The caller holds ``_SESSION_LOCK``."""
    import boto3
    import botocore.session

    from . import listing

    global _LOADER
    core = botocore.session.get_session()
    if _LOADER is None:
        _LOADER = core.get_component("data_loader")
    core.register_component("data_loader", _LOADER)
    # The sync never reads a timestamp from a response (no decision depends on a clock), and
    # parsing each listing entry's LastModified with dateutil was most of the client's CPU
    # in a no-op pass over 10k objects: keep timestamps as the strings the server sent.
    # And a listing page's body is read in one ElementTree pass (memlocal_sync.listing), not
    # element by element through the service model: half the client's CPU of a listing.
    core.register_component("response_parser_factory", listing.parser_factory())
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
    return boto3.session.Session(botocore_session=core)


class _Shared:
    """A client made with explicit keys, and how many open Buckets use it."""

    __slots__ = ("client", "users")

    def __init__(self, client: Any) -> None:
        self.client = client
        self.users = 0


# The clients made with explicit keys, by everything they were made from, least recently used
# first. The Buckets of a process with the same settings and limits share one: a bank opens two,
# a sync pass one, and making a client costs 15-30 ms of CPU (botocore copies its ~1,000 event
# handlers and builds the endpoint rules), more than most requests. Clients are thread-safe.
# When its last Bucket closes, a client closes its connections (and stays here, to be used
# again: a closed botocore client opens new connections on its next request).
_CLIENTS: OrderedDict[tuple[Any, ...], _Shared] = OrderedDict()
# Unused clients kept (a process has one or two configurations; a test suite's proxies more).
CLIENTS_KEPT = 16


def _s3_client(shared_as: tuple[Any, ...] | None, *, deadline_s: float | None = None,
               **kwargs: Any) -> tuple[Any, _Shared | None]:
    """An S3 client, and its ``_Shared`` entry when it is shared (``Bucket.close`` releases it).

    With explicit keys (``shared_as``: everything the client is made from) it is the process's
    client for them, made on the process's one session the first time: a new session registers
    botocore's event handlers again; sessions are not thread-safe, hence the lock. Without keys
    each client is new, on a session of its own, so that boto3's credential chain (environment,
    profile, instance role) is read afresh, never cached for the life of the process."""
    global _SHARED_SESSION
    with _SESSION_LOCK:
        if shared_as is None:
            return _with_hooks(_new_session().client("s3", **kwargs), deadline_s), None
        shared = _CLIENTS.get(shared_as)
        if shared is None:
            if _SHARED_SESSION is None:
                _SHARED_SESSION = _new_session()
            shared = _CLIENTS[shared_as] = _Shared(_with_hooks(_SHARED_SESSION.client("s3", **kwargs), deadline_s))
            unused = [key for key, entry in _CLIENTS.items() if not entry.users and entry is not shared]
            for key in unused[:max(0, len(_CLIENTS) - CLIENTS_KEPT)]:
                del _CLIENTS[key]  # closed when its last Bucket closed
        _CLIENTS.move_to_end(shared_as)
        shared.users += 1
        return shared.client, shared


def _release(shared: _Shared) -> bool:
    """One Bucket less uses ``shared``; whether it was the last (its connections may close)."""
    with _SESSION_LOCK:
        shared.users -= 1
        return shared.users == 0


def _with_hooks(client: Any, deadline_s: float | None = None) -> Any:
    # botocore sends "Expect: 100-continue" with every PUT body, which costs a round trip per
    # object (the server's interim 100 answer) for bodies of a few hundred bytes.
    client.meta.events.register("before-sign.s3.PutObject", _drop_expect_header)
    if deadline_s is not None:
        # First: a ``False`` from it stops the retry whatever the standard handler says after it.
        client.meta.events.register_first("needs-retry.s3", _needs_retry)
        client.meta.events.register("before-send.s3", _before_send)
    return client


# The Bucket whose botocore request runs on this thread (set by ``Bucket._call``): the client is
# shared by the Buckets of a process, each pass has its own clock.
_ACTIVE = threading.local()


class _Clock:
    """How long a pass may still wait for the bucket (``sync.deadline_s``). The deadline runs
    while the pass waits on the bucket: from the pass's start (``Bucket.begin_pass``; a cron
    ``sync run`` passes its process's start) until its first answer, then from the bucket's last
    answer while a request is in flight; time the pass spends on its own work with no request in
    flight after an answer does not count (a fresh host's inserts under load are not the bucket's
    silence; after an attempt that got no answer, it does). Every
    attempt of every request takes what is left when it starts (``start``) and waits at most that
    (its socket timeouts are capped by it), so a pass against a hung bucket (it accepts
    connections and never answers) ends at the deadline by construction, while a slow bucket that
    keeps answering some requests keeps its retries."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self.since: float | None = None  # outside a pass: every attempt has the whole deadline
        self.inflight = 0
        self.started = False  # an attempt of this pass has started
        self.last_answered = False  # the last attempt that ended got an answer
        self._lock = threading.Lock()

    def begin(self, at: float | None = None) -> None:
        with self._lock:
            self.since = time.monotonic() if at is None else at
            self.inflight, self.started, self.last_answered = 0, False, False

    def end(self) -> None:
        with self._lock:
            self.since, self.inflight, self.started = None, 0, False

    def start(self) -> float:
        """An attempt starts: what is left of the deadline (``<= 0``: nothing; not started then)."""
        with self._lock:
            if self.since is None:
                return self.deadline_s
            now = time.monotonic()
            if not self.inflight and self.started and self.last_answered:
                self.since = max(self.since, now)  # the pass's own work is not the bucket's silence
            left = self.since + self.deadline_s - now
            if left > 0:
                self.inflight += 1
                self.started = True
            return left

    def finish(self, answered: bool) -> None:
        """An attempt started by ``start`` ended, with an HTTP answer (whatever its status) or none."""
        with self._lock:
            self.inflight = max(0, self.inflight - 1)
            self.last_answered = answered
            if answered and self.since is not None:
                self.since = max(self.since, time.monotonic())

    def left(self) -> float:
        since = self.since
        return self.deadline_s if since is None else since + self.deadline_s - time.monotonic()


def _needs_retry(response: Any = None, attempts: int = 1, **_: Any) -> bool | None:
    """botocore's ``needs-retry`` (called after every attempt, answered or not): an HTTP answer,
    whatever its status, says the bucket is alive; no retry when what is left of the deadline
    would not outlast the standard handler's back-off before it (at most 2^(attempts-1) s);
    ``None`` leaves the rest to botocore's standard retry handler."""
    bucket: Bucket | None = getattr(_ACTIVE, "bucket", None)
    if bucket is None or bucket.clock is None:
        return None
    if getattr(_ACTIVE, "attempt", False):  # the attempt _before_send started
        _ACTIVE.attempt = False
        bucket.clock.finish(response is not None)
    if response is not None:
        return None
    return False if bucket.clock.left() <= min(20.0, 2.0 ** max(0, attempts - 1)) else None


def _before_send(request: Any, **_: Any) -> Any:
    """botocore's ``before-send``: the attempt is refused once the pass's deadline has passed,
    and sent by ``Bucket.send_attempt`` (socket timeouts capped by what is left) where the lean
    path applies; ``None`` lets botocore send it."""
    bucket: Bucket | None = getattr(_ACTIVE, "bucket", None)
    if bucket is None or bucket.clock is None:
        return None
    return bucket.send_attempt(request)


def _drop_expect_header(request: Any, **_: Any) -> None:
    """botocore event handler: send a PUT's small body at once, without ``Expect: 100-continue``."""
    if "Expect" in request.headers:
        del request.headers["Expect"]


# Statuses the lean path answers itself; any other (5xx, 429, 400, ...) and any transport error
# go through botocore (retries, backoff, error translation).
_WIRE_ANSWERS = frozenset({200, 201, 204, 403, 404, 409, 412})
# Environment variables that route botocore's requests through a proxy: the lean path does not
# implement proxies, so with any of them set every request goes through botocore.
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


class _Signer:
    """AWS Signature Version 4 for the lean path's requests: the signature botocore's
    ``S3SigV4Auth`` computes for the same request (tests/test_sync_wire.py compares them), with
    the parts that never change computed once: the signing key once per day, the scope, the host.

    The payload is always signed (its SHA-256 in ``x-amz-content-sha256``), on http and https
    alike; header values are trimmed as SigV4 says (runs of whitespace folded)."""

    __slots__ = ("key_id", "secret", "region", "host", "_day", "_key")

    def __init__(self, key_id: str, secret: str, region: str, host: str) -> None:
        self.key_id, self.secret, self.region, self.host = key_id, secret, region, host
        self._day = ""
        self._key = b""

    def _signing_key(self, day: str) -> bytes:
        if day != self._day:  # (a race here computes the same key twice)
            key = hmac.new(f"AWS4{self.secret}".encode(), day.encode(), hashlib.sha256).digest()
            for part in (self.region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._key, self._day = key, day
        return self._key

    def sign(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes,
             now: float | None = None) -> list[tuple[str, str]]:
        """The headers to send for this request: ``headers`` (as named), ``Host``, ``X-Amz-Date``,
        ``X-Amz-Content-SHA256`` and ``Authorization``, every one of them signed. ``path`` is the
        quoted path, ``query`` the canonical query string (sorted, quoted) or ''."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        day = stamp[:8]
        payload = hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256
        sent = [("Host", self.host), *headers.items(), ("X-Amz-Content-SHA256", payload), ("X-Amz-Date", stamp)]
        signed = sorted((name.lower(), " ".join(value.split())) for name, value in sent)
        names = ";".join(name for name, _value in signed)
        canonical = "\n".join((method, path, query, "".join(f"{n}:{v}\n" for n, v in signed), names, payload))
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        sent.append(("Authorization", f"AWS4-HMAC-SHA256 Credential={self.key_id}/{scope}, "
                                      f"SignedHeaders={names}, Signature={signature}"))
        return sent


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class _Connection:
    """One kept-alive HTTP/1.1 connection: a request is written with one ``sendall`` (head and
    body together) on a socket with ``TCP_NODELAY``, and its answer read from a buffered reader.

    ``http.client`` wrote a PUT's head and body in two writes, and with Nagle's algorithm on,
    the body waited for the server's (delayed) acknowledgement of the head; it also parsed every
    answer's headers with the ``email`` package. Answers are read as RFC 9112 says: no body for
    HEAD, 1xx, 204 and 304; ``Transfer-Encoding: chunked``; ``Content-Length``; else to the
    connection's close."""

    __slots__ = ("sock", "reader")

    def __init__(self, host: str, port: int, timeout: float, context: Any = None) -> None:
        sock = socket.create_connection((host, port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.reader = sock.makefile("rb")

    def close(self) -> None:
        try:
            self.reader.close()
        finally:
            self.sock.close()

    def exchange(self, method: str, head: bytes, body: bytes | None,
                 timeout: float) -> tuple[int, list[tuple[str, str]], bytes, bool]:
        """Send one request (its head ends with the blank line) and read its answer: (status,
        headers, body, whether the connection must close after it). Raises ``OSError`` or
        ``http.client.HTTPException`` (``RemoteDisconnected`` when the server closed it first)."""
        self.sock.settimeout(timeout)
        self.sock.sendall(head + body if body else head)
        reader = self.reader
        while True:
            line = reader.readline(_MAX_LINE + 1)
            if not line:
                raise http.client.RemoteDisconnected("the server closed the connection without an answer")
            parts = line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
                raise http.client.BadStatusLine(line.decode("latin-1", "replace"))
            status = int(parts[1])
            headers: list[tuple[str, str]] = []
            length: int | None = None
            chunked = False
            close = parts[0] == b"HTTP/1.0"
            while True:
                line = reader.readline(_MAX_LINE + 1)
                if line in (b"\r\n", b"\n"):
                    break
                if not line or len(line) > _MAX_LINE or len(headers) > _MAX_HEADERS:
                    raise http.client.HTTPException("an answer's headers are cut short or too long")
                name, sep, value = line.decode("latin-1").partition(":")
                if not sep:
                    raise http.client.HTTPException(f"not a header line: {line[:80]!r}")
                name, value = name.strip(), value.strip()
                headers.append((name, value))
                lower = name.lower()
                if lower == "content-length":
                    if not value.isdigit():
                        raise http.client.HTTPException(f"bad Content-Length {value!r}")
                    length = int(value)
                elif lower == "transfer-encoding":
                    chunked = "chunked" in value.lower()
                elif lower == "connection":
                    close = close or "close" in value.lower()
            if 100 <= status < 200:
                continue  # an interim answer (100 Continue): the real one follows
            break
        if method == "HEAD" or status in (204, 304):
            data = b""
        elif chunked:
            data = self._chunked()
        elif length is not None:
            data = reader.read(length)
            if len(data) < length:
                raise http.client.IncompleteRead(data, length - len(data))
        else:
            data, close = reader.read(), True
        return status, headers, data, close

    def _chunked(self) -> bytes:
        reader = self.reader
        out: list[bytes] = []
        while True:
            line = reader.readline(_MAX_LINE + 1)
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise http.client.HTTPException(f"bad chunk size {line[:40]!r}") from None
            if size == 0:
                while reader.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(out)
            chunk = reader.read(size)
            if len(chunk) < size:
                raise http.client.IncompleteRead(chunk, size - len(chunk))
            out.append(chunk)
            reader.readline(_MAX_LINE + 1)  # the chunk's CRLF


_MAX_LINE = 65536
_MAX_HEADERS = 100


class _Wire:
    """Signed requests straight to a path-style S3 endpoint, one kept-alive connection per thread.

    botocore spends most of a small PUT's CPU on its per-request machinery (event hooks, the
    parameter validation and serialisation of the service model, endpoint rules, response
    parsing); a push is thousands of identical small PUTs. This sends the same requests, signed
    by ``_Signer`` (botocore's signature, computed with less work), on ``_Connection``s (one
    write per request, ``TCP_NODELAY``, a lean reader of answers)."""

    def __init__(self, endpoint: str, bucket: str, region: str, key_id: str, secret: str, timeout_s: float) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(endpoint)
        self.secure = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.secure else 80)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.path = f"{parts.path.rstrip('/')}/{bucket}/"
        self.timeout_s = timeout_s
        # The Host header as botocore signs it: the port only when it is not the scheme's own.
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if parts.port in (None, 443 if self.secure else 80) else f"{host}:{parts.port}"
        self.signer = _Signer(key_id, secret, region, self.host_header)
        self._context: Any = None
        self._local = threading.local()
        self._all: list[_Connection] = []
        self._lock = threading.Lock()

    def _connection(self, timeout: float) -> _Connection:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self.secure and self._context is None:
                import ssl

                self._context = ssl.create_default_context()
            conn = _Connection(self.host, self.port, timeout, self._context if self.secure else None)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _drop(self) -> None:
        conn: _Connection | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with self._lock:
                if conn in self._all:
                    self._all.remove(conn)
            conn.close()

    def put(self, key: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, str, bytes]:
        """One signed PUT: (status, ETag, body of an error answer). Raises ``OSError`` or
        ``http.client.HTTPException`` when the request got no answer within ``timeout``."""
        from urllib.parse import quote

        status, headers_got, data = self.send("PUT", self.path + quote(key, safe="/~"), body, headers, timeout)
        return status, headers_got.get("etag", ""), data

    def list_page(self, query: dict[str, str], timeout: float) -> tuple[int, bytes]:
        """One signed ListObjectsV2 request (``GET /<bucket>?list-type=2&...``): (status, body)."""
        from urllib.parse import quote

        # SigV4's canonical query: parameters sorted by name, names and values URI-encoded.
        encoded = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))
        status, _headers, data = self.send("GET", self.path.rstrip("/") + "?" + encoded, b"", {}, timeout)
        return status, data

    def send(self, method: str, target: str, body: bytes, headers: dict[str, str],
             timeout: float) -> tuple[int, dict[str, str], bytes]:
        """One request for ``target`` (the path and query, already quoted), signed here: (status,
        headers lower-cased, body). Raises ``OSError`` or ``http.client.HTTPException`` when the
        request got no answer within ``timeout``."""
        path, _, query = target.partition("?")
        sent = self.signer.sign(method, path, query, headers, body)
        if body or method == "PUT":
            sent.append(("Content-Length", str(len(body))))
        sent.append(("Accept-Encoding", "identity"))  # (unsigned, as http.client sent it)
        status, got, data = self._exchange(method, target, body, sent, timeout)
        return status, {k.lower(): v for k, v in got}, data

    def raw(self, method: str, target: str, body: bytes | None, headers: dict[str, str],
            timeout: float) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request as given (already signed: botocore's), on this thread's kept-alive
        connection, waiting at most ``timeout`` for the connection and for each read: (status,
        headers, body)."""
        sent = [(k, v) for k, v in headers.items() if k.lower() != "host"]
        sent.insert(0, ("Host", self.host_header))
        names = {k.lower() for k, _v in sent}
        if "content-length" not in names and (body is not None or method in ("PUT", "POST")):
            sent.append(("Content-Length", str(len(body or b""))))
        if "accept-encoding" not in names:
            sent.append(("Accept-Encoding", "identity"))
        return self._exchange(method, target, body, sent, timeout)

    def _exchange(self, method: str, target: str, body: bytes | None, headers: list[tuple[str, str]],
                  timeout: float) -> tuple[int, list[tuple[str, str]], bytes]:
        lines = [f"{method} {target} HTTP/1.1"]
        lines += [f"{k}: {v}" for k, v in headers]
        text = "\r\n".join(lines)
        breaks = len(lines) - 1  # exactly the lines' own: none inside a header's name or value
        if text.count("\n") != breaks or text.count("\r") != breaks or " " in target:
            raise ValueError(f"a line break or space in a request's head: {text[:200]!r}")  # as http.client refuses
        head = (text + "\r\n\r\n").encode("latin-1")
        for attempt in (1, 2):
            try:
                conn = self._connection(timeout)
                status, got, data, close = conn.exchange(method, head, body, timeout)
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
                # A kept-alive connection the server had closed (its idle timeout): nothing was
                # answered; once more on a new connection.
                self._drop()
                if attempt == 2:
                    raise
                continue
            except BaseException:
                self._drop()
                raise
            if close:
                self._drop()
            return status, got, data
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()


def _error_code(body: bytes) -> str:
    """The ``<Code>`` of an S3 error document ('' if there is none)."""
    start = body.find(b"<Code>")
    end = body.find(b"</Code>", start)
    return body[start + 6:end].decode("utf-8", "replace") if start >= 0 and end > start else ""


def _response(url: str, status: int, headers: list[tuple[str, str]], data: bytes) -> Any:
    """An answer as botocore's HTTP layer hands it on (an ``AWSResponse`` over urllib3's response)."""
    import io

    from botocore.awsrequest import AWSResponse
    from urllib3 import HTTPHeaderDict
    from urllib3.response import HTTPResponse

    raw = HTTPResponse(body=io.BytesIO(data), headers=HTTPHeaderDict(headers), status=status, preload_content=False,
                       decode_content=False)
    return AWSResponse(url, status, raw.headers, raw)


class Bucket:
    """The operations the sync needs, each one request (plus botocore's retries)."""

    def __init__(self, settings: BucketSettings, *, timeout_s: float, attempts: int, pool_size: int = 10,
                 page_size: int = 1000, deadline_s: float | None = None) -> None:
        # The values come from the config registry, which has checked their limits at load.
        # ``deadline_s``: a pass waits at most this long for an answer (``_Clock``); an attempt's
        # timeout is never longer than what is left of it.
        self.settings = settings
        self.name = settings.name
        self.deadline_s = deadline_s
        self.timeout_s = min(timeout_s, deadline_s) if deadline_s else timeout_s
        self.attempts = attempts
        self.clock = _Clock(deadline_s) if deadline_s else None
        self.pool_size = max(1, pool_size)
        self.page_size = page_size
        # Any: botocore builds S3 client methods at run time, so its static type has none of them.
        self._client: Any = None
        self._shared: _Shared | None = None  # set when the client is the process's for these settings
        self._lock = threading.Lock()
        self._wire: _Wire | None = None
        self._wire_checked = False
        # Requests made, by method (LIST counts pages; botocore's retries are not counted): what a
        # pass costs, against docs/sync.md's cost model (scripts/fleet.py reads it).
        self.requests: Counter[str] = Counter()
        self._count_lock = threading.Lock()

    def _count(self, method: str, n: int = 1) -> None:
        with self._count_lock:
            self.requests[method] += n

    def begin_pass(self, at: float | None = None) -> None:
        """A pass starts (at the ``time.monotonic()`` value ``at``, default now): its deadline
        (``sync.deadline_s``) runs from then, or from the bucket's last answer once it answers."""
        if self.clock is not None:
            self.clock.begin(at)

    def end_pass(self) -> None:
        """The pass is over: requests outside a pass have the whole deadline each."""
        if self.clock is not None:
            self.clock.end()

    def _attempt_timeout(self, what: str) -> float:
        """An attempt starts: how long it may wait (the request timeout, capped by what is left of
        the pass's deadline); ``BucketUnavailable`` once nothing is left. The caller ends it with
        ``self.clock.finish`` (``_wire_call``, ``_needs_retry``)."""
        if self.clock is None:
            return self.timeout_s
        left = self.clock.start()
        if left <= 0:
            raise BucketUnavailable(f"cannot reach bucket {self.name}: no answer for {self.clock.deadline_s:g} s "
                                    f"(sync.deadline_s) during {what}")
        return min(self.timeout_s, left)

    def _wire_call(self, what: str, call: Callable[[float], _T]) -> _T:
        """``call(timeout)`` on the lean path as one attempt within the pass's deadline."""
        timeout = self._attempt_timeout(what)
        answered = False
        try:
            result = call(timeout)
            answered = True
            return result
        finally:
            if self.clock is not None:
                self.clock.finish(answered)

    def send_attempt(self, request: Any) -> Any:
        """One attempt of a botocore request (its ``before-send``), within the pass's deadline:
        sent here on the lean path's connection, with socket timeouts capped by what is left, when
        the lean path applies to it (an ``AWSResponse``); else ``None`` (botocore sends it)."""
        from urllib.parse import urlsplit

        from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

        what = f"{request.method} {urlsplit(request.url).path}"
        timeout = self._attempt_timeout(what)
        _ACTIVE.attempt = True  # _needs_retry ends it
        wire = self.wire
        body = request.body
        # An https endpoint stays with botocore, which honours a private CA bundle (AWS_CA_BUNDLE,
        # the config's ca_bundle) where the lean path's default context would refuse the server.
        if wire is None or wire.secure or not (body is None or isinstance(body, (bytes, bytearray))):
            return None  # botocore sends it, with its own timeouts (the retry still checks the deadline)
        parts = urlsplit(request.url)
        if f"{parts.scheme}://{parts.netloc}" != wire.origin:
            return None
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        headers = {k: v for k, v in request.headers.items() if k.lower() != "expect"}
        try:
            status, got, data = wire.raw(request.method, target, bytes(body) if body else None,
                                         {k: v.decode() if isinstance(v, bytes) else v for k, v in headers.items()},
                                         timeout)
        except TimeoutError as exc:  # botocore's retry handler and our translation take it from here
            raise ReadTimeoutError(endpoint_url=request.url, error=exc) from None
        except (OSError, http.client.HTTPException) as exc:
            raise EndpointConnectionError(endpoint_url=request.url, error=exc) from None
        return _response(request.url, status, got, data)

    @property
    def wire(self) -> _Wire | None:
        """The lean PUT path, when it applies: an endpoint (path-style, http or https), explicit
        keys, no proxy in the environment. Otherwise every request goes through botocore."""
        if not self._wire_checked:
            with self._lock:
                if not self._wire_checked:
                    s = self.settings
                    if (s.endpoint and s.endpoint.startswith(("http://", "https://")) and s.access_key_id
                            and s.secret_access_key and not any(os.environ.get(v) for v in _PROXY_VARIABLES)):
                        self._wire = _Wire(s.endpoint, self.name, s.region or "us-east-1", s.access_key_id,
                                           s.secret_access_key, self.timeout_s)
                    self._wire_checked = True
        return self._wire

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client, self._shared = self._make_client()
        return self._client

    def _make_client(self) -> tuple[Any, _Shared | None]:
        from botocore.config import Config as BotoConfig

        s = self.settings
        cfg = BotoConfig(
            connect_timeout=self.timeout_s,
            read_timeout=self.timeout_s,
            retries={"mode": "standard", "total_max_attempts": self.attempts},
            max_pool_connections=self.pool_size,
            # Path-style keys work with every S3-compatible server; AWS keeps its default.
            s3={"addressing_style": "path"} if s.endpoint else None,
            # Newer boto3 adds CRC checksums that many S3-compatible servers reject; S3 needs
            # them only where an operation requires them.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            user_agent_extra="memlocal-sync",
        )
        explicit = bool(s.access_key_id and s.secret_access_key)
        return _s3_client(
            (s.endpoint, s.region, s.access_key_id, s.secret_access_key, self.timeout_s, self.attempts,
             self.pool_size, self.deadline_s) if explicit else None,
            deadline_s=self.deadline_s,
            endpoint_url=s.endpoint,
            region_name=s.region,
            aws_access_key_id=s.access_key_id,
            aws_secret_access_key=s.secret_access_key,
            config=cfg,
        )

    def close(self) -> None:
        """Let go of the client and close its connections (a shared client's once no other
        Bucket uses it: ``_CLIENTS``)."""
        with self._lock:
            client, self._client = self._client, None
            shared, self._shared = self._shared, None
            wire = self._wire
        if wire is not None:
            wire.close()
        if client is not None and (shared is None or _release(shared)):
            try:
                client.close()
            except Exception:  # pragma: no cover - closing a pool must not fail a shutdown
                pass

    def _call(self, what: str, fn: Any, *, count: bool = True, **kwargs: Any) -> Any:
        if count:
            self._count(what.split(" ", 1)[0])
        _ACTIVE.bucket = self  # for the deadline's hooks (_needs_retry, _before_send)
        try:
            return fn(Bucket=self.name, **kwargs)
        except Exception as exc:  # translated below; anything unknown is re-raised as is
            raise _translate(exc, self.name, what) from None
        finally:
            if getattr(_ACTIVE, "attempt", False) and self.clock is not None:  # (never left open)
                self.clock.finish(False)
            _ACTIVE.bucket, _ACTIVE.attempt = None, False

    # --- operations ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raise ``BucketUnavailable`` unless the bucket exists and answers."""
        try:
            self._call("HEAD bucket", self.client.head_bucket)
        except ObjectMissing:  # a HEAD's 404 has no body to say NoSuchBucket
            raise BucketUnavailable(f"bucket {self.name} does not exist") from None

    def list(self, prefix: str, *, delimiter: str | None = None, start_after: str | None = None,
             last: str | None = None, max_pages: int | None = None) -> Listing:
        """Every object under ``prefix``, page by page (no 1000-entry cap),
        ``sync.list_page_size`` objects a page; with ``delimiter``, the common
        prefixes one level down as well.

        A range (``start_after`` < key ≤ ``last``) lets a caller list one prefix as several
        listings in parallel (``memlocal_sync.engine``): S3 returns keys in order, so paging
        stops at the first page that passes ``last``. ``max_pages`` stops after that many pages
        (``truncated`` then says whether keys were left)."""
        objects: list[Listed] = []
        prefixes: list[str] = []
        pages = 0
        truncated = False
        token: str | None = None
        while True:
            page = self._list_page(prefix, delimiter, start_after, token)
            pages += 1
            contents = page.get("Contents", [])
            objects += [Listed(o["Key"], o.get("ETag", ""), int(o.get("Size", 0)), o.get("LastModified", ""))
                        for o in contents if last is None or o["Key"] <= last]
            prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            more = bool(page.get("IsTruncated")) and bool(page.get("NextContinuationToken"))
            if last is not None and contents and contents[-1]["Key"] >= last:
                break  # the rest of the prefix is past the range
            if max_pages is not None and pages >= max_pages:
                truncated = more
                break
            if not more:
                break
            token = page["NextContinuationToken"]
        return Listing(objects, pages, tuple(prefixes), truncated)

    def _list_page(self, prefix: str, delimiter: str | None, start_after: str | None,
                   token: str | None) -> dict[str, Any]:
        """One ListObjectsV2 page as :func:`memlocal_sync.listing.parse_listing` reads it (keys
        decoded). On the lean path when it applies: botocore's machinery cost as much CPU per page
        as reading it (its check of every 200 answer for an error document parses the page a
        second time); any answer but a 200, and a request that got none, goes through botocore."""
        what = f"LIST {prefix}"
        self._count("LIST")
        wire = self.wire
        if wire is not None:
            from urllib.parse import unquote_plus

            from .listing import parse_listing

            query = {"list-type": "2", "prefix": prefix, "max-keys": str(self.page_size), "encoding-type": "url"}
            if delimiter:
                query["delimiter"] = delimiter
            if start_after is not None:
                query["start-after"] = start_after
            if token is not None:
                query["continuation-token"] = token
            try:
                status, data = self._wire_call(what, lambda timeout: wire.list_page(query, timeout))
            except (OSError, http.client.HTTPException):
                status, data = 0, b""  # no answer: botocore's retries take it from here
            if status == 200:
                try:
                    page = parse_listing(data)
                except Exception:  # not a listing (a proxy's page?): botocore says what it is
                    page = None
                if page is not None:
                    if page.get("EncodingType") == "url":  # as botocore decodes them
                        for name in ("Prefix", "Delimiter", "StartAfter"):
                            if name in page:
                                page[name] = unquote_plus(page[name])
                        for entry in page.get("Contents", []):
                            entry["Key"] = unquote_plus(entry.get("Key", ""))
                        for entry in page.get("CommonPrefixes", []):
                            entry["Prefix"] = unquote_plus(entry["Prefix"])
                    return page
        kwargs: dict[str, Any] = {"Prefix": prefix, "MaxKeys": self.page_size}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        if start_after is not None:
            kwargs["StartAfter"] = start_after
        if token is not None:
            kwargs["ContinuationToken"] = token
        return dict(self._call(what, self.client.list_objects_v2, count=False, **kwargs))

    def get(self, key: str, max_bytes: int) -> tuple[bytes, str]:
        """The body and ETag of ``key``; at most ``max_bytes`` are ever read (a Range request)."""
        what = f"GET {key}"
        try:
            resp = self._call(what, self.client.get_object, Key=key, Range=f"bytes=0-{max_bytes}")
        except _EmptyObject:
            # An empty object has no byte 0: read it whole (it is empty).
            resp = self._call(f"GET {key}", self.client.get_object, Key=key)
        total = int(resp.get("ContentLength", 0))
        content_range = resp.get("ContentRange") or ""
        if "/" in content_range and content_range.rsplit("/", 1)[1].isdigit():
            total = int(content_range.rsplit("/", 1)[1])
        body = resp["Body"]
        try:
            if total > max_bytes:
                raise ObjectTooLarge(total, max_bytes, resp.get("ETag", ""))
            data = body.read(max_bytes + 1)
        except ObjectTooLarge:
            raise
        except Exception as exc:
            raise _translate(exc, self.name, f"GET {key}") from None
        finally:
            body.close()
        if len(data) > max_bytes:
            raise ObjectTooLarge(len(data), max_bytes, resp.get("ETag", ""))
        return data, resp.get("ETag", "")

    def _put(self, key: str, body: bytes, *, if_none_match: bool = False, if_match: str | None = None,
             content_type: str | None = "application/json") -> str:
        """One PUT (on the lean path when it applies, else botocore's); the new ETag."""
        what = f"PUT {key}"
        wire = self.wire
        if wire is not None:
            headers = {"Content-Type": content_type} if content_type else {}
            if if_none_match:
                headers["If-None-Match"] = "*"
            if if_match is not None:
                headers["If-Match"] = if_match
            self._count("PUT")
            try:
                status, etag, data = self._wire_call(what, lambda timeout: wire.put(key, body, headers, timeout))
            except (OSError, http.client.HTTPException):
                status, etag, data = 0, "", b""  # no answer: botocore's retries take it from here
            if status in _WIRE_ANSWERS:
                if status < 300:
                    return etag
                code = _error_code(data)
                if status == 412 or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise PreconditionFailed(f"{what}: {code or status}")
                if code == "NoSuchBucket":
                    raise BucketUnavailable(f"bucket {self.name} does not exist")
                if status == 404:
                    raise ObjectMissing(what)
                if status == 403:
                    raise BucketUnavailable(f"access to bucket {self.name} denied ({code or status}) during {what}")
            # Anything else (5xx, 429, 409 without a conditional code, no answer): botocore.
        kwargs: dict[str, Any] = {"Key": key, "Body": body}
        if content_type:
            kwargs["ContentType"] = content_type
        if if_none_match:
            kwargs["IfNoneMatch"] = "*"
        if if_match is not None:
            kwargs["IfMatch"] = if_match
        resp = self._call(what, self.client.put_object, **kwargs)
        return str(resp.get("ETag", ""))

    def create(self, key: str, body: bytes) -> str:
        """PUT only if ``key`` does not exist (``If-None-Match: *``); returns the new ETag."""
        return self._put(key, body, if_none_match=True)

    def replace(self, key: str, body: bytes, etag: str) -> str:
        """PUT only if ``key`` still has ``etag`` (``If-Match``); returns the new ETag."""
        return self._put(key, body, if_match=etag)

    def put(self, key: str, body: bytes) -> str:
        """PUT unconditionally; returns the new ETag."""
        return self._put(key, body, content_type=None)

    def delete(self, key: str) -> None:
        """Delete ``key`` (unconditionally: a deletion wins; deleting a missing key succeeds)."""
        try:
            self._call(f"DELETE {key}", self.client.delete_object, Key=key)
        except ObjectMissing:
            pass
