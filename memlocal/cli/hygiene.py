"""``memlocal history``, ``memlocal restore`` and ``memlocal prune``: supersession lineage, its undo and
opt-in retention."""

from __future__ import annotations

import click

from ..humanize import ago, plural, shown_summary
from ..hygiene import RetentionRule
from ._common import InputChoice, State, echo_json, json_option, main, memory_state, pass_state, profile_option, table


@main.command()
@profile_option
@click.argument("memory_id")
@json_option
@pass_state
def history(state: State, profile: str, memory_id: str, as_json: bool) -> None:
    """Show the supersession chain through MEMORY_ID, oldest first."""
    chain = state.bank().history(profile, memory_id)
    if as_json:
        echo_json({"chain": [m.to_dict() for m in chain]})
        return
    first, last = chain[0], chain[-1]
    shown = {m.id for m in chain}

    def end(link: str) -> str:
        # A link back into the chain is a cycle (import can make one), not a missing memory.
        return "in this chain: the links make a cycle" if link in shown else "no longer stored"

    if first.supersedes:
        click.echo(f"(supersedes {first.supersedes}, {end(first.supersedes)})")
    rows = [(m.id, ago(m.created_at), memory_state(m), shown_summary(m.summary, m.processed_content)) for m in chain]
    click.echo(table(rows, ("id", "created", "state", "summary")))
    if last.superseded_by:
        click.echo(f"(superseded by {last.superseded_by}, {end(last.superseded_by)})")


@main.command()
@profile_option
@click.argument("memory_id")
@json_option
@pass_state
def restore(state: State, profile: str, memory_id: str, as_json: bool) -> None:
    """Undo a supersession: MEMORY_ID (superseded) is active again; the memory that superseded
    it stays active, without the link."""
    memory = state.bank().restore(profile, memory_id)
    if as_json:
        echo_json(memory.to_dict())
        return
    click.echo(f"{memory.id}  active again  {shown_summary(memory.summary, memory.processed_content)}")


@main.command()
@profile_option
@click.option("--staleness-above", type=float, help="Prune memories whose current staleness is above X (0-1).")
@click.option("--older-than", metavar="AGE", help="Prune memories untouched for longer than AGE (e.g. 90d, 12h, 2w).")
@click.option("--category", "categories", multiple=True, type=InputChoice("SaveInput", "category"),
              help="Only these categories (repeatable). Default: all but preference and fact; with --inactive, all.")
@click.option("--inactive", is_flag=True, help="Prune inactive (superseded) memories.")
@click.option("--dry-run", is_flag=True, help="List what would be pruned; change nothing.")
@json_option
@pass_state
def prune(state: State, profile: str, staleness_above: float | None, older_than: str | None,
          categories: tuple[str, ...], inactive: bool, dry_run: bool, as_json: bool) -> None:
    """Delete memories by staleness, age or state (every criterion given must hold).

    Deletions go through the normal delete path, so they reach the bucket. Preferences and facts
    are never pruned unless named with --category, or superseded (--inactive)."""
    rule = RetentionRule.build(staleness_above=staleness_above, older_than=older_than,
                               categories=categories, inactive=inactive)
    pruned = state.bank().prune(profile, rule, dry_run=dry_run)
    if as_json:
        echo_json({"dryRun": dry_run, "count": len(pruned), "pruned": [p.to_dict() for p in pruned]})
        return
    if pruned:
        rows = [(p.memory.id, p.memory.category, shown_summary(p.memory.summary, p.memory.processed_content), p.reason)
                for p in pruned]
        click.echo(table(rows, ("id", "category", "summary", "why")))
    verb = "would prune" if dry_run else "pruned"
    click.echo(f"{verb} {plural(len(pruned), 'memory')} of {profile}")
