"""The persisted recall index's schema (owned by ``memlocal.recall``; docs/relevance.md):
``profile_revs`` and the rev triggers, the features and their FTS5 index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..derive import derive_features
from ..migrations import MigrationSet

if TYPE_CHECKING:
    import sqlite_utils


def _migration_2(db: sqlite_utils.Database) -> None:
    """Change tracking for the recall index (owned by ``memlocal.recall``; see docs/relevance.md).

    ``profile_revs`` holds, per profile, a counter bumped by every insert, scoring-relevant update
    and delete of its memories (``resets`` counts deletions and moves out), and each memory row
    carries the ``rev`` of its last change. A process that caches a profile's recall index asks
    one indexed row whether anything changed and then reads only the rows with a newer ``rev``;
    triggers keep this true for every writer (other processes, the sync, the sqlite3 shell).
    The FTS update trigger is narrowed to the indexed text columns, so that an access bump no
    longer rewrites the full-text index.
    """
    c = db.conn
    c.execute("ALTER TABLE memories ADD COLUMN rev INTEGER NOT NULL DEFAULT 0")
    c.execute("CREATE INDEX memories_profile_rev ON memories (profile, rev)")
    c.execute(
        "CREATE TABLE profile_revs (profile TEXT PRIMARY KEY, rev INTEGER NOT NULL DEFAULT 0,"
        " resets INTEGER NOT NULL DEFAULT 0)"
    )
    c.execute("INSERT INTO profile_revs (profile) SELECT DISTINCT profile FROM memories")
    # Not "INSERT OR IGNORE": inside a trigger the outer statement's conflict policy wins, and
    # an upsert's is ABORT. This form cannot conflict.
    bump = (
        "INSERT INTO profile_revs (profile) SELECT NEW.profile"
        " WHERE NOT EXISTS (SELECT 1 FROM profile_revs WHERE profile = NEW.profile);"
        " UPDATE profile_revs SET rev = rev + 1 WHERE profile = NEW.profile;"
        " UPDATE memories SET rev = (SELECT rev FROM profile_revs WHERE profile = NEW.profile)"
        " WHERE id = NEW.id;"
    )
    c.execute(f"CREATE TRIGGER memories_rev_ai AFTER INSERT ON memories BEGIN {bump} END")
    # Only columns that change a score, a rendering or membership; never rev itself.
    c.execute(
        "CREATE TRIGGER memories_rev_au AFTER UPDATE OF profile, processed_content, summary, category,"
        " confidence, created_us, last_accessed_us, access_count, is_active ON memories BEGIN"
        " UPDATE profile_revs SET rev = rev + 1, resets = resets + 1"
        " WHERE profile = OLD.profile AND OLD.profile <> NEW.profile;"
        f" {bump} END"
    )
    c.execute(
        "CREATE TRIGGER memories_rev_ad AFTER DELETE ON memories BEGIN"
        " UPDATE profile_revs SET rev = rev + 1, resets = resets + 1 WHERE profile = OLD.profile; END"
    )
    c.execute("DROP TRIGGER IF EXISTS memories_au")
    c.execute(
        "CREATE TRIGGER memories_au AFTER UPDATE OF processed_content, summary ON memories BEGIN"
        " INSERT INTO memories_fts (memories_fts, rowid, processed_content, summary)"
        " VALUES ('delete', old.rowid, old.processed_content, old.summary);"
        " INSERT INTO memories_fts (rowid, processed_content, summary)"
        " VALUES (new.rowid, new.processed_content, new.summary); END"
    )


def _migration_4(db: sqlite_utils.Database) -> None:
    """The persisted recall index (owned by ``memlocal.recall``; see docs/storage.md).

    - ``memories.features``: the formula's own tokens of the memory (its stemmed terms and its
      clusters, :mod:`memlocal.relevance.features`), written by the store in the same transaction as the
      memory; ``NULL`` means "not derived yet" (a row written by raw SQL, or whose text changed
      under a writer that does not derive them), found through a partial index and derived
      lazily by the next recall of that profile.
    - ``memory_features``: a contentless FTS5 table (``detail=none``) of the active memories'
      features plus a profile scope token, kept by triggers from that column. A fresh process
      finds a query's candidates and their document frequencies there, without tokenising the
      bank. It replaces the FTS5 index over the raw text, which nothing read.
    - ``profile_revs.active`` / ``.accesses``: per profile, the number of active memories and
      the sum of their accessCount (the IDF's N and the maturity), kept by triggers.

    Every existing memory's features are derived here (back-fill), stamped with
    ``features.fingerprint()`` in ``meta``.
    """
    from ...relevance.features import FTS_TOKENIZE

    c = db.conn
    for name in ("memories_ai", "memories_ad", "memories_au"):
        c.execute(f"DROP TRIGGER IF EXISTS {name}")
    c.execute("DROP TABLE IF EXISTS memories_fts")
    c.execute("ALTER TABLE memories ADD COLUMN features TEXT")
    c.execute("CREATE INDEX memories_features_stale ON memories (profile) WHERE features IS NULL")
    # What is indexed, row by row: the FTS5 table reads its documents from here (external
    # content), and its own triggers forget exactly what they indexed, whatever order the
    # memories' triggers run in. Plain SQL keeps this table, so no write can desynchronise it.
    c.execute("CREATE TABLE memory_features_docs (rowid INTEGER PRIMARY KEY, features TEXT NOT NULL)")
    c.execute(
        "CREATE VIRTUAL TABLE memory_features USING fts5(features, content='memory_features_docs',"
        f" content_rowid='rowid', detail=none, columnsize=0, tokenize=\"{FTS_TOKENIZE}\")"
    )
    fts_add = "INSERT INTO memory_features (rowid, features) VALUES (NEW.rowid, NEW.features);"
    fts_drop = ("INSERT INTO memory_features (memory_features, rowid, features)"
                " VALUES ('delete', OLD.rowid, OLD.features);")
    c.execute(f"CREATE TRIGGER memory_features_docs_ai AFTER INSERT ON memory_features_docs BEGIN {fts_add} END")
    c.execute(f"CREATE TRIGGER memory_features_docs_ad AFTER DELETE ON memory_features_docs BEGIN {fts_drop} END")
    c.execute(f"CREATE TRIGGER memory_features_docs_au AFTER UPDATE ON memory_features_docs BEGIN {fts_drop}"
              f" {fts_add} END")
    # The document of an active memory with features: its profile's scope token, then its features.
    doc = "INSERT INTO memory_features_docs (rowid, features) SELECT NEW.rowid, '=' || hex(NEW.profile) || ' ' || NEW.features WHERE NEW.is_active = 1 AND NEW.features IS NOT NULL"
    c.execute(f"CREATE TRIGGER memories_features_ai AFTER INSERT ON memories BEGIN {doc}; END")
    c.execute("CREATE TRIGGER memories_features_ad AFTER DELETE ON memories BEGIN"
              " DELETE FROM memory_features_docs WHERE rowid = OLD.rowid; END")
    # When the text changed but the writer left the features as they were (a raw SQL update,
    # the sync's), they are stale: the row leaves the index and its features are cleared.
    text_changed = "(OLD.processed_content IS NOT NEW.processed_content OR OLD.summary IS NOT NEW.summary)"
    stale = f"{text_changed} AND NEW.features IS OLD.features"
    c.execute(
        "CREATE TRIGGER memories_features_au AFTER UPDATE OF profile, features, is_active, processed_content,"
        " summary ON memories WHEN OLD.profile IS NOT NEW.profile OR OLD.features IS NOT NEW.features"
        f" OR OLD.is_active IS NOT NEW.is_active OR {text_changed} BEGIN"
        " DELETE FROM memory_features_docs WHERE rowid = OLD.rowid;"
        f" {doc} AND NOT ({stale});"
        f" UPDATE memories SET features = NULL WHERE rowid = NEW.rowid AND NEW.features IS NOT NULL AND {stale};"
        " END"
    )
    c.execute("ALTER TABLE profile_revs ADD COLUMN active INTEGER NOT NULL DEFAULT 0")
    c.execute("ALTER TABLE profile_revs ADD COLUMN accesses INTEGER NOT NULL DEFAULT 0")
    c.execute("INSERT INTO profile_revs (profile) SELECT DISTINCT profile FROM memories"
              " WHERE profile NOT IN (SELECT profile FROM profile_revs)")
    c.execute(
        "UPDATE profile_revs SET active = (SELECT count(*) FROM memories m WHERE m.profile = profile_revs.profile"
        " AND m.is_active = 1), accesses = (SELECT coalesce(sum(access_count), 0) FROM memories m"
        " WHERE m.profile = profile_revs.profile AND m.is_active = 1)"
    )
    ensure = ("INSERT INTO profile_revs (profile) SELECT NEW.profile"
              " WHERE NOT EXISTS (SELECT 1 FROM profile_revs WHERE profile = NEW.profile);")
    plus = ("UPDATE profile_revs SET active = active + 1, accesses = accesses + NEW.access_count"
            " WHERE profile = NEW.profile AND NEW.is_active = 1;")
    minus = ("UPDATE profile_revs SET active = active - 1, accesses = accesses - OLD.access_count"
             " WHERE profile = OLD.profile AND OLD.is_active = 1;")
    c.execute(f"CREATE TRIGGER memories_counts_ai AFTER INSERT ON memories BEGIN {ensure} {plus} END")
    c.execute(f"CREATE TRIGGER memories_counts_ad AFTER DELETE ON memories BEGIN {minus} END")
    c.execute(f"CREATE TRIGGER memories_counts_au AFTER UPDATE OF profile, is_active, access_count ON memories"
              f" BEGIN {minus} {ensure} {plus} END")
    derive_features(c)


def _walk_orders(db: sqlite_utils.Database) -> None:
    """The two orders recall walks without an index in memory (``memlocal.recall.cold_query``):
    a profile's memories by anchor (the larger of createdAt and lastAccessedAt, the recency
    signal's age) and by access count (the usage signal). A query over common words then reads
    the few rows that can reach its top-k instead of every row holding them."""
    c = db.conn
    c.execute("CREATE INDEX IF NOT EXISTS memories_profile_anchor ON memories"
              " (profile, max(created_us, coalesce(last_accessed_us, created_us)))")
    c.execute("CREATE INDEX IF NOT EXISTS memories_profile_count ON memories (profile, access_count)")


def _one_insert_trigger(db: sqlite_utils.Database) -> None:
    """An insert's bookkeeping in one trigger, and no second write of the row.

    ``memories_rev_ai`` and ``memories_counts_ai`` each made sure the profile had its
    ``profile_revs`` row and then updated it: one ensure and one update now do both (the rev and
    the counts). And the row's ``rev`` was written twice: inserted as 0, then updated to the
    profile's new rev, which moved its entry in ``memories_profile_rev`` from one leaf page to
    another (two pages written per save). The store now inserts the rev it will have
    (:func:`memlocal.store.memories.insert_rows`, ``Store.insert``), so the trigger's update of
    the row only runs for a writer that did not (the sqlite3 shell, an older memlocal): every
    row still carries the rev of its last change, whoever wrote it.
    """
    c = db.conn
    c.execute("DROP TRIGGER IF EXISTS memories_rev_ai")
    c.execute("DROP TRIGGER IF EXISTS memories_counts_ai")
    rev = "(SELECT rev FROM profile_revs WHERE profile = NEW.profile)"
    c.execute(
        "CREATE TRIGGER memories_rev_ai AFTER INSERT ON memories BEGIN"
        # Not "INSERT OR IGNORE": inside a trigger the outer statement's conflict policy wins.
        " INSERT INTO profile_revs (profile) SELECT NEW.profile"
        " WHERE NOT EXISTS (SELECT 1 FROM profile_revs WHERE profile = NEW.profile);"
        " UPDATE profile_revs SET rev = rev + 1, active = active + (NEW.is_active = 1),"
        " accesses = accesses + CASE WHEN NEW.is_active = 1 THEN NEW.access_count ELSE 0 END"
        " WHERE profile = NEW.profile;"
        f" UPDATE memories SET rev = {rev} WHERE rowid = NEW.rowid AND NEW.rev IS NOT {rev}; END"
    )


# Step 5's and later triggers' first statement: the profile's row of ``profile_revs`` exists.
_ENSURE_PROFILE: Final = ("INSERT INTO profile_revs (profile) SELECT NEW.profile"
                          " WHERE NOT EXISTS (SELECT 1 FROM profile_revs WHERE profile = NEW.profile);")


def _rev_trigger(c: Any, columns: str) -> None:
    """(Re)create ``memories_rev_au``: an update of any of ``columns`` that does not set the
    row's ``rev`` itself bumps the profile's rev (and the old profile's, with a reset, on a
    move) and gives the row the new value. Steps 5 and 6 differ only in ``columns``."""
    c.execute("DROP TRIGGER IF EXISTS memories_rev_au")
    c.execute(
        f"CREATE TRIGGER memories_rev_au AFTER UPDATE OF {columns} ON memories"
        " WHEN NEW.rev IS OLD.rev BEGIN"
        " UPDATE profile_revs SET rev = rev + 1, resets = resets + 1"
        " WHERE profile = OLD.profile AND OLD.profile <> NEW.profile;"
        f" {_ENSURE_PROFILE}"
        " UPDATE profile_revs SET rev = rev + 1 WHERE profile = NEW.profile;"
        " UPDATE memories SET rev = (SELECT rev FROM profile_revs WHERE profile = NEW.profile)"
        " WHERE rowid = NEW.rowid; END"
    )


def _one_bump_statement(db: sqlite_utils.Database) -> None:
    """An access bump's bookkeeping in one statement per memory, not seven.

    ``memories_rev_au`` made sure the profile had its ``profile_revs`` row, bumped the profile's
    rev and wrote the row a second time with it, and ``memories_counts_au`` subtracted the old
    access count and added the new one, for every memory a recall returned. Now:

    - a writer that sets the row's ``rev`` itself (``Store.mark_accessed``: one new rev for all
      the memories of one bump, the profile's bumped once) is not rewritten by the trigger, which
      still runs for every writer that does not (the sqlite3 shell, an older memlocal);
    - a change of the access count alone, the profile and the state kept, is one update of the
      profile's sum; a move or a change of state still takes the old out and puts the new in.
    """
    c = db.conn
    _rev_trigger(c, "profile, processed_content, summary, category, confidence, created_us, last_accessed_us,"
                    " access_count, is_active")
    c.execute("DROP TRIGGER IF EXISTS memories_counts_au")
    ensure = _ENSURE_PROFILE
    moved = "(OLD.profile IS NOT NEW.profile OR OLD.is_active IS NOT NEW.is_active)"
    c.execute(
        "CREATE TRIGGER memories_counts_au AFTER UPDATE OF profile, is_active, access_count ON memories"
        f" WHEN {moved} BEGIN"
        " UPDATE profile_revs SET active = active - 1, accesses = accesses - OLD.access_count"
        " WHERE profile = OLD.profile AND OLD.is_active = 1;"
        f" {ensure}"
        " UPDATE profile_revs SET active = active + 1, accesses = accesses + NEW.access_count"
        " WHERE profile = NEW.profile AND NEW.is_active = 1; END"
    )
    c.execute(
        "CREATE TRIGGER memories_accesses_au AFTER UPDATE OF access_count ON memories"
        f" WHEN NOT {moved} AND NEW.is_active = 1 AND OLD.access_count IS NOT NEW.access_count BEGIN"
        " UPDATE profile_revs SET accesses = accesses + NEW.access_count - OLD.access_count"
        " WHERE profile = NEW.profile; END"
    )


def _rev_on_every_field(db: sqlite_utils.Database) -> None:
    """A row's ``rev`` moves with every field a memory is read from, not only those that change a
    score or a rendering: the recall index keeps the memories it read (``ProfileIndex.rows``) and
    trusts each while its row's rev stands. rawInput, source, stalenessScore, version and the
    extra fields join the update trigger's columns (a hygiene move writes the extra fields alone;
    any other tool may write any of them). The trigger is otherwise step 5's."""
    _rev_trigger(db.conn, "profile, raw_input, processed_content, summary, category, source, confidence,"
                          " created_us, last_accessed_us, access_count, staleness, is_active, version, extra")


