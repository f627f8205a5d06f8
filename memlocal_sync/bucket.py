"""The bucket: which one (and why), its clients with bounded requests, and error translation.

The wire is two well-kept libraries, each for what it does well; nothing here speaks HTTP or signs
a request:

- **obstore** (Python bindings of Rust's ``object_store``) for the objects: GET (a Range request,
  never more than the cap), PUT (``mode="create"`` sends ``If-None-Match: *``, ``{"e_tag": …}``
  sends ``If-Match``) and DELETE. Its ``timeout`` bounds a whole request (connect, send, every
  byte of the answer), which a socket's timeout (per read) does not; its retries (5xx,
  throttling, connection errors; exponential backoff with jitter) are ``sync.attempts`` and end
  within the same budget. A push's and a hydration's requests are these: thousands of small
  objects, at a fraction of botocore's CPU per request (docs/benchmarks.md).
- **boto3/botocore** for the credential chain (environment, profile, instance role: obstore gets
  them through ``obstore.auth.boto3.Boto3CredentialProvider``), the bucket's probe (HEAD), and
  ``ListObjectsV2`` pages (start-after, page sizes and continuation tokens, which obstore's
  listing does not expose), each call bounded as a whole on a thread of its own
  (``Bucket._bounded``); botocore is imported lazily, on the first such call.

Every request takes what is left of the pass's deadline (``sync.deadline_s``, ``_Clock``) as its
whole budget. What is left after the retries is translated: ``PreconditionFailed`` (412, or S3's
409 ConditionalRequestConflict), ``ObjectMissing`` (404), ``ObjectTooLarge`` (the error tree's
``BucketError`` kinds, handled where they were asked), and ``BucketUnavailable`` (a ``SyncError``) for
everything that means the bucket cannot be used right now: unreachable, no such bucket, denied,
retries or the deadline exhausted.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, TypeVar, runtime_checkable

from memlocal.config import Config
from memlocal.errors import BucketError, ObjectMissing, ObjectTooLarge, PreconditionFailed, SyncError, fold_whitespace

from .objects import Listed

if TYPE_CHECKING:  # obstore's typed dicts exist for type checkers only
    from obstore.store import ClientConfig, S3Config

__all__ = ["Bucket", "BucketClient", "BucketError", "BucketSettings", "BucketUnavailable", "Listing",
           "ObjectMissing", "ObjectTooLarge", "PreconditionFailed"]

_T = TypeVar("_T")
log = logging.getLogger(__name__)


class BucketUnavailable(SyncError):
    """The bucket cannot be used right now (one line saying why)."""


class _EmptyObject(Exception):
    """A Range request on a 0-byte object (416 InvalidRange)."""


class _RangeIgnored(Exception):
    """A Range request answered with the whole object (a server without ranges)."""


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
    request takes what is left when it starts (``start``) and ends within it, whole (``Bucket``:
    obstore's whole-request timeout, botocore's calls waited for on a thread of their own), so a
    pass against a hung bucket (it accepts connections and never answers) or a trickling one ends
    at the deadline by construction, while a slow bucket that keeps answering some requests keeps
    its retries."""

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

    def peek(self) -> float:
        """What ``start`` would give an attempt starting now, without starting one."""
        with self._lock:
            if self.since is None:
                return self.deadline_s
            now = time.monotonic()
            since = self.since
            if not self.inflight and self.started and self.last_answered:
                since = max(since, now)
            return since + self.deadline_s - now

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
    """botocore's ``before-send``: the attempt is refused once the pass's deadline has passed
    (``Bucket.send_attempt``); ``None`` lets botocore send it (the whole call is bounded by
    ``Bucket._bounded``)."""
    bucket: Bucket | None = getattr(_ACTIVE, "bucket", None)
    if bucket is None or bucket.clock is None:
        return None
    return bucket.send_attempt(request)


# --- the object requests: obstore (Rust's object_store) --------------------------------------------

# A request's whole-time budget is rounded up to these steps, so that the few stores a Bucket
# makes (one per budget: obstore fixes a store's timeout when it is made) are shared by its
# requests: during a pass that hears from the bucket the budget is the whole deadline, one store;
# only a bucket that stops answering shrinks it, step by step, until the deadline ends the pass.
_BUDGET_STEP_S = 0.25
_S3_PAGE = 1000  # the most keys a ListObjectsV2 answer holds
_STORES_KEPT = 8
_STATUS = re.compile(r"status code: (\d{3})")


