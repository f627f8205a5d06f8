"""``memlocal serve``: the REST API on uvicorn, optionally with the sync daemon in-process."""

from __future__ import annotations

import logging
import signal
import sys

import click

from ..bank import MemoryBank, SyncDaemonHandle
from ..errors import MemoryBankError
from ._common import State, main, pass_state


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
    from ..api.auth import check_bind

    # uvicorn configures its own loggers; this shows memlocal's and the sync daemon's beside them.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)-9s %(name)s: %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)

    flags = {"serve.host": host, "serve.port": port}
    config = state.config.with_overrides(**{k.replace(".", "__"): v for k, v in flags.items() if v is not None})
    host, port = str(config["serve.host"]), int(config["serve.port"])
    check_bind(host, str(config["serve.api_token"] or ""))

    bank: MemoryBank | MemoryBankError
    try:
        # The dashboard must see other hosts' saves promptly: reads pull first when stale.
        bank = MemoryBank.open(config=config, fresh_reads=True)
    except MemoryBankError as exc:
        bank = exc
        click.echo(f"Warning: the memory bank is not wired ({exc}); memory endpoints answer 503", err=True)

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
        if with_sync and isinstance(bank, MemoryBank):
            daemon = bank.start_sync_daemon()
            if daemon is None:
                click.echo("Warning: --with-sync: no bucket is configured, so there is nothing to sync", err=True)
        server.run()
    finally:
        if daemon is not None:
            daemon.stop()
        if isinstance(bank, MemoryBank):
            bank.close()
    # A port already in use: uvicorn has logged why and exits 3 (SystemExit passes through).
