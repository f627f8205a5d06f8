"""``memlocal save|get|list|delete|stats``: the basic memory commands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ...humanize import ago, plural, shown_summary
from ._common import (
    InputChoice,
    State,
    dim,
    echo_json,
    empty_state,
    memory_state,
    good,
    json_option,
    main,
    pass_state,
    profile_option,
    read_text_arg,
    table,
)

if TYPE_CHECKING:
    from ...model import Memory

# The widest category name, so that one save after another prints aligned columns.
_CATEGORY_WIDTH = len("preference")


def _shown_value(key: str, value: Any, m: Memory) -> str:
    """A field of ``get`` in the CLI's own words: ``never`` for a memory never recalled (never a
    placeholder date), ``true``/``false``, and numbers as the tables print them."""
    if key == "lastAccessedAt" and m.last_accessed_at is None:
        return "never"
    if key in ("createdAt", "lastAccessedAt"):
        when = m.created_at if key == "createdAt" else m.last_accessed_at
        return f"{value} {dim('(' + ago(when) + ')')}"
    return shown_number(key, value)


def shown_number(key: str, value: Any) -> str:
    """The one text form of a value in the CLI's tables and ``get``: booleans as ``true`` and
    ``false``, a confidence (and recall's multiplier) with 2 decimals, every other fraction (a
    staleness, a score and its parts) with 3; JSON keeps 6 decimals (docs/cli.md)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) or key in ("confidence", "stalenessScore"):
        return f"{float(value):.2f}" if key in ("confidence", "confMul") else f"{float(value):.3f}"
    return str(value)


def _show_memory(m: Memory) -> str:
    from ...model import JSON_FIELDS

    d = m.to_dict()
    d = {**{k: d[k] for k in JSON_FIELDS}, **{k: v for k, v in d.items() if k not in JSON_FIELDS}}  # spec's first
    width = max(len(k) for k in d)
    return "\n".join(f"{dim(k.ljust(width))}  {_shown_value(k, v, m)}" for k, v in d.items())


def memory_line(m: Memory, note: str = "") -> str:
    """One memory on one line: id, category (padded) and summary, then a dim note."""
    line = f"{m.id}  {m.category:<{_CATEGORY_WIDTH}}  {shown_summary(m.summary, m.processed_content)}"
    return f"{line}  {dim(note)}" if note else line


@main.command()
@profile_option
@click.argument("raw_input", required=False)
@click.option("--content", help="Pre-structured content (becomes processedContent; skips the LLM).")
@click.option("--summary", help="At most 50 characters (default: the first 50 of the content).")
@click.option("--category", type=InputChoice("SaveInput", "category"))
@click.option("--confidence", type=float, help="In [0, 1] (default 1.0).")
@click.option("--no-llm", is_flag=True, help="Do not call the LLM processor even if ANTHROPIC_API_KEY is set.")
@click.option("--supersedes", metavar="ID", help="An active memory this one replaces (it becomes inactive).")
@click.option("--no-supersede", is_flag=True,
              help="Retire nothing on its own, even when this restates a memory's subject with a new value.")
@click.option("--quiet", "-q", is_flag=True,
              help="Print only the memory's id (for scripts: id=$(memlocal save -q -p P TEXT)).")
@json_option
@pass_state
def save(state: State, profile: str, raw_input: str | None, content: str | None, summary: str | None,
         category: str | None, confidence: float | None, no_llm: bool, supersedes: str | None,
         no_supersede: bool, quiet: bool, as_json: bool) -> None:
    """Save a memory. RAW_INPUT is free text; '-' reads it from standard input.

    A save that repeats an active memory stores nothing and prints that memory. A save that
    restates an active memory's subject with a changed value supersedes it (`memlocal restore`
    undoes that; --no-supersede prevents it)."""
    if raw_input is None and content is None:
        raise click.UsageError("nothing to save: give RAW_INPUT (the text; '-' reads standard input) or --content TEXT")
    text, content = read_text_arg(raw_input), read_text_arg(content)
    if not (text or "").strip() and not (content or "").strip():
        where = "standard input" if "-" in (raw_input, content) else "the text"
        raise click.UsageError(f"nothing to save: {where} is empty")
    from ...bank.saving import SaveRequest  # the bank's modules load with the bank, not for --help

    result = state.bank().save(SaveRequest(
        profile, text, content=content, summary=summary,
        category=category, confidence=confidence, use_llm=not no_llm, supersedes=supersedes,
        auto_supersede=False if no_supersede else None,
    ))
    if as_json:
        echo_json(result.to_dict())
        return
    m = result.memory
    if quiet:
        click.echo(m.id)
        return
    where = "in the bucket" if result.synced else "locally"
    if result.deduplicated:
        note = good(f"(already saved, {where})") if result.synced else dim(f"(already saved, {where})")
    else:
        note = good("(saved and in the bucket)") if result.synced else dim("(saved locally)")
    if m.supersedes and (supersedes or not result.deduplicated):
        note += f"  supersedes {m.supersedes}"
    redacted = f"  (redacted: {', '.join(result.redacted)})" if result.redacted else ""
    click.echo(f"{memory_line(m)}  {note}{redacted}")
    if result.superseded:
        click.echo(f"update: it restates {result.superseded} with a new value, which is now inactive "
                   f"(undo: memlocal restore {result.superseded})")
    if result.proposed_supersedes:
        click.echo(f"proposal: this may supersede {result.proposed_supersedes}; to apply it, repeat the save "
                   f"with --supersedes {result.proposed_supersedes}")


