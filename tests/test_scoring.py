"""The relevance formula against hand-computed values (docs/spec.md, "Relevance")."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from memlocal import MemoryBank, RecallQuery, SaveRequest, ValidationError
from memlocal.config import Config
from memlocal.relevance.clusters import CLUSTER_NAMES, CLUSTER_TERMS, CLUSTER_WORDS, clusters_of
from memlocal.model import compute_staleness
from memlocal.relevance.scoring import (
    confidence_mul,
    maturity,
    prepare_query,
    recency,
    topic,
    usage,
    weights_for,
)
from memlocal.store import to_us
from memlocal.relevance.text import STOPWORDS, stem, terms, words
from memory_factory import NOW, days_ago, put

US_PER_DAY = 86_400_000_000
NOW_US = to_us(NOW)
assert NOW_US is not None


# --- the signals ------------------------------------------------------------------------------


def test_recency_halves_every_30_days() -> None:
    assert recency(NOW_US, NOW_US) == 1.0
    assert recency(NOW_US - 30 * US_PER_DAY, NOW_US) == pytest.approx(0.5)
    assert recency(NOW_US - 60 * US_PER_DAY, NOW_US) == pytest.approx(0.25)
    assert recency(NOW_US - 15 * US_PER_DAY, NOW_US) == pytest.approx(2 ** -0.5)
    # An anchor in the future (another host's clock) is age 0, never above 1.
    assert recency(NOW_US + 10 * US_PER_DAY, NOW_US) == 1.0


def test_usage_starts_at_0_6_and_rises_toward_1() -> None:
    assert usage(0) == pytest.approx(0.6)
    assert usage(9) == pytest.approx(0.8)  # 1 - 0.4 / (1 + log10 10)
    assert usage(99) == pytest.approx(1 - 0.4 / 3)
    values = [usage(n) for n in range(0, 5000)]
    assert all(a < b for a, b in zip(values, values[1:]))
    assert usage(10**9) < 1.0 and usage(10**9) > 0.95


def test_maturity_and_weights() -> None:
    assert maturity(0) == 0.0
    assert maturity(25) == 0.5
    assert maturity(50) == 1.0
    assert maturity(500) == 1.0
    w0 = weights_for(0.0)
    assert (w0.recency, w0.usage, w0.topic) == pytest.approx((0.5, 0.0, 0.5))
    w1 = weights_for(1.0)
    assert (w1.recency, w1.usage, w1.topic) == pytest.approx((0.35, 0.30, 0.35))
    wh = weights_for(0.5)
    assert (wh.recency, wh.usage, wh.topic) == pytest.approx((0.425, 0.15, 0.425))
    for m in (0.0, 0.1, 0.37, 0.9, 1.0):
        w = weights_for(m)
        assert w.recency + w.usage + w.topic == pytest.approx(1.0)


def test_confidence_multiplier() -> None:
    assert confidence_mul(0.0) == 0.5
    assert confidence_mul(0.5) == 0.75
    assert confidence_mul(1.0) == 1.0


def test_staleness_values_and_clamping() -> None:
    def st(category: str, confidence: float, count: int, days: float, accessed: bool = False) -> float:
        created = days_ago(days)
        return compute_staleness(category=category, confidence=confidence, access_count=count,
                                 created_at=created, last_accessed_at=created if accessed else None, now=NOW)

    assert st("general", 1.0, 0, 0) == 0.0
    assert st("preference", 1.0, 0, 10) == pytest.approx(10 * 0.05 * 0.5)
    assert st("fact", 1.0, 0, 10) == pytest.approx(10 * 0.05 * 0.7)
    assert st("context", 0.5, 0, 0) == pytest.approx(0.15 * 1.5)
    assert st("behavior", 0.8, 9, 4) == pytest.approx(4 * 0.05 - 0.2 + 0.2 * 0.3)
    assert st("general", 1.0, 0, 100) == 1.0  # clamped above
    assert st("general", 1.0, 999, 0) == 0.0  # clamped below (log10(1000)*0.2 = 0.6 < 0)
    # daysSinceAccess counts from lastAccessedAt when there is one.
    assert compute_staleness(category="general", confidence=1.0, access_count=0, created_at=days_ago(40),
                             last_accessed_at=days_ago(2), now=NOW) == pytest.approx(0.1)


def test_staleness_recomputed_on_save_and_on_access(bank: MemoryBank) -> None:
    saved = bank.save(SaveRequest("p", content="Deploys go out on Tuesdays", category="context", confidence=0.6)).memory
    assert saved.staleness_score == pytest.approx(0.4 * 0.3 * 1.5)
    bank.recall(RecallQuery("p", "deploys"))
    after = bank.get("p", saved.id)
    assert after.access_count == 1
    expected = max(0.0, (-math.log10(2) * 0.2 + 0.4 * 0.3) * 1.5)
    assert after.staleness_score == pytest.approx(expected, abs=1e-6)


# --- topic ------------------------------------------------------------------------------------


def _topic(query: str, memory_texts: list[str], which: int) -> float:
    sets = [terms(t) for t in memory_texts]
    df = lambda t: sum(1 for s in sets if t in s)  # noqa: E731
    pq = prepare_query(query, df, len(sets))
    return topic(pq, sets[which], clusters_of(sets[which]))


def test_tokenizer_lowercases_drops_stopwords_and_stems() -> None:
    assert terms("The Flights were DELAYED, and I'm annoyed!") == {"flight", "delay", "annoy"}
    assert terms("Caroline's café") == terms("caroline cafe")
    assert terms("the and of it") == frozenset()


def test_use_is_a_filler_like_user() -> None:
    # "what database does staging use?" is about the database, not about whatever else is used.
    assert terms("What database does staging use?") == {"databas", "stage"}
    assert terms("I use spaces; she used tabs, they are using both") == {"space", "tab"}
    texts = ["I use 4 spaces for indentation in Python", "The staging database is Postgres 15"]
    assert _topic("what database does staging use", texts, 1) == pytest.approx(1.0)
    # The indentation memory shares only the tech cluster now: below the evidence gate (0.3 x best).
    assert _topic("what database does staging use", texts, 0) == pytest.approx(1 / 9)


def test_topic_hand_computed() -> None:
    # N = 2, each query word in one memory: idf = ln(1 + 1.5/1.5) = ln 2 for both.
    # Query clusters: salmon -> food, flight -> travel; c = 0.25 * mean idf = 0.25 ln 2.
    # Denominator: 2 ln2 + 2 * 0.25 ln2 = 2.5 ln2. Memory 0 covers "salmon" and shares food:
    # (ln2 + 0.25 ln2) / 2.5 ln2 = 0.5.
    texts = ["Salmon allergy", "Booked a flight"]
    assert _topic("salmon flight", texts, 0) == pytest.approx(0.5)
    assert _topic("salmon flight", texts, 1) == pytest.approx(0.5)
    assert _topic("salmon", texts, 0) == pytest.approx(1.0)


def test_diet_recalls_peanut_allergy_through_food() -> None:
    assert {"food"} <= clusters_of(terms("diet")) & clusters_of(terms("peanut allergy"))
    texts = ["I have a peanut allergy", "The quarterly report is due"]
    # "allergy" yields its broader word "diet" (memlocal.relevance.vocab), so the query is fully covered.
    assert _topic("diet", texts, 0) == pytest.approx(1.0)
    # A cluster-only bridge: "restaurant" and "peanut" share food and nothing else:
    # c / (idf + c) with c = idf/4, that is 1/5.
    assert _topic("restaurant", texts, 0) == pytest.approx(1 / 5)


def test_a_cluster_weighs_as_much_as_the_query_words_in_it() -> None:
    # "restaurant" and "supper" touch food, "book" touches travel: the query is mostly about food.
    # The clusters' total weight is still c = 0.25 * mean idf per cluster, shared out in
    # proportion to the idf of the query words in each, so the supper memory ranks above the
    # flight (one uniform c per cluster tied them: each covers one word of idf ln 2 and one cluster).
    texts = ["Supper order: vegetarian, no mushrooms", "Flight to Berlin on Friday, booked via Lufthansa"]
    query = "book a restaurant for supper"
    ln2, ln6 = math.log(2), math.log(6)  # N = 2: book and supper in one memory each, restaurant in none
    total = 2 * ln2 + ln6
    share = 0.25 * total / 3 * 2
    food, travel = share * (ln6 + ln2) / total, share * ln2 / total
    assert _topic(query, texts, 0) == pytest.approx((ln2 + food) / (total + share))
    assert _topic(query, texts, 1) == pytest.approx((ln2 + travel) / (total + share))
    assert _topic(query, texts, 0) > _topic(query, texts, 1)


def test_no_shared_word_or_cluster_gives_zero() -> None:
    texts = ["I have a peanut allergy", "Paint the fence blue"]
    assert _topic("quarterly boss report", texts, 0) == 0.0
    assert _topic("the of and", texts, 0) == 0.0  # nothing left after stopwords


def test_rarer_words_count_more() -> None:
    texts = ["caroline went hiking", "caroline paints", "caroline reads", "melanie paints"]
    # "melanie" is in 1 memory, "caroline" in 3: covering the rarer word scores higher.
    assert _topic("caroline melanie", texts, 3) > _topic("caroline melanie", texts, 0)


def test_stemming_matches_word_forms() -> None:
    texts = ["She flew on two flights last year", "cooking pasta"]
    assert _topic("flight", texts, 0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("query", "memory"),
    [
        ("when did Nate win the tournament?", "Nate won a regional video game tournament"),
        ("what did Joanna write?", "Joanna wrote her first screenplay"),
        ("who did Maria meet?", "Maria met Jean at the shelter"),
        ("what did John buy", "John bought a new car"),
        ("where does Ana swim", "Ana swam across the lake"),
    ],
)
def test_an_irregular_past_finds_the_verb(query: str, memory: str) -> None:
    """Porter2 leaves "won" apart from "win": a fact told in the past answers the question asked
    with the base form (memlocal.relevance.vocab.VARIANTS), and the other way round."""
    verb = {"win", "write", "meet", "buy", "swim"} & terms(query)
    assert verb and verb <= terms(memory)
    assert _topic(query, [memory, "unrelated words here"], 0) == pytest.approx(1.0)


def test_a_past_form_that_is_another_word_is_left_alone() -> None:
    # "left" (a side), "saw" (a tool), "led" (a lamp), "lit" (literature) keep their own terms.
    for word, verb in (("left", "leav"), ("saw", "see"), ("led", "lead"), ("lit", "light")):
        assert verb not in terms(word)


@pytest.mark.parametrize(
    ("query", "memory"),
    [
        ("diet", "peanut allergy"),
        ("trip", "flight"),
        ("release", "server"),
        ("film", "movie"),
        ("boss", "deadline"),
        ("restaurant", "shellfish"),
        ("vim", "docker"),
    ],
)
def test_everyday_paraphrases_bridge(query: str, memory: str) -> None:
    assert clusters_of(terms(query)) & clusters_of(terms(memory))
    assert _topic(query, [memory, "unrelated words here"], 0) > 0.0


def test_clusters_are_data() -> None:
    assert set(CLUSTER_NAMES) == {"food", "health", "work", "tech", "travel", "entertainment",
                                  "communication", "shopping"}
    assert all(len(v) >= 40 for v in CLUSTER_TERMS.values())


GENERIC = ("order store deal pay call show thread train map test build model memory report review "
           "project text present use make work customer customs presentation ill").split()


def test_cluster_words_are_clean() -> None:
    """Every listed word is one live term (no stopword, not split by the tokenizer) in exactly
    one cluster, no word is listed twice, and generic words are not listed at all."""
    owner: dict[str, str] = {}
    for name, vocab in CLUSTER_WORDS.items():
        listed = vocab.split()
        assert len(listed) == len(set(listed)), f"{name} lists a word twice"
        for word in listed:
            assert word not in STOPWORDS, f"{name}: {word!r} is a stopword"
            assert len(words(word)) == 1, f"{name}: {word!r} is split by the tokenizer"
            term = stem(word)
            assert term is not None and term in terms(word), f"{name}: {word!r} does not survive tokenization"
            assert owner.setdefault(term, name) == name, f"{word!r} ({term}) is in {owner[term]} and {name}"
            assert stem(word) not in {stem(g) for g in GENERIC}, f"{name}: generic word {word!r}"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("colour", "color"), ("organise", "organize"), ("favourite", "favorite"), ("k8s", "kubernetes"),
        ("tz", "timezone"), ("repo", "repository"),
    ],
)
def test_spelling_variants_give_the_same_terms(a: str, b: str) -> None:
    assert terms(a) == terms(b)


@pytest.mark.parametrize(
    ("phrase", "joined"),
    [
        ("time zone", "timezone"), ("time-zone", "timezone"), ("time zones", "timezones"),
        ("e-mail", "email"), ("E-Mails", "emails"), ("set up", "setup"), ("set-up", "setup"),
        ("sci-fi", "scifi"), ("log in", "login"), ("code base", "codebase"), ("VS Code", "vscode"),
        ("build server", "buildserver"), ("out of office", "outofoffice"),
    ],
)
def test_a_compound_adds_its_joined_word_and_keeps_its_words(phrase: str, joined: str) -> None:
    """The bridge adds a term: the phrase finds what says the joined word, and each of
    its words still finds what says the phrase."""
    assert terms(joined) <= terms(phrase)
    for word in phrase.replace("-", " ").split():
        assert terms(word) <= terms(phrase)


@pytest.mark.parametrize(
    ("specific", "broader"),
    [("pytest", "test framework"), ("Jest", "test"), ("neovim", "editor"), ("indentation", "format"),
     ("prettier", "format"), ("rollout", "deploy"), ("Europe/Lisbon", "timezone"), ("CET", "timezone"),
     ("vegetarian", "diet food"), ("allergic", "diet"), ("Mondays", "schedule"), ("hometown", "location"),
     ("a guinea pig", "pet"), ("violin", "instrument"), ("basketball", "sport"), ("my husband", "family"),
     ("espresso", "coffee drink"), ("green tea", "drink"), ("macOS", "OS"), ("Linux", "os"),
     ("API keys", "credential"), ("build agents", "runner"), ("pre-production", "staging")],
)
def test_specific_words_yield_their_broader_word(specific: str, broader: str) -> None:
    assert terms(broader) <= terms(specific)


def test_time_zone_query_finds_the_timezone_memory() -> None:
    texts = ["Lives in Lisbon, timezone Europe/Lisbon", "Prefers pytest over unittest",
             "Deploys go out on Tuesdays"]
    q = "what time zone is the user in?"
    assert _topic(q, texts, 0) > 0 and _topic(q, texts, 1) == _topic(q, texts, 2) == 0
    assert _topic("which test framework?", texts, 1) == pytest.approx(1.0)


# --- the composite score through the bank -------------------------------------------------------


def test_composite_score_hand_computed(bank: MemoryBank) -> None:
    put(bank, "p", "Peanut allergy", created=days_ago(30), confidence=0.5)
    [r] = bank.query_with_relevance(RecallQuery("p", "peanut allergy", now=NOW))
    # maturity 0 -> 0.5 / 0 / 0.5; recency 0.5; topic 1; confidenceMul 0.75.
    top = 1.0
    assert r.score == pytest.approx((0.5 * 0.5 + 0.5 * top) * 0.75)
    b = r.breakdown.to_dict()
    assert set(b) == {"recency", "usage", "topic", "confidenceMul", "weights", "maturity", "score"}
    assert b["weights"] == pytest.approx({"recency": 0.5, "usage": 0.0, "topic": 0.5})
    assert (b["recency"], b["usage"], b["topic"], b["confidenceMul"], b["maturity"]) == pytest.approx(
        (0.5, 0.6, top, 0.75, 0.0))
    assert b["score"] == r.score


def test_mature_profile_uses_full_usage_weight(bank: MemoryBank) -> None:
    put(bank, "p", "Uses tabs for indentation", created=days_ago(60), last=days_ago(30), count=9)
    put(bank, "p", "Old inactive memory", count=100, active=False)  # not counted
    [r] = bank.query_with_relevance(RecallQuery("p", "tabs", min_score=0.0, now=NOW))
    assert r.breakdown.maturity == pytest.approx(9 / 50)
    put(bank, "p", "Another heavily used memory", count=41)
    r = bank.query_with_relevance(RecallQuery("p", "indentation tabs", min_score=0.0, now=NOW))[0]
    assert r.breakdown.maturity == 1.0
    # recency from lastAccessedAt (30 days): 0.5; usage(9) = 0.8; topic 1.
    assert r.score == pytest.approx(0.35 * 0.5 + 0.30 * 0.8 + 0.35 * 1.0)


def _spec_bank(path: Path) -> MemoryBank:
    return MemoryBank(path, config=Config.load(environ={}, overrides={"ranking.mode": "spec"}))


def test_spec_mode_ranks_memories_without_topic_by_recency(tmp_path: Path) -> None:
    with _spec_bank(tmp_path / "m.db") as bank:
        old = put(bank, "p", "Paint the fence", created=days_ago(90))
        new = put(bank, "p", "Water the plants", created=days_ago(1))
        got = bank.query_with_relevance(RecallQuery("p", "quantum chromodynamics", now=NOW))
        assert [r.memory.id for r in got] == [new.id, old.id]
        assert all(r.breakdown.topic == 0.0 and r.evidence is None for r in got)


def test_evidence_mode_returns_nothing_without_evidence(bank: MemoryBank) -> None:
    put(bank, "p", "Paint the fence", created=days_ago(90))
    put(bank, "p", "Water the plants", created=days_ago(1))
    assert bank.query_with_relevance(RecallQuery("p", "quantum chromodynamics lattice gauge", now=NOW)) == []
    assert bank.query_with_relevance(RecallQuery("p", "the of and", now=NOW)) == []  # no usable words
    assert bank.query_with_relevance(RecallQuery("p", "", now=NOW)) == []


def test_ties_break_by_newer_created_then_id(bank: MemoryBank) -> None:
    # Same anchor (max of created and lastAccessed), same use, topic and confidence: equal scores.
    older = put(bank, "p", "same words", created=days_ago(10), last=days_ago(1), memory_id="mem-00000001")
    b = put(bank, "p", "same words", created=days_ago(1), memory_id="mem-0000000b")
    a = put(bank, "p", "same words", created=days_ago(1), memory_id="mem-0000000a")
    got = bank.query_with_relevance(RecallQuery("p", "same words", now=NOW))
    assert got[0].score == got[1].score == got[2].score
    assert [r.memory.id for r in got] == [a.id, b.id, older.id]


def test_limit_min_score_exclusion_and_inactive(bank: MemoryBank) -> None:
    ms = [put(bank, "p", f"note number {i}", created=days_ago(i * 10)) for i in range(6)]
    put(bank, "p", "note number hidden", active=False)
    put(bank, "other", "note number elsewhere")
    got = bank.query_with_relevance(RecallQuery("p", "note", limit=3, now=NOW))
    assert [r.memory.id for r in got] == [m.id for m in ms[:3]]
    got = bank.query_with_relevance(RecallQuery("p", "note", limit=8, exclude_ids=[ms[0].id], now=NOW))
    assert [r.memory.id for r in got] == [m.id for m in ms[1:]]
    high = bank.query_with_relevance(RecallQuery("p", "note", min_score=0.8, now=NOW))
    assert high and all(r.score >= 0.8 for r in high)


def test_query_has_no_side_effects_but_recall_bumps(bank: MemoryBank) -> None:
    m = bank.save(SaveRequest("p", content="Prefers dark mode")).memory
    bank.query_with_relevance(RecallQuery("p", "dark mode"))
    assert bank.get("p", m.id).access_count == 0
    results = bank.recall(RecallQuery("p", "dark mode"))
    assert results[0].memory.access_count == 0  # the ranking's view, before the bump
    after = bank.get("p", m.id)
    assert after.access_count == 1 and after.last_accessed_at is not None
    assert after.last_accessed_at >= m.created_at


@pytest.mark.parametrize(
    "query",
    ['"unbalanced', "AND OR NOT", "a* NEAR(b c)", "col:value", "(((", "^start", "-x +y", "''", "\x00\u202e",
     "memories_fts MATCH 'x'", "🙂 emoji", ""],
)
def test_agent_query_text_never_raises(bank: MemoryBank, query: str) -> None:
    bank.save(SaveRequest("p", content="some content with words"))
    assert isinstance(bank.recall(RecallQuery("p", query)), list)


def test_bad_arguments_are_rejected(bank: MemoryBank) -> None:
    for kwargs in ({"limit": 0}, {"limit": "8"}, {"min_score": -0.1}, {"min_score": 2}, {"exclude_ids": ["x"]}):
        with pytest.raises(ValidationError):
            bank.query_with_relevance(RecallQuery("p", "q", **kwargs))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        bank.recall(RecallQuery("../etc", "q"))
    with pytest.raises(ValidationError):
        bank.recall(RecallQuery("p", None))  # type: ignore[arg-type]


def test_diet_query_recalls_the_peanut_allergy_memory(bank: MemoryBank) -> None:
    allergy = put(bank, "p", "Has a severe peanut allergy", category="fact", created=days_ago(3))
    put(bank, "p", "Deploys go through the staging server", created=days_ago(1))
    put(bank, "p", "Prefers dark mode in the editor", category="preference", created=days_ago(1))
    top = bank.recall(RecallQuery("p", "plan a diet for the team offsite"))[0]
    assert top.memory.id == allergy.id and top.breakdown.topic > 0
