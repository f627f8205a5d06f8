"""JSON Lines export and import: round trips, idempotence and per-line error reports."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import Cli

from memlocal import MemoryBank, RecallQuery, SaveRequest


def fill(bank: MemoryBank) -> None:
    bank.save(SaveRequest("alice", content="Prefers dark mode", category="preference", confidence=0.9, summary="dark mode"))
    bank.save(SaveRequest("alice", "Deploys go out on Tuesdays"))
    bank.save(SaveRequest("bob", content="Bob's team owns the billing service", category="fact"))
    bank.save(SaveRequest("bob", "Übersetzungen bitte auf Deutsch — ✓ unicode survives"))


def test_export_fresh_database_import_is_equal_field_by_field(tmp_path: Path, cli: Cli) -> None:
    src, dst, dump = tmp_path / "src.db", tmp_path / "dst.db", tmp_path / "dump.jsonl"
    with MemoryBank(src) as bank:
        fill(bank)
        before = {m.id: m for p in ("alice", "bob") for m in bank.list(p)}
    code, _, err = cli("export", "--output", dump, db=src)
    assert code == 0, err
    lines = dump.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and all(json.loads(line)["id"] in before for line in lines)

    code, out, err = cli("import", dump, db=dst)
    assert code == 0, err
    assert "imported 4, unchanged 0, rejected 0" in out
    with MemoryBank(dst) as bank:
        after = {m.id: m for p in ("alice", "bob") for m in bank.list(p)}
    assert after == before  # every field, timestamps and ids included

    code, out, _ = cli("import", dump, db=dst)
    assert code == 0 and "imported 0, unchanged 4, rejected 0" in out
    with MemoryBank(dst) as bank:
        assert bank.stats()["totalMemories"] == 4


def test_export_one_profile_to_stdout(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "x.db"
    with MemoryBank(db) as bank:
        fill(bank)
    code, out, _ = cli("export", "--profile", "bob", db=db)
    assert code == 0
    assert {json.loads(line)["profileName"] for line in out.splitlines()} == {"bob"}
    assert len(out.splitlines()) == 2


def test_bad_lines_are_reported_by_number_and_the_rest_imported(tmp_path: Path, cli: Cli) -> None:
    good = {
        "id": "mem-0000abcd", "profileName": "carol", "rawInput": "likes tea", "processedContent": "Carol likes tea",
        "summary": "likes tea", "category": "preference", "source": "explicit", "confidence": 0.7,
        "createdAt": "2026-01-02T03:04:05.123456789Z", "lastAccessedAt": "0001-01-01T00:00:00Z",
        "accessCount": 2, "stalenessScore": 0.1, "isActive": True, "version": 1,
    }
    lines = [
        json.dumps(good),                                             # 1 ok
        "{not json",                                                  # 2 broken JSON
        json.dumps({**good, "id": "mem-0000abce", "category": "opinion"}),   # 3 unknown category
        "",                                                           # 4 blank: skipped silently
        json.dumps({**good, "id": "mem-0000abcf", "confidence": 3}),  # 5 confidence out of range
        json.dumps({**good, "id": "mem-0000abd0", "profileName": "../x"}),   # 6 bad profile
        json.dumps({**good, "id": "bad-id"}),                         # 7 bad id
        json.dumps({**good, "id": "mem-0000abd1", "rawInput": "x" * 5000}),  # 8 too large
        json.dumps([1, 2]),                                           # 9 not an object
        json.dumps({**good, "id": "mem-0000abd2", "summary": "fine"}),  # 10 ok
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"id": "\xff\xfe"}\n')  # 11 invalid UTF-8
    db = tmp_path / "x.db"
    code, out, err = cli("import", path, db=db)
    assert code == 1
    reported = {int(line.split(":")[0].split()[1]): line for line in err.splitlines()}
    assert sorted(reported) == [2, 3, 5, 6, 7, 8, 9, 11]
    assert "not valid JSON" in reported[2]
    assert "unknown category" in reported[3]
    assert "confidence" in reported[5]
    assert "profile" in reported[6]
    assert "memory id" in reported[7]
    assert "4096" in reported[8]
    assert "UTF-8" in reported[11]
    assert "imported 2, unchanged 0, rejected 8" in out
    with MemoryBank(db) as bank:
        got = bank.get("carol", "mem-0000abcd")
        assert got.access_count == 2 and got.created_at.microsecond == 123456
        assert bank.stats()["totalMemories"] == 2


def test_import_into_another_profile_and_id_clashes(tmp_path: Path, cli: Cli) -> None:
    src, dump = tmp_path / "src.db", tmp_path / "d.jsonl"
    with MemoryBank(src) as bank:
        fill(bank)
    cli("export", "-p", "alice", "-o", dump, db=src)
    code, out, _ = cli("import", dump, "--profile", "alice-copy", "--json", db=tmp_path / "new.db")
    assert code == 0 and json.loads(out)["imported"] == 2
    # Into the source database under another name: the ids belong to alice, so the copies get new
    # ids (alice's memories are never overwritten).
    code, out, err = cli("import", dump, "--profile", "mallory", "--json", db=src)
    assert code == 0 and len(json.loads(out)["newIds"]) == 2
    with MemoryBank(src) as bank:
        assert bank.stats()["perProfile"] == {"alice": 2, "bob": 2, "mallory": 2}


def test_imported_memories_are_queued_for_sync(tmp_path: Path, hosts: Any, s3: Any, cli: Cli) -> None:
    src, dump = tmp_path / "src.db", tmp_path / "d.jsonl"
    with MemoryBank(src) as bank:  # another, unsynced host
        fill(bank)
        dump.write_text("".join(json.dumps(m.to_dict()) + "\n" for p in ("alice", "bob") for m in bank.list(p)))
    host = hosts("importer")
    code, out, err = cli("import", dump, db=host.path, env=s3.env)
    assert code == 0, err
    status = cli.json("sync", "status", "--json", db=host.path, env=s3.env)
    assert status["pending"]["saves"] == 4
    assert s3.keys() == []
    code, out, err = cli("sync", "run", db=host.path, env=s3.env)
    assert code == 0, out + err
    assert len(s3.keys()) == 4


def test_imported_memories_are_indexed_for_recall_as_saved_ones_are(tmp_path: Path) -> None:
    """An import writes many memories per statement: each active one is in the recall index with
    the features a save gives it, an inactive one is not, whatever the statements' size."""
    from memlocal.store.memories import insert_rows, write_row

    with MemoryBank(tmp_path / "saved.db") as saved_bank:
        saved = [saved_bank.save(SaveRequest("p", content=f"Team {name} owns the {thing} service", category="fact")).memory
                 for name, thing in (("alpha", "billing"), ("bravo", "search"), ("charlie", "mail"),
                                     ("delta", "auth"), ("echo", "storage"))]
        saved_bank.store.index_pending()  # fewer than a batch: index them now, to read them
        docs = dict(saved_bank.store.read("SELECT m.id, d.features FROM memory_features_docs d"
                                          " JOIN memories m ON m.rowid = d.rowid"))
    retired = saved[2].with_changes(is_active=False)
    with MemoryBank(tmp_path / "imported.db") as bank:
        with bank.store.transaction() as c:
            insert_rows(c, [write_row(m) for m in (*saved[:2], retired, *saved[3:])], rows_per_statement=2)
        bank.store.index_pending()
        assert dict(bank.store.read("SELECT m.id, d.features FROM memory_features_docs d"
                                    " JOIN memories m ON m.rowid = d.rowid")) == {
            i: f for i, f in docs.items() if i != retired.id}
        for m, word in zip(saved, ("billing", "search", "mail", "auth", "storage")):
            got = [s.memory.id for s in bank.query_with_relevance(RecallQuery("p", word))]
            assert got == ([] if m.id == retired.id else [m.id]), word


