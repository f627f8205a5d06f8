"""``memlocal serve``: the REST API on uvicorn, optionally with the sync daemon in-process."""

from __future__ import annotations

import signal
import socket
from typing import TYPE_CHECKING, Any

import click

from ..config import Config
from ..errors import MemoryBankError
from ._common import State, check_db_folder, dim, main, pass_state, warn

if TYPE_CHECKING:
    from ..bank import MemoryBank, SyncDaemonHandle


def _banner(config: Config, bank: MemoryBank | MemoryBankError, host: str, port: int) -> None:
    """What is being served, before uvicorn's own lines: the database, the bucket, the URLs."""
    from .. import __version__

    shown_host = f"[{host}]" if ":" in host else host
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else '[::1]' if host == '::' else shown_host}:{port}"
    if isinstance(bank, MemoryBankError):
        database = f"{config.store.path or '(default)'} {warn('(not wired: memory endpoints answer 503)')}"
        bucket = dim("unknown (the bank is not wired)")
    else:
        database = str(bank.path)
        status = bank.sync_status()
        b = status.get("bucket")
        if not b:
            bucket = "none: local only " + dim("(set INTERNAL_S3_BUCKET or S3_BUCKET to sync)")
        else:
            where = f" at {b['endpoint']}" if b.get("endpoint") else ""
            bucket = f"{b['name']}{where} " + dim(f"(from {b['source']})")
    lines = [f"memlocal {__version__} serving", f"  database:   {database}", f"  bucket:     {bucket}",
             f"  dashboard:  {base}/", f"  API docs:   {base}/docs  {dim('(and /redoc)')}"]
    for line in lines:
        click.echo(line, err=True)


