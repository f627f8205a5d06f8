"""The injection audit trail: one row per rendered block, written without
delaying the run, answering "which runs saw this memory?" and "what did the last run see?"."""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from api_live import LiveServer
import support
from support import http

from memlocal import MemoryBank, SaveRequest
from memlocal.faces.api import create_app
from memlocal.services.audit import host_key, query_hash
from memlocal.config import Config
from memlocal.model import utcnow


def _key(bank: MemoryBank) -> bytes:
    return host_key(bank.store.path)


def _bank(path: Path, **settings: object) -> MemoryBank:
    return MemoryBank(path, config=Config.load(overrides=settings))


def test_a_row_per_rendered_block(tmp_path: Path) -> None:
    with _bank(tmp_path / "a.db") as bank:
        tea = bank.save(SaveRequest("p", content="Prefers green tea", category="preference")).memory
        deploy = bank.save(SaveRequest("p", content="Deploys the server on Fridays", category="behavior")).memory
        other = bank.save(SaveRequest("q", content="Prefers coffee", category="preference")).memory
        block = bank.inject("p", "@memory", "When does the server deploy?")
        bank.inject("p", "@memory", "Write a poem")
        bank.inject("q", "@memory", "hello")
        bank.inject("p", "@default", "no memory tools: no block, no row")
        bank.drain()
        last, first = bank.injections("p")
        assert (first.core, first.relevant) == ((tea.id,), (deploy.id,))
        assert first.chars == len(block.split("\nWhen does")[0]) and first.query_hash == query_hash(
            "When does the server deploy?", _key(bank))
        assert last.core == (tea.id,) and last.query_hash == query_hash("Write a poem", _key(bank))
        saw_deploy = [i.id for i in (last, first) if deploy.id in i.relevant]
        assert [i.id for i in bank.injections("p", memory_id=deploy.id)] == saw_deploy
        assert [i.id for i in bank.injections("p", memory_id=tea.id)] == [last.id, first.id]
        assert first.tier_of(deploy.id) == "relevant" and first.tier_of(other.id) is None
        assert [i.core for i in bank.injections("q")] == [(other.id,)]
        # The query text is not stored anywhere in the trail.
        assert "deploy" not in json.dumps([i.to_dict() for i in bank.injections("p")])


