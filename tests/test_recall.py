"""Recall is exact: the fast index returns what a brute-force full scan with the formula returns,
for random banks and queries, and stays exact while the bank changes under it (this process,
another connection, another bank object on the same file)."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlocal import MemoryBank, RecallQuery, SaveRequest
from memlocal.config import Config
from memlocal.model import CATEGORIES, Memory
from memlocal.recall import RecallIndex, RecallTuning
from memlocal.relevance.scoring import PREFERENCE_TIER, SPEC, FullScan, Ranking, RankQuery, ScoredMemory, rank_brute_force
from conftest import settings_config
from memory_factory import NOW, days_ago, memory, put
from support import fresh_database

VOCAB = ["server", "release", "deploy", "diet", "peanut", "allergy", "trip", "flight", "flights", "movie",
         "film", "boss", "report", "coffee", "email", "order", "caroline", "melanie", "paint", "the",
         "and", "kids", "dog", "running", "runs", "zebra"]

memory_spec = st.fixed_dictionaries({
    "words": st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6),
    "category": st.sampled_from(CATEGORIES),
    # Few distinct values: ties in score are common, so the tie-break is exercised.
    "confidence": st.sampled_from([0.0, 0.5, 1.0, 0.9]),
    "age": st.one_of(st.sampled_from([0.0, 1.0, 30.0, 90.0]), st.floats(0, 400)),
    "last": st.one_of(st.none(), st.sampled_from([0.0, 2.0, 45.0])),
    "count": st.sampled_from([0, 0, 0, 1, 3, 20, 60]),
    "active": st.sampled_from([True, True, True, False]),
})
query_text = st.lists(st.sampled_from([*VOCAB, "unknown", "AND", '"', "*"]), max_size=4).map(" ".join)


def _open(tmp: str) -> MemoryBank:
    """A bank on ``tmp``/m.db (a fresh file starts as a copy of the empty database)."""
    path = Path(tmp) / "m.db"
    return MemoryBank(path if path.exists() else fresh_database(path), config=Config.load(environ={}))


def _memory(spec: dict[str, Any], profile: str = "p", **over: Any) -> Memory:
    created = days_ago(spec["age"])
    last = None if spec["last"] is None else min(NOW, created + timedelta(days=spec["last"]))
    return memory(profile, " ".join(spec["words"]), category=spec["category"], confidence=spec["confidence"],
                  created=created, last=last, count=spec["count"], active=spec["active"], **over)


def _put(bank: MemoryBank, spec: dict[str, Any], profile: str = "p", **over: Any) -> Memory:
    m = _memory(spec, profile, **over)
    bank.store.upsert(m)
    return m


def _key(results: list[ScoredMemory]) -> list[tuple[str, float]]:
    return [(r.memory.id, r.score) for r in results]


# Both modes: the spec's literal rule, and the evidence gate at its default and extreme ratios.
RANKINGS = [SPEC, Ranking(), Ranking("evidence", 0.0), Ranking("evidence", 0.7), Ranking("evidence", 1.0)]


def _indexes(bank: MemoryBank, budget: int | None, max_rows: int = 4096) -> list[RecallIndex]:
    """The two paths: the in-memory index (built on the first query), and the cold path that
    answers every query from the persisted FTS5 features (``max_rows`` 0: it gives up whenever
    it would have to read the common features' rows, and the index is built instead)."""
    direct = 0 if budget == 0 else None
    return [RecallIndex(bank.store, tuning=RecallTuning(
                essential_budget=budget, cold_queries=0, background=False, direct=direct,
                head_size=None if budget is None else budget + 1, moved_max=budget)),
            RecallIndex(bank.store, tuning=RecallTuning(
                essential_budget=budget, cold_queries=10**9, cold_max_rows=max_rows, direct=direct))]


def _check(bank: MemoryBank, indexes: list[RecallIndex], query: str, limit: int, min_score: float,
           exclude: list[str], tier: str | None, ranking: Ranking = Ranking(),
           similarity: dict[str, float] | None = None, scan: FullScan | None = None) -> None:
    """Every index answers ``query`` as the full scan (``scan``: the bank's profile "p" as it is
    now, when the caller ranks several queries on it)."""
    rq = RankQuery(query, limit, min_score, tuple(exclude), NOW, tier, ranking, similarity)
    want = (scan or FullScan(bank.store.iter_profile("p"))).rank(rq)
    for index in indexes:
        got = index.query("p", rq)
        assert _key(got) == _key(want)
        assert [r.breakdown for r in got] == [r.breakdown for r in want]
        assert [r.evidence for r in got] == [r.evidence for r in want]
        assert [r.memory for r in got] == [r.memory for r in want]
        if ranking.gated:  # every result has evidence; none is padding
            assert all(r.evidence is not None and r.breakdown.topic > 0 for r in got)
        else:
            assert all(r.evidence is None for r in got)


# The semantic signal's embedding top-k, as (memory index, cosine) pairs: cosines around the
# floor (0.1) and ties are common, and some point at inactive or excluded memories.
similarity_spec = st.one_of(st.none(), st.lists(
    st.tuples(st.integers(0, 60), st.one_of(st.sampled_from([0.05, 0.1, 0.1000001, 0.3, 0.6, 1.0]),
                                            st.floats(-1.0, 1.0))), max_size=8))


def _similarity(pairs: list[tuple[int, float]] | None, mems: list[Memory]) -> dict[str, float] | None:
    if pairs is None or not mems:
        return None
    return {mems[i % len(mems)].id: cos for i, cos in pairs}


@pytest.mark.slow  # the longest property of the suite (150 banks): started first
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(memory_spec, max_size=45),
    other=st.lists(memory_spec, max_size=5),
    queries=st.lists(query_text, min_size=1, max_size=3),
    limit=st.integers(1, 12),
    min_score=st.sampled_from([0.0, 0.05, 0.3, 0.6]),
    budget=st.sampled_from([None, 0, 3]),
    tier=st.sampled_from([None, None, "core", "other", PREFERENCE_TIER]),
    n_excluded=st.integers(0, 3),
    ranking=st.sampled_from(RANKINGS),
    max_rows=st.sampled_from([4096, 0]),
    pairs=similarity_spec,
)
def test_top_k_equals_brute_force(specs: list[dict[str, Any]], other: list[dict[str, Any]], queries: list[str],
                                  limit: int, min_score: float, budget: int | None, tier: str | None,
                                  n_excluded: int, ranking: Ranking, max_rows: int,
                                  pairs: list[tuple[int, float]] | None) -> None:
    with tempfile.TemporaryDirectory() as tmp, _open(tmp) as bank:
        mems = [_put(bank, s) for s in specs]
        for s in other:  # another profile's memories never leak in nor change the statistics
            _put(bank, s, profile="q")
        exclude = [m.id for m in mems[:n_excluded]]
        indexes = _indexes(bank, budget, max_rows)
        similarity = _similarity(pairs, mems)
        scan = FullScan(bank.store.iter_profile("p"))  # the queries change nothing: one scan for all
        for q in queries:
            _check(bank, indexes, q, limit, min_score, exclude, tier, ranking, similarity, scan)
            # The public API (automatic budget, both tiers, the default mode) agrees as well.
            want = scan.rank(RankQuery(q, limit, min_score, now=NOW))
            assert _key(bank.query_with_relevance(RecallQuery("p", q, limit, min_score, now=NOW))) == _key(want)


