"""The sync daemon runs the bridge to Claude's memory stores on its schedule for the profiles
``bridge.claude_profiles`` names, and no bridge when it names none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from s3server import S3
import support
from support import wait_for

from memlocal import MemoryBank, SaveRequest
from memory_stores_fake import FakeMemoryStores, memory_stores  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.anthropic_sdk, pytest.mark.slow]


def _daemon(db: Path, log: Path, **env: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as err:  # the child keeps its own descriptor
        return support.spawn([sys.executable, "-m", "memlocal", "--db", str(db), "sync", "daemon", "--interval", "60"],
                             env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=err,
                             stdin=subprocess.DEVNULL)


def test_the_daemon_mirrors_the_profiles_the_setting_names(s3: S3, memory_stores: FakeMemoryStores,
                                                           tmp_path: Path) -> None:
    db = tmp_path / "host" / "memlocal.db"
    with MemoryBank(db) as bank:
        mine = bank.save(SaveRequest("alice", content="Alice deploys on Fridays", use_llm=False)).memory.id
        bank.save(SaveRequest("bob", content="Bob is not bridged", use_llm=False))
    log = tmp_path / "daemon.log"
    proc = _daemon(db, log, MEMLOCAL_BRIDGE_CLAUDE_PROFILES="alice", MEMLOCAL_BRIDGE_CLAUDE_INTERVAL_S="0.5")
    try:
        wait_for(lambda: any(s["metadata"].get("memlocal_profile") == "alice" for s in list(memory_stores.stores.values()))
                 and memory_stores.contents(memory_stores.store_of("alice")), 120, "the first bridge sync")
        sid = memory_stores.store_of("alice")
        assert memory_stores.contents(sid) == {f"/general/{mine}.md": "Alice deploys on Fridays"}
        memory_stores.agent_create(sid, "/facts/release.md", "Releases are cut on Thursdays")

        def taken_back() -> bool:
            with MemoryBank(db) as bank:
                return any(m.processed_content == "Releases are cut on Thursdays" for m in bank.memories("alice"))

        wait_for(taken_back, 120, "a later run to take the agent's memory back")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=60)
    out = log.read_text(errors="replace")
    assert code == 0 and "Traceback" not in out, out
    assert [s["metadata"]["memlocal_profile"] for s in memory_stores.stores.values()] == ["alice"]


def test_no_profiles_no_bridge(tmp_path: Path) -> None:
    from memlocal.faces.cli.plugin import daemon_jobs
    from memlocal.faces.cli._common import State

    state = State(str(tmp_path / "x.db"), None)
    try:
        assert daemon_jobs(state) == []
    finally:
        state.close()
