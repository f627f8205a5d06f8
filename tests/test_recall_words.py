"""Recall as a new user meets it: a word a memory says finds it, evidence shows the user's words, and results
are listed in the order of the key the table and --json show."""

from __future__ import annotations

import json
import re
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlocal import MemoryBank, RecallQuery, SaveRequest
from memlocal.config import Config
from memlocal.model import CATEGORIES, utcnow
from memlocal.relevance.scoring import ScoredMemory
from memlocal.relevance.text import terms
from conftest import Cli
from memory_factory import NOW, days_ago, memory, put
from support import fresh_database

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def _save(cli: Cli, profile: str, content: str, category: str = "general") -> str:
    return cli.json("save", "-p", profile, "--content", content, "--category", category, "--no-llm",
                    "--json")["memory"]["id"]


def _open(tmp: str) -> MemoryBank:
    path = Path(tmp) / "m.db"
    return MemoryBank(path if path.exists() else fresh_database(path), config=Config.load(environ={}))


# --- a word the memory says finds it ---------------------------------------------------------

# Everyday facts whose words the vocabulary bridges as compounds (the 15 misses among them).
COMPOUND_FACTS = [
    "The build server is ci-3",
    "Ana works in the Lisbon time zone",
    "The data base for billing is Postgres 16",
    "My user name on the forum is kofi_a",
    "The home page loads in 800 ms",
    "The back end is written in Go",
    "The front end uses React",
    "Priya is on call this week",
    "Log in with the SSO button",
    "The code base has 40k lines",
    "Send the e-mail to finance",
    "Chen is out of office until Monday",
]


def test_every_word_of_a_compound_finds_its_memory(cli: Cli) -> None:
    """`memlocal recall -p alpha build` found nothing for "The build server is ci-3": the bridge
    replaced "build server" by one joined term. Now it adds the term and keeps the words."""
    ids = {fact: _save(cli, "alpha", fact) for fact in COMPOUND_FACTS}
    human = cli("recall", "-p", "alpha", "build")
    assert human.exit_code == 0 and "no memories matched" not in human.output, human.output
    row = next(line for line in human.output.splitlines() if ids["The build server is ci-3"] in line)
    assert row.split()[2] == "build", row  # the shared word, not a stem or a cluster alone
    for fact, mid in ids.items():
        for word in _WORD.findall(fact):
            if not terms(word):
                continue  # a stopword ("is", "the", "on", "user") finds nothing, by design
            got = cli.json("recall", "-p", "alpha", word, "--limit", "50", "--min-score", "0", "--json")["results"]
            assert mid in [r["memory"]["id"] for r in got], (word, fact)


def test_a_bank_written_by_the_joining_tokenizer_is_re_derived(tmp_path: Path) -> None:
    """A database whose stored features joined the compound ("buildserv runner", no "build")
    is re-derived on open (the features' fingerprint changed), so the word finds the memory on
    the cold path and in the index alike."""
    from memlocal.relevance.features import FEATURES_META_KEY

    path = tmp_path / "m.db"
    with MemoryBank(fresh_database(path), config=Config.load(environ={})) as bank:
        m = bank.save(SaveRequest("p", content="The build server is ci-3")).memory
        with bank.store.transaction() as c:
            c.execute("UPDATE memories SET features = 'buildserv ci runner @tech' WHERE id = ?", (m.id,))
            c.execute("UPDATE meta SET value = 'terms-6' WHERE key = ?", (FEATURES_META_KEY,))
    with MemoryBank(path, config=Config.load(environ={})) as bank:
        for _ in range(3):  # the cold path's first queries, then the index
            assert [r.memory.id for r in bank.query_with_relevance(RecallQuery("p", "build"))] == [m.id]