mutation = st.one_of(
    st.tuples(st.just("add"), memory_spec),
    st.tuples(st.just("access"), st.integers(0, 50)),
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("rewrite"), st.integers(0, 50), memory_spec),
    st.tuples(st.just("deactivate"), st.integers(0, 50)),
    st.tuples(st.just("move"), st.integers(0, 50)),
)


@pytest.mark.slow  # 80 banks, each changed and queried up to 9 times
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(memory_spec, min_size=1, max_size=25),
    steps=st.lists(mutation, min_size=1, max_size=8),
    query=query_text,
    budget=st.sampled_from([None, 0, 2]),
    ranking=st.sampled_from(RANKINGS),
    pairs=similarity_spec,
)
def test_index_stays_exact_while_the_bank_changes(specs: list[dict[str, Any]], steps: list[tuple[Any, ...]],
                                                  query: str, budget: int | None, ranking: Ranking,
                                                  pairs: list[tuple[int, float]] | None) -> None:
    with tempfile.TemporaryDirectory() as tmp, _open(tmp) as bank, _open(tmp) as elsewhere:
        mems = [_put(bank, s) for s in specs]
        indexes = _indexes(bank, budget)
        similarity = _similarity(pairs, mems)
        _check(bank, indexes, query, 8, 0.0, [], None, ranking, similarity)
        for i, step in enumerate(steps):
            # Alternate the writer: this connection, then another one on the same file.
            writer = bank if i % 2 else elsewhere
            live = [m.id for m in writer.store.iter_profile("p")]
            kind = step[0]
            if kind == "add":
                _put(writer, step[1])
            elif live and kind == "access":
                writer.store.mark_accessed("p", [live[step[1] % len(live)]], NOW)
            elif live and kind == "delete":
                writer.delete("p", live[step[1] % len(live)])
            elif live and kind == "rewrite":
                _put(writer, step[2], memory_id=live[step[1] % len(live)])
            elif live and kind == "deactivate":
                with writer.store.transaction() as c:
                    c.execute("UPDATE memories SET is_active = 0 WHERE id = ?", (live[step[1] % len(live)],))
            elif live and kind == "move":
                with writer.store.transaction() as c:
                    c.execute("UPDATE memories SET profile = 'q' WHERE id = ?", (live[step[1] % len(live)],))
            _check(bank, indexes, query, 8, 0.0, [], None, ranking, similarity)
        assert mems  # the bank was not empty to start with