def test_the_render_does_not_wait_for_the_audit_row(tmp_path: Path) -> None:
    """Another process holds the write lock: the run still gets its block at once."""
    db = tmp_path / "lock.db"
    with _bank(db, **{"store.busy_timeout_s": 0.5}) as bank:
        bank.save(SaveRequest("p", content="Prefers green tea", category="preference"))
        bank.build_context_block("p", "tea")  # imports and the index: what a loaded machine makes slow
        bank.drain()
        blocker = sqlite3.connect(str(db), isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            done = threading.Event()

            def run() -> None:
                bank.build_context_block("p", "tea")
                done.set()

            threading.Thread(target=run, daemon=True).start()
            assert done.wait(0.4), "the run waited for the audit row (the lock is held for 0.5 s+)"
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        bank.drain()


def test_cap_and_retention(tmp_path: Path) -> None:
    with _bank(tmp_path / "cap.db", **{"audit.max_rows": 3, "audit.retention_days": 1.0}) as bank:
        bank.save(SaveRequest("p", content="Prefers green tea", category="preference"))
        old = utcnow() - timedelta(days=2)
        bank.build_context_block("p", "old run", now=old)
        bank.drain()
        assert len(bank.injections("p")) == 1
        for i in range(5):
            bank.build_context_block("p", f"run {i}")
        bank.drain()
        rows = bank.injections("p", limit=50)
        assert [r.query_hash for r in rows] == [query_hash(f"run {i}", _key(bank)) for i in (4, 3, 2)]
        assert bank.store.read("SELECT count(*) FROM injection_memories")[0][0] == 3  # cascaded
    with _bank(tmp_path / "off.db", **{"audit.enabled": False}) as bank:
        bank.build_context_block("p", "x")
        bank.drain()
        assert bank.injections("p") == []


def test_cli_and_rest_answer_both_questions(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    with _bank(db) as bank:
        tea = bank.save(SaveRequest("p", content="Prefers green tea", category="preference")).memory
        bank.build_context_block("p", "tea please")
        bank.build_context_block("p", "second run")
        bank.drain()
        with LiveServer(create_app(bank)) as server:
            r = http.get(server.url + "/api/memory-bank/p/injections", params={"limit": 1})
            assert r.status_code == 200
            (last,) = r.json()["injections"]
            assert last["queryHash"] == query_hash("second run", _key(bank)) and last["core"] == [tea.id]
            r = http.get(server.url + "/api/memory-bank/p/injections", params={"memoryId": tea.id})
            assert len(r.json()["injections"]) == 2
            assert http.get(server.url + "/api/memory-bank/p/injections",
                            params={"memoryId": "nope"}).status_code == 400
    out = support.run([sys.executable, "-m", "memlocal", "--db", str(db), "audit", "-p", "p", "--memory", tea.id,
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [i["core"] for i in json.loads(out.stdout)["injections"]] == [[tea.id], [tea.id]]
    out = support.run([sys.executable, "-m", "memlocal", "--db", str(db), "audit", "-p", "p"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Prefers green tea" in out.stdout and query_hash("tea please", host_key(db)) in out.stdout


def test_the_audit_table_shows_what_each_run_saw_evidence_first(tmp_path: Path, cli: Any) -> None:
    """Every run carries the same core preferences: a row shows its query's evidence entries
    first, by their summaries, and how many entries each tier had, so the rows differ."""
    db = tmp_path / "runs.db"
    with _bank(db) as bank:
        for i, food in enumerate(("oat milk", "rye bread", "black coffee", "dark chocolate", "green apples")):
            bank.save(SaveRequest("p", content=f"Prefers {food} at breakfast number {i}", category="preference"))
        bank.save(SaveRequest("p", content="The staging database lives on host db-7", category="general"))
        bank.save(SaveRequest("p", content="Deploys go out on Thursdays after the standup", category="general"))
        bank.build_context_block("p", "which host runs the staging database?")
        bank.build_context_block("p", "when do deploys go out?")
        bank.drain()
        runs = bank.injections("p", limit=2)
    assert all(len(r.core) >= 4 for r in runs) and all(r.relevant for r in runs)
    res = cli.at(db)("audit", "-p", "p", env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    header, _rule, deploys, staging = res.stdout.splitlines()
    assert header.split() == ["at", "chars", "query", "hash", "core", "relevant", "saw"]
    # Counts per tier, then the evidence entries first (cut at a word with "…" to fit).
    assert f"  {len(runs[0].core)}  " in deploys and f"  {len(runs[0].relevant)}  " in deploys
    assert "Deploys go out on Thursdays" in deploys and "staging" not in deploys
    assert "The staging database lives on host db-7" in staging
    assert all(len(line) <= 100 for line in res.stdout.splitlines())


@pytest.mark.parametrize("bad", [["audit", "-p", "../x"], ["audit", "-p", "p", "--memory", "mem-x"]])
def test_cli_bad_input_is_one_line(tmp_path: Path, bad: list[str]) -> None:
    out = support.run([sys.executable, "-m", "memlocal", "--db", str(tmp_path / "x.db"), *bad],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1, out.stderr


def _key_of(db: str) -> str:
    from memlocal.services.audit import host_key

    return host_key(Path(db)).hex()


def test_the_query_hash_is_keyed_by_a_host_secret(tmp_path: Path) -> None:
    """Someone holding the database alone cannot confirm a guessed query: the hash is an HMAC
    under a per-host key kept beside the database (0600), which every process of the host shares."""
    import hashlib
    import hmac
    import multiprocessing
    import os
    import stat

    db = tmp_path / "k.db"
    with multiprocessing.get_context("fork").Pool(4) as pool:  # several processes create it at once
        keys = set(pool.map(_key_of, [str(db)] * 8))
    assert len(keys) == 1
    key_file = tmp_path / "k.db.audit-key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name != "k.db.audit-key"] == []  # no temporary left behind
    key = bytes.fromhex(keys.pop())
    with _bank(db) as bank:
        bank.save(SaveRequest("p", content="Prefers green tea", category="preference"))
        bank.build_context_block("p", "deploy the tea service")
        bank.drain()
        (row,) = bank.injections("p")
    assert row.query_hash != hashlib.sha256(b"deploy the tea service").hexdigest()[:16]
    assert row.query_hash == hmac.new(key, b"deploy the tea service", hashlib.sha256).hexdigest()[:16]
    assert row.query_hash == query_hash("deploy the tea service", key)
    # Rows written before the key existed (a plain SHA-256 prefix) stay readable as they are.
    with sqlite3.connect(str(db)) as conn:
        conn.execute("INSERT INTO injections (at_us, profile, query_hash, chars) VALUES (1, 'p', 'abcdef0123456789', 0)")
    with _bank(db) as bank:
        assert "abcdef0123456789" in [r.query_hash for r in bank.injections("p", limit=5)]
