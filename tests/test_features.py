"""The persisted recall index: features stored with each memory, the FTS5 table the triggers keep
from them, the per-profile counters, the migration that back-fills them and the version stamp."""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from memlocal import MemoryBank, RecallQuery, SaveRequest
from memlocal.config import Config
from memlocal.store.database import import_sqlite_utils
from memlocal.relevance.features import (
    FEATURES_META_KEY, cluster_token, encode_term, features_of, fingerprint, parse, scope_token, term_token,
)
from memlocal.relevance.scoring import RankQuery, memory_terms, rank_brute_force
from memlocal.relevance.clusters import clusters_of
from memlocal.store import MIGRATIONS, Store
from memlocal.store.schemas.recall import INDEX_PENDING_SQL
from memory_factory import NOW, put
import support
from support import fresh_database


def _open(path: Path) -> MemoryBank:
    return MemoryBank(path, config=Config.load(environ={}))


def _fts_ids(store: Store, match: str) -> set[str]:
    """The ids the recall index finds for ``match``: FTS5's, the memories waiting for their batch
    included as their batch will index them (in a transaction rolled back: nothing changes)."""
    c = store.conn
    c.execute("BEGIN IMMEDIATE")
    try:
        for sql in INDEX_PENDING_SQL:
            c.execute(sql)
        rows = c.execute("SELECT m.id FROM memory_features f JOIN memories m ON m.rowid = f.rowid"
                         " WHERE memory_features MATCH ?", (match,)).fetchall()
    finally:
        c.execute("ROLLBACK")
    return {r[0] for r in rows}


def _assert_consistent(store: Store) -> None:
    """FTS5 documents, stored features and counters agree with the memories themselves."""
    rows = store.read("SELECT id, profile, processed_content, summary, features, is_active, access_count"
                      " FROM memories")
    for mid, profile, content, summary, feats, active, _ in rows:
        if feats is not None:
            assert feats == features_of(content, summary)
    # A memory waits for its FTS5 batch only while active with features, and is never also indexed.
    assert store.read("SELECT count(*) FROM memory_features_pending p LEFT JOIN memories m ON m.rowid = p.rowid"
                      " WHERE m.rowid IS NULL OR m.is_active = 0 OR m.features IS NULL"
                      " OR p.rowid IN (SELECT rowid FROM memory_features_docs)") == [(0,)]
    profiles = {r[1] for r in rows}
    for profile in profiles:
        indexed = {r[0] for r in rows if r[1] == profile and r[5] == 1 and r[4] is not None}
        assert _fts_ids(store, scope_token(profile)) == indexed
        active = [r for r in rows if r[1] == profile and r[5] == 1]
        counts = store.read("SELECT active, accesses FROM profile_revs WHERE profile = ?", (profile,))
        assert counts == [(len(active), sum(r[6] for r in active))]


def test_features_round_trip_unicode_and_odd_terms() -> None:
    text = "Caroline's café in Zürich: naïve O'Brien ordered sushi and ramen"
    feats = features_of(text, text[:50])
    terms, clusters = parse(feats)
    assert terms == memory_terms(text, text[:50])
    assert clusters == clusters_of(terms)
    assert "@food" in feats.split()
    # A term the FTS5 tokenizer would split is stored encoded, and decodes back.
    assert encode_term("a-b") != "a-b" and parse(encode_term("a-b")) == (frozenset({"a-b"}), frozenset())
    assert encode_term("zürich") == "zürich"


def test_saves_store_features_and_fts_finds_them(tmp_path: Path) -> None:
    with _open(tmp_path / "m.db") as bank:
        a = bank.save(SaveRequest("dev", content="The user is allergic to shellfish")).memory
        b = bank.save(SaveRequest("dev", content="Deploys go out on Fridays from the release branch")).memory
        c = bank.save(SaveRequest("Dev", content="Shellfish allergy noted for the other profile")).memory  # case differs
        store = bank.store
        assert _fts_ids(store, f"{scope_token('dev')} AND {term_token('shellfish')}") == {a.id}
        assert _fts_ids(store, f"{scope_token('Dev')} AND {term_token('shellfish')}") == {c.id}
        assert _fts_ids(store, f"{scope_token('dev')} AND {cluster_token('tech')}") == {b.id}
        _assert_consistent(store)
        bank.delete("dev", a.id)
        store.mark_accessed("dev", [b.id], NOW)
        _assert_consistent(store)


