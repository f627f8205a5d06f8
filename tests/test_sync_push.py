"""A first push as the engine makes it cheap (docs/sync.md, "The executor"): a worker takes a
chunk of actions, the pass's own writes are folded into the store in a few statements, and the
snapshot written at a large push's end takes the bodies the push wrote. Each on every S3 server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
from conftest import Cli

from memlocal.model import utcnow
from memlocal.store import Store
from memlocal_sync import snapshot
from s3server import S3, FaultProxy, Host

pytestmark = pytest.mark.s3_servers()

P = "alice"


def _import(cli: Cli, db: Path, tmp_path: Path, n: int) -> list[str]:
    """``n`` memories in ``db`` that the bucket does not have (the import's write-through times out)."""
    ids, lines = [], []
    for i in range(n):
        ids.append(f"mem-{i:08x}")
        lines.append(json.dumps({
            "id": ids[-1], "profileName": P, "rawInput": f"runbook step {i}: check the queue depth {i}",
            "processedContent": f"runbook step {i}: check the queue depth {i}", "summary": f"runbook step {i}",
            "category": "fact", "source": "explicit", "confidence": 1.0, "createdAt": "2026-12-01T00:00:00Z",
            "lastAccessedAt": None, "accessCount": 3, "stalenessScore": 0.0, "isActive": True, "version": 1}))
    path = tmp_path / "bank.jsonl"
    path.write_text("\n".join(lines) + "\n")
    res = cli.at(db)("import", str(path), env={"MEMLOCAL_SYNC_PUT_TIMEOUT_S": "0.001"})
    assert res.exit_code == 0, res.output
    return ids


def _rev(host: Host) -> int:
    return int(host.bank.store.read("SELECT rev FROM profile_revs WHERE profile = ?", (P,))[0][0])


def test_the_snapshot_after_a_push_holds_each_object_as_the_bucket_does(
        hosts: Callable[..., Host], s3: S3, cli: Cli, tmp_path: Path) -> None:
    a = hosts("a", sync__push_snapshot_min=40, sync__snapshot_min_objects=40)
    a.close()
    ids = _import(cli, a.path, tmp_path, 60)
    a = hosts("a", sync__push_snapshot_min=40, sync__snapshot_min_objects=40, sync__workers=4)
    report = a.sync()
    assert report.ok and report.counts["pushed"] == 60 and report.counts["snapshots"] == 1, report.summary()
    (key,) = s3.keys(f"memlocal/snapshots/{P}/")
    held = snapshot.read(s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read(), P)
    objects: dict[str, tuple[str, bytes]] = {}
    for mid in ids:
        got = s3.client.get_object(Bucket=s3.bucket, Key=f"memory/{P}/{mid}.json")
        objects[f"memory/{P}/{mid}.json"] = (got["ETag"], got["Body"].read())
    assert held == objects


def test_a_push_rewrites_no_row_and_keeps_a_bump_made_while_its_put_was_in_flight(
        hosts: Callable[..., Host], s3: S3, cli: Cli, tmp_path: Path, fault_proxy: FaultProxy) -> None:
    """Confirming this host's own creates changes no local row (no rev bump: a push does not
    invalidate what recall caches), except where an access bump landed while a PUT was in
    flight: that bump stays unmerged, and the next pass merges it into the bucket."""
    a = hosts("a")
    a.close()
    ids = _import(cli, a.path, tmp_path, 30)
    a = hosts("a", bucket__endpoint=fault_proxy.endpoint)
    bumped = ids[7]
    during = Store(a.path)

    def bump_during(method: str, path: str, headers: dict[str, str]) -> bool:
        if method == "PUT" and path.endswith(f"/{bumped}.json") and "If-None-Match" in headers:
            during.mark_accessed(P, [bumped], utcnow())
        return False

    fault_proxy.before(bump_during)
    rev = _rev(a)
    try:
        report = a.sync()
    finally:
        during.close()
    assert report.ok and report.counts["pushed"] == 30, report.summary()
    assert _rev(a) == rev + 1  # the bump's own write, nothing of the push's
    assert s3.get_json(f"memory/{P}/{bumped}.json")["accessCount"] == 3
    assert a.bank.get(P, bumped).access_count == 4
    assert a.bank.store.read("SELECT access_delta FROM memories WHERE id = ?", (bumped,))[0][0] == 1
    report = a.sync()
    assert report.ok and report.counts["merged"] == 1, report.summary()
    assert s3.get_json(f"memory/{P}/{bumped}.json")["accessCount"] == 4
    assert a.bank.store.read("SELECT access_delta FROM memories WHERE id = ?", (bumped,))[0][0] == 0


def test_bucket_trouble_stops_the_chunks_and_keeps_what_was_acknowledged(
        hosts: Callable[..., Host], s3: S3, cli: Cli, tmp_path: Path, fault_proxy: FaultProxy) -> None:
    """Bucket trouble in the middle of a push ends it (every worker stops at its next action),
    and each create the bucket acknowledged before has its base: the next pass creates only the rest."""
    a = hosts("a")
    a.close()
    _import(cli, a.path, tmp_path, 200)
    a = hosts("a", bucket__endpoint=fault_proxy.endpoint, sync__workers=2, sync__attempts=1)
    puts: list[str] = []

    def is_put(method: str, path: str) -> bool:
        return method == "PUT" and "/memory/" in path

    def refuse_after_40(method: str, path: str, headers: dict[str, str]) -> bool:
        if is_put(method, path):
            puts.append(path)
            if len(puts) == 41:  # this one and every later one: the bucket cannot be used now
                fault_proxy.fail(10**6, 403, "AccessDenied", when=is_put)
        return False

    fault_proxy.before(refuse_after_40)
    report = a.sync()
    assert report.result == "failed" and "denied" in report.reason, report.summary()
    acknowledged = len(s3.keys(f"memory/{P}/"))
    assert 0 < acknowledged <= 40 and len(puts) < 200, (acknowledged, len(puts))
    synced = a.bank.store.read("SELECT count(*) FROM sync_base")[0][0]
    assert synced == acknowledged
    fault_proxy.fail(0)
    report = a.sync()
    assert report.ok and report.counts["pushed"] == 200 - acknowledged, report.summary()
