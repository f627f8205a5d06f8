"""``memlocal audit``: the injection audit trail (which runs saw which memories)."""

from __future__ import annotations

import click

from ...humanize import ago, shown_summary
from ._common import State, echo_json, json_option, main, pass_state, profile_option, table


@main.command()
@profile_option
@click.option("--memory", "memory_id", help="Only the runs whose block carried this memory id.")
@click.option("--limit", default=20, show_default=True, type=int, help="Most rows, newest first.")
@json_option
@pass_state
def audit(state: State, profile: str, memory_id: str | None, limit: int, as_json: bool) -> None:
    """What the profile's runs saw: each rendered memory block, newest first, with its size, its
    query's hash (never the query), how many memories each tier carried, and the memories
    themselves by summary: the query's evidence (the relevant tier) first, then the core ones
    every run carries. The first row answers "what did the last run see?"; --memory ID answers
    "which runs saw this memory?". --json gives the ids of each tier."""
    bank = state.bank()
    rows = bank.injections(profile, memory_id=memory_id, limit=limit)
    if as_json:
        echo_json({"injections": [r.to_dict() for r in rows]})
        return
    if not rows:
        click.echo("no recorded runs" + (f" saw {memory_id}" if memory_id else ""))
        return
    found = bank.get_many(profile, [i for r in rows for i in (*r.relevant, *r.core)])

    def named(memory_id: str) -> str:
        m = found.get(memory_id)
        return shown_summary(m.summary, m.processed_content) if m is not None else f"{memory_id} (deleted)"

    click.echo(table(
        [(ago(r.at), r.chars, r.query_hash, len(r.core), len(r.relevant),
          "; ".join(map(named, (*r.relevant, *r.core))) or "-") for r in rows],
        ("at", "chars", "query hash", "core", "relevant", "saw"), right=("chars", "core", "relevant"),
        max_width=200,
    ))
