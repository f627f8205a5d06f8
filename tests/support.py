"""Plain helpers shared by the test modules and fixtures (import them; fixtures live in conftest)."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Callable, TypeVar

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


# Set once per session by conftest's ``_empty_database`` fixture.
EMPTY_DATABASE: list[Path] = []


def fresh_database(path: Path) -> Path:
    """``path`` as a copy of an empty, migrated database (made once per session): a bank opened on
    it skips the schema migrations, which were most of the time of a property's small example."""
    shutil.copyfile(EMPTY_DATABASE[0], path)
    return path
