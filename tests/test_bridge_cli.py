"""``memlocal bridge claude sync -p PROFILE [--dry-run] [--force] [--json]``."""

from __future__ import annotations

import pytest
from conftest import Cli

from memory_stores_fake import FakeMemoryStores, memory_stores  # noqa: F401 (the fixture)

pytestmark = pytest.mark.anthropic_sdk


@pytest.fixture(autouse=True)
def _no_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLOCAL_LLM_ENABLED", "false")  # the saves here are not the bridge's business


def test_sync_prints_one_line_or_json(cli: Cli, memory_stores: FakeMemoryStores) -> None:
    cli("save", "-p", "alice", "Alice prefers short answers", "--category", "preference")
    dry = cli("bridge", "claude", "sync", "-p", "alice", "--dry-run")
    assert dry.exit_code == 0 and "would 1 memory mirrored" in dry.stdout and memory_stores.writes() == [], dry.output
    out = cli.json("bridge", "claude", "sync", "-p", "alice", "--json")
    assert out["result"] == "ok" and out["created"] == 1 and out["storeCreated"] is True
    sid = memory_stores.store_of("alice")
    assert out["store"] == sid
    again = cli("bridge", "claude", "sync", "-p", "alice")
    assert again.exit_code == 0 and again.stdout.strip() == f"alice -> {sid}: nothing to do (1 unchanged)"


def test_a_guarded_sync_exits_3_and_force_applies_it(cli: Cli, memory_stores: FakeMemoryStores) -> None:
    for i in range(8):
        cli("save", "-p", "alice", f"note {i} on subject {i}")
    cli("bridge", "claude", "sync", "-p", "alice")
    sid = memory_stores.store_of("alice")
    for mem in list(memory_stores.memories[sid].values())[:7]:
        memory_stores.agent_delete(sid, mem["id"])
    held = cli("bridge", "claude", "sync", "-p", "alice")
    assert held.exit_code == 3 and "held: would delete 7 of the 8" in held.stdout, held.output
    forced = cli.json("bridge", "claude", "sync", "-p", "alice", "--force", "--json")
    assert forced["deletedLocal"] == 7


def test_errors_are_one_line(cli: Cli, memory_stores: FakeMemoryStores, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = cli("bridge", "claude", "sync", "-p", "no such/profile")
    assert bad.exit_code == 1 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("Error: "), bad.output
    memory_stores.fault(500, times=10_000)
    monkeypatch.setenv("MEMLOCAL_BRIDGE_CLAUDE_DEADLINE_S", "0.5")
    down = cli("bridge", "claude", "sync", "-p", "alice")
    assert down.exit_code == 1 and "stopped: the memory stores API did not answer" in down.stdout, down.output
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    nokey = cli("bridge", "claude", "sync", "-p", "alice")
    assert nokey.exit_code == 1 and nokey.stderr.strip() == (
        "Error: the bridge needs ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) for the memory stores API")
