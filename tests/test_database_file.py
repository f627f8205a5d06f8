"""The database file a person is told about: a corrupt file is named with its folder and a pull
is offered only when a bucket is configured; a file of 0 bytes is refused, not taken for a new
bank."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Cli
from support import corrupt_memories_table

from memlocal import MemoryBank
from memlocal.errors import CorruptDatabaseError

P = "p"




def test_a_corrupt_database_is_named_whole_and_a_pull_offered_only_with_a_bucket(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "data dir" / "bank.db"
    run = cli.at(db)
    assert run("save", "-p", P, "--content", "one memory").exit_code == 0
    corrupt_memories_table(db)
    code, _, err = run("list", "-p", P)
    assert code == 1 and len(err.splitlines()) == 1, err
    assert f"database {db} is corrupt" in err and f"`sqlite3 '{db}' .recover`" in err, err
    assert "sync run" not in err and "bucket" not in err, err  # no bucket here: nothing to pull
    code, _, err = run("list", "-p", P, env={"INTERNAL_S3_BUCKET": "team-memories"})
    assert code == 1 and len(err.splitlines()) == 1, err
    assert err.rstrip().endswith("; the bucket then refills it: `memlocal sync run` pulls every synced memory"), err


def test_a_database_file_of_zero_bytes_is_refused_not_made_a_new_bank(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "truncated.db"
    db.write_bytes(b"")
    old = time.time() - 60
    os.utime(db, (old, old))
    code, out, err = cli.at(db)("save", "-p", P, "hello")
    assert code == 1 and out == "", out
    assert err.strip() == (f"Error: database {db} is an empty file (0 bytes), not a memlocal database: a copy or "
                           "a disk that failed may have truncated it; restore it from a backup, or delete it to "
                           "start a new bank there"), err
    assert db.stat().st_size == 0  # untouched
    with pytest.raises(CorruptDatabaseError, match="empty file"):
        MemoryBank(db)


def test_a_new_empty_file_may_be_another_process_creating_its_database(tmp_path: Path) -> None:
    db = tmp_path / "just-made.db"
    db.write_bytes(b"")  # as sqlite3.connect leaves it, before the first write
    with MemoryBank(db) as bank:
        assert bank.stats()["totalMemories"] == 0
    assert db.stat().st_size > 0


def test_the_relative_default_path_is_named_with_its_folder(tmp_path: Path, cli: Cli, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    run = cli.at("rel.db")
    assert run("save", "-p", P, "--content", "one memory").exit_code == 0
    corrupt_memories_table(tmp_path / "rel.db")
    code, _, err = run("list", "-p", P)
    assert code == 1 and f"database {tmp_path / 'rel.db'} is corrupt" in err and f"sqlite3 {tmp_path / 'rel.db'} .recover" in err, err
