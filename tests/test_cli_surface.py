"""What a new user tripped on in the CLI's output: times, cut summaries, narrow terminals,
counts that agree, prune of superseded memories, and serve on a busy port."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from conftest import Cli

from memlocal import MemoryBank, SaveRequest

P = "coder"
LONG = "Runs the integration tests with pytest-xdist on two workers before every release"


def supersede_two(bank: MemoryBank) -> tuple[str, str, str]:
    old = bank.save(SaveRequest(P, content="The CI runs on Jenkins", category="fact")).memory.id
    mid = bank.save(SaveRequest(P, content="The CI runs on Buildkite", category="fact", supersedes=old)).memory.id
    new = bank.save(SaveRequest(P, content="The CI runs on GitHub Actions", category="fact", supersedes=mid)).memory.id
    return old, mid, new


def test_history_and_audit_print_relative_times_and_iso_in_json(bank: MemoryBank, cli: Cli) -> None:
    _old, _mid, new = supersede_two(bank)
    bank.inject(P, "@memory", "which CI do we use?")
    bank.drain()
    for args in (("history", "-p", P, new), ("audit", "-p", P)):
        code, out, err = cli(*args)
        assert code == 0, err
        assert "just now" in out and not re.search(r"\d{4}-\d\d-\d\dT", out), out
    assert re.match(r"\d{4}-\d\d-\d\dT", cli.json("history", "-p", P, new, "--json")["chain"][0]["createdAt"])
    assert re.match(r"\d{4}-\d\d-\d\dT", cli.json("audit", "-p", P, "--json")["injections"][0]["at"])


def test_a_default_summary_is_cut_at_a_word_boundary(bank: MemoryBank, cli: Cli) -> None:
    bank.save(SaveRequest(P, LONG))  # its default summary is the first 50 characters, which end inside "two"
    code, out, _ = cli("list", "-p", P)
    assert code == 0
    assert "pytest-xdist on…" in out and "on tw" not in out, out
    code, out, _ = cli("save", "-p", P, LONG + " (again)")
    assert "pytest-xdist on…" in out and "on tw" not in out, out


def test_columns_narrows_the_tables(bank: MemoryBank, cli: Cli) -> None:
    bank.save(SaveRequest(P, LONG))
    bank.save(SaveRequest(P, "A second memory whose summary is long enough to be cut in a narrow terminal window"))
    for width in (70, 100):
        code, out, _ = cli("list", "-p", P, env={"COLUMNS": str(width)})
        assert code == 0 and max(len(line) for line in out.splitlines()) <= width, out
    code, out, _ = cli("list", "-p", P, env={"COLUMNS": "70"})
    assert "…" in out


def test_stats_and_list_count_active_and_superseded_alike(bank: MemoryBank, cli: Cli) -> None:
    supersede_two(bank)
    bank.save(SaveRequest(P, "Prefers pytest", category="preference"))
    stats = cli.json("stats", "--json")
    assert (stats["totalMemories"], stats["activeMemories"], stats["supersededMemories"]) == (4, 2, 2)
    assert stats["perProfile"] == {P: 4} and stats["perProfileActive"] == {P: 2}
    code, out, _ = cli("stats")
    assert out.splitlines()[0].startswith("4 memories in 1 profile (2 active, 2 superseded)"), out
    assert re.search(rf"{P}\s+2\s+2", out), out
    code, out, _ = cli("list", "-p", P)
    assert "1–2 of 2 active memories (2 superseded: --all lists them), newest first" in out, out
    code, out, _ = cli("list", "-p", P, "--all")
    assert "1–4 of 4 memories (2 active, 2 superseded), newest first" in out, out


def test_prune_inactive_dry_run_counts_superseded_memories_of_every_category(bank: MemoryBank, cli: Cli) -> None:
    old, mid, _new = supersede_two(bank)  # facts
    code, out, _ = cli("prune", "-p", P, "--inactive", "--dry-run")
    assert code == 0 and "would prune 2 memories of coder" in out and old in out and mid in out, out
    code, out, _ = cli("prune", "-p", P, "--older-than", "1h", "--dry-run")
    assert "would prune 0 memories" in out  # the other criteria still spare preferences and facts


def test_serve_on_a_port_in_use_fails_with_one_line_before_any_banner(tmp_path: Path, cli: Cli) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = cli.process("serve", "--port", str(port), db=tmp_path / "s.db", timeout=30)
    assert code == 1, (code, out, err)
    assert err.strip().splitlines() == [f"Error: cannot listen on 127.0.0.1:{port}: address already in use"], err
    assert "serving" not in out + err