# Words of the kinds the tokenizer treats specially: compounds' parts and joined forms, spelling
# variants and abbreviations, words with broader words, degree forms, hyphens, possessives,
# diacritics, zone names, clock times, numbers, stopwords, generic words; plus made-up words.
SPECIAL_WORDS = """time zone timezone time-zone build server buildserver data base database home page back
    end front on call oncall log in login out of office e-mail email set up setup code freeze user name
    colour color k8s tz db repo config prod pytest jest vim lunch CET 9am 3pm metrics boss PTO flakiest
    flaky biggest fastest newest Ana's Caroline’s café Europe/Lisbon ci-3 2023 v1.2 the is a get thing
    servers Deploys deployment weekly Mondays rotation scheduled Portugal Vienna Texas new york NYC
    video game videogames board-game kids film judo teammates""".split()
word = st.one_of(st.sampled_from(SPECIAL_WORDS), st.text("abcdeiorstuy", min_size=2, max_size=9))
bank_spec = st.lists(st.lists(word, min_size=1, max_size=8).map(" ".join), min_size=1, max_size=6)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=bank_spec)
def test_every_content_word_of_every_memory_finds_it(texts: list[str]) -> None:
    """Property: each word of a memory that is a term at all, queried alone, returns that memory
    (limit 1000, min score 0: no tie at the limit can push it out)."""
    with tempfile.TemporaryDirectory() as tmp, _open(tmp) as bank:
        mems = [put(bank, "p", t, created=days_ago(i)) for i, t in enumerate(texts)]
        for m in mems:
            for w in set(_WORD.findall(m.processed_content)) | set(m.processed_content.split()):
                if not terms(w):
                    continue
                got = bank.query_with_relevance(RecallQuery("p", w, limit=1000, min_score=0.0, now=NOW))
                assert m.id in [r.memory.id for r in got], (w, m.processed_content)


# --- evidence shows the user's words -----------------------------------------------------------


def test_evidence_lists_the_words_of_the_query_never_stems(cli: Cli, tmp_path: Path) -> None:
    rotation = _save(cli, "beta", "The database rotation is scheduled weekly")
    flaky = _save(cli, "beta", "The flakiest test is test_sync")
    zone = _save(cli, "beta", "Lives in Lisbon, timezone Europe/Lisbon")
    runner = _save(cli, "beta", "The build server is ci-3")

    def evidence(query: str, mid: str) -> list[str]:
        got = cli.json("recall", "-p", "beta", query, "--json")["results"]
        return next(r["evidence"]["terms"] for r in got if r["memory"]["id"] == mid)

    assert evidence("Database rotation schedule?", rotation) == ["Database", "rotation", "schedule"]
    assert evidence("flaky tests", flaky) == ["flaky", "tests"]
    assert evidence("what time-zone is Ana in", zone) == ["time-zone"]  # the compound, as written
    assert evidence("which buildserver runs CI", runner) == ["buildserver", "CI"]
    assert evidence("the build server", runner) == ["build server"]
    human = cli("recall", "-p", "beta", "database rotation schedule").output
    assert "database rotation schedule" in human and "databas " not in human and "rotat " not in human

    # The same record through REST and the agent's tool.
    from api_live import LiveServer
    from support import http_client

    from memlocal.faces.api import create_app
    from memlocal.faces.tools import dispatch

    with MemoryBank(cli.db) as bank:
        out = dispatch(bank, "memory_recall", {"query": "flaky tests"}, "beta")
        assert out["results"][0]["evidence"]["terms"] == ["flaky", "tests"]
        with LiveServer(create_app(bank)) as server, http_client(base_url=server.url, timeout=30) as c:
            r = c.get("/api/profiles/beta/memories/search", params={"q": "Database rotation"})
            assert r.status_code == 200, r.text
            [hit] = [x for x in r.json()["results"] if x["memory"]["id"] == rotation]
            assert hit["evidence"]["terms"] == ["Database", "rotation"] and "rank" in hit["evidence"]


# --- a question that names a kind finds the fact that names an instance --------------------------

