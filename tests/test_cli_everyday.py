"""The CLI a new user reads at 80 columns: whole ids at any width, group help that
wraps, no placeholder dates or Python words, one number format, messages in the CLI's words."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from api_live import LiveServer
from conftest import Cli
from support import http_client

from memlocal import MemoryBank, SaveRequest
from memlocal.faces.api import create_app

P = "coder"
LONG = ("Runs the integration tests with pytest-xdist on two workers before every release, "
        "then tags the commit and pushes the wheel")


def test_ids_stay_whole_at_80_columns_and_below(bank: MemoryBank, cli: Cli) -> None:
    old = bank.save(SaveRequest(P, content=LONG, category="fact")).memory.id
    bank.save(SaveRequest(P, content="The release wheel is pushed to the internal index on Fridays", supersedes=old))
    bank.save(SaveRequest(P, content="Integration tests need the staging database and two workers"))
    ids = [m["id"] for m in cli.json("list", "-p", P, "--all", "--json")["memories"]]
    for width in ("80", "60", "40"):
        for args in (("recall", "-p", P, "integration tests release wheel"), ("list", "-p", P, "--all"),
                     ("history", "-p", P, old), ("prune", "-p", P, "--inactive", "--dry-run")):
            code, out, err = cli(*args, env={"COLUMNS": width})
            assert code == 0, err
            shown = set(re.findall(r"mem-[0-9a-f…]+", out))
            assert shown and shown <= set(ids), (args, width, out)  # every id whole: none cut with …
    code, out, _ = cli("recall", "-p", P, "integration tests release wheel", env={"COLUMNS": "80"})
    rows = [line for line in out.splitlines() if "mem-" in line]
    assert rows and all(len(line) <= 80 for line in rows), out  # the summary is cut, not the id
    assert "…" in out and "not shown at 80 columns: recency, usage, topic, confMul" in out, out
    code, out, _ = cli("recall", "-p", P, "integration tests release wheel", env={"COLUMNS": "140"})
    assert "confMul" in out and "not shown" not in out, out


def test_group_help_wraps_instead_of_cutting(cli: Cli) -> None:
    for group in ("automation", "config", "profile", "sync"):
        code, out, _ = cli(group, "--help", env={"COLUMNS": "80"}, db=None)
        assert code == 0, out
        commands = out.split("Commands:", 1)[1]
        assert "..." not in commands and all(len(line) <= 80 for line in commands.splitlines()), out
    code, out, _ = cli("automation", "--help", env={"COLUMNS": "80"}, db=None)
    assert "an empty TEXT clears the" in out and "note)." in out, out


def test_get_says_never_true_and_one_number_format(bank: MemoryBank, cli: Cli) -> None:
    mid = bank.save(SaveRequest(P, content="Ana is allergic to peanuts", category="fact", confidence=0.9)).memory.id
    code, out, _ = cli("get", "-p", P, mid)
    assert code == 0
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert fields["lastAccessedAt"] == "never" and fields["isActive"] == "true", out
    assert fields["confidence"] == "0.90" and fields["stalenessScore"] == "0.021", out
    assert "0001-01-01" not in out and "True" not in out and "False" not in out
    assert re.search(rf"{mid}\s+fact\s+0\.90\s", cli("list", "-p", P).stdout)  # the same 0.90 as get
    code, out, _ = cli("config", "show")
    assert code == 0 and not re.search(r"\b(True|False)\b", out) and re.search(r"audit\.enabled\s+true\s", out), out


def test_never_accessed_is_null_in_json_rest_and_export_and_round_trips(bank: MemoryBank, cli: Cli,
                                                                         tmp_path: Path) -> None:
    mid = bank.save(SaveRequest(P, content="Ana is allergic to peanuts", category="fact")).memory.id
    assert cli.json("get", "-p", P, mid, "--json")["lastAccessedAt"] is None
    assert cli.json("list", "-p", P, "--json")["memories"][0]["lastAccessedAt"] is None
    with LiveServer(create_app(bank)) as server, http_client(base_url=server.url) as client:
        body = client.get(f"/api/profiles/{P}/memories/{mid}").json()
        assert body["memory"]["lastAccessedAt"] is None, body
        assert "0001-01-01" not in client.get(f"/api/profiles/{P}/memories").text
    out = tmp_path / "all.jsonl"
    assert cli("export", "-o", str(out)).exit_code == 0
    text = out.read_text()
    assert "0001-01-01" not in text and json.loads(text)["lastAccessedAt"] is None
    into = cli.at(tmp_path / "other.db")
    code, summary, err = into("import", str(out))
    assert code == 0 and "imported 1," in summary, summary + err
    assert into.json("get", "-p", P, mid, "--json")["lastAccessedAt"] is None
    # The bucket's objects keep Go's zero time, as the spec's other implementations write it.
    from memlocal_sync.objects import encode

    assert json.loads(encode(bank.get(P, mid)))["lastAccessedAt"] == "0001-01-01T00:00:00Z"


def test_save_without_text_says_so_in_the_clis_words(cli: Cli) -> None:
    code, out, err = cli("save", "-p", P)
    assert code == 2 and out == ""
    assert err.startswith("Error: nothing to save: give RAW_INPUT (the text; '-' reads standard input) "
                          "or --content TEXT (see '") and err.count("\n") == 1, err
    assert "rawInput" not in err
    code, _, err = cli("save", "-p", P, "   ")
    assert code == 2 and err.startswith("Error: nothing to save: the text is empty (see '"), err
    code, _, err = cli("save", "-p", P, "-", input="")
    assert code == 2 and err.startswith("Error: nothing to save: standard input is empty (see '"), err


def test_without_a_bucket_nothing_is_pending_and_a_later_bucket_gets_it_all(
        s3: Any, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in s3.env:  # no bucket yet
        monkeypatch.delenv(var, raising=False)
    for i in range(3):
        assert cli("save", "-p", P, f"Local note number {i} about the deploy").exit_code == 0
    code, out, err = cli("sync", "status")
    assert code == 0, err
    pending = next(line for line in out.splitlines() if line.startswith("pending:"))
    assert pending == ("pending:     nothing: no bucket is configured, so nothing is sent "
                       "(a bucket configured later gets these 3 saves at its first pass)"), out
    code, out, err = cli("sync", "run", env=s3.env)  # a bucket, configured later
    assert code == 0, out + err
    assert len(s3.keys()) == 3
    code, out, _ = cli("sync", "status", env=s3.env)
    assert re.search(r"^pending:\s+0\b", out, flags=re.M), out