def _listen(host: str, port: int, *, shared: bool = False) -> socket.socket:
    """A socket bound to ``host``:``port`` (as uvicorn binds one: address reuse on, inheritable),
    or a one-line error naming the address and the reason.

    ``shared`` (several workers, where the platform has ``SO_REUSEPORT``): the port is first bound
    alone, so one that anything else listens on is still refused, then bound again with
    ``SO_REUSEPORT``, so that each worker can bind a socket of its own to it (:func:`_own_socket`)."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _name, address = infos[0]
    sock = _bound(family, kind, proto, address, host, port, reuse_port=False)
    if shared and hasattr(socket, "SO_REUSEPORT"):
        address = sock.getsockname()  # the port chosen, for --port 0
        sock.close()
        sock = _bound(family, kind, proto, address, host, port, reuse_port=True)
    sock.set_inheritable(True)
    return sock


def _bound(family: int, kind: int, proto: int, address: tuple[Any, ...], host: str, port: int, *,
           reuse_port: bool) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise click.ClickException(f"cannot listen on {host}:{port}: {reason}") from None
    return sock


def _own_socket(parent: socket.socket) -> socket.socket:
    """A worker's own listening socket on the parent's address (``SO_REUSEPORT``): the kernel
    spreads new connections over the workers' sockets. On the one socket they would share, the
    worker whose event loop woke first accepted every connection waiting (asyncio takes them all
    at once): under a burst of clients one worker held them all while the others idled. Without
    ``SO_REUSEPORT`` (not Linux or BSD), the shared socket is kept."""
    if not hasattr(socket, "SO_REUSEPORT") or not parent.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT):
        return parent
    sock = socket.socket(parent.family, parent.type, parent.proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(parent.getsockname())
    except OSError:
        sock.close()
        return parent
    parent.close()
    return sock


# The most processes ``serve.workers = 0`` chooses (one per core up to this): each holds its own
# recall index in memory, and beyond four the SQLite writer's lock, not the CPU, bounds saves.
AUTO_WORKERS_MAX = 4


def worker_count(config: Config) -> int:
    """``serve.workers``, with 0 meaning one per usable CPU core, up to ``AUTO_WORKERS_MAX``."""
    import os

    chosen = config.get_int("serve.workers")
    if chosen:
        return chosen
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, AUTO_WORKERS_MAX))


def _fork_workers(count: int) -> tuple[int, list[int]]:
    """Pre-fork ``count - 1`` worker processes (as gunicorn does): each answers on the listening
    socket the parent bound (the kernel hands each connection to one of them), with its own bank
    (connection, recall index) over the one WAL database, which SQLite makes safe for several
    processes. Called before the bank opens, so no thread exists yet. Returns (this process's
    worker number, the children's pids: empty in a child). A worker dies with the parent."""
    import os

    import sys

    sys.stdout.flush()
    sys.stderr.flush()  # nothing buffered is written twice
    children: list[int] = []
    for number in range(1, count):
        pid = os.fork()
        if pid == 0:
            _die_with_parent()
            return number, []
        children.append(pid)
    return 0, children


def _log_config() -> dict[str, Any]:
    """uvicorn's own logging set-up, with memlocal's filters on its handlers: the access log
    writes paths without their query's values (a search's ``q`` may be a token), and every
    other line of uvicorn's passes the credential filter (docs/hygiene.md, "Logs")."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"memlocal_access": {"()": "memlocal.logs.AccessLogFilter"},
                         "memlocal_redact": {"()": "memlocal.logs.RedactingFilter"}}
    config["handlers"]["access"]["filters"] = ["memlocal_access"]
    config["handlers"]["default"]["filters"] = ["memlocal_redact"]
    return config


def _preload() -> None:
    """Import what the first requests would (ranking, the memory block, the credential
    detectors) before the workers fork: each inherits it instead of compiling and importing it
    inside its first search or preview, which under load took seconds while requests queued."""
    from .. import injection, recall, redact, scoring, updates  # noqa: F401

    redact.warm()


def _die_with_parent() -> None:
    """Linux: SIGTERM to this worker when the parent exits, however it exits."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    if name:
        ctypes.CDLL(name).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop_workers(children: list[int], timeout_s: float = 30.0) -> None:
    """SIGTERM each worker (uvicorn shuts it down gracefully: requests in flight are answered),
    then wait for them, SIGKILL after ``timeout_s``."""
    import os
    import time

    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    waiting = set(children)
    while waiting:
        for pid in list(waiting):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                waiting.discard(pid)
        if waiting and time.monotonic() > deadline:
            for pid in waiting:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = float("inf")
        if waiting:
            time.sleep(0.05)


@main.command()
@click.option("--host", help="Address to bind (default: serve.host, 127.0.0.1). Non-loopback needs MEMLOCAL_API_TOKEN.")
@click.option("--port", type=int, help="Port (default: serve.port, 8765).")
@click.option("--workers", type=int, help="Processes answering requests (default: serve.workers; 0: one per core, up to 4).")
@click.option("--with-sync", is_flag=True, help="Also run the sync daemon in this process.")
@pass_state
def serve(state: State, host: str | None, port: int | None, workers: int | None, with_sync: bool) -> None:
    """Serve the REST API (docs at /docs, schema at /openapi.json).

    If the database cannot be opened the server still starts: every memory endpoint answers 503
    with the reason and /healthz reports "degraded".
    """
    import uvicorn  # the web stack is loaded only by this command

    from ..api import create_app
    from ..bank import MemoryBank
    from ..api.auth import check_bind
    from ..logs import configure_logging

    # uvicorn configures its own loggers; this shows memlocal's and the sync daemon's beside them,
    # libraries only from WARNING up, and never a credential (docs/sync.md, "Logs").
    configure_logging()

    flags = {"serve.host": host, "serve.port": port, "serve.workers": workers}
    config = state.config.with_overrides(**{k.replace(".", "__"): v for k, v in flags.items() if v is not None})
    host, port = config.get_str("serve.host"), config.get_int("serve.port")
    check_bind(host, config.serve.api_token)
    # The port first: a port in use is one line, before any banner or database work.
    count = worker_count(config)
    sock = _listen(host, port, shared=count > 1)
    port = sock.getsockname()[1]  # the one chosen, for --port 0
    _preload()
    number, children = _fork_workers(count)
    if number:
        sock = _own_socket(sock)

    bank: MemoryBank | MemoryBankError
    try:
        # Reads never wait on the bucket: the API asks the bank for background pulls
        # (MemoryBank.refresh_for_read), so the dashboard sees other hosts' saves promptly.
        check_db_folder(config)
        bank = MemoryBank.open(config=config)
    except MemoryBankError as exc:
        bank = exc
        if number == 0:
            click.echo(f"Warning: the memory bank is not wired ({exc}); memory endpoints answer 503", err=True)

    if number == 0:
        _banner(config, bank, host, port)
        if children:
            click.echo(f"  workers:    {len(children) + 1} processes " + dim("(serve.workers)"), err=True)
    if with_sync and number == 0 and not isinstance(bank, MemoryBank):
        click.echo("Warning: --with-sync: the sync daemon is not started, the bank is not wired", err=True)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal; these
    # handlers absorb that re-raise so the cleanup below (the daemon's pass in flight, the
    # bank) still runs and the command exits 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    daemon: SyncDaemonHandle | None = None
    server = uvicorn.Server(uvicorn.Config(create_app(bank, config), host=host, port=port, log_level="info",
                                           log_config=_log_config()))
    try:
        if isinstance(bank, MemoryBank):
            # The pull on open, started now, with or without --with-sync: a fresh host pulls the
            # whole bucket and its first reads wait for it up to sync.hydrate_deadline_s; a
            # hydrated one refreshes every profile in the background, and its reads answer from
            # the local index at once.
            bank.prepare()
        if with_sync and number == 0 and isinstance(bank, MemoryBank):  # one daemon, in the parent
            daemon = bank.start_sync_daemon()
            if daemon is None:
                click.echo("Warning: --with-sync: no bucket is configured, so there is nothing to sync", err=True)
        server.run(sockets=[sock])
    finally:
        sock.close()
        _stop_workers(children)
        if daemon is not None:
            daemon.stop()
        if isinstance(bank, MemoryBank):
            bank.close()