def test_another_bank_on_the_same_file_is_seen(tmp_path: Path) -> None:
    """A runner's saves reach the API server's cached index on its next query."""
    with _open(str(tmp_path)) as server, _open(str(tmp_path)) as runner:
        assert server.query_with_relevance(RecallQuery("p", "coffee")) == []
        m = runner.save(SaveRequest("p", content="Likes strong coffee")).memory
        assert [r.memory.id for r in server.query_with_relevance(RecallQuery("p", "coffee"))] == [m.id]
        runner.recall(RecallQuery("p", "coffee"))
        assert server.query_with_relevance(RecallQuery("p", "coffee"))[0].memory.access_count == 1
        runner.delete("p", m.id)
        assert server.query_with_relevance(RecallQuery("p", "coffee")) == []


def test_profiles_are_isolated(bank: MemoryBank) -> None:
    a = bank.save(SaveRequest("a", content="Alpha likes coffee")).memory
    bank.save(SaveRequest("b", content="Beta likes coffee"))
    assert [r.memory.id for r in bank.recall(RecallQuery("a", "coffee"))] == [a.id]
    assert bank.query_with_relevance(RecallQuery("nobody", "coffee")) == []


@pytest.mark.slow
def test_exact_on_a_few_thousand_memories(tmp_path: Path) -> None:
    """At a size where the automatic essential budget and the threshold walk really prune."""
    import random

    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(800)] + VOCAB * 3
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    with _open(str(tmp_path)) as bank:
        rows = []
        for i in range(3000):
            spec = {"words": rng.choices(vocab, weights, k=rng.randint(3, 12)),
                    "category": rng.choice(CATEGORIES), "confidence": rng.choice([1.0, 0.8, 0.4]),
                    "age": rng.random() * 300, "last": rng.choice([None, 1.0, 20.0]),
                    "count": rng.choice([0, 0, 0, 1, 2, 7, 30]), "active": rng.random() > 0.05}
            # Ids of their own: 3,000 random 32-bit ids repeat one about once in a thousand runs
            # (seen once, under load), and the batch then rightly answers "unchanged" for it.
            rows.append(_memory(spec, memory_id=f"mem-{i:08x}"))
        assert set(bank.store.import_batch(rows)) == {"imported"}  # one transaction, not 3,000
        scan = FullScan(bank.store.iter_profile("p"))  # tokenised once, ranked per query
        for _ in range(25):
            q = " ".join(rng.choices(vocab, weights, k=rng.randint(1, 4)))
            for tier in (None, "core"):
                rq = RankQuery(q, 8, 0.05, now=NOW, tier=tier)
                assert _key(bank._index().query("p", rq)) == _key(scan.rank(rq))
        assert len(rows) == 3000


def test_timestamps_far_from_now_do_not_break_the_walk(bank: MemoryBank) -> None:
    """Another host's clock may be centuries off: the bound saturates instead of overflowing."""
    from datetime import datetime, timezone

    future = put(bank, "p", "written by a host whose clock is wrong",
                 created=datetime(9990, 1, 1, tzinfo=timezone.utc))
    ancient = put(bank, "p", "written long ago", created=datetime(1971, 1, 1, tzinfo=timezone.utc))
    # The spec's rule ranks memories without evidence too: that is the walk this test exercises.
    got = RecallIndex(bank.store).query("p", RankQuery("anything", limit=8, min_score=0.0, now=NOW, ranking=SPEC))
    assert [r.memory.id for r in got] == [future.id, ancient.id]
    assert got[0].breakdown.recency == 1.0 and got[1].breakdown.recency < 1e-100


