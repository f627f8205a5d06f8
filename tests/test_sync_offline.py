"""Offline: saves while the bucket is unreachable stay in the durable outbox; one pass drains it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from conftest import Cli
from s3server import S3, Host, Outage
from memlocal import SaveRequest

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

P = "runner"
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def status(cli: Cli, env: dict[str, str] | None = None) -> dict[str, Any]:
    return cli.json("sync", "status", "--json", env=env)  # type: ignore[no-any-return]


def test_offline_saves_then_one_pass_drains_the_outbox(hosts: Callable[..., Host], s3: S3, outage: Outage, cli: Cli) -> None:
    # Two attempts per request: the pass against the closed port fails after one back-off, not
    # after four (up to 15 s of botocore's jittered back-off; test_sync_faults.py tests retries).
    env = {"INTERNAL_S3_ENDPOINT": outage.endpoint, "MEMLOCAL_SYNC_ATTEMPTS": "2"}
    a = hosts("a", bucket__endpoint=outage.endpoint, sync__attempts=2)
    t0 = time.monotonic()
    results = [a.bank.save(SaveRequest(P, f"offline memory {i}")) for i in range(100)]
    elapsed = time.monotonic() - t0
    assert all(r.synced is False for r in results)
    assert elapsed < 30, f"100 saves against a closed port took {elapsed:.1f}s"
    # The CLI says the same: synced false, and 101 pending in status.
    res = cli.at(a.path)("save", "-p", P, "--json", "one more, from the CLI", env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["synced"] is False
    extra_id = json.loads(res.stdout)["memory"]["id"]
    a.bank.delete(P, results[0].memory.id)  # a deletion while offline, of a memory never pushed
    st = status(cli.at(a.path), env)
    assert st["bucket"]["name"] == s3.bucket and st["bucket"]["source"] == "env:INTERNAL_S3_BUCKET"
    assert st["pending"]["saves"] == 100 and st["pending"]["deletes"] == 1
    assert st["pending"]["outbox"] == 101
    # A pass while still offline fails with one line, changes nothing, and is recorded.
    res = cli.at(a.path)("sync", "run", env=env)
    assert res.exit_code == 1
    assert res.output.count("\n") <= 2 and "cannot reach bucket" in res.output
    assert status(cli.at(a.path), env)["lastError"]["message"].startswith("cannot reach bucket")
    assert s3.keys() == []

    outage.up()
    res = cli.at(a.path)("sync", "run", "--json", "--progress", env=env)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["result"] == "ok" and report["counts"]["pushed"] == 100
    expected = {m.id for m in a.bank.store.iter_profile(P)}
    assert len(expected) == 100 and extra_id in expected and results[0].memory.id not in expected
    keys = s3.keys()
    assert sorted(keys) == sorted(f"memory/{P}/{i}.json" for i in expected)  # nothing lost, no duplicate
    st = status(cli.at(a.path), env)
    assert st["pending"] == {"total": 0, "saves": 0, "deletes": 0, "accessUpdates": 0, "outbox": 0,
                              "automationNotes": 0}
    assert st["lastPass"]["result"] == "ok" and st["lastPass"]["counts"]["pushed"] == 100
    # The error is not current any more: a later pass succeeded. Status says so, and keeps it as resolved.
    assert st["lastError"] is None
    assert st["resolvedError"]["message"].startswith("cannot reach bucket")
    assert st["resolvedError"]["resolvedAt"] == st["lastPass"]["finishedAt"]
    text = cli.at(a.path)("sync", "status", env=env).output
    assert "last error:  none" in text and "cannot reach bucket" not in text.split("last error:")[1].split("\n")[0]
    # Every time in the JSON is an ISO 8601 string (the bucket probe's time included), none an epoch number.
    assert_iso_times(st)
    res = cli.at(a.path)("sync", "run", env=env)
    assert res.exit_code == 0 and res.output.startswith("ok: nothing to do"), res.output


def assert_iso_times(data: Any, where: str = "") -> None:
    """Every ``...At`` field (and ``at``) of ``data`` is null or an ISO 8601 UTC string."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "at" or key.endswith("At"):
                assert value is None or (isinstance(value, str) and ISO.fullmatch(value)), (f"{where}.{key}", value)
            assert_iso_times(value, f"{where}.{key}")
    elif isinstance(data, list):
        for i, item in enumerate(data):
            assert_iso_times(item, f"{where}[{i}]")


def test_a_second_host_sees_the_drained_saves(hosts: Callable[..., Host], s3: S3, outage: Outage) -> None:
    a = hosts("a", bucket__endpoint=outage.endpoint)
    ids = {a.bank.save(SaveRequest(P, f"offline {i}")).memory.id for i in range(10)}
    outage.up()
    assert a.sync().counts["pushed"] == 10
    b = hosts("b")
    assert b.sync().counts["pulled"] == 10 and b.ids(P) == ids


def test_write_through_times_out_quickly_on_a_silent_endpoint(hosts: Callable[..., Host], s3: S3, tmp_path: Path) -> None:
    """An endpoint that accepts connections but never answers: the save waits about
    sync.put_timeout_s, not minutes, and still succeeds locally."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        a = hosts("a", bucket__endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}", sync__put_timeout_s=0.5)
        t0 = time.monotonic()
        result = a.bank.save(SaveRequest(P, "saved while the bucket hangs"))
        elapsed = time.monotonic() - t0
        assert result.synced is False and elapsed < 3, elapsed
        assert a.bank.get(P, result.memory.id) == result.memory
    finally:
        silent.close()


def test_no_bucket_means_local_only(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "solo.db"
    res = cli.at(db)("save", "-p", P, "--json", "kept locally")
    assert res.exit_code == 0 and json.loads(res.stdout)["synced"] is False
    st = status(cli.at(db))
    assert st["bucket"] is None and st["pending"]["saves"] == 1
    res = cli.at(db)("sync", "status")
    assert "none: local only" in res.output
    res = cli.at(db)("sync", "run")
    assert res.exit_code == 1 and "no bucket configured" in res.output


def test_write_through_that_loses_the_race_to_a_pass_still_reports_synced(
        hosts: Callable[..., Host], s3: S3, outage: Outage) -> None:
    """With `serve --with-sync`, the daemon (woken by the local write) may push a new memory before
    the save's own create-only PUT: that PUT's 412 must not make the save report "not synced"."""
    from memlocal_sync.objects import encode

    # (a short breaker window: the outage during the first save opened it)
    a = hosts("a", bucket__endpoint=outage.endpoint, sync__breaker_s=0.05)
    saved = a.bank.save(SaveRequest(P, "pushed by a pass before the write-through")).memory
    outage.up()
    key = f"memory/{P}/{saved.id}.json"
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=encode(saved))  # the pass won, unrecorded
    time.sleep(0.2)  # past the breaker window
    assert a.bank.replicator.push_saved(saved) is True
    # Another memory under the same id is not ours: left to the next pass (which re-ids ours).
    assert a.bank.replicator.push_saved(saved.with_changes(processed_content="someone else's")) is False
    assert a.sync().ok
    assert a.bank.replicator.push_saved(saved) is True  # recorded in the base by that pass
    assert s3.keys() == [key]
