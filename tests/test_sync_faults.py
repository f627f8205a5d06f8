"""Faults against a real S3 server: bad objects, empty or different buckets, foreign writers,
throttling and 5xx, and a listing longer than one page."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest
from conftest import Cli

from memlocal.model import utcnow
from s3server import S3, FaultProxy, Host
from memlocal import SaveRequest

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

P = "prof"


def test_bad_objects_are_skipped_reported_and_never_touch_local(hosts: Callable[..., Host], s3: S3, cli: Cli) -> None:
    a = hosts("a")
    kept = [a.bank.save(SaveRequest(P, f"good memory {i}")).memory for i in range(3)]
    victim = kept[0]
    good_remote = kept[1].with_changes(id="mem-00000001", raw_input="from elsewhere",
                                       processed_content="from elsewhere", summary="from elsewhere")
    s3.put_json("memory/prof/mem-00000001.json", good_remote.to_dict())
    bad = {
        "memory/prof/mem-0000000a.json": b'{"id": "mem-0000000a", "profileName": ',            # corrupt
        "memory/prof/mem-0000000b.json": json.dumps(good_remote.with_changes(id="mem-0000000c").to_dict()).encode(),
        "memory/prof/mem-0000000d.json": b'{"rawInput": "\xff\xfe broken"}',                  # invalid UTF-8
        "memory/prof/mem-0000000e.json": b" " * (10 * 1024 * 1024),                            # 10 MB
        "memory/prof/notes.txt": b"not a memory key",
        f"memory/{P}/{victim.id}.json": b"\x00garbage over a synced memory",                  # synced, then corrupted
    }
    for key, body in bad.items():
        s3.put_raw(key, body)
    before = {m.id: m for m in a.bank.store.iter_profile(P)}

    report = a.sync()
    assert report.result == "ok", report.reason
    assert report.counts["pulled"] == 1
    reasons = {s["key"]: s["reason"] for s in report.skipped}
    assert set(reasons) == set(bad)
    assert reasons["memory/prof/mem-0000000a.json"].startswith("not valid JSON")
    assert "body is mem-0000000c" in reasons["memory/prof/mem-0000000b.json"]
    assert reasons["memory/prof/mem-0000000d.json"].startswith("not valid UTF-8")
    assert "10485760 bytes; the cap is 1048576" in reasons["memory/prof/mem-0000000e.json"]
    assert "not a memory key" in reasons["memory/prof/notes.txt"]
    assert reasons[f"memory/{P}/{victim.id}.json"].startswith("not valid UTF-8") or \
        reasons[f"memory/{P}/{victim.id}.json"].startswith("not valid JSON")
    # Local memories untouched; nothing bad imported.
    after = {m.id: m for m in a.bank.store.iter_profile(P)}
    assert {k: v for k, v in after.items() if k != "mem-00000001"} == before
    assert after["mem-00000001"].raw_input == "from elsewhere"
    # Reported by status, with keys and reasons; the next pass does not fetch them again.
    res = cli("sync", "status", "--json", db=a.path)
    st = json.loads(res.stdout)
    assert {s["key"] for s in st["skipped"]} == set(bad)
    again = a.sync()
    assert again.ok and again.planned == {} and len(again.skipped) == len(bad)
    # Once repaired (a new ETag), the object is fetched and the skip entry goes away.
    s3.put_json("memory/prof/mem-0000000a.json", good_remote.with_changes(id="mem-0000000a").to_dict())
    s3.delete("memory/prof/notes.txt")
    fixed = a.sync()
    assert fixed.counts["pulled"] == 1 and len(fixed.skipped) == len(bad) - 2


def test_an_emptied_bucket_never_deletes_local_memories(hosts: Callable[..., Host], s3: S3, tmp_path: Path, cli: Cli) -> None:
    a = hosts("a")
    ids = {a.bank.save(SaveRequest(P, f"memory {i}")).memory.id for i in range(3)}
    for key in s3.keys(""):  # the whole bucket, its identity marker included
        s3.delete(key)
    report = a.sync()
    assert report.result == "guarded" and "memlocal/bucket.json is gone" in report.reason
    assert a.ids(P) == ids
    res = cli("sync", "run", db=a.path)
    assert res.exit_code == 3 and "sync stopped" in res.stderr
    assert a.ids(P) == ids
    # --reupload puts them back; nothing was deleted on either side.
    assert a.sync(reupload=True).counts["pushed"] == 3
    assert len(s3.keys()) == 3 and a.sync().summary().startswith("ok: nothing to do")


def test_a_different_bucket_never_deletes_local_memories(hosts: Callable[..., Host], s3: S3) -> None:
    a = hosts("a")
    ids = {a.bank.save(SaveRequest(P, f"memory {i}")).memory.id for i in range(8)}
    s3.create_bucket("memlocal-other")
    stranger = a.bank.get(P, next(iter(ids))).with_changes(id="mem-abcdef01", raw_input="other bucket",
                                                          processed_content="other bucket")
    s3.client.put_object(Bucket="memlocal-other", Key="memory/prof/mem-abcdef01.json",
                         Body=json.dumps(stranger.to_dict()).encode())
    other = hosts("a", bucket__name="memlocal-other")   # same database, another bucket
    report = other.sync()
    assert report.ok, report.reason
    assert report.counts["deleted_local"] == 0 and report.counts["pulled"] == 1 and report.counts["pushed"] == 8
    assert other.ids(P) == ids | {"mem-abcdef01"}
    # And back to the first bucket: nothing deleted there or here.
    back = hosts("a")
    report = back.sync()
    assert report.ok and report.counts["deleted_local"] == 0 and report.counts["deleted_remote"] == 0
    assert back.ids(P) == ids | {"mem-abcdef01"}


GO_OBJECT = {
    "id": "mem-0a1b2c3d",
    "profileName": P,
    "rawInput": "The user prefers dark mode in every editor",
    "processedContent": "Prefers dark mode in editors",
    "summary": "Prefers dark mode",
    "category": "preference",
    "source": "explicit",
    "confidence": 0.9,
    "createdAt": "2025-03-04T05:06:07.123456789Z",
    "lastAccessedAt": "0001-01-01T00:00:00Z",
    "accessCount": 0,
    "stalenessScore": 0,
    "isActive": True,
    "version": 1,
    "embeddingModel": "none",
    "tags": ["ui", "editor"],
}


def test_a_go_object_is_read_and_its_extra_fields_survive_our_push(hosts: Callable[..., Host], s3: S3) -> None:
    key = f"memory/{P}/mem-0a1b2c3d.json"
    s3.put_raw(key, json.dumps(GO_OBJECT, separators=(",", ":")).encode())
    a = hosts("a")
    assert a.sync().counts["pulled"] == 1
    m = a.bank.get(P, "mem-0a1b2c3d")
    assert m.created_at.isoformat() == "2025-03-04T05:06:07.123456+00:00"
    assert m.last_accessed_at is None and m.access_count == 0 and m.category == "preference"
    assert dict(m.extra) == {"embeddingModel": "none", "tags": ["ui", "editor"]}
    a.bank.store.mark_accessed(P, [m.id], utcnow())
    a.bank.store.mark_accessed(P, [m.id], utcnow())
    assert a.sync().counts["merged"] == 1
    obj = s3.get_json(key)
    assert obj["accessCount"] == 2 and obj["lastAccessedAt"].startswith(str(utcnow().year))
    assert obj["embeddingModel"] == "none" and obj["tags"] == ["ui", "editor"]
    assert {k: obj[k] for k in ("rawInput", "processedContent", "summary", "category", "confidence")} == \
        {k: GO_OBJECT[k] for k in ("rawInput", "processedContent", "summary", "category", "confidence")}


def test_throttling_and_5xx_are_retried_with_backoff(hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy) -> None:
    a = hosts("a", bucket__endpoint=fault_proxy.endpoint)
    for i in range(3):
        a.bank.save(SaveRequest(P, f"saved {i}"))   # write-through through the proxy
    b = hosts("b", bucket__endpoint=fault_proxy.endpoint)
    fault_proxy.fail(2, 503, "SlowDown")          # the listing is throttled twice, then answers
    report = b.sync()
    assert report.ok and report.counts["pulled"] == 3
    assert fault_proxy.count(status=503) == 2
    fault_proxy.fail(1, 500, "InternalError", when=lambda method, path: method == "GET" and "mem-" in path)
    c = hosts("c", bucket__endpoint=fault_proxy.endpoint)
    assert c.sync().counts["pulled"] == 3 and fault_proxy.count(status=500) == 1


def test_retries_are_bounded(hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy) -> None:
    a = hosts("a", bucket__endpoint=fault_proxy.endpoint)
    fault_proxy.fail(1000, 503, "SlowDown")
    report = a.sync()
    assert report.result == "failed" and "503" in report.reason and "SlowDown" in report.reason
    assert fault_proxy.count(status=503) == 3      # sync.attempts in the test environment


def test_a_listing_of_many_pages_is_pulled_whole(hosts: Callable[..., Host], s3: S3, cli: Cli) -> None:
    """25 objects listed 10 a page (``sync.list_page_size``; S3's own cap is 1000): the first
    page, then the rest of the profile as id ranges in parallel (docs/sync.md, "Listing"), all
    pulled; the no-op pass after it lists the same pages."""
    template = dict(GO_OBJECT)
    template.pop("embeddingModel")

    def put(i: int) -> None:
        obj = dict(template, id=f"mem-{i:08x}", rawInput=f"memory {i}", processedContent=f"memory {i}",
                   summary=f"memory {i}")
        s3.client.put_object(Bucket=s3.bucket, Key=f"memory/{P}/mem-{i:08x}.json", Body=json.dumps(obj).encode())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(25)))
    a = hosts("a", sync__list_page_size=10)
    page_size = {"MEMLOCAL_SYNC_LIST_PAGE_SIZE": "10"}
    res = cli("sync", "run", "--json", "--progress", db=a.path, env=page_size)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    # One probe page; then the rest of mem-0… (the other 15 keys: two pages of 10), mem-1… to
    # mem-f… (15 listings) and the two ranges for odd keys; then one probe past the profile.
    assert report["pages"] == 1 + 2 + 15 + 2 + 1 and report["objects"] == 25 and report["counts"]["pulled"] == 25
    assert "sync" in res.stderr  # the progress bar's label
    assert a.bank.stats()["perProfile"] == {P: 25}
    assert len(a.ids(P)) == 25
    noop = a.sync()
    assert noop.ok and noop.planned == {} and noop.pages == report["pages"]


def test_a_listing_in_parallel_ranges_sees_every_key_exactly_once(hosts: Callable[..., Host], s3: S3) -> None:
    """Ids spread over every first hex digit in two profiles, and odd keys between and around
    the ranges (a key below ``mem-0``, one between ``mem-9…`` and ``mem-a…``, one past ``mem-f…``,
    one directly under ``memory/``, a nested one), listed 3 a page: every memory is pulled once,
    every odd key is reported once, and the no-op pass after it plans nothing."""
    template = {k: v for k, v in GO_OBJECT.items() if k != "embeddingModel"}
    valid = {"prof": [f"mem-{(i * 0x0fedcba7) % 16 ** 8:08x}" for i in range(1, 41)],
             "other": [f"mem-{(i * 0x1234567) % 16 ** 8:08x}" for i in range(1, 13)]}
    odd = ["memory/prof/a-note.json", "memory/prof/mem-9~.json", "memory/prof/mem-Z0000000.json",
           "memory/prof/zz.json", "memory/prof/sub/mem-00000001.json", "memory/a-top.json", "memory/prof/mem-"]

    def put(item: tuple[str, str]) -> None:
        profile, mid = item
        obj = dict(template, id=mid, profileName=profile, rawInput=f"memory {mid}", processedContent=f"memory {mid}",
                   summary=f"memory {mid}")
        s3.client.put_object(Bucket=s3.bucket, Key=f"memory/{profile}/{mid}.json", Body=json.dumps(obj).encode())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, [(p, m) for p, ids in valid.items() for m in ids]))
        list(pool.map(lambda k: s3.put_raw(k, b"not a memory"), odd))
    a = hosts("a", sync__list_page_size=3)
    report = a.sync()
    assert report.result == "ok", report.reason
    assert report.objects == 52 + len(odd)
    assert report.counts["pulled"] == 52
    assert sorted(s["key"] for s in report.skipped) == sorted(odd)
    assert {p: sorted(a.ids(p)) for p in valid} == {p: sorted(ids) for p, ids in valid.items()}
    noop = a.sync()
    assert noop.ok and noop.planned == {} and noop.objects == report.objects


def test_an_object_that_grows_after_the_listing_is_never_read_whole(
        hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy) -> None:
    """The size cap is enforced on the GET too (a Range request), not only from the listing."""
    key = f"memory/{P}/mem-0a1b2c3d.json"
    s3.put_raw(key, json.dumps(GO_OBJECT).encode())

    def grow(method: str, path: str, headers: dict[str, str]) -> bool:
        if method == "GET" and "/memory/" in path and path.split("?")[0].endswith(".json"):
            assert headers.get("Range") == "bytes=0-1048576"
            s3.put_raw(key, b"x" * (3 * 1024 * 1024))
            return True
        return False

    fault_proxy.before(grow)
    a = hosts("a", bucket__endpoint=fault_proxy.endpoint)
    report = a.sync()
    assert report.ok and report.counts["pulled"] == 0
    assert [s["reason"] for s in report.skipped] == ["object is 3145728 bytes; the cap is 1048576"]
    assert a.ids(P) == set()


@pytest.mark.s3_servers("moto")  # the S3 client itself
def test_the_listing_reader_gives_what_botocore_gives(s3: S3) -> None:
    """memlocal_sync.listing reads a ListObjectsV2 page into the dictionary botocore's own
    parser makes (the members the sync reads), for keys that need URL-encoding too."""
    import boto3
    import botocore.session

    from memlocal_sync.listing import parse_listing, parser_factory

    keys = ["memory/p/mem-00000001.json", "memory/p/a key with spaces+plus%25.json", "memory/p/ünï/cödé.json",
            "memory/q/mem-00000002.json", "memory/top.json"]
    for k in keys:
        s3.put_raw(k, b"{}")

    def client(fast: bool):  # type: ignore[no-untyped-def]
        core = botocore.session.get_session()
        if fast:
            core.register_component("response_parser_factory", parser_factory())
        core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
        base = s3.client
        return boto3.session.Session(botocore_session=core).client(
            "s3", endpoint_url=base.meta.endpoint_url, region_name=base.meta.region_name,
            aws_access_key_id="test", aws_secret_access_key="test",
            config=botocore.config.Config(s3={"addressing_style": "path"}))

    plain, fast = client(False), client(True)
    for kwargs in ({"Prefix": "memory/"}, {"Prefix": "memory/", "MaxKeys": 2}, {"Prefix": "memory/", "Delimiter": "/"},
                   {"Prefix": "memory/p/", "StartAfter": "memory/p/b"}, {"Prefix": "nothing/"}):
        want = plain.list_objects_v2(Bucket=s3.bucket, **kwargs)
        got = fast.list_objects_v2(Bucket=s3.bucket, **kwargs)
        want.pop("ResponseMetadata"), got.pop("ResponseMetadata")
        for entry in want.get("Contents", []):  # members the sync does not read are left out
            for member in set(entry) - {"Key", "ETag", "Size", "LastModified", "StorageClass"}:
                del entry[member]
        assert got == want, kwargs
    assert parse_listing(b"<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>") == {
        "IsTruncated": False}


@pytest.mark.s3_servers("moto")  # the S3 client itself
def test_buckets_with_the_same_settings_share_a_client_whose_last_close_closes_its_connections(
        s3: S3, fault_proxy: FaultProxy, wait_for: Callable[..., object]) -> None:
    """A bank opens two Buckets and a pass one: those of one process with the same settings and
    limits share one botocore client (making one costs 15-30 ms of CPU). Closing a Bucket leaves
    the client to the others; the last close closes its connections, and the next Bucket with
    those settings takes the same client again, on new connections."""
    from memlocal_sync.bucket import Bucket, BucketSettings

    from s3server import ACCESS_KEY, SECRET_KEY

    settings = BucketSettings(name=s3.bucket, source="test", endpoint=fault_proxy.endpoint, region="us-east-1",
                              access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    a, b = Bucket(settings, timeout_s=5, attempts=1), Bucket(settings, timeout_s=5, attempts=1)
    other = Bucket(settings, timeout_s=5, attempts=2)
    shared = a.client
    assert b.client is shared and other.client is not shared
    a.check()
    b.check()
    assert fault_proxy.connections  # kept alive between requests
    a.close()
    b.check()  # b's client is still open
    b.close()
    other.close()
    wait_for(lambda: not fault_proxy.connections, what="the last close to close the connections")
    again = Bucket(settings, timeout_s=5, attempts=1)
    try:
        again.check()
        assert again.client is shared
        assert fault_proxy.connections
    finally:
        again.close()
    wait_for(lambda: not fault_proxy.connections, what="the connections to close again")
