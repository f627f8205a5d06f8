"""The daemon as a real process: wakes on local writes, finishes its pass on SIGTERM, survives
SIGKILL mid-pass without duplicates; passes never overlap across processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from conftest import Cli
from filelock import FileLock
from s3server import S3, FaultProxy, Host
import support
from support import wait_for

from memlocal import MemoryBank, SaveRequest
from memlocal_sync.engine import lock_path

P = "daemon"


def query(db: Path, sql: str) -> Any:
    conn = sqlite3.connect(db, timeout=10)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


def local_saves(db: Path, n: int, prefix: str = "memory") -> set[str]:
    """``n`` memories saved with no replicator (as a host would before a bucket existed)."""
    with MemoryBank(db) as bank:
        return {bank.save(SaveRequest(P, f"{prefix} {i}")).memory.id for i in range(n)}


class PutGate:
    """A FaultProxy hook that lets the first ``after`` memory PUTs of profile ``P`` through, then
    holds every later one (as a ``before`` hook: the request; as an ``after`` hook: its answer)
    until ``release`` is set. ``held`` counts those held, ``holding`` is set at the first."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.landed = self.held = 0
        self.holding, self.release = threading.Event(), threading.Event()
        self._counter = threading.Lock()

    def __call__(self, method: str, path: str, headers: dict[str, str]) -> bool:
        if method != "PUT" or f"/memory/{P}/" not in path:
            return False
        with self._counter:
            self.landed += 1
            if self.landed <= self.after:
                return False
            self.held += 1
        self.holding.set()
        self.release.wait()
        return True


