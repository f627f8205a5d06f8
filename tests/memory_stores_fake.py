"""A local HTTP server on 127.0.0.1 that speaks Anthropic's memory stores API (beta).

Shaped after the SDK's own types (``anthropic.types.beta.memory_stores``, ``BetaManagedAgentsMemoryStore``):
stores (create, retrieve, list, archive), memories (create, retrieve, update with a
``content_sha256`` precondition, list with ``path_prefix``/``depth``/``view`` and cursor pages of at
most 100, at most 20 with ``view=full``, delete with ``expected_content_sha256``) and memory
versions (list, retrieve, redact). The API's rules are checked as the service states them: a path
starts with ``/``, holds 1 to 20 segments, none empty, ``.`` or ``..``, no control or format
character nor U+2028/U+2029, is NFC and at most 1,024 bytes; content at most 102,400 bytes; at most
``cap`` (2,000) memories a store. Conflicts answer 409 ``memory_precondition_failed_error`` or
``memory_path_conflict_error`` (with ``conflicting_memory_id``).

The ``memory_stores`` fixture starts one server per test and points ``ANTHROPIC_BASE_URL`` and
``ANTHROPIC_API_KEY`` at it, so the real ``anthropic`` client talks to it and never to the network.
A test plays the hosted agent with :meth:`FakeMemoryStores.agent_create` (``agent_update``,
``agent_delete``: writes by a session, as through the store's mounted filesystem), scripts faults
with :meth:`FakeMemoryStores.fault` (a status, ``retry-after``, a delay that wakes at teardown), and
reads every request it received (``requests``).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

FAKE_KEY = "sk-ant-test-fake-key-0123456789"
CONTENT_MAX_BYTES = 102_400
PATH_MAX_BYTES = 1024
PATH_MAX_SEGMENTS = 20
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _new_id(prefix: str) -> str:
    # Like the service's: a prefix and 24 base62 characters (high entropy, as real ids are).
    return prefix + "01" + "".join(secrets.choice(_ALNUM) for _ in range(22))


def path_problem(path: object) -> str | None:
    """The service's path rules (the SDK's ``MemoryCreateParams.path``), written independently
    of memlocal's check so that one tests the other."""
    if not isinstance(path, str) or not path.startswith("/"):
        return "path must start with /"
    if len(path.encode("utf-8", "surrogatepass")) > PATH_MAX_BYTES:
        return "path is longer than 1024 bytes"
    if unicodedata.normalize("NFC", path) != path:
        return "path must be in Unicode Normalization Form C"
    segments = path[1:].split("/")
    if not 1 <= len(segments) <= PATH_MAX_SEGMENTS:
        return "path must have 1 to 20 segments"
    if any(s in ("", ".", "..") for s in segments):
        return "path segments must not be empty, '.' or '..'"
    for ch in path:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            return f"path must not contain control or format characters (U+{ord(ch):04X})"
    return None


@dataclass
class Fault:
    """A scripted answer for the next request that matches (``method``, a ``path`` substring)."""

    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    method: str | None = None
    path: str | None = None
    then_serve: bool = False  # after the delay, answer normally (a slow but good answer)
    lose_answer: bool = False  # do the request, then answer ``status``: a reply lost on the way


@dataclass(frozen=True)
class Request:
    """One request the fake received."""

    at: float
    method: str
    path: str
    query: dict[str, str]
    body: Any


