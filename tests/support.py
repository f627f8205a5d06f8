"""Plain helpers shared by the test modules and fixtures (import them; fixtures live in conftest)."""

from __future__ import annotations

import ast
import atexit
import ctypes
import ctypes.util
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from contextlib import asynccontextmanager, contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator, Sequence, TypeVar

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")


def free_port() -> int:
    """A loopback port nothing listens on right now (also an unreachable endpoint that fails fast)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, what: str = "the condition",
             interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy and return that; fail after ``timeout`` s.

    The one polling loop of the suite: ``timeout`` is a ceiling for a broken build, never the
    expected time, so it is generous.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


# --- processes -------------------------------------------------------------------------------------
# Every process a test or fixture starts goes through ``spawn`` or ``run``: it leads its own process
# group (start_new_session), so whatever it starts in turn (bench.py's moto_server, a serve's
# workers) is stopped with it, by ``stop``, on success, failure, timeout (``run``'s own bound, or
# pytest-timeout's, which raises in the test) and Ctrl-C alike. A worker that dies without running
# its ``finally`` blocks takes its direct children with it (the kernel's parent-death signal), and
# any group still registered when the worker exits is killed then. Nothing outlives the run.

DEFAULT_TIMEOUT_S = 120.0  # ``run``'s bound: a ceiling for a broken build, far above any test's need
_GROUPS: set[int] = set()  # process groups started and not yet stopped
_PR_SET_PDEATHSIG = 1


@lru_cache(maxsize=None)
def _prctl() -> Any:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name, use_errno=True) if name else None
    return getattr(libc, "prctl", None)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it exits (a worker killed
    with SIGKILL, or ended by pytest-timeout's thread method, runs no ``finally``)."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(cmd: Sequence[str], **popen_kwargs: Any) -> "subprocess.Popen[Any]":
    """``subprocess.Popen(cmd, **popen_kwargs)`` as the leader of a new process group, registered
    until ``stop``. Start it from the thread that lives as long as it (the fixture's, the test's):
    it is killed when that thread exits."""
    _prctl()  # resolved here: the child only calls it
    proc: subprocess.Popen[Any] = subprocess.Popen(list(cmd), start_new_session=True,
                                                   preexec_fn=_die_with_parent, **popen_kwargs)
    _GROUPS.add(proc.pid)
    return proc


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False when none of it is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed user: nothing of ours is left to stop
        return False


def stop(proc: "subprocess.Popen[Any]", grace_s: float = 10.0) -> int | None:
    """Stop ``proc`` and everything in its process group: SIGTERM, up to ``grace_s`` for the
    leader to exit (its own clean-up: a server's shutdown, a script's ``finally``), then SIGKILL
    to whatever of the group is left. Returns the leader's exit code."""
    pgid = proc.pid
    try:
        if proc.poll() is None and _signal_group(pgid, signal.SIGTERM):
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(pgid, signal.SIGKILL)  # the leader if it ignored SIGTERM, and its strays
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # unkillable (D state): nothing more a test can do
            pass
    finally:
        _GROUPS.discard(pgid)
    return proc.returncode


@contextmanager
def spawned(cmd: Sequence[str], *, grace_s: float = 10.0, **popen_kwargs: Any) -> "Iterator[subprocess.Popen[Any]]":
    """``with spawned(cmd) as proc:`` a process (group) that is stopped when the block ends, however."""
    proc = spawn(cmd, **popen_kwargs)
    try:
        yield proc
    finally:
        stop(proc, grace_s)


