"""Shared pieces of the CLI: the root group, bank opening, output and error translation.

Output conventions (docs/cli.md): tables with aligned columns and relative times, cut cells
ending in ``…``, colour only on a terminal and never with ``NO_COLOR`` set, and ``--json`` with
ISO times and floats rounded to 6 decimals. The library is imported when a command runs, not at
start-up, so that ``memlocal --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any, Callable, Final, Sequence, TypeVar

import click

from ...config import Config
from ...errors import CorruptDatabaseError, MemoryBankError, StoreError, ValidationError, fold_whitespace
from ...humanize import ellipsize, round_floats
from ...model import CATEGORIES

if TYPE_CHECKING:
    from ...bank.facade import MemoryBank
    from ...model import Memory

F = TypeVar("F", bound=Callable[..., Any])

COMMAND_ENTRY_POINTS = "memlocal.commands"

# Where each built-in command lives (a sibling module whose import registers it on ``main``). A
# command's module is imported when that command runs, never at start-up: a one-shot ``memlocal
# save`` loads only what a save needs (tests/test_cli_startup.py pins the diet).
COMMAND_MODULES: dict[str, str] = {
    "save": "memories", "get": "memories", "list": "memories", "delete": "memories", "stats": "memories",
    "recall": "recall", "inject": "recall", "automation": "recall",
    "history": "hygiene", "restore": "hygiene", "prune": "hygiene", "redact": "hygiene",
    "export": "portability", "import": "portability",
    "profile": "profile_cmd", "config": "config_cmd", "audit": "audit_cmd", "mcp": "mcp_cmd", "serve": "serve",
    "bridge": "bridge",
}


class State:
    """Per-invocation state: the global flags, the resolved config and a lazily opened bank."""

    def __init__(self, db: str | None, config_path: str | None) -> None:
        self.db = db
        self.config_path = config_path
        self._bank: MemoryBank | None = None

    @cached_property
    def config(self) -> Config:
        return Config.load(self.config_path, overrides={"store.path": self.db})

    def bank(self) -> MemoryBank:
        if self._bank is None:
            from ...bank.facade import MemoryBank

            check_db_folder(self.config)
            self._bank = MemoryBank.open(config=self.config)
        return self._bank

    def close(self) -> None:
        if self._bank is not None:
            self._bank.close()
            self._bank = None


def check_db_folder(config: Config) -> None:
    """A database path the user chose (``--db``, ``MEMLOCAL_DB``, ``store.path``) in a folder that
    does not exist: the folder is created, and one line on stderr says so, so that a typo does not
    silently start an empty bank elsewhere while a fresh runner's new data dir still just works.
    A path under a file is a ``StoreError`` (one line on the CLI; ``serve`` answers 503). The
    default location, the user data dir, is created quietly on first use as before."""
    source = config.source("store.path")
    if source == "default" or not config.get_str("store.path"):
        return
    path = config.db_path
    folder = path.parent
    if folder.is_dir():
        return
    named = "--db" if source == "flag" else source.removeprefix("env:") if source.startswith("env:") else f"store.path ({source})"
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        if not folder.is_dir():
            raise StoreError(f"cannot open database {path} (from {named}): {folder} is not a folder") from None
        return  # another process made it meanwhile
    except OSError as exc:
        raise StoreError(f"cannot open database {path} (from {named}): cannot create {folder}: "
                         f"{exc.strerror or exc}") from None
    click.echo(f"created the folder {folder} for the database {path} (from {named})", err=True)


@cache
def _command_plugins() -> dict[str, Any]:
    """The commands other packages register (by entry point), read once per process: reading
    every installed distribution's metadata costs ~15 ms."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=COMMAND_ENTRY_POINTS)}


