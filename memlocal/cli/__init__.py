"""The ``memlocal`` command: a thin click shell over :class:`memlocal.MemoryBank`.

Commands live in sibling modules; each registers itself on ``main``. Commands from other
installed packages (the ``sync`` group) are found through the ``memlocal.commands`` entry point
group, so the library never imports them by name.
"""

from __future__ import annotations

from . import audit_cmd, config_cmd, hygiene, mcp_cmd, memories, portability, profile_cmd, recall, serve  # noqa: F401  (register commands)
from ._common import main

__all__ = ["main"]
