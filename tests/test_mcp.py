"""`memlocal mcp` as an agent client runs it: a subprocess driven by the mcp SDK's stdio client
(a tool's semantics alone, ``memory_restore``'s, on the same server in this process:
``support.mcp_in_process``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
import support
from support import mcp_server_params

from memlocal import MemoryBank, SaveRequest

# The SDK is imported by the tests that speak to the server, not at collection: it takes about a
# second to import, in every xdist worker that collects this module.
if TYPE_CHECKING:
    from mcp.client.session import ClientSession

pytestmark = pytest.mark.timeout(120)


async def call(session: ClientSession, name: str, args: dict[str, Any]) -> tuple[bool, Any]:
    result = await session.call_tool(name, args)
    (content,) = result.content  # the result once: one short text line beside the structured content
    text = content.text  # type: ignore[union-attr]
    if result.is_error:
        return True, text
    assert "\n" not in text and len(text) <= 200 and not text.startswith("{"), text
    return False, result.structured_content


def run(coro: Any) -> Any:
    return anyio.run(coro)


def test_tools_round_trip_and_profile_isolation(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    with MemoryBank(db) as bank:
        bank.save(SaveRequest("bob", content="Bob's secret: the staging password rotates on Fridays", category="fact"))

    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    async def scenario() -> None:
        async with stdio_client(mcp_server_params(db, "alice")) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                tools = {t.name: t for t in (await s.list_tools()).tools}
                assert set(tools) == {"memory_save", "memory_recall", "memory_list", "memory_delete", "memory_restore"}
                assert tools["memory_recall"].input_schema["required"] == ["query"]

                err, saved = await call(s, "memory_save", {"content": "Alice is allergic to peanuts",
                                                           "category": "fact", "confidence": 0.9})
                # A lean save: what the agent needs of the memory, not every stored field.
                assert not err and set(saved["memory"]) == {"id", "category", "content", "createdAt"}, saved
                assert saved["memory"]["content"] == "Alice is allergic to peanuts"
                assert {"synced", "deduplicated", "redacted"} <= set(saved)
                mid = saved["memory"]["id"]
                texts = [c.text for c in (await s.call_tool("memory_save", {"content": "Alice is allergic to peanuts", "category": "fact"})).content]  # type: ignore[union-attr]
                assert texts == [f"already saved as {mid} (fact)"]
                await call(s, "memory_save", {"rawInput": "Alice deploys on Tuesdays"})

                err, recalled = await call(s, "memory_recall", {"query": "what diet restrictions?"})
                assert not err
                top = recalled["results"][0]
                assert top["id"] == mid and "rawInput" not in top and top["score"] == round(top["score"], 3)
                assert set(top["breakdown"]) == {"recency", "usage", "topic", "confidenceMul"}
                err, recalled = await call(s, "memory_recall", {"query": "what diet restrictions?", "full": True})
                assert recalled["results"][0]["memory"]["profileName"] == "alice"
                assert set(recalled["results"][0]["breakdown"]) >= {"weights", "maturity", "score"}

                err, listed = await call(s, "memory_list", {"limit": 10})
                assert not err and listed["total"] == 2
                assert {m["id"] for m in listed["memories"]} <= {m["id"] for m in (await call(
                    s, "memory_list", {"full": True}))[1]["memories"] if m["profileName"] == "alice"}
                assert "staging password" not in json.dumps(listed)

                # Nothing reaches bob: not by recall, not by id, not by a profile argument.
                err, recalled = await call(s, "memory_recall", {"query": "staging password Fridays"})
                assert "staging password" not in json.dumps(recalled)
                with MemoryBank(db) as b:
                    bob_id = b.list("bob").memories[0].id
                err, msg = await call(s, "memory_delete", {"id": bob_id})
                assert err and f"no memory {bob_id} in profile alice" in msg
                err, msg = await call(s, "memory_list", {"profile": "bob"})
                assert err and "profile" in msg
                err, msg = await call(s, "memory_save", {"content": "x", "profileName": "bob"})
                assert err and "profile" in msg

                err, msg = await call(s, "memory_save", {"content": "x", "category": "opinion"})
                assert err and "opinion" in msg
                err, msg = await call(s, "memory_recall", {})
                assert err and "query" in msg

                prompt = await s.get_prompt("memory_context", {"query": "lunch plans"})
                block = prompt.messages[0].content.text  # type: ignore[union-attr]
                assert block.startswith("--- CONTEXT FROM MEMORY ---")
                assert "allergic to peanuts" in block

                err, deleted = await call(s, "memory_delete", {"id": mid})
                assert not err and deleted == {"deleted": mid}
                err, listed = await call(s, "memory_list", {})
                assert listed["total"] == 1

    run(scenario)
    with MemoryBank(db) as bank:
        assert bank.stats()["perProfile"] == {"alice": 1, "bob": 1}
        recalled_twice = bank.list("alice").memories[0]
        assert recalled_twice.raw_input == "Alice deploys on Tuesdays"


def test_an_update_is_undone_with_memory_restore(tmp_path: Path) -> None:
    """A save that restated a value superseded the old memory; ``memory_restore`` undoes it as
    ``memlocal restore`` and REST's ``.../restore`` do: both active, the link gone. Only the
    session's profile, and an active memory is refused."""
    db = tmp_path / "mcp.db"
    with MemoryBank(db) as bank:
        bob = bank.save(SaveRequest("bob", content="Bob's standup is at 9:30")).memory
        bank.save(SaveRequest("bob", content="Bob's standup is at 10:00"))
        assert bank.get("bob", bob.id).is_active is False

    async def scenario() -> None:
        async with support.mcp_in_process(db, "alice") as s:  # the tool's semantics; the process is tested above
            err, first = await call(s, "memory_save", {"content": "The primary database host is db1"})
            err, second = await call(s, "memory_save", {"content": "The primary database host is db2"})
            old = first["memory"]["id"]
            assert not err and second["memory"]["supersedes"] == old, second
            result = await s.call_tool("memory_restore", {"id": old})
            assert not result.is_error, result
            assert [c.text for c in result.content] == [f"restored {old}"]  # type: ignore[union-attr]
            assert result.structured_content["memory"]["id"] == old  # type: ignore[index]
            err, listed = await call(s, "memory_list", {})
            assert listed["total"] == 2
            err, msg = await call(s, "memory_restore", {"id": old})
            assert err and "active" in msg, msg
            err, msg = await call(s, "memory_restore", {"id": bob.id})  # another profile's
            assert err and f"no memory {bob.id} in profile alice" in msg, msg

    run(scenario)
    with MemoryBank(db) as bank:
        assert bank.get("bob", bob.id).is_active is False


def test_bad_profile_is_refused_at_start(tmp_path: Path) -> None:
    import subprocess

    result = support.run([sys.executable, "-m", "memlocal", "--db", str(tmp_path / "x.db"), "mcp",
                             "--profile", "../etc"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stderr.splitlines()[-1].startswith("Error: invalid profile name")
