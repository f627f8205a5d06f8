"""The memory tools (the spec's four and memory_restore): definitions as data, argument validation, and profile isolation."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from memlocal import MemoryBank, NotFoundError, SaveRequest, ValidationError
from memlocal.faces.tools import MEMORY_TOOL_NAMES, TOOL_NAMES, dispatch, tool_definitions


def test_definitions_are_registrable_data() -> None:
    tools = tool_definitions()
    assert [t["name"] for t in tools] == list(TOOL_NAMES) == [*MEMORY_TOOL_NAMES, "memory_restore"]
    for t in tools:
        assert set(t) == {"name", "description", "inputSchema"}
        assert t["description"]
        jsonschema.Draft202012Validator.check_schema(t["inputSchema"])
        assert t["inputSchema"]["type"] == "object"
        assert t["inputSchema"]["additionalProperties"] is False
        assert not any("profile" in p.lower() for p in t["inputSchema"]["properties"])
    props = {t["name"]: set(t["inputSchema"]["properties"]) for t in tools}
    assert props == {
        "memory_save": {"rawInput", "content", "category", "confidence", "summary", "supersedes", "autoSupersede"},
        "memory_recall": {"query", "limit", "minScore", "full"},
        "memory_list": {"limit", "offset", "full"},
        "memory_delete": {"id"},
        "memory_restore": {"id"},
    }
    json.dumps(tools)  # plain JSON
    tools[0]["name"] = "changed"
    assert tool_definitions()[0]["name"] == "memory_save"  # callers get copies


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("memory_save", {}, "give rawInput or content"),
        ("memory_save", {"summary": "x"}, "give rawInput or content"),
        ("memory_save", {"content": "x", "confidence": 1.5}, "confidence"),
        ("memory_save", {"content": "x", "confidence": "high"}, "confidence"),
        ("memory_save", {"content": "x", "category": "secret"}, "category"),
        ("memory_save", {"content": "x", "summary": "s" * 51}, "summary"),
        ("memory_save", {"content": ""}, "content"),
        ("memory_save", {"content": "x", "extra": 1}, "extra"),
        ("memory_save", {"rawInput": "é" * 2049}, "4096 bytes"),
        ("memory_recall", {}, "query"),
        ("memory_recall", {"query": 3}, "query"),
        ("memory_recall", {"query": "x", "limit": 0}, "limit"),
        ("memory_recall", {"query": "x", "limit": "5"}, "limit"),
        ("memory_recall", {"query": "x", "limit": 2.5}, "limit"),
        ("memory_recall", {"query": "x", "minScore": -0.1}, "minScore"),
        ("memory_list", {"offset": -1}, "offset"),
        ("memory_list", {"limit": 101}, "limit"),
        ("memory_delete", {}, "id"),
        ("memory_delete", {"id": "../../etc/passwd"}, "id"),
        ("memory_delete", {"id": "mem-ABCDEF12"}, "id"),
        ("memory_forget", {}, "unknown tool"),
        ("memory_list", [1, 2], "JSON object"),
        ("memory_recall", {"query": "x", "profile": "b"}, "session's profile"),
        ("memory_list", {"profileName": "b"}, "session's profile"),
        ("memory_save", {"content": "x", "Profile": "b"}, "session's profile"),
    ],
)
def test_schema_errors_change_nothing(bank: MemoryBank, tool: str, args: Any, message: str) -> None:
    bank.save(SaveRequest("a", content="existing memory"))
    with pytest.raises(ValidationError) as info:
        dispatch(bank, tool, args, "a")
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert bank.stats()["totalMemories"] == 1
    assert bank.list("a").memories[0].access_count == 0


def test_session_profile_is_required_and_validated(bank: MemoryBank) -> None:
    for profile in ("", None, "../b", "a/b"):
        with pytest.raises(ValidationError):
            dispatch(bank, "memory_list", {}, profile)  # type: ignore[arg-type]


def test_save_recall_list_delete(bank: MemoryBank) -> None:
    saved = dispatch(bank, "memory_save", {"content": "Prefers pnpm over npm", "category": "preference",
                                           "confidence": 0.9, "summary": "pnpm"}, "a")
    assert saved["synced"] is False
    mem = saved["memory"]  # lean: what the agent needs of what it saved
    assert (mem["category"], mem["content"], mem["summary"]) == ("preference", "Prefers pnpm over npm", "pnpm")
    stored = bank.get("a", mem["id"])
    assert (stored.profile_name, stored.confidence) == ("a", 0.9)
    raw = dispatch(bank, "memory_save", {"rawInput": "The CI runs on Tuesdays"}, "a")["memory"]
    assert raw["content"] == "The CI runs on Tuesdays" and "summary" not in raw and "rawInput" not in raw

    recalled = dispatch(bank, "memory_recall", {"query": "which package manager, pnpm or npm?", "limit": 1}, "a")
    json.dumps(recalled)
    [hit] = recalled["results"]
    assert hit["id"] == mem["id"]
    assert set(hit["breakdown"]) == {"recency", "usage", "topic", "confidenceMul"}
    assert hit["score"] > 0
    assert bank.get("a", mem["id"]).access_count == 1  # recall counts as a use

    page = dispatch(bank, "memory_list", {"limit": 1, "offset": 1}, "a")
    assert (page["total"], page["limit"], page["offset"]) == (2, 1, 1)
    assert [m["id"] for m in page["memories"]] == [mem["id"]]
    assert bank.get("a", mem["id"]).access_count == 1  # list does not
    assert dispatch(bank, "memory_list", None, "a")["limit"] == 20

    assert dispatch(bank, "memory_delete", {"id": mem["id"]}, "a") == {"deleted": mem["id"]}
    with pytest.raises(NotFoundError):
        dispatch(bank, "memory_delete", {"id": mem["id"]}, "a")


def test_a_session_never_reaches_another_profile(bank: MemoryBank) -> None:
    mine = dispatch(bank, "memory_save", {"content": "Alpha deploys with Helm"}, "alpha")["memory"]
    theirs = dispatch(bank, "memory_save", {"content": "Beta deploys with Helm too"}, "beta")["memory"]

    recalled = dispatch(bank, "memory_recall", {"query": "deploys helm", "minScore": 0}, "alpha")["results"]
    assert [r["id"] for r in recalled] == [mine["id"]]
    listed = dispatch(bank, "memory_list", {"limit": 100}, "alpha")
    assert [m["id"] for m in listed["memories"]] == [mine["id"]] and listed["total"] == 1

    with pytest.raises(NotFoundError):
        dispatch(bank, "memory_delete", {"id": theirs["id"]}, "alpha")
    for tool, args in (("memory_delete", {"id": theirs["id"], "profile": "beta"}),
                       ("memory_list", {"profile": "beta"}),
                       ("memory_recall", {"query": "helm", "profile": "beta"})):
        with pytest.raises(ValidationError):
            dispatch(bank, tool, args, "alpha")
    assert bank.get("beta", theirs["id"]).access_count == 0  # untouched, not even counted as used
    assert dispatch(bank, "memory_list", {}, "beta")["total"] == 1


def test_recall_and_list_are_lean_unless_full_is_asked(bank: MemoryBank) -> None:
    long = ("The staging cluster runs Kubernetes 1.29 and deploys every weekday at 10:00 through Argo CD, "
            "with a manual gate")
    saved = dispatch(bank, "memory_save", {"rawInput": long}, "a")["memory"]
    dispatch(bank, "memory_save", {"content": "Prefers pnpm", "summary": "package manager choice",
                                   "category": "preference"}, "a")
    [hit] = dispatch(bank, "memory_recall", {"query": "when does staging deploy?"}, "a")["results"]
    # Only what an agent needs: no rawInput beside processedContent, no default summary repeating the
    # content's start, the score and the four signals to 3 decimals, the evidence without its numbers.
    assert set(hit) == {"id", "category", "content", "score", "breakdown", "evidence"}
    assert (hit["id"], hit["category"], hit["content"]) == (saved["id"], "general", long)
    assert set(hit["evidence"]) == {"terms", "clusters"} and "deploy" in hit["evidence"]["terms"]
    for value in (hit["score"], *hit["breakdown"].values()):
        assert value == round(value, 3)
    assert len(json.dumps(hit)) < len(long) + 250
    full = dispatch(bank, "memory_recall", {"query": "when does staging deploy?", "full": True}, "a")["results"][0]
    assert set(full) == {"memory", "score", "breakdown", "evidence"}
    assert full["memory"]["rawInput"] == long and set(full["breakdown"]) >= {"weights", "maturity", "score"}
    assert full["score"] == round(full["score"], 6) and "strength" in full["evidence"]

    page = dispatch(bank, "memory_list", {}, "a")
    assert [set(m) for m in page["memories"]] == [{"id", "category", "content", "summary", "createdAt"},
                                                  {"id", "category", "content", "createdAt"}]
    assert page["memories"][0]["summary"] == "package manager choice"
    assert (page["total"], page["limit"], page["offset"]) == (2, 20, 0)
    full_page = dispatch(bank, "memory_list", {"full": True}, "a")
    assert full_page["memories"][1] == bank.get("a", saved["id"]).to_dict()
    with pytest.raises(ValidationError, match="full"):
        dispatch(bank, "memory_list", {"full": "yes"}, "a")


def test_the_tool_descriptions_say_results_are_lean() -> None:
    tools = {t["name"]: t for t in tool_definitions()}
    for name in ("memory_recall", "memory_list"):
        assert "lean" in tools[name]["description"] and "full to true" in tools[name]["description"]
        assert tools[name]["inputSchema"]["properties"]["full"] == {
            "type": "boolean", "default": False, "description": tools[name]["inputSchema"]["properties"]["full"]["description"]}
