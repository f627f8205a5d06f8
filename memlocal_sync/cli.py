"""``memlocal sync run|daemon|status``, registered through the ``memlocal.commands`` entry point."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

import click

from memlocal.faces.cli.plugin import Progress, State, daemon_jobs, dim, echo_json, json_option, pass_state, table
from memlocal.humanize import plural, printable

if TYPE_CHECKING:  # the engine (boto3, the store) is imported when a command runs: `memlocal --help` stays fast
    from memlocal.plugins import ReplicatorStatus

    from .bucket import BucketSettings
    from .engine import SyncEngine

# `sync run` exits with this when the mass-delete guard held deletions back.
EXIT_GUARDED = 3
# Without --progress, a bar only for passes with at least this many actions, and only on a terminal.
PROGRESS_MIN_ACTIONS = 200


def _settings(state: State) -> BucketSettings | None:
    from .bucket import BucketSettings

    return BucketSettings.from_config(state.config)


def _process_start() -> float | None:
    """This process's start as a ``time.monotonic()`` value (Linux: /proc), else ``None``: a cron
    ``sync run`` counts its deadline (``sync.deadline_s``) from there, its start-up included."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.monotonic() - min(max(0.0, age), 3600.0)


def _engine(state: State) -> SyncEngine:
    from .engine import SyncEngine

    return SyncEngine(state.config, state.bank().replica)


@click.group("sync")
def sync_group() -> None:
    """Reconcile this host's memories with the bucket (memory/<profile>/<id>.json)."""


@sync_group.command("run")
@click.option("--force", is_flag=True, help="Apply local deletions that the mass-delete guard held back.")
@click.option("--reupload", is_flag=True,
              help="Forget what was synced: push every local memory the bucket lacks, pull the rest; deletes nothing.")
@click.option("--full", is_flag=True,
              help="List the whole bucket even if the change record says nothing changed (sees writers that keep no record).")
@click.option("--profile", "-p", "profiles", multiple=True, help="Only this profile (repeatable).")
@click.option("--wait", "wait_s", type=float, default=0.0, show_default=True,
              help="Seconds to wait for a pass that another process is running.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal).")
@json_option
@click.pass_context
def run_cmd(ctx: click.Context, force: bool, reupload: bool, full: bool, profiles: tuple[str, ...], wait_s: float,
            progress: bool | None, as_json: bool) -> None:
    """Run one reconciliation pass and exit: 0 when it completed, non-zero with the reason."""
    state = ctx.find_object(State)
    assert state is not None  # set by the memlocal root group
    from memlocal.model import validate_profile

    from .report import PassOptions

    for p in profiles:
        validate_profile(p)
    engine = _engine(state)
    bar = Progress("sync", False if (progress is None and as_json) else progress, min_total=PROGRESS_MIN_ACTIONS)
    try:
        report = engine.run_pass(PassOptions(profiles=profiles or None, force=force, reupload=reupload, full=full,
                                             progress=bar.update_to, lock_timeout=wait_s, started=_process_start()))
    finally:
        bar.close()
        engine.close()
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(report.summary())
        for note in report.notes:
            click.echo(f"  note: {note}")
        for s in report.skipped:
            click.echo(f"  skipped {printable(s['key'])}: {printable(s['reason'])}")  # (another host's key)
    if report.result == "guarded":
        click.echo(f"Error: sync stopped: {report.reason}", err=True)
        ctx.exit(EXIT_GUARDED)
    if not report.ok:
        raise click.ClickException(f"sync {report.result}: {report.reason}")


@sync_group.command("daemon")
@click.option("--interval", type=float, default=None, help="Seconds between passes (default: sync.interval_s).")
@click.option("-v", "--verbose", is_flag=True, help="Debug lines of memlocal's own (never libraries' or credentials).")
@pass_state
def daemon_cmd(state: State, interval: float | None, verbose: bool) -> None:
    """Sync every interval and soon after local writes, until SIGTERM/SIGINT (the pass in flight finishes)."""
    from .daemon import SyncDaemon
    from .engine import SyncEngine

    from memlocal.logs import configure_logging

    configure_logging(verbose, timestamps=True)
    config = state.config
    if interval is not None:
        config = config.with_overrides(sync__interval_s=interval)
    bank = state.bank()
    engine = SyncEngine(config, bank.replica)
    try:
        SyncDaemon(engine, interval_s=config.get_float("sync.interval_s"),
                   debounce_s=config.get_float("sync.debounce_s"), retention=bank.apply_retention,
                   jobs=daemon_jobs(state)).run()
    finally:
        engine.close()