def test_the_spec_walk_is_exact_after_many_access_bumps_made_lazily(tmp_path: Path) -> None:
    """Access bumps move memories in the index's static orders lazily (the evidence gate never
    reads them): each walk scores the bumped ones apart until there are many, then they are
    filed in one pass; either way the spec mode's walk (which reads the orders) still equals
    the full scan, in both tiers (``moved_max`` 8: filed every round or two)."""
    import random

    rng = random.Random(5)
    with _open(str(tmp_path)) as bank:
        rows = [_memory({"words": rng.choices(VOCAB, k=rng.randint(2, 6)), "category": rng.choice(CATEGORIES),
                         "confidence": rng.choice([1.0, 0.8, 0.4]), "age": rng.random() * 300,
                         "last": rng.choice([None, 1.0, 20.0]), "count": rng.choice([0, 1, 7]), "active": True})
                for _ in range(300)]
        assert set(bank.store.import_batch(rows)) == {"imported"}
        indexes = [RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0, background=False)),
                   RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0, background=False, moved_max=8))]
        ids = [m.id for m in rows]
        for rounds in (40, 4):  # 40 rounds of 8 bumps, then 4
            for _ in range(rounds):
                bank.store.mark_accessed("p", rng.sample(ids, 8), NOW)
                for index in indexes:
                    index.query("p", RankQuery(rng.choice(VOCAB), 8, 0.05, now=NOW))  # the gate: no walk
            scan = FullScan(bank.store.iter_profile("p"))  # tokenised once, ranked per query
            for q in ("", *rng.sample(VOCAB, 4)):
                for tier in (None, "core", "other"):
                    rq = RankQuery(q, 8, 0.05, now=NOW, tier=tier, ranking=SPEC)
                    want = scan.rank(rq)
                    for index in indexes:
                        got = index.query("p", rq)
                        assert _key(got) == _key(want)


def test_filing_moved_memories_in_one_pass_equals_sorting_the_orders_again(tmp_path: Path) -> None:
    """The index files bumped, new and removed memories in its static orders by bisections and
    slices (``_sorted``); the orders (and their key arrays) are exactly a fresh sort's."""
    import random

    rng = random.Random(11)
    with _open(str(tmp_path)) as bank:
        rows = [_memory({"words": rng.choices(VOCAB, k=rng.randint(2, 6)), "category": rng.choice(CATEGORIES),
                         "confidence": rng.choice([1.0, 0.8, 0.4]), "age": rng.random() * 300,
                         "last": rng.choice([None, 1.0]), "count": rng.choice([0, 1, 7]), "active": True})
                for _ in range(200)]
        assert set(bank.store.import_batch(rows)) == {"imported"}
        index = RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0, background=False, moved_max=10**9))
        index.query("p", RankQuery("x", limit=8, min_score=0.05, now=NOW))
        ids = [m.id for m in rows]
        for i in range(6):
            bank.store.mark_accessed("p", rng.sample(ids, 12), NOW)  # ties in usage: many share a count
            bank.delete("p", ids.pop(rng.randrange(len(ids))))
            _put(bank, {"words": rng.choices(VOCAB, k=3), "category": "fact", "confidence": 1.0, "age": 1.0,
                        "last": None, "count": i, "active": True})
            index.query("p", RankQuery("x", limit=8, min_score=0.05, now=NOW))
            idx = index._indexes["p"]
            assert idx._moved
            idx._sorted()
            filed = (idx.by_x, idx.by_y, idx.neg_x, idx.neg_y)
            idx._make_orders()
            assert filed == (idx.by_x, idx.by_y, idx.neg_x, idx.neg_y)


