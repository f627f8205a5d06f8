"""Memory hygiene: deduplication, supersession, retention.

Every face is driven for real: the library, the CLI (click runner on a real file), the REST API
(uvicorn + httpx), the ``memory_save`` tool, and the LLM processor against the fake Anthropic
server.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator
import pytest
from api_live import LiveServer
from anthropic_fake import FakeAnthropic, Reply
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import http_client

from memlocal import MemoryBank, NotFoundError, RecallQuery, SaveRequest, ValidationError
from memlocal.faces.api import create_app
from memlocal.faces.cli import main
from memlocal.config import Config
from memlocal.hygiene.rules import (
    DEFAULT_NEAR_THRESHOLD,
    RetentionRule,
    near_duplicate,
    normalise,
    parse_age,
    signature,
)
from memlocal.model import utcnow
from memlocal.faces.tools import dispatch

P = "ana"
TEXT = "Ana prefers dark mode in every editor she uses."
SAME = "  ana PREFERS dark-mode, in every editor she uses!! "  # case, whitespace, punctuation
REWORDED = "Ana prefers the dark mode in every editors she used"  # articles, inflection


def bank_at(path: Path, **overrides: Any) -> MemoryBank:
    return MemoryBank.open(path, config=Config.load().with_overrides(**overrides))


@pytest.fixture
def local(tmp_path: Path) -> Iterator[MemoryBank]:
    with bank_at(tmp_path / "h.db") as b:
        yield b


def count(bank: MemoryBank, profile: str = P) -> int:
    return bank.list(profile).total


# --- 1. deduplication ---------------------------------------------------------------------------


def test_exact_duplicate_returns_the_existing_memory_and_counts_no_access(local: MemoryBank) -> None:
    first = local.save(SaveRequest(P, TEXT))
    assert first.deduplicated is False
    again = local.save(SaveRequest(P, SAME))
    assert again.deduplicated is True and again.memory == first.memory
    assert again.to_dict()["deduplicated"] is True and again.to_dict()["synced"] is False
    stored = local.get(P, first.memory.id)
    assert stored.access_count == 0 and stored.last_accessed_at is None
    assert count(local) == 1
    # Another profile is another bank of memories.
    assert local.save(SaveRequest("bob", TEXT)).deduplicated is False


def test_content_repeating_a_raw_input_is_a_duplicate_too(local: MemoryBank) -> None:
    first = local.save(SaveRequest(P, "note as typed", content="Structured: the note"))
    assert local.save(SaveRequest(P, content="structured the note")).memory.id == first.memory.id
    assert local.save(SaveRequest(P, "Note, as typed.")).memory.id == first.memory.id


def test_reworded_duplicate_is_merged_and_the_setting_turns_it_off(tmp_path: Path) -> None:
    with bank_at(tmp_path / "a.db") as bank:
        first = bank.save(SaveRequest(P, TEXT)).memory
        assert bank.save(SaveRequest(P, REWORDED)).memory.id == first.id
    with bank_at(tmp_path / "b.db", dedup__near=False) as bank:
        first = bank.save(SaveRequest(P, TEXT)).memory
        assert bank.save(SaveRequest(P, REWORDED)).deduplicated is False
        assert bank.save(SaveRequest(P, SAME)).memory.id == first.id  # exact duplicates still merge
    with bank_at(tmp_path / "c.db", dedup__enabled=False) as bank:
        bank.save(SaveRequest(P, TEXT))
        assert bank.save(SaveRequest(P, SAME)).deduplicated is False and count(bank) == 2


def test_the_recall_index_finds_near_duplicate_candidates(tmp_path: Path) -> None:
    """The near check reads the stored near_key at the default threshold and the recall index
    (``memory_features``) below it, as the LLM's similar memories do: a candidate IS found (a
    silent "no candidates" would turn near-dedup off), by profile, by either lookup."""
    from memlocal.relevance import text
    from memlocal.hygiene.rules import near_key

    with bank_at(tmp_path / "a.db", dedup__enabled=False) as bank:
        first = bank.save(SaveRequest(P, TEXT)).memory
        bank.save(SaveRequest(P, "Run the tests before every deploy")).memory
        other = bank.save(SaveRequest("other", TEXT)).memory
        terms = sorted(text.terms(REWORDED))
        key = near_key(REWORDED)
        assert key is not None and key == near_key(TEXT) and key == near_key(SAME)
        assert [m.id for m in bank.store.find_by_near_key(P, key)] == [first.id]
        assert [m.id for m in bank.store.find_by_near_key("other", key)] == [other.id]
        assert [m.id for m in bank.store.similar(P, terms, 8)][0] == first.id
        assert [m.id for m in bank.store.similar("other", terms, 8)] == [other.id]
        assert bank.store.similar(P, ["zzzunknown"], 8) == []
    with bank_at(tmp_path / "b.db", dedup__near_threshold=0.8) as bank:
        first = bank.save(SaveRequest(P, TEXT)).memory
        assert bank.save(SaveRequest(P, REWORDED)).memory.id == first.id


@pytest.mark.parametrize("other", [
    "Ana prefers light mode in every editor she uses.",     # a different word
    "Ana does not prefer dark mode in every editor she uses.",  # negation (a stopword)
    "Ben prefers dark mode in every editor he uses.",        # another subject
    "She prefers dark mode in every editor Ana uses.",       # pronouns
    "Ana prefers dark mode in every editor she uses at 9pm.",  # an added number
    "Run the tests before every deploy of the editor Ana uses",
])
def test_distinct_statements_are_kept_apart(local: MemoryBank, other: str) -> None:
    local.save(SaveRequest(P, TEXT))
    assert local.save(SaveRequest(P, other)).deduplicated is False


def test_order_and_small_words_matter() -> None:
    t = DEFAULT_NEAR_THRESHOLD
    assert not near_duplicate(signature("Run the unit tests before deploying the service"),
                              signature("Run the unit tests after deploying the service"), t)
    assert not near_duplicate(signature("Alice owes Bob twenty euros for lunch"),
                              signature("Bob owes Alice twenty euros for lunch"), t)
    assert near_duplicate(signature("Alice owes Bob twenty euros for the lunch"),
                          signature("alice owes bob twenty euros for lunch."), t)


def test_inactive_memories_are_not_duplicates(local: MemoryBank) -> None:
    old = local.save(SaveRequest(P, TEXT)).memory
    local.save(SaveRequest(P, "Ana switched to light mode everywhere", supersedes=old.id))
    back = local.save(SaveRequest(P, TEXT))  # the old fact is true again: a new memory
    assert back.deduplicated is False and back.memory.id != old.id


_WORDS = st.sampled_from(
    "ana ben carla dev team prefers likes owns avoids deploys tests reads writes python go rust "
    "coffee tea lunch monday friday editor vim emacs paris lisbon berlin shellfish peanuts "
    "morning evening json yaml docker kubernetes".split())
_SMALL = st.sampled_from(["not", "never", "he", "she", "before", "after", "with", "without", "in", "on"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.lists(_WORDS, min_size=4, max_size=12, unique=True), data=st.data())
def test_generated_distinct_statements_are_never_merged(base: list[str], data: st.DataObject) -> None:
    """A statement and a variant that changes its meaning (a content word replaced, added or
    removed, a small word changed, words swapped, a number changed) never merge."""
    a = list(base)
    kind = data.draw(st.sampled_from(["replace", "add", "drop", "small", "swap", "number"]))
    b = list(a)
    if kind == "replace":
        i = data.draw(st.integers(0, len(b) - 1))
        b[i] = data.draw(_WORDS.filter(lambda w: w not in a))
    elif kind == "add":
        b.insert(data.draw(st.integers(0, len(b))), data.draw(_WORDS.filter(lambda w: w not in a)))
    elif kind == "drop":
        del b[data.draw(st.integers(0, len(b) - 1))]
    elif kind == "small":
        b.insert(data.draw(st.integers(0, len(b))), data.draw(_SMALL))
    elif kind == "swap":
        i, j = sorted(data.draw(st.lists(st.integers(0, len(b) - 1), min_size=2, max_size=2, unique=True)))
        b[i], b[j] = b[j], b[i]
    else:
        n = data.draw(st.integers(0, 99))
        a.append(str(n))
        b.append(str(n + 1))
    assert not near_duplicate(signature(" ".join(a)), signature(" ".join(b)), DEFAULT_NEAR_THRESHOLD)


@settings(max_examples=100, deadline=None)
@given(words=st.lists(_WORDS, min_size=4, max_size=12, unique=True),
       punct=st.sampled_from([".", "!", ",", " -", ";"]), upper=st.booleans())
def test_generated_rewordings_are_merged(words: list[str], punct: str, upper: bool) -> None:
    """Case, punctuation, whitespace and articles never make a difference."""
    a = " ".join(words)
    b = "The " + f"{punct}  ".join(w.upper() if upper else w for w in words) + punct
    assert near_duplicate(signature(a), signature(b), DEFAULT_NEAR_THRESHOLD)
    assert normalise(a) == normalise(" ".join(f"{w}{punct}" for w in words))


def test_dedup_on_every_face(tmp_path: Path) -> None:
    db = tmp_path / "faces.db"
    with bank_at(db) as bank:
        first = bank.save(SaveRequest(P, TEXT)).memory
        # the tool
        out = dispatch(bank, "memory_save", {"content": SAME}, P)
        assert out["deduplicated"] is True and out["memory"]["id"] == first.id
        assert dispatch(bank, "memory_save", {"rawInput": REWORDED}, P)["memory"]["id"] == first.id
        # REST: 200 (nothing created), the same memory
        with LiveServer(create_app(bank)) as server, http_client(base_url=server.url, timeout=30) as c:
            r = c.post(f"/api/profiles/{P}/memories", json={"rawInput": SAME})
            assert r.status_code == 200 and r.json()["deduplicated"] is True
            assert r.json()["memory"]["id"] == first.id
            r = c.post(f"/api/profiles/{P}/memories", json={"content": REWORDED})
            assert r.status_code == 200 and r.json()["memory"]["id"] == first.id
            r = c.post(f"/api/profiles/{P}/memories", json={"content": "Something else entirely"})
            assert r.status_code == 201 and r.json()["deduplicated"] is False
    # the CLI, in its own process state
    runner = CliRunner()
    for text in (SAME, REWORDED):
        res = runner.invoke(main, ["--db", str(db), "save", "-p", P, "--json", text])
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        assert data["deduplicated"] is True and data["memory"]["id"] == first.id
    res = runner.invoke(main, ["--db", str(db), "save", "-p", P, SAME])
    assert "already saved" in res.output and first.id in res.output
    with bank_at(db) as bank:
        assert count(bank) == 2 and bank.get(P, first.id).access_count == 0


def test_a_stale_key_never_merges(tmp_path: Path) -> None:
    """Keys written by another tool can be wrong; the text itself decides."""
    with bank_at(tmp_path / "k.db") as bank:
        m = bank.save(SaveRequest(P, TEXT)).memory
        with bank.store.transaction() as c:  # another writer changed the text, not the key
            c.execute("UPDATE memories SET processed_content = 'Ana likes tea', raw_input = 'Ana likes tea'"
                      " WHERE id = ?", (m.id,))
        assert bank.save(SaveRequest(P, TEXT)).deduplicated is False


def test_existing_databases_get_their_keys(tmp_path: Path) -> None:
    """Migrations 7 and 9 fill the keys of memories saved before them (the file is taken back
    to schema 6: what migrations 7 and later added is removed)."""
    path = tmp_path / "old.db"
    with bank_at(path) as bank:
        m = bank.save(SaveRequest(P, TEXT)).memory
    conn = sqlite3.connect(path)
    conn.execute("UPDATE memories SET text_key = NULL, raw_key = NULL")
    conn.execute("PRAGMA user_version = 6")
    conn.execute("DROP INDEX memories_text_key")
    conn.execute("DROP INDEX memories_raw_key")
    conn.execute("ALTER TABLE memories DROP COLUMN text_key")
    conn.execute("ALTER TABLE memories DROP COLUMN raw_key")
    conn.execute("DROP TABLE automation_outbox")  # migration 8
    conn.execute("DROP INDEX memories_near_key")  # migration 9
    conn.execute("ALTER TABLE memories DROP COLUMN near_key")
    conn.commit()
    conn.close()
    with bank_at(path) as bank:
        assert bank.save(SaveRequest(P, SAME)).memory.id == m.id


# Texts that differ in case inside a path, a flag or an identifier, or in an operator or
# a separator that changes the meaning, were merged (the second save returned the first).
EXACT_DISTINCT = [
    ("Deploy reads /etc/App/config.yml", "Deploy reads /etc/app/config.yml"),
    ("Run the tests with -v", "Run the tests with -V"),
    ("The score is a * b", "The score is a / b"),
    ("The ratio is 3/2", "The ratio is 3-2"),
    ("Set NODE_ENV before the build", "Set NODE-ENV before the build"),
    ("Push with --force", "Push with -force"),
    ("The variable is x_1", "The variable is x-1"),
    ("The cache lives in C:\\Users\\build", "The cache lives in C:/Users/build"),
]


@pytest.mark.parametrize("first,second", EXACT_DISTINCT)
def test_exact_means_exact_case_operators_and_separators_are_kept(local: MemoryBank, first: str, second: str) -> None:
    a = local.save(SaveRequest(P, content=first, category="fact"))
    b = local.save(SaveRequest(P, content=second, category="fact"))
    assert b.deduplicated is False and b.memory.id != a.memory.id
    # Prose around them still folds: the same technical token, case and punctuation changed.
    again = local.save(SaveRequest(P, content=second.upper().replace(second.split()[-1].upper(), second.split()[-1]) + "!",
                       category="fact"))
    assert again.deduplicated is True and again.memory.id == b.memory.id


def test_a_near_duplicate_keeps_its_flags_and_paths_exact(local: MemoryBank) -> None:
    first = local.save(SaveRequest(P, content="Always run the integration tests with -v before merging", category="fact"))
    assert local.save(SaveRequest(P, content="Always run the integration test with -V before merging",
                      category="fact")).deduplicated is False
    assert local.save(SaveRequest(P, content="always run the integration test with -v before merging",
                      category="fact")).memory.id == first.memory.id


# A flag's argument in plain letters is part of the flag (docs/hygiene.md, "The duplicate key":
# case is kept inside paths, flags and identifiers): `-k SLOW` and `-k slow` select other tests.
# Were merged.
FLAG_ARGUMENT_DISTINCT = [
    ("Run pytest with -k SLOW", "Run pytest with -k slow"),
    ("Search the logs with grep -i Foo", "Search the logs with grep -i foo"),
    ("Deploy with --name Prod", "Deploy with --name prod"),
    ("Find the commit with git log -S Token", "Find the commit with git log -S token"),
    ('Filter with -k "Slow and not DB" in CI', 'Filter with -k "slow and not db" in CI'),
]


@pytest.mark.parametrize("first,second", FLAG_ARGUMENT_DISTINCT)
def test_a_flags_argument_keeps_its_case(local: MemoryBank, first: str, second: str) -> None:
    from memlocal.hygiene.rules import exact_form

    assert exact_form(first) != exact_form(second)
    a = local.save(SaveRequest(P, content=first, category="fact"))
    b = local.save(SaveRequest(P, content=second, category="fact"))
    assert b.deduplicated is False and b.memory.id != a.memory.id
    # The prose around the flag still folds: its case and the sentence's punctuation.
    flag_at = second.index(" -")
    again = local.save(SaveRequest(P, content=second[:flag_at].upper() + second[flag_at:] + ".", category="fact"))
    assert again.deduplicated is True and again.memory.id == b.memory.id


def test_prose_around_a_flag_folds_and_a_flag_ends_at_the_sentences_punctuation(local: MemoryBank) -> None:
    from memlocal.hygiene.rules import exact_form

    assert exact_form("Ana likes tea") == exact_form("ana likes tea!")
    assert exact_form("Run it with -k SLOW, then Lint") == exact_form("run it with -k SLOW, then lint")
    assert exact_form("Use -v, Always") == exact_form("use -v, always")  # "-v," takes no argument
    assert exact_form("Use -v -k SLOW") != exact_form("Use -v -k slow")  # a flag after a flag
    assert exact_form("It is -5 Degrees") == exact_form("it is -5 degrees")  # a number, not a flag
    assert exact_form("Notes - Ana likes tea") == exact_form("notes - ana likes tea")  # a dash, not a flag
    assert exact_form("Tea \u2014 Ana likes it") == exact_form("tea \u2014 ana likes it")


def test_a_near_duplicate_keeps_a_flags_argument(local: MemoryBank) -> None:
    first = local.save(SaveRequest(P, content="Always run the slow integration tests with -k SLOW before merging", category="fact"))
    other = local.save(SaveRequest(P, content="Always run the slow integration test with -k slow before merging", category="fact"))
    assert other.deduplicated is False and other.memory.id != first.memory.id
    again = local.save(SaveRequest(P, content="always run the slow integration test with -k SLOW before merging", category="fact"))
    assert again.deduplicated is True and again.memory.id == first.memory.id


def test_the_same_text_under_another_category_is_the_same_memory(local: MemoryBank) -> None:
    """"Ana is allergic to peanuts" as a fact and as general reached the block twice.
    The save answers with the existing memory; its category is kept (docs/hygiene.md)."""
    fact = local.save(SaveRequest(P, content="Ana from the design team is allergic to peanuts", category="fact"))
    again = local.save(SaveRequest(P, content="Ana from the design team is allergic to peanuts.", category="general"))
    assert again.deduplicated is True and again.memory.id == fact.memory.id and again.memory.category == "fact"
    reworded = local.save(SaveRequest(P, content="ana from the design team is allergic to the peanuts", category="context"))
    assert reworded.deduplicated is True and reworded.memory.id == fact.memory.id
    assert count(local) == 1
    block = local.render_context_block(P, "Plan the team lunch: any allergies?").text
    assert block.count("allergic to peanuts") == 1


# --- 2. supersession ----------------------------------------------------------------------------


def test_supersede_in_one_transaction_and_never_recalled_after(local: MemoryBank) -> None:
    old = local.save(SaveRequest(P, "Ana lives in Paris", category="fact")).memory
    res = local.save(SaveRequest(P, "Ana lives in Lisbon now", category="fact", supersedes=old.id))
    new = res.memory
    assert new.supersedes == old.id and new.to_dict()["supersedes"] == old.id
    stored_old = local.get(P, old.id)
    assert stored_old.is_active is False and stored_old.superseded_by == new.id
    assert stored_old.to_dict()["supersededBy"] == new.id and stored_old.to_dict()["isActive"] is False
    assert [s.memory.id for s in local.recall(RecallQuery(P, "where does Ana live? Paris or Lisbon"))] == [new.id]
    block = local.build_context_block(P, "Paris")
    assert "Lisbon" in block and "Paris" not in block
    assert local.get(P, old.id).access_count == 0
    # listings: active only on request, both by default (each with isActive)
    assert [m.id for m in local.list(P, active_only=True)] == [new.id]
    assert {m.id for m in local.list(P)} == {old.id, new.id}
    assert [m.id for m in local.history(P, old.id)] == [old.id, new.id]
    assert [m.id for m in local.history(P, new.id)] == [old.id, new.id]


def test_bad_supersession_changes_nothing(local: MemoryBank) -> None:
    old = local.save(SaveRequest(P, "Ana lives in Paris")).memory
    with pytest.raises(NotFoundError):
        local.save(SaveRequest(P, "Ana lives in Rome", supersedes="mem-00000000"))
    with pytest.raises(NotFoundError):
        local.save(SaveRequest("bob", "Bob lives in Rome", supersedes=old.id))  # another profile's memory
    with pytest.raises(ValidationError):
        local.save(SaveRequest(P, "Ana lives in Rome", supersedes="not-an-id"))
    with pytest.raises(ValidationError, match="same memory"):
        local.save(SaveRequest(P, "ana lives in paris.", supersedes=old.id))
    assert count(local) == 1 and count(local, "bob") == 0
    local.save(SaveRequest(P, "Ana lives in Lisbon", supersedes=old.id))
    with pytest.raises(ValidationError, match="already inactive"):
        local.save(SaveRequest(P, "Ana lives in Oslo", supersedes=old.id))
    assert count(local) == 2


def test_chain_of_three_and_the_cli(tmp_path: Path) -> None:
    db = str(tmp_path / "chain.db")
    r = CliRunner()

    def cli(*args: str) -> Any:
        res = r.invoke(main, ["--db", db, *args])
        assert res.exit_code == 0, res.output
        return res

    a = json.loads(cli("save", "-p", P, "--json", "Deploys go out on Mondays").output)["memory"]["id"]
    b = json.loads(cli("save", "-p", P, "--json", "--supersedes", a, "Deploys go out on Tuesdays").output)
    assert b["memory"]["supersedes"] == a
    b = b["memory"]["id"]
    c = json.loads(cli("save", "-p", P, "--json", "--supersedes", b, "Deploys go out on Fridays").output)
    c = c["memory"]["id"]
    listed = json.loads(cli("list", "-p", P, "--json").output)
    assert [m["id"] for m in listed["memories"]] == [c] and listed["total"] == 1
    assert "superseded by" not in cli("list", "-p", P).output
    full = cli("list", "-p", P, "--all").output
    assert f"superseded by {b}" in full and f"superseded by {c}" in full
    hist = json.loads(cli("history", "-p", P, "--json", b).output)
    assert [m["id"] for m in hist["chain"]] == [a, b, c]
    text = cli("history", "-p", P, c).output
    assert text.index(a) < text.index(b) < text.index(c)
    res = r.invoke(main, ["--db", db, "save", "-p", P, "--supersedes", a, "Deploys go out on Sundays"])
    assert res.exit_code != 0 and f"superseded by {b}" in res.output and "Traceback" not in res.output


def test_supersede_through_rest_and_the_tool(local: MemoryBank) -> None:
    old = local.save(SaveRequest(P, "The staging URL is staging.example.com")).memory
    out = dispatch(local, "memory_save", {"content": "The staging URL is stage2.example.com",
                                          "supersedes": old.id}, P)
    assert out["memory"]["supersedes"] == old.id and not local.get(P, old.id).is_active
    assert [m["id"] for m in dispatch(local, "memory_list", {}, P)["memories"]] == [out["memory"]["id"]]
    with LiveServer(create_app(local)) as server, http_client(base_url=server.url, timeout=30) as c:
        r = c.post(f"/api/profiles/{P}/memories", json={"content": "The staging URL is s3.example.com",
                                                        "supersedes": out["memory"]["id"]})
        assert r.status_code == 201 and r.json()["memory"]["supersedes"] == out["memory"]["id"]
        r = c.post(f"/api/profiles/{P}/memories", json={"content": "x y z", "supersedes": "mem-00000000"})
        assert r.status_code == 404
        listed = c.get(f"/api/profiles/{P}/memories").json()["memories"]
        assert [m["isActive"] for m in listed] == [True, False, False]


def test_the_llm_proposes_and_the_caller_decides(anthropic_fake: FakeAnthropic, tmp_path: Path) -> None:
    with bank_at(tmp_path / "llm.db", llm__timeout_s=30.0) as bank:  # the SDK import counts too
        old = bank.save(SaveRequest(P, content="Ana's team deploys on Mondays", use_llm=False)).memory
        bank.save(SaveRequest(P, content="Ana drinks tea", use_llm=False))
        anthropic_fake.respond(Reply.structured({
            "processedContent": "Ana's team now deploys on Thursdays.", "summary": "deploy day",
            "category": "fact", "confidence": 0.9, "supersedes": old.id}))
        raw = "from now on our deploys happen on thursdays"
        res = bank.save(SaveRequest(P, raw, auto_supersede=False))  # --no-supersede: a proposal, never applied
        assert res.proposed_supersedes == old.id and res.to_dict()["proposedSupersedes"] == old.id
        assert bank.get(P, old.id).is_active  # nothing superseded silently
        assert res.memory.supersedes is None and res.superseded is None
        body = anthropic_fake.requests[0].body
        assert old.id in json.dumps(body["messages"]) and "supersedes" in json.dumps(body["output_config"])
        # The caller accepts: the same save with supersedes links the two, with no second call.
        again = bank.save(SaveRequest(P, raw, supersedes=old.id))
        assert again.deduplicated is True and again.memory.id == res.memory.id
        assert again.memory.supersedes == old.id and bank.get(P, old.id).superseded_by == res.memory.id
        assert anthropic_fake.count == 1
        # A proposal outside the memories shown is dropped.
        anthropic_fake.respond(Reply.structured({
            "processedContent": "Ana likes green tea.", "summary": "tea", "category": "preference",
            "confidence": 0.9, "supersedes": "mem-12345678"}))
        assert bank.save(SaveRequest(P, "ana likes green tea")).proposed_supersedes is None


# --- 5. retention -------------------------------------------------------------------------------


def _aged(bank: MemoryBank, memory_id: str, days: float) -> None:
    from memlocal.store import to_us

    with bank.store.transaction() as c:
        c.execute("UPDATE memories SET created_us = ? WHERE id = ?", (to_us(utcnow() - timedelta(days=days)), memory_id))


def test_prune_dry_run_changes_nothing_and_keeps_preferences_and_facts(local: MemoryBank) -> None:
    ids = {}
    for cat in ("preference", "fact", "behavior", "context", "general"):
        ids[cat] = local.save(SaveRequest(P, f"an old {cat} memory about topic {cat}", category=cat)).memory.id
        _aged(local, ids[cat], 200)
    fresh = local.save(SaveRequest(P, "a fresh context memory", category="context")).memory.id
    before = [m.to_dict() for m in local.store.iter_profile(P)]
    rule = RetentionRule.build(older_than="90d")
    planned = local.prune(P, rule, dry_run=True)
    assert {p.memory.id for p in planned} == {ids["behavior"], ids["context"], ids["general"]}
    assert all("untouched for 200 days" in p.reason for p in planned)
    assert [m.to_dict() for m in local.store.iter_profile(P)] == before
    done = local.prune(P, rule)
    assert {p.memory.id for p in done} == {p.memory.id for p in planned}
    assert {m.id for m in local.store.iter_profile(P)} == {ids["preference"], ids["fact"], fresh}
    # Named categories only.
    assert [p.memory.id for p in local.prune(P, RetentionRule.build(older_than="90d", categories=["fact"]))] \
        == [ids["fact"]]


def test_prune_by_staleness_and_inactive(local: MemoryBank) -> None:
    stale = local.save(SaveRequest(P, "temporary context: the CI is red today", category="context")).memory.id
    _aged(local, stale, 30)  # 30 d * 0.05 * 1.5 → staleness 1.0
    keep = local.save(SaveRequest(P, "another context note from today", category="context")).memory.id
    old = local.save(SaveRequest(P, "Ana lives in Paris")).memory.id
    local.save(SaveRequest(P, "Ana lives in Lisbon", supersedes=old))
    assert [p.memory.id for p in local.prune(P, RetentionRule.build(staleness_above=0.5))] == [stale]
    assert [p.memory.id for p in local.prune(P, RetentionRule(inactive=True))] == [old]
    assert keep in {m.id for m in local.store.iter_profile(P)}


def test_prune_cli(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with bank_at(db) as bank:
        mid = bank.save(SaveRequest(P, "old behaviour note", category="behavior")).memory.id
        _aged(bank, mid, 100)
    r = CliRunner()
    res = r.invoke(main, ["--db", str(db), "prune", "-p", P, "--older-than", "90d", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["dryRun"] is True and data["count"] == 1 and data["pruned"][0]["memory"]["id"] == mid
    res = r.invoke(main, ["--db", str(db), "prune", "-p", P, "--older-than", "90d"])
    assert res.exit_code == 0 and "pruned 1 memory of" in res.output
    for bad in (["--older-than", "ninety"], [], ["--staleness-above", "2"]):
        res = r.invoke(main, ["--db", str(db), "prune", "-p", P, *bad])
        assert res.exit_code != 0 and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_parse_age() -> None:
    assert parse_age("90d") == timedelta(days=90) and parse_age("12h") == timedelta(hours=12)
    assert parse_age(" 2w ") == timedelta(weeks=2)
    for bad in ("", "90", "d", "-1d", "1y"):
        with pytest.raises(ValidationError):
            parse_age(bad)


def test_retention_policy_is_off_by_default(tmp_path: Path) -> None:
    with bank_at(tmp_path / "r.db") as bank:
        mid = bank.save(SaveRequest(P, "old context", category="context")).memory.id
        _aged(bank, mid, 400)
        assert bank.retention_rule() is None and bank.apply_retention() == {}
    with bank_at(tmp_path / "r.db", retention__enabled=True, retention__older_than="90d",
                 retention__staleness_above=0.0) as bank:
        assert bank.apply_retention() == {P: 1}


_NEAR_WORDS = ("the", "a", "just", "not", "she", "he", "before", "after", "with", "editor", "editors", "dark",
          "mode", "modes", "prefers", "preferred", "coffee", "tea", "Lisbon", "deploys", "Friday", "3", "4")


@given(st.lists(st.sampled_from(_NEAR_WORDS), min_size=1, max_size=9),
       st.lists(st.sampled_from(_NEAR_WORDS), min_size=1, max_size=9))
def test_the_near_key_is_the_near_rule_at_its_default_threshold(a: list[str], b: list[str]) -> None:
    """The stored key may stand in for the rule at 1.0 only if it is the same relation: equal
    keys exactly when the guarded rule calls the two texts near-duplicates."""
    from memlocal.hygiene.rules import near_duplicate, near_key, signature

    x, y = " ".join(a), " ".join(b)
    rule = near_duplicate(signature(x), signature(y), 1.0)
    kx, ky = near_key(x), near_key(y)
    assert rule == (kx is not None and kx == ky)


def test_find_duplicate_and_a_save_that_skips_the_rule(bank: MemoryBank) -> None:
    first = bank.save(SaveRequest("p", content="The deploy key rotates every Monday")).memory
    assert bank.find_duplicate("p", "the deploy key rotates every monday.") == first
    assert bank.find_duplicate("p", "The deploy key rotates every Monday", exclude=[first.id]) is None
    again = bank.save(SaveRequest("p", content="The deploy key rotates every Monday", deduplicate=False))
    assert not again.deduplicated and again.memory.id != first.id


def test_a_saves_extra_fields_are_kept_and_checked(bank: MemoryBank) -> None:
    saved = bank.save(SaveRequest("p", content="a note with a path", extra={"memoryFile": "/memories/n.md"})).memory
    assert bank.get("p", saved.id).extra == {"memoryFile": "/memories/n.md"}
    assert saved.to_dict()["memoryFile"] == "/memories/n.md"
    for bad in ({"summary": "x"}, {"supersededBy": "mem-00000000"}, {"when": object()}):
        with pytest.raises(ValidationError):
            bank.save(SaveRequest("p", content="never stored", extra=bad))
    assert bank.list("p").total == 1


def _lookup_steps(bank: MemoryBank, text: str) -> int:
    """SQLite virtual-machine steps (in units of 10) of the duplicate checks a save of ``text``
    runs: a count of work that does not depend on the machine's load."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    bank.store.conn.set_progress_handler(tick, 10)
    try:
        bank.find_duplicate(P, text, category="preference")
    finally:
        bank.store.conn.set_progress_handler(None, 0)
    return steps


