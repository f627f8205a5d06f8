"""A host is ready when it opens, and a hung bucket costs one timeout per host (docs/sync.md,
"Hydrate on open" and "Circuit breaker").

- A host whose index has never completed a pass against its bucket pulls it (the snapshot path)
  before its first read, within ``sync.hydrate_deadline_s``; past the deadline it answers from what
  it has and says so once. Library, ``memlocal inject``, ``recall`` and ``mcp`` alike.
- The write-through breaker's state lives in the index, so every process of the host sees it:
  one save waits out a frozen bucket, later saves of any process go straight to the outbox.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any, Callable

import anyio
import pytest
from s3server import S3, FaultProxy, Host

from memlocal import Config, MemoryBank, SaveRequest

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

P = "runner"
# A deadline no loaded machine reaches: these hosts must end up with the bucket's memories.
ON = {"sync__pull_on_open": True, "sync__hydrate_deadline_s": 60.0}
ENV_ON = {"MEMLOCAL_SYNC_PULL_ON_OPEN": "true", "MEMLOCAL_SYNC_HYDRATE_DEADLINE_S": "60"}


def seeded(hosts: Callable[..., Host], n: int = 3) -> set[str]:
    """Host "a" saves ``n`` memories, written through to the bucket; their ids."""
    a = hosts("a")
    # Different subjects, so that no save supersedes another (docs/hygiene.md, "Updates").
    topics = ["check staging first", "watch the canary", "page the on-call", "tag the release", "drain the queue"]
    ids = {a.bank.save(SaveRequest(P, content=f"the runner's deploy note number {i} says {topics[i % len(topics)]}")).memory.id
           for i in range(n)}
    assert len(ids) == n
    assert a.sync().ok  # in the bucket, whatever a loaded machine made of the write-through timeouts
    return ids


# --- hydrate on open -------------------------------------------------------------------------------


def test_a_fresh_host_has_the_buckets_memories_at_its_first_read(hosts: Callable[..., Host], s3: S3) -> None:
    ids = seeded(hosts)
    b = hosts("b", **ON)
    assert {m.id for m in b.bank.list(P)} == ids
    status = b.bank.sync_status()
    assert status["hydrated"] is not None and status["hydrated"]["bucket"]
    assert status["lastPass"]["result"] == "ok"


def test_a_fresh_runner_cli_injects_the_buckets_memories(hosts: Callable[..., Host], s3: S3, cli: Any) -> None:
    seeded(hosts)
    env = ENV_ON
    res = cli("inject", "-p", P, "what is the deploy note?", env=env)
    assert res.exit_code == 0, res.output
    assert "the runner's deploy note number" in res.stdout
    # recall on another fresh data dir
    res = cli.at(cli.db.with_name("other.db"))("recall", "-p", P, "deploy note", "--json", env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["results"], res.stdout


@pytest.mark.slow  # an MCP server process that hydrates from the bucket
@pytest.mark.s3_servers("moto")  # other processes: a real server
def test_a_fresh_mcp_server_answers_from_the_bucket(hosts: Callable[..., Host], s3: S3, tmp_path: Path) -> None:
    seeded(hosts, 2)
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client
    from support import mcp_server_params

    params = mcp_server_params(tmp_path / "fresh-mcp.db", P)
    params.env = {**(params.env or {}), **ENV_ON}

    async def scenario() -> dict[str, Any]:
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                result = await s.call_tool("memory_list", {})
                return dict(result.structured_content or {})

    listed = anyio.run(scenario)
    assert listed["total"] == 2, listed


def test_past_the_deadline_a_fresh_host_answers_from_what_it_has_and_says_so_once(
        hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy, caplog: pytest.LogCaptureFixture) -> None:
    seeded(hosts)
    fault_proxy.freeze()
    b = hosts("b", bucket__endpoint=fault_proxy.endpoint, sync__put_timeout_s=5.0,
              **{**ON, "sync__hydrate_deadline_s": 0.3})
    with caplog.at_level(logging.WARNING):
        assert b.bank.list(P).total == 0
        assert b.bank.stats()["totalMemories"] == 0
    said = [r for r in caplog.records if "answering from" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert b.bank.sync_status()["hydrated"] is None
    fault_proxy.thaw()


def test_a_hydrated_host_refreshes_in_the_background_on_open(
        hosts: Callable[..., Host], s3: S3, wait_for: Callable[..., Any]) -> None:
    seeded(hosts)
    b = hosts("b", **ON)
    assert len(b.bank.list(P)) == 3
    b.close()
    hosts("a").bank.save(SaveRequest(P, content="saved after b's hydrate"))
    again = hosts("b", **ON)
    # Already hydrated: the first read answers from the index, and a background pull brings the new one.
    wait_for(lambda: len(again.bank.list(P)) == 4, what="the background refresh on open")


def test_without_a_bucket_open_warns_once_per_process(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import memlocal.bank.replication as bank_module

    monkeypatch.setattr(bank_module, "_warned_local_only", False)
    with caplog.at_level(logging.WARNING):
        for i in range(3):
            MemoryBank.open(tmp_path / f"local-{i}.db", config=Config.load(environ={})).close()
    said = [r for r in caplog.records if "no bucket configured" in r.getMessage()]
    assert len(said) == 1


def test_without_a_bucket_a_cli_process_says_so_in_one_line_once_per_database(cli: Any, tmp_path: Path) -> None:
    res = cli.process("stats")
    assert res.exit_code == 0
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and "no bucket configured" in lines[0], res.stderr
    # A local-only user's later commands on the same database say nothing more (ten saves, not ten notices).
    for _ in range(2):
        res = cli.process("save", "-p", "p", "a local memory")
        assert res.exit_code == 0 and res.stderr == "", res.stderr
    # Another database hears it once too.
    res = cli.at(tmp_path / "other.db").process("stats")
    assert "no bucket configured" in res.stderr


def test_the_local_only_notice_can_be_silenced(cli: Any, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    res = cli.process("stats", env={"MEMLOCAL_LOCAL_ONLY_NOTICE": "false"})
    assert res.exit_code == 0 and res.stderr == "", res.stderr
    import memlocal.bank.replication as bank_module

    monkeypatch.setattr(bank_module, "_warned_local_only", False)
    with caplog.at_level(logging.WARNING):
        MemoryBank.open(tmp_path / "quiet.db", config=Config.load(environ={}, overrides={"bucket.local_only_notice": False})).close()
    assert not [r for r in caplog.records if "no bucket configured" in r.getMessage()]


# --- one breaker per host ----------------------------------------------------------------------------


def test_cli_saves_against_a_frozen_bucket_wait_for_one_timeout(
        s3: S3, fault_proxy: FaultProxy, cli: Any) -> None:
    fault_proxy.freeze()
    env = {"INTERNAL_S3_ENDPOINT": fault_proxy.endpoint, "MEMLOCAL_SYNC_PUT_TIMEOUT_S": "0.2",
           "MEMLOCAL_SYNC_BREAKER_S": "600"}
    for i in range(3):
        res = cli("save", "-p", P, "--json", f"saved by process {i} while the bucket hangs", env=env)
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["synced"] is False
    # Every process saw the breaker the first one opened: one request reached the bucket.
    assert fault_proxy.received == 1, fault_proxy.received
    status = cli.json("sync", "status", "--json", env=env)
    assert status["breaker"]["state"] == "open", status["breaker"]
    fault_proxy.thaw()


def test_one_process_probes_the_half_open_breaker_while_the_others_write_to_the_outbox(
        hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy) -> None:
    import threading

    # Two banks on one database: two processes of one host, as far as the index is concerned.
    settings = {"bucket__endpoint": fault_proxy.endpoint, "sync__breaker_s": 0.0}
    a, b = hosts("a", **settings), hosts("a", **settings)
    fault_proxy.fail(1)  # the first request answers 503: the breaker opens (a window of 0 s: half-open at once)
    assert a.bank.save(SaveRequest(P, "the save that opens the breaker")).synced is False
    assert a.bank.sync_status()["breaker"]["state"] == "half-open"
    entered, release = threading.Event(), threading.Event()

    def hold(method: str, path: str, headers: dict[str, str]) -> bool:
        entered.set()
        release.wait(30)
        return True

    fault_proxy.before(hold)
    probe: list[Any] = []
    prober = threading.Thread(target=lambda: probe.append(b.bank.save(SaveRequest(P, "the probe, from the other process"))))
    prober.start()
    assert entered.wait(30)
    seen = fault_proxy.received
    # While b probes, a's saves go straight to the outbox, without a request.
    assert a.bank.save(SaveRequest(P, "saved while the other process probes")).synced is False
    assert fault_proxy.received == seen
    release.set()
    prober.join(30)
    assert probe and probe[0].synced is True  # the probe succeeded: closed for every process
    assert a.bank.sync_status()["breaker"] == {"state": "closed"}
    assert a.bank.save(SaveRequest(P, "written through again")).synced is True


def test_a_completed_pass_closes_the_breaker(hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy,
                                            cli: Any) -> None:
    a = hosts("a", bucket__endpoint=fault_proxy.endpoint, sync__breaker_s=600.0)
    fault_proxy.fail(1)
    assert a.bank.save(SaveRequest(P, "the save that opens the breaker")).synced is False
    assert a.bank.save(SaveRequest(P, "straight to the outbox")).synced is False
    res = cli.at(a.path)("sync", "status", env={"INTERNAL_S3_ENDPOINT": fault_proxy.endpoint})
    assert "breaker:     open: saves on this host go to the outbox" in res.stdout, res.output
    report = a.sync()
    assert report.ok and report.counts["pushed"] == 2
    assert a.bank.sync_status()["breaker"] == {"state": "closed"}
    assert a.bank.save(SaveRequest(P, "written through after the pass")).synced is True


@pytest.mark.s3_servers("moto")  # other processes: a real server
def test_cli_reads_with_a_bucket_print_nothing_on_stderr(hosts: Callable[..., Host], s3: S3, cli: Any) -> None:
    seeded(hosts, 2)
    env = ENV_ON
    first = cli.process("recall", "-p", P, "deploy note", env=env)  # hydrates
    again = cli.process("recall", "-p", P, "deploy note", env=env)  # refreshes in the background, cancelled at exit
    for res in (first, again):
        assert res.exit_code == 0 and "deploy note" in res.stdout, res.output
        assert res.stderr == "", res.stderr


def test_closing_the_bank_waits_for_its_background_pull_to_stop(
        hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy, wait_for: Callable[..., Any],
        caplog: pytest.LogCaptureFixture) -> None:
    # A hydrated host, through the proxy: its next open's first read queues a background refresh
    # of every profile, which begins with a delimiter listing of the bucket.
    a = hosts("a", bucket__endpoint=fault_proxy.endpoint, **ON)
    a.bank.save(SaveRequest(P, content="the runner's deploy note"))
    assert a.sync().ok and a.bank.sync_status()["hydrated"] is not None
    a.close()
    held, release = threading.Event(), threading.Event()

    def hold_listing(method: str, path: str, headers: dict[str, str]) -> bool:
        if method != "GET" or "delimiter=" not in path:
            return False
        held.set()
        release.wait()
        return True

    fault_proxy.before(hold_listing)
    before = set(threading.enumerate())
    bank = MemoryBank.open(a.path, config=a.config)
    caplog.set_level(logging.DEBUG, logger="memlocal_sync")
    assert [p["name"] for p in bank.profiles()] == [P]
    wait_for(held.is_set, what="the background refresh's listing")
    # The bank closes while the pull is held mid-request; the pull is then let go.
    closer = threading.Thread(target=bank.close)
    closer.start()
    wait_for(lambda: getattr(bank.replicator, "_closed"), what="the close to begin")
    release.set()
    closer.join(60)
    assert not closer.is_alive()
    for thread in set(threading.enumerate()) - before:  # the refresh thread ends once it has stopped
        thread.join(60)
        assert not thread.is_alive(), thread.name
    # The pull stopped before the database closed: nothing used it closed, nothing was said.
    said = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records
            if r.name.startswith("memlocal") and (r.levelno >= logging.WARNING or "closed" in r.getMessage())]
    assert said == []