def test_a_tiers_head_answers_exactly_as_the_clock_moves_and_the_bank_changes(tmp_path: Path) -> None:
    """The spec mode's tiers (what every block ranks) are answered from a head of each tier made
    at one time and reused later: forward in time (scores only decay), after access bumps and
    new memories (scored as dirty), and made again when the clock goes back or the weights move.
    With heads of 1-5 docs, most answers fall back to the walk, the rest come from the head: all
    equal the full scan, in every tier, the preferences ranked as a tier (``direct=0``)."""
    import random

    rng = random.Random(11)
    with _open(str(tmp_path)) as bank:
        rows = [_memory({"words": rng.choices(VOCAB, k=rng.randint(2, 6)), "category": rng.choice(CATEGORIES),
                         "confidence": rng.choice([1.0, 0.8, 0.4]), "age": rng.random() * 300,
                         "last": rng.choice([None, 1.0, 20.0]), "count": rng.choice([0, 1, 7, 60]), "active": True})
                for _ in range(200)]
        assert set(bank.store.import_batch(rows)) == {"imported"}
        indexes = [RecallIndex(bank.store,
                               tuning=RecallTuning(cold_queries=0, background=False, direct=0, head_size=size))
                   for size in (1, 5, None)]
        ids = [m.id for m in rows]
        for step, hours in enumerate((0, 1, 72, 72, -24, 24 * 200, 24 * 200 + 1)):
            now = NOW + timedelta(hours=hours)
            if step % 2:
                bank.store.mark_accessed("p", rng.sample(ids, 3), now)
            if step == 3:
                put(bank, "p", "a preference saved just now", category="preference", created=now)
            scan = FullScan(bank.store.iter_profile("p"))  # tokenised once, ranked per query
            for q in ("", *rng.sample(VOCAB, 2)):
                for tier in (None, "core", "other", PREFERENCE_TIER):
                    for limit in (1, 8):
                        rq = RankQuery(q, limit, 0.0, now=now, tier=tier, ranking=SPEC)
                        want = scan.rank(rq)
                        for index in indexes:
                            got = index.query("p", rq)
                            assert _key(got) == _key(want)


def test_the_block_equals_one_built_from_the_full_scan(tmp_path: Path) -> None:
    """The block's mechanics (preferences read 16 at a time and ranked as a tier, the tiers'
    heads, one clock per block) never change it: every block equals the one
    ``build_evidence_block`` makes from the full scan's rankings, fresh and after the blocks
    marked what they showed as used (an hour later, the heads reused with dirty memories)."""
    import random

    from memlocal.services.injection import build_evidence_block, evidence_limit

    rng = random.Random(7)
    queries = ["deploy the release", "coffee with the boss", "zebra", "the", "peanut diet for kids", "unknown"]
    with _open(str(tmp_path)) as bank:
        # Short lines: some 40 preferences fit in half the budget, so a block reads past the first 16.
        rows = [_memory({"words": rng.choices(VOCAB, k=rng.randint(1, 3)),
                         "category": "preference" if i % 3 == 0 else rng.choice(CATEGORIES),
                         "confidence": rng.choice([1.0, 0.8, 0.4]), "age": rng.random() * 300,
                         "last": rng.choice([None, 1.0, 20.0]), "count": rng.choice([0, 1, 7, 60]), "active": True})
                for i in range(240)]
        assert set(bank.store.import_batch(rows)) == {"imported"}
        bank._recall_index = RecallIndex(
            bank.store, tuning=RecallTuning(cold_queries=0, background=False, direct=0, head_size=4))
        for now in (NOW, NOW + timedelta(hours=1)):
            scan = FullScan(bank.store.iter_profile("p"))  # tokenised once, ranked per query
            for q in queries:
                def ranked(tier: str, limit: int, min_score: float) -> list[ScoredMemory]:
                    return scan.rank(RankQuery(q, limit, min_score, now=now, tier=tier,
                                               ranking=SPEC if tier != "other" else Ranking()))

                # The block reads every memory with any evidence (ratio 0), those past the gate's ratio first.
                evidence = scan.rank(RankQuery(q, evidence_limit(2000, 8), 0.05, now=now,
                                               ranking=Ranking("evidence", 0.0)))
                want = build_evidence_block(evidence, ranked, budget=2000, relevant_limit=8, ratio=Ranking().ratio)
                got = bank.render_context_block("p", q, now=now)
                assert got.text == want.text and got.ids == want.ids
                assert [s.memory.id for s in got.trimmed] == [s.memory.id for s in want.trimmed]
                assert sum(s.memory.category == "preference" for s in got.core) > 16
            for q in queries:
                bank.build_context_block("p", q, now=now)  # marks what it showed as used
            bank.drain()