@main.command()
@profile_option
@click.argument("memory_id")
@json_option
@pass_state
def get(state: State, profile: str, memory_id: str, as_json: bool) -> None:
    """Show one memory with every field."""
    memory = state.bank().get(profile, memory_id)
    if as_json:
        echo_json(memory.to_dict())
    else:
        click.echo(_show_memory(memory))


@main.command("list")
@profile_option
@click.option("--limit", default=50, show_default=True, type=int)
@click.option("--offset", default=0, show_default=True, type=int)
@click.option("--all", "show_all", is_flag=True, help="Include inactive (superseded) memories, flagged.")
@json_option
@pass_state
def list_cmd(state: State, profile: str, limit: int, offset: int, show_all: bool, as_json: bool) -> None:
    """List active memories newest first (read-only: access counts are not touched).

    Superseded memories are inactive: never recalled or injected, listed only with --all."""
    page = state.bank().list(profile, limit=limit, offset=offset, active_only=not show_all)
    if as_json:
        echo_json(page.to_dict())
        return
    if not page.total:
        empty_state(f"no memories in profile {profile}")
        return
    if not len(page):
        empty_state(f"no memories past offset {page.offset} ({plural(page.total, 'memory')} in {profile})")
        return
    rows = [(m.id, m.category, shown_number("confidence", m.confidence), m.access_count, ago(m.created_at),
             shown_summary(m.summary, m.processed_content)) + ((memory_state(m),) if show_all else ()) for m in page]
    click.echo(table(rows, ("id", "category", "conf", "used", "created", "summary") + (("state",) if show_all else ()),
                     right=("conf", "used")))
    first = page.offset + 1
    stats = state.bank().stats()
    active = stats["perProfileActive"].get(profile, 0)
    superseded = stats["perProfile"].get(profile, 0) - active
    if not superseded:
        counted = plural(page.total, "memory")
    elif show_all:
        counted = f"{plural(page.total, 'memory')} ({active} active, {superseded} superseded)"
    else:
        counted = f"{page.total} active {'memory' if page.total == 1 else 'memories'} ({superseded} superseded: --all lists them)"
    click.echo(dim(f"{first}–{page.offset + len(page)} of {counted}, newest first"))


@main.command()
@profile_option
@click.argument("memory_id")
@json_option
@pass_state
def delete(state: State, profile: str, memory_id: str, as_json: bool) -> None:
    """Delete one memory."""
    memory = state.bank().delete(profile, memory_id)
    if as_json:
        echo_json({"deleted": memory.id})
    else:
        click.echo(f"deleted {memory.id}")


@main.command()
@json_option
@pass_state
def stats(state: State, as_json: bool) -> None:
    """Memory counts: total, active and superseded, per profile."""
    data = state.bank().stats()
    if as_json:
        echo_json(data)
        return
    click.echo(f"{plural(data['totalMemories'], 'memory')} in {plural(data['profilesWithMemory'], 'profile')}"
               f" ({data['activeMemories']} active, {data['supersededMemories']} superseded)"
               f"  {dim(str(state.bank().path))}")
    if data["perProfile"]:
        active = data["perProfileActive"]
        rows = [(p, active[p], n - active[p]) for p, n in sorted(data["perProfile"].items())]
        click.echo(table(rows, ("profile", "active", "superseded"), right=("active", "superseded")))