def test_the_duplicate_checks_are_index_lookups_whatever_the_profile_size(local: MemoryBank) -> None:
    """Both checks, exact and near, probe an index: their work does not grow with the profile
    (a scan of the profile made every save cost more as the bank grew)."""
    from memory_factory import memory

    text = "Report 99999 uses structured JSON output with a schema"

    def grow(n: int) -> None:
        have = local.list(P).total
        local.import_memories([memory(P, f"Report {i} uses structured JSON output with a schema",
                                      category="preference") for i in range(have, n)])

    grow(30)
    small = _lookup_steps(local, text)
    grow(1500)
    large = _lookup_steps(local, text)
    assert large <= 2 * small + 5, (small, large)


def test_the_duplicate_look_ups_build_no_temporary_b_tree(local: MemoryBank) -> None:
    """A save's look-up of its duplicates' rows, and the near probe alone, are index probes only:
    no UNION, IN (subquery) or ORDER BY that opens an ephemeral b-tree or a sorter (SQLite builds
    one per execution, which cost a save more than the probes themselves)."""
    local.save(SaveRequest(P, content=TEXT, category="preference"))
    statements: list[str] = []
    local.store.set_trace_callback(statements.append)  # the writer's and the read connections'
    try:
        local.save(SaveRequest(P, content="The staging database runs PostgreSQL 16 on port 5433", category="fact"))
        local.find_duplicate(P, REWORDED, category="preference")
        local.store.find_by_near_key(P, "0123456789abcdef")
    finally:
        local.store.set_trace_callback(None)
    reads = [sql for sql in statements if sql.startswith("SELECT") and "_key" in sql]
    assert len(reads) >= 2
    for sql in reads:
        opcodes = {r[1] for r in local.store.read(f"EXPLAIN {sql}")}
        assert not opcodes & {"OpenEphemeral", "SorterOpen", "OpenAutoindex"}, (sql, opcodes)


