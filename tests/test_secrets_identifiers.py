"""Identifiers are never redacted into each other: an automation id, a LangGraph
namespace label or item key, or a Claude memory-tool path segment that holds a credential is
refused with one line naming its kind, never the value, so two different ids can never become
one (docs/hygiene.md, "Secrets")."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlocal import MemoryBank, ValidationError

_B62 = "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5xY7zA9bC1"
GHP_A = "ghp_" + _B62[:36]
GHP_B = "ghp_" + _B62[1:37]


def test_an_automation_id_that_is_a_token_is_refused(cli: object, db_path: Path) -> None:
    r = cli("automation", "set", GHP_A, "-", input="last run: 3 new issues\n")  # type: ignore[operator]
    assert r.exit_code != 0
    assert "github-token" in r.output and GHP_A not in r.output and len(r.output.strip().splitlines()) == 1
    with MemoryBank(db_path) as bank:
        assert bank.automations.list() == []
        assert bank.store.conn.execute("SELECT count(*) FROM automation_notes").fetchone()[0] == 0
        with pytest.raises(ValidationError, match=r"automation id holds a credential \(github-token\)"):
            bank.automations.put(GHP_B, "x")
    assert GHP_A.encode() not in b"".join(p.read_bytes() for p in db_path.parent.iterdir() if p.is_file())


def test_a_langgraph_namespace_label_or_key_holding_a_credential_is_refused(bank: MemoryBank) -> None:
    from memlocal.integrations.langgraph import MemlocalStore

    store = MemlocalStore(bank)
    with pytest.raises(ValidationError, match=r"^the namespace label holds a credential \(github-token\)") as err:
        store.put(("users", GHP_A), "prefs", {"text": "likes tea"})
    assert GHP_A not in str(err.value)
    with pytest.raises(ValidationError, match=r"item key holds a credential \(github-token\)"):
        store.put(("users",), GHP_A, {"text": "likes tea"})
    store.put(("users", "u1"), "prefs", {"text": "likes tea"})  # an ordinary label still works
    assert [p["name"] for p in bank.profiles()] == ["users.u1"]


@pytest.mark.anthropic_sdk  # the Claude memory tool's module imports the SDK
def test_memory_tool_paths_holding_credentials_are_refused_and_never_collide(bank: MemoryBank) -> None:
    from anthropic.lib.tools import ToolError

    from memlocal.integrations.claude import MemlocalMemoryTool

    tool = MemlocalMemoryTool(bank, "p")
    with pytest.raises(ToolError) as err:
        tool.call({"command": "create", "path": f"/memories/{GHP_A}.md", "file_text": "A's notes\n"})
    assert "github-token" in str(err.value.content) and GHP_A not in str(err.value.content)
    tool.call({"command": "create", "path": "/memories/a.md", "file_text": "A's notes\n"})
    with pytest.raises(ToolError, match="github-token"):
        tool.call({"command": "delete", "path": f"/memories/{GHP_B}.md"})
    with pytest.raises(ToolError, match="github-token"):  # a directory segment too
        tool.call({"command": "create", "path": f"/memories/{GHP_B}/x.md", "file_text": "B\n"})
    with pytest.raises(ToolError, match="github-token"):
        tool.call({"command": "view", "path": f"/memories/{GHP_B}.md"})
    assert "A's notes" in tool.call({"command": "view", "path": "/memories/a.md"})
    assert bank.list("p").total == 1
