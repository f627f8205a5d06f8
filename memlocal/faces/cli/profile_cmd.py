"""``memlocal profile copy|rename``: a whole profile under another name, with new ids."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ...humanize import plural
from ._common import State, dim, echo_json, json_option, main, pass_state

if TYPE_CHECKING:
    from ...bank.profiles import ProfileCopy


@main.group("profile")
def profile_group() -> None:
    """Copy or rename a profile (every memory, under new ids)."""


def _report(state: State, result: ProfileCopy, as_json: bool) -> None:
    if as_json:
        echo_json(result.to_dict())
        return
    verb = "renamed" if result.renamed else "copied"
    what = plural(len(result.ids), "memory")
    if state.bank().replicator is None:
        where = "local only"
    elif result.pending:
        where = f"{plural(result.pending, 'bucket write')} queued for the next sync pass"
    else:
        where = "in the bucket"
    if result.renamed:
        click.echo(f"{verb} {result.source} to {result.target}: {what} under new ids  {dim('(' + where + ')')}")
    else:
        click.echo(f"{verb} {what} of {result.source} to {result.target} under new ids  {dim('(' + where + ')')}")


@profile_group.command("copy")
@click.argument("source")
@click.argument("target")
@json_option
@pass_state
def profile_copy(state: State, source: str, target: str, as_json: bool) -> None:
    """Copy every memory of SOURCE into TARGET, a profile with no memories, under new ids.

    Each copy keeps its text, category, confidence, times, access counts and state; its
    supersession links point at the other copies and copiedFrom names its original. The copies
    are saves: with a bucket configured they are written through (or queued for the next sync)."""
    _report(state, state.bank().copy_profile(source, target), as_json)


@profile_group.command("rename")
@click.argument("source")
@click.argument("target")
@json_option
@pass_state
def profile_rename(state: State, source: str, target: str, as_json: bool) -> None:
    """Rename SOURCE to TARGET (a profile with no memories): copies under new ids, then the
    originals deleted, in one transaction; synced like any save and delete."""
    _report(state, state.bank().rename_profile(source, target), as_json)
