"""``memlocal export`` and ``memlocal import``: JSON Lines, one memory a line."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import IO, TYPE_CHECKING, Iterator

import click

from ...humanize import plural
from ._common import Progress, State, echo_json, json_option, main, pass_state

if TYPE_CHECKING:
    from ...model import Memory


@main.command("export")
@click.option("--profile", "-p", help="Only this profile (default: every profile).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), help="File to write (default: stdout).")
@pass_state
def export_cmd(state: State, profile: str | None, output: str | None) -> None:
    """Write memories as JSON Lines, one camelCase memory object a line."""
    from ...bank.portability import export_memories, write_jsonl

    bank = state.bank()
    total = bank.stats()["perProfile"].get(profile, 0) if profile else bank.stats()["totalMemories"]
    out: IO[str]
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(output, "w", encoding="utf-8")) if output else sys.stdout
        bar = stack.enter_context(Progress("exporting", total=total))

        def counted() -> Iterator[Memory]:
            for memory in export_memories(bank, profile):
                bar.advance()
                yield memory

        count = write_jsonl(counted(), out)
    if output:
        click.echo(f"exported {plural(count, 'memory')} to {output}", err=True)


@main.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--profile", "-p", help="Import every memory into this profile (default: each line's profileName).")
@click.option("--rescan", is_flag=True,
              help="Then rescan what is stored (of --profile, else everything) as `memlocal redact --rescan` does.")
@json_option
@pass_state
def import_cmd(state: State, file: str, profile: str | None, as_json: bool, rescan: bool = False) -> None:
    """Import JSON Lines written by `memlocal export` (or another implementation of the spec).

    Every line is validated; bad lines are reported with their number and reason, the rest are
    imported with their ids and timestamps. A line whose id belongs to another profile's memory
    here is imported as a copy under a new id. Importing the same file twice creates no duplicate.
    """
    from ...bank.portability import import_jsonl

    bank = state.bank()
    size = os.path.getsize(file) if file != "-" else 0
    with contextlib.ExitStack() as stack:
        # Bytes, so that a line of invalid UTF-8 is reported by number like any other bad line.
        handle = sys.stdin.buffer if file == "-" else stack.enter_context(open(file, "rb"))
        bar = stack.enter_context(Progress("importing", total=size))
        interrupted = stack.enter_context(_first_interrupt())
        report = import_jsonl(bank, handle, profile=profile, progress=bar.advance, stop=interrupted.is_set)
    # An import that was interrupted or stopped is not rescanned: running it again continues it.
    rescan = rescan and report.interrupted is None and not report.stopped
    if rescan:  # the same pass as `memlocal redact --rescan` (docs/hygiene.md, "Rescan")
        from .hygiene import print_rescan, sync_after_rescan

        ctx = click.get_current_context()
        rescanned = bank.rescan(profile)
        passes = sync_after_rescan(ctx, rescanned)
    if as_json:
        echo_json({**report.to_dict(), **({"rescan": rescanned.to_dict()} if rescan else {})})
    elif report.stopped:  # not JSON Lines: one line, not one per "line" of a binary file
        click.echo(f"Error: {file} is {report.stopped}; {report.summary()}", err=True)
    else:
        for line_no, reason in report.rejected[:SHOWN_REJECTIONS]:
            click.echo(f"line {line_no}: {reason}", err=True)
        if len(report.rejected) > SHOWN_REJECTIONS:
            click.echo(f"... and {len(report.rejected) - SHOWN_REJECTIONS} more rejected lines (--json lists "
                       "every one)", err=True)
        click.echo(report.summary())
        if rescan:
            print_rescan(rescanned, passes, as_json=False)
    if report.interrupted is not None:
        sys.exit(130)  # as a shell reports a command Ctrl-C ended
    if report.rejected or report.stopped:
        sys.exit(1)


# Rejected lines printed one by one; the rest are counted in one line.
SHOWN_REJECTIONS = 20


@contextlib.contextmanager
def _first_interrupt() -> Iterator[threading.Event]:
    """While an import runs, the first Ctrl-C (SIGINT) ends it between two lines, with what was
    read written and counted; a second one interrupts at once, as usual. Off the main thread (a
    test's runner), nothing changes."""
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return

    def first(signum: int, frame: object) -> None:
        event.set()
        signal.signal(signal.SIGINT, previous)
        click.echo("interrupted: finishing the lines read so far (Ctrl-C again to stop at once)", err=True)

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield event
    finally:
        signal.signal(signal.SIGINT, previous)
