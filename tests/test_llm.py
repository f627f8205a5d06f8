"""The LLM processor against a real local HTTP server that speaks the Messages API.

Every test goes through the real ``anthropic`` SDK (``ANTHROPIC_BASE_URL`` points at the
``anthropic_fake`` server of ``tests/anthropic_fake.py``); nothing reaches the network.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import support
import pytest

from anthropic_fake import FAKE_KEY, FakeAnthropic, Reply, unused_local_url
from memlocal import MemoryBank, SaveRequest
from memlocal.config import Config
from memlocal.services.llm import (
    RESPONSE_SCHEMA,
    AnthropicExtractor,
    extractor_from_config,
    fallback_extraction,
    parse_answer,
)
from memlocal.model import CATEGORIES, Extraction

RAW = "Ana said she really prefers dark mode in every editor she uses, including VS Code and vim."
GOOD: dict[str, Any] = {
    "processedContent": "Ana prefers dark mode in every editor (VS Code, vim).",
    "summary": "Ana prefers dark mode",
    "category": "preference",
    "confidence": 0.9,
}


def open_bank(db_path: Path, **overrides: Any) -> MemoryBank:
    """A local-only bank with the configured LLM processor (``llm__timeout_s=1.0`` style overrides)."""
    return MemoryBank.open(db_path, config=Config.load().with_overrides(**overrides))


@pytest.fixture
def llm_bank(anthropic_fake: FakeAnthropic, db_path: Path) -> Iterator[MemoryBank]:
    with open_bank(db_path) as bank:  # (the anthropic_fake fixture has imported the SDK)
        yield bank


def warm_up(bank: MemoryBank, fake: FakeAnthropic) -> None:
    """One good extraction, so the SDK is imported and connected before a timed test starts.

    The deadline counts everything, the SDK's import included (about a second, once per
    process), so a 1 s deadline could expire on a cold first call; these tests time the network.
    """
    fake.respond(Reply.structured(GOOD))
    assert AnthropicExtractor(FAKE_KEY, model="warm-up", timeout_s=30).extract(RAW) is not None  # imports
    assert bank.save(SaveRequest("warm", RAW)).memory.category == "preference"  # connects
    fake.clear()


def join_llm_workers(bank: MemoryBank) -> None:
    """Wait until the bank's extraction calls in flight have finished (so late retries would have
    arrived): closing the processor waits for them; a later save opens it again."""
    extractor = bank._extractor
    assert isinstance(extractor, AnthropicExtractor)
    extractor.close()


def assert_kept_callers_input(memory: Any, raw: str = RAW) -> None:
    """Extraction skipped: what the caller gave, confidence 1.0."""
    assert memory.raw_input == raw
    assert memory.processed_content == raw
    assert memory.summary == " ".join(raw.split())[:50]
    assert memory.category == "general"
    assert memory.confidence == 1.0


# --- a good answer ----------------------------------------------------------------------------


def test_good_answer_structures_the_memory(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank) -> None:
    anthropic_fake.respond(Reply.structured(GOOD))
    m = llm_bank.save(SaveRequest("ana", RAW)).memory
    assert (m.raw_input, m.processed_content, m.summary, m.category, m.confidence) == (
        RAW, GOOD["processedContent"], GOOD["summary"], "preference", 0.9)
    assert llm_bank.get("ana", m.id) == m  # stored as returned
    assert anthropic_fake.count == 1

    req = anthropic_fake.requests[0]
    assert req.path == "/v1/messages"
    headers = {k.lower(): v for k, v in req.headers.items()}
    assert FAKE_KEY in (headers.get("x-api-key", ""), headers.get("authorization", "").removeprefix("Bearer "))
    body = req.body
    assert body["model"] == "claude-haiku-4-5-20251001"
    assert RAW in body["messages"][0]["content"]
    # Structured outputs: the schema travels with the request, the category as an enum.
    fmt = body["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    assert fmt["schema"]["properties"]["category"]["enum"] == list(CATEGORIES)
    assert set(fmt["schema"]["required"]) == {"processedContent", "summary", "category", "confidence"}
    assert fmt["schema"] == json.loads(json.dumps(RESPONSE_SCHEMA))
    assert float(headers["x-stainless-read-timeout"]) <= 5.0  # the attempt is bounded by the deadline


def test_model_override_from_environment(anthropic_fake: FakeAnthropic, db_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_MEMORY_MODEL", "claude-memory-test-model")
    anthropic_fake.respond(Reply.structured(GOOD))
    with open_bank(db_path) as bank:
        bank.save(SaveRequest("ana", RAW))
    assert anthropic_fake.requests[0].body["model"] == "claude-memory-test-model"


@pytest.mark.parametrize(
    "text",
    [
        "```json\n{}\n```",
        "Here is the record you asked for:\n```\n{}\n```\nLet me know if you need more.",
        "Sure! {} Hope this helps.",
        "  {}\n\n",
    ],
    ids=["json-fence", "bare-fence-in-prose", "inline-in-prose", "whitespace"],
)
def test_json_wrapped_in_prose_or_fences(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank, text: str) -> None:
    anthropic_fake.respond(Reply.text(text.replace("{}", json.dumps(GOOD))))
    m = llm_bank.save(SaveRequest("ana", RAW)).memory
    assert (m.processed_content, m.category, m.confidence) == (GOOD["processedContent"], "preference", 0.9)


def test_invalid_category_becomes_general_and_keeps_the_rest(anthropic_fake: FakeAnthropic,
                                                             llm_bank: MemoryBank) -> None:
    anthropic_fake.respond(Reply.structured({**GOOD, "category": "opinion"}))
    m = llm_bank.save(SaveRequest("ana", RAW)).memory
    assert (m.category, m.processed_content, m.summary, m.confidence) == (
        "general", GOOD["processedContent"], GOOD["summary"], 0.9)


def test_values_are_normalised(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank) -> None:
    long_summary = "Ana prefers dark mode in every single editor she has ever used, always"
    anthropic_fake.respond(
        Reply.structured({**GOOD, "summary": long_summary, "category": " Fact ", "confidence": 1.7}),
        Reply.structured({**GOOD, "summary": "", "confidence": -0.3}),
    )
    m = llm_bank.save(SaveRequest("ana", RAW)).memory
    assert m.summary == long_summary[:50].rstrip() and len(m.summary) <= 50
    assert (m.category, m.confidence) == ("fact", 1.0)
    m = llm_bank.save(SaveRequest("bob", RAW)).memory  # another profile: in "ana" the same note is deduplicated
    assert m.summary == GOOD["processedContent"][:50] and m.confidence == 0.0


# --- the model answered, but the answer cannot be parsed -------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        Reply.text("I'm sorry, I can't turn this into a record."),
        Reply.text('{"processedContent": "Ana prefers dark mode", "summary": "dark'),  # cut off
        Reply.text(json.dumps({k: v for k, v in GOOD.items() if k != "confidence"})),
        Reply.text(json.dumps({**GOOD, "confidence": "high"})),
        Reply.text(json.dumps({**GOOD, "processedContent": "   "})),
        Reply.text(json.dumps({**GOOD, "processedContent": "x" * 5000})),
        Reply.text(json.dumps(["Ana", "dark mode"])),
        Reply.message([], stop_reason="refusal"),
        Reply.structured(GOOD | {"summary": None}),
    ],
    ids=["prose", "truncated", "missing-field", "wrong-type", "empty-content", "over-cap",
         "array", "no-text-block", "null-summary"],
)
def test_unparseable_answer_gives_the_deterministic_preview(anthropic_fake: FakeAnthropic,
                                                            llm_bank: MemoryBank, reply: Reply) -> None:
    anthropic_fake.respond(reply)
    m = llm_bank.save(SaveRequest("ana", RAW)).memory
    assert m.raw_input == m.processed_content == RAW
    assert m.summary == RAW[:50]
    assert (m.category, m.confidence) == ("general", 0.5)
    assert anthropic_fake.count == 1  # an answer is an answer: never retried


# --- fields the caller supplied always win ----------------------------------------------------


def test_caller_fields_win_over_the_extraction(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank) -> None:
    anthropic_fake.respond(Reply.structured(GOOD))
    m = llm_bank.save(SaveRequest("ana", RAW, summary="my label", category="behavior", confidence=0.3)).memory
    assert (m.summary, m.category, m.confidence) == ("my label", "behavior", 0.3)
    assert m.processed_content == GOOD["processedContent"]  # not supplied: extracted


def test_caller_fields_win_over_the_fallback(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank) -> None:
    anthropic_fake.respond(Reply.text("no JSON here"))
    m = llm_bank.save(SaveRequest("ana", RAW, confidence=0.8, category="fact")).memory
    assert (m.confidence, m.category, m.processed_content) == (0.8, "fact", RAW)
    m = llm_bank.save(SaveRequest("bob", RAW, summary="given")).memory
    assert (m.confidence, m.category, m.summary) == (0.5, "general", "given")


def test_caller_fields_kept_when_the_call_fails(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank) -> None:
    anthropic_fake.respond(Reply.error(400))
    m = llm_bank.save(SaveRequest("ana", RAW, category="context", summary="s")).memory
    assert (m.category, m.summary, m.confidence, m.processed_content) == ("context", "s", 1.0, RAW)
    m = llm_bank.save(SaveRequest("bob", RAW, confidence=0.2)).memory
    assert m.confidence == 0.2


# --- the call fails: skip extraction ----------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "attempts"),
    [
        (Reply.error(500), 3),  # the SDK's two retries fit in the deadline
        (Reply.error(529), 3),
        (Reply.error(429, headers={"retry-after": "0"}), 3),
        (Reply.error(429, headers={"retry-after": "30"}), 1),  # waiting would pass the deadline
        (Reply.error(503, headers={"x-should-retry": "false"}), 1),
        (Reply.error(400), 1),
        (Reply.error(401), 1),
        (Reply.malformed(), 1),  # surfaces as a JSON decode error, not an SDK exception
        (Reply(body=b"{}"), 1),  # valid JSON, but not a message
        (Reply(body=b'{"content": "text"}'), 1),
        (Reply(body=b"<html>Bad gateway</html>", headers=(("Content-Type", "text/html"),)), 1),
    ],
    ids=["500", "529", "429-retry-now", "429-retry-after-30s", "503-no-retry", "400", "401",
         "malformed-body", "empty-object", "content-not-a-list", "html"],
)
def test_failed_call_keeps_the_callers_input(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank,
                                             reply: Reply, attempts: int) -> None:
    anthropic_fake.respond(reply)
    start = time.monotonic()
    m = llm_bank.save(SaveRequest("ana", RAW)).memory
    assert time.monotonic() - start < 5.0
    assert_kept_callers_input(m)
    join_llm_workers(llm_bank)
    assert anthropic_fake.count == attempts


def test_a_retry_that_succeeds_within_the_deadline(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank) -> None:
    anthropic_fake.respond(Reply.error(500), Reply.error(429), Reply.structured(GOOD))
    m = llm_bank.save(SaveRequest("ana", RAW)).memory
    assert (m.category, m.confidence) == ("preference", 0.9)
    assert anthropic_fake.count == 3


def test_connection_refused(anthropic_fake: FakeAnthropic, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", unused_local_url())
    with open_bank(db_path, llm__timeout_s=1.0) as bank:
        start = time.monotonic()
        m = bank.save(SaveRequest("ana", RAW)).memory
        assert time.monotonic() - start < 3.0  # the SDK's retries end at the 1 s deadline
    assert_kept_callers_input(m)
    assert anthropic_fake.count == 0


# --- the deadline -----------------------------------------------------------------------------


def test_a_silent_server_save_returns_at_the_deadline(anthropic_fake: FakeAnthropic, db_path: Path) -> None:
    """A server that answers after 4 s, under a 1 s deadline: the save returns at the deadline
    with the caller's input; no retry is sent past it."""
    with open_bank(db_path, llm__timeout_s=1.0) as bank:
        warm_up(bank, anthropic_fake)
        anthropic_fake.respond(Reply.sleep(4, then=Reply.structured(GOOD)))
        start = time.monotonic()
        m = bank.save(SaveRequest("ana", RAW)).memory
        elapsed = time.monotonic() - start
        assert elapsed < 3.0, elapsed
        assert_kept_callers_input(m)
        join_llm_workers(bank)  # a retry, if any were sent, would have arrived by now
    assert anthropic_fake.count == 1
    assert all(r.at <= start + 1.0 for r in anthropic_fake.requests)