def test_an_export_streams_from_one_snapshot_and_the_bank_stays_writable(bank: MemoryBank) -> None:
    from datetime import timedelta

    from memlocal.model import Memory, new_id, utcnow
    from memlocal.store.database import ITER_PAGE_ROWS

    start = utcnow() - timedelta(days=1)
    n = ITER_PAGE_ROWS * 2 + 7  # three pages of the cursor
    rows = [Memory(new_id(), "p" if i % 2 else "a", f"note {i}", f"note {i}", f"note {i}",
                   created_at=start + timedelta(seconds=i)) for i in range(n)]
    assert set(bank.store.import_batch(rows)) == {"imported"}
    exported = bank.export()
    assert not isinstance(exported, list)
    first = next(exported)
    # Mid-export the store takes writes (no lock held between rows); the export shows the
    # memories as of its first row, each once.
    bank.save(SaveRequest("a", "written while the export runs"))
    bank.delete("p", rows[-2].id)
    got = [first, *exported]
    want = sorted(rows, key=lambda m: (m.profile_name, m.created_at, m.id))
    assert [m.id for m in got] == [m.id for m in want]
    oldest = [m.id for m in bank.store.iter_profile("p", oldest_first=True)]
    assert oldest == [m.id for m in want if m.profile_name == "p" and m.id != rows[-2].id]
    assert [m.id for m in bank.store.iter_profile("p")] == oldest[::-1]  # newest first