def run(cmd: Sequence[str], *, input: str | bytes | None = None, capture_output: bool = False,
        timeout: float = DEFAULT_TIMEOUT_S, check: bool = False, **popen_kwargs: Any) -> "subprocess.CompletedProcess[Any]":
    """``subprocess.run`` in a process group of its own, bounded by ``timeout`` (raises
    ``subprocess.TimeoutExpired``): the whole group is killed on a timeout, an exception (a
    failed assertion elsewhere, pytest-timeout, Ctrl-C) and also after a normal exit, so nothing
    it started in the background outlives it."""
    if capture_output:
        popen_kwargs.setdefault("stdout", subprocess.PIPE)
        popen_kwargs.setdefault("stderr", subprocess.PIPE)
    if input is not None:
        popen_kwargs["stdin"] = subprocess.PIPE
    proc = spawn(cmd, **popen_kwargs)
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        stop(proc, grace_s=0)
        raise subprocess.TimeoutExpired(exc.cmd, timeout, *proc.communicate()) from None
    finally:
        stop(proc, grace_s=0)  # on an exception: the group; after an exit: its strays (none, mostly)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    if check:
        result.check_returncode()
    return result


@atexit.register
def stop_every_group() -> None:
    """The session ends (conftest's ``pytest_sessionfinish``) or the worker exits, normally or
    after an interrupt: no group it started survives it."""
    for pgid in list(_GROUPS):
        _signal_group(pgid, signal.SIGKILL)
    _GROUPS.clear()


@lru_cache(maxsize=None)
def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def http_client(base_url: str = "", **kwargs: Any) -> "httpx.Client":
    """``httpx.Client(base_url, **kwargs)`` for the suite's servers. Every one of them is plain
    HTTP on 127.0.0.1, yet a default client loads the CA bundle into a new SSL context (~50 ms, a
    second or more on a loaded machine for a test that makes a few): these share one."""
    import httpx

    return httpx.Client(base_url=base_url, verify=_ssl_context(), **kwargs)


