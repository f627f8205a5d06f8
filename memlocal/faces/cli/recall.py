"""``memlocal recall|inject|automation``: relevance, prompt injection and automation notes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ...humanize import ago, plural, shown_summary
from ._common import State, dim, echo_json, empty_state, json_option, main, pass_state, profile_option, read_text_arg, table

if TYPE_CHECKING:
    from ...relevance.scoring import Breakdown, ScoredMemory

def weights_line(b: Breakdown) -> str:
    """The weights in force and why: usage weighs in as the profile's memories get used."""
    from ...relevance.scoring import MATURITY_ACCESSES as mature_after  # the ramp: docs/relevance.md, "Maturity"

    w = b.weights
    line = f"weights: recency {w.recency:.2f}, usage {w.usage:.2f}, topic {w.topic:.2f}"
    if b.maturity >= 1:
        return line + dim("  (maturity 1.00: a well-used profile, the spec's 0.35 / 0.30 / 0.35)")
    uses = round(b.maturity * mature_after)
    return (line + dim(f"  (maturity {b.maturity:.2f}: {uses} of {mature_after} recorded uses)") + "\n"
            + dim("usage weighs in as the profile's memories are recalled, reaching 0.35 / 0.30 / 0.35 "
                  f"after {mature_after} uses"))


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
    from ...model import RecallQuery

    results = state.bank().recall(RecallQuery(profile, read_text_arg(query) or "", limit, min_score))
    if as_json:
        echo_json({"results": [r.to_dict() for r in results]})
        return
    if not results:
        empty_state("no memories matched")
        return
    gated = any(r.evidence is not None for r in results)
    rows = [
        (i, r.memory.id, evidence_cell(r), *((f"{r.evidence.rank:.4f}" if r.evidence is not None else "-",) if gated else ()),
         f"{r.score:.3f}", f"{r.breakdown.recency:.3f}", f"{r.breakdown.usage:.3f}",
         f"{r.breakdown.topic:.3f}", f"{r.breakdown.confidence_mul:.2f}", r.memory.category,
         shown_summary(r.memory.summary, r.memory.processed_content))
        for i, r in enumerate(results, 1)
    ]
    rank = ("rank",) if gated else ()
    click.echo(table(rows, ("#", "id", "evidence", *rank, "score", "recency", "usage", "topic", "confMul", "category",
                            "summary"),
                     right=("#", *rank, "score", "recency", "usage", "topic", "confMul"),
                     optional=("recency", "usage", "topic", "confMul")))
    if gated:
        click.echo(dim("ordered by evidence, not by score: a query word shared before a [topic cluster] alone, then "
                       "the rank (the topic, for a fact per its length, with a date the query names), then the score "
                       "(docs/relevance.md)"))
    else:
        click.echo(dim("ordered by score (ranking.mode = spec)"))
    click.echo(weights_line(results[0].breakdown))


def evidence_cell(r: "ScoredMemory") -> str:
    """What the query and the memory share: the query's words as written, then [clusters];
    ``-`` with none."""
    if r.evidence is None:
        return "-"
    return " ".join([*r.evidence.terms, *(f"[{c}]" for c in r.evidence.clusters)]) or "-"


@main.command()
@profile_option
@click.argument("prompt")
@click.option("--tools", default="@memory", show_default=True,
              help="The profile's tools, comma-separated; injection needs @memory or a memory_* tool.")
@click.option("--query", help="Rank memories for this text instead of the prompt.")
@click.option("--context", "contexts", multiple=True,
              help="Operator-written context (repeatable; '-' reads stdin); goes in its own block.")
@click.option("--automation", "automation_id", help="Add this automation's note as a context block.")
@json_option
@pass_state
def inject(state: State, profile: str, prompt: str, tools: str, query: str | None,
           contexts: tuple[str, ...], automation_id: str | None, as_json: bool) -> None:
    """Print PROMPT as a run of the profile would receive it ('-' reads stdin).

    With --json: {"profile", "prompt" (the input), "injected" (the final prompt), "partial"
    (why the memories came from part of the bucket, a fresh host's pull still running; null)}.
    """
    text = read_text_arg(prompt) or ""
    ctx = [read_text_arg(c) or "" for c in contexts]
    bank = state.bank()
    final = bank.inject(profile, tools, text, query=query, contexts=ctx, automation_id=automation_id)
    if as_json:
        echo_json({"profile": profile, "prompt": text, "injected": final, "partial": bank.partial})
    else:
        click.echo(final)


@main.group()
def automation() -> None:
    """Read and correct an automation's note (one short note per automation id)."""


def _note_dict(automation_id: str, note: Any) -> dict[str, Any]:
    return note.to_dict() if note is not None else {"automationId": automation_id, "note": None, "updatedAt": None}


@automation.command("list")
@json_option
@pass_state
def automation_list(state: State, as_json: bool) -> None:
    """Every automation that has a note, most recently written first."""
    notes = state.bank().automations.list()
    if as_json:
        echo_json({"automations": [n.to_dict() for n in notes]})
        return
    if not notes:
        empty_state("no automation notes yet (write one with 'memlocal automation set ID TEXT')")
        return
    click.echo(table([(n.automation_id, ago(n.updated_at), n.note) for n in notes], ("automation", "written", "note")))
    click.echo(dim(plural(len(notes), "note")))


@automation.command("get")
@click.argument("automation_id")
@json_option
@pass_state
def automation_get(state: State, automation_id: str, as_json: bool) -> None:
    """Print the note (nothing, and exit 0, when there is none)."""
    note = state.bank().automations.get(automation_id)
    if as_json:
        echo_json(_note_dict(automation_id, note))
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
        echo_json(_note_dict(automation_id, note))
    elif note is None:
        click.echo(f"cleared the note of {automation_id}")
    else:
        click.echo(f"saved the note of {automation_id} ({plural(len(note.note.encode('utf-8')), 'byte')})")


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