def _quantize(budget: float) -> float:
    """``budget`` rounded up to a step (a twentieth of a second below one second, a quarter
    above): a request that gets no answer takes its whole share, so the next one of a silent
    bucket finds nothing left and is not sent."""
    step = _BUDGET_STEP_S if budget >= 1.0 else 0.05
    return max(step, math.ceil(budget / step - 1e-9) * step)


def _error_code(text: str) -> str:
    """The ``<Code>`` of an S3 error document quoted in ``text`` ('' if there is none)."""
    start = text.find("<Code>")
    end = text.find("</Code>", start)
    return text[start + 6:end] if start >= 0 and end > start else ""


def _short(text: str) -> str:
    """obstore's message on one line, without its debug dump and the error document."""
    text = text.split("\n\nDebug source", 1)[0]
    text = text.split("<?xml", 1)[0].rstrip(": ")
    return fold_whitespace(text)[:300]


class _Unlistable(Exception):
    """A listing object_store cannot give as the bucket holds it (a key it refuses or renames)."""


def _just_below(prefix: str) -> str:
    """A ``start-after`` just before every key that starts with ``prefix`` (none of them is
    skipped) and past almost every key before them: ``mem-3`` -> ``mem-2`` + U+10FFFF."""
    last = ord(prefix[-1])
    if last == 0 or 0xD800 <= last - 1 <= 0xDFFF:
        return prefix[:-1]
    return prefix[:-1] + chr(last - 1) + "\U0010ffff"


def _listed_time(value: Any) -> str:
    """obstore's ``last_modified`` (a UTC datetime) as S3's listing writes it."""
    if value is None:
        return ""
    # (What ``f"{value:%Y-%m-%dT%H:%M:%S}.{ms:03d}Z"`` writes, in half its time: a listing of 10k
    # keys formats 10k of them, on the pass's thread.)
    return f"{value.isoformat(timespec='milliseconds')[:23]}Z"


