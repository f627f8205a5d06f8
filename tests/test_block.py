"""The block a run receives: evidence first across both tiers (evidence mode), preferences
always within their share of the budget, the spec's layout (its empty line before "Relevant to
this task:"), spec mode's literal tiers, and intent recall on a developer's profile of facts."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

from memlocal import MemoryBank, RecallQuery
from memlocal.config import Config
from memlocal.services.injection import BLOCK_END, CORE_HEADING, FILLER_HEADING, MEMORY_HEADER, RELEVANT_HEADING
from memlocal.relevance.text import query_dates
from dev_profile import agent_profile
from memory_factory import NOW, days_ago, put

PROFILE = "coder"


def _bank(path: Path, **overrides: object) -> MemoryBank:
    return MemoryBank(path, config=Config.load(environ={}, overrides=overrides))


@pytest.fixture(scope="module")
def coder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MemoryBank, dict[str, str]]]:
    with _bank(tmp_path_factory.mktemp("coder") / "m.db") as bank:
        ids = {key: m.id for key, m in agent_profile(bank).items()}
        yield bank, ids


def _keys(ids: dict[str, str], found: object) -> list[str]:
    names = {v: k for k, v in ids.items()}
    return [names[i] for i in found]  # type: ignore[attr-defined]


def _recall(coder: tuple[MemoryBank, dict[str, str]], query: str) -> list[str]:
    bank, ids = coder
    return _keys(ids, [r.memory.id for r in bank.query_with_relevance(RecallQuery(PROFILE, query, now=NOW))])


def _block(coder: tuple[MemoryBank, dict[str, str]], query: str) -> list[str]:
    bank, ids = coder
    return _keys(ids, bank.render_context_block(PROFILE, query, now=NOW).ids)


# --- the block ---------------------------------------------------------------------------------


def test_the_flaky_test_memory_is_in_the_block(coder: tuple[MemoryBank, dict[str, str]]) -> None:
    bank, ids = coder
    block = bank.render_context_block(PROFILE, "Fix the flaky test in test_invoices.py and open a PR", now=NOW)
    assert ids["flaky"] in {s.memory.id for s in block.relevant}
    assert RELEVANT_HEADING in block.text


def test_planning_the_team_lunch_brings_the_allergies(coder: tuple[MemoryBank, dict[str, str]]) -> None:
    assert {"ana", "marco", "sam"} <= set(_block(coder, "Plan the team lunch"))
    assert {"ana", "marco", "sam"} <= set(_recall(coder, "what food should we order for the team lunch?"))


def test_every_block_holds_every_preference(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db") as bank:
        prefs = [put(bank, "p", f"Preference {i}: always write the {w} section of a design doc first",
                     category="preference", created=days_ago(100 + i)).id
                 for i, w in enumerate("intro goals risks costs scope plan rollout tests".split())]
        for i in range(300):
            put(bank, "p", f"Fact {i}: the service {i % 17} runs in region {i % 5} with {i % 11} replicas on port {8000 + i}",
                category="fact", created=days_ago(i % 90), count=i % 7, last=days_ago(i % 30) if i % 7 else None)
        for query in ("which port does service 3 use?", "replicas in region 2", "quantum chromodynamics",
                      "write the design doc for the new service"):
            block = bank.render_context_block("p", query, now=NOW)
            assert set(prefs) <= set(block.ids), query
            assert len(block.text) <= 2000


def test_the_block_keeps_the_spec_layout_with_its_empty_line(coder: tuple[MemoryBank, dict[str, str]]) -> None:
    bank, _ = coder
    text = bank.render_context_block(PROFILE, "Fix the flaky test in test_invoices.py", now=NOW).text
    lines = text.split("\n")
    assert lines[0] == MEMORY_HEADER and lines[1] == CORE_HEADING and lines[-1] == BLOCK_END
    at = lines.index(RELEVANT_HEADING)
    assert lines[at - 1] == "" and lines[at - 2].startswith("* [")
    headings = (CORE_HEADING, RELEVANT_HEADING, FILLER_HEADING)
    for i, line in enumerate(lines[1:-1], 1):  # entries, and each later heading after an empty line
        assert line.startswith("* [") or line in headings or (line == "" and lines[i + 1] in headings), line


def test_the_spec_mode_renders_the_spec_tiers_with_the_empty_line(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db", **{"ranking.mode": "spec"}) as bank:
        ids = {key: m.id for key, m in agent_profile(bank).items()}
        block = bank.render_context_block(PROFILE, "Fix the flaky test in test_invoices.py", now=NOW)
        core = [s.memory for s in block.core]
        assert {m.category for m in core} <= {"preference", "fact"}
        assert {s.memory.category for s in block.relevant} <= {"context", "behavior", "general"}
        scores = [s.score for s in block.core]
        assert scores == sorted(scores, reverse=True)  # the spec's order: best score first
        lines = block.text.split("\n")
        assert lines[lines.index(RELEVANT_HEADING) - 1] == ""
        assert ids["flaky"] in {s.memory.id for s in block.relevant}


# --- intent recall -----------------------------------------------------------------------------


@pytest.mark.parametrize("query, first, within", [
    ("who is my boss?", "manager", 1),
    ("how many CPUs do the build machines have", "runners", 1),
    ("is anyone on vacation right now?", "ooo", 1),
    # "call" is a word "The on-call rotation changes every Monday at noon" says (a compound
    # keeps its words), so that fact shares two of the query's words as well.
    ("is it ok to schedule a call at 9am?", "meetings", 2),
    ("where are the metrics and monitoring charts?", "grafana", 1),
    ("when is the code freeze?", "freeze", 1),
])
def test_intent_recall_finds_the_memory_first(coder: tuple[MemoryBank, dict[str, str]], query: str,
                                               first: str, within: int) -> None:
    assert first in _recall(coder, query)[:within]


def test_a_shared_cluster_alone_ranks_below_any_literal_match(coder: tuple[MemoryBank, dict[str, str]]) -> None:
    bank, _ = coder
    results = bank.query_with_relevance(RecallQuery(PROFILE, "who is my boss?", now=NOW))
    literal = [bool(r.evidence and r.evidence.terms) for r in results]
    assert literal[0] and literal == sorted(literal, reverse=True)
    assert sum(1 for x in literal if not x) <= 2  # one shared cluster is weak evidence: no flood


def test_the_code_freeze_ranks_above_code_review(coder: tuple[MemoryBank, dict[str, str]]) -> None:
    order = _recall(coder, "when is the code freeze?")
    assert "review" not in order or order.index("freeze") < order.index("review")


# --- the evidence order's refinements (docs/relevance.md, "The second pass") --------------------


def test_a_generic_word_does_not_outrank_what_the_question_is_about(tmp_path: Path) -> None:
    # "long" is rare in a bank of facts, so by IDF alone it outweighed Nate and his turtles.
    with _bank(tmp_path / "m.db") as bank:
        turtles = {put(bank, "p", f"Nate feeds turtle number {i}", category="fact", created=days_ago(30 + i)).id
                   for i in range(3)}
        walks = put(bank, "p", "Joanna enjoys long walks", category="fact", created=days_ago(1)).id
        for i in range(5):
            put(bank, "p", f"Nate plays game number {i} with friends", category="fact", created=days_ago(2 + i))
        found = [r.memory.id for r in bank.query_with_relevance(RecallQuery("p", "How long has Nate had his turtles?", now=NOW))]
        assert set(found[:3]) == turtles and walks not in found[:3]


def test_a_memory_saved_on_the_date_the_task_names_comes_first(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db") as bank:
        on_the_day = put(bank, "p", "Nate cooked a dish with coconut milk", category="fact",
                         created=datetime(2025, 3, 9, 15, 0, tzinfo=timezone.utc)).id
        later = put(bank, "p", "Nate cooked a dish with rice", category="fact", created=days_ago(2)).id
        ask = "What dish did Nate cook on 9 March, 2025?"
        assert [r.memory.id for r in bank.query_with_relevance(RecallQuery("p", ask, now=NOW))] == [on_the_day, later]
        assert [r.memory.id for r in bank.query_with_relevance(RecallQuery("p", "What dish did Nate cook?", now=NOW))] == [later, on_the_day]


def test_query_dates_reads_days_and_months_only() -> None:
    day = query_dates("what happened on 9 November, 2022?")
    assert day == query_dates("what happened on November 9th, 2022") and len(day) == 1
    start, end = day[0]
    assert end - start == 3 * 86_400_000_000  # the day, with a day either side
    (month,) = query_dates("in August 2023")
    assert month[1] - month[0] == 33 * 86_400_000_000
    assert query_dates("may I ask about 2023?") == () == query_dates("31 December 9999") == query_dates("")


def test_weaker_evidence_fills_the_block_before_facts_without_any(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db", **{"inject.budget_chars": 400}) as bank:
        # "pottery" is in one fact (rare: high IDF) and "Melanie" in most, so a fact that shares
        # only the name is below the gate's ratio (0.3 of the best) but still evidence.
        put(bank, "p", "Melanie made a bowl in pottery class", category="fact", created=days_ago(40))
        weak = put(bank, "p", "Melanie loves camping at the beach", category="fact", created=days_ago(50)).id
        for i in range(5):
            put(bank, "p", f"Melanie paints sunset number {i}", category="fact", created=days_ago(60 + i))
        for i in range(8):
            put(bank, "p", f"The office printer {i} needs toner", category="fact", created=days_ago(i))
        results = bank.query_with_relevance(RecallQuery("p", "What does Melanie think about pottery?", now=NOW))
        assert weak not in {r.memory.id for r in results}  # the gate keeps it out of recall
        block = bank.render_context_block("p", "What does Melanie think about pottery?", now=NOW)
        # The weak evidence fills the room before any fact the task gives none for (the printers),
        # under the heading that says how little points to it.
        weaker = _sections(block.text)[FILLER_HEADING]
        assert weaker and all("Melanie" in line for line in weaker) and "printer" not in block.text


def _sections(text: str) -> dict[str, list[str]]:
    """The block's entry lines by the heading above them."""
    out: dict[str, list[str]] = {}
    heading = ""
    for line in text.split("\n")[1:-1]:
        if line.endswith(":") and not line.startswith("* ["):
            heading = line
            out[heading] = []
        elif line:
            out[heading].append(line)
    return out


