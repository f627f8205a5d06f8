"""``memlocal serve``: the REST API on uvicorn, optionally with the sync daemon in-process."""

from __future__ import annotations

import signal
import socket
from typing import TYPE_CHECKING

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


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (as uvicorn binds one: address reuse on, inheritable),
    or a one-line error naming the address and the reason."""
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


@main.command()
@click.option("--host", help="Address to bind (default: serve.host, 127.0.0.1). Non-loopback needs MEMLOCAL_API_TOKEN.")
@click.option("--port", type=int, help="Port (default: serve.port, 8765).")
@click.option("--with-sync", is_flag=True, help="Also run the sync daemon in this process.")
@pass_state
def serve(state: State, host: str | None, port: int | None, with_sync: bool) -> None:
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

    flags = {"serve.host": host, "serve.port": port}
    config = state.config.with_overrides(**{k.replace(".", "__"): v for k, v in flags.items() if v is not None})
    host, port = config.get_str("serve.host"), config.get_int("serve.port")
    check_bind(host, config.serve.api_token)
    # The port first: a port in use is one line, before any banner or database work.
    sock = _listen(host, port)
    port = sock.getsockname()[1]  # the one chosen, for --port 0

    bank: MemoryBank | MemoryBankError
    try:
        # Reads never wait on the bucket: the API asks the bank for background pulls
        # (MemoryBank.refresh_for_read), so the dashboard sees other hosts' saves promptly.
        check_db_folder(config)
        bank = MemoryBank.open(config=config)
    except MemoryBankError as exc:
        bank = exc
        click.echo(f"Warning: the memory bank is not wired ({exc}); memory endpoints answer 503", err=True)

    _banner(config, bank, host, port)
    if with_sync and not isinstance(bank, MemoryBank):
        click.echo("Warning: --with-sync: the sync daemon is not started, the bank is not wired", err=True)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal; these
    # handlers absorb that re-raise so the cleanup below (the daemon's pass in flight, the
    # bank) still runs and the command exits 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    daemon: SyncDaemonHandle | None = None
    server = uvicorn.Server(uvicorn.Config(create_app(bank, config), host=host, port=port, log_level="info"))
    try:
        if isinstance(bank, MemoryBank):
            # The pull on open, started now, with or without --with-sync: a fresh host pulls the
            # whole bucket and its first reads wait for it up to sync.hydrate_deadline_s; a
            # hydrated one refreshes every profile in the background, and its reads answer from
            # the local index at once.
            bank.prepare()
        if with_sync and isinstance(bank, MemoryBank):
            daemon = bank.start_sync_daemon()
            if daemon is None:
                click.echo("Warning: --with-sync: no bucket is configured, so there is nothing to sync", err=True)
        server.run(sockets=[sock])
    finally:
        sock.close()
        if daemon is not None:
            daemon.stop()
        if isinstance(bank, MemoryBank):
            bank.close()
