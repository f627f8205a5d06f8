"""The lean path to the wire (``memlocal_sync.bucket._Wire``): its own SigV4 signer gives botocore's
signature for the same request, and its HTTP/1.1 connection (one write per request, ``TCP_NODELAY``,
a lean reader of answers) reads every way a server may frame an answer, against a real socket
server. The contract suite (tests/test_bucket_contract.py) runs the same path on moto_server and
SeaweedFS, which check the signatures."""

from __future__ import annotations

import socket
import threading
from typing import Callable, Iterator
from urllib.parse import quote

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from memlocal_sync.bucket import _Signer, _Wire

KEY_ID, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
NOW = 1796272496.0  # 2026-12-03T04:34:56Z


def _botocore_authorization(method: str, url: str, headers: dict[str, str], body: bytes, stamp: str,
                            region: str) -> str:
    """The Authorization header botocore's S3SigV4Auth computes for this request at ``stamp``."""
    signer = S3SigV4Auth(Credentials(KEY_ID, SECRET), "s3", region)
    request = AWSRequest(method, url, data=body, headers=headers)
    request.context["timestamp"] = stamp
    signer._modify_request_before_signing(request)
    canonical = signer.canonical_request(request)
    signature = signer.signature(signer.string_to_sign(request, canonical), request)
    signer._inject_signature_to_request(request, signature)
    return str(request.headers["Authorization"])


@pytest.mark.parametrize("method, key, query, headers, body", [
    ("PUT", "memory/alice/mem-0a1b2c3d.json", "", {"Content-Type": "application/json", "If-None-Match": "*"},
     b'{"id": "mem-0a1b2c3d"}'),
    ("PUT", "memory/alice/mem-0a1b2c3d.json", "", {"Content-Type": "application/json",
                                                   "If-Match": '"9b2cf535f27731c974343645a3985328"'}, b"{}"),
    ("PUT", "memlocal/snapshots/bob/2026 12 03 é+x.json.gz", "", {}, b"\x00\x01binary"),
    ("PUT", "memory/p/empty.json", "", {"Content-Type": "application/json"}, b""),
    ("GET", "", "continuation-token=a%2Fb%3D%3D&encoding-type=url&list-type=2&max-keys=1000&prefix=memory%2F"
                "&start-after=memory%2Fp%2Fmem-9%F4%8F%BF%BF", {}, b""),
])
@pytest.mark.parametrize("endpoint, region", [("http://127.0.0.1:8333", "us-east-1"),
                                              ("https://s3.example.com", "eu-west-3"),
                                              ("http://[::1]:9000", "us-east-1")])
def test_the_signature_is_botocores(method: str, key: str, query: str, headers: dict[str, str], body: bytes,
                                    endpoint: str, region: str) -> None:
    wire = _Wire(endpoint, "memlocal-bucket", region, KEY_ID, SECRET, 10.0)
    path = wire.path + quote(key, safe="/~") if key else wire.path.rstrip("/")
    sent = {k.lower(): v for k, v in wire.signer.sign(method, path, query, headers, body, now=NOW)}
    url = endpoint + path + (f"?{query}" if query else "")
    assert sent["x-amz-date"] == "20261203T043456Z"
    assert sent["authorization"] == _botocore_authorization(method, url, headers, body, sent["x-amz-date"], region)
    # The host it signed is the one botocore signs (and _Wire sends): no default port.
    assert sent["host"] == endpoint.split("://", 1)[1].removesuffix(":443")


def test_the_signing_key_follows_the_day() -> None:
    signer = _Signer(KEY_ID, SECRET, "us-east-1", "127.0.0.1:8333")
    for now in (NOW, NOW + 86400, NOW):  # the next day, then back: a key per day, never a stale one
        sent = {k.lower(): v for k, v in signer.sign("PUT", "/b/k", "", {}, b"x", now=now)}
        stamp = sent["x-amz-date"]
        assert sent["authorization"] == _botocore_authorization("PUT", "http://127.0.0.1:8333/b/k", {}, b"x", stamp,
                                                                "us-east-1")


# --- the connection, against a scripted socket server --------------------------------------------


