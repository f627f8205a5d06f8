"""``memlocal export`` and ``memlocal import``: JSON Lines, one memory a line."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import IO, Iterator

import click

from ..humanize import plural
from ._common import State, echo_json, json_option, main, pass_state


def _interactive() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


@contextlib.contextmanager
def _progress(total: int, label: str) -> Iterator[object]:
    """A progress bar on stderr when it is a terminal; a silent stand-in otherwise."""
    if _interactive() and total > 0:
        with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
            yield bar
    else:
        yield None


@main.command("export")
@click.option("--profile", "-p", help="Only this profile (default: every profile).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), help="File to write (default: stdout).")
@pass_state
def export_cmd(state: State, profile: str | None, output: str | None) -> None:
    """Write memories as JSON Lines, one camelCase memory object a line."""
    from ..portability import export_memories, write_jsonl

    bank = state.bank()
    total = bank.stats()["perProfile"].get(profile, 0) if profile else bank.stats()["totalMemories"]
    out: IO[str]
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(output, "w", encoding="utf-8")) if output else sys.stdout
        bar = stack.enter_context(_progress(total, "exporting"))

        def counted() -> Iterator[object]:
            for memory in export_memories(bank, profile):
                if bar is not None:
                    bar.update(1)  # type: ignore[attr-defined]
                yield memory

        count = write_jsonl(counted(), out)  # type: ignore[arg-type]
    if output:
        click.echo(f"exported {plural(count, 'memory')} to {output}", err=True)


@main.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--profile", "-p", help="Import every memory into this profile (default: each line's profileName).")
@json_option
@pass_state
def import_cmd(state: State, file: str, profile: str | None, as_json: bool) -> None:
    """Import JSON Lines written by `memlocal export` (or another implementation of the spec).

    Every line is validated; bad lines are reported with their number and reason, the rest are
    imported with their ids and timestamps. Importing the same file twice creates no duplicate.
    """
    from ..portability import import_jsonl

    bank = state.bank()
    size = os.path.getsize(file) if file != "-" else 0
    with contextlib.ExitStack() as stack:
        # Bytes, so that a line of invalid UTF-8 is reported by number like any other bad line.
        handle = sys.stdin.buffer if file == "-" else stack.enter_context(open(file, "rb"))
        bar = stack.enter_context(_progress(size, "importing"))
        progress = (lambda n: bar.update(n)) if bar is not None else None  # type: ignore[attr-defined]
        report = import_jsonl(bank, handle, profile=profile, progress=progress)
    if as_json:
        echo_json(report.to_dict())
    else:
        for line_no, reason in report.rejected:
            click.echo(f"line {line_no}: {reason}", err=True)
        click.echo(report.summary())
    if report.rejected:
        sys.exit(1)