def _when(stamp: str | None) -> str:
    """A recorded time as "5 min ago", with the exact time dim beside it."""
    from memlocal.errors import ValidationError
    from memlocal.humanize import ago
    from memlocal.model import parse_time

    try:
        when = parse_time(stamp)
    except ValidationError:  # a record written by another version: show it as it is
        return str(stamp)
    return f"{ago(when)} {dim(f'({stamp})')}" if when else "never"


def status_data(state: State) -> ReplicatorStatus:
    """Everything ``sync status`` shows, as JSON-ready data."""
    from .status import status_for

    return status_for(_settings(state), state.bank().replica)


@sync_group.command("status")
@json_option
@pass_state
def status_cmd(state: State, as_json: bool) -> None:
    """The bucket in use and where it came from, what is pending, the last pass, errors, skipped objects."""
    from .report import PassReport

    data = status_data(state)
    if as_json:
        echo_json(data)
        return
    b = data["bucket"]
    if b is None:
        click.echo("bucket:      none: local only (set INTERNAL_S3_BUCKET or S3_BUCKET, or bucket.name)")
    else:
        where = f" at {b['endpoint']}" if b["endpoint"] else ""
        click.echo(f"bucket:      {b['name']}{where} (from {b['source']})")
    click.echo(f"database:    {data['database']}")
    p = data["pending"]
    detail = (f"({plural(p['saves'], 'save')}, {plural(p['deletes'], 'deletion')}, "
              f"{plural(p['accessUpdates'], 'access update')}, {plural(p['automationNotes'], 'automation note')}; "
              f"{plural(p['outbox'], 'outbox entry', 'outbox entries')})")
    if b is None:  # nothing is queued for a bucket there is not: say so, not a growing count
        waiting = ", ".join(plural(n, noun) for n, noun in ((p["saves"], "save"), (p["deletes"], "deletion"),
                                                              (p["automationNotes"], "automation note")) if n)
        later = f" (a bucket configured later gets these {waiting} at its first pass)" if waiting else ""
        click.echo(f"pending:     nothing: no bucket is configured, so nothing is sent{later}")
    else:
        click.echo(f"pending:     {p['total']} {dim(detail)}")
    last = data["lastPass"]
    if last:
        report = PassReport(result=last.get("result", "?"), pages=last.get("pages", 0),
                            objects=last.get("objects", 0), duration_s=last.get("durationS", 0.0))
        report.counts.update(last.get("counts", {}))
        report.skipped = last.get("skipped", [])
        click.echo(f"last pass:   {_when(last.get('finishedAt'))} {report.summary()}")
        if last.get("reason"):
            click.echo(f"             {last['reason']}")
    else:
        click.echo("last pass:   never")
    err, resolved = data["lastError"], data.get("resolvedError")
    if err:
        click.echo(f"last error:  {_when(err['at'])} {err['message']}")
    elif resolved:
        click.echo(f"last error:  none {dim('(the one of ' + str(resolved['at']) + ' was cleared by a later pass)')}")
    else:
        click.echo("last error:  none")
    click.echo(f"pass running: {'yes' if data['passRunning'] else 'no'}")
    if b is not None:
        hydrated = data["hydrated"]
        click.echo(f"hydrated:    {_when(hydrated['at']) if hydrated else 'never (a bank opening here pulls the bucket first)'}")
        breaker = data["breaker"]
        if breaker["state"] == "closed":
            click.echo("breaker:     closed (saves write through)")
        else:
            until = "the next save probes the bucket" if breaker["state"] == "half-open" else f"until {breaker['openUntil']}"
            click.echo(f"breaker:     {breaker['state']}: saves on this host go to the outbox, {until} "
                       f"({plural(breaker['failures'], 'failure')}; {breaker['reason']})")
    rec = data["record"]
    if rec.get("listsInFullUntil"):
        click.echo(f"record:      listing in full on every pass until {rec['listsInFullUntil']}: {rec['why']}")
    elif rec.get("waitingFor") is not None:
        click.echo(f"record:      waiting for missing change segment {rec['waitingFor']} (listing in full meanwhile)")
    elif rec.get("cursor") is not None:
        click.echo(f"record:      following the change record (last segment applied: {rec['cursor']})")
    for problem in rec["problems"][-5:]:
        click.echo(f"             {_when(problem.get('at'))} {problem.get('what')}")
    if data["skipped"]:
        click.echo(f"skipped:     {plural(len(data['skipped']), 'object')}")
        click.echo(table([(printable(s["key"]), printable(s["reason"])) for s in data["skipped"]], ("key", "reason"),
                         max_width=None))
