"""The CLI as a user drives it: a real process, a real database file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from memlocal.cli import main


def run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memlocal", *args], input=stdin, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=60)


def test_fresh_machine_default_database(tmp_path: Path) -> None:
    """No config, no bucket, no key: the default database is created in the user data dir."""
    result = run("save", "--profile", "demo", "--json", "I prefer dark roast coffee")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["synced"] is False
    assert data["memory"]["processedContent"] == "I prefer dark roast coffee"
    assert data["memory"]["category"] == "general" and data["memory"]["confidence"] == 1.0
    assert data["memory"]["source"] == "explicit"
    assert (tmp_path / "xdg-data" / "memlocal" / "memlocal.db").is_file()


def test_save_get_list_delete_stats(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    r = CliRunner()
    saved = json.loads(r.invoke(main, ["--db", db, "save", "-p", "ana", "--category", "preference",
                                       "--confidence", "0.8", "--summary", "dark mode", "--json",
                                       "Ana prefers dark mode in every editor"]).output)
    mid = saved["memory"]["id"]
    assert saved["memory"]["summary"] == "dark mode" and saved["memory"]["confidence"] == 0.8
    for i in range(3):
        assert r.invoke(main, ["--db", db, "save", "-p", "ana", f"note {i}"]).exit_code == 0
    got = json.loads(r.invoke(main, ["--db", db, "get", "-p", "ana", mid, "--json"]).output)
    assert got == saved["memory"]
    page = json.loads(r.invoke(main, ["--db", db, "list", "-p", "ana", "--limit", "2", "--offset", "1", "--json"]).output)
    assert (page["total"], page["limit"], page["offset"]) == (4, 2, 1)
    assert [m["rawInput"] for m in page["memories"]] == ["note 1", "note 0"]
    human = r.invoke(main, ["--db", db, "list", "-p", "ana"]).output
    assert "dark mode" in human and "4 of 4" in human
    stats = json.loads(r.invoke(main, ["--db", db, "stats", "--json"]).output)
    assert stats == {"totalMemories": 4, "profilesWithMemory": 1, "perProfile": {"ana": 4}}
    deleted = r.invoke(main, ["--db", db, "delete", "-p", "ana", mid])
    assert deleted.exit_code == 0 and mid in deleted.output
    assert r.invoke(main, ["--db", db, "get", "-p", "ana", mid]).exit_code != 0


def test_save_reads_stdin(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    text = "line one\nline two: a long note from a pipe"
    result = run("--db", db, "save", "-p", "ana", "--json", "-", stdin=text)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["memory"]["rawInput"] == text


def test_unwritable_database_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    result = run("--db", str(blocker / "x.db"), "stats")
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_not_a_database_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    result = run("--db", str(junk), "stats")
    assert result.returncode != 0
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
