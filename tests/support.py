"""Plain helpers shared by the test modules and fixtures (import them; fixtures live in conftest)."""

from __future__ import annotations

import ast
import shutil
import socket
import ssl
import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

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