class _Server:
    """A loopback server that answers each request with the next scripted answer (bytes, or a
    callable taking the request and returning bytes or ``None`` to close without answering), and
    records what it received (the head and body of each request, and whether it came in one read)."""

    def __init__(self, answers: list[bytes | Callable[[bytes], bytes | None]]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(10)
                data = b""
                while self.answers:
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    if b"\r\n\r\n" not in data:
                        break
                    head, _, rest = data.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    request, data = head + b"\r\n\r\n" + rest[:length], rest[length:]
                    self.requests.append(request)
                    answer = self.answers.pop(0)
                    out = answer(request) if callable(answer) else answer
                    if out is None:
                        break  # close without an answer
                    conn.sendall(out)
                    if b"connection: close" in out.lower():
                        break

    def close(self) -> None:
        try:  # wakes a thread blocked in accept() (closing alone does not, on Linux)
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(5)


@pytest.fixture
def serve() -> Iterator[Callable[[list[bytes | Callable[[bytes], bytes | None]]], tuple[_Server, _Wire]]]:
    made: list[tuple[_Server, _Wire]] = []

    def start(answers: list[bytes | Callable[[bytes], bytes | None]]) -> tuple[_Server, _Wire]:
        server = _Server(answers)
        wire = _Wire(f"http://127.0.0.1:{server.port}", "b", "us-east-1", KEY_ID, SECRET, 10.0)
        made.append((server, wire))
        return server, wire

    yield start
    for server, wire in made:
        wire.close()
        server.close()


def _ok(body: bytes = b"", extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def test_a_put_is_one_write_on_a_nodelay_socket_and_the_connection_is_kept(serve) -> None:  # type: ignore[no-untyped-def]
    server, wire = serve([_ok(extra='ETag: "e1"\r\n'), _ok(extra='ETag: "e2"\r\n')])
    assert wire.put("memory/p/mem-1.json", b'{"a": 1}', {"Content-Type": "application/json",
                                                          "If-None-Match": "*"}, 5.0) == (200, '"e1"', b"")
    conn = wire._local.conn
    assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert wire.put("memory/p/mem-2.json", b"{}", {}, 5.0)[:2] == (200, '"e2"')
    assert server.connections == 1  # kept alive
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "PUT /b/memory/p/mem-1.json HTTP/1.1"
    names = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in lines[1:]}
    assert names["host"] == f"127.0.0.1:{server.port}" and names["content-length"] == "8"
    assert names["if-none-match"] == "*" and names["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
    assert body == b'{"a": 1}'


def test_answers_framed_every_way_are_read(serve) -> None:  # type: ignore[no-untyped-def]
    server, wire = serve([
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n7\r\n, world\r\n0\r\nT: t\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nETag: \"h\"\r\n\r\n",  # HEAD: a length, no body
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 412 Precondition Failed\r\nContent-Length: 3\r\nConnection: close\r\n\r\nnop",
        b"HTTP/1.0 200 OK\r\n\r\nuntil the end",  # no length: the body runs to the close
    ])
    assert wire.raw("GET", "/b/k", None, {}, 5.0)[::2] == (200, b"hello, world")
    assert wire.raw("GET", "/b/k", None, {}, 5.0)[::2] == (404, b"not found")
    status, headers, data = wire.raw("HEAD", "/b/k", None, {}, 5.0)
    assert (status, data, dict(headers)["ETag"]) == (200, b"", '"h"')
    assert wire.raw("DELETE", "/b/k", None, {}, 5.0)[::2] == (204, b"")
    assert server.connections == 1
    assert wire.raw("PUT", "/b/k", b"x", {}, 5.0)[::2] == (412, b"nop")
    assert wire.raw("GET", "/b/k", None, {}, 5.0)[::2] == (200, b"until the end")
    assert server.connections == 2  # a new connection after the answer that closed the first
    assert getattr(wire._local, "conn", None) is None  # and none kept after an HTTP/1.0 answer


def test_a_kept_alive_connection_the_server_closed_is_opened_again_once(serve) -> None:  # type: ignore[no-untyped-def]
    server, wire = serve([_ok(b"one", "Connection: keep-alive\r\n"), lambda request: None, _ok(b"two")])
    assert wire.raw("GET", "/b/1", None, {}, 5.0)[2] == b"one"
    # The server closes the kept-alive connection at the next request: sent again on a new one.
    assert wire.raw("GET", "/b/2", None, {}, 5.0)[2] == b"two"
    assert server.connections == 2 and len(server.requests) == 3


def test_a_server_that_never_answers_times_the_request_out(serve) -> None:  # type: ignore[no-untyped-def]
    hold = threading.Event()
    server, wire = serve([lambda request: (hold.wait(10), None)[1]])
    try:
        with pytest.raises(TimeoutError):
            wire.raw("GET", "/b/k", None, {}, 0.3)
        assert getattr(wire._local, "conn", None) is None  # dropped: never reused mid-answer
    finally:
        hold.set()


def test_a_line_break_in_a_header_is_refused(serve) -> None:  # type: ignore[no-untyped-def]
    server, wire = serve([_ok()])
    with pytest.raises(ValueError):
        wire.put("memory/p/mem-1.json", b"{}", {"If-Match": '"e"\r\nX-Evil: 1'}, 5.0)
    assert not server.requests