def test_writers_that_skip_features_are_caught_and_derived(tmp_path: Path) -> None:
    with _open(tmp_path / "m.db") as bank:
        m = put(bank, "p", "Prefers pytest over unittest")
        with bank.store.transaction() as c:
            # Another writer (the sqlite3 shell, the sync's raw UPDATE) changes the text only...
            c.execute("UPDATE memories SET processed_content = 'Lives in Lisbon' WHERE id = ?", (m.id,))
            # ...or inserts a row without features.
            c.execute("INSERT INTO memories (id, profile, raw_input, processed_content, summary, category, source,"
                      " confidence, created_us, access_count, staleness, is_active, version, extra)"
                      " VALUES ('mem-0000beef', 'p', 'x', 'Uses tabs', 'Uses tabs', 'general', 'explicit', 1.0,"
                      " 1, 0, 0.0, 1, 1, '{}')")
        stale = bank.store.read("SELECT id FROM memories WHERE features IS NULL ORDER BY id")
        assert stale == [("mem-0000beef",), (m.id,)]
        _assert_consistent(bank.store)  # the stale rows are out of the FTS5 table, not wrong in it
        # Recall ranks them exactly (tokenised on the spot) and stores their features.
        want = rank_brute_force(bank.store.iter_profile("p"), RankQuery("Lisbon tabs", 8, 0.0, now=NOW))
        got = bank.query_with_relevance(RecallQuery("p", "Lisbon tabs", min_score=0.0, now=NOW))
        assert [(r.memory.id, r.score) for r in got] == [(r.memory.id, r.score) for r in want]
        assert {r.memory.id for r in got} == {m.id, "mem-0000beef"}
        assert bank.store.read("SELECT count(*) FROM memories WHERE features IS NULL") == [(0,)]
        assert bank.store.derive_stale_features("p") == 0
        _assert_consistent(bank.store)
        # An upsert that leaves the text alone keeps the features (no needless re-derivation).
        put(bank, "p", "Lives in Lisbon", memory_id=m.id)
        assert bank.store.read("SELECT count(*) FROM memories WHERE features IS NULL") == [(0,)]


