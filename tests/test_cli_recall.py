"""``memlocal recall``, ``memlocal inject`` and ``memlocal automation`` as a user drives them."""

from __future__ import annotations

import json

from conftest import Cli


def save(cli: Cli, profile: str, content: str, category: str = "general") -> str:
    return cli.json("save", "-p", profile, "--content", content, "--category", category, "--json")["memory"]["id"]


def test_recall_table_and_json(cli: Cli) -> None:
    allergy = save(cli, "ana", "Ana has a peanut allergy", "fact")
    save(cli, "ana", "Ana's boss wants the quarterly report on Fridays", "context")
    save(cli, "bob", "Bob also has a peanut allergy", "fact")

    human = cli("recall", "-p", "ana", "planning her diet")
    assert human.exit_code == 0, human.output
    lines = human.output.splitlines()
    # What orders the rows is on the table: the rank, and the evidence beside the score.
    assert lines[0].split() == ["#", "id", "evidence", "rank", "score", "recency", "usage", "topic", "confMul",
                                "category", "summary"]
    assert lines[2].split()[:3] == ["1", allergy, "diet"], lines[2]  # "diet": the query's word it shares
    assert "Bob" not in human.output
    assert lines[-3].startswith("ordered by evidence") and "not by score" in lines[-3], lines[-3]
    assert lines[-2].startswith("weights: recency 0.") and "maturity" in lines[-2]

    data = json.loads(cli("recall", "-p", "ana", "diet", "--json", "--limit", "1").output)
    [hit] = data["results"]
    assert set(hit) == {"memory", "score", "breakdown", "evidence"}
    assert hit["memory"]["id"] == allergy
    assert hit["memory"]["accessCount"] == 1  # the human recall above counted as a use
    assert set(hit["breakdown"]["weights"]) == {"recency", "usage", "topic"}
    got = json.loads(cli("get", "-p", "ana", allergy, "--json").output)
    assert got["accessCount"] == 2

    none = cli("recall", "-p", "ana", "diet", "--min-score", "1", "--json")
    assert json.loads(none.output) == {"results": []}
    assert cli("recall", "-p", "ana", "diet", "--min-score", "1").output.strip() == "no memories matched"


def test_recall_bad_input_is_one_line_error(cli: Cli) -> None:
    for args in (["--limit", "0"], ["--min-score", "3"]):
        out = cli("recall", "-p", "ana", "x", *args)
        assert out.exit_code != 0
        assert out.output.count("\n") == 1 and "Error:" in out.output and "Traceback" not in out.output
    assert cli("recall", "-p", "../x", "q").exit_code != 0


def test_inject_prints_the_final_prompt(cli: Cli) -> None:
    save(cli, "ana", "Ana prefers answers in Portuguese", "preference")
    save(cli, "ana", "Flights are booked through the travel desk", "behavior")
    out = cli("inject", "-p", "ana", "--tools", "@default,@memory", "Book me a trip to Porto")
    assert out.exit_code == 0, out.output
    assert out.output == (
        "--- CONTEXT FROM MEMORY ---\n"
        "Core knowledge (always apply):\n"
        "* [preference] Ana prefers answers in Portuguese\n"
        "\n"
        "Relevant to this task:\n"
        "* [behavior] Flights are booked through the travel desk\n"
        "---\n"
        "Book me a trip to Porto\n"
    )
    plain = cli("inject", "-p", "ana", "--tools", "@default", "Book me a trip")
    assert plain.output == "Book me a trip\n"
    ctx = cli("inject", "-p", "ana", "--tools", "@default", "--context", "-", "Go", input="Budget: 500 EUR\n")
    assert ctx.output.splitlines()[0] == "--- CONTEXT FROM OPERATOR ---"
    assert "> Budget: 500 EUR" in ctx.output.splitlines()  # behind the renderer's quote
    queried = cli("inject", "-p", "ana", "--query", "nothing relevant", "Book a trip")
    assert queried.exit_code == 0 and "Core knowledge" in queried.output


def test_automation_get_set_clear(cli: Cli) -> None:
    assert cli("automation", "get", "nightly").output == ""
    out = cli("automation", "set", "nightly", "Stopped at page 3")
    assert out.exit_code == 0 and "saved" in out.output
    assert cli("automation", "get", "nightly").output == "Stopped at page 3\n"
    data = json.loads(cli("automation", "get", "nightly", "--json").output)
    assert data["automationId"] == "nightly" and data["note"] == "Stopped at page 3"
    assert cli("automation", "set", "nightly", "-", input="Line 1\nLine 2\n").exit_code == 0
    assert cli("automation", "get", "nightly").output == "Line 1\nLine 2\n"
    run = cli("inject", "-p", "ana", "--tools", "@default", "--automation", "nightly", "Go")
    assert "scribe's observation" in run.output and run.output.endswith("Line 2\n---\nGo\n")
    assert "cleared" in cli("automation", "set", "nightly", "").output
    assert cli("automation", "get", "nightly", "--json").output.count('"note": null') == 1
    cli("automation", "set", "nightly", "again")
    cleared = json.loads(cli("automation", "clear", "nightly", "--json").output)
    assert cleared == {"automationId": "nightly", "cleared": True}
    assert "had no note" in cli("automation", "clear", "nightly").output


def test_automation_errors(cli: Cli) -> None:
    bad = cli("automation", "get", "../etc")
    assert bad.exit_code != 0 and "invalid automation id" in bad.output and bad.output.count("\n") == 1
    big = cli("automation", "set", "a1", "x" * 5000)
    assert big.exit_code != 0 and "the cap is 4096 bytes" in big.output
    assert cli("automation", "get", "a1").output == ""


def test_real_process_reads_query_and_prompt_from_stdin(cli: Cli) -> None:
    save(cli, "ana", "Deploys need a green staging build")
    r = cli.process("recall", "-p", "ana", "--json", "-", input="staging deploys")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["memory"]["processedContent"] == "Deploys need a green staging build"
    r = cli.process("inject", "-p", "ana", "-", input="Ship the release\nplease")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.endswith("---\nShip the release\nplease\n")
    # The fire-and-forget bump was drained before the process exited.
    mid = cli.json("list", "-p", "ana", "--json")["memories"][0]["id"]
    assert cli.json("get", "-p", "ana", "--json", mid)["accessCount"] == 2