def test_retries_stop_at_the_deadline(anthropic_fake: FakeAnthropic, db_path: Path) -> None:
    """Slow 500s under a 1 s deadline: retries are sent only while time remains."""
    with open_bank(db_path, llm__timeout_s=1.0) as bank:
        warm_up(bank, anthropic_fake)
        anthropic_fake.respond(Reply.error(500, delay_s=0.45))
        start = time.monotonic()
        m = bank.save(SaveRequest("ana", RAW)).memory
        elapsed = time.monotonic() - start
    assert elapsed < 3.0, elapsed
    assert_kept_callers_input(m)
    assert 1 <= anthropic_fake.count <= 2  # 3 attempts would need ~1.9 s
    assert all(r.at <= start + 1.0 for r in anthropic_fake.requests)


def test_retry_after_past_the_deadline_gives_up_at_once(anthropic_fake: FakeAnthropic, db_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """The server asks for 0.6 s between attempts; a 1 s deadline leaves room for one retry only."""
    with open_bank(db_path, llm__timeout_s=1.0) as bank:
        warm_up(bank, anthropic_fake)
        anthropic_fake.respond(Reply.error(500, headers={"retry-after-ms": "600"}))
        with caplog.at_level(logging.WARNING, logger="memlocal.services.llm"):
            m = bank.save(SaveRequest("ana", RAW)).memory
    assert_kept_callers_input(m)
    assert anthropic_fake.count == 2
    # Gave up on the server's request, not by waiting the deadline out ("no answer within 1 s").
    assert "asks for a retry in 0.6 s, past the deadline" in caplog.text


def test_no_database_lock_is_held_while_waiting(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank,
                                                db_path: Path) -> None:
    """While the request is in flight another connection can take the write lock at once."""
    outcome: list[str] = []

    def write_elsewhere(_body: Any) -> None:
        conn = sqlite3.connect(db_path, timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            outcome.append("free")
        except sqlite3.OperationalError as exc:
            outcome.append(str(exc))
        finally:
            conn.close()

    llm_bank.save(SaveRequest("ana", "warm up the store", use_llm=False))
    anthropic_fake.respond(dataclasses.replace(Reply.structured(GOOD), on_request=write_elsewhere))
    m = llm_bank.save(SaveRequest("ana", RAW)).memory
    assert outcome == ["free"]
    assert m.category == "preference"


# --- when the processor is not used -----------------------------------------------------------


def test_no_key_sends_no_request(anthropic_fake: FakeAnthropic, db_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with open_bank(db_path) as bank:
        assert_kept_callers_input(bank.save(SaveRequest("ana", RAW)).memory)
    assert extractor_from_config(Config.load()) is None
    assert anthropic_fake.count == 0


def test_disabled_in_config_sends_no_request(anthropic_fake: FakeAnthropic, db_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLOCAL_LLM_ENABLED", "false")
    with open_bank(db_path) as bank:
        assert_kept_callers_input(bank.save(SaveRequest("ana", RAW)).memory)
    assert anthropic_fake.count == 0


def test_use_llm_false_and_content_skip_the_processor(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank) -> None:
    anthropic_fake.respond(Reply.structured(GOOD))
    assert_kept_callers_input(llm_bank.save(SaveRequest("ana", RAW, use_llm=False)).memory)
    m = llm_bank.save(SaveRequest("ana", RAW, content="pre-structured")).memory
    assert (m.raw_input, m.processed_content, m.confidence) == (RAW, "pre-structured", 1.0)
    m = llm_bank.save(SaveRequest("ana", content="only content")).memory
    assert m.processed_content == "only content"
    assert anthropic_fake.count == 0


def test_bad_input_is_rejected_before_any_request(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank) -> None:
    from memlocal.errors import InputTooLargeError, ValidationError

    with pytest.raises(InputTooLargeError):
        llm_bank.save(SaveRequest("ana", "x" * 4097))
    with pytest.raises(ValidationError):
        llm_bank.save(SaveRequest("../evil", RAW))
    assert anthropic_fake.count == 0
    assert llm_bank.stats()["totalMemories"] == 0


# --- the key stays secret, concurrency ---------------------------------------------------------


def test_the_key_is_never_logged(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank,
                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="memlocal")
    anthropic_fake.respond(Reply.error(401), Reply.text("not json"), Reply.structured(GOOD))
    for i in range(3):
        llm_bank.save(SaveRequest(f"ana{i}", RAW))  # one profile each: a repeated note would be deduplicated
    assert "LLM extraction skipped" in caplog.text and "could not be parsed" in caplog.text
    assert FAKE_KEY not in caplog.text
    assert FAKE_KEY not in repr(llm_bank._extractor)
    assert all(FAKE_KEY not in json.dumps(row, default=str) for row in llm_bank.config.rows())


def test_concurrent_saves_share_one_processor(anthropic_fake: FakeAnthropic, llm_bank: MemoryBank) -> None:
    warm_up(llm_bank, anthropic_fake)
    anthropic_fake.respond(Reply.structured(GOOD, delay_s=0.5))
    results: list[Extraction | None] = []
    extractor = llm_bank._extractor
    assert isinstance(extractor, AnthropicExtractor)
    threads = [threading.Thread(target=lambda: results.append(extractor.extract(RAW))) for _ in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - start < 1.5  # in parallel (one after another would take 2 s)
    assert len(results) == 4 and all(r is not None and r.category == "preference" for r in results)
    assert anthropic_fake.count == 4


# --- the parser on its own ---------------------------------------------------------------------


def test_parse_answer_rules() -> None:
    assert parse_answer(json.dumps(GOOD)) == Extraction(
        GOOD["processedContent"], GOOD["summary"], "preference", 0.9)
    assert parse_answer(json.dumps({**GOOD, "confidence": 1})).confidence == 1.0  # type: ignore[union-attr]
    assert parse_answer(json.dumps({**GOOD, "confidence": True})) is None
    assert parse_answer('{"processedContent": "a", "summary": "b", "category": "fact", "confidence": NaN}') is None
    assert parse_answer(json.dumps({**GOOD, "summary": "line one\n  line two"})).summary == "line one line two"  # type: ignore[union-attr]
    # The first object in prose wins, even with braces before it.
    text = "Braces {like these} are fine. " + json.dumps(GOOD) + " and {another}"
    assert parse_answer(text) == parse_answer(json.dumps(GOOD))
    assert fallback_extraction("  hello\nworld  ") == Extraction("  hello\nworld  ", "hello world", "general", 0.5)


def test_a_bad_deadline_or_no_key_is_a_config_error() -> None:
    from memlocal.errors import ConfigError

    with pytest.raises(ConfigError, match="llm.timeout_s must be a number more than 0"):
        Config.load(environ={"MEMLOCAL_LLM_TIMEOUT_S": "0"})  # the registry checks limits at load
    with pytest.raises(ConfigError):
        AnthropicExtractor("", model="m")


# --- end to end through the CLI ----------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``memlocal`` in a real process, with this test's environment (key and base URL included).

    The deadline counts the SDK's import (seconds on a loaded machine); these tests are about
    the processor being used, so they give it room."""
    env = {**os.environ, "MEMLOCAL_LLM_TIMEOUT_S": "60"}
    return support.run([sys.executable, "-m", "memlocal", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_cli_save_uses_the_processor_and_no_llm_skips_it(anthropic_fake: FakeAnthropic, cli: Any) -> None:
    """Through the CLI in process (``cli``); the test below runs it as a real process."""
    room = {"MEMLOCAL_LLM_TIMEOUT_S": "60"}  # as run_cli: the first use may import the SDK
    anthropic_fake.respond(Reply.structured(GOOD))
    done = cli("save", "-p", "ana", "--json", RAW, env=room)
    assert done.exit_code == 0, done.stderr
    m = json.loads(done.stdout)["memory"]
    assert (m["processedContent"], m["category"], m["confidence"]) == (GOOD["processedContent"], "preference", 0.9)
    assert anthropic_fake.count == 1

    done = cli("save", "-p", "bob", "--no-llm", "--json", RAW, env=room)  # in "ana": deduplicated
    assert done.exit_code == 0, done.stderr
    m = json.loads(done.stdout)["memory"]
    assert (m["processedContent"], m["category"], m["confidence"]) == (RAW, "general", 1.0)
    assert anthropic_fake.count == 1
    assert FAKE_KEY not in done.output


def test_cli_save_with_a_failing_api_still_saves(anthropic_fake: FakeAnthropic, tmp_path: Path) -> None:
    anthropic_fake.respond(Reply.error(400))
    done = run_cli("--db", str(tmp_path / "cli.db"), "save", "-p", "ana", "--json", RAW)
    assert done.returncode == 0, done.stderr
    m = json.loads(done.stdout)["memory"]
    assert (m["processedContent"], m["confidence"]) == (RAW, 1.0)
    assert anthropic_fake.count == 1


def test_importing_memlocal_does_not_import_the_sdk() -> None:
    code = "import sys, memlocal, memlocal.services.llm, memlocal.faces.cli; print('anthropic' in sys.modules)"
    done = support.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