# Written from the principle (everyday language names kinds of things: a country, a city, a US
# state, a sport, a film, a game, a book, family), not from the benchmark's items. Each question
# shares only its subject and the kind with its fact; the neighbours are about the same subject.
KIND_CASES = [
    ("which country is Ana from?", "Ana grew up in Portugal"),
    ("which city is Ana flying to?", "Ana has a conference in Vienna next week"),
    ("which state did Ana move to?", "Ana relocated to Oregon last spring"),
    ("what European countries has Ana visited?", "Ana spent two weeks in Croatia"),
    ("what sport does Ana play?", "Ana joined a cricket club"),
    ("what martial art does Ana practise?", "Ana has a brown belt in judo"),
    ("what movies does Ana like?", "Ana's favourite film is Spirited Away"),
    ("which video games does Ana own?", "Ana bought a Nintendo Switch"),
    ("what book is Ana reading?", "Ana is halfway through a biography of Ada Lovelace"),
    ("how is Ana's family?", "Ana's kids started school in September"),
]
NEIGHBOURS = ["Ana works on the billing team", "Ana prefers tea over coffee", "Ana's standup is at 9am on Mondays",
              "Ana owns the deploy pipeline", "Orlando pairs with Ana on Fridays"]


@pytest.mark.parametrize(("query", "fact"), KIND_CASES)
def test_a_question_naming_a_kind_finds_the_fact_naming_an_instance(bank: MemoryBank, query: str,
                                                                     fact: str) -> None:
    """"which country is Ana from?" finds "Ana grew up in Portugal" first, among other facts about
    Ana: the place, sport, film, game or relative yields the kind it is (memlocal.relevance.vocab.BROADER)."""
    target = put(bank, "p", fact, created=days_ago(5))
    for i, text in enumerate(NEIGHBOURS):
        put(bank, "p", text, created=days_ago(i))
    got = bank.query_with_relevance(RecallQuery("p", query, now=NOW))
    assert got and got[0].memory.id == target.id, [r.memory.processed_content for r in got[:3]]


def test_a_question_naming_a_place_asks_about_that_place(bank: MemoryBank) -> None:
    """A memory that names a place says its kind too, but a question that names one asks about it:
    "Croatia" finds the fact about Croatia, not every European country's (which crowded the block)."""
    croatia = put(bank, "p", "Ana spent two weeks in Croatia")
    put(bank, "p", "Ana's sister lives in Norway")
    put(bank, "p", "Ana has a conference in Vienna next week")
    got = bank.query_with_relevance(RecallQuery("p", "what did Ana see in Croatia?", min_score=0.0, now=NOW))
    assert got[0].memory.id == croatia.id
    assert not [r for r in got[1:] if r.evidence and "Croatia" in r.evidence.terms]
    assert [r.memory.id for r in bank.query_with_relevance(RecallQuery("p", "Croatia", now=NOW))] == [croatia.id]
    # The kind still finds the places: "which country" is a question about countries.
    assert len(bank.query_with_relevance(RecallQuery("p", "which country", now=NOW))) == 2


def test_a_name_that_is_also_a_first_name_is_not_read_as_a_place(bank: MemoryBank) -> None:
    """Places are bridged only by names that are not also a first name: "Orlando fixed the test"
    is about a person, and "which city" does not find it."""
    for name in ("Orlando", "Brooklyn", "Jordan", "Austin", "Sydney", "Georgia"):
        assert not terms(name) & terms("city country state location"), name
    put(bank, "p", "Orlando fixed the flaky login test")
    assert not bank.query_with_relevance(RecallQuery("p", "which city", now=NOW))


# --- order = what is shown ---------------------------------------------------------------------


def _shown_key(r: ScoredMemory) -> tuple[bool, float, float]:
    """What recall shows of the order: a shared word (or a counted similarity) before a cluster
    alone, the rank, the score."""
    ev = r.evidence
    assert ev is not None
    return (not (ev.terms or ev.semantic is not None), -ev.rank, -r.score)


