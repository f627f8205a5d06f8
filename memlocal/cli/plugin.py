"""What a command plugin (an installed package's ``memlocal.commands`` entry point, such as
``memlocal sync``) may use of the CLI: the per-invocation :class:`State` (configuration and the
bank, opened on first use) and the output helpers every command shares, so a plugin's commands
look and behave like the built-in ones. The rest of ``memlocal.cli`` is private to it.
"""

from __future__ import annotations

from ._common import Progress, State, dim, echo_json, json_option, pass_state, table

__all__ = ["Progress", "State", "dim", "echo_json", "json_option", "pass_state", "table"]