def test_migration_back_fills_an_existing_database(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(str(path), isolation_level=None)
    # As the store imports it (without numpy): at module level every worker paid for numpy.
    db = import_sqlite_utils().Database(conn)
    for version in (1, 2, 3):  # a database as the previous release left it
        MIGRATIONS[version](db)
    conn.execute("PRAGMA user_version = 3")
    for i, (profile, text, active, count) in enumerate([("a", "Allergic to peanuts", 1, 3),
                                                        ("a", "Flies to Lisbon in May", 1, 0),
                                                        ("a", "Old inactive note on diet", 0, 5),
                                                        ("b", "Deploys on Friday", 1, 2)]):
        conn.execute("INSERT INTO memories (id, profile, raw_input, processed_content, summary, category, source,"
                     " confidence, created_us, access_count, staleness, is_active, version, extra)"
                     " VALUES (?, ?, ?, ?, ?, 'general', 'explicit', 1.0, ?, ?, 0.0, ?, 1, '{}')",
                     (f"mem-0000000{i}", profile, text, text, text, i, count, active))
    conn.close()
    store = Store(path)
    try:
        assert store.read("PRAGMA user_version")[0][0] == max(MIGRATIONS)
        assert store.read("SELECT count(*) FROM memories WHERE features IS NULL") == [(0,)]
        assert store.meta_get(FEATURES_META_KEY) == fingerprint()
        _assert_consistent(store)
        assert store.read("SELECT profile, active, accesses FROM profile_revs ORDER BY profile") == [
            ("a", 2, 3), ("b", 1, 2)]
        assert _fts_ids(store, f"{scope_token('a')} AND {cluster_token('food')}") == {"mem-00000000"}
    finally:
        store.close()


def test_a_tokenizer_change_re_derives_every_memory_on_open(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with _open(path) as bank:
        m = bank.save(SaveRequest("p", content="Prefers pytest over unittest")).memory
        with bank.store.transaction() as c:
            # As an older tokenizer would have left them: other tokens, another stamp.
            c.execute("UPDATE memories SET features = 'pytestold @nothing' WHERE id = ?", (m.id,))
            c.execute("UPDATE meta SET value = 'an-older-tokenizer' WHERE key = ?", (FEATURES_META_KEY,))
    with _open(path) as bank:
        assert bank.store.meta_get(FEATURES_META_KEY) == fingerprint()
        _assert_consistent(bank.store)
        assert not _fts_ids(bank.store, '"pytestold"')
        assert [r.memory.id for r in bank.query_with_relevance(RecallQuery("p", "pytest"))] == [m.id]


def test_a_tokenizer_change_re_derives_the_near_duplicate_keys_on_open(tmp_path: Path) -> None:
    """The near-duplicate key (migration 9) is made of the same terms as the features: a stale
    one would let a reworded duplicate saved after an upgrade slip past the check."""
    from memlocal.hygiene.rules import near_key

    path = tmp_path / "m.db"
    text = "Ana prefers dark mode in every editor she uses"
    with _open(path) as bank:
        m = bank.save(SaveRequest("p", content=text)).memory
        with bank.store.transaction() as c:
            c.execute("UPDATE memories SET near_key = 'from-an-older-tokenizer' WHERE id = ?", (m.id,))
            c.execute("UPDATE meta SET value = 'an-older-tokenizer' WHERE key = ?", (FEATURES_META_KEY,))
    with _open(path) as bank:
        assert bank.store.read("SELECT near_key FROM memories WHERE id = ?", (m.id,)) == [(near_key(text),)]
        again = bank.save(SaveRequest("p", content="Ana prefers the dark mode in every editors she used"))
        assert again.deduplicated and again.memory.id == m.id


def test_the_fingerprint_is_the_same_in_every_process() -> None:
    code = "from memlocal.relevance.features import fingerprint; print(fingerprint())"
    runs = {support.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
            for _ in range(2)}
    assert runs == {fingerprint()}


_write = st.tuples(
    st.integers(0, 3),  # which memory
    st.sampled_from(["p", "q"]),  # profile
    st.sampled_from(["Allergic to peanuts", "Flies to Lisbon", "Allergic to peanuts!", "Deploys on Friday"]),
    st.booleans(),  # active
    st.sampled_from(["upsert", "raw-text", "raw-active", "raw-profile", "delete", "derive"]),
)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(_write, min_size=1, max_size=14))
def test_the_fts_table_stays_consistent_under_any_writes(steps: list[tuple[int, str, str, bool, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, _open(fresh_database(Path(tmp) / "m.db")) as bank:
        store = bank.store
        for i, profile, text, active, kind in steps:
            mid = f"mem-0000000{i}"
            exists = bool(store.read("SELECT 1 FROM memories WHERE id = ?", (mid,)))
            if kind == "upsert" or not exists:
                put(bank, profile, text, active=active, memory_id=mid)
            elif kind == "delete":
                with store.transaction() as c:
                    c.execute("DELETE FROM memories WHERE id = ?", (mid,))
            elif kind == "derive":
                store.derive_stale_features(profile)
            else:
                column, value = {"raw-text": ("processed_content", text), "raw-active": ("is_active", int(active)),
                                 "raw-profile": ("profile", profile)}[kind]
                with store.transaction() as c:
                    c.execute(f"UPDATE memories SET {column} = ? WHERE id = ?", (value, mid))
            with store.transaction() as c:
                c.execute("INSERT INTO memory_features (memory_features) VALUES ('integrity-check')")
            assert store.integrity_check() == "ok"
            _assert_consistent(store)


def test_every_writer_leaves_each_row_with_the_rev_of_its_insert(tmp_path: Path) -> None:
    """The store inserts the rev a row will have, so the insert trigger need not write the row
    again; a writer that does not (the sqlite3 shell, the sync's pulled rows) gets it from the
    trigger. Either way each row holds its profile's rev after its insert, and the counters agree."""
    from memlocal.bank.portability import import_jsonl
    from memory_factory import memory

    with _open(fresh_database(tmp_path / "m.db")) as bank:
        bank.save(SaveRequest("p", content="Prefers pytest over unittest"))  # Store.insert
        lines = [memory(profile, text, count=n).to_dict() for profile, text, n in
                 [("p", "Flies to Lisbon in May", 2), ("q", "Deploys on Friday", 0), ("p", "Allergic to peanuts", 1)]]
        assert import_jsonl(bank, [json.dumps(d) for d in lines]).imported == 3  # multi-row inserts
        with bank.store.transaction() as c:
            c.execute("INSERT INTO memories (id, profile, raw_input, processed_content, summary, category, source,"
                      " confidence, created_us, access_count, staleness, is_active, version, extra)"
                      " VALUES ('mem-0000beef', 'q', 'x', 'Uses tabs', 'Uses tabs', 'general', 'explicit', 1.0,"
                      " 1, 4, 0.0, 1, 1, '{}')")
            c.execute("INSERT INTO memories (id, profile, raw_input, processed_content, summary, category, source,"
                      " confidence, created_us, access_count, staleness, is_active, version, extra, rev)"
                      " VALUES ('mem-0000bee5', 'p', 'x', 'Uses vim', 'Uses vim', 'general', 'explicit', 1.0,"
                      " 1, 0, 0.0, 0, 1, '{}', 99)")  # a wrong rev, inactive
        rows = bank.store.read("SELECT profile, rev FROM memories ORDER BY rowid")
        assert rows == [("p", 1), ("p", 2), ("q", 1), ("p", 3), ("q", 2), ("p", 4)]
        assert bank.store.read("SELECT profile, rev FROM profile_revs ORDER BY profile") == [("p", 4), ("q", 2)]
        _assert_consistent(bank.store)


def test_an_access_bump_sets_one_rev_and_every_writer_keeps_revs_and_counts(tmp_path: Path) -> None:
    """A recall's bump sets one new rev on all its rows (no second write of a row, no rev bumped
    per memory) and the triggers keep the profile's sum of access counts; a writer
    that updates rows by hand still gets a new rev and right counts from the triggers."""
    with _open(fresh_database(tmp_path / "m.db")) as bank:
        ids = [bank.save(SaveRequest("p", content=text)).memory.id for text in
               ("Prefers pytest over unittest", "Flies to Lisbon in May", "Allergic to peanuts")]
        bank.save(SaveRequest("q", content="Deploys on Friday"))
        (before,) = bank.store.read("SELECT rev FROM profile_revs WHERE profile = 'p'")[0]
        assert bank.store.mark_accessed("p", ids[:2], NOW) == 2
        # One rev for the bump: a trigger bumping the profile's rev per memory would have left
        # before + 2 and before + 3.
        revs = dict(bank.store.read("SELECT id, rev FROM memories WHERE profile = 'p'"))
        assert revs[ids[0]] == revs[ids[1]] == before + 1 and revs[ids[2]] < before + 1
        assert bank.store.read("SELECT rev FROM profile_revs WHERE profile = 'p'") == [(before + 1,)]
        _assert_consistent(bank.store)
        with bank.store.transaction() as c:  # the sqlite3 shell: no rev of its own
            c.execute("UPDATE memories SET access_count = access_count + 5 WHERE id = ?", (ids[2],))
            c.execute("UPDATE memories SET is_active = 0, access_count = 9 WHERE id = ?", (ids[0],))
            c.execute("UPDATE memories SET profile = 'q' WHERE id = ?", (ids[1],))
        revs = dict(bank.store.read("SELECT id, rev FROM memories"))
        assert revs[ids[2]] == before + 2 and revs[ids[0]] == before + 3
        assert revs[ids[1]] == bank.store.read("SELECT rev FROM profile_revs WHERE profile = 'q'")[0][0]
        _assert_consistent(bank.store)


def test_no_memory_is_left_behind_the_fts_watermark(tmp_path: Path) -> None:
    """The FTS5 batch's waiting set is the rows above a watermark (recall schema step 10). A row
    inserted at or below it (the newest rows deleted after a batch, so their rowids are used
    again; a rowid given by hand) is indexed at once, never left waiting where no batch looks;
    and a writer that inserts with ``INSERT OR REPLACE`` keeps the profile's counters."""
    from memlocal.store.schemas.recall import FTS_BATCH

    def waiting(store: Store) -> int:
        return int(store.read("SELECT count(*) FROM memory_features_pending")[0][0])

    with _open(fresh_database(tmp_path / "m.db")) as bank:
        store = bank.store
        mems = [bank.save(SaveRequest("p", content=f"The kappa{i}x service runs the billing jobs", category="fact")).memory
                for i in range(FTS_BATCH)]
        assert waiting(store) == 0 and store.read("SELECT upto FROM memory_features_indexed") == [(FTS_BATCH,)]
        for m in mems[-3:]:
            bank.delete("p", m.id)
        again = [bank.save(SaveRequest("p", content=f"The lambda{i}x service runs the mail jobs", category="fact")).memory
                 for i in range(4)]
        rowids = [store.read("SELECT rowid FROM memories WHERE id = ?", (m.id,))[0][0] for m in again]
        assert rowids == [FTS_BATCH - 2, FTS_BATCH - 1, FTS_BATCH, FTS_BATCH + 1]  # three reused
        assert waiting(store) == 1  # the three at or below the watermark are indexed already
        assert store.read("SELECT m.id FROM memory_features f JOIN memories m ON m.rowid = f.rowid"
                          " WHERE memory_features MATCH ?", (term_token("lambda0x"),)) == [(again[0].id,)]
        _assert_consistent(store)
        bank.delete("p", mems[2].id)  # rowid 3
        with store.transaction() as c:  # the sqlite3 shell: a rowid of its choosing, a REPLACE
            c.execute("INSERT INTO memories (rowid, id, profile, raw_input, processed_content, summary, category,"
                      " source, confidence, created_us, access_count, staleness, is_active, version, extra, features)"
                      " VALUES (3, 'mem-0000beef', 'p', 'x', 'Uses tabs', 'Uses tabs', 'general', 'explicit', 1.0,"
                      " 1, 2, 0.0, 1, 1, '{}', ?)", (features_of("Uses tabs", "Uses tabs"),))
        # Indexed at once, with the one that waited above the watermark.
        assert waiting(store) == 0 and store.read("SELECT count(*) FROM memory_features_docs WHERE rowid = 3") == [(1,)]
        with store.transaction() as c:
            c.execute("INSERT OR REPLACE INTO memories (id, profile, raw_input, processed_content, summary, category,"
                      " source, confidence, created_us, access_count, staleness, is_active, version, extra)"
                      " VALUES ('mem-0000bee5', 'p', 'x', 'Uses vim', 'Uses vim', 'general', 'explicit', 1.0,"
                      " 1, 4, 0.0, 1, 1, '{}')")
        _assert_consistent(store)


def test_new_memories_wait_for_their_fts_batch_and_every_query_sees_them(tmp_path: Path) -> None:
    """A save puts its memory in the FTS5 index's waiting set (recall schema step 7); the insert
    that fills a batch indexes the batch in one statement. A query answered from SQLite (a fresh
    process's first) ranks waiting memories as the full scan does, the LLM's similar memories see
    them, and a deleted or retired one leaves the set."""
    from memlocal.recall import RecallIndex, RecallTuning
    from memlocal.relevance.scoring import FullScan
    from memlocal.store.schemas.recall import FTS_BATCH

    def counts(store: Store) -> tuple[int, int]:
        return (store.read("SELECT count(*) FROM memory_features_pending")[0][0],
                store.read("SELECT count(*) FROM memory_features_docs")[0][0])

    def assert_cold_is_exact(store: Store, query: str) -> list[str]:
        rq = RankQuery(query, 5, 0.0, (), NOW)
        got = RecallIndex(store, tuning=RecallTuning(cold_queries=10**9, background=False)).query("p", rq)
        want = FullScan(store.iter_profile("p")).rank(rq)
        assert [(r.memory.id, r.score) for r in got] == [(r.memory.id, r.score) for r in want]
        return [r.memory.id for r in got]

    words = [f"kappa{chr(97 + i // 26)}{chr(97 + i % 26)}x" for i in range(FTS_BATCH + 3)]
    with _open(tmp_path / "m.db") as bank:
        store = bank.store
        mems = [bank.save(SaveRequest("p", content=f"The {w} service runs the billing jobs", category="fact")).memory
                for w in words[:FTS_BATCH - 1]]
        assert counts(store) == (FTS_BATCH - 1, 0)
        assert assert_cold_is_exact(store, words[3]) == [mems[3].id]
        assert len(assert_cold_is_exact(store, "billing jobs")) == 5
        _assert_consistent(store)
        mems.append(bank.save(SaveRequest("p", content=f"The {words[FTS_BATCH - 1]} service", category="fact")).memory)
        assert counts(store) == (0, FTS_BATCH)  # the batch is indexed, by the save that filled it
        assert assert_cold_is_exact(store, words[3]) == [mems[3].id]
        late = [bank.save(SaveRequest("p", content=f"The {w} service runs the mail jobs", category="fact")).memory
                for w in words[FTS_BATCH:]]
        assert counts(store) == (3, FTS_BATCH)
        assert assert_cold_is_exact(store, words[FTS_BATCH]) == [late[0].id]
        bank.delete("p", late[0].id)
        bank.save(SaveRequest("p", content="The kappa service moved to the new cluster", category="fact", supersedes=late[1].id))
        # The deleted and the retired left the set; the successor waits in it like any save.
        assert counts(store) == (2, FTS_BATCH)
        assert [m.id for m in store.similar("p", ["mail"], 5)] == [late[2].id]  # indexes what waits first
        assert counts(store) == (0, FTS_BATCH + 2)
        _assert_consistent(store)