def test_the_table_lists_results_in_the_order_of_what_it_shows(cli: Cli) -> None:
    """"when can we deploy?" over deploy facts: a result with the same evidence and a higher
    score (0.946) was listed below one with 0.576, by a key the table did not show. The table now
    shows it (rank), and the rows follow rank, then score."""
    now = utcnow()
    with MemoryBank(cli.db) as bank:
        put(bank, "ops", "Deploys to production are allowed from Monday to Thursday between 09:00 and 15:00 UTC "
                         "once the release manager has approved the change in the deploy channel", category="fact",
            created=now)
        put(bank, "ops", "No deploys on Fridays", category="fact", created=now - timedelta(days=40))
        put(bank, "ops", "Staging deploys run on every merge", category="fact", created=now - timedelta(days=10))
    out = cli("recall", "-p", "ops", "when can we deploy?")
    lines = out.output.splitlines()
    header = lines[0].split()
    assert header[:5] == ["#", "id", "evidence", "rank", "score"], header
    rows = [re.match(r"\s*\d+\s+mem-\w+\s+(.*?)\s+(\d\.\d{4})\s+(\d\.\d{3})\s", line) for line in lines[2:5]]
    assert all(rows) and {r[1] for r in rows if r} == {"deploy [tech]"}, lines  # the same evidence
    shown = [(float(r[2]), float(r[3])) for r in rows if r]
    assert shown == sorted(shown, reverse=True), shown
    data = cli.json("recall", "-p", "ops", "when can we deploy?", "--json")["results"]
    keys = [(r["evidence"]["rank"], r["score"]) for r in data]
    assert keys == sorted(keys, reverse=True), keys


VOCAB = ["server", "release", "deploy", "deploys", "diet", "peanut", "allergy", "trip", "flight", "movie", "boss",
         "report", "coffee", "email", "caroline", "paint", "the", "kids", "dog", "running", "zebra", "on", "november",
         "time", "zone", "build", "fridays", "lunch"]
memory_spec = st.fixed_dictionaries({
    "words": st.lists(st.sampled_from(VOCAB), min_size=1, max_size=12),
    "category": st.sampled_from(CATEGORIES),
    "confidence": st.sampled_from([0.0, 0.5, 1.0, 0.9]),
    "age": st.one_of(st.sampled_from([0.0, 1.0, 30.0, 90.0]), st.floats(0, 400)),
    "count": st.sampled_from([0, 0, 1, 3, 20, 60]),
})
query_text = st.lists(st.sampled_from([*VOCAB, "9 November, 2024", "unknown"]), min_size=1, max_size=4).map(" ".join)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(memory_spec, min_size=1, max_size=30), queries=st.lists(query_text, min_size=1, max_size=4),
       limit=st.sampled_from([1, 3, 8, 30]), semantic=st.booleans(), data=st.data())
def test_results_are_listed_in_the_order_of_the_key_they_show(specs: list[dict[str, Any]], queries: list[str],
                                                             limit: int, semantic: bool, data: Any) -> None:
    """Property: over random banks and queries, each result's shown key (a shared word before a
    cluster alone, then rank, then score) is never better than the one before it: the index, the
    cold path and the full scan alike (they return the same, tests/test_recall.py)."""
    from memlocal.recall import RecallIndex, RecallTuning
    from memlocal.relevance.scoring import FullScan, Ranking, RankQuery

    with tempfile.TemporaryDirectory() as tmp, _open(tmp) as bank:
        mems = [put(bank, "p", " ".join(s["words"]), category=s["category"], confidence=s["confidence"],
                    created=days_ago(s["age"]), count=s["count"]) for s in specs]
        scan = FullScan(mems)
        paths = [RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0, background=False)),
                 RecallIndex(bank.store, tuning=RecallTuning(cold_queries=10**9, background=False))]
        try:
            for q in queries:
                similarity = None
                if semantic:
                    similarity = {m.id: data.draw(st.sampled_from([0.05, 0.1, 0.25, 0.3, 0.45, 0.8])) for m in mems}
                rq = RankQuery(q, limit, 0.0, now=NOW, ranking=Ranking(), similarity=similarity)
                for got in (*(p.query("p", rq) for p in paths), scan.rank(rq)):
                    keys = [_shown_key(r) for r in got]
                    assert keys == sorted(keys), (q, keys)
                    assert all(r.evidence is not None and r.evidence.rank == round(r.evidence.rank, 4) for r in got)
        finally:
            for p in paths:
                p.close()


