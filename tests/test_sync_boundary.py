"""The store–sync boundary is one-way.

The store owns ``memories`` and its change log (the outbox, access deltas) and records both
inside its own transactions; the sync package creates its own tables and applies synced changes
through the store's narrow methods; its bucket client is an interface, not a class to subclass.
"""

from __future__ import annotations

import ast
import inspect
import re
import sqlite3
from pathlib import Path

from memlocal import MemoryBank, RecallQuery, SaveRequest
from memlocal.plugins import Replicator
from memlocal.store import Store
from memlocal.store.replica import StoreReplica

from memlocal_sync.bucket import Bucket, BucketClient, BucketSettings
from memlocal_sync.state import SyncState

SYNC = Path(__file__).resolve().parent.parent / "memlocal_sync"


def _imports(module: str) -> set[str]:
    tree = ast.parse((SYNC / f"{module}.py").read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_sql_against_the_stores_tables_in_the_sync_package() -> None:
    pattern = re.compile(r"\b(FROM|INTO|UPDATE|JOIN)\s+(memories|automation_notes|automation_outbox)\b", re.IGNORECASE)
    offenders = [f"{p.name}: {m.group(0)}" for p in sorted(SYNC.glob("*.py")) for m in pattern.finditer(p.read_text())]
    assert offenders == []


def test_the_sync_sql_is_in_its_tables_module() -> None:
    """The sync's tables, their migrations and every statement on them are in one module,
    ``memlocal_sync.tables``: no SQL text elsewhere in the sync package."""
    pattern = re.compile(r"\b(SELECT\s+\S.*\bFROM|INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+\w+\s+SET|CREATE\s+(TABLE|INDEX)|"
                         r"ALTER\s+TABLE)\b")
    offenders = [f"{p.name}: {m.group(0)}" for p in sorted(SYNC.glob("*.py")) if p.name != "tables.py"
                 for m in pattern.finditer(p.read_text())]
    assert offenders == []
    assert pattern.search((SYNC / "tables.py").read_text())


def test_the_sync_handle_reaches_only_the_sync_tables(tmp_path: Path) -> None:
    """The handle the store gives a snapshot or a transaction reaches the tables the sync's
    migration set names and no other (SQLite's authorizer refuses the statement); a snapshot's
    handle writes nothing; a handle is dead once its block ends; the store's own statements in
    the same transaction are not limited."""
    import pytest

    store = Store(tmp_path / "m.db")
    replica = StoreReplica(store)
    SyncState(replica)
    try:
        with replica.snapshot() as t:
            assert t.execute("SELECT count(*) FROM sync_base") == [(0,)]
            for sql in ("SELECT id FROM memories", "SELECT key FROM meta",
                        "SELECT b.id FROM sync_base b JOIN sync_outbox o ON o.id = b.id",
                        "DELETE FROM sync_skipped", "PRAGMA user_version"):
                with pytest.raises(sqlite3.DatabaseError, match="not authorized|prohibited"):
                    t.execute(sql)
        with pytest.raises(RuntimeError, match="only inside"):
            t.execute("SELECT count(*) FROM sync_base")
        with replica.transaction() as c:
            assert c.tables.executemany("INSERT INTO sync_skipped (key, etag, reason, seen_us) VALUES (?, ?, ?, ?)",
                                        [("k1", "e", "r", 1), ("k2", "e", "r", 2)]) == 2
            for sql in ("DELETE FROM memories", "INSERT INTO meta (key, value) VALUES ('x', 'y')",
                        "UPDATE sync_outbox SET op = 'put'", "DROP TABLE sync_base", "BEGIN", "COMMIT"):
                with pytest.raises(sqlite3.DatabaseError, match="not authorized|prohibited"):
                    c.tables.execute(sql)
            c.meta_set("still", "free")  # the store's own statement, in the same transaction
            with pytest.raises(sqlite3.DatabaseError, match="not authorized|prohibited"):
                c.tables.execute("SELECT value FROM meta")
        assert store.read("SELECT count(*) FROM sync_skipped") == [(2,)]
        assert store.meta_get("still") == "free"
    finally:
        store.close()


def test_layering_inside_the_sync_package() -> None:
    assert ".plan" not in _imports("bucket")  # the client knows nothing of reconciliation
    assert ".cli" not in _imports("replicator")  # write-through does not load click
    assert not any(i.startswith("memlocal.faces.cli") for i in _imports("replicator"))


def test_the_replicator_protocol_passes_no_connection() -> None:
    for name, fn in inspect.getmembers(Replicator, inspect.isfunction):
        assert "Connection" not in str(inspect.signature(fn)), name


def test_the_bucket_client_is_an_interface() -> None:
    settings = BucketSettings(name="b", source="test")
    assert isinstance(Bucket(settings, timeout_s=1.0, attempts=1), BucketClient)


def test_the_sync_creates_its_own_tables(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    store = Store(db)
    tables = {r[0] for r in store.read("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "memories" in tables and "sync_outbox" in tables
    assert "automation_outbox" in tables
    assert not tables & {"sync_base", "sync_skipped", "sync_note_base"}  # not the store's
    SyncState(StoreReplica(store))
    SyncState(StoreReplica(store))  # idempotent
    tables = {r[0] for r in store.read("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"sync_base", "sync_skipped", "sync_note_base"} <= tables
    store.close()


# The sync's tables as its SQL migration steps created them before the schema was typed data, and
# as that typed schema rendered them (the two were checked equal): a database made then and one
# made now must hold the same tables.
_SQL_STEPS = (
    "CREATE TABLE IF NOT EXISTS sync_base (id TEXT PRIMARY KEY, profile TEXT NOT NULL,"
    " etag TEXT NOT NULL, content_hash TEXT NOT NULL, synced_us INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS sync_base_profile ON sync_base (profile)",
    "CREATE TABLE IF NOT EXISTS sync_skipped (key TEXT PRIMARY KEY, etag TEXT NOT NULL,"
    " reason TEXT NOT NULL, seen_us INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sync_note_base (automation_id TEXT PRIMARY KEY, etag TEXT NOT NULL,"
    " content_hash TEXT NOT NULL, synced_us INTEGER NOT NULL)",
    "ALTER TABLE sync_base ADD COLUMN row_sig TEXT",
    "CREATE TABLE IF NOT EXISTS sync_breaker (bucket TEXT PRIMARY KEY, failures INTEGER NOT NULL,"
    " open_until_us INTEGER NOT NULL, probe_until_us INTEGER NOT NULL, reason TEXT NOT NULL,"
    " opened_us INTEGER NOT NULL, failed_us INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sync_journal (n INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL,"
    " etag TEXT NOT NULL, op TEXT NOT NULL, size INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sync_delete_record (key TEXT PRIMARY KEY, id TEXT NOT NULL,"
    " seq INTEGER NOT NULL, seen_us INTEGER NOT NULL)",
)


def test_the_sync_tables_are_the_tables_earlier_releases_made(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    SyncState(StoreReplica(store))
    made = store.read("SELECT type, name, sql FROM sqlite_master WHERE name LIKE 'sync\\_%' ESCAPE '\\'"
                      " AND name != 'sync_outbox' ORDER BY name")
    store.close()
    conn = sqlite3.connect(tmp_path / "old.db")
    try:
        for sql in _SQL_STEPS:
            conn.execute(sql)
        old = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name LIKE 'sync\\_%' ESCAPE '\\'"
                           " ORDER BY name").fetchall()
    finally:
        conn.close()
    assert made == old and len(made) == 7


def test_the_store_records_its_change_log_without_a_replicator(tmp_path: Path) -> None:
    with MemoryBank(tmp_path / "m.db", replicator=None) as bank:
        kept = bank.save(SaveRequest("p", content="kept")).memory
        gone = bank.save(SaveRequest("p", content="gone")).memory
        bank.delete("p", gone.id)
        bank.recall(RecallQuery("p", "kept"))
        bank.close()
    conn = sqlite3.connect(tmp_path / "m.db")
    try:
        assert dict(conn.execute("SELECT id, op FROM sync_outbox")) == {kept.id: "put", gone.id: "delete"}
        assert conn.execute("SELECT access_delta FROM memories WHERE id = ?", (kept.id,)).fetchone()[0] == 1
    finally:
        conn.close()


def test_a_run_of_pulls_lands_as_the_same_pulls_one_at_a_time(tmp_path: Path) -> None:
    """``SyncState.apply`` takes a run of pulled memories in a few statements (a fresh host pulls
    thousands): the database ends exactly as when each is applied alone through
    ``ReplicaTransaction.apply_remote``, whatever each id meets here: nothing, a memory of the same profile, a
    deletion not pushed yet, or a memory of another profile."""
    from memory_factory import memory

    from memlocal_sync.objects import content_hash
    from memlocal_sync.state import Synced

    def host(path: Path) -> Store:
        store = Store(path)
        store.upsert(memory("p", "Held here, edited there", memory_id="mem-000000a1", count=1))
        store.upsert(memory("p", "Deleted here, the deletion not pushed yet", memory_id="mem-000000a2"))
        store.upsert(memory("q", "Another profile's memory under the same id", memory_id="mem-000000a3"))
        store.delete("p", "mem-000000a2")
        return store

    remote = [memory("p", "Held here, edited there: the bucket's newer text", memory_id="mem-000000a1", count=3),
              memory("p", "Deleted here, the deletion not pushed yet", memory_id="mem-000000a2"),
              memory("p", "An id that is another profile's here", memory_id="mem-000000a3"),
              *(memory("p", f"Fresh memory {i} about green tea on night trains", memory_id=f"mem-0000010{i}")
                for i in range(5))]
    effects = [Synced(m, f'"etag-{m.id}"', content_hash(m)) for m in remote]
    batched, single = host(tmp_path / "batched.db"), host(tmp_path / "single.db")
    SyncState(StoreReplica(batched)).apply(effects)
    for eff in effects:
        SyncState(StoreReplica(single)).apply([eff])

    def state(store: Store) -> tuple[object, ...]:
        return (StoreReplica(store).memories_with_deltas(),
                store.read("SELECT id, profile, etag, content_hash, row_sig FROM sync_base ORDER BY id"),
                store.read("SELECT id, op FROM sync_outbox ORDER BY id, op"),
                store.read("SELECT key FROM sync_skipped ORDER BY key"),
                store.integrity_check())

    assert state(batched) == state(single)
    got = {m.id: (m.profile_name, m.processed_content, m.access_count) for m, _ in StoreReplica(batched).memories_with_deltas()}
    assert got["mem-000000a1"] == ("p", "Held here, edited there: the bucket's newer text", 3)
    assert "mem-000000a2" not in got  # its deletion is still queued: not brought back
    assert got["mem-000000a3"][0] == "q"  # never touched
    assert {f"mem-0000010{i}" for i in range(5)} <= got.keys()
    with MemoryBank(tmp_path / "batched.db") as bank:  # the pulled rows are in the recall index
        assert len(bank.query_with_relevance(RecallQuery("p", "green tea on night trains"))) == 5
    batched.close()
    single.close()


def test_a_pull_longer_than_one_statement_lands_whole(tmp_path: Path) -> None:
    """A fresh host's run of pulls is inserted a few hundred rows per statement: a run longer
    than one statement lands whole, in the full-text index too, and clears each pulled
    memory's queued put while a queued deletion still keeps its memory out."""
    from memory_factory import memory

    from memlocal_sync.objects import content_hash
    from memlocal_sync.state import Synced

    store = Store(tmp_path / "m.db")
    store.upsert(memory("p", "Deleted here, the deletion not pushed yet", memory_id="mem-00000001"))
    store.delete("p", "mem-00000001")
    n = 1_201  # three statements at 500 rows each
    remote = [memory("p", f"Pulled memory {i} about a lighthouse keeper", memory_id=f"mem-{i + 1:08x}") for i in range(n)]
    SyncState(StoreReplica(store)).apply([Synced(m, f'"etag-{m.id}"', content_hash(m)) for m in remote])
    assert store.read("SELECT count(*) FROM memories WHERE profile = 'p'") == [(n - 1,)]
    assert store.read("SELECT count(*) FROM sync_base") == [(n,)]
    assert store.read("SELECT id, op FROM sync_outbox") == [("mem-00000001", "delete")]
    assert store.integrity_check() == "ok"
    with store.transaction() as c:  # the full-text index matches its rows (raises otherwise)
        c.execute("INSERT INTO memory_features (memory_features) VALUES ('integrity-check')")
    store.close()
    with MemoryBank(tmp_path / "m.db") as bank:  # the pulled rows are in the recall index
        assert len(bank.query_with_relevance(RecallQuery("p", "lighthouse keeper", limit=1_000))) == 1_000


def test_every_bucket_client_comes_from_the_one_factory() -> None:
    """Only ``clients.open_bucket`` makes a client, so a ``memory://`` endpoint reaches every place
    that talks to the bucket (the engine, the write-through, the daemon, the CLI)."""
    made = re.compile(r"\b(Bucket|InMemoryBucket)\(")
    offenders = [f"{p.name}: {m.group(0)}" for p in sorted(SYNC.glob("*.py")) if p.name not in ("clients.py", "inmemory.py")
                 for m in made.finditer(p.read_text())]
    assert offenders == []


def test_one_pipeline_runs_every_synced_kind() -> None:
    """The engine has one executor for memories and automation notes (``memlocal_sync.kinds``):
    no method of its own for one kind's actions."""
    from memlocal_sync.engine import SyncEngine

    per_kind = [name for room in SyncEngine.__mro__ for name in vars(room)  # the engine and its rooms
                if re.search(r"note", name) and name != "_plan_notes"]
    assert per_kind == []


def test_a_pass_is_asked_with_one_frozen_options_value() -> None:
    """``run_pass`` takes one ``PassOptions`` (no loose flags), and no part of the engine hands
    them on as ``**kwargs``, where a misspelt flag would go unchecked."""
    import dataclasses

    import pytest

    from memlocal_sync.engine import SyncEngine
    from memlocal_sync.report import PassOptions

    assert list(inspect.signature(SyncEngine.run_pass).parameters) == ["self", "options"]
    erased = [f"{room.__name__}.{name}" for room in SyncEngine.__mro__ for name, f in vars(room).items()
              if inspect.isfunction(f)
              and any(p.kind is p.VAR_KEYWORD for p in inspect.signature(f).parameters.values())]
    assert erased == []
    options = PassOptions(profiles=["alice"], full=True)
    assert options.profiles == ("alice",) and not options.syncs_notes
    assert PassOptions().syncs_notes and PassOptions(profiles=(), notes=True).syncs_notes
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.full = False  # type: ignore[misc]
    with pytest.raises(TypeError, match="not the string"):
        PassOptions(profiles="alice")


def test_the_engine_is_in_rooms() -> None:
    """The pass and its lock stay in ``engine.py`` (under 700 lines); the change record's reading
    (``changes``), the listing (``lister``), the snapshot feeds (``feeds``), the executor and
    the report are rooms of their own, and no module of the package passes 1,100 lines."""
    from memlocal_sync.changes import RecordReader
    from memlocal_sync.engine import SyncEngine
    from memlocal_sync.executor import Executor
    from memlocal_sync.feeds import SnapshotFeeds
    from memlocal_sync.lister import Lister

    assert {RecordReader, Lister, SnapshotFeeds, Executor} <= set(SyncEngine.__mro__)
    lines = {p.name: len(p.read_text().splitlines()) for p in SYNC.glob("*.py")}
    assert lines["engine.py"] < 700
    assert {name: n for name, n in lines.items() if n > 1_100} == {}
