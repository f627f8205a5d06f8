"""A pytest plugin: a real local HTTP server on 127.0.0.1 that speaks the Anthropic Messages API.

The ``anthropic_fake`` fixture starts one server per test, points ``ANTHROPIC_BASE_URL`` at it and
sets ``ANTHROPIC_API_KEY`` (to :data:`FAKE_KEY`), so anything that builds the real ``anthropic``
client talks to it and never to the network. A test scripts the answers with
:meth:`FakeAnthropic.respond`; every request is recorded (arrival time, headers, JSON body).

>>> def test_x(anthropic_fake):                      # doctest: +SKIP
...     anthropic_fake.respond(Reply.structured({...}), Reply.status(500))

Replies are served in order and the last one repeats. A sleeping reply waits on an event that the
fixture sets at teardown, so a "sleep 10 s" handler never outlives its test.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import pytest

FAKE_KEY = "sk-ant-test-fake-key-0123456789"
MESSAGES_PATH = "/v1/messages"


@dataclass(frozen=True)
class Reply:
    """One scripted answer: an HTTP status, headers and raw body, sent after ``delay_s``."""

    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)
    delay_s: float = 0.0
    # Called in the handler thread with the request's JSON body before answering (may raise).
    on_request: Callable[[dict[str, Any]], None] | None = field(default=None, compare=False)

    @staticmethod
    def message(content: list[dict[str, Any]], stop_reason: str = "end_turn", **kw: Any) -> "Reply":
        """A 200 with a well-formed Messages API ``message`` object holding ``content`` blocks."""
        body = {
            "id": "msg_fake0123456789",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5-20251001",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 42, "output_tokens": 17},
        }
        return Reply(body=json.dumps(body).encode(), **kw)

    @staticmethod
    def text(text: str, **kw: Any) -> "Reply":
        """The model answered with one text block (prose, fenced JSON, anything)."""
        return Reply.message([{"type": "text", "text": text}], **kw)

    @staticmethod
    def structured(data: dict[str, Any], **kw: Any) -> "Reply":
        """What structured outputs (``output_config.format``) return: the JSON object as the text."""
        return Reply.text(json.dumps(data), **kw)

    @staticmethod
    def error(status: int, *, headers: dict[str, str] | None = None, **kw: Any) -> "Reply":
        """An API error (e.g. 500 ``api_error``, 429 ``rate_limit_error``) in the API's error shape.

        ``headers`` adds e.g. ``retry-after`` / ``retry-after-ms`` / ``x-should-retry``.
        """
        kinds = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                 429: "rate_limit_error", 529: "overloaded_error"}
        body = {"type": "error", "error": {"type": kinds.get(status, "api_error"), "message": f"fake {status}"}}
        extra = tuple((headers or {}).items())
        return Reply(status=status, body=json.dumps(body).encode(),
                     headers=(("Content-Type", "application/json"), *extra), **kw)

    @staticmethod
    def malformed(**kw: Any) -> "Reply":
        """A 200 that claims JSON but is cut off mid-object."""
        return Reply(body=b'{"id": "msg_x", "type": "message", "content": [{"type": "te', **kw)

    @staticmethod
    def sleep(seconds: float, then: "Reply | None" = None) -> "Reply":
        """Answer (with ``then``, default a trivial good answer) only after ``seconds``."""
        base = then or Reply.text("{}")
        return Reply(status=base.status, body=base.body, headers=base.headers, delay_s=seconds)


@dataclass(frozen=True)
class Request:
    """One request the fake received."""

    at: float  # time.monotonic() on arrival
    path: str
    headers: dict[str, str]
    body: Any


class FakeAnthropic:
    """The server. Thread-safe; ``requests`` is a snapshot list of what arrived so far."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: list[Reply] = [Reply.text("{}")]
        self._served = 0
        self._requests: list[Request] = []
        self._stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY: the body, written after the headers, must not wait ~40 ms for the client's
            # delayed ACK on a kept-alive connection.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw
                reply = fake._record(Request(time.monotonic(), self.path, dict(self.headers), body))
                if self.path.split("?")[0] != MESSAGES_PATH:
                    reply = Reply.error(404)
                if reply.on_request is not None:
                    reply.on_request(body)
                if reply.delay_s and fake._stop.wait(reply.delay_s):
                    self.close_connection = True  # torn down mid-sleep: drop the connection
                    return
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers:
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.send_header("request-id", "req_fake")
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (its deadline passed)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, name="anthropic-fake", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def respond(self, *replies: Reply) -> None:
        """Serve ``replies`` to the next requests in order; the last one repeats."""
        assert replies, "give at least one reply"
        with self._lock:
            self._replies = list(replies)
            self._served = 0

    def _record(self, request: Request) -> Reply:
        with self._lock:
            self._requests.append(request)
            reply = self._replies[min(self._served, len(self._replies) - 1)]
            self._served += 1
            return reply

    def clear(self) -> None:
        """Forget the requests recorded so far (e.g. after a warm-up call)."""
        with self._lock:
            self._requests.clear()

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    @property
    def count(self) -> int:
        """How many requests arrived (retries included)."""
        with self._lock:
            return len(self._requests)

    def close(self) -> None:
        """Wake any sleeping handler, stop serving and release the port."""
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def anthropic_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    """A fresh fake Messages API; ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` point at it.

    The SDK is imported here, before the test: an extraction's deadline counts the import (about
    3 s of CPU, once per process, and twice that on a loaded machine), and these tests time the
    network, not the import."""
    import anthropic  # noqa: F401

    fake = FakeAnthropic()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    try:
        yield fake
    finally:
        fake.close()


def unused_local_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


__all__ = ["FAKE_KEY", "FakeAnthropic", "Reply", "Request", "anthropic_fake", "unused_local_url"]
