"""``memlocal serve --workers N`` (N > 1) on gunicorn: its arbiter forks, watches, replaces and
stops the workers; uvicorn serves the app in each (``uvicorn-worker``'s ``UvicornWorker``).

What memlocal adds to them: each worker has a slot (0 .. N-1, a replaced worker takes the slot it
frees), the first worker of slot 0 says what is served, slot 0 runs the sync daemon with
``--with-sync``, each worker opens its own bank after the fork and closes it when it exits, and a
worker whose arbiter is gone (killed) stops within a second. Imported only by ``serve``."""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any, Callable, Protocol

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.workers.base import Worker
from uvicorn.server import Server
from uvicorn_worker import UvicornWorker

# How often a worker checks that its arbiter is still there (and tells the arbiter it is alive).
PARENT_CHECK_S = 1.0


class Serving(Protocol):
    """What a worker serves: its app, and what to close when it exits (``serve``'s ``Served``)."""

    app: Any

    def close(self) -> None: ...


# A worker's serving part, made after the fork: (its slot, whether it is the first worker of
# slot 0) -> what it serves.
OpenWorker = Callable[[int, bool], Serving]


class MemlocalWorker(UvicornWorker):  # type: ignore[misc]  # gunicorn's classes are untyped
    """uvicorn in a gunicorn worker, configured as ``serve`` configures uvicorn in one process
    (``CONFIG_KWARGS``, set by :func:`serve_workers`: uvicorn's own logging, not gunicorn's)."""

    CONFIG_KWARGS: dict[str, Any] = dict(UvicornWorker.CONFIG_KWARGS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # UvicornWorker hands uvicorn's loggers to gunicorn's handlers before uvicorn's own
        # logging set-up replaces them; its error lines reach their handler by propagating.
        logging.getLogger("uvicorn.error").propagate = True
        self.config.timeout_notify = PARENT_CHECK_S

    def init_signals(self) -> None:
        """SIGINT/SIGTERM outside uvicorn's own handlers (which it installs only once it serves):

        - before the worker serves (it is still opening its bank): the worker stops, with its
          clean-up (``worker_exit``). A no-op here lost a signal that came that early (SIGTERM to
          the process group right after the first worker answered), and the worker served on
          until the arbiter's graceful timeout ended in a SIGKILL;
        - once uvicorn's server exists but before it captures signals: it is told to stop;
        - after uvicorn stopped gracefully and raised the signal again: absorbed, so the clean-up
          runs instead of the default action ending the process."""
        super().init_signals()
        self.memlocal_server: Server | None = None

        def stop(signum: int, frame: object) -> None:
            server = self.memlocal_server
            if server is None:
                raise SystemExit(0)
            server.should_exit = True  # uvicorn's re-raise after its stop, or before it captured

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stop)

    async def _serve(self) -> None:
        """``UvicornWorker._serve``, keeping its server where the signal handler above finds it."""
        self.config.app = self.wsgi
        self.memlocal_server = server = Server(config=self.config)
        self._install_sigquit_handler()
        await server.serve(sockets=self.sockets)
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)

    async def callback_notify(self) -> None:
        """Every ``PARENT_CHECK_S`` on uvicorn's loop: the heartbeat, and a graceful stop once the
        arbiter is gone (another process adopted this one): a worker never outlives its server."""
        self.notify()
        if os.getppid() != self.ppid:
            os.kill(os.getpid(), signal.SIGTERM)


class _Application(BaseApplication):  # type: ignore[misc]  # gunicorn's classes are untyped
    """gunicorn's arbiter over :class:`MemlocalWorker` processes, each serving :class:`Served`."""

    def __init__(self, host: str, port: int, count: int, open_worker: OpenWorker) -> None:
        self.host, self.port, self.count, self.open_worker = host, port, count, open_worker
        self.started = False  # the arbiter's: whether slot 0 has been started once
        self.worker: Worker | None = None  # a worker's own, after the fork
        self.served: Serving | None = None  # a worker's own
        super().__init__()

    def load_config(self) -> None:
        bind = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        settings: dict[str, Any] = {
            "bind": [bind], "workers": self.count, "worker_class": MemlocalWorker,
            # Each worker binds a socket of its own after the fork, and the kernel spreads new
            # connections over them: on one shared socket, the worker whose loop woke first
            # accepted every connection waiting (a burst of clients all on one worker).
            "reuse_port": True,
            # No heartbeat kill: a worker's first reads may wait for the pull on open up to
            # sync.hydrate_deadline_s, and a busy loop is not a hung one.
            "timeout": 0, "graceful_timeout": 30,
            # gunicorn's own lines only from WARNING up: the banner and uvicorn's lines stay
            # what a person reads, as with one process.
            "loglevel": "warning",
            "pre_fork": self._pre_fork, "post_fork": self._post_fork, "worker_exit": self._worker_exit,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    # --- in the arbiter -----------------------------------------------------------------------

    def _pre_fork(self, arbiter: Arbiter, worker: Worker) -> None:
        """The lowest slot no live worker holds (the arbiter drops a worker when it reaps it)."""
        held = {getattr(w, "memlocal_slot", None) for w in arbiter.WORKERS.values()}
        slot = min(set(range(self.count)) - held)
        worker.memlocal_slot = slot
        worker.memlocal_first = slot == 0 and not self.started
        self.started = self.started or slot == 0

    # --- in a worker --------------------------------------------------------------------------

    def _post_fork(self, arbiter: Arbiter, worker: Worker) -> None:
        self.worker = worker

    def load(self) -> Any:
        """The app of this worker (after the fork): its own bank over the one database."""
        assert self.worker is not None
        self.served = self.open_worker(self.worker.memlocal_slot, self.worker.memlocal_first)
        return self.served.app

    def _worker_exit(self, arbiter: Arbiter, worker: Worker) -> None:
        if self.served is not None:
            self.served.close()


def serve_workers(host: str, port: int, count: int, open_worker: OpenWorker, uvicorn_options: dict[str, Any]) -> None:
    """Serve on ``host``:``port`` with ``count`` worker processes, each serving what
    ``open_worker`` makes after the fork, on uvicorn given ``uvicorn_options``, until SIGTERM or
    SIGINT (the arbiter stops the workers gracefully, then exits 0)."""
    MemlocalWorker.CONFIG_KWARGS = {**UvicornWorker.CONFIG_KWARGS, **uvicorn_options}
    _Application(host, port, count, open_worker).run()