def test_queries_read_as_one_see_one_state_and_read_each_row_once(tmp_path: Path) -> None:
    """Inside ``RecallIndex.reading`` (a block's three rankings) the queries answer from one read
    transaction: a bump another connection commits between them is not seen, so the tiers agree,
    and each memory's row is read once; the next reading sees the bump."""
    from memlocal.store import Store

    with _open(str(tmp_path)) as bank:
        facts = [put(bank, "p", f"deploy the release {w}", category="fact", created=days_ago(i))
                 for i, w in enumerate(("friday", "monday", "tonight"))]
        put(bank, "p", "prefers short release notes", category="preference", created=days_ago(4))
        index = RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0, background=False))
        index.query("p", RankQuery("release", 8, 0.0, now=NOW))  # built
        index._indexes["p"].rows.clear()  # nothing kept from before
        other = Store(bank.store.path)
        statements: list[str] = []
        try:
            with index.reading("p"):
                with bank.store.snapshot() as conn:  # the reading's own connection (a nested snapshot)
                    conn.set_trace_callback(statements.append)
                try:
                    core = index.query("p", RankQuery("release", 8, 0.0, now=NOW, tier="core", ranking=SPEC))
                    other.mark_accessed("p", [facts[0].id], NOW)  # committed between the two rankings
                    evidence = index.query("p", RankQuery("release", 8, 0.0, now=NOW))
                finally:
                    conn.set_trace_callback(None)
        finally:
            other.close()
        assert len(core) == 4 and len(evidence) == 4
        seen = {r.memory.id: r.memory.access_count for r in (*core, *evidence)}
        assert seen[facts[0].id] == 0  # as the reading's first query saw it
        reads = [sql for sql in statements if " WHERE id IN (" in sql]
        assert len(reads) == 1, reads  # the second query's rows were all read by the first
        after = index.query("p", RankQuery("release", 8, 0.0, now=NOW))
        assert {r.memory.id: r.memory.access_count for r in after}[facts[0].id] == 1
        assert _key(after) == _key(rank_brute_force(bank.store.iter_profile("p"), RankQuery("release", 8, 0.0, now=NOW)))


def test_the_memories_an_index_keeps_are_the_rows_after_any_write(tmp_path: Path) -> None:
    """The index keeps the memories it read (a block reads the same ones run after run) and
    returns each as its row is now, whatever another connection changes: any single field
    (rawInput, source, stalenessScore, version and the extra fields included, which move no
    score), a bump, a replacement, a deletion."""
    import json

    from memlocal.store import Store

    with _open(str(tmp_path)) as bank:
        kept = [put(bank, "p", f"deploy the release {w}", category=c, created=days_ago(i))
                for i, (w, c) in enumerate((("friday", "fact"), ("monday", "preference"), ("tonight", "general")))]
        index = RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0, background=False))
        other = Store(bank.store.path)
        rq = RankQuery("release", 8, 0.0, now=NOW)

        def check() -> None:
            got = index.query("p", rq)
            want = bank.store.get_many("p", [m.id for m in kept])
            assert {r.memory.id: r.memory for r in got} == want
            assert _key(got) == _key(rank_brute_force(bank.store.iter_profile("p"), rq))

        check()
        assert set(index._indexes["p"].rows) == {m.id for m in kept}  # kept as read
        first = kept[0].id
        try:
            for column, value in (("extra", json.dumps({"supersededBy": "mem-x"})), ("staleness", 0.75),
                                  ("raw_input", "deploy the release, as typed"), ("source", "inferred"),
                                  ("version", 2), ("summary", "deploy it")):
                with other.transaction() as c:
                    c.execute(f"UPDATE memories SET {column} = ? WHERE id = ?", (value, first))
                check()
            other.mark_accessed("p", [kept[1].id], NOW)
            check()
            other.upsert(bank.store.get("p", kept[2].id).with_changes(confidence=0.5, extra={"note": "x"}))
            check()
            with other.transaction() as c:
                c.execute("DELETE FROM memories WHERE id = ?", (first,))
            kept = kept[1:]
            check()
        finally:
            other.close()


# --- the index is built beside the queries --------------------------------------------------------

_BANK_TEXTS = ["Deploy the release on Friday", "The server runs nginx", "Peanut allergy: no satay",
               "Coffee with the boss at nine", "Flights to Lisbon booked", "Report due after the release",
               "Caroline paints on Sundays", "The dog needs a walk", "Movie night: a film by Melanie",
               "Email the report to the boss", "Order coffee beans", "Running club on Tuesdays"]


def _answers(bank: MemoryBank, index: RecallIndex, queries: list[str],
             similarity: dict[str, float]) -> list[list[tuple[str, float]]]:
    """Each query in both modes (evidence with the semantic signal, spec), checked against the
    full scan, as (id, score) lists."""
    out = []
    for q in queries:
        for ranking, sim in ((Ranking(), similarity), (Ranking(), None), (SPEC, None)):
            rq = RankQuery(q, 5, 0.0, now=NOW, ranking=ranking, similarity=sim)
            want = rank_brute_force(bank.store.iter_profile("p"), rq)
            got = index.query("p", rq)
            assert _key(got) == _key(want) and [r.evidence for r in got] == [r.evidence for r in want]
            out.append(_key(got))
    return out


