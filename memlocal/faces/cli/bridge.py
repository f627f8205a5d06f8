"""``memlocal bridge claude sync``: a profile mirrored into Claude's hosted memory stores, and
what a hosted agent wrote there taken back (memlocal.integrations.claude_stores)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable, Mapping

import click

from ._common import State, echo_json, json_option, main, pass_state, profile_option, warn

if TYPE_CHECKING:
    from ...bank.facade import MemoryBank


@main.group("bridge")
def bridge_group() -> None:
    """Bridges to hosted memory services (Claude's memory stores)."""


@bridge_group.group("claude")
def claude_group() -> None:
    """Claude's hosted memory stores (the anthropic SDK's beta.memory_stores)."""


@claude_group.command("sync")
@profile_option
@click.option("--dry-run", is_flag=True, help="Read only: say what the sync would do, change nothing on either side.")
@click.option("--force", is_flag=True, help="Apply deletions that the mass-delete guard held back.")
@json_option
@pass_state
def claude_sync(state: State, profile: str, dry_run: bool, force: bool, as_json: bool) -> None:
    """Mirror PROFILE into its memory store (found by its metadata memlocal_profile, or created)
    and take back what a hosted agent wrote, edited or deleted there.

    Uses the SDK's ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL. Exits 1 when the API did not answer
    within bridge.claude_deadline_s (what was done is kept; the next sync resumes), 3 when the
    mass-delete guard held deletions back; conflicts (both texts kept) are reported, exit 0."""
    from ...integrations.claude_stores import sync_profile

    report = sync_profile(state.bank(), profile, dry_run=dry_run, force=force)
    if as_json:
        echo_json(report.to_dict())
    else:
        line = report.summary()
        click.echo(warn(line) if report.result != "ok" else line)
    if report.result == "failed":
        sys.exit(1)
    if report.result == "guarded":
        sys.exit(3)


def daemon_jobs(bank: "MemoryBank") -> "list[tuple[str, float, Callable[[], Mapping[str, int]]]]":
    """The sync daemon's scheduled bridge job for the profiles ``bridge.claude_profiles`` names:
    ``[(name, interval_s, job)]``, empty when it names none (the daemon runs no bridge, and the
    anthropic SDK is not imported)."""
    if not bank.config.bridge.claude_profiles.strip():
        return []

    def job() -> Mapping[str, int]:
        from ...integrations.claude_stores import sync_profiles

        return sync_profiles(bank)

    return [("memlocal-bridge-claude", bank.config.bridge.claude_interval_s, job)]
