"""``MemoryBank`` construction: ``open()`` discovers, the constructor takes objects."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

import pytest

from memlocal import Config, ConfigError, MemoryBank, SaveRequest
from memlocal.services.automation import AutomationNotes
from memlocal.store import Store

ROOT = Path(__file__).resolve().parent.parent


def test_the_constructor_takes_objects_and_discovers_nothing(db_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              s3: Any) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    store = Store(db_path)
    with MemoryBank(store) as bank:
        assert bank.store is store and bank.replicator is None and bank._extractor is None
        assert bank.config.source("bucket.name") == "default"  # no environment, no file
        assert bank.save(SaveRequest("p", content="x")).synced is False
    with MemoryBank(db_path) as bank:  # a path opens a store, nothing more
        assert bank.replicator is None and bank.list("p").total == 1


def test_open_discovers_config_replicator_and_extractor(db_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        s3: Any) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with MemoryBank.open(db_path) as bank:
        assert bank.config.source("bucket.name") == "env:INTERNAL_S3_BUCKET"
        assert bank.replicator is not None
        assert type(bank._extractor).__name__ == "AnthropicExtractor"
        assert bank.save(SaveRequest("p", content="x", use_llm=False)).synced is True


def test_open_uses_the_configured_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLOCAL_DB", str(tmp_path / "env.db"))
    with MemoryBank.open() as bank:
        assert bank.path == tmp_path / "env.db"
    with MemoryBank.open(tmp_path / "arg.db", config=Config.load()) as bank:
        assert bank.path == tmp_path / "arg.db"


def test_no_bool_replicator_and_keyword_only_options() -> None:
    params = inspect.signature(MemoryBank.__init__).parameters
    assert "bool" not in str(params["replicator"].annotation)
    assert all(p.kind is p.KEYWORD_ONLY for name, p in params.items() if name not in ("self", "store"))
    assert all(p.kind is p.KEYWORD_ONLY for name, p in inspect.signature(MemoryBank.open).parameters.items()
               if name not in ("cls", "path"))


def test_automation_notes_live_behind_bank_automations(bank: MemoryBank) -> None:
    assert isinstance(bank.automations, AutomationNotes)
    for name in ("get_automation_note", "list_automation_notes", "put_automation_note",
                 "clear_automation_note", "delete_automation", "automation_note_block"):
        assert not hasattr(bank, name), name
    bank.automations.put("nightly", "stopped at page 3")
    assert [n.automation_id for n in bank.automations.list()] == ["nightly"]
    assert "stopped at page 3" in bank.automations.block("nightly")
    assert bank.automations.delete("nightly") and bank.automations.get("nightly") is None


def test_the_sync_daemon_is_started_through_the_bank(db_path: Path, s3: Any, wait_for: Callable[..., Any]) -> None:
    with MemoryBank.open(db_path, config=Config.load(overrides={"sync.interval_s": 3600.0})) as bank:
        bank.save(SaveRequest("p", content="pushed by the daemon's first pass"))
        handle = bank.start_sync_daemon()
        assert handle is not None
        try:
            wait_for(lambda: handle.daemon.passes >= 1, what="the daemon's first pass")
        finally:
            handle.stop()
        assert not handle.thread.is_alive()


def test_without_a_bucket_there_is_no_daemon(db_path: Path) -> None:
    with MemoryBank.open(db_path) as bank:
        assert bank.start_sync_daemon() is None
    with MemoryBank(db_path) as bank, pytest.raises(ConfigError, match="no sync daemon is installed"):
        bank.start_sync_daemon()


def test_faces_do_not_wire_the_bank() -> None:
    """serve finds no daemon itself; portability and REST reach no store or replicator."""
    serve = (ROOT / "memlocal/faces/cli/serve.py").read_text()
    assert "entry_points" not in serve and "daemons" not in serve
    for face in ("memlocal/bank/portability.py", "memlocal/faces/api/app.py"):
        text = (ROOT / face).read_text()
        assert "bank.store" not in text and "bank.replicator" not in text and "refresh_if_stale" not in text, face


def test_open_reads_the_installed_entry_points_once_per_process(tmp_path: Path, s3: Any) -> None:
    """Reading the installed distributions' entry points costs ~15 ms: a process that opens banks
    again and again (a server, a test suite) reads them once."""
    from memlocal.plugins import REPLICATORS, discover

    with MemoryBank.open(tmp_path / "a.db") as bank:
        assert bank.replicator is not None
    read = discover.cache_info().misses
    with MemoryBank.open(tmp_path / "b.db") as bank:
        assert bank.replicator is not None
    assert discover.cache_info().misses == read
    assert discover(REPLICATORS)  # the sync package's factory, found by its entry point
