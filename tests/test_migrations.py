"""The one migration mechanism (memlocal/store/migrations.py): named sets, their stamps, and the
files stamped by the single chain that came before them (docs/storage.md, "Migrations")."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memlocal.errors import StoreError
from memlocal.store import MIGRATIONS, MigrationSet, Store
from memlocal.store.migrations import versions
from memlocal.store.schemas import CORE_SETS


def _create_breaker(db: object) -> None:
    db.execute("CREATE TABLE breaker (host TEXT PRIMARY KEY, open_until_us INTEGER NOT NULL)")  # type: ignore[attr-defined]


def _add_reason(db: object) -> None:
    db.execute("ALTER TABLE breaker ADD COLUMN reason TEXT")  # type: ignore[attr-defined]


def test_a_new_set_is_created_stamped_and_then_left_alone(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    try:
        first = MigrationSet("breaker", {1: _create_breaker})
        store.migrate(first)
        store.migrate(first)  # current: nothing runs again
        assert store.meta_get("schema.breaker") == "1"
        store.migrate(MigrationSet("breaker", {1: _create_breaker, 2: _add_reason}))  # a later release
        assert store.meta_get("schema.breaker") == "2"
        assert [r[1] for r in store.read("PRAGMA table_info(breaker)")] == ["host", "open_until_us", "reason"]
        with pytest.raises(StoreError, match="schema breaker version 2 is newer than this memlocal"):
            store.migrate(first)  # an older release meets the newer table
    finally:
        store.close()


def test_a_release_s_steps_apply_all_or_none(tmp_path: Path) -> None:
    """Every pending step runs in one transaction (a fresh file pays one commit, not one per
    step): a step that fails leaves the database as it was, its set's earlier steps included."""
    def fails(db: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    store = Store(tmp_path / "m.db")
    try:
        with pytest.raises(StoreError):
            store.migrate(MigrationSet("breaker", {1: _create_breaker, 2: _add_reason, 3: fails}))
        assert store.meta_get("schema.breaker") is None
        assert store.read("SELECT name FROM sqlite_master WHERE name = 'breaker'") == []
        store.migrate(MigrationSet("breaker", {1: _create_breaker, 2: _add_reason}))
        assert store.meta_get("schema.breaker") == "2"
    finally:
        store.close()


def test_a_file_of_the_old_chain_reads_every_set_as_current(tmp_path: Path) -> None:
    """Files stamped ``user_version = 9`` before named sets have no set stamps: each set counts its
    old steps as applied, and opening such a file stamps only the sets with steps added since."""
    path = tmp_path / "old.db"
    newer = {s.key for s in CORE_SETS if s.version > len(s.legacy)}
    for _ in range(2):
        Store(path).close()
        conn = sqlite3.connect(path)
        assert {k for (k,) in conn.execute("SELECT key FROM meta WHERE key LIKE 'schema.%'")} == newer
        assert conn.execute("PRAGMA user_version").fetchone() == (9,)
        assert versions(conn, CORE_SETS) == {s.name: s.version for s in CORE_SETS}
        conn.close()


def test_the_old_chain_is_every_set_s_old_steps_in_order() -> None:
    assert sorted(MIGRATIONS) == list(range(1, 10))
    assert {s.name for s in CORE_SETS if s.legacy} == {"memories", "recall", "semantic", "audit", "automation"}


def test_a_step_must_not_leave_a_gap() -> None:
    with pytest.raises(ValueError, match="without gaps"):
        MigrationSet("bad", {1: _create_breaker, 3: _add_reason})


def test_a_file_of_the_previous_release_takes_the_leaner_save_schema(tmp_path: Path) -> None:
    """The steps that cut a save's writes (the change log without a rowid, one insert trigger)
    upgrade a file with memories and queued changes in it, keeping both."""
    from memlocal.store.database import Database

    path = tmp_path / "prev.db"
    old = Database(path)
    shipped = {"memories": 4, "recall": 3}  # the sets' versions in the release before these steps
    for s in CORE_SETS:
        old.migrate(MigrationSet(s.name, {n: s.steps[n] for n in range(1, shipped.get(s.name, s.version) + 1)}))
    old.conn.execute("PRAGMA user_version = 9")  # as every file made since named sets
    with old.transaction() as c:
        c.execute("INSERT INTO memories (id, profile, raw_input, processed_content, summary, category, source,"
                  " confidence, created_us, access_count, staleness, is_active, version, extra)"
                  " VALUES ('mem-00000001', 'p', 'x', 'Uses tabs', 'Uses tabs', 'general', 'explicit', 1.0,"
                  " 1, 2, 0.0, 1, 1, '{}')")
        c.execute("INSERT INTO sync_outbox (id, profile, op, queued_us) VALUES ('mem-00000001', 'p', 'put', 5),"
                  " ('mem-00000002', 'p', 'delete', 6)")
    old.close()
    store = Store(path)
    try:
        assert store.meta_get("schema.memories") == "5"
        assert store.meta_get("schema.recall") == str({s.name: s.version for s in CORE_SETS}["recall"])
        assert store.read("SELECT id, profile, op, queued_us FROM sync_outbox ORDER BY id") == [
            ("mem-00000001", "p", "put", 5), ("mem-00000002", "p", "delete", 6)]
        assert "WITHOUT ROWID" in store.read("SELECT sql FROM sqlite_master WHERE name = 'sync_outbox'")[0][0]
        triggers = {r[0] for r in store.read("SELECT name FROM sqlite_master WHERE type = 'trigger'"
                                             " AND tbl_name = 'memories' AND name LIKE '%_ai'")}
        assert "memories_counts_ai" not in triggers and "memories_rev_ai" in triggers
        store.insert(store.get("p", "mem-00000001").with_changes(id="mem-00000003", access_count=1))
        assert store.read("SELECT id, rev FROM memories ORDER BY rowid") == [("mem-00000001", 1), ("mem-00000003", 2)]
        assert store.read("SELECT rev, active, accesses FROM profile_revs") == [(2, 2, 3)]
        assert len(store.read("SELECT * FROM sync_outbox")) == 3
    finally:
        store.close()



def test_a_file_indexed_memory_by_memory_takes_the_batched_fts_index(tmp_path: Path) -> None:
    """The steps that cut a save's pages upgrade a file of the release before them: its memories,
    indexed one by one, stay indexed and found, nothing waits; a new save then waits for its
    batch, a memory of before can still be deleted, and the walk's orders are the partial ones."""
    from memlocal.relevance.features import scope_token, term_token
    from memlocal.store.database import Database
    from memlocal.store.memories import insert_rows, write_row
    from memory_factory import memory

    path = tmp_path / "prev.db"
    old = Database(path)
    shipped = {"recall": 6}  # the set's version in the release before the steps
    for s in CORE_SETS:
        old.migrate(MigrationSet(s.name, {n: s.steps[n] for n in range(1, shipped.get(s.name, s.version) + 1)}))
    old.conn.execute("PRAGMA user_version = 9")  # as every file made since named sets
    olds = [memory("p", f"Team {w} owns the {w} service") for w in ("alpha", "bravo", "charlie")]
    with old.transaction() as c:
        insert_rows(c, [write_row(m) for m in olds])  # indexed by the old insert trigger
    old.close()
    store = Store(path)
    try:
        assert store.meta_get("schema.recall") == str({s.name: s.version for s in CORE_SETS}["recall"])

        def found(word: str) -> set[str]:
            return {r[0] for r in store.read(
                "SELECT m.id FROM memory_features f JOIN memories m ON m.rowid = f.rowid WHERE memory_features"
                " MATCH ?", (f"{scope_token('p')} AND {term_token(word)}",))}

        assert store.read("SELECT count(*) FROM memory_features_pending") == [(0,)]
        assert found("bravo") == {olds[1].id}
        # The walk's two orders now index only the memories a recall returned (step 8).
        indexes = {r[0] for r in store.read("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"memories_profile_anchor_accessed", "memories_profile_used"} <= indexes
        assert not {"memories_profile_anchor", "memories_profile_count"} & indexes
        new = memory("p", "Team delta owns the bravo service")
        store.insert(new)
        assert store.read("SELECT m.id FROM memory_features_pending p JOIN memories m ON m.rowid = p.rowid") == [
            (new.id,)]
        store.delete("p", olds[1].id)
        assert found("bravo") == set()
        store.index_pending()
        assert found("bravo") == {new.id} and found("alpha") == {olds[0].id}
        assert store.read("SELECT count(*) FROM memory_features_pending") == [(0,)]
    finally:
        store.close()


def test_a_file_with_memories_waiting_in_the_old_table_takes_the_watermark(tmp_path: Path) -> None:
    """Recall steps 9 and 10 (the insert's bookkeeping as one upsert, the FTS5 waiting set as a
    watermark) upgrade a file whose memories wait in ``memory_features_pending``: they are
    indexed, the watermark starts at the newest row, the table becomes a view of the rows above
    it, and the counters and revs go on from where they were."""
    from memlocal.relevance.features import scope_token
    from memlocal.store.database import Database
    from memlocal.store.memories import insert_rows, write_row
    from memory_factory import memory

    path = tmp_path / "prev.db"
    old = Database(path)
    shipped = {"recall": 8}  # the set's version in the release before the steps
    for s in CORE_SETS:
        old.migrate(MigrationSet(s.name, {n: s.steps[n] for n in range(1, shipped.get(s.name, s.version) + 1)}))
    old.conn.execute("PRAGMA user_version = 9")
    olds = [memory("p", f"Team {w} owns the {w} service", count=1) for w in ("alpha", "bravo", "charlie")]
    with old.transaction() as c:
        insert_rows(c, [write_row(m) for m in olds])
    assert old.conn.execute("SELECT count(*) FROM memory_features_pending").fetchone() == (3,)
    old.close()
    store = Store(path)
    try:
        assert store.meta_get("schema.recall") == "10"
        kinds = dict(store.read("SELECT name, type FROM sqlite_master WHERE name LIKE 'memory_features_%'"))
        assert kinds["memory_features_pending"] == "view" and kinds["memory_features_indexed"] == "table"
        assert store.read("SELECT upto FROM memory_features_indexed") == [(3,)]
        assert store.read("SELECT count(*) FROM memory_features_pending") == [(0,)]
        assert {r[0] for r in store.read("SELECT m.id FROM memory_features f JOIN memories m ON m.rowid = f.rowid"
                                         " WHERE memory_features MATCH ?", (scope_token("p"),))} == {
            m.id for m in olds}
        new = memory("p", "Team delta owns the bravo service")
        store.insert(new)
        assert store.read("SELECT m.id FROM memory_features_pending p JOIN memories m ON m.rowid = p.rowid") == [
            (new.id,)]
        assert store.read("SELECT rev, active, accesses FROM profile_revs") == [(4, 4, 3)]
        assert store.read("SELECT rev FROM memories WHERE id = ?", (new.id,)) == [(4,)]
    finally:
        store.close()


def test_a_library_owner_reaches_only_its_own_tables(tmp_path: Path) -> None:
    """One table mechanism: the audit trail and the semantic vectors run their statements through
    ``Database.own_tables(<their set>)``, a handle SQLite limits to the tables their migration set
    names (and, read-only, the store tables it declares it reads), as the sync's handle is; a
    statement prepared earlier without the limit is prepared again under it."""
    from memlocal.store.schemas import AUDIT, SEMANTIC

    store = Store(tmp_path / "m.db")
    denied = "not authorized|prohibited"
    try:
        assert store.read("SELECT count(*) FROM memories") == [(0,)]  # prepared without a limit
        with store.own_tables(AUDIT) as t:
            assert t.execute("SELECT count(*) FROM injections") == [(0,)]
            for sql in ("SELECT count(*) FROM memories", "SELECT count(*) FROM memory_vectors",
                        "DELETE FROM injections"):
                with pytest.raises(sqlite3.DatabaseError, match=denied):
                    t.execute(sql)
        with pytest.raises(RuntimeError, match="only inside"):
            t.execute("SELECT count(*) FROM injections")
        with store.own_tables(SEMANTIC, write=True) as t:
            assert t.execute("SELECT count(*) FROM memories") == [(0,)]  # declared in ``reads``
            t.execute("DELETE FROM memory_vectors")
            for sql in ("DELETE FROM memories", "UPDATE profile_revs SET rev = 0", "SELECT key FROM meta",
                        "INSERT INTO injections (at_us, profile, query_hash, chars) VALUES (1, 'p', '', 0)"):
                with pytest.raises(sqlite3.DatabaseError, match=denied):
                    t.execute(sql)
            store.meta_set("still", "free")  # the store's own statement, in the same transaction
        assert store.meta_get("still") == "free"
    finally:
        store.close()


def test_the_audit_and_the_semantic_index_use_only_their_handle() -> None:
    """No statement of ``memlocal.services.audit`` or ``memlocal.recall.semantic`` runs on the store's connection
    or its ``read``: each goes through ``own_tables`` (the test above says what that reaches)."""
    import re

    import memlocal.services.audit
    import memlocal.recall.semantic

    for module in (memlocal.services.audit, memlocal.recall.semantic):
        source = Path(str(module.__file__)).read_text()
        assert re.findall(r"store\.(?:read|transaction|snapshot|conn|iter_rows)\b", source) == [], module.__name__
        assert "own_tables(" in source


def test_a_statement_checked_under_one_limit_serves_no_other(tmp_path: Path) -> None:
    """The guard is set once per connection and the statement cache is keyed by the SQL text: on
    one connection (the writer's, in one transaction), the same text prepared for the store, for
    one owner and for another is checked for each, in any order."""
    from memlocal.store.schemas import AUDIT, SEMANTIC

    store = Store(tmp_path / "m.db")
    vectors = "SELECT count(*) FROM memory_vectors"
    try:
        with store.transaction() as conn:
            assert conn.execute(vectors).fetchall() == [(0,)]  # the store's own, free
            with store.own_tables(SEMANTIC, write=True) as semantic:
                assert semantic.execute(vectors) == [(0,)]
            with store.own_tables(AUDIT, write=True) as audit:
                with pytest.raises(sqlite3.DatabaseError, match="not authorized|prohibited"):
                    audit.execute(vectors)
            with store.own_tables(SEMANTIC, write=True) as semantic:
                assert semantic.execute(vectors) == [(0,)]
            assert conn.execute(vectors).fetchall() == [(0,)]
            assert conn.execute("SELECT count(*) FROM meta").fetchall()[0][0] > 0  # the store stays free
    finally:
        store.close()