def test_core_knowledge_holds_only_what_applies_and_the_filler_is_labelled(tmp_path: Path) -> None:
    """Under "Core knowledge (always apply)": the preferences and the facts the task gives
    evidence for; the facts it gives none for come last, under a heading that says so
    (inject.filler: labelled by default, core as before, omit)."""
    with _bank(tmp_path / "m.db") as bank:
        put(bank, "p", "Prefers answers in British English", category="preference", created=days_ago(20))
        put(bank, "p", "API keys are rotated every 90 days by the platform team", category="fact", created=days_ago(9))
        put(bank, "p", "Idempotency keys expire after 24 hours", category="fact", created=days_ago(1))
        put(bank, "p", "The on-call rotation changes on Mondays", category="fact", created=days_ago(2))
        put(bank, "p", "The office closes at 18:00 on Fridays", category="fact", created=days_ago(3))
        block = bank.render_context_block("p", "Plan the API key rotation", now=NOW)
        parts = _sections(block.text)
        assert parts[CORE_HEADING] == ["* [preference] Prefers answers in British English",
                                       "* [fact] API keys are rotated every 90 days by the platform team",
                                       *parts[CORE_HEADING][2:]]
        assert "* [fact] The office closes at 18:00 on Fridays" in parts[FILLER_HEADING]
        assert not set(parts[CORE_HEADING]) & set(parts[FILLER_HEADING])
        filler = {s.memory.id for s in block.core if s.memory.id in block.filler}
        # below the core heading: no evidence, or evidence under the gate's ratio (0.3 of the best)
        assert filler and all(s.evidence is None or s.evidence.strength < 0.3 * s.evidence.best
                              for s in block.core if s.memory.id in filler)
        assert block.text.split("\n").index(FILLER_HEADING) == len(block.text.split("\n")) - 2 - len(parts[FILLER_HEADING])
    with _bank(tmp_path / "m.db", **{"inject.filler": "core"}) as bank:
        parts = _sections(bank.render_context_block("p", "Plan the API key rotation", now=NOW).text)
        assert FILLER_HEADING not in parts and "* [fact] The office closes at 18:00 on Fridays" in parts[CORE_HEADING]
    with _bank(tmp_path / "m.db", **{"inject.filler": "omit"}) as bank:
        block = bank.render_context_block("p", "Plan the API key rotation", now=NOW)
        assert FILLER_HEADING not in block.text and "office closes" not in block.text and not block.filler
        assert "API keys are rotated" in block.text
    with _bank(tmp_path / "m.db", **{"ranking.mode": "spec"}) as bank:  # the spec's tiers as they are
        assert FILLER_HEADING not in bank.render_context_block("p", "Plan the API key rotation", now=NOW).text


