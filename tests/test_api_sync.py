"""The REST API with a bucket (a real moto_server): reads refresh from the bucket
(``sync.refresh_ttl_s``), and writes go through to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import httpx
from api_live import LiveServer, ServeProcess
from support import wait_for

from memlocal.api import create_app


def test_reads_see_other_hosts_saves_after_the_refresh_ttl(hosts: Callable[..., Any], s3: Any) -> None:
    # Two served hosts: one whose TTL never runs out during the test, one that pulls on every read
    # (sync.refresh_ttl_s = 0), so no step depends on how long the previous one took.
    served, eager, runner = hosts("dashboard", sync__refresh_ttl_s=3600), hosts("eager", sync__refresh_ttl_s=0), hosts("runner")
    assert served.bank.replicator is not None
    served.bank.fresh_reads = eager.bank.fresh_reads = True  # as `memlocal serve` opens its bank
    with LiveServer(create_app(served.bank)) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        # A save through the API is written through to the bucket.
        r = c.post("/api/profiles/p1/memories", json={"content": "saved via the dashboard"})
        assert r.status_code == 201 and r.json()["synced"] is True
        assert f"memory/p1/{r.json()['memory']['id']}.json" in s3.keys()

        # The first read of the profile pulls from the bucket.
        first = runner.bank.save("p1", content="saved on the runner").memory
        page = c.get("/api/profiles/p1/memories").json()
        assert first.id in {m["id"] for m in page["memories"]}
        assert c.get(f"/api/profiles/p1/memories/{first.id}").status_code == 200

        # Within the TTL a read is served locally (no bucket round trip per request).
        second = runner.bank.save("p1", content="another runner save about coffee").memory
        assert second.id not in {m["id"] for m in c.get("/api/profiles/p1/memories").json()["memories"]}

    with LiveServer(create_app(eager.bank)) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        # Past the TTL (here: always), the next read pulls again.
        assert second.id in {m["id"] for m in c.get("/api/profiles/p1/memories").json()["memories"]}
        results = c.get("/api/profiles/p1/memories/search", params={"q": "coffee"}).json()["results"]
        assert results[0]["memory"]["id"] == second.id

        # Global reads refresh every profile this host knows.
        third = runner.bank.save("p1", content="a third runner save").memory
        assert c.get("/api/memory-bank/stats").json()["perProfile"]["p1"] == 4
        flat = c.get("/api/memory-bank", params={"limit": 10}).json()
        assert third.id in {m["id"] for m in flat["memories"]}

        # A deletion through the API goes to the bucket too.
        assert c.delete(f"/api/profiles/p1/memories/{first.id}").status_code == 204
        assert f"memory/p1/{first.id}.json" not in s3.keys()


def test_a_bank_without_fresh_reads_never_pulls_on_read(hosts: Callable[..., Any], s3: Any) -> None:
    """The read policy is the bank's: the CLI and library readers are served locally."""
    reader, runner = hosts("reader", sync__refresh_ttl_s=0), hosts("runner")
    saved = runner.bank.save("p1", content="saved on the runner").memory
    assert reader.bank.list("p1").total == 0
    reader.bank.fresh_reads = True
    assert [m.id for m in reader.bank.list("p1")] == [saved.id]


def test_serve_with_sync_runs_the_daemon_in_process(tmp_path: Path, hosts: Callable[..., Any], s3: Any) -> None:
    runner = hosts("runner")
    proc = ServeProcess(tmp_path, ["--db", str(tmp_path / "served.db")], env={"MEMLOCAL_SYNC_INTERVAL_S": "0.5"},
                        serve_args=["--with-sync"])
    try:
        proc.wait_ready()
        # A profile that exists only in the bucket: the global endpoints refresh only the profiles
        # this host knows, so seeing it proves the in-process daemon pulled it.
        saved = runner.bank.save("only-remote", content="pulled by the daemon").memory
        with httpx.Client(base_url=proc.url, timeout=10) as c:
            wait_for(lambda: c.get("/api/memory-bank/stats").json()["perProfile"].get("only-remote") == 1,
                     what=f"the daemon's pull: {proc.log_path}")
            assert c.get(f"/api/profiles/only-remote/memories/{saved.id}").status_code == 200
            # What the API saves reaches the bucket (by write-through or by the daemon's pass,
            # whichever is first: the daemon is woken by the local write).
            r = c.post("/api/profiles/p1/memories", json={"content": "from the dashboard"})
            assert r.status_code == 201
            key = f"memory/p1/{r.json()['memory']['id']}.json"
            wait_for(lambda: key in s3.keys(), what=f"{key} in the bucket: {proc.log_path}")
    finally:
        code = proc.stop()
    assert code == 0, proc.log
    assert "sync daemon stopped" in proc.log
