"""Several processes on one database, and a process killed mid-stream: nothing acknowledged is lost."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable

import support
import pytest

from memlocal import MemoryBank, RecallQuery, SaveRequest, StoreError
from memlocal.recall import RecallTuning

WRITER = textwrap.dedent(
    """
    import sys
    from memlocal import MemoryBank, SaveRequest
    path, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with MemoryBank(path) as bank:
        for i in range(count):
            bank.save(SaveRequest("shared", f"worker {worker} memory {i}", use_llm=False))
    """
)

STREAM = textwrap.dedent(
    """
    import sys
    from memlocal import MemoryBank, SaveRequest
    bank = MemoryBank(sys.argv[1])
    i = 0
    while True:
        result = bank.save(SaveRequest("stream", f"streamed memory {i} " + "x" * (i % 500), use_llm=False))
        # Acknowledge only after save() returned: the line is the caller's proof of a done save.
        sys.stdout.write(result.memory.id + "\\n")
        sys.stdout.flush()
        i += 1
    """
)


@pytest.mark.slow
def test_four_processes_saving_at_once(db_path: Path) -> None:
    MemoryBank(db_path).close()  # create the schema first, as a deployed host would have it
    procs = [
        support.spawn([sys.executable, "-c", WRITER, str(db_path), str(w), "500"],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(4)
    ]
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            assert "locked" not in err
    finally:
        for p in procs:
            support.stop(p, grace_s=0)
    with MemoryBank(db_path) as bank:
        page = bank.list("shared", limit=1000)
        assert page.total == 2000
        texts = set()
        for offset in range(0, 2000, 1000):
            texts |= {m.raw_input for m in bank.list("shared", limit=1000, offset=offset)}
        assert texts == {f"worker {w} memory {i}" for w in range(4) for i in range(500)}
        assert bank.store.integrity_check() == "ok"


@pytest.mark.slow
def test_sigkill_mid_stream_loses_no_acknowledged_save(db_path: Path) -> None:
    MemoryBank(db_path).close()
    proc = support.spawn([sys.executable, "-c", STREAM, str(db_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acknowledged: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            acknowledged.append(line.strip())
            if len(acknowledged) >= 300:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        support.stop(proc, grace_s=0)
    # Lines already written by the child before the kill are acknowledged too.
    acknowledged += [line.strip() for line in proc.stdout.read().splitlines() if line.strip()]
    with MemoryBank(db_path) as bank:
        assert bank.store.integrity_check() == "ok"
        present = {m.id for m in bank.store.iter_profile("stream")}
        assert set(acknowledged) <= present
        assert len(present) >= 300


def test_a_writer_waits_the_busy_timeout_once_then_fails_in_one_line(
        db_path: Path, make_bank: Callable[..., MemoryBank]) -> None:
    """SQLite's busy_timeout is the one wait (no retry loop on top that multiplies it)."""
    bank = make_bank(db_path, store__busy_timeout_s=0.5)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"stayed locked by another process for store.busy_timeout_s \(0.5 s\)"):
            bank.save(SaveRequest("p", content="blocked"))
        elapsed = time.monotonic() - started
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert 0.4 <= elapsed < 1.5, elapsed  # the old loop waited max(timeout, 1 s) x 2 on top of it
    assert bank.save(SaveRequest("p", content="free again")).memory.processed_content == "free again"


def test_a_transaction_inside_one_joins_it(bank: MemoryBank, db_path: Path) -> None:
    """A store write inside a transaction of the same thread (a save's insert inside the save's
    checks) joins it: one BEGIN and one COMMIT, nothing visible to another connection before the
    outer block ends, and an error that leaves the outer block rolls back both."""
    store = bank.store
    other = sqlite3.connect(db_path)
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        with store.transaction() as c:
            c.execute("INSERT INTO meta (key, value) VALUES ('outer', '1')")
            store.meta_set("inner", "2")  # a transaction of its own, here joined
            assert other.execute("SELECT count(*) FROM meta WHERE key IN ('outer', 'inner')").fetchone()[0] == 0
        with pytest.raises(RuntimeError):
            with store.transaction() as c:
                store.meta_set("lost", "3")
                raise RuntimeError("after the inner block")
    finally:
        store.conn.set_trace_callback(None)
        rows = dict(other.execute("SELECT key, value FROM meta WHERE key IN ('outer', 'inner', 'lost')").fetchall())
        other.close()
    assert rows == {"outer": "1", "inner": "2"}
    assert statements.count("BEGIN IMMEDIATE") == 2 and statements.count("COMMIT") == 1, statements
    assert bank.save(SaveRequest("p", content="writes go on")).memory.processed_content == "writes go on"


def test_access_bumps_commit_without_the_fsync_and_saves_keep_it(bank: MemoryBank, db_path: Path) -> None:
    """MarkAccessed is best-effort (spec): recall's bump commits at synchronous=NORMAL, visible to
    another connection at once, and the connection is back on FULL for the next save."""
    saved = bank.save(SaveRequest("p", "The user deploys with a blue-green switch on Fridays", use_llm=False)).memory
    assert bank.store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    seen: list[int] = []
    bank.store.conn.set_trace_callback(lambda sql: seen.append(1) if "synchronous = NORMAL" in sql else None)
    try:
        assert [r.memory.id for r in bank.recall(RecallQuery("p", "blue-green deploys"))] == [saved.id]
    finally:
        bank.store.conn.set_trace_callback(None)
    assert seen, "the bump did not relax the fsync"
    assert bank.store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    other = sqlite3.connect(db_path)
    try:
        assert other.execute("SELECT access_count FROM memories WHERE id = ?", (saved.id,)).fetchone()[0] == 1
    finally:
        other.close()


