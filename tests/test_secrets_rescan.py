"""A rescan removes a credential found after it was stored: with a new pattern in
``secrets.extra_patterns``, ``memlocal redact --rescan`` redacts every stored version, the
automation notes and the audit rows; the bucket's objects and the profile's snapshot are
rewritten, and the old bytes leave the database file and its WAL, on the writer and on a second
host after its next pass. ``--dry-run`` changes nothing."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any, Callable

import pytest

from memlocal import MemoryBank, RecallQuery, SaveRequest
from memlocal.services.redact import forget_extra_patterns

TOKEN = "acme_tok_9f8e7d6c5b4a3928"
HEX = b"9f8e7d6c5b4a3928"  # the token's distinctive part, also as the full-text index's term
PATTERNS = {"MEMLOCAL_SECRETS_EXTRA_PATTERNS": "acme-token: acme_tok_[0-9a-f]{16}",
            "MEMLOCAL_SYNC_SNAPSHOT_MIN_OBJECTS": "2"}


@pytest.fixture(autouse=True)
def _patterns_of_this_test_only() -> Any:
    """A bank opened with secrets.extra_patterns (the CLI in this process) adds them for the
    process; the next test starts without them."""
    forget_extra_patterns()
    yield
    forget_extra_patterns()


def _tables(db: Path) -> list[Any]:
    """What a rescan may change: the memories, the notes, the change log and the audit rows."""
    import sqlite3

    with sqlite3.connect(db) as c:
        return [c.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
                for t in ("memories", "automation_notes", "sync_outbox", "automation_outbox", "injections")]


def _file_bytes(db: Path) -> bytes:
    """The database file, its WAL and shared memory: every byte the store keeps."""
    return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))


def _bucket_bytes(s3: Any) -> dict[str, bytes]:
    out = {}
    for key in s3.keys(""):
        body = s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
        out[key] = gzip.decompress(body) if key.endswith(".gz") else body
    return out


def test_dry_run_changes_nothing_and_a_local_rescan_purges_the_file(tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "m.db"
    with MemoryBank(db) as bank:
        old = bank.save(SaveRequest("ops", f"deploy with {TOKEN} on fridays")).memory
        bank.save(SaveRequest("ops", f"deploy with {TOKEN} on mondays", supersedes=old.id))  # the old one is history now
        bank.automations.put("nightly", f"last run used {TOKEN}")
    assert _file_bytes(db).count(HEX) > 0
    before = _tables(db)
    out = cli.at(db).json("redact", "--rescan", "--dry-run", "--json", env=PATTERNS)
    assert out["dryRun"] and out["count"] == 3 and out["byKind"] == {"acme-token": 3}
    assert {(c["what"], c["kinds"][0]) for c in out["changed"]} == {("memory", "acme-token"), ("note", "acme-token")}
    assert _tables(db) == before and HEX in _file_bytes(db) and TOKEN not in str(out)
    r = cli.at(db)("redact", "--rescan", env=PATTERNS)
    assert r.exit_code == 0, r.output
    assert "redacted 3 things (acme-token 3)" in r.stdout and f"memory {old.id} (ops): acme-token" in r.stdout
    assert TOKEN not in r.output and "purged" in r.stdout
    assert HEX not in _file_bytes(db)
    with MemoryBank(db) as bank:
        assert "[REDACTED:acme-token]" in bank.store.get("ops", old.id).processed_content  # history too
        assert bank.automations.get("nightly").note == "last run used [REDACTED:acme-token]"  # type: ignore[union-attr]
    again = cli.at(db).json("redact", "--rescan", "--json", env=PATTERNS)
    assert again["count"] == 0 and not again["purged"]


@pytest.mark.s3_servers("moto")
def test_a_rescan_reaches_the_bucket_the_snapshot_and_a_second_host(hosts: Callable[..., Any], s3: Any,
                                                                     cli: Any) -> None:
    a = hosts("a", sync__snapshot_min_objects=2)
    old = a.bank.save(SaveRequest("ops", f"deploy with {TOKEN} on fridays")).memory
    a.bank.save(SaveRequest("ops", f"deploy with {TOKEN} on mondays", supersedes=old.id))
    a.bank.save(SaveRequest("ops", "standup is at 9:30 in the small room"))
    a.bank.automations.put("nightly", f"last run used {TOKEN}")
    a.sync()
    a.sync()  # the profile agrees with the bucket: its snapshot is written
    assert any(k.startswith("memlocal/snapshots/ops/") for k in s3.keys(""))
    b = hosts("b", sync__snapshot_min_objects=2)
    b.sync()
    assert HEX in _file_bytes(b.path) and any(HEX in body for body in _bucket_bytes(s3).values())

    out = cli.at(a.path).json("redact", "--rescan", "--json", env=PATTERNS)
    assert out["count"] == 3 and out["purged"] and [p["result"] for p in out["syncPasses"]] == ["ok", "ok"]
    bucket = _bucket_bytes(s3)
    assert [k for k, body in bucket.items() if HEX in body] == []
    assert any(k.startswith("memlocal/snapshots/ops/") for k in bucket)  # written again, redacted
    assert HEX not in _file_bytes(a.path)

    b.sync()  # the other host converges like on any update, and purges its file after the pass
    assert "[REDACTED:acme-token]" in b.bank.get("ops", old.id).processed_content
    assert HEX not in _file_bytes(b.path)



def test_import_with_rescan_runs_the_same_pass(tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "m.db"
    with MemoryBank(db) as bank:
        stored = bank.save(SaveRequest("ops", f"deploy with {TOKEN} on fridays")).memory  # before the pattern existed
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"id": "mem-0000abcd", "profileName": "ops", "rawInput": "standup at 9:30",'
                     ' "processedContent": "standup at 9:30", "summary": "standup", "category": "fact",'
                     ' "createdAt": "2024-01-01T00:00:00Z"}\n')
    out = cli.at(db).json("import", str(lines), "--rescan", "--json", env=PATTERNS)
    assert out["imported"] == 1
    assert out["rescan"]["changed"] == [{"what": "memory", "id": stored.id, "profile": "ops", "kinds": ["acme-token"]}]
    assert HEX not in _file_bytes(db)


def test_a_rewrite_never_turns_a_deletion_made_since_the_read_into_a_put(tmp_path: Path) -> None:
    """A rescan reads a batch, then rewrites it: a memory deleted in between stays deleted, and
    its queued deletion is not replaced by a put (which would have pushed it back)."""
    from memlocal.bank.rescan import redacted_memory

    with MemoryBank.open(tmp_path / "r.db") as bank:
        kept = bank.save(SaveRequest("ops", "the deploy key is acme_tok_9f8e7d6c5b4a3928", use_llm=False)).memory
        gone = bank.save(SaveRequest("ops", "the backup key is acme_tok_1a2b3c4d5e6f7081", use_llm=False)).memory
        read = [(m, redacted_memory(m)[0].with_changes(summary="rewritten")) for m in (kept, gone)]
        bank.delete("ops", gone.id)
        written = bank.store.rewrite(read)
        assert [m.id for m in written] == [kept.id]
        queued = dict(bank.store.conn.execute("SELECT id, op FROM sync_outbox").fetchall())
        assert queued[gone.id] == "delete" and queued[kept.id] == "put"
        with pytest.raises(Exception):
            bank.get("ops", gone.id)


def test_a_rewrite_keeps_what_another_connection_changed_since_the_read(tmp_path: Path) -> None:
    """A rescan reads a memory, then rewrites its texts: a change another connection (another
    process on the same file) made to its other fields in between stays. Was: the whole row as
    read was written back, so a supersession made meanwhile lost its link (supersededBy)."""
    path = tmp_path / "two.db"
    with MemoryBank.open(path) as bank, MemoryBank.open(path) as other:
        old = bank.save(SaveRequest("ops", f"the deploy key is {TOKEN}", use_llm=False)).memory
        read = bank.get("ops", old.id)  # the rescan's read
        clean = "the deploy key is [REDACTED:acme-token]"
        after = read.with_changes(raw_input=clean, processed_content=clean, summary=clean)
        newer = other.save(SaveRequest("ops", "the deploy key now lives in the vault", use_llm=False, supersedes=old.id)).memory
        written = bank.store.rewrite([(read, after)])
        assert [m.id for m in written] == [old.id]
        stored = other.get("ops", old.id)
        assert stored.processed_content == clean and stored.raw_input == clean and stored.summary == clean
        assert stored.is_active is False and stored.superseded_by == newer.id  # kept, not the read's
        assert written[0].superseded_by == newer.id  # what was written is what is stored
        assert [m.id for m in other.history("ops", newer.id)] == [old.id, newer.id]
        assert bank.recall(RecallQuery("ops", "deploy key vault"))[0].memory.id == newer.id


def test_a_rewrite_never_overwrites_a_text_changed_since_the_read(tmp_path: Path) -> None:
    """Another connection changed the text itself between the read and the rewrite: the rewrite
    of that memory is not written (check-and-set on what it read); the rescan reads it again and
    redacts the new text."""
    import sqlite3

    from memlocal.bank import rescan
    from memlocal.services.redact import use_extra_patterns

    path = tmp_path / "cas.db"
    with MemoryBank.open(path) as bank:
        m = bank.save(SaveRequest("ops", f"the deploy key is {TOKEN}", use_llm=False)).memory
        read = bank.get("ops", m.id)
        clean = "the deploy key is [REDACTED:acme-token]"
        after = read.with_changes(raw_input=clean, processed_content=clean, summary=clean)
        edited = f"the deploy key is {TOKEN}, rotated monthly"
        with sqlite3.connect(path) as c:  # another process's write (a pulled edit, say)
            c.execute("UPDATE memories SET processed_content = ?, raw_input = ? WHERE id = ?", (edited, edited, m.id))
        assert bank.store.rewrite([(read, after)]) == []
        assert bank.get("ops", m.id).processed_content == edited  # not overwritten with the stale text
        # The rescan's write goes round again on what is stored now: read again, redacted again.
        use_extra_patterns([("acme-token", "acme_tok_[0-9a-f]{16}")])
        [written] = rescan.rewrite(bank.store, [(read, after)])
        want = "the deploy key is [REDACTED:acme-token], rotated monthly"
        assert written.processed_content == want and bank.get("ops", m.id).processed_content == want
        assert TOKEN not in bank.get("ops", m.id).raw_input
