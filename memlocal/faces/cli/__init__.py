"""The ``memlocal`` command: a thin click shell over :class:`memlocal.MemoryBank`.

Commands live in sibling modules; each registers itself on ``main`` when its module is imported,
and a module is imported only when one of its commands runs (or the command list is shown):
``COMMAND_MODULES`` in ``_common`` maps each command to its module, click's lazy-group pattern,
so that ``memlocal save`` does not load the serve, MCP or audit code (docs/cli.md, "Start-up").
Commands from other installed packages (the ``sync`` group) are found through the
``memlocal.commands`` entry point group, so the library never imports them by name.
"""

from __future__ import annotations

from ._common import main

__all__ = ["main"]