def test_queries_are_answered_exactly_while_the_index_is_built_in_the_background(tmp_path: Path) -> None:
    """The build runs on its own thread; until it is installed, queries are answered from the
    persisted features (no query waits for it), and the answers are the same before and after.
    A hook holds the finished build before it is installed, so no timing is involved."""
    import threading

    with _open(str(tmp_path)) as bank:
        mems = [put(bank, "p", text, created=days_ago(i * 3.0), count=i % 4) for i, text in enumerate(_BANK_TEXTS)]
        similarity = {mems[2].id: 0.6, mems[7].id: 0.35, mems[9].id: 0.05}
        queries = ["boss coffee", "release report", "dog", "unknown words"]
        # The first query, in three modes, builds nothing.
        index = RecallIndex(bank.store, tuning=RecallTuning(cold_queries=3))
        built, release = threading.Event(), threading.Event()

        def hold(profile: str) -> None:
            built.set()
            assert release.wait(30)

        index.build_hook = hold
        before = _answers(bank, index, queries[:1], similarity)  # the cold path, no build yet
        assert not index.building("p") and not index.ready("p")
        before += _answers(bank, index, queries[1:], similarity)  # the first of these starts the build
        assert built.wait(30) and index.building("p") and not index.ready("p")
        # Built, not installed: still answered from the store, exactly, even after a change the
        # build's snapshot does not hold.
        assert _answers(bank, index, queries, similarity) == before
        extra = put(bank, "p", "The boss drinks coffee at the release party", created=days_ago(1.0))
        during = _answers(bank, index, queries, similarity)
        release.set()
        assert index.wait_built("p", 30)
        after = _answers(bank, index, queries, similarity)  # from the index, caught up with the change
        assert after == during and any(extra.id in {i for i, _ in a} for a in after)


def test_a_failed_background_build_is_made_by_the_next_query(tmp_path: Path) -> None:
    with _open(str(tmp_path)) as bank:
        for i, text in enumerate(_BANK_TEXTS):
            put(bank, "p", text, created=days_ago(float(i)))
        index = RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0))

        def fail(profile: str) -> None:
            raise OSError("simulated: the database could not be opened a second time")

        index.build_hook = fail
        first = _key(index.query("p", RankQuery("boss", limit=5, min_score=0.0, now=NOW)))  # cold; the build fails
        assert not index.wait_built("p", 30)
        index.build_hook = None
        assert _key(index.query("p", RankQuery("boss", limit=5, min_score=0.0, now=NOW))) == first  # built here
        assert index.ready("p") and not index.building("p")


def _bank_with_index(path: Path, **settings: Any) -> MemoryBank:
    """A bank whose recall index is in memory from its first query (a process that stays up)."""
    bank = MemoryBank(fresh_database(path), config=settings_config(**settings))
    index = bank._index()
    index.tuning = RecallTuning(cold_queries=0, background=False)
    return bank