def test_access_bumps_leave_the_checkpoint_to_the_background_thread(bank: MemoryBank, db_path: Path) -> None:
    """Without an index in memory (a one-shot process) a recall writes its bump before it
    returns, and that commit never checkpoints the log inline (autocheckpoint off for it, back
    on for the next save); every ``LAZY_CHECKPOINT_COMMITS`` of them the bank's background
    thread checkpoints it instead."""
    from memlocal.store import LAZY_CHECKPOINT_COMMITS

    # Every query answered from the rows, as a one-shot process does.
    bank._index().tuning = RecallTuning(cold_queries=10**9)
    saved = bank.save(SaveRequest("p", "The user deploys with a blue-green switch on Fridays", use_llm=False)).memory
    seen: list[str] = []
    bank.store.conn.set_trace_callback(lambda sql: seen.append(sql) if "wal_autocheckpoint" in sql else None)
    try:
        for _ in range(LAZY_CHECKPOINT_COMMITS - 1):
            assert bank.recall(RecallQuery("p", "blue-green deploys"))
    finally:
        bank.store.conn.set_trace_callback(None)
    assert seen[:2] == ["PRAGMA wal_autocheckpoint = 0", "PRAGMA wal_autocheckpoint = 1000"]
    assert bank.store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    assert bank.store.lazy_commits == LAZY_CHECKPOINT_COMMITS - 1
    assert bank._access_marker is None  # nothing handed over yet
    bank.recall(RecallQuery("p", "blue-green deploys"))
    assert bank.store.lazy_commits == 0
    bank.drain(10)
    other = sqlite3.connect(db_path)
    try:
        busy, log_frames, done = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (busy, done) == (0, log_frames)  # nothing left that the background one could copy
        assert other.execute("SELECT access_count FROM memories WHERE id = ?", (saved.id,)).fetchone()[0] == LAZY_CHECKPOINT_COMMITS
    finally:
        other.close()


def test_a_warm_recall_s_bump_is_written_and_checkpointed_off_the_caller_s_path(bank: MemoryBank, db_path: Path) -> None:
    """With the index in memory (a process that stays up) the caller's connection writes
    nothing for a recall: the bump goes to the background writer, whose commits never
    checkpoint inline either; every ``LAZY_CHECKPOINT_COMMITS`` of them a second background
    thread checkpoints the log. Nothing is lost: after them the rows hold every bump."""
    from memlocal.store import LAZY_CHECKPOINT_COMMITS

    index = bank._index()
    index.tuning = RecallTuning(cold_queries=0, background=False)
    saved = bank.save(SaveRequest("p", "The user deploys with a blue-green switch on Fridays", use_llm=False)).memory
    assert bank.query_with_relevance(RecallQuery("p", "blue-green deploys"))
    writes: list[str] = []
    bank.store.conn.set_trace_callback(lambda sql: writes.append(sql) if sql.lstrip().upper().startswith(
        ("UPDATE", "INSERT", "BEGIN IMMEDIATE", "PRAGMA WAL_CHECKPOINT")) else None)
    try:
        for _ in range(LAZY_CHECKPOINT_COMMITS):
            assert bank.recall(RecallQuery("p", "blue-green deploys"))
    finally:
        bank.store.conn.set_trace_callback(None)
    assert writes == []
    bank.drain(10)
    marker = bank._access_marker
    assert marker is not None and set(marker._stores) == {marker._WRITES, marker._CHECKPOINTS}
    assert marker._stores[marker._WRITES].lazy_commits == 0
    other = sqlite3.connect(db_path)
    try:
        busy, log_frames, done = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (busy, done) == (0, log_frames)
        assert other.execute("SELECT access_count FROM memories WHERE id = ?", (saved.id,)).fetchone()[0] == LAZY_CHECKPOINT_COMMITS
    finally:
        other.close()


def test_closing_while_a_bump_queues_its_checkpoint_neither_hangs_nor_warns(
        bank: MemoryBank, db_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The background writer's 64th commit asks for a checkpoint; when the bank is closing by
    then, the checkpoint is dropped quietly and the close returns (it once waited forever on
    the writer, which waited on a lock it held itself)."""
    import logging
    import threading

    from memlocal.store.access import AccessMarker
    from memlocal.store import LAZY_CHECKPOINT_COMMITS

    saved = bank.save(SaveRequest("p", "The user deploys with a blue-green switch on Fridays", use_llm=False)).memory
    marker = AccessMarker(db_path, busy_timeout_s=30)
    for _ in range(LAZY_CHECKPOINT_COMMITS - 1):
        marker.submit("p", [saved.id]).result(10)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the 64th bump waits for this lock
    last = marker.submit("p", [saved.id])
    closing = threading.Thread(target=marker.close)
    with caplog.at_level(logging.WARNING, logger="memlocal"):
        closing.start()
        while not marker._closed:
            time.sleep(0.001)
        blocker.execute("COMMIT")
        blocker.close()
        closing.join(10)
        assert not closing.is_alive()
    assert last.result(0) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert bank.get("p", saved.id).access_count == LAZY_CHECKPOINT_COMMITS