# How many new memories wait for the FTS5 index before one statement indexes them together (step 7).
FTS_BATCH: Final = 32

# Step 7's: index every memory waiting in ``memory_features_pending`` and empty it (its trigger
# ran these at ``FTS_BATCH``). A row already indexed (no writer of this schema leaves one waiting
# too, but the shell could) is not indexed twice. Frozen: step 10 replaced the table.
_STEP7_INDEX_PENDING_SQL: Final = (
    "INSERT INTO memory_features_docs (rowid, features)"
    " SELECT m.rowid, '=' || hex(m.profile) || ' ' || m.features"
    " FROM memory_features_pending p CROSS JOIN memories m ON m.rowid = p.rowid"
    " WHERE m.is_active = 1 AND m.features IS NOT NULL"
    " AND m.rowid NOT IN (SELECT rowid FROM memory_features_docs)",
    "DELETE FROM memory_features_pending",
)


def _batched_fts(db: sqlite_utils.Database) -> None:
    """New memories reach the FTS5 index ``FTS_BATCH`` at a time, not one per transaction.

    FTS5 writes what a statement indexed as a new segment (and merges segments as they pile up):
    for a save, one memory per transaction, that was about a third of the save's SQL time and
    five of its sixteen log pages (the document's row, the segment, its index entry, the
    structure record, the merges). Now an inserted memory's rowid goes into the small table
    ``memory_features_pending`` (one page), and when ``FTS_BATCH`` are waiting, the insert
    that completes the batch indexes them all in one statement (one segment for 32 memories).
    The cold path reads the waiting memories of the profile directly, with their stored
    features (``memlocal.recall.cold_query``, as it reads the rows whose features are not
    derived yet), so every query's answer is unchanged.

    An update that changes a memory's document (text, features, profile, state) or a deletion
    takes it out of the waiting set, and an update indexes it at once, as before; a raw SQL
    insert waits like a save's. Existing databases start with nothing waiting.
    """
    c = db.conn
    c.execute("CREATE TABLE memory_features_pending (rowid INTEGER PRIMARY KEY)")
    c.execute("DROP TRIGGER IF EXISTS memories_features_ai")
    c.execute("CREATE TRIGGER memories_features_ai AFTER INSERT ON memories"
              " WHEN NEW.is_active = 1 AND NEW.features IS NOT NULL BEGIN"
              " INSERT INTO memory_features_pending (rowid) VALUES (NEW.rowid); END")
    c.execute("CREATE TRIGGER memory_features_pending_ai AFTER INSERT ON memory_features_pending"
              f" WHEN (SELECT count(*) FROM memory_features_pending) >= {FTS_BATCH} BEGIN"
              f" {'; '.join(_STEP7_INDEX_PENDING_SQL)}; END")
    c.execute("DROP TRIGGER IF EXISTS memories_features_ad")
    c.execute("CREATE TRIGGER memories_features_ad AFTER DELETE ON memories BEGIN"
              " DELETE FROM memory_features_pending WHERE rowid = OLD.rowid;"
              " DELETE FROM memory_features_docs WHERE rowid = OLD.rowid; END")
    # As step 2's, with the memory taken out of the waiting set first.
    doc = ("INSERT INTO memory_features_docs (rowid, features) SELECT NEW.rowid, '=' || hex(NEW.profile) || ' '"
           " || NEW.features WHERE NEW.is_active = 1 AND NEW.features IS NOT NULL")
    text_changed = "(OLD.processed_content IS NOT NEW.processed_content OR OLD.summary IS NOT NEW.summary)"
    stale = f"{text_changed} AND NEW.features IS OLD.features"
    c.execute("DROP TRIGGER IF EXISTS memories_features_au")
    c.execute(
        "CREATE TRIGGER memories_features_au AFTER UPDATE OF profile, features, is_active, processed_content,"
        " summary ON memories WHEN OLD.profile IS NOT NEW.profile OR OLD.features IS NOT NEW.features"
        f" OR OLD.is_active IS NOT NEW.is_active OR {text_changed} BEGIN"
        " DELETE FROM memory_features_pending WHERE rowid = OLD.rowid;"
        " DELETE FROM memory_features_docs WHERE rowid = OLD.rowid;"
        f" {doc} AND NOT ({stale});"
        f" UPDATE memories SET features = NULL WHERE rowid = NEW.rowid AND NEW.features IS NOT NULL AND {stale};"
        " END"
    )


