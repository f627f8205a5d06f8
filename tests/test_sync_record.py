"""The change record (memlocal/changes/): delete records carry a deletion's intent to other hosts,
a pass that finds nothing to do reads a constant number of objects, and hosts writing at once
never make a third one miss a change (docs/sync.md, "The change record")."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any, Callable

import pytest
from conftest import Cli

from memlocal.hygiene.rules import RetentionRule
from memlocal.model import utcnow
from memlocal.store import to_us
from memlocal_sync.changes import CHANGES_PREFIX, parse_segment_key, segment_key
from s3server import S3, FaultProxy, Host
from memlocal import RecallQuery, SaveRequest
from memlocal_sync.report import PassOptions

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

P = "researcher"
RECORD = {"sync__full_listing_s": 3600}  # follow the record; list in full once an hour


def _age(host: Host, mid: str, days: int) -> None:
    with host.bank.store.transaction() as c:
        c.execute("UPDATE memories SET created_us = ? WHERE id = ?", (to_us(utcnow() - timedelta(days=days)), mid))


def _segments(s3: S3) -> list[int]:
    return [s for k in s3.keys(CHANGES_PREFIX) if (s := parse_segment_key(k)) is not None]


def test_a_prune_on_a_is_applied_by_b_without_force(hosts: Callable[..., Host], s3: S3, cli: Cli) -> None:
    """Prune 11 of 14 on A: B's next pass deletes them and exits 0 (the delete records explain
    them); the same disappearance with no record is still held."""
    a, b = hosts("a"), hosts("b")
    ids = [a.bank.save(SaveRequest(P, f"Context: sprint note number {i}", category="context")).memory.id for i in range(14)]
    for mid in ids[:11]:
        _age(a, mid, 120)
    assert b.sync().ok and len(b.ids(P)) == 14
    pruned = a.bank.prune(P, RetentionRule.build(older_than="90d"))
    assert sorted(p.memory.id for p in pruned) == sorted(ids[:11])
    res = cli.at(b.path)("sync", "run")
    assert res.exit_code == 0, res.output
    assert "deleted 11 here" in res.output
    assert b.ids(P) == set(ids[11:])
    # The record names each deletion; a wipe of the rest with no record is guarded as before.
    deletes = [c for s in _segments(s3) for c in s3.get_json(segment_key(s))["changes"] if c["op"] == "delete"]
    assert len(deletes) == 11
    c = hosts("c")
    more = [c.bank.save(SaveRequest(P, f"Fact: item {i}", category="fact")).memory.id for i in range(8)]
    assert b.sync().ok
    for mid in more:
        s3.delete(f"memory/{P}/{mid}.json")
    report = b.sync()
    assert report.result == "guarded" and len(b.ids(P)) == 11


def test_a_no_op_pass_reads_two_objects_whatever_the_bucket_holds(hosts: Callable[..., Host], s3: S3,
                                                                  fault_proxy: FaultProxy) -> None:
    a = hosts("a")
    for i in range(30):
        a.bank.save(SaveRequest(f"p{i % 3}", f"memory number {i}"))
    b = hosts("b", bucket__endpoint=fault_proxy.endpoint, sync__list_page_size=5, **RECORD)
    first = b.sync()
    assert first.ok and first.mode == "full" and first.counts["pulled"] == 30
    before = len(fault_proxy.requests)
    report = b.sync()
    assert report.ok and report.mode == "record" and report.summary().startswith("ok: nothing to do")
    made = fault_proxy.requests[before:]
    assert [(m, p.split("?")[0].rsplit("/", 2)[-2:]) for m, p, _s in made] == [
        ("GET", ["memlocal", "bucket.json"]), ("GET", ["", "memlocal-test"])]
    assert f"start-after=memlocal%2Fchanges%2F{max(_segments(s3)):016d}.json" in made[1][1]  # the record after the cursor
    # A change on A: the next pass reads its segment and pulls that memory alone, no listing.
    new = a.bank.save(SaveRequest("p1", "saved after b's pass")).memory
    before = len(fault_proxy.requests)
    report = b.sync()
    assert report.ok and report.mode == "record" and report.counts["pulled"] == 1 and new.id in b.ids("p1")
    assert not [p for m, p, _s in fault_proxy.requests[before:] if "list-type" in p and "prefix=memory" in p]
    # Local work costs its own requests only: a bump is merged with one GET-free conditional PUT.
    b.bank.recall(RecallQuery("p1", "saved after"))
    report = b.sync()
    assert report.ok and report.mode == "record" and report.counts["merged"] >= 1


def test_writers_that_keep_no_record_are_seen_by_a_full_listing(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b", **RECORD)
    a.bank.save(SaveRequest(P, "kept in the record"))
    assert b.sync().ok
    foreign = "mem-0000f00d"
    body = json.loads(s3.client.get_object(Bucket=s3.bucket, Key=s3.keys()[0])["Body"].read())
    s3.put_json(f"memory/{P}/{foreign}.json", {**body, "id": foreign, "rawInput": "written by another tool"})
    assert b.sync().mode == "record" and foreign not in b.ids(P)
    report = b.sync(PassOptions(full=True))
    assert report.mode == "full" and report.counts["pulled"] == 1 and foreign in b.ids(P)
    # A record that cannot be trusted (an unknown format at the next number) means a full listing.
    nxt = max(_segments(s3)) + 1
    s3.put_json(segment_key(nxt), {"format": "memlocal-changes/99", "seq": nxt})
    report = b.sync()
    assert report.ok and report.mode == "full" and "unknown format" in report.record_note


@pytest.mark.s3_servers()  # the segment numbers rest on the server's conditional writes
def test_two_hosts_writing_at_once_never_make_a_third_miss_a_change(hosts: Callable[..., Host], s3: S3) -> None:
    a, b, c = hosts("a", **RECORD), hosts("b", **RECORD), hosts("c", **RECORD)
    for h in (a, b, c):
        assert h.sync().ok
    # Both think the next segment number is free: B's claim meets A's segment (412) and takes
    # the next one.
    m1 = a.bank.save(SaveRequest(P, "written on a")).memory
    m2 = b.bank.save(SaveRequest(P, "written on b at the same time")).memory
    assert sorted(_segments(s3))[-2:] == [max(_segments(s3)) - 1, max(_segments(s3))]
    # Then both at once, from threads, while C passes.
    saved: list[str] = []
    lock = threading.Lock()

    def write(host: Host, tag: str) -> None:
        for i in range(6):
            mid = host.bank.save(SaveRequest(P, f"{tag} concurrent memory {i}")).memory.id
            with lock:
                saved.append(mid)

    threads = [threading.Thread(target=write, args=(h, t)) for h, t in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    modes: list[str] = []
    while any(t.is_alive() for t in threads):
        modes.append(c.sync().mode)
    for t in threads:
        t.join()
    final = c.sync()
    assert final.ok and final.mode == "record"
    assert set(modes) <= {"record"}
    assert {m1.id, m2.id, *saved} <= c.ids(P)
    seqs = sorted(_segments(s3))
    assert seqs == list(range(seqs[0], seqs[-1] + 1))  # dense: no number skipped or taken twice


def test_old_segments_are_compacted_but_never_the_newest(hosts: Callable[..., Host], s3: S3) -> None:
    a = hosts("a", sync__change_retention_days=0.01)
    for i in range(3):
        a.bank.save(SaveRequest(P, f"memory {i}"))
    assert len(_segments(s3)) == 3
    old = segment_key(min(_segments(s3)))
    doc: dict[str, Any] = s3.get_json(old)
    for seq in _segments(s3):
        doc = s3.get_json(segment_key(seq))
        s3.put_json(segment_key(seq), {**doc, "createdAt": "2020-01-01T00:00:00Z"})
    report = a.sync()
    assert report.ok and report.counts["segments_compacted"] == 2
    assert _segments(s3) == [3]


def test_a_full_pass_reads_the_record_for_compaction_only_once_a_segment_can_have_aged_out(
        hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy) -> None:
    """Compaction lists the record and reads its oldest segment's age; the next full passes skip
    both until that segment can be past the retention (the state remembers when)."""
    a = hosts("a", bucket__endpoint=fault_proxy.endpoint)
    for i in range(3):
        a.bank.save(SaveRequest(P, f"memory {i}"))

    def compaction_requests(**kwargs: Any) -> tuple[int, list[str]]:
        before = len(fault_proxy.requests)
        report = a.sync(PassOptions(full=True), **kwargs)
        assert report.ok and report.mode == "full", report.reason
        # Its listing of the record, and reads of segments that exist (not the next one's 404).
        # (A listing of the record after the cursor, ``start-after``, is how every pass reads it.)
        return report.counts["segments_compacted"], [p for _m, p, status in fault_proxy.requests[before:]
                                                     if ("list-type" in p and "changes%2F" in p and "start-after" not in p)
                                                     or ("/changes/0" in p and status != 404)]

    assert compaction_requests()[1]                                   # the first full pass looks
    assert compaction_requests() == (0, [])                           # nothing can be old yet
    week = 8 * 86400.0
    compacted, made = compaction_requests(clock=lambda: time.time() + week)
    assert compacted == 2 and made and _segments(s3) == [3]           # past the retention: compacted


def test_a_fresh_host_lists_and_takes_from_snapshots_what_the_listing_confirms(
        hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy) -> None:
    """A snapshot never stands for a listing (docs/sync.md, "What a hint may do"): a fresh host
    lists the bucket (a request per thousand keys) and takes from the snapshot each object whose
    ETag the listing shows; what changed since is fetched, what is gone is not taken."""
    small = {"sync__snapshot_min_objects": 3, **RECORD}
    a = hosts("a", **small)
    ids = [a.bank.save(SaveRequest(P, f"memory number {i}")).memory.id for i in range(6)]
    a.bank.save(SaveRequest("tiny", "a profile too small for a snapshot"))
    assert a.sync(PassOptions(full=True)).counts["snapshots"] == 1
    later = a.bank.save(SaveRequest(P, "saved after the snapshot")).memory.id      # not in the snapshot
    a.bank.delete(P, ids[0])                                           # gone, still in the snapshot
    fresh = hosts("fresh", bucket__endpoint=fault_proxy.endpoint, **small)
    report = fresh.sync()
    assert report.ok and report.mode == "full", report.to_dict()
    assert fresh.ids(P) == {*ids[1:], later} and len(fresh.ids("tiny")) == 1
    assert report.counts["from_snapshot"] == 5
    # Its next pass follows the record.
    assert fresh.sync().mode == "record"
    # A fresh host's pull-only pass (hydration on open) takes the same path, and writes nothing.
    reader = hosts("reader", **small)
    report = reader.sync(PassOptions(pull_only=True))
    assert report.ok and report.counts["from_snapshot"] == 5 and reader.ids(P) == {*ids[1:], later}


def test_the_test_server_creates_a_key_once_however_many_ask_at_once(s3: S3) -> None:
    """The record's dense numbering rests on S3's atomic ``If-None-Match: *``: of writers racing
    for one key, exactly one wins. moto checks and then writes, so the suite's server runs its
    writes one at a time (tests/s3server.py) to answer as S3 does."""
    from botocore.exceptions import ClientError

    def create(key: str, body: bytes) -> bool:
        try:
            s3.client.put_object(Bucket=s3.bucket, Key=key, Body=body, IfNoneMatch="*")
            return True
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "PreconditionFailed", exc.response
            return False

    for round_ in range(12):
        key = f"race/{round_}.json"
        won: list[bool] = []
        start = threading.Barrier(8)

        def racer(n: int) -> None:
            start.wait()
            won.append(create(key, b"x" * (1_000 + n)))

        threads = [threading.Thread(target=racer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert won.count(True) == 1, (round_, won)


@pytest.mark.s3_servers()
def test_a_put_published_after_a_later_one_never_hides_the_later(hosts: Callable[..., Host], s3: S3,
                                                                 fault_proxy: FaultProxy) -> None:
    """Segments are published after their PUTs, in any order (a writer publishes when its pass
    ends, or after a kill at its next pass): B's merge (v1) is published after C's merge over it
    (v2). B, reading both, must not take its own v1, named last, for the object's current
    version (the fleet's hosts got such an update only from the hourly full listing)."""
    a = hosts("a", **RECORD)
    b = hosts("b", bucket__endpoint=fault_proxy.endpoint, **RECORD)
    c = hosts("c", **RECORD)
    mid = a.bank.save(SaveRequest(P, "a memory three hosts read")).memory.id
    for h in (b, c):
        assert h.sync().ok and mid in h.ids(P)
    for h in (b, c):
        assert h.sync().mode == "record"
    b.bank.store.mark_accessed(P, [mid], utcnow())
    c.bank.store.mark_accessed(P, [mid], utcnow())
    key = f"memory/{P}/{mid}.json"

    def c_merges_before_b_publishes(method: str, path: str, headers: dict[str, str]) -> bool:
        if method == "PUT" and CHANGES_PREFIX in path:  # B's PUT of v1 has landed; its segment waits
            report = c.sync()  # 412 on v0, reads v1, merges: v2, published first
            assert report.counts["merged"] == 1 and report.counts["precondition_failed"] == 1
            return True
        return False

    fault_proxy.before(c_merges_before_b_publishes)
    assert b.sync().counts["merged"] == 1
    assert s3.get_json(key)["accessCount"] == 2
    report = b.sync()  # reads C's segment (v2), then its own (v1)
    assert report.ok and report.mode == "record"
    assert b.bank.get(P, mid).access_count == 2
    assert a.sync().ok and a.bank.get(P, mid).access_count == 2
