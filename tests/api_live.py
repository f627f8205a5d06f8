"""Helpers for the REST API tests: a real uvicorn server on a free 127.0.0.1 port, in a thread
(``LiveServer``; ``ServedInProcess`` wires it as ``memlocal serve`` does), and ``memlocal serve`` as
a subprocess (``ServeProcess``: for tests of the process itself, its start-up, signals and exit)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Mapping

import httpx
import uvicorn
import support
from support import free_port, http, wait_for

from memlocal import MemoryBank
from memlocal.faces.api import create_app
from memlocal.config import Config
from memlocal.errors import MemoryBankError


class LiveServer:
    """Serve an ASGI app with uvicorn on a socket bound here (no port race), until closed."""

    def __init__(self, app: Any) -> None:
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (as
        # uvicorn's own binding has). Without it a response's body waits behind its headers for the
        # client's delayed ACK: ~40 ms per request on a kept-alive connection.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> "LiveServer":
        self._thread.start()

        def started() -> bool:
            if not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            return bool(self.server.started)

        wait_for(started, 30, "uvicorn to start", interval=0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(15)
        self._sock.close()


class ServedInProcess(LiveServer):
    """What ``memlocal --db DB serve`` serves, wired the same way (the bank from the resolved config,
    or the error that kept it from opening; the first background pull), on a ``LiveServer`` in this
    process: the pages and the API are real HTTP, without a ~4 s interpreter start per test."""

    def __init__(self, db: Path, env: Mapping[str, str] | None = None) -> None:
        config = Config.load(overrides={"store.path": str(db)}, environ={**os.environ, **(env or {})})
        self.bank: MemoryBank | MemoryBankError
        try:
            self.bank = MemoryBank.open(config=config)
        except MemoryBankError as exc:
            self.bank = exc
        super().__init__(create_app(self.bank, config))

    def __enter__(self) -> "ServedInProcess":
        if isinstance(self.bank, MemoryBank):
            self.bank.refresh_for_read(None)
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if isinstance(self.bank, MemoryBank):
            self.bank.close()


class ServeProcess:
    """``memlocal [--db DB] serve ...`` in a subprocess, with its stderr captured to a file."""

    def __init__(self, tmp: Path, args: list[str], env: Mapping[str, str] | None = None,
                 host: str = "127.0.0.1", serve_args: list[str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://{host if host not in ('0.0.0.0', '::') else '127.0.0.1'}:{self.port}"
        self.log_path = tmp / f"serve-{self.port}.log"
        self._log = self.log_path.open("wb")
        cmd = [sys.executable, "-m", "memlocal", *args, "serve", "--host", host, "--port", str(self.port),
               *(serve_args or [])]
        self.proc = support.spawn(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                  env={**os.environ, **(env or {})})

    def wait_ready(self, headers: Mapping[str, str] | None = None, timeout: float = 30) -> None:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memlocal serve exited {self.proc.returncode}: {self.log}")
            try:
                http.get(self.url + "/healthz", headers=dict(headers or {}), timeout=1)
                return True
            except httpx.TransportError:
                return False

        wait_for(up, timeout, f"memlocal serve to come up ({self.log_path})")

    @property
    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM to the server's process group, SIGKILL to what is left after 15 s."""
        support.stop(self.proc, grace_s=15)
        self._log.close()
        return int(self.proc.returncode)
