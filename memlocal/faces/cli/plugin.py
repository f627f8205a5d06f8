"""What a command plugin (an installed package's ``memlocal.commands`` entry point, such as
``memlocal sync``) may use of the CLI: the per-invocation :class:`State` (configuration and the
bank, opened on first use) and the output helpers every command shares, so a plugin's commands
look and behave like the built-in ones. The rest of ``memlocal.faces.cli`` is private to it.
"""

from __future__ import annotations

from typing import Callable, Mapping

from ._common import Progress, State, dim, echo_json, json_option, pass_state, table

__all__ = ["Progress", "State", "daemon_jobs", "dim", "echo_json", "json_option", "pass_state", "table"]


def daemon_jobs(state: State) -> list[tuple[str, float, Callable[[], Mapping[str, int]]]]:
    """The library's jobs for the sync daemon's schedule, ``(name, interval_s, job)``: the bridge
    to Claude's memory stores for the profiles ``bridge.claude_profiles`` names (none when empty)."""
    from .bridge import daemon_jobs as bridge_jobs

    return bridge_jobs(state.bank())
