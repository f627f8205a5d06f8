"""``memlocal serve``: the REST API on uvicorn (several workers: under gunicorn's arbiter,
``_workers.py``), optionally with the sync daemon in-process."""

from __future__ import annotations

import signal
import socket
from typing import TYPE_CHECKING, Any

import click

from ...config import Config
from ...errors import MemoryBankError
from ._common import State, check_db_folder, dim, main, pass_state, warn

if TYPE_CHECKING:
    from ...bank.facade import MemoryBank
    from ...bank.replication import SyncDaemonHandle


def _banner(config: Config, bank: MemoryBank | MemoryBankError, host: str, port: int) -> None:
    """What is being served, before uvicorn's own lines: the database, the bucket, the URLs."""
    from ... import __version__

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


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (as uvicorn binds one: address reuse on, inheritable),
    or a one-line error naming the address and the reason. Bound alone (no ``SO_REUSEPORT``), so
    a port that anything else listens on is refused, whatever that program's options."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise click.ClickException(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
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


def uvicorn_options() -> dict[str, Any]:
    """What ``uvicorn.Config`` is given besides the app and the address, in one process and in
    each of gunicorn's workers alike (``_workers.MemlocalWorker``): uvicorn's own logging (its
    format, the access log on stdout, with memlocal's filters: :func:`_log_config`), its
    keep-alive and the proxies it trusts."""
    return {"log_config": _log_config(), "log_level": "info", "timeout_keep_alive": 5, "forwarded_allow_ips": None}


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
    from ...services import injection, redact
    from ... import recall
    from ...relevance import scoring
    from ...hygiene import updates  # noqa: F401

    redact.warm()


class Served:
    """One serving process's part: its own bank (connection, recall index) over the one WAL
    database, the app on it, and the sync daemon where this process runs it. ``first``: the
    process that says what is served (the banner and the warnings, once)."""

    def __init__(self, config: Config, host: str, port: int, *, first: bool, with_sync: bool,
                 workers: int) -> None:
        from ..api import create_app
        from ...bank.facade import MemoryBank

        self.daemon: SyncDaemonHandle | None = None
        self.bank: MemoryBank | MemoryBankError
        try:
            # Reads never wait on the bucket: the API asks the bank for background pulls
            # (MemoryBank.refresh_for_read), so the dashboard sees other hosts' saves promptly.
            check_db_folder(config)
            self.bank = MemoryBank.open(config=config)
        except MemoryBankError as exc:
            self.bank = exc
            if first:
                click.echo(f"Warning: the memory bank is not wired ({exc}); memory endpoints answer 503", err=True)
        if first:
            _banner(config, self.bank, host, port)
            if workers > 1:
                click.echo(f"  workers:    {workers} processes " + dim("(serve.workers)"), err=True)
            if with_sync and not isinstance(self.bank, MemoryBank):
                click.echo("Warning: --with-sync: the sync daemon is not started, the bank is not wired", err=True)
        self.app = create_app(self.bank, config)
        try:
            self._start(with_sync=with_sync, first=first)
        except BaseException:
            self.close()
            raise

    def _start(self, *, with_sync: bool, first: bool) -> None:
        from ...bank.facade import MemoryBank

        if isinstance(self.bank, MemoryBank):
            # The pull on open, started now, with or without --with-sync: a fresh host pulls the
            # whole bucket and its first reads wait for it up to sync.hydrate_deadline_s; a
            # hydrated one refreshes every profile in the background, and its reads answer from
            # the local index at once.
            self.bank.prepare()
            if with_sync:
                self.daemon = self.bank.start_sync_daemon()
                if self.daemon is None and first:
                    click.echo("Warning: --with-sync: no bucket is configured, so there is nothing to sync", err=True)

    def close(self) -> None:
        """Stop the daemon (its pass in flight finishes), then close the bank."""
        from ...bank.facade import MemoryBank

        if self.daemon is not None:
            self.daemon.stop()
        if isinstance(self.bank, MemoryBank):
            self.bank.close()


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
    from ..api.auth import check_bind
    from ...logs import configure_logging

    # uvicorn configures its own loggers; this shows memlocal's and the sync daemon's beside them,
    # libraries only from WARNING up, and never a credential (docs/sync.md, "Logs").
    configure_logging()

    flags = {"serve.host": host, "serve.port": port, "serve.workers": workers}
    config = state.config.with_overrides(**{k.replace(".", "__"): v for k, v in flags.items() if v is not None})
    host, port = config.get_str("serve.host"), config.get_int("serve.port")
    check_bind(host, config.serve.api_token)
    # The port first: a port in use is one line, before any banner or database work.
    count = worker_count(config)
    sock = _listen(host, port)
    port = sock.getsockname()[1]  # the one chosen, for --port 0
    _preload()
    if count > 1:
        # gunicorn's arbiter supervises the workers (docs/cli.md, "memlocal serve"); with
        # reuse_port each worker binds a socket of its own after the fork, so this one only
        # checked (and, for --port 0, chose) the port.
        sock.close()
        from ._workers import serve_workers

        def open_worker(slot: int, first: bool) -> Served:
            # The sync daemon runs in slot 0's worker only (one daemon, whichever process holds it).
            return Served(config, host, port, first=first, with_sync=with_sync and slot == 0, workers=count)

        serve_workers(host, port, count, open_worker, uvicorn_options())
        return
    import uvicorn  # the web stack is loaded only by this command

    served: Served | None = None
    try:
        served = Served(config, host, port, first=True, with_sync=with_sync, workers=1)
        # uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal; these
        # handlers absorb that re-raise so the cleanup below (the daemon's pass in flight, the
        # bank) still runs and the command exits 0. Installed once the bank is open: a signal
        # while it opens ends the command as usual instead of being lost.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: None)
        uvicorn.Server(uvicorn.Config(served.app, host=host, port=port, **uvicorn_options())).run(sockets=[sock])
    finally:
        sock.close()
        if served is not None:
            served.close()
