"""``memlocal mcp``: serve one profile's memory tools to an MCP client over stdio."""

from __future__ import annotations

import logging

import click

from ._common import State, main, pass_state, profile_option


@main.command("mcp")
@profile_option
@pass_state
def mcp_cmd(state: State, profile: str) -> None:
    """Run an MCP server over stdio exposing memory_save, memory_recall, memory_list and
    memory_delete for PROFILE, and the memory_context prompt. Logs go to stderr."""
    # stdout carries the protocol: anything else printed there would corrupt it.
    from ...logs import configure_logging
    from ...model import validate_profile

    # A bad name is refused before the mcp SDK's import (~1.5 s), not after it.
    validate_profile(profile)

    configure_logging(level=logging.WARNING)  # stdout is the protocol: only warnings, on stderr
    bank = state.bank()
    bank.prepare()  # a fresh host's pull of the bucket runs while the SDK loads (~1.5 s)
    from ..mcp_server import run_stdio  # the mcp SDK is imported only for this command

    run_stdio(bank, profile)
