"""One line, never a traceback, on every face (CLI, REST, MCP tools) when the database is full or
corrupt, the audit tables are damaged, a config value has the wrong type or a config path is a
directory; an MCP request whose id cannot be echoed still gets an answer; ``supersedes`` holds
memory ids only, and ``history`` is right on a cycle."""

from __future__ import annotations

import io
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from api_live import LiveServer
import support
from support import corrupt_memories_table, http_client

from memlocal import MemoryBank, SaveRequest
from memlocal.faces.api import create_app
from memlocal.config import Config
from memlocal.errors import ConfigError, StoreError, ValidationError
from memlocal.bank.portability import import_jsonl
from memlocal.faces.tools import dispatch

P = "s2"
BAD_ID = "../../etc/passwd"


def one_line_error(text: str) -> None:
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), text


@pytest.fixture
def rest(tmp_path: Path) -> Iterator[tuple[MemoryBank, Any]]:
    with MemoryBank(tmp_path / "api.db") as bank, LiveServer(create_app(bank)) as server, \
            http_client(base_url=server.url, timeout=30) as client:
        yield bank, client


# --- supersedes holds memory ids; history on a cycle ------------------------------------------------


def _line(mid: str, text: str, **extra: Any) -> str:
    return json.dumps({"id": mid, "profileName": P, "rawInput": text, "createdAt": "2024-01-01T00:00:00Z", **extra})


def test_supersedes_is_a_memory_id_on_every_face(tmp_path: Path, cli: Any, rest: tuple[MemoryBank, Any]) -> None:
    bank, client = rest
    old = bank.save(SaveRequest(P, content="Ana lives in Porto")).memory
    r = client.post(f"/api/profiles/{P}/memories", json={"content": "Ana lives in Lisbon", "supersedes": BAD_ID})
    assert r.status_code in (400, 422) and "\n" not in r.json()["error"]["message"]
    with pytest.raises(ValidationError, match="memory_save"):
        dispatch(bank, "memory_save", {"content": "Ana lives in Lisbon", "supersedes": BAD_ID}, P)
    code, _out, err = cli("save", "-p", P, "--content", "x", "--supersedes", BAD_ID)
    assert code == 1
    one_line_error(err)
    # Import: a link that is not a memory id rejects the line, with one line of reason.
    report = import_jsonl(bank, io.StringIO("\n".join([
        _line("mem-cc000001", "a", supersedes=BAD_ID), _line("mem-cc000002", "b", supersededBy=BAD_ID),
        _line("mem-cc000003", "c", supersedes=old.id)])))
    assert report.imported == 1 and [n for n, _ in report.rejected] == [1, 2]
    assert all("supersede" in reason and "\n" not in reason for _, reason in report.rejected)
    path = tmp_path / "bad.jsonl"
    path.write_text(_line("mem-cc000004", "d", supersedes=BAD_ID) + "\n")
    code, out, err = cli("import", str(path))
    assert "rejected 1" in out + err and "Traceback" not in out + err


def test_another_writers_object_is_read_without_a_link_that_is_not_an_id() -> None:
    from memlocal.model import read_foreign

    m = read_foreign(json.loads(_line("mem-cc000001", "a", supersedes=BAD_ID, supersededBy="mem-cc000002", other=1)))
    assert m.supersedes is None and m.superseded_by == "mem-cc000002" and m.extra == {
        "supersededBy": "mem-cc000002", "other": 1}


