"""Every bad input gets a clear one-line error and leaves the store unchanged."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Callable

import pytest

from memlocal import InputTooLargeError, MemoryBank, NotFoundError, SaveRequest, ValidationError
from conftest import Cli


def snapshot(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM memories ORDER BY id").fetchall()
    finally:
        conn.close()


@pytest.fixture
def seeded(bank: MemoryBank) -> MemoryBank:
    bank.save(SaveRequest("alice", content="Prefers dark mode", category="preference"))
    bank.save(SaveRequest("bob", "Works on the billing service"))
    return bank


def assert_rejected(bank: MemoryBank, call: Callable[[], Any], exc: type[Exception], *needles: str) -> None:
    before = snapshot(bank.path)
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and message
    for needle in needles:
        assert needle in message
    assert snapshot(bank.path) == before


def test_raw_input_over_the_cap_by_one_byte(seeded: MemoryBank) -> None:
    assert_rejected(seeded, lambda: seeded.save(SaveRequest("alice", "x" * 4097)), InputTooLargeError, "4097", "4096")


def test_raw_input_at_the_cap_is_accepted(seeded: MemoryBank) -> None:
    m = seeded.save(SaveRequest("alice", "x" * 4096)).memory
    assert len(m.raw_input.encode()) == 4096


def test_multibyte_characters_at_the_edge(seeded: MemoryBank) -> None:
    # 1365 three-byte characters = 4095 bytes; one more "é" (2 bytes) crosses the cap.
    at_edge = "€" * 1365 + "a"  # 4096 bytes
    assert seeded.save(SaveRequest("alice", at_edge)).memory.raw_input == at_edge
    over = "€" * 1365 + "é"  # 4097 bytes though only 1366 characters
    assert_rejected(seeded, lambda: seeded.save(SaveRequest("alice", over)), InputTooLargeError, "4097 bytes", "4096")


def test_content_is_capped_too(seeded: MemoryBank) -> None:
    assert_rejected(seeded, lambda: seeded.save(SaveRequest("alice", content="y" * 5000)), InputTooLargeError, "5000")


@pytest.mark.parametrize("profile", ["../x", "a/b", "", ".hidden", "a b", "x" * 65, "naïve", "a\\b", "a\x00b"])
def test_bad_profile_names(seeded: MemoryBank, profile: str) -> None:
    assert_rejected(seeded, lambda: seeded.save(SaveRequest(profile, "hello")), ValidationError, "invalid profile name")
    assert_rejected(seeded, lambda: seeded.list(profile), ValidationError, "invalid profile name")


@pytest.mark.parametrize("memory_id", ["mem-123", "mem-ABCDEF12", "mem-0123456789", "../mem-01234567", "", "x"])
def test_bad_ids(seeded: MemoryBank, memory_id: str) -> None:
    assert_rejected(seeded, lambda: seeded.get("alice", memory_id), ValidationError, "invalid memory id")
    assert_rejected(seeded, lambda: seeded.delete("alice", memory_id), ValidationError, "invalid memory id")


def test_unknown_category(seeded: MemoryBank) -> None:
    assert_rejected(seeded, lambda: seeded.save(SaveRequest("alice", "x", category="opinion")), ValidationError, "unknown category")


@pytest.mark.parametrize("confidence", [-0.01, 1.01, float("nan"), float("inf"), "high", True])
def test_confidence_outside_range(seeded: MemoryBank, confidence: Any) -> None:
    assert_rejected(seeded, lambda: seeded.save(SaveRequest("alice", "x", confidence=confidence)), ValidationError, "confidence")


def test_summary_over_fifty_characters(seeded: MemoryBank) -> None:
    assert_rejected(seeded, lambda: seeded.save(SaveRequest("alice", "x", summary="s" * 51)), ValidationError, "50")


def test_empty_and_missing_input(seeded: MemoryBank) -> None:
    assert_rejected(seeded, lambda: seeded.save(SaveRequest("alice")), ValidationError, "rawInput or content")
    assert_rejected(seeded, lambda: seeded.save(SaveRequest("alice", "   ")), ValidationError, "empty")


def test_missing_id_on_get_and_delete(seeded: MemoryBank) -> None:
    assert_rejected(seeded, lambda: seeded.get("alice", "mem-00000000"), NotFoundError, "mem-00000000")
    assert_rejected(seeded, lambda: seeded.delete("alice", "mem-00000000"), NotFoundError, "mem-00000000")


def test_another_profiles_memory_is_not_found(seeded: MemoryBank) -> None:
    bob_id = seeded.list("bob").memories[0].id
    assert_rejected(seeded, lambda: seeded.get("alice", bob_id), NotFoundError)
    assert_rejected(seeded, lambda: seeded.delete("alice", bob_id), NotFoundError)


@pytest.mark.parametrize(("limit", "offset"), [(0, 0), (-1, 0), (10, -1), (100000, 0)])
def test_bad_paging(seeded: MemoryBank, limit: int, offset: int) -> None:
    assert_rejected(seeded, lambda: seeded.list("alice", limit=limit, offset=offset), ValidationError)


# --- the same through the CLI: one line on stderr, non-zero exit, no traceback -------------------


@pytest.mark.parametrize(
    "args",
    [
        ["save", "--profile", "../x", "hello"],
        ["save", "--profile", "alice", "x" * 4097],
        ["save", "--profile", "alice", "--confidence", "2", "hi"],
        ["save", "--profile", "alice", "--category", "opinion", "hi"],
        ["save", "--profile", "alice"],
        ["get", "--profile", "alice", "mem-zzzz"],
        ["get", "--profile", "alice", "mem-00000000"],
        ["delete", "--profile", "alice", "mem-00000000"],
        ["list", "--profile", "a/b"],
    ],
)
def test_cli_bad_input_is_one_line(seeded: MemoryBank, args: list[str], cli: Cli) -> None:
    before = snapshot(seeded.path)
    result = cli(*args, db=seeded.path)
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output + result.stderr
    assert snapshot(seeded.path) == before


# --- a recall's arguments: one value, validated when built -------------------------------------


def test_a_recall_query_is_checked_when_it_is_built() -> None:
    from memlocal import RecallQuery

    for kwargs, needle in (({"limit": 0}, "limit must be an integer from 1 to 1000"),
                           ({"limit": True}, "limit must be an integer"),
                           ({"min_score": 1.5}, "minScore must be a number from 0 to 1"),
                           ({"min_score": float("nan")}, "minScore"),
                           ({"exclude_ids": ("mem-xyz",)}, "invalid memory id")):
        with pytest.raises(ValidationError, match=needle):
            RecallQuery("alice", "dark mode", **kwargs)
    with pytest.raises(ValidationError, match="profile"):
        RecallQuery("../etc", "dark mode")
    with pytest.raises(ValidationError, match="query"):
        RecallQuery("alice", "bad \udc80 text")
    # One id is one id, and the query is immutable.
    q = RecallQuery("alice", "dark mode", exclude_ids="mem-0000beef")  # type: ignore[arg-type]
    assert q.exclude_ids == ("mem-0000beef",)
    with pytest.raises(AttributeError):
        q.limit = 3  # type: ignore[misc]


def test_a_recall_takes_one_query_value(seeded: MemoryBank) -> None:
    """The bank's recall and query take one RecallQuery, their only argument (no second form)."""
    from memlocal import RecallQuery

    from memlocal.model import utcnow

    now = utcnow()
    q = RecallQuery("alice", "dark mode", limit=5, min_score=0.0, now=now)
    by_value = seeded.query_with_relevance(q)
    assert by_value and by_value == seeded.query_with_relevance(RecallQuery("alice", "dark mode", limit=5, min_score=0.0, now=now))
    with pytest.raises(TypeError):
        seeded.query_with_relevance(q, "other")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        seeded.recall("alice", "dark mode")  # type: ignore[call-arg]
    assert_rejected(seeded, lambda: seeded.recall(RecallQuery("alice", "dark mode", limit=0)), ValidationError, "limit")
    assert seeded.recall(q)[0].memory.access_count == 0  # the values the ranking used; the bump is stored
    assert seeded.get("alice", by_value[0].memory.id).access_count == 1
