"""The CLI as a user drives it: a real database file; one real process for the fresh machine."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Cli


def test_fresh_machine_default_database(tmp_path: Path, cli: Cli) -> None:
    """No config, no bucket, no key: the default database is created in the user data dir."""
    result = cli.process("save", "--profile", "demo", "--json", "I prefer dark roast coffee", db=None)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["synced"] is False
    assert data["memory"]["processedContent"] == "I prefer dark roast coffee"
    assert data["memory"]["category"] == "general" and data["memory"]["confidence"] == 1.0
    assert data["memory"]["source"] == "explicit"
    assert (tmp_path / "xdg-data" / "memlocal" / "memlocal.db").is_file()


def test_save_get_list_delete_stats(cli: Cli) -> None:
    saved = cli.json("save", "-p", "ana", "--category", "preference", "--confidence", "0.8",
                     "--summary", "dark mode", "--json", "Ana prefers dark mode in every editor")
    mid = saved["memory"]["id"]
    assert saved["memory"]["summary"] == "dark mode" and saved["memory"]["confidence"] == 0.8
    for i in range(3):
        assert cli("save", "-p", "ana", f"note {i}").exit_code == 0
    assert cli.json("get", "-p", "ana", mid, "--json") == saved["memory"]
    page = cli.json("list", "-p", "ana", "--limit", "2", "--offset", "1", "--json")
    assert (page["total"], page["limit"], page["offset"]) == (4, 2, 1)
    assert [m["rawInput"] for m in page["memories"]] == ["note 1", "note 0"]
    human = cli("list", "-p", "ana").output
    assert "dark mode" in human and "4 of 4" in human
    stats = cli.json("stats", "--json")
    assert stats == {"totalMemories": 4, "activeMemories": 4, "supersededMemories": 0, "profilesWithMemory": 1,
                     "perProfile": {"ana": 4}, "perProfileActive": {"ana": 4}}
    deleted = cli("delete", "-p", "ana", mid)
    assert deleted.exit_code == 0 and mid in deleted.output
    assert cli("get", "-p", "ana", mid).exit_code != 0


def test_save_reads_stdin(cli: Cli) -> None:
    text = "line one\nline two: a long note from a pipe"
    assert cli.json("save", "-p", "ana", "--json", "-", input=text)["memory"]["rawInput"] == text


def test_unwritable_database_is_one_line(tmp_path: Path, cli: Cli) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    result = cli("stats", db=blocker / "x.db")
    assert result.exit_code != 0
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_not_a_database_is_one_line(tmp_path: Path, cli: Cli) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    result = cli("stats", db=junk)
    assert result.exit_code != 0
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1


def test_a_database_in_a_missing_folder_is_created_and_said_in_one_line(tmp_path: Path, cli: Cli) -> None:
    """A typo in --db (or MEMLOCAL_DB, or store.path) must not quietly start an empty bank in a
    new folder: the folder is made (a fresh runner's new data dir works) and one line says so."""
    missing = tmp_path / "nonexistent" / "dir"
    result = cli("save", "-p", "ana", "a note", db=missing / "x.db")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"created the folder {missing} for the database {missing / 'x.db'} (from --db)"]
    assert (missing / "x.db").is_file()
    assert cli("save", "-p", "ana", "another", db=missing / "x.db").stderr == ""  # said once: the folder exists now
    other = tmp_path / "elsewhere"
    result = cli("stats", db=None, env={"MEMLOCAL_DB": str(other / "y.db")})
    assert result.exit_code == 0 and result.stderr.splitlines() == [
        f"created the folder {other} for the database {other / 'y.db'} (from MEMLOCAL_DB)"]
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = cli("stats", db=blocker / "sub" / "z.db")
    assert result.exit_code != 0 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
