"""``memlocal history``, ``memlocal restore``, ``memlocal prune`` and ``memlocal redact``: supersession
lineage, its undo, opt-in retention, and the rescan of what is stored for credentials."""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING, Any

import click

from ...humanize import ago, plural, shown_summary
from ...hygiene.rules import RetentionRule
from ._common import InputChoice, State, echo_json, json_option, main, memory_state, pass_state, profile_option, table

if TYPE_CHECKING:
    from ...bank.rescan import RescanReport


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


@main.command("redact")
@click.option("--rescan", is_flag=True, help="Redact what is already stored with today's detectors and secrets.extra_patterns.")
@click.option("--profile", "-p", default=None,
              help="Only this profile's memories (default: every profile, the automation notes and the audit rows).")
@click.option("--dry-run", is_flag=True, help="List what would be redacted; change nothing.")
@json_option
@click.pass_context
def redact_cmd(ctx: click.Context, rescan: bool, profile: str | None, dry_run: bool, as_json: bool) -> None:
    """Rescan stored memories (every version), automation notes and audit rows for credentials.

    What changed is rewritten and written through to the bucket like any update, then a sync pass
    writes the profile's snapshot again; the old bytes are purged from the database file (VACUUM).
    Prints what changed by kind and id, never the values (docs/hygiene.md, "Rescan")."""
    if not rescan:
        raise click.UsageError("give --rescan (the one thing `memlocal redact` does today)")
    state = ctx.find_object(State)
    assert state is not None
    report = state.bank().rescan(profile, dry_run=dry_run)
    passes = sync_after_rescan(ctx, report)
    print_rescan(report, passes, as_json=as_json)


def sync_after_rescan(ctx: click.Context, report: RescanReport) -> list[dict[str, Any]]:
    """With a bucket, after a rescan that changed something: two sync passes through the
    installed ``memlocal sync run`` (the first pushes what the write-through did not, the second
    finds the profile agreeing with the bucket and writes its snapshot from the redacted objects,
    deleting the old one). Returns their reports; a failed pass leaves the rest to the next one."""
    state = ctx.find_object(State)
    assert state is not None
    if report.dry_run or not report.changed or state.bank().replicator is None:
        return []
    group = main.get_command(ctx, "sync")
    run = group.get_command(ctx, "run") if isinstance(group, click.Group) else None
    if run is None:
        return []
    out: list[dict[str, Any]] = []
    for _ in range(2):
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer):
                ctx.invoke(run, force=False, reupload=False, full=True, profiles=(), wait_s=30.0, progress=False,
                           as_json=True)
        except click.ClickException as exc:
            out.append({"result": "failed", "reason": exc.format_message()})
            break
        except click.exceptions.Exit:  # a pass that ends with its own exit code (a guarded one: 3)
            out.append(json.loads(buffer.getvalue() or "{}"))  # its JSON is written before it exits
            break
        out.append(json.loads(buffer.getvalue() or "{}"))
    return out


def print_rescan(report: RescanReport, passes: list[dict[str, Any]], *, as_json: bool) -> None:
    """A rescan's report: what changed by id and kind (never a value), the purge, the passes."""
    if as_json:
        echo_json({**report.to_dict(), "syncPasses": [{"result": p.get("result"), "reason": p.get("reason")}
                                                      for p in passes]})
        return
    for change in report.changed:
        where = f" ({change.profile})" if change.profile else ""
        click.echo(f"{change.what} {change.id}{where}: {', '.join(change.kinds)}")
    scanned = report.scanned
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.by_kind().items()))
    verb = "would redact" if report.dry_run else "redacted"
    click.echo(f"{verb} {plural(len(report.changed), 'thing')}{f' ({kinds})' if kinds else ''} in "
               f"{plural(scanned['memories'], 'memory')}, {plural(scanned['notes'], 'note')} and "
               f"{plural(scanned['audit'], 'audit row')}")
    if report.purged:
        click.echo(f"purged the old text from the database file (VACUUM, {report.purge_s:.2f} s)")
    for p in passes:
        click.echo(f"sync pass: {p.get('result')}" + (f" ({p['reason']})" if p.get("reason") else ""))