class ApiError(Exception):
    def __init__(self, status: int, kind: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.extra = status, kind, message, extra


class FakeMemoryStores:
    """The server and its state. Thread-safe."""

    def __init__(self, cap: int = 2000) -> None:
        self.cap = cap
        self.lock = threading.RLock()
        self.stores: dict[str, dict[str, Any]] = {}
        self.memories: dict[str, dict[str, dict[str, Any]]] = {}  # store id -> memory id -> memory
        self.versions: dict[str, list[dict[str, Any]]] = {}  # store id -> versions, oldest first
        self.faults: list[Fault] = []
        self._requests: list[Request] = []
        self._stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # see CONTRIBUTING.md: no ~40 ms delayed-ACK wait

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                status, payload, headers = fake._handle(method, parts.path, query, body)
                if status < 0:  # torn down mid-delay
                    self.close_connection = True
                    return
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("request-id", "req_fake")
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="memory-stores-fake", daemon=True)
        self._thread.start()

    # --- the test's side -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def fault(self, status: int = 500, *, times: int = 1, retry_after: float | None = None, delay_s: float = 0.0,
              method: str | None = None, path: str | None = None, then_serve: bool = False,
              lose_answer: bool = False) -> None:
        """Answer the next ``times`` matching requests with ``status`` (after ``delay_s``);
        ``lose_answer``: carry the request out first (its answer is lost)."""
        headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
        with self.lock:
            self.faults.extend(Fault(status, headers, delay_s, method, path, then_serve, lose_answer)
                               for _ in range(times))

    @property
    def requests(self) -> list[Request]:
        with self.lock:
            return list(self._requests)

    def clear(self) -> None:
        with self.lock:
            self._requests.clear()

    def writes(self) -> list[Request]:
        """The requests that could change something (every POST and DELETE)."""
        return [r for r in self.requests if r.method != "GET"]

    def store_of(self, profile: str) -> str:
        with self.lock:
            found = [s["id"] for s in self.stores.values() if s["metadata"].get("memlocal_profile") == profile]
        assert len(found) == 1, f"{len(found)} stores for {profile}"
        return found[0]

    def contents(self, store_id: str) -> dict[str, str]:
        """The store's memories, path -> content."""
        with self.lock:
            return {m["path"]: m["content"] for m in self.memories[store_id].values()}

    def by_path(self, store_id: str, path: str) -> dict[str, Any]:
        with self.lock:
            return next(m for m in self.memories[store_id].values() if m["path"] == path)

    def add_store(self, name: str = "a store", metadata: dict[str, str] | None = None) -> str:
        with self.lock:
            return self._create_store({"name": name, "metadata": metadata or {}})["id"]

    def agent_create(self, store_id: str, path: str, content: str, session: str = "sesn_fake") -> str:
        """A hosted agent writes a new memory (through the mounted filesystem)."""
        with self.lock:
            return self._create_memory(store_id, path, content, {"type": "session_actor", "session_id": session})["id"]

    def agent_update(self, store_id: str, memory_id: str, content: str | None = None, path: str | None = None,
                     session: str = "sesn_fake") -> None:
        with self.lock:
            self._update_memory(store_id, memory_id, {"content": content, "path": path},
                                {"type": "session_actor", "session_id": session})

    def agent_delete(self, store_id: str, memory_id: str, session: str = "sesn_fake") -> None:
        with self.lock:
            self._delete_memory(store_id, memory_id, None, {"type": "session_actor", "session_id": session})

    def versions_of(self, store_id: str, memory_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [v for v in self.versions[store_id] if v["memory_id"] == memory_id]

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    # --- the service ---------------------------------------------------------------------------

    def _handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            self._requests.append(Request(time.monotonic(), method, path, query, body))
            fault = next((f for f in self.faults if (f.method is None or f.method == method)
                          and (f.path is None or f.path in path)), None)
            if fault is not None:
                self.faults.remove(fault)
        if fault is not None:
            if fault.delay_s and self._stop.wait(fault.delay_s):
                return -1, None, {}
            if fault.lose_answer:
                try:
                    with self.lock:
                        self._route(method, path, query, body if isinstance(body, dict) else {})
                except ApiError:
                    pass
            if not fault.then_serve:
                kinds = {429: "rate_limit_error", 529: "overloaded_error", 400: "invalid_request_error",
                         409: "memory_precondition_failed_error"}
                return fault.status, {"type": "error", "error": {"type": kinds.get(fault.status, "api_error"),
                                                                 "message": f"fake {fault.status}"}}, fault.headers
        try:
            with self.lock:
                return 200, self._route(method, path, query, body if isinstance(body, dict) else {}), {}
        except ApiError as exc:
            return exc.status, {"type": "error", "error": {"type": exc.kind, "message": exc.message, **exc.extra}}, {}

    def _route(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> Any:
        m = re.fullmatch(r"/v1/memory_stores(?:/([^/]+)(?:/(archive|memories|memory_versions)(?:/([^/]+)(?:/(redact))?)?)?)?",
                         path)
        if m is None:
            raise ApiError(404, "not_found_error", f"no route {method} {path}")
        sid, sub, item, redact = (unquote(g) if g else None for g in m.groups())
        if sid is None:
            if method == "POST":
                return self._create_store(body)
            return self._page(sorted(self.stores.values(), key=lambda s: s["created_at"]), query, 100,
                              keep=lambda s: query.get("include_archived") == "true" or s["archived_at"] is None)
        store = self.stores.get(sid)
        if store is None:
            raise ApiError(404, "not_found_error", f"memory store {sid} not found")
        if sub is None:
            return dict(store)
        if sub == "archive":
            store["archived_at"] = _now()
            return dict(store)
        view = query.get("view")
        if sub == "memories":
            if item is None and method == "POST":
                if store["archived_at"]:
                    raise ApiError(400, "invalid_request_error", "the memory store is archived")
                created = self._create_memory(sid, body.get("path"), body.get("content"),
                                              {"type": "api_actor", "api_key_id": "apikey_fake"})
                return self._shown(created, view or "basic")
            if item is None:
                return self._list_memories(sid, query)
            if method == "GET":
                return self._shown(self._memory(sid, item), view or "full")
            if method == "POST":
                updated = self._update_memory(sid, item, body, {"type": "api_actor", "api_key_id": "apikey_fake"})
                return self._shown(updated, view or "basic")
            self._delete_memory(sid, item, query.get("expected_content_sha256"),
                                {"type": "api_actor", "api_key_id": "apikey_fake"})
            return {"type": "memory_deleted", "id": item}
        if item is None:
            keep = (lambda v: (not query.get("memory_id") or v["memory_id"] == query["memory_id"])
                    and (not query.get("operation") or v["operation"] == query["operation"]))
            return self._page(list(reversed(self.versions[sid])), query, 20 if view == "full" else 100, keep=keep,
                              show=lambda v: self._shown(v, view or "basic"))
        version = next((v for v in self.versions[sid] if v["id"] == item), None)
        if version is None:
            raise ApiError(404, "not_found_error", f"memory version {item} not found")
        if redact:
            version.update(content=None, path=None, content_sha256=None, content_size_bytes=None,
                           redacted_at=_now(), redacted_by={"type": "api_actor", "api_key_id": "apikey_fake"})
        return self._shown(version, view or "full")

    def _page(self, items: list[dict[str, Any]], query: dict[str, str], most: int, keep: Any = None,
              show: Any = None) -> dict[str, Any]:
        limit = int(query.get("limit", 20))
        if not 1 <= limit <= most:
            raise ApiError(400, "invalid_request_error", f"limit must be between 1 and {most}")
        items = [i for i in items if keep is None or keep(i)]
        start = int(query["page"].removeprefix("page_")) if query.get("page") else 0
        chunk = items[start:start + limit]
        more = start + limit < len(items)
        return {"data": [show(i) if show else dict(i) for i in chunk],
                "next_page": f"page_{start + limit}" if more else None}

    def _list_memories(self, sid: str, query: dict[str, str]) -> dict[str, Any]:
        full = query.get("view") == "full"
        prefix = query.get("path_prefix", "/")
        if not prefix.endswith("/"):
            raise ApiError(400, "invalid_request_error", "path_prefix must end with /")
        depth = int(query.get("depth", 0))
        items: list[dict[str, Any]] = []
        markers: set[str] = set()
        for mem in sorted(self.memories[sid].values(), key=lambda x: x["path"]):
            if not mem["path"].startswith(prefix):
                continue
            rest = mem["path"][len(prefix):]
            if depth == 1 and "/" in rest:
                marker = prefix + rest.split("/", 1)[0] + "/"
                if marker not in markers:
                    markers.add(marker)
                    items.append({"type": "memory_prefix", "path": marker})
                continue
            items.append(mem)
        return self._page(items, query, 20 if full else 100,
                          show=lambda i: i if i["type"] == "memory_prefix" else self._shown(i, "full" if full else "basic"))

    @staticmethod
    def _shown(obj: dict[str, Any], view: str) -> dict[str, Any]:
        out = dict(obj)
        if view != "full":
            out["content"] = None
        return out

    def _create_store(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 255:
            raise ApiError(400, "invalid_request_error", "name must be 1 to 255 characters")
        metadata = body.get("metadata") or {}
        if len(metadata) > 16 or any(not 1 <= len(k) <= 64 or len(v) > 512 for k, v in metadata.items()):
            raise ApiError(400, "invalid_request_error", "metadata: at most 16 pairs, keys 1-64, values <= 512")
        sid = _new_id("memstore_")
        now = _now()
        self.stores[sid] = {"type": "memory_store", "id": sid, "name": name, "description": body.get("description") or "",
                            "metadata": dict(metadata), "created_at": now, "updated_at": now, "archived_at": None}
        self.memories[sid] = {}
        self.versions[sid] = []
        return dict(self.stores[sid])

    def _memory(self, sid: str, mid: str) -> dict[str, Any]:
        mem = self.memories[sid].get(mid)
        if mem is None:
            raise ApiError(404, "not_found_error", f"memory {mid} not found")
        return mem

    def _check(self, sid: str, path: Any, content: Any, own: str | None = None) -> None:
        problem = path_problem(path)
        if problem is not None:
            raise ApiError(400, "invalid_request_error", problem)
        if content is not None and (not isinstance(content, str) or len(content.encode("utf-8")) > CONTENT_MAX_BYTES):
            raise ApiError(400, "invalid_request_error", "content must be a string of at most 102400 bytes")
        taken = next((m for m in self.memories[sid].values() if m["path"] == path and m["id"] != own), None)
        if taken is not None:
            raise ApiError(409, "memory_path_conflict_error", f"a memory already exists at {path}",
                           conflicting_memory_id=taken["id"])

    def _version(self, sid: str, mem: dict[str, Any], operation: str, actor: dict[str, Any]) -> str:
        vid = _new_id("memver_")
        deleted = operation == "deleted"
        self.versions[sid].append({
            "type": "memory_version", "id": vid, "memory_id": mem["id"], "memory_store_id": sid,
            "operation": operation, "created_at": _now(), "created_by": actor, "path": mem["path"],
            "content": None if deleted else mem["content"],
            "content_sha256": None if deleted else mem["content_sha256"],
            "content_size_bytes": None if deleted else mem["content_size_bytes"],
            "redacted_at": None, "redacted_by": None})
        return vid

    def _create_memory(self, sid: str, path: Any, content: Any, actor: dict[str, Any]) -> dict[str, Any]:
        content = "" if content is None else content
        self._check(sid, path, content)
        if len(self.memories[sid]) >= self.cap:
            raise ApiError(400, "invalid_request_error", f"a memory store holds at most {self.cap} memories")
        now = _now()
        mem = {"type": "memory", "id": _new_id("mem_"), "memory_store_id": sid, "path": path, "content": content,
               "content_sha256": sha256(content), "content_size_bytes": len(content.encode()),
               "created_at": now, "updated_at": now, "memory_version_id": ""}
        self.memories[sid][mem["id"]] = mem
        mem["memory_version_id"] = self._version(sid, mem, "created", actor)
        return mem

    def _update_memory(self, sid: str, mid: str, body: dict[str, Any], actor: dict[str, Any]) -> dict[str, Any]:
        mem = self._memory(sid, mid)
        pre = body.get("precondition")
        if pre is not None and pre.get("content_sha256") != mem["content_sha256"]:
            raise ApiError(409, "memory_precondition_failed_error", "the memory's content_sha256 does not match")
        content, path = body.get("content"), body.get("path")
        self._check(sid, path if path is not None else mem["path"], content, own=mid)
        changed = (content is not None and content != mem["content"]) or (path is not None and path != mem["path"])
        if not changed:
            return mem
        if content is not None:
            mem.update(content=content, content_sha256=sha256(content), content_size_bytes=len(content.encode()))
        if path is not None:
            mem["path"] = path
        mem["updated_at"] = _now()
        mem["memory_version_id"] = self._version(sid, mem, "modified", actor)
        return mem

    def _delete_memory(self, sid: str, mid: str, expected: str | None, actor: dict[str, Any]) -> None:
        mem = self._memory(sid, mid)
        if expected is not None and expected != mem["content_sha256"]:
            raise ApiError(409, "memory_precondition_failed_error", "the memory's content_sha256 does not match")
        del self.memories[sid][mid]
        self._version(sid, mem, "deleted", actor)



@pytest.fixture
def memory_stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMemoryStores]:
    """A fresh fake memory stores API; ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` point at it.
    The SDK is imported here, before the test (about 3 s of CPU, once per process)."""
    import anthropic  # noqa: F401

    fake = FakeMemoryStores()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    try:
        yield fake
    finally:
        fake.close()


__all__ = ["FAKE_KEY", "FakeMemoryStores", "Request", "memory_stores", "path_problem", "sha256"]