def test_a_line_that_is_not_json_is_rejected_with_the_reason_json_gives(tmp_path: Path) -> None:
    """The import's one shared decoder says what ``json.loads`` says, the byte-order mark included."""
    from memlocal.bank.portability import import_jsonl

    good = {"id": "mem-0000abcd", "profileName": "p", "rawInput": "x", "processedContent": "x", "summary": "x",
            "category": "fact", "source": "explicit", "confidence": 1.0, "createdAt": "2026-01-01T00:00:00Z"}
    with MemoryBank(tmp_path / "m.db") as bank:
        report = import_jsonl(bank, ["\ufeff" + json.dumps(good), '{"a": NaN}', "[1, 2", json.dumps(good)])
    assert report.imported == 1
    assert report.rejected == [
        (1, "not valid JSON (Unexpected UTF-8 BOM (decode using utf-8-sig) at column 1)"),
        (2, "not valid JSON (NaN is not valid JSON)"),
        (3, "not valid JSON (Expecting ',' delimiter at column 6)")]


def _line(i: int) -> str:
    return json.dumps({"id": f"mem-{i:08x}", "profileName": "bulk", "rawInput": f"Bulk fact number {i} about deploys",
                       "createdAt": "2026-01-02T03:04:05Z"}) + "\n"


def test_a_batch_that_cannot_be_written_stops_the_import_after_the_batches_before_it(tmp_path: Path) -> None:
    """Batches are read while the one before is written (a writer thread): a write that fails
    still ends the import there. Another process takes the write lock while the second batch is
    being read, once the first is stored; nothing after the first is stored, and the error is
    the store's one line."""
    from memlocal.config import Config
    from memlocal.errors import StoreError
    from memlocal.bank.portability import BATCH_SIZE, import_jsonl

    db = tmp_path / "bulk.db"
    blocker = sqlite3.connect(str(db), isolation_level=None, timeout=30)

    def lines() -> Iterator[str]:
        for i in range(BATCH_SIZE):
            yield _line(i)
        # The first batch is written on the writer thread while this one reads on: once it is
        # durable (the second is not handed over before the generator yields it), take the lock.
        deadline = time.monotonic() + 30
        while blocker.execute("SELECT count(*) FROM memories").fetchone()[0] < BATCH_SIZE:
            assert time.monotonic() < deadline, "the first batch was never written"
            time.sleep(0.005)
        blocker.execute("BEGIN IMMEDIATE")
        for i in range(BATCH_SIZE, 2 * BATCH_SIZE + 10):
            yield _line(i)

    with MemoryBank(db, config=Config.load(overrides={"store.busy_timeout_s": 0.2})) as bank:
        try:
            with pytest.raises(StoreError, match="stayed locked by another process"):
                import_jsonl(bank, lines())
        finally:
            blocker.execute("ROLLBACK")
        assert bank.stats()["totalMemories"] == BATCH_SIZE
        assert {m.id for m in bank.export("bulk")} == {f"mem-{i:08x}" for i in range(BATCH_SIZE)}
        # Importing the file again stores the rest and leaves the first batch as it is.
        report = import_jsonl(bank, [_line(i) for i in range(2 * BATCH_SIZE + 10)])
        assert (report.imported, report.unchanged, report.rejected) == (BATCH_SIZE + 10, BATCH_SIZE, [])
    blocker.close()


def test_links_between_batches_follow_the_copies_new_ids_both_ways(tmp_path: Path) -> None:
    """An import into the same database under another profile stores copies with new ids. A link
    from a later batch to an earlier one follows the earlier copy's new id (known when the later
    batch is written: the batches are written in order, one at a time, on the writer thread), and
    a link to a later line is moved once every line is in; a second import creates nothing."""
    from memlocal.bank.portability import BATCH_SIZE, export_memories, import_jsonl

    with MemoryBank(tmp_path / "links.db") as bank:
        report = import_jsonl(bank, [_line(i) for i in range(BATCH_SIZE + 5)])
        assert report.imported == BATCH_SIZE + 5
        early = f"mem-{1:08x}"
        bank.save(SaveRequest("bulk", content="Bulk fact number one about deploys, revised", supersedes=early))
        lines = [json.loads(line) for line in _jsonl(export_memories(bank, "bulk"))]
        # The revision moves into the second batch: it supersedes a line of the first (a link
        # back), and that line is superseded by it (a link forward).
        newest = next(line for line in lines if line.get("supersedes") == early)
        lines.remove(newest)
        lines.insert(BATCH_SIZE + 3, newest)
        text = [json.dumps(line) + "\n" for line in lines]
        report = import_jsonl(bank, text, profile="copy")
        assert report.imported == len(lines) and len(report.new_ids) == len(lines)
        new = {old: fresh for _, old, fresh in report.new_ids}
        assert bank.get("copy", new[newest["id"]]).supersedes == new[early]
        assert bank.get("copy", new[early]).superseded_by == new[newest["id"]]
        again = import_jsonl(bank, text, profile="copy")
        assert (again.imported, again.unchanged) == (0, len(lines))


def _jsonl(memories: Any) -> list[str]:
    import io

    from memlocal.bank.portability import write_jsonl

    buf = io.StringIO()
    write_jsonl(memories, buf)
    return buf.getvalue().splitlines()
