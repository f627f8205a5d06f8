"""How the CLI reads: --json everywhere data is printed, empty states, plurals,
cut text with an ellipsis, relative times in tables and ISO in JSON, rounded floats, colour only
on a terminal and never with NO_COLOR, help that is not cut, a fast start (the serve banner:
test_api_serve.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import support
import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from memlocal.faces.cli import main
from memlocal.humanize import ellipsize, plural, round_floats, shown_summary

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LONG = "Send the weekly report to the whole team every Monday at 09:00 sharp, before standup"


def cli(db: Path, *args: str, color: bool = False, env: dict[str, str] | None = None, input: str | None = None) -> Result:
    result = CliRunner().invoke(main, ["--db", str(db), *args], color=color, env=env, input=input)
    assert result.exit_code == 0, result.output
    return result


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return support.run([sys.executable, "-m", "memlocal", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


def _commands(group: click.Group, ctx: click.Context, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            found.update(_commands(cmd, click.Context(cmd, parent=ctx), f"{prefix}{name} "))
        else:
            found[prefix + name] = cmd
    return found


# Commands that print no data of their own, or whose output already is a machine format.
NO_JSON = {
    "serve": "runs a server",
    "mcp": "speaks MCP on stdout",
    "sync daemon": "runs until stopped; logs to stderr",
    "export": "prints JSON Lines",
    "config example": "prints TOML",
}


def test_every_command_that_prints_data_takes_json() -> None:
    commands = _commands(main, click.Context(main))
    assert {"inject", "automation list", "sync status"} <= set(commands)
    missing = [name for name, cmd in commands.items()
               if name not in NO_JSON and "--json" not in {o for p in cmd.params for o in p.opts}]
    assert not missing, f"add --json to: {missing}"


def test_inject_json(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cli(db, "save", "-p", "ana", "--category", "preference", "Ana prefers answers in Portuguese")
    data = json.loads(cli(db, "inject", "-p", "ana", "--json", "Book a trip").output)
    assert data["profile"] == "ana" and data["prompt"] == "Book a trip"
    assert data["injected"].startswith("--- CONTEXT FROM MEMORY ---\n") and data["injected"].endswith("---\nBook a trip")
    assert cli(db, "inject", "-p", "ana", "Book a trip").output == data["injected"] + "\n"


def test_automation_list(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    empty = cli(db, "automation", "list")
    assert empty.output.startswith("no automation notes yet") and "─" not in empty.output
    assert json.loads(cli(db, "automation", "list", "--json").output) == {"automations": []}
    cli(db, "automation", "set", "nightly", "Run 12 stopped at page 3")
    cli(db, "automation", "set", "weekly", LONG + " " + LONG)
    human = cli(db, "automation", "list").output.splitlines()
    assert human[0].split() == ["automation", "written", "note"]
    assert human[2].startswith("weekly") and "just now" in human[2] and human[2].endswith("…")
    assert human[3].startswith("nightly") and human[3].endswith("Run 12 stopped at page 3")
    assert human[-1] == "2 notes"
    data = json.loads(cli(db, "automation", "list", "--json").output)["automations"]
    assert [a["automationId"] for a in data] == ["weekly", "nightly"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", data[0]["updatedAt"])


def test_empty_states_instead_of_empty_headers(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    assert cli(db, "list", "-p", "nobody").output == "no memories in profile nobody\n"
    cli(db, "save", "-p", "ana", "one note")
    assert cli(db, "list", "-p", "ana", "--offset", "5").output.startswith("no memories past offset 5 (1 memory in ana)")
    assert cli(db, "recall", "-p", "nobody", "anything").output == "no memories matched\n"


def test_plurals(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cli(db, "save", "-p", "ana", "one note")
    assert cli(db, "stats").output.startswith("1 memory in 1 profile ")
    cli(db, "save", "-p", "bob", "another")
    assert cli(db, "stats").output.startswith("2 memories in 2 profiles ")
    assert cli(db, "list", "-p", "ana").output.splitlines()[-1] == "1–1 of 1 memory, newest first"
    assert cli(db, "prune", "-p", "ana", "--category", "general", "--staleness-above", "0").output.splitlines()[-1] == "pruned 1 memory of ana"
    assert cli(db, "automation", "set", "nightly", "x").output == "saved the note of nightly (1 byte)\n"
    assert [plural(n, w) for n, w in [(1, "pass"), (2, "pass"), (0, "profile"), (1, "object")]] == \
        ["1 pass", "2 passes", "0 profiles", "1 object"]


def test_sync_summaries_use_words_not_counter_names() -> None:
    from memlocal_sync.report import PassReport

    report = PassReport(result="ok", pages=1, objects=1, duration_s=0.5)
    report.counts.update({"deleted_local": 1, "deleted_remote": 2, "reid": 1})
    assert report.summary() == ("ok: deleted 1 here, deleted 2 in the bucket, gave 1 a new id "
                                "(1 object in 1 listing page, 0.50s)")
    assert PassReport(result="failed", pages=0).summary().startswith("failed: nothing done (0 objects in 0 listing pages")
    assert PassReport(result="ok", pages=3, objects=2500).summary().startswith("ok: nothing to do (2500 objects in 3 listing pages")


@given(st.text(max_size=120), st.integers(1, 80))
def test_ellipsize_cuts_with_an_ellipsis_and_never_silently(text: str, width: int) -> None:
    folded = " ".join(text.split())
    out = ellipsize(text, width)
    assert len(out) <= width
    if out != folded:
        assert out.endswith("…") and folded.startswith(out[:-1])


def test_cut_summaries_end_in_an_ellipsis(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    saved = cli(db, "save", "-p", "ana", LONG).output
    memory = json.loads(cli(db, "list", "-p", "ana", "--json").output)["memories"][0]
    assert memory["summary"] == LONG[:50]  # the data stays the spec's first 50 characters
    # Shown up to the last word the 50 characters hold whole, then "…" (never a cut word).
    shown = LONG[:50].rsplit(" ", 1)[0].rstrip(" ,;:.-") + "…"
    assert f"{shown}  " in saved and LONG[:50] not in saved
    row = cli(db, "list", "-p", "ana").output.splitlines()[2]
    assert row.endswith(shown)
    assert shown_summary("dark mode", "Ana prefers dark mode") == "dark mode"  # a written summary is left alone


def test_save_lines_align(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    lines = [cli(db, "save", "-p", "ana", "--category", c, f"a {c} note").output for c in ("fact", "preference")]
    assert lines[0].index("a fact note") == lines[1].index("a preference note")


def test_tables_show_relative_times_and_json_iso_with_rounded_floats(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cli(db, "save", "-p", "ana", "--confidence", "0.7", "Ana prefers tea")
    table = cli(db, "list", "-p", "ana").output
    assert "just now" in table and not re.search(r"\d{4}-\d\d-\d\dT", table)
    hit = json.loads(cli(db, "recall", "-p", "ana", "tea", "--json").output)["results"][0]
    floats = [v for v in [hit["score"], *hit["breakdown"].values(), hit["memory"]["stalenessScore"]] if isinstance(v, float)]
    assert floats and all(len(repr(v).split(".")[-1]) <= 6 for v in floats)
    assert round_floats({"s": 0.020999999999999994, "n": [1, True, 0.1234567]}) == {"s": 0.021, "n": [1, True, 0.123457]}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", hit["memory"]["createdAt"])


def test_recall_explains_the_weights_with_maturity(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cli(db, "save", "-p", "ana", "Ana prefers tea")
    out = cli(db, "recall", "-p", "ana", "tea").output
    assert "weights: recency 0.50, usage 0.00, topic 0.50  (maturity 0.00: 0 of 50 recorded uses)" in out
    assert "usage weighs in as the profile's memories are recalled, reaching 0.35 / 0.30 / 0.35" in out


def test_colour_on_a_terminal_only_and_never_with_no_color(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cli(db, "save", "-p", "ana", "Ana prefers tea")
    assert ANSI.search(cli(db, "list", "-p", "ana", color=True).output)  # as on a terminal
    assert not ANSI.search(cli(db, "list", "-p", "ana", color=True, env={"NO_COLOR": "1"}).output)
    assert not ANSI.search(cli(db, "list", "-p", "ana").output)
    piped = run("--db", str(db), "list", "-p", "ana")  # a pipe is not a terminal
    assert piped.returncode == 0 and "Ana prefers tea" in piped.stdout and not ANSI.search(piped.stdout)


def test_top_level_help_does_not_cut_descriptions() -> None:
    out = run("--help")
    commands = out.stdout.split("Commands:")[1]
    assert out.returncode == 0 and "..." not in commands
    squashed = " ".join(out.stdout.split())
    assert "memory_delete for PROFILE, and the memory_context prompt." in squashed
    assert "Reconcile this host's memories with the bucket" in squashed


def test_help_loads_no_storage_web_or_bucket_stack() -> None:
    """`memlocal --help` stays fast by not importing what only commands need (time it with
    `python -X importtime -m memlocal --help`; docs/cli.md has the figures)."""
    probe = ("import sys\nfrom memlocal.faces.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "heavy = sorted(m for m in ('sqlite_utils', 'numpy', 'boto3', 'fastapi', 'anthropic', 'mcp', 'uvicorn')"
             " if m in sys.modules)\nprint('HEAVY', heavy)")
    out = support.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in out.stdout, out.stdout[-300:] + out.stderr[-2000:]


# The serve banner (the database, the bucket, the URLs) is checked in tests/test_api_serve.py,
# test_serve_answers_on_loopback_and_stops_cleanly_on_sigterm: one serve process for both.