def _hold_writes(path: Path) -> sqlite3.Connection:
    """Another process's write transaction: every writer of ``path`` waits for it."""
    blocker = sqlite3.connect(str(path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    return blocker


def test_a_queued_bump_ranks_the_next_query_at_once_and_the_bank_reads_it(tmp_path: Path) -> None:
    """A recall's bump reaches the database a moment later (the spec: MarkAccessed persists
    asynchronously), but the bank's next query ranks as if it were written, shows its memories
    as they will be written, and the bank's reads wait for it: the same answers as once it is
    written, and the full scan's over the written rows."""
    path = tmp_path / "m.db"
    with _bank_with_index(path) as bank:
        for i, text in enumerate(["deploy the server on Fridays", "the server release train", "coffee order",
                                  "deploy checklist for the release", "server room door code"]):
            put(bank, "p", text, created=days_ago(10 + i), count=i % 3)
        assert bank.query_with_relevance(RecallQuery("p", "server", now=NOW))  # the index is built
        blocker = _hold_writes(path)
        try:
            bumped = bank.recall(RecallQuery("p", "server release", now=NOW))  # returns with its bump queued
            assert bumped
            queued = bank.query_with_relevance(RecallQuery("p", "server deploy", now=NOW))
            queued_again = bank.query_with_relevance(RecallQuery("p", "server release", now=NOW))
            first = bumped[0].memory
            read: list[Memory] = []
            reader = threading.Thread(target=lambda: read.append(bank.get("p", first.id)))
            reader.start()
            reader.join(0.2)
            assert reader.is_alive() and not read  # the bank's own read waits for its queued bump
        finally:
            blocker.execute("COMMIT")
            blocker.close()
        reader.join(10)
        assert read and read[0].access_count == first.access_count + 1
        assert read[0].last_accessed_at == NOW
        bank.drain(10)
        for query, seen in (("server deploy", queued), ("server release", queued_again)):
            written = bank.query_with_relevance(RecallQuery("p", query, now=NOW))
            want = rank_brute_force(bank.store.iter_profile("p"), RankQuery(query, limit=8, min_score=0.05, now=NOW))
            assert _key(seen) == _key(written) == _key(want)
            assert [r.memory for r in seen] == [r.memory for r in written] == [r.memory for r in want]
            assert [r.breakdown for r in seen] == [r.breakdown for r in want]


def test_a_queued_bump_that_fails_leaves_the_index_as_the_rows_are(tmp_path: Path) -> None:
    """A bump the background writer could not write (the database stayed locked past the busy
    timeout) is taken back: the index is rebuilt from the rows at its next query, which then
    ranks as the full scan does."""
    path = tmp_path / "m.db"
    with _bank_with_index(path, store__busy_timeout_s=0.05) as bank:
        for i, text in enumerate(["deploy the server on Fridays", "the server release train",
                                  "server room door code"]):
            put(bank, "p", text, created=days_ago(10 + i))
        assert bank.query_with_relevance(RecallQuery("p", "server", now=NOW))
        blocker = _hold_writes(path)
        try:
            assert bank.recall(RecallQuery("p", "server", now=NOW))
            bank.drain(10)  # the writer gave up
        finally:
            blocker.execute("COMMIT")
            blocker.close()
        got = bank.query_with_relevance(RecallQuery("p", "server", now=NOW))
        want = rank_brute_force(bank.store.iter_profile("p"), RankQuery("server", limit=8, min_score=0.05, now=NOW))
        assert all(r.memory.access_count == 0 for r in want)
        assert _key(got) == _key(want)
        assert [r.breakdown for r in got] == [r.breakdown for r in want]


def test_the_warm_up_waits_for_a_pause_in_the_queries(tmp_path: Path) -> None:
    """What a process that stays up may soon need (the bank's credential detectors) is loaded
    on a thread of its own after the background build, never while a query runs and only after a
    pause in the queries:
    a thread importing modules holds the GIL for tens of ms, which a query would wait for.

    The pause is 0.25 s here, not the bank's 0.05 s: the test must take the index's lock after
    its second query before a pause has passed, and under load (10 on 2 cores) the thread was
    once descheduled for longer than 0.05 s, so the warm-up rightly ran first."""
    pause = 0.25
    path = tmp_path / "m.db"
    with MemoryBank(fresh_database(path), config=Config.load(environ={})) as bank:
        for i in range(30):
            put(bank, "p", f"server {i} deploy notes", created=days_ago(i))
        seen: list[tuple[str, float]] = []
        done = threading.Event()

        def warm() -> None:
            seen.append((threading.current_thread().name, time.monotonic()))
            done.set()

        index = RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0, warm_idle_s=pause), warm=warm)
        try:
            index.query("p", RankQuery("server", limit=8, min_score=0.05, now=NOW))  # starts the build
            assert index.wait_built("p", 10)
            index.query("p", RankQuery("server deploy", limit=8, min_score=0.05, now=NOW))
            with index._lock:  # a query in flight (as a long one holds it), however long: no warm-up
                assert not done.wait(2 * pause)
            assert not seen
            assert done.wait(10)
            (name, at), = seen
            assert name == "memlocal-warm" and at - index._last_query >= pause
        finally:
            index.close()


def test_every_ranking_path_takes_one_rank_query_and_no_connection() -> None:
    """``RankQuery`` is the argument of the index's and the cold path's rankings (no
    loose limit, clock, tier, ratio ... beside it), and the recall service hands no SQLite
    connection around: the store's reads own it."""
    import inspect

    import memlocal.recall.service as service
    from memlocal.recall import ProfileIndex, cold_query

    for fn in (ProfileIndex.top_k, ProfileIndex.top_k_gated, cold_query):
        params = inspect.signature(fn).parameters
        assert len(params) <= 4, (fn.__qualname__, list(params))
        assert "rq" in params, fn.__qualname__
    assert "sqlite3" not in Path(service.__file__).read_text(encoding="utf-8")