class Bucket:
    """The operations the sync needs, each one request (plus its retries).

    Objects (GET, PUT with its conditions, DELETE) go through obstore: one ``S3Store`` per request
    budget, whose ``timeout`` bounds a whole request (connect, send, every byte of the answer)
    and whose retries (``sync.attempts``) end within the same budget. Listing pages and the
    bucket's probe go through botocore (its paginated ``ListObjectsV2`` with start-after and
    page sizes, which obstore does not offer), each bounded as a whole the same way
    (``_bounded``)."""

    def __init__(self, settings: BucketSettings, *, timeout_s: float, attempts: int, pool_size: int = 10,
                 page_size: int = 1000, deadline_s: float | None = None) -> None:
        # The values come from the config registry, which has checked their limits at load.
        # ``deadline_s``: a pass waits at most this long for an answer (``_Clock``); a request
        # never takes longer than what is left of it.
        self.settings = settings
        self.name = settings.name
        self.deadline_s = deadline_s
        self.timeout_s = min(timeout_s, deadline_s) if deadline_s else timeout_s
        self.attempts = max(1, attempts)
        self.clock = _Clock(deadline_s) if deadline_s else None
        self.pool_size = max(1, pool_size)
        self.page_size = page_size
        # Any: botocore builds S3 client methods at run time, so its static type has none of them.
        self._client: Any = None
        self._shared: _Shared | None = None  # set when the client is the process's for these settings
        self._lock = threading.Lock()
        self._stores: OrderedDict[float, Any] = OrderedDict()  # obstore S3Stores, by budget
        # Requests made, by method (LIST counts pages; retries are not counted): what a pass
        # costs, against docs/sync.md's cost model (scripts/fleet.py reads it).
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

    def _whole(self) -> float:
        """How long one request may take from its start to its answer's last byte, retries
        included, when no pass's deadline bounds it: ``sync.deadline_s`` when set (a pass's
        bucket between passes), else the attempts' timeouts."""
        if self.deadline_s:
            return self.deadline_s
        return self.timeout_s * self.attempts

    def _budget(self, what: str) -> float:
        """A request starts: how long it may take, whole (what is left of the pass's deadline, or
        ``_whole``); ``BucketUnavailable`` once nothing is left. The caller ends it with
        ``self.clock.finish``."""
        if self.clock is None:
            return self._whole()
        left = self.clock.start()
        if left <= 0:
            raise BucketUnavailable(f"cannot reach bucket {self.name}: no answer for {self.clock.deadline_s:g} s "
                                    f"(sync.deadline_s) during {what}")
        return min(left, self._whole())

    def _attempt_timeout(self, what: str) -> float:
        """One botocore attempt starts: its socket timeout (the request timeout, capped by what
        is left of the pass's deadline); ``BucketUnavailable`` once nothing is left. The caller
        ends it with ``self.clock.finish`` (``_needs_retry``)."""
        return min(self.timeout_s, self._budget(what))

    def send_attempt(self, request: Any) -> Any:
        """One attempt of a botocore request (its ``before-send``): refused once the pass's
        deadline has passed; ``None`` lets botocore send it (``_needs_retry`` ends the attempt)."""
        from urllib.parse import urlsplit

        self._attempt_timeout(f"{request.method} {urlsplit(request.url).path}")
        _ACTIVE.attempt = True
        return None

    # --- obstore ------------------------------------------------------------------------------

    def _store(self, budget: float) -> Any:
        """The obstore ``S3Store`` whose requests end within ``budget`` (rounded down), made once:
        each attempt's ``timeout`` is the request timeout capped by the budget, and retries
        (``sync.attempts``) start only while the last one can still end within it."""
        budget = _quantize(budget)
        with self._lock:
            store = self._stores.get(budget)
            if store is not None:
                self._stores.move_to_end(budget)
                return store
        store = self._make_store(budget)
        with self._lock:
            store = self._stores.setdefault(budget, store)
            while len(self._stores) > _STORES_KEPT:
                self._stores.popitem(last=False)
        return store

    def _make_store(self, budget: float) -> Any:
        from datetime import timedelta

        from obstore.store import S3Store

        s = self.settings
        timeout = min(self.timeout_s, budget)
        # The last retry starts no later than ``budget - timeout`` after the first attempt, so it
        # ends within the budget too; with no room for one, a request has one attempt.
        retry_window = max(0.0, budget - timeout)
        retries = self.attempts - 1 if retry_window > 0 else 0
        client_options: ClientConfig = {
            "timeout": timedelta(seconds=timeout),
            "connect_timeout": timedelta(seconds=min(timeout, 10.0)),
            "pool_max_idle_per_host": str(self.pool_size),
            "user_agent": "memlocal-sync",
        }
        config: S3Config = {"region": s.region or self._default_region}
        if s.endpoint:
            # Path-style keys work with every S3-compatible server; AWS keeps its default.
            config["endpoint"] = s.endpoint
            config["virtual_hosted_style_request"] = False
            if s.endpoint.startswith("http://"):
                client_options["allow_http"] = True
        if self._ca_bundle is not None:  # a private CA, as botocore reads it: added to the trusted roots
            client_options["root_certificate"] = self._ca_bundle
        credentials: Any = None
        if s.access_key_id and s.secret_access_key:
            config["access_key_id"] = s.access_key_id
            config["secret_access_key"] = s.secret_access_key
        else:
            credentials = self._credential_provider
        return S3Store(
            self.name, config=config, client_options=client_options, credential_provider=credentials,
            retry_config={
                "max_retries": retries,
                "retry_timeout": timedelta(seconds=max(retry_window, 0.001)),
                "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2),
                            "base": 2},
            },
        )

    # Read once per Bucket: a store is made per budget, and a slow bucket's shrinking budgets made
    # one per request, each with two boto3 sessions (and the credential chain walked again).

    @functools.cached_property
    def _ca_bundle(self) -> bytes | None:
        """The private CA of ``AWS_CA_BUNDLE``, if any."""
        bundle = os.environ.get("AWS_CA_BUNDLE")
        if not (bundle and os.path.isfile(bundle)):
            return None
        with open(bundle, "rb") as f:
            return f.read()

    @functools.cached_property
    def _default_region(self) -> str:
        """boto3's region (environment, ``~/.aws/config``) for AWS; any region for an endpoint."""
        if self.settings.endpoint:
            return "us-east-1"
        with _SESSION_LOCK:
            region = _new_session().region_name
        return str(region or "us-east-1")

    @functools.cached_property
    def _credential_provider(self) -> Any:
        """boto3's credential chain (environment, profile, instance role, SSO), read afresh for
        this Bucket and refreshed by obstore as the credentials expire."""
        from obstore.auth.boto3 import Boto3CredentialProvider

        with _SESSION_LOCK:
            session = _new_session()
        try:
            return Boto3CredentialProvider(session)
        except ValueError:  # session.get_credentials() found none
            raise BucketUnavailable(
                f"no credentials for bucket {self.name}: set INTERNAL_S3_ACCESS_KEY_ID/SECRET_ACCESS_KEY "
                "(or S3_..., or the config file), or configure boto3's credential chain") from None

    def _object_call(self, method: str, what: str, call: Callable[[Any], _T]) -> _T:
        """``call(store)``: one request through obstore, within its budget, translated."""
        self._count(method)
        budget = self._budget(what)
        answered = False
        try:
            result = call(self._store(budget))
            answered = True
            return result
        except BucketUnavailable:
            raise
        except _Unlistable:
            answered = True
            raise
        except Exception as exc:
            error, answered = self._translate_object_error(exc, what, budget)
            raise error from None
        finally:
            if self.clock is not None:
                self.clock.finish(answered)

    def _translate_object_error(self, exc: Exception, what: str, budget: float) -> tuple[Exception, bool]:
        """obstore's exception -> ours, and whether the bucket answered (an HTTP status)."""
        import obstore.exceptions as ox

        text = str(exc)
        found = _STATUS.search(text)
        status = int(found.group(1)) if found else None
        code = _error_code(text)
        answered = status is not None
        if code == "NoSuchBucket":
            return BucketUnavailable(f"bucket {self.name} does not exist"), True
        if status == 412 or code in ("PreconditionFailed", "ConditionalRequestConflict") or (
                isinstance(exc, (ox.AlreadyExistsError, ox.PreconditionError)) and status != 404):
            return PreconditionFailed(f"{what}: {code or status or 'precondition failed'}"), True
        if status == 404 or isinstance(exc, (ox.NotFoundError, FileNotFoundError)):  # (obstore raises both)
            return ObjectMissing(what), True
        if status == 416 or code == "InvalidRange":
            return _EmptyObject(what), True
        if "non-partial response" in text:
            return _RangeIgnored(what), True
        if status == 403 or isinstance(exc, (ox.PermissionDeniedError, ox.UnauthenticatedError)):
            return BucketUnavailable(f"access to bucket {self.name} denied ({code or status or 'denied'}) "
                                     f"during {what}"), True
        if status is not None:
            return BucketUnavailable(f"bucket {self.name} answered {status} {code} during {what}: "
                                     f"{_short(text)}"), True
        if not isinstance(exc, ox.BaseError):
            return exc, answered  # a bug of ours, not the bucket's: as it is
        return BucketUnavailable(f"cannot reach bucket {self.name} within {budget:.3g} s during {what}: "
                                 f"{_short(text)}"), False

    # --- botocore -----------------------------------------------------------------------------

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
        """Let go of the clients and close their connections (a shared botocore client's once no
        other Bucket uses it: ``_CLIENTS``; obstore's stores close theirs when dropped)."""
        with self._lock:
            client, self._client = self._client, None
            shared, self._shared = self._shared, None
            self._stores.clear()
        if client is not None and (shared is None or _release(shared)):
            try:
                client.close()
            except Exception:  # pragma: no cover - closing a pool must not fail a shutdown
                pass

    def _call(self, what: str, fn: Any, *, count: bool = True, **kwargs: Any) -> Any:
        """One botocore call, bounded as a whole (``_bounded``), translated."""
        if count:
            self._count(what.split(" ", 1)[0])
        budget = self.clock.peek() if self.clock is not None else self._whole()
        if budget <= 0:
            raise BucketUnavailable(f"cannot reach bucket {self.name}: no answer for {self.deadline_s:g} s "
                                    f"(sync.deadline_s) during {what}")
        return self._bounded(what, min(budget, self._whole()), lambda: self._botocore(what, fn, **kwargs))

    def _botocore(self, what: str, fn: Any, **kwargs: Any) -> Any:
        _ACTIVE.bucket = self  # for the deadline's hooks (_needs_retry, _before_send)
        try:
            return fn(Bucket=self.name, **kwargs)
        except Exception as exc:  # translated below; anything unknown is re-raised as is
            raise _translate(exc, self.name, what) from None
        finally:
            if getattr(_ACTIVE, "attempt", False) and self.clock is not None:  # (never left open)
                self.clock.finish(False)
            _ACTIVE.bucket, _ACTIVE.attempt = None, False

    def _bounded(self, what: str, budget: float, call: Callable[[], _T]) -> _T:
        """``call()`` on a thread of its own, waited for at most ``budget`` seconds: botocore's
        timeouts are per socket read, so a bucket that trickles its answer (a byte at a time)
        would hold a request for as long as it trickles. Past the budget the request is left to
        end on its thread (a daemon thread: it never holds up the process's exit; its socket reads
        still time out, and the answer it gets, if any, is dropped) and the caller gets
        ``BucketUnavailable``."""
        done = threading.Event()
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as exc:  # handed to the caller
                outcome.append((False, exc))
            finally:
                done.set()

        threading.Thread(target=run, name="memlocal-bucket-request", daemon=True).start()
        if not done.wait(budget):
            if self.clock is not None and self.clock.since is not None:
                raise BucketUnavailable(f"cannot reach bucket {self.name}: no answer for {self.clock.deadline_s:g} s "
                                        f"(sync.deadline_s) during {what}")
            raise BucketUnavailable(f"cannot reach bucket {self.name}: no whole answer within {budget:.3g} s "
                                    f"during {what}")
        ok, value = outcome[0]
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

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
        (``truncated`` then says whether keys were left).

        The pages go through obstore (``_list_objects``: a tenth of botocore's CPU per key, which
        a fresh host's listing spends beside its inserts); a listing with a delimiter, or one
        holding a key that object_store cannot name as it is (``_Unlistable``), through botocore."""
        if delimiter is None:
            try:
                return self._list_objects(prefix, start_after, last, max_pages)
            except _Unlistable as exc:
                log.info("listing %s through botocore: %s", prefix, exc)
        return self._list_botocore(prefix, delimiter, start_after, last, max_pages)

    def _list_objects(self, prefix: str, start_after: str | None, last: str | None,
                      max_pages: int | None) -> Listing:
        """``list`` without a delimiter, through obstore. Each page is a listing of the prefix's
        folder (object_store lists folders: ``memory/alice/mem-3`` is listed as ``memory/alice/``
        from just before ``mem-3``, and ends at the first key past it) from the page before's last
        key (``start-after``), of which one answer (at most 1,000 keys) is read: one request,
        bounded as a whole like every object request (``_object_call``)."""
        import obstore

        folder = prefix[:prefix.rfind("/") + 1]
        offset = start_after
        if prefix != folder:
            below = _just_below(prefix)
            offset = below if offset is None or offset < below else offset
        objects: list[Listed] = []
        seen: set[str] = set()
        pages = 0
        what = f"LIST {prefix}"
        # One key past the page says whether the listing goes on, when the answer holds it (a page
        # under S3's 1,000); a page of 1,000 that ends the listing costs one empty page more.
        ask = self.page_size + 1 if self.page_size < _S3_PAGE else self.page_size

        def page(store: Any) -> Sequence[Any]:
            import obstore.exceptions as ox

            stream = obstore.list(store, prefix=folder or None, offset=offset, chunk_size=ask)
            try:
                return next(stream, [])
            except ox.InvalidPathError as exc:  # e.g. ``a//b``, ``./``: keys it refuses to name
                raise _Unlistable(_short(str(exc))) from None

        while True:
            entries = self._object_call("LIST", what, page)
            pages += 1
            past = False
            more = len(entries) > self.page_size or len(entries) == _S3_PAGE
            for entry in entries[:self.page_size]:
                key = entry["path"]
                if not key.startswith(prefix):
                    if key < prefix:  # between ``_just_below(prefix)`` and the prefix: not ours
                        continue
                    past = True  # keys come in order: the rest of the folder is past the prefix
                    break
                if last is not None and key > last:
                    past = True
                    break
                if key in seen:  # two keys named alike (``k`` and ``k/``: object_store drops a final /)
                    raise _Unlistable(f"two keys listed as {key}")
                seen.add(key)
                objects.append(Listed(key, entry.get("e_tag") or "", int(entry.get("size") or 0),
                                      _listed_time(entry.get("last_modified"))))
            if past or not more:
                return Listing(objects, pages, (), False)
            if max_pages is not None and pages >= max_pages:
                return Listing(objects, pages, (), True)
            offset = entries[self.page_size - 1]["path"]

    def _list_botocore(self, prefix: str, delimiter: str | None, start_after: str | None, last: str | None,
                       max_pages: int | None) -> Listing:
        """``list`` through botocore's ListObjectsV2 (``_list_page``)."""
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
        """One ListObjectsV2 page (botocore's request, its body read by
        :func:`memlocal_sync.listing.parse_listing`; keys decoded)."""
        kwargs: dict[str, Any] = {"Prefix": prefix, "MaxKeys": self.page_size}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        if start_after is not None:
            kwargs["StartAfter"] = start_after
        if token is not None:
            kwargs["ContinuationToken"] = token
        return dict(self._call(f"LIST {prefix}", self.client.list_objects_v2, **kwargs))

    def get(self, key: str, max_bytes: int) -> tuple[bytes, str]:
        """The body and ETag of ``key``; at most ``max_bytes`` are ever read (a Range request)."""
        import obstore

        what = f"GET {key}"

        def ranged(store: Any) -> tuple[bytes, str, int]:
            result = obstore.get(store, key, options={"range": (0, max_bytes + 1)})
            meta = result.meta
            size, etag = int(meta["size"]), meta["e_tag"] or ""
            if size > max_bytes:  # the whole object's size (Content-Range): never read further
                raise ObjectTooLarge(size, max_bytes, etag)
            return bytes(result.bytes()), etag, size

        def whole(store: Any) -> tuple[bytes, str, int]:
            # The answer's headers first: its body is read only when its length is within the cap.
            result = obstore.get(store, key)
            size, etag = int(result.meta["size"]), result.meta["e_tag"] or ""
            if size > max_bytes:
                raise ObjectTooLarge(size, max_bytes, etag)
            return bytes(result.bytes()), etag, size

        try:
            data, etag, _size = self._object_call("GET", what, ranged)
        except (_EmptyObject, _RangeIgnored):
            # An empty object has no byte 0; a server that ignores Range (`rclone serve s3`)
            # answers the whole object, which obstore refuses: read it whole, within the cap.
            data, etag, _size = self._object_call("GET", what, whole)
        if len(data) > max_bytes:
            raise ObjectTooLarge(len(data), max_bytes, etag)
        return data, etag

    def _put(self, key: str, body: bytes, mode: Any, *, content_type: str | None = "application/json") -> str:
        """One PUT through obstore (``mode``: ``"create"`` is ``If-None-Match: *``, ``{"e_tag": …}``
        ``If-Match``, ``"overwrite"`` none); the new ETag."""
        import obstore

        attributes: dict[str, str] = {"Content-Type": content_type} if content_type else {}

        def put(store: Any) -> str:
            result = obstore.put(store, key, body, mode=mode, attributes=attributes or None, use_multipart=False)
            return str(result["e_tag"] or "")

        return self._object_call("PUT", f"PUT {key}", put)

    def create(self, key: str, body: bytes) -> str:
        """PUT only if ``key`` does not exist (``If-None-Match: *``); returns the new ETag."""
        return self._put(key, body, "create")

    def replace(self, key: str, body: bytes, etag: str) -> str:
        """PUT only if ``key`` still has ``etag`` (``If-Match``); returns the new ETag."""
        return self._put(key, body, {"e_tag": etag})

    def put(self, key: str, body: bytes) -> str:
        """PUT unconditionally; returns the new ETag."""
        return self._put(key, body, "overwrite", content_type=None)

    def delete(self, key: str) -> None:
        """Delete ``key`` (unconditionally: a deletion wins; deleting a missing key succeeds)."""
        import obstore

        try:
            self._object_call("DELETE", f"DELETE {key}", lambda store: obstore.delete(store, key))
        except ObjectMissing:
            pass