def _walk_orders_of_used_memories(db: sqlite_utils.Database) -> None:
    """Step 3's two orders index only the memories a recall has returned: a new memory writes
    neither (two pages and two b-tree inserts fewer per save).

    - By anchor: a memory never accessed has its createdAt as anchor, and
      ``memories_profile_created`` orders those already; the partial index holds the accessed ones
      (``last_accessed_us IS NOT NULL``), and the walk merges the two orders.
    - By access count: the walk reads the used memories (``access_count > 0``) from the partial
      index, then the others, all with the same usage, in any order.
    """
    c = db.conn
    c.execute("DROP INDEX IF EXISTS memories_profile_anchor")
    c.execute("DROP INDEX IF EXISTS memories_profile_count")
    c.execute("CREATE INDEX memories_profile_anchor_accessed ON memories"
              " (profile, max(created_us, coalesce(last_accessed_us, created_us)))"
              " WHERE last_accessed_us IS NOT NULL")
    c.execute("CREATE INDEX memories_profile_used ON memories (profile, access_count) WHERE access_count > 0")


def _insert_bookkeeping_as_upsert(db: sqlite_utils.Database) -> None:
    """Step 4's insert trigger with one upsert of the profile's row instead of two statements.

    ``memories_rev_ai`` made sure the profile had its ``profile_revs`` row (an ``INSERT ...
    WHERE NOT EXISTS``: a probe of the table) and then updated it (a second probe, and the
    write): ``INSERT ... ON CONFLICT DO UPDATE`` does both with one probe (a conflict policy of
    the outer statement, ``INSERT OR REPLACE INTO memories`` in the shell, does not turn it into
    a replacement: checked on SQLite 3.40). The rev check for a writer that did not give the row
    its rev is step 4's. About 2 of the save's 20 µs of insert CPU.
    """
    c = db.conn
    rev = "(SELECT rev FROM profile_revs WHERE profile = NEW.profile)"
    c.execute("DROP TRIGGER IF EXISTS memories_rev_ai")
    c.execute(
        "CREATE TRIGGER memories_rev_ai AFTER INSERT ON memories BEGIN"
        " INSERT INTO profile_revs (profile, rev, active, accesses) VALUES (NEW.profile, 1, NEW.is_active = 1,"
        " CASE WHEN NEW.is_active = 1 THEN NEW.access_count ELSE 0 END)"
        " ON CONFLICT (profile) DO UPDATE SET rev = rev + 1, active = active + excluded.active,"
        " accesses = accesses + excluded.accesses;"
        f" UPDATE memories SET rev = {rev} WHERE rowid = NEW.rowid AND NEW.rev IS NOT {rev}; END"
    )


