"""``memlocal recall|inject|automation``: relevance, prompt injection and automation notes."""

from __future__ import annotations

import click

from ._common import State, echo_json, json_option, main, pass_state, profile_option, read_text_arg, table


@main.command()
@profile_option
@click.argument("query")
@click.option("--limit", type=int, default=None, help="Most results (default: recall.limit, 8).")
@click.option("--min-score", type=float, default=None, help="Lowest score returned (default: recall.min_score, 0.05).")
@json_option
@pass_state
def recall(state: State, profile: str, query: str, limit: int | None, min_score: float | None, as_json: bool) -> None:
    """Rank the profile's memories for QUERY, with the score breakdown ('-' reads stdin).

    Counts as a use of every memory returned (accessCount + 1), like the memory_recall tool.
    """
    results = state.bank().recall(profile, read_text_arg(query) or "", limit=limit, min_score=min_score)
    if as_json:
        echo_json({"results": [r.to_dict() for r in results]})
        return
    if not results:
        click.echo("no memories matched")
        return
    rows = [
        (r.memory.id, f"{r.score:.3f}", f"{r.breakdown.recency:.3f}", f"{r.breakdown.usage:.3f}",
         f"{r.breakdown.topic:.3f}", f"{r.breakdown.confidence_mul:.2f}", r.memory.category, r.memory.summary)
        for r in results
    ]
    click.echo(table(rows, ("id", "score", "recency", "usage", "topic", "confMul", "category", "summary")))
    b = results[0].breakdown
    w = b.weights
    click.echo(f"weights: recency {w.recency:.3f}, usage {w.usage:.3f}, topic {w.topic:.3f}"
               f" (maturity {b.maturity:.2f})")


@main.command()
@profile_option
@click.argument("prompt")
@click.option("--tools", default="@memory", show_default=True,
              help="The profile's tools, comma-separated; injection needs @memory or a memory_* tool.")
@click.option("--query", help="Rank memories for this text instead of the prompt.")
@click.option("--context", "contexts", multiple=True,
              help="Operator-written context (repeatable; '-' reads stdin); goes in its own block.")
@click.option("--automation", "automation_id", help="Add this automation's note as a context block.")
@pass_state
def inject(state: State, profile: str, prompt: str, tools: str, query: str | None,
           contexts: tuple[str, ...], automation_id: str | None) -> None:
    """Print PROMPT as a run of the profile would receive it ('-' reads stdin)."""
    text = read_text_arg(prompt) or ""
    ctx = [read_text_arg(c) or "" for c in contexts]
    click.echo(state.bank().inject(profile, tools, text, query=query, contexts=ctx, automation_id=automation_id))


@main.group()
def automation() -> None:
    """Read and correct an automation's note (one short note per automation id)."""


@automation.command("get")
@click.argument("automation_id")
@json_option
@pass_state
def automation_get(state: State, automation_id: str, as_json: bool) -> None:
    """Print the note (nothing, and exit 0, when there is none)."""
    note = state.bank().automations.get(automation_id)
    if as_json:
        echo_json(note.to_dict() if note else {"automationId": automation_id, "note": None, "updatedAt": None})
    elif note is not None:
        click.echo(note.note)


@automation.command("set")
@click.argument("automation_id")
@click.argument("text")
@json_option
@pass_state
def automation_set(state: State, automation_id: str, text: str, as_json: bool) -> None:
    """Replace the note with TEXT ('-' reads stdin; an empty TEXT clears the note)."""
    note = state.bank().automations.put(automation_id, read_text_arg(text) or "")
    if as_json:
        echo_json(note.to_dict() if note else {"automationId": automation_id, "note": None, "updatedAt": None})
    elif note is None:
        click.echo(f"cleared the note of {automation_id}")
    else:
        click.echo(f"saved the note of {automation_id} ({len(note.note.encode('utf-8'))} bytes)")


@automation.command("clear")
@click.argument("automation_id")
@json_option
@pass_state
def automation_clear(state: State, automation_id: str, as_json: bool) -> None:
    """Remove the note."""
    existed = state.bank().automations.clear(automation_id)
    if as_json:
        echo_json({"automationId": automation_id, "cleared": existed})
    else:
        click.echo(f"cleared the note of {automation_id}" if existed else f"{automation_id} had no note")
