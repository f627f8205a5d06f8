"""A bucket that answers one byte at a time: a TCP proxy in front of the test's S3 server that passes
what the client sends on at once and what the server answers one byte every ``delay`` seconds
(50 ms by default). Every read of the client gets a byte well within any socket timeout, so only a
bound on the whole request ends it (docs/sync.md, "The wire": through such a proxy `sync run` took 522 s
with a 12 s deadline, when each timeout was per socket read).

A real TCP hop with real sockets, not a mock: the answers are the server's, byte for byte. Each
connection is served by two daemon threads; ``close`` stops listening and shuts every
connection down. The ``trickle`` fixture (tests/test_sync_slow_bucket.py) starts one per test.
"""

from __future__ import annotations

import socket
import threading
import time


class TrickleProxy:
    """``endpoint`` forwards to ``upstream`` (``http://host:port``), answering a byte every ``delay`` s."""

    def __init__(self, upstream: str, delay: float = 0.05) -> None:
        host, _, port = upstream.split("://", 1)[1].partition(":")
        self.upstream = (host, int(port))
        self.delay = delay
        self.closed = threading.Event()
        self.accepted = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="trickle-accept", daemon=True).start()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._keep(sock)
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._pump, args=(client, server, 0.0), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self.delay), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, delay: float) -> None:
        try:
            while not self.closed.is_set():
                data = source.recv(65536)
                if not data:
                    break
                if not delay:
                    sink.sendall(data)
                    continue
                for i in range(len(data)):
                    if self.closed.wait(delay):
                        return
                    sink.sendall(data[i:i + 1])
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """Stop listening and cut every connection."""
        self.closed.set()
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