class WrappingGroup(click.Group):
    """A command group whose ``--help`` lists each command with its first sentence in full
    (click cuts it to fit one line with "..."); a long one wraps. Every group of the CLI is one:
    ``main``, the groups made with ``@main.group()``, and a plugin's plain ``click.Group``."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class MemlocalGroup(WrappingGroup):
    """Translates library errors into one stderr line and a non-zero exit (never a traceback),
    and adds commands registered by other packages through entry points."""

    group_class = WrappingGroup  # ``@main.group()``: the help of ``memlocal automation`` wraps too

    def _plugins(self) -> dict[str, Any]:
        return _command_plugins()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMAND_MODULES) | set(self._plugins()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is None and cmd_name in COMMAND_MODULES:
            from importlib import import_module

            import_module(f"{__package__}.{COMMAND_MODULES[cmd_name]}")  # registers it on ``main``
            cmd = super().get_command(ctx, cmd_name)
        if cmd is None:
            ep = self._plugins().get(cmd_name)
            if ep is not None:
                cmd = ep.load()
                if type(cmd) is click.Group:  # a plugin's plain group: its help wraps as ours does
                    cmd.__class__ = WrappingGroup
        return cmd

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the CLI, printing every error, usage errors included, as one line on stderr.

        memlocal's own warnings (the start-up one of a bank without a bucket, a sick bucket's)
        are held until the command ends (``memlocal.logs.hold_warnings``): printed after a
        command that succeeded, dropped after one that failed, whose one error line says what
        matters. Long-running commands configure logging, which prints them at once."""
        from ...logs import hold_warnings

        held = hold_warnings()
        try:
            self._run(*args, **kwargs)
        except SystemExit as exc:
            held.finish(show=exc.code in (0, None))
            raise
        except BaseException:
            held.finish(show=False)
            raise

    def _run(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("standalone_mode", None)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        except click.exceptions.Abort:
            click.echo("Error: aborted", err=True)
            sys.exit(1)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"Error: {exc.format_message()}{hint}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"Error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemoryBankError as exc:
            message = str(exc)
            if isinstance(exc, CorruptDatabaseError) and _has_bucket(ctx):
                message += "; the bucket then refills it: `memlocal sync run` pulls every synced memory"
            raise click.ClickException(message) from None


def _has_bucket(ctx: click.Context) -> bool:
    """Whether the command's configuration names a bucket (the corrupt-database hint offers a
    pull only then)."""
    state = ctx.obj
    try:
        return isinstance(state, State) and bool(state.config.bucket.name)
    except MemoryBankError:
        return False


@click.group(cls=MemlocalGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", type=click.Path(dir_okay=False),
              help="SQLite database file (env MEMLOCAL_DB; default: in the user data dir).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML config file (else MEMLOCAL_CONFIG, else the user config dir).")
@click.version_option(package_name="memlocal")
@click.pass_context
def main(ctx: click.Context, db: str | None, config_path: str | None) -> None:
    """memlocal: a local-first Memory Bank for AI agents."""
    if os.environ.get("NO_COLOR"):  # https://no-color.org: any non-empty value
        ctx.color = False
    state = State(db, config_path)
    ctx.obj = state
    ctx.call_on_close(state.close)


pass_state = click.make_pass_decorator(State)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
profile_option = click.option("--profile", "-p", required=True, help="The profile whose memories to use.")


class InputChoice(click.Choice):  # type: ignore[type-arg]
    """``click.Choice`` over the allowed values of a field of an input model (``memlocal.faces.inputs``,
    the one declaration of each input), e.g. ``InputChoice("SaveInput", "category")``. The model is
    read when the choices are first needed (the option is given, or the command's help is shown),
    so that start-up does not load pydantic."""

    def __init__(self, model: str, field: str) -> None:  # no super().__init__: ``choices`` is lazy
        self.model = model
        self.field = field
        self.case_sensitive = True

    @cached_property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        plain = _PLAIN_CHOICES.get((self.model, self.field))
        if plain is not None:
            return plain
        from .. import inputs

        return inputs.choices(getattr(inputs, self.model), self.field)


# Fields whose model takes its choices from a constant that loads without pydantic: a command
# given ``--category fact`` checks it without importing the input models (about a fifth of a
# save's start-up). tests/test_inputs.py asserts each equals what the model declares.
_PLAIN_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {("SaveInput", "category"): CATEGORIES}


def echo_json(data: Any) -> None:
    """Machine output: indented JSON, times as the data has them (ISO), floats to 6 decimals."""
    click.echo(json.dumps(round_floats(data), ensure_ascii=False, indent=2))


def dim(text: str) -> str:
    """Secondary text (units, sources, hints): dim on a terminal, plain otherwise."""
    return click.style(text, dim=True)


def good(text: str) -> str:
    return click.style(text, fg="green")


def warn(text: str) -> str:
    return click.style(text, fg="yellow")


def memory_state(m: Memory) -> str:
    """``active``, or ``inactive`` with the memory that superseded it."""
    if m.is_active:
        return "active"
    return f"superseded by {m.superseded_by}" if m.superseded_by else "inactive"


def empty_state(message: str) -> None:
    """What a command prints instead of a table with no rows."""
    click.echo(dim(message))


def read_text_arg(value: str | None) -> str | None:
    """``-`` reads standard input (for long inputs and pipes)."""
    if value == "-":
        data = sys.stdin.buffer.read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationError(f"standard input is not valid UTF-8 text (byte {exc.start})") from None
    return value


class Progress:
    """The CLI's one progress bar: click's, on stderr, opened on the first update.

    ``enabled=None`` shows it when stderr is a terminal (and not under CI) and the work has at
    least ``min_total`` steps; ``True`` always shows it, ``False`` never. Feed it relative steps
    (``advance``) or absolute ones (``update_to``, the sync engine's ``progress(done, total)``).
    """

    def __init__(self, label: str, enabled: bool | None = None, *, total: int = 0, min_total: int = 1) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty() and not os.environ.get("CI")
            self.min_total = min_total
        else:
            self.min_total = 1 if enabled else 0
        self.label = label
        self.enabled = enabled
        self.total = total
        self.done = 0
        self._bar: Any = None

    def _open(self) -> bool:
        if self._bar is None and self.enabled and self.total >= self.min_total:
            self._bar = click.progressbar(length=self.total, label=self.label, file=sys.stderr, show_pos=True)
            self._bar.__enter__()
        return self._bar is not None

    def advance(self, steps: int = 1) -> None:
        self.update_to(self.done + steps, self.total)

    def update_to(self, done: int, total: int) -> None:
        self.total = total
        if self._open():
            self._bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The narrowest a column is cut to when the table must fit the terminal.
MIN_COLUMN = 8


def terminal_width() -> int:
    """The width tables fit: ``COLUMNS`` when set, else the terminal's when standard output is
    one; 0 otherwise (a pipe or a file: nothing is narrowed)."""
    import shutil

    value = os.environ.get("COLUMNS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return shutil.get_terminal_size((0, 0)).columns if sys.stdout.isatty() else 0


# Columns whose cells are never cut, whatever the width: an id must stay whole to be copied into
# ``get``, ``delete`` or ``history`` (a cut ``mem-0b0…`` is useless).
WHOLE_COLUMNS: Final = ("id",)


def _fitted(widths: list[int], headers: Sequence[str], room: int, fixed: set[int]) -> list[int]:
    """``widths`` with the widest cuttable column narrowed, one character at a time, until the
    row fits ``room`` or every cuttable column is at ``MIN_COLUMN`` (or its header)."""
    target = list(widths)
    while sum(target) + 2 * (len(target) - 1) > room:
        cuttable = [i for i in range(len(target)) if i not in fixed
                    and target[i] > max(MIN_COLUMN, len(headers[i]))]
        if not cuttable:
            break  # every column at its narrowest: the line wraps (ids and numbers stay whole)
        target[max(cuttable, key=lambda i: target[i])] -= 1
    return target


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *, max_width: int | None = 60,
          right: Sequence[str] = (), optional: Sequence[str] = ()) -> str:
    """An aligned text table with a dim header; cells are folded to one line and cut to
    ``max_width`` characters with ``…`` (``None``: never cut, for paths and keys); columns named
    in ``right`` (numbers) are right-aligned. A table of cut cells fits the terminal's width
    (:func:`terminal_width`): its widest text columns are cut further, to ``MIN_COLUMN`` at
    least; ids (``WHOLE_COLUMNS``) and numbers (``right``) are never cut. When that is not
    enough, the ``optional`` columns are left out, and a dim last line names them."""
    whole = set(WHOLE_COLUMNS) | set(right)
    cells = [[fold_whitespace(c) if not max_width or h in whole else ellipsize(str(c), max_width)
              for c, h in zip(row, headers)] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    room = terminal_width()
    dropped: list[str] = []
    if max_width and room and cells:
        fixed = {i for i, h in enumerate(headers) if h in whole}
        target = _fitted(widths, headers, room, fixed)
        if optional and sum(target) + 2 * (len(target) - 1) > room:
            keep = [i for i, h in enumerate(headers) if h not in optional]
            dropped = [h for h in headers if h in optional]
            headers = [headers[i] for i in keep]
            cells = [[row[i] for i in keep] for row in cells]
            widths = [widths[i] for i in keep]
            fixed = {i for i, h in enumerate(headers) if h in whole}
            target = _fitted(widths, headers, room, fixed)
        if target != widths:
            cells = [[ellipsize(c, w) if len(c) > w else c for c, w in zip(row, target)] for row in cells]
            widths = target

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if h in right else v.ljust(w)
                         for v, w, h in zip(values, widths, headers)).rstrip()

    out = [dim(line(headers)), dim(line(["─" * w for w in widths]))]
    out += [line(row) for row in cells]
    if dropped:
        out.append(dim(f"(not shown at {room} columns: {', '.join(dropped)}; --json has them)"))
    return "\n".join(out)