class _Http:
    """``httpx.get``/``post``/... (one request on a new client) on ``http_client``'s shared context."""

    def request(self, method: str, url: str, **kwargs: Any) -> "httpx.Response":
        with http_client(timeout=kwargs.pop("timeout", 5.0)) as client:
            return client.request(method, url, **kwargs)

    def get(self, url: str, **kwargs: Any) -> "httpx.Response":
        return self.request("GET", url, **kwargs)

    def head(self, url: str, **kwargs: Any) -> "httpx.Response":
        return self.request("HEAD", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> "httpx.Response":
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> "httpx.Response":
        return self.request("PUT", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> "httpx.Response":
        return self.request("DELETE", url, **kwargs)


http = _Http()


# --- the type check, in the background ----------------------------------------------------------
# mypy's first check of a checkout (a fresh clone, CI) is ~20 s of CPU in one process, and a test
# that ran it held its worker for all of it. The session's first process (xdist's controller, or
# the only one with -n0) starts it before any worker, and tests/test_types.py waits for its result
# (a JSON file written when mypy has exited): it runs beside the workers' start-up and first tests.

TYPE_CHECK_ENV = "MEMLOCAL_TESTS_TYPE_CHECK"  # the result file's path, for the workers
TYPE_CHECK_RESULT: list[Path] = [Path(os.environ[TYPE_CHECK_ENV])] if os.environ.get(TYPE_CHECK_ENV) else []


def type_check_command(root: Path) -> list[str]:
    import sys

    return [sys.executable, str(root / "scripts" / "check_types.py")]


def announce_type_check(result: Path) -> None:
    """Tell this process and the workers it starts later (through ``TYPE_CHECK_ENV``: they
    inherit the environment) that the check's result will be written to ``result``."""
    os.environ[TYPE_CHECK_ENV] = str(result)
    TYPE_CHECK_RESULT[:] = [result]


def start_type_check(root: Path, result: Path) -> None:
    """Start ``scripts/check_types.py`` in the background (a process group of its own, killed by
    ``stop_every_group`` when the session ends) and write ``{"returncode", "stdout", "stderr"}``
    to ``result`` (atomically, by a rename) when it exits."""
    import json
    import threading

    proc = spawn(type_check_command(root), cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)

    def finish() -> None:
        stdout, stderr = proc.communicate()
        _GROUPS.discard(proc.pid)
        try:
            tmp = result.with_name(result.name + ".tmp")
            tmp.write_text(json.dumps({"returncode": proc.returncode, "stdout": stdout, "stderr": stderr}))
            tmp.replace(result)
        except OSError:  # the session ended (and removed the folder) first
            pass

    threading.Thread(target=finish, name="type-check", daemon=True).start()


def type_check(root: Path, timeout: float = 140.0) -> "subprocess.CompletedProcess[str]":
    """The result of ``scripts/check_types.py``: the background one's when the session started it
    (waiting up to ``timeout`` s for it), else a run of it here."""
    import json

    if not TYPE_CHECK_RESULT:
        return run(type_check_command(root), cwd=root, capture_output=True, text=True, timeout=timeout)
    path = TYPE_CHECK_RESULT[0]
    wait_for(path.exists, timeout=timeout, what=f"the session's background type check ({path})", interval=0.1)
    out = json.loads(path.read_text())
    return subprocess.CompletedProcess(type_check_command(root), out["returncode"], out["stdout"], out["stderr"])


# Set once per session by conftest's ``_empty_database`` fixture.
EMPTY_DATABASE: list[Path] = []


@lru_cache(maxsize=None)
def absolute_imports(folder: Path, package: str) -> dict[str, frozenset[str]]:
    """What each module of the package in ``folder`` (imported as ``package``) imports by absolute
    name, anywhere in the module, by module name; read once a process (parsing every module is
    ~1 s of CPU, and several checks need the same answer)."""
    imports: dict[str, frozenset[str]] = {}
    for path in folder.rglob("*.py"):
        parts = (package,) + path.relative_to(folder).with_suffix("").parts
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                names.add(node.module or "")
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
        imports[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = frozenset(names)
    return imports


def fresh_database(path: Path) -> Path:
    """``path`` as a copy of an empty, migrated database (made once per session): a bank opened on
    it skips the schema migrations, which were most of the time of a property's small example."""
    shutil.copyfile(EMPTY_DATABASE[0], path)
    return path


def mcp_server_params(db: Path, profile: str) -> Any:
    """How an agent client starts ``memlocal mcp`` (the mcp SDK's ``StdioServerParameters``), with
    the test's environment (its isolated config and data folders, the bytecode cache outside the
    repository): by default the SDK passes the server only HOME, PATH, SHELL, TERM and the user.
    The SDK is imported here, by the tests that start a server, not at collection."""
    import os
    import sys

    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "memlocal", "--db", str(db), "mcp", "--profile", profile],
                                 env=dict(os.environ))


@asynccontextmanager
async def mcp_in_process(db: Path, profile: str) -> AsyncIterator[Any]:
    """An initialised client session (the mcp SDK's ``ClientSession``) with the server ``memlocal
    --db DB mcp --profile PROFILE`` runs (``build_server`` on the bank it opens), in this process:
    the same JSON-RPC messages, as the SDK's objects over its memory streams instead of lines on
    a process's stdio. For tests of what the tools answer: such a process costs 1-2.5 s of CPU to
    start. What the process adds (its stdin guard, start-up, exit) is tested on real processes
    (tests/test_mcp.py; test_hostile.py's raw lines, lone surrogates among them)."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.shared.memory import create_client_server_memory_streams

    from memlocal import MemoryBank
    from memlocal.faces.mcp_server import build_server

    bank = MemoryBank.open(db)  # as `memlocal --db DB` opens it: the configuration from the environment
    try:
        server = build_server(bank, profile)
        async with create_client_server_memory_streams() as (client, served), anyio.create_task_group() as tg:
            tg.start_soon(lambda: server.run(served[0], served[1], server.create_initialization_options()))
            async with ClientSession(client[0], client[1]) as session:
                await session.initialize()
                yield session
            tg.cancel_scope.cancel()
    finally:
        bank.close()


def corrupt_memories_table(db: Path) -> None:
    """Overwrite the first page of ``db``'s ``memories`` b-tree with garbage (after a checkpoint,
    so the page is in the main file): SQLite reports the file as corrupt on the next read."""
    import sqlite3

    conn = sqlite3.connect(str(db))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'memories'").fetchone()[0]
    conn.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff\x13" * (page_size // 2))