def test_a_fact_that_shares_only_a_topic_cluster_is_not_core_knowledge(tmp_path: Path) -> None:
    """Seen by hand: asked for the staging server's port, the block put the database's version,
    the image registry and the build machine's RAM under "Core knowledge (always apply)" beside
    the answer: they share nothing with the task but the tech cluster (weak evidence). They stay
    in the block, below what applies, under the heading that says how little points to them."""
    with _bank(tmp_path / "m.db") as bank:
        put(bank, "p", "Prefers answers in bullet points", category="preference", created=days_ago(30))
        put(bank, "p", "The build machine has 2 cores and 24 GiB of RAM", category="fact", created=days_ago(20))
        put(bank, "p", "The staging server runs on port 8443", category="fact", created=days_ago(12))
        put(bank, "p", "The database runs PostgreSQL 15", category="fact", created=days_ago(5))
        put(bank, "p", "Docker images are pushed to ghcr.io/acme", category="fact", created=days_ago(3))
        put(bank, "p", "Our cat is called Miso", category="fact", created=days_ago(2))
        parts = _sections(bank.render_context_block("p", "Which port does the staging server listen on?", now=NOW).text)
        assert parts[CORE_HEADING] == ["* [preference] Prefers answers in bullet points",
                                       "* [fact] The staging server runs on port 8443"], parts
        weak = {"* [fact] The database runs PostgreSQL 15", "* [fact] Docker images are pushed to ghcr.io/acme",
                "* [fact] The build machine has 2 cores and 24 GiB of RAM"}
        assert weak <= set(parts[FILLER_HEADING]) and parts[FILLER_HEADING][-1] == "* [fact] Our cat is called Miso"


def test_a_memory_cannot_pose_as_the_filler_heading() -> None:
    from memlocal.services.injection import poses_as_structure

    assert poses_as_structure(FILLER_HEADING) and poses_as_structure("  other SAVED facts (weak links here)")
