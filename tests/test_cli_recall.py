"""``memlocal recall``, ``memlocal inject`` and ``memlocal automation`` as a user drives them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from memlocal.cli import main


def cli(db: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, ["--db", str(db), *args], input=input)


def save(db: Path, profile: str, content: str, category: str = "general") -> str:
    out = cli(db, "save", "-p", profile, "--content", content, "--category", category, "--json")
    assert out.exit_code == 0, out.output
    return json.loads(out.output)["memory"]["id"]


def test_recall_table_and_json(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    allergy = save(db, "ana", "Ana has a peanut allergy", "fact")
    save(db, "ana", "Ana's boss wants the quarterly report on Fridays", "context")
    save(db, "bob", "Bob also has a peanut allergy", "fact")

    human = cli(db, "recall", "-p", "ana", "planning her diet")
    assert human.exit_code == 0, human.output
    lines = human.output.splitlines()
    assert lines[0].split() == ["id", "score", "recency", "usage", "topic", "confMul", "category", "summary"]
    assert lines[2].startswith(allergy)
    assert "Bob" not in human.output
    assert lines[-2].startswith("weights: recency 0.") and "maturity" in lines[-2]

    data = json.loads(cli(db, "recall", "-p", "ana", "diet", "--json", "--limit", "1").output)
    [hit] = data["results"]
    assert set(hit) == {"memory", "score", "breakdown", "evidence"}
    assert hit["memory"]["id"] == allergy
    assert hit["memory"]["accessCount"] == 1  # the human recall above counted as a use
    assert set(hit["breakdown"]["weights"]) == {"recency", "usage", "topic"}
    got = json.loads(cli(db, "get", "-p", "ana", allergy, "--json").output)
    assert got["accessCount"] == 2

    none = cli(db, "recall", "-p", "ana", "diet", "--min-score", "1", "--json")
    assert json.loads(none.output) == {"results": []}
    assert cli(db, "recall", "-p", "ana", "diet", "--min-score", "1").output.strip() == "no memories matched"


def test_recall_bad_input_is_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    for args in (["--limit", "0"], ["--min-score", "3"]):
        out = cli(db, "recall", "-p", "ana", "x", *args)
        assert out.exit_code != 0
        assert out.output.count("\n") == 1 and "Error:" in out.output and "Traceback" not in out.output
    assert cli(db, "recall", "-p", "../x", "q").exit_code != 0


def test_inject_prints_the_final_prompt(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    save(db, "ana", "Ana prefers answers in Portuguese", "preference")
    save(db, "ana", "Flights are booked through the travel desk", "behavior")
    out = cli(db, "inject", "-p", "ana", "--tools", "@default,@memory", "Book me a trip to Porto")
    assert out.exit_code == 0, out.output
    assert out.output == (
        "--- CONTEXT FROM MEMORY ---\n"
        "Core knowledge (always apply):\n"
        "* [preference] Ana prefers answers in Portuguese\n"
        "Relevant to this task:\n"
        "* [behavior] Flights are booked through the travel desk\n"
        "---\n"
        "Book me a trip to Porto\n"
    )
    plain = cli(db, "inject", "-p", "ana", "--tools", "@default", "Book me a trip")
    assert plain.output == "Book me a trip\n"
    ctx = cli(db, "inject", "-p", "ana", "--tools", "@default", "--context", "-", "Go", input="Budget: 500 EUR\n")
    assert ctx.output.splitlines()[0] == "--- CONTEXT FROM OPERATOR ---"
    assert "Budget: 500 EUR" in ctx.output.splitlines()
    queried = cli(db, "inject", "-p", "ana", "--query", "nothing relevant", "Book a trip")
    assert queried.exit_code == 0 and "Core knowledge" in queried.output


def test_automation_get_set_clear(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    assert cli(db, "automation", "get", "nightly").output == ""
    out = cli(db, "automation", "set", "nightly", "Stopped at page 3")
    assert out.exit_code == 0 and "saved" in out.output
    assert cli(db, "automation", "get", "nightly").output == "Stopped at page 3\n"
    data = json.loads(cli(db, "automation", "get", "nightly", "--json").output)
    assert data["automationId"] == "nightly" and data["note"] == "Stopped at page 3"
    assert cli(db, "automation", "set", "nightly", "-", input="Line 1\nLine 2\n").exit_code == 0
    assert cli(db, "automation", "get", "nightly").output == "Line 1\nLine 2\n"
    run = cli(db, "inject", "-p", "ana", "--tools", "@default", "--automation", "nightly", "Go")
    assert "scribe's observation" in run.output and run.output.endswith("Line 2\n---\nGo\n")
    assert "cleared" in cli(db, "automation", "set", "nightly", "").output
    assert cli(db, "automation", "get", "nightly", "--json").output.count('"note": null') == 1
    cli(db, "automation", "set", "nightly", "again")
    cleared = json.loads(cli(db, "automation", "clear", "nightly", "--json").output)
    assert cleared == {"automationId": "nightly", "cleared": True}
    assert "had no note" in cli(db, "automation", "clear", "nightly").output


def test_automation_errors(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    bad = cli(db, "automation", "get", "../etc")
    assert bad.exit_code != 0 and "invalid automation id" in bad.output and bad.output.count("\n") == 1
    big = cli(db, "automation", "set", "a1", "x" * 5000)
    assert big.exit_code != 0 and "the cap is 4096 bytes" in big.output
    assert cli(db, "automation", "get", "a1").output == ""


def test_real_process_reads_query_and_prompt_from_stdin(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    env = {**os.environ}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memlocal", "--db", db, *args], input=stdin,
                              capture_output=True, text=True, env=env, timeout=60)

    assert run("save", "-p", "ana", "--content", "Deploys need a green staging build").returncode == 0
    r = run("recall", "-p", "ana", "--json", "-", stdin="staging deploys")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["memory"]["processedContent"] == "Deploys need a green staging build"
    r = run("inject", "-p", "ana", "-", stdin="Ship the release\nplease")
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("---\nShip the release\nplease\n")
    # The fire-and-forget bump was drained before the process exited.
    r = run("get", "-p", "ana", "--json", json.loads(run("list", "-p", "ana", "--json").stdout)["memories"][0]["id"])
    assert json.loads(r.stdout)["accessCount"] == 2