class Daemon:
    def __init__(self, db: Path, log: Path, env: dict[str, str]) -> None:
        self.log = log
        self.proc = support.spawn(
            [sys.executable, "-m", "memlocal", "--db", str(db), "sync", "daemon", "--interval", "60"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(log, "wb"), stdin=subprocess.DEVNULL,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        os.kill(self.proc.pid, sig)
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def daemons() -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def start(db: Path, log: Path, **env: str) -> Daemon:
        d = Daemon(db, log, {**os.environ, "MEMLOCAL_SYNC_DEBOUNCE_S": "0.2", **env})
        started.append(d)
        return d

    try:
        yield start
    finally:
        for d in started:
            support.stop(d.proc, grace_s=0)


@pytest.mark.slow
def test_the_daemon_wakes_on_local_writes_and_exits_on_sigterm(
        s3: S3, tmp_path: Path, daemons: Callable[..., Daemon]) -> None:
    db = tmp_path / "host" / "memlocal.db"
    first = local_saves(db, 2)
    d = daemons(db, tmp_path / "daemon.log")
    wait_for(lambda: len(s3.keys()) == 2, 120, "the first pass")
    # The interval is 60 s: only the watchfiles wake-up can push this one promptly.
    (late,) = local_saves(db, 1, "late")
    wait_for(lambda: f"memory/{P}/{late}.json" in s3.keys(), 120, "a pass woken by the local write")
    assert d.stop() == 0, d.output()
    out = d.output()
    assert "sync daemon stopped after" in out and "Traceback" not in out
    assert sorted(s3.keys()) == sorted(f"memory/{P}/{i}.json" for i in first | {late})


@pytest.mark.slow
def test_sigterm_finishes_the_pass_in_flight(s3: S3, tmp_path: Path, fault_proxy: FaultProxy,
                                             daemons: Callable[..., Daemon]) -> None:
    db = tmp_path / "host" / "memlocal.db"
    ids = local_saves(db, 80)
    # Mid-pass, held there until the signal: past the first 20 memory PUTs, the proxy holds each
    # request (every worker ends up waiting on one), so the signal lands while the pass is in
    # flight however fast or slow the machine is; then the pass goes on at full speed.
    gate = PutGate(after=20)
    fault_proxy.before(gate)
    d = daemons(db, tmp_path / "daemon.log", INTERNAL_S3_ENDPOINT=fault_proxy.endpoint, MEMLOCAL_SYNC_WORKERS="2")
    try:
        wait_for(gate.holding.is_set, 120, "the pass to be under way")
        assert 20 <= len(s3.keys()) < 80
        os.kill(d.proc.pid, signal.SIGTERM)
    finally:
        gate.release.set()
    assert d.proc.wait(timeout=30) == 0, d.output()
    assert sorted(s3.keys()) == sorted(f"memory/{P}/{i}.json" for i in ids)
    assert query(db, "SELECT count(*) FROM sync_base") == 80
    last = json.loads(query(db, "SELECT value FROM meta WHERE key = 'sync.last_pass'"))
    assert last["result"] == "ok" and last["counts"]["pushed"] == 80


@pytest.mark.slow
def test_sigkill_mid_pass_then_one_pass_converges_without_duplicates(
        s3: S3, tmp_path: Path, fault_proxy: FaultProxy, daemons: Callable[..., Daemon],
        hosts: Callable[..., Host]) -> None:
    db = tmp_path / "a" / "memlocal.db"
    ids = local_saves(db, 100)
    workers = 4
    # Mid-pass, held there until the kill: past the first 40 memory PUTs, the proxy keeps each
    # answer (the object is in the bucket, the daemon has not seen it, so it cannot record its
    # base) until the test releases them. Once every worker waits on one, the pass can go no
    # further, however slow the machine: the kill lands with PUTs ahead of their recorded base.
    gate = PutGate(after=40)
    fault_proxy.after(gate)
    d = daemons(db, tmp_path / "daemon.log", INTERNAL_S3_ENDPOINT=fault_proxy.endpoint,
                MEMLOCAL_SYNC_WORKERS=str(workers))
    try:
        wait_for(lambda: gate.held == workers, 120, "every worker waiting on a held answer")
        # Nothing moves now: the held objects are in the bucket, and none of them has a base.
        assert len(s3.keys()) == 40 + workers
        assert len(s3.keys()) - query(db, "SELECT count(*) FROM sync_base") >= workers
        d.stop(signal.SIGKILL)
    finally:
        gate.release.set()
    # The proxy still delivers requests that were in flight when the daemon died: let them land
    # (every request the proxy has read is answered).
    wait_for(lambda: fault_proxy.received == fault_proxy.count(), 30, "the requests in flight to land")
    in_bucket, recorded = len(s3.keys()), query(db, "SELECT count(*) FROM sync_base")
    assert recorded < in_bucket < 100
    # The same database after the "restart", through the same endpoint: the same bucket identity,
    # so the recorded base is kept (another endpoint would start an empty base, by design).
    host = hosts("a", bucket__endpoint=fault_proxy.endpoint)
    report = host.sync()
    assert report.ok, report.reason
    # Requests still in flight in the proxy may land after the count above: every unrecorded
    # object is adopted (never re-id'd, never pushed twice), whenever it landed.
    assert report.counts["reid"] == 0
    assert report.counts["adopted"] >= in_bucket - recorded, (dict(report.counts), in_bucket, recorded)
    assert report.counts["adopted"] + report.counts["pushed"] == 100 - recorded
    assert sorted(s3.keys()) == sorted(f"memory/{P}/{i}.json" for i in ids)
    assert host.ids(P) == ids
    assert host.sync().summary().startswith("ok: nothing to do")


def test_passes_never_overlap_across_processes(s3: S3, hosts: Callable[..., Host], cli: Cli) -> None:
    a = hosts("a")
    a.bank.save(SaveRequest(P, "one"))
    held = FileLock(str(lock_path(a.path)), thread_local=False)  # released from a timer thread
    held.acquire()
    try:
        res = cli("sync", "run", db=a.path)
        assert res.exit_code == 1 and "another sync pass is running" in res.output
        res = cli("sync", "status", "--json", db=a.path)
        assert json.loads(res.stdout)["passRunning"] is True
        threading.Timer(0.5, held.release).start()
        res = cli("sync", "run", "--wait", "10", db=a.path)
        assert res.exit_code == 0, res.output
    finally:
        if held.is_locked:
            held.release()
    # Another process's pass (a subprocess holding the lock) is refused too.
    holder = support.spawn([sys.executable, "-c",
                            "import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); "
                            "l.acquire(); print('held', flush=True); time.sleep(30)", str(lock_path(a.path))],
                           stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        from memlocal.errors import SyncError

        with pytest.raises(SyncError, match="another sync pass is running"):
            a.sync()
    finally:
        support.stop(holder, grace_s=0)
    assert a.sync().ok   # the kernel released the dead holder's lock


def test_the_daemon_needs_a_bucket(cli: Cli) -> None:
    res = cli("sync", "daemon")
    assert res.exit_code == 1 and "no bucket configured" in res.output


@pytest.mark.slow
def test_the_daemon_pushes_automation_notes_and_wakes_for_them(
        s3: S3, tmp_path: Path, daemons: Callable[..., Daemon]) -> None:
    db = tmp_path / "host" / "memlocal.db"
    with MemoryBank(db) as bank:  # written with no bucket: queued in the notes' outbox
        bank.automations.put("nightly", "queued before the daemon started")
    d = daemons(db, tmp_path / "daemon.log")
    notes = "memlocal/automations/"
    wait_for(lambda: s3.keys(notes) == [f"{notes}nightly.json"], 120, "the first pass to push the note")
    # The interval is 60 s: only the watchfiles wake-up can push this one promptly.
    with MemoryBank(db) as bank:
        bank.automations.put("weekly", "written while the daemon runs")
    wait_for(lambda: f"{notes}weekly.json" in s3.keys(notes), 120, "a pass woken by the note")
    assert d.stop() == 0, d.output()
    assert s3.get_json(f"{notes}weekly.json")["note"] == "written while the daemon runs"
    assert query(db, "SELECT count(*) FROM automation_outbox") == 0