def test_json_evidence_has_the_rank(cli: Cli) -> None:
    _save(cli, "gamma", "Deploys happen on Tuesdays", "fact")
    [hit] = cli.json("recall", "-p", "gamma", "deploy", "--json")["results"]
    assert json.dumps(hit["evidence"]) and set(hit["evidence"]) == {"terms", "clusters", "strength", "best", "rank"}


# --- a misspelt word finds its memory ------------------------------------------------------------


def test_a_misspelt_word_finds_its_memory_and_shows_as_written(cli: Cli) -> None:
    """"When did Nate win his torunament?" found nothing: no memory says "torunament". A word of 7
    letters or more that no memory says stands for the one a memory says one edit away."""
    won = _save(cli, "typo", "Nate won the regional tournament in May", "fact")
    _save(cli, "typo", "Nate plays chess on Sundays", "fact")
    for query in ("torunament", "tournamnet", "tournamet", "when did Nate win the tornament?"):
        got = cli.json("recall", "-p", "typo", query, "--json")["results"]
        assert got and got[0]["memory"]["id"] == won, query
    [hit] = [r for r in cli.json("recall", "-p", "typo", "regionl torunament", "--json")["results"]]
    assert hit["evidence"]["terms"] == ["regionl", "torunament"]  # the words as written, never the stems
    # Short words are not guessed at ("chesss" is 6 letters): one edit makes too many other words.
    assert cli.json("recall", "-p", "typo", "chesss", "--json")["results"] == []


def test_a_word_the_bank_says_is_never_read_as_another() -> None:
    """Only a word no memory says is corrected: "fraction" never finds "traction", and a query
    word that some memory says keeps its exact matches only."""
    with tempfile.TemporaryDirectory() as tmp, _open(tmp) as bank:
        traction = put(bank, "p", "The traction numbers are up 10%", created=days_ago(1))
        fraction = put(bank, "p", "A fraction of the tests are flaky", created=days_ago(2))
        ids = lambda q: [r.memory.id for r in bank.query_with_relevance(RecallQuery("p", q, now=NOW))]  # noqa: E731
        assert ids("fraction") == [fraction.id]
        assert ids("traction") == [traction.id]
        assert ids("fractoin") == [fraction.id]


@pytest.mark.parametrize("query", ["torunament results", "regoinal tournament", "tournamnet chess",
                                   "recieved pakcage", "qwertyuiop"])
def test_misspelt_queries_are_answered_exactly_by_every_path(query: str) -> None:
    """The corrected query is the same on the index, the cold path and the full scan: each path
    looks the neighbours up in its own document frequencies, which agree."""
    from memlocal.recall import RecallIndex, RecallTuning
    from memlocal.relevance.scoring import FullScan, Ranking, RankQuery

    texts = ["Nate won the regional tournament", "The chess tournament is in May", "Ana received the package",
             "The package was lost in transit", "Regional offices close at 5pm", "Nate plays chess"]
    with tempfile.TemporaryDirectory() as tmp, _open(tmp) as bank:
        mems = [put(bank, "p", t, created=days_ago(i), count=i % 3) for i, t in enumerate(texts)]
        paths = [RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0, background=False)),
                 RecallIndex(bank.store, tuning=RecallTuning(cold_queries=10**9, background=False))]
        try:
            rq = RankQuery(query, 8, 0.0, now=NOW, ranking=Ranking())
            want = [(r.memory.id, r.score, r.evidence) for r in FullScan(mems).rank(rq)]
            for p in paths:
                assert [(r.memory.id, r.score, r.evidence) for r in p.query("p", rq)] == want
            assert bool(want) == (query != "qwertyuiop")
        finally:
            for p in paths:
                p.close()