# The memories waiting for the FTS5 batch (step 10): active, derived, above the watermark and
# not indexed by an update since (of a row ``m`` of ``memories``).
WAITING_SQL: Final = ("m.rowid > (SELECT upto FROM memory_features_indexed) AND m.is_active = 1"
                      " AND m.features IS NOT NULL AND m.rowid NOT IN (SELECT rowid FROM memory_features_docs)")
# Index every memory waiting for the FTS5 batch and move the watermark past the newest row
# (``Store.index_pending`` runs these on demand; step 10's trigger the same at ``FTS_BATCH``).
INDEX_PENDING_SQL: Final = (
    "INSERT INTO memory_features_docs (rowid, features)"
    f" SELECT m.rowid, '=' || hex(m.profile) || ' ' || m.features FROM memories m WHERE {WAITING_SQL}",
    "UPDATE memory_features_indexed SET upto = (SELECT max(rowid) FROM memories)"
    " WHERE upto < (SELECT max(rowid) FROM memories)",
)


def _waiting_set_as_watermark(db: sqlite_utils.Database) -> None:
    """The FTS5 batch's waiting set is the rows above a watermark, not a table a save writes.

    Step 7 put each new memory's rowid into ``memory_features_pending``: a page of the log per
    save (of ~9.9), and two statements of its insert. A new row's rowid is one more than the
    largest (``memories`` has no ``AUTOINCREMENT``), so the rows inserted since the last batch
    are those above the rowid it stopped at: ``memory_features_indexed.upto``, written once a
    batch. The insert whose rowid reaches ``upto + FTS_BATCH`` indexes the rows above it (those
    active, derived and not indexed by an update since) and moves it; an insert at or below it
    (a rowid given by hand, or reused once the newest rows were deleted) is indexed at once with
    them, so no row is ever left behind the watermark. Updates and deletions index and unindex
    as step 7's triggers did. ``memory_features_pending`` stays as a view of the same rows.

    What was waiting is indexed now, and the watermark starts at the newest row.
    """
    c = db.conn
    for sql in _STEP7_INDEX_PENDING_SQL:
        c.execute(sql)
    c.execute("DROP TRIGGER IF EXISTS memory_features_pending_ai")
    c.execute("DROP TRIGGER IF EXISTS memories_features_ai")
    c.execute("DROP TABLE memory_features_pending")
    c.execute("CREATE TABLE memory_features_indexed (id INTEGER PRIMARY KEY CHECK (id = 0), upto INTEGER NOT NULL)")
    c.execute("INSERT INTO memory_features_indexed (id, upto) SELECT 0, coalesce(max(rowid), 0) FROM memories")
    c.execute("CREATE VIEW memory_features_pending AS SELECT m.rowid AS rowid FROM memories m"
              " WHERE m.rowid > (SELECT upto FROM memory_features_indexed) AND m.is_active = 1"
              " AND m.features IS NOT NULL AND m.rowid NOT IN (SELECT rowid FROM memory_features_docs)")
    upto = "(SELECT upto FROM memory_features_indexed)"
    c.execute(
        "CREATE TRIGGER memories_features_ai AFTER INSERT ON memories"
        f" WHEN NEW.is_active = 1 AND NEW.features IS NOT NULL"
        f" AND (NEW.rowid >= {upto} + {FTS_BATCH} OR NEW.rowid <= {upto}) BEGIN"
        " INSERT INTO memory_features_docs (rowid, features)"
        " SELECT m.rowid, '=' || hex(m.profile) || ' ' || m.features FROM memories m"
        f" WHERE (m.rowid > {upto} OR m.rowid = NEW.rowid) AND m.is_active = 1 AND m.features IS NOT NULL"
        " AND m.rowid NOT IN (SELECT rowid FROM memory_features_docs);"
        " UPDATE memory_features_indexed SET upto = NEW.rowid WHERE upto < NEW.rowid; END"
    )
    # Step 7's, without the waiting table.
    c.execute("DROP TRIGGER IF EXISTS memories_features_ad")
    c.execute("CREATE TRIGGER memories_features_ad AFTER DELETE ON memories BEGIN"
              " DELETE FROM memory_features_docs WHERE rowid = OLD.rowid; END")
    doc = ("INSERT INTO memory_features_docs (rowid, features) SELECT NEW.rowid, '=' || hex(NEW.profile) || ' '"
           " || NEW.features WHERE NEW.is_active = 1 AND NEW.features IS NOT NULL")
    text_changed = "(OLD.processed_content IS NOT NEW.processed_content OR OLD.summary IS NOT NEW.summary)"
    stale = f"{text_changed} AND NEW.features IS OLD.features"
    c.execute("DROP TRIGGER IF EXISTS memories_features_au")
    c.execute(
        "CREATE TRIGGER memories_features_au AFTER UPDATE OF profile, features, is_active, processed_content,"
        " summary ON memories WHEN OLD.profile IS NOT NEW.profile OR OLD.features IS NOT NEW.features"
        f" OR OLD.is_active IS NOT NEW.is_active OR {text_changed} BEGIN"
        " DELETE FROM memory_features_docs WHERE rowid = OLD.rowid;"
        f" {doc} AND NOT ({stale});"
        f" UPDATE memories SET features = NULL WHERE rowid = NEW.rowid AND NEW.features IS NOT NULL AND {stale};"
        " END"
    )


# Steps 1 and 2 are named by their number in the single chain that came before named sets.
RECALL = MigrationSet("recall", {1: _migration_2, 2: _migration_4, 3: _walk_orders, 4: _one_insert_trigger,
                                 5: _one_bump_statement, 6: _rev_on_every_field, 7: _batched_fts,
                                 8: _walk_orders_of_used_memories, 9: _insert_bookkeeping_as_upsert,
                                 10: _waiting_set_as_watermark},
                      legacy={1: 2, 2: 4})