def test_a_save_checks_and_writes_in_one_transaction_on_the_writers_connection(local: MemoryBank) -> None:
    """A save's duplicate and update look-ups run inside its write transaction, on the writer's
    connection: none on the read pool (whose page cache each commit makes stale, so every look-up
    read its pages again from the log), and no other writer can store the same text between a
    check and the insert."""
    local.save(SaveRequest(P, content=TEXT, category="preference"))
    writer: list[str] = []
    pool: list[str] = []
    local.store.set_trace_callback(pool.append)  # every connection; the writer's is then its own
    local.store.conn.set_trace_callback(writer.append)
    try:
        # Values and a subject: the update rule reads its candidates too.
        fresh = local.save(SaveRequest(P, content="The staging database runs PostgreSQL 16 on port 5433", category="fact"))
        again = local.save(SaveRequest(P, content=SAME, category="preference"))
    finally:
        local.store.set_trace_callback(None)
    assert not fresh.deduplicated and again.deduplicated
    assert pool == []
    first = writer[:writer.index("COMMIT") + 1]
    assert first[0] == "BEGIN IMMEDIATE" and first.count("BEGIN IMMEDIATE") == 1, first
    reads = [s for s in first if s.startswith("SELECT")]
    assert any("text_key" in s and "near_key" in s for s in reads), reads
    assert any("memory_features" in s for s in reads), reads
    assert any(s.startswith("INSERT INTO memories") for s in first), first


def test_a_save_reads_both_checks_rows_with_one_statement(local: MemoryBank) -> None:
    """The exact and the near check of a save read their candidates with one query (a statement
    fewer per save, counted rather than timed), and still find each kind of duplicate."""
    first = local.save(SaveRequest(P, content=TEXT, category="preference"))
    statements: list[str] = []
    local.store.set_trace_callback(statements.append)  # the writer's and the read connections'
    try:
        fresh = local.save(SaveRequest(P, content="The staging database runs PostgreSQL 16 on port 5433", category="fact"))
    finally:
        local.store.set_trace_callback(None)
    assert not fresh.deduplicated
    # One read for both duplicate checks; the update rule's candidates (memlocal.hygiene.updates: the text
    # names values) are the recall index's matches, read apart.
    reads = [s for s in statements if s.startswith("SELECT") and "memory_features" not in s]
    assert len(reads) == 1 and "near_key" in reads[0] and "text_key" in reads[0], reads
    for text in (SAME, REWORDED):  # exact, near
        assert local.save(SaveRequest(P, content=text, category="preference")).memory.id == first.memory.id