def test_history_is_right_on_a_cycle_made_by_import(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "cycle.jsonl"
    path.write_text("\n".join([
        _line("mem-cc000001", "Ana lives in Porto", isActive=False, supersedes="mem-cc000002", supersededBy="mem-cc000002"),
        _line("mem-cc000002", "Ana lives in Lisbon", isActive=False, supersedes="mem-cc000001", supersededBy="mem-cc000001"),
    ]) + "\n")
    assert cli("import", str(path)).exit_code == 0
    code, out, err = cli("history", "-p", P, "mem-cc000001")
    assert code == 0, err
    assert "no longer stored" not in out and "cycle" in out
    assert out.count("mem-cc000001") >= 1 and "mem-cc000002" in out


# --- the database is full ---------------------------------------------------------------------------


def _fill(bank: MemoryBank) -> None:
    """Cap the bank's connection at its current size: the next write needing a page is SQLITE_FULL."""
    pages = bank.store.conn.execute("PRAGMA page_count").fetchone()[0]
    bank.store.conn.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_database_is_one_line_in_the_library_rest_and_tools(rest: tuple[MemoryBank, Any]) -> None:
    bank, client = rest
    _fill(bank)
    big = "word " * 800
    with pytest.raises(StoreError, match="full"):
        bank.save(SaveRequest(P, content=big))
    r = client.post(f"/api/profiles/{P}/memories", json={"content": big + "x"})
    assert r.status_code == 507 and r.json()["error"]["code"] == "disk_full"
    with pytest.raises(StoreError, match="full"):
        dispatch(bank, "memory_save", {"content": big + "y"}, P)


def test_cli_save_on_a_full_disk_is_one_line(tmp_path: Path, cli: Any) -> None:
    """A real write failure: the file size limit (RLIMIT_FSIZE) of the process stops the write."""
    db = tmp_path / "full.db"
    assert cli.at(db)("save", "-p", P, "--content", "first").exit_code == 0
    # Room for the shared-memory index (32 KiB) and a few log frames: opening works, the save's
    # commit does not fit.
    limit = 36000
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (%d, %d)); "
              "from memlocal.faces.cli import main; sys.argv = ['memlocal'] + sys.argv[1:]; main()" % (limit, limit))
    p = support.run([sys.executable, "-c", script, "--db", str(db), "save", "-p", P, "--content",
                        "more text " * 300], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    one_line_error(p.stderr)
    assert "disk" in p.stderr or "full" in p.stderr


def test_only_the_store_catches_sqlite_errors() -> None:
    """SQLite's errors are translated in one place (``Database.translate``, docs/storage.md): a
    module above the store that caught them would make its own message, or miss the full disk's
    and the corrupt file's one line. Such a module uses ``store.translated("what failed")``."""
    import re

    root = Path(__file__).resolve().parent.parent
    store = root / "memlocal" / "store"
    catches = re.compile(r"except\b.*\bsqlite3\.")
    offenders = [f"{p.relative_to(root)}:{n}" for folder in ("memlocal", "sync") for p in sorted((root / folder).rglob("*.py"))
                 if store not in p.parents
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if catches.search(line)]
    assert not offenders, offenders


# --- a corrupt b-tree page ----------------------------------------------------------------------------




def test_a_corrupt_page_is_one_line_on_every_face(tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "corrupt.db"
    for i in range(3):
        assert cli.at(db)("save", "-p", P, "--content", f"memory number {i}").exit_code == 0
    corrupt_memories_table(db)
    for args in (("save", "-p", P, "--content", "one more"), ("list", "-p", P), ("recall", "-p", P, "memory")):
        code, out, err = cli.at(db)(*args)
        assert code == 1, out
        one_line_error(err)
        assert "corrupt" in err
    with MemoryBank(db) as bank:
        with pytest.raises(StoreError, match="corrupt"):
            dispatch(bank, "memory_list", {}, P)
        with LiveServer(create_app(bank)) as server, http_client(base_url=server.url, timeout=30) as client:
            r = client.get(f"/api/profiles/{P}/memories")
            assert r.status_code == 500 and r.json()["error"]["code"] == "corrupt"


# --- damaged audit tables -------------------------------------------------------------------------------


def test_damaged_audit_rows_are_skipped_and_a_missing_table_is_one_line(tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "audit.db"
    with MemoryBank(db) as bank:
        tea = bank.save(SaveRequest(P, content="Prefers green tea", category="preference")).memory
        for q in ("one", "two", "three"):
            bank.inject(P, "@memory", q)
        bank.drain()
    conn = sqlite3.connect(str(db), isolation_level=None)
    first, second, _third = [r[0] for r in conn.execute("SELECT id FROM injections ORDER BY id")]
    conn.execute("UPDATE injections SET at_us = 'not a time' WHERE id = ?", (first,))
    conn.execute("UPDATE injection_memories SET tier = 'bogus' WHERE injection_id = ?", (second,))
    conn.close()
    code, out, err = cli.at(db)("audit", "-p", P, "--json")
    assert code == 0, err
    rows = json.loads(out)["injections"]
    assert len(rows) == 2 and rows[0]["core"] == [tea.id]
    with MemoryBank(db) as bank, LiveServer(create_app(bank)) as server, \
            http_client(base_url=server.url, timeout=30) as client:
        assert client.get(f"/api/memory-bank/{P}/injections").status_code == 200
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("DROP TABLE injection_memories")
    conn.close()
    code, out, err = cli.at(db)("audit", "-p", P)
    assert code == 1
    one_line_error(err)
    with MemoryBank(db) as bank, LiveServer(create_app(bank)) as server, \
            http_client(base_url=server.url, timeout=30) as client:
        r = client.get(f"/api/memory-bank/{P}/injections")
        assert r.json()["error"]["code"] in ("store", "corrupt") and "audit" in r.json()["error"]["message"]


# --- config --------------------------------------------------------------------------------------------


def test_a_config_value_of_the_wrong_type_is_one_line(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[sync]\ninterval_s = "30"\n')
    with pytest.raises(ConfigError, match="sync.interval_s must be"):
        Config.load(path)
    for text in ('[dedup]\nenabled = "true"\n', '[audit]\nmax_rows = 10.5\n', '[secrets]\nmode = 1\n'):
        path.write_text(text)
        with pytest.raises(ConfigError):
            Config.load(path)
    path.write_text('[sync]\ninterval_s = "30"\n')
    code, _out, err = cli("--config", str(path), "stats")
    assert code == 1
    one_line_error(err)
    # The environment is text: a number written there is still read as one.
    assert Config.load(environ={"MEMLOCAL_SYNC_INTERVAL_S": "30"})["sync.interval_s"] == 30


def test_a_config_path_that_is_a_directory_says_so(tmp_path: Path, cli: Any) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        Config.load(tmp_path)
    with pytest.raises(ConfigError, match="is a directory"):
        Config.load(environ={"MEMLOCAL_CONFIG": str(tmp_path)})
    code, _out, err = cli("--config", str(tmp_path), "stats")
    assert code != 0 and "is a directory" in err and "does not exist" not in err
