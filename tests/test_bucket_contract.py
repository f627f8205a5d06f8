"""The bucket client's contract (``memlocal_sync.bucket.BucketClient``), one suite run against every
backend: the in-memory client (``memlocal_sync.inmemory``), the S3 client on moto_server and the S3
client on SeaweedFS (as litestream's ``replica_client_test.go`` runs one suite against every
replica client). What the sync relies on: conditional writes that lose with ``PreconditionFailed``
and one winner among racers, S3's ETags, listings in key order across pages and ranges, bounded
reads, idempotent deletes, a missing bucket said as ``BucketUnavailable``."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Iterator

import pytest

from memlocal_sync import inmemory
from memlocal_sync.bucket import (
    Bucket, BucketClient, BucketSettings, BucketUnavailable, ObjectMissing, ObjectTooLarge, PreconditionFailed,
)
from memlocal_sync.clients import open_bucket
from memlocal_sync.inmemory import InMemoryServer
from s3server import ACCESS_KEY, SECRET_KEY

PAGE = 3  # small pages, so that every listing below spans several


def _md5(body: bytes) -> str:
    return '"' + hashlib.md5(body).hexdigest() + '"'


@pytest.fixture(params=["memory", "moto", "seaweedfs"])
def s3_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _s3_client(name: str, endpoint: str) -> Bucket:
    settings = BucketSettings(name=name, source="test", endpoint=endpoint, region="us-east-1",
                              access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    return Bucket(settings, timeout_s=10.0, attempts=2, pool_size=16, page_size=PAGE)


@pytest.fixture
def client(request: pytest.FixtureRequest, s3_kind: str) -> Iterator[BucketClient]:
    if s3_kind == "memory":
        server = InMemoryServer()
        server.create_bucket("contract")
        made: BucketClient = server.client("contract", page_size=PAGE)
    else:
        s3 = request.getfixturevalue("s3")
        made = _s3_client(s3.bucket, s3.endpoint)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def missing(request: pytest.FixtureRequest, s3_kind: str) -> Iterator[BucketClient]:
    """A client of a bucket that does not exist (on the same backend)."""
    if s3_kind == "memory":
        made: BucketClient = InMemoryServer().client("no-such-bucket")
    else:
        made = _s3_client("memlocal-no-such-bucket", request.getfixturevalue("s3").endpoint)
    try:
        yield made
    finally:
        made.close()


def test_the_client_is_a_bucket_client(client: BucketClient) -> None:
    assert isinstance(client, BucketClient)
    client.check()


def test_create_writes_once_and_its_etag_is_the_bodys_md5(client: BucketClient) -> None:
    etag = client.create("memory/p/mem-00000001.json", b'{"a": 1}')
    assert etag == _md5(b'{"a": 1}')
    with pytest.raises(PreconditionFailed):
        client.create("memory/p/mem-00000001.json", b'{"a": 2}')
    assert client.get("memory/p/mem-00000001.json", 1 << 20) == (b'{"a": 1}', etag)


def test_replace_needs_the_current_etag(client: BucketClient) -> None:
    key = "memory/p/mem-00000002.json"
    first = client.create(key, b"one")
    second = client.replace(key, b"two", first)
    assert second == _md5(b"two")
    with pytest.raises(PreconditionFailed):
        client.replace(key, b"three", first)  # stale
    assert client.get(key, 100) == (b"two", second)
    # A key that is gone: S3 and moto answer 404, SeaweedFS 412; the sync reads either as "moved on".
    with pytest.raises((ObjectMissing, PreconditionFailed)):
        client.replace("memory/p/mem-0000dead.json", b"x", second)
    with pytest.raises(ObjectMissing):
        client.get("memory/p/mem-0000dead.json", 100)


def test_put_overwrites_and_delete_is_idempotent(client: BucketClient) -> None:
    key = "memlocal/snapshots/p/x.json.gz"
    client.put(key, b"old")
    assert client.put(key, b"new") == _md5(b"new")
    assert client.get(key, 10)[0] == b"new"
    client.delete(key)
    client.delete(key)  # already gone: still fine
    with pytest.raises(ObjectMissing):
        client.get(key, 10)
    assert client.list("memlocal/").objects == []


def test_get_never_reads_past_its_cap(client: BucketClient) -> None:
    body = b"x" * 100
    etag = client.put("big", body)
    assert client.get("big", 100) == (body, etag)
    with pytest.raises(ObjectTooLarge) as info:
        client.get("big", 99)
    assert info.value.size == 100
    client.put("empty", b"")
    assert client.get("empty", 10)[0] == b""


def test_listings_are_in_key_order_across_pages(client: BucketClient) -> None:
    keys = [f"memory/p/mem-{i:08x}.json" for i in range(10)] + ["memory/q/mem-00000001.json",
                                                              "memory/My Notes/readme.txt", "memory/é/x.json",
                                                              "memory/a+b/x.json"]
    etags = {k: client.put(k, k.encode()) for k in keys}
    client.put("memlocal/bucket.json", b"{}")
    listing = client.list("memory/")
    assert [o.key for o in listing.objects] == sorted(keys, key=lambda k: k.encode())
    assert all(o.etag == etags[o.key] and o.size == len(o.key.encode()) for o in listing.objects)
    assert listing.pages == 5 and not listing.truncated  # 14 keys, 3 a page
    # One profile; a range (start_after < key <= last); a first page alone.
    assert [o.key for o in client.list("memory/p/").objects] == keys[:10]
    ranged = client.list("memory/p/", start_after=keys[2], last=keys[6])
    assert [o.key for o in ranged.objects] == keys[3:7]
    first = client.list("memory/p/", max_pages=1)
    assert [o.key for o in first.objects] == keys[:3] and first.truncated and first.pages == 1
    whole = client.list("memory/p/", start_after=keys[6], max_pages=1)
    assert [o.key for o in whole.objects] == keys[7:10] and not whole.truncated
    # With a delimiter: the profiles one level down.
    assert sorted(client.list("memory/", delimiter="/").prefixes) == sorted(
        ["memory/p/", "memory/q/", "memory/My Notes/", "memory/é/", "memory/a+b/"])
    assert client.list("nothing/").objects == [] and client.list("nothing/").pages == 1


def test_a_prefix_that_is_not_a_folder_lists_every_key_it_starts_and_odd_keys_as_the_bucket_holds_them(
        client: BucketClient, s3_kind: str, request: pytest.FixtureRequest) -> None:
    # The engine lists ``memory/p/mem-3``-style prefixes and single keys (the S3 client lists the
    # folder from just before the prefix: a key sorting between that point and the prefix is not
    # the prefix's, and does not end its listing).
    keys = ["memory/p/mem-2ff.json", "memory/p/mem-2\U0010ffffz.json", "memory/p/mem-3", "memory/p/mem-3a.json",
            "memory/p/mem-3b.json", "memory/p/mem-4.json"]
    for key in keys:
        client.put(key, b"x")
    assert [o.key for o in client.list("memory/p/mem-3").objects] == keys[2:5]
    assert [o.key for o in client.list("memory/p/mem-3a.json").objects] == ["memory/p/mem-3a.json"]
    assert [o.key for o in client.list("memory/p/mem-3", start_after=keys[3]).objects] == [keys[4]]
    if s3_kind == "seaweedfs":
        return  # it refuses or rewrites such keys itself
    # Keys object_store will not name as they are (an empty segment, ``.``, a final ``/`` beside
    # the key without it): the listing is the bucket's all the same.
    # (Written with boto3: object_store will not write them either.)
    odd = ["memory/p//x.json", "memory/p/./y.json", "memory/p/mem-3b.json/"]
    if s3_kind == "memory":
        for key in odd:
            client.put(key, b"odd")
    else:
        import boto3

        s3 = request.getfixturevalue("s3")
        writer = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
                              aws_secret_access_key=SECRET_KEY)
        for key in odd:
            writer.put_object(Bucket=s3.bucket, Key=key, Body=b"odd")
    assert [o.key for o in client.list("memory/p/").objects] == sorted(keys + odd, key=lambda k: k.encode())
    assert [o.key for o in client.list("memory/p/mem-3").objects] == [*keys[2:5], "memory/p/mem-3b.json/"]


def test_racing_creates_have_one_winner(client: BucketClient) -> None:
    winners: list[str] = []
    lost: list[str] = []
    start = threading.Barrier(12)

    def race(i: int) -> None:
        start.wait()
        try:
            client.create("memlocal/changes/0000000000000001.json", f"writer {i}".encode())
            winners.append(f"writer {i}")
        except PreconditionFailed:
            lost.append(f"writer {i}")

    threads = [threading.Thread(target=race, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(lost) == 11
    assert client.get("memlocal/changes/0000000000000001.json", 100)[0] == winners[0].encode()


def test_racing_replaces_of_one_etag_have_one_winner(client: BucketClient) -> None:
    key = "memory/p/mem-0000abcd.json"
    etag = client.create(key, b"base")
    won: list[bytes] = []
    start = threading.Barrier(8)

    def race(i: int) -> None:
        start.wait()
        body = f"edit {i}".encode()
        try:
            client.replace(key, body, etag)
            won.append(body)
        except PreconditionFailed:
            pass

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and client.get(key, 100)[0] == won[0]


def test_a_missing_bucket_is_unavailable(missing: BucketClient) -> None:
    with pytest.raises(BucketUnavailable, match="does not exist"):
        missing.check()
    with pytest.raises(BucketUnavailable):
        missing.list("memory/")


# --- memory:// endpoints: what the engine's in-process tests rely on (docs/sync.md) -------------


@pytest.fixture
def mem() -> Iterator[inmemory.InMemoryEndpoint]:
    made = inmemory.endpoint("contract-endpoint")
    try:
        yield made
    finally:
        inmemory.forget("contract-endpoint")


def _open(url: str, **kw: float) -> BucketClient:
    return open_bucket(BucketSettings(name="b", source="test", endpoint=url), timeout_s=kw.get("timeout_s", 5.0),
                       attempts=int(kw.get("attempts", 3)), deadline_s=kw.get("deadline_s"))


def test_every_client_of_one_memory_endpoint_sees_the_same_bucket(mem: inmemory.InMemoryEndpoint) -> None:
    a, b = _open(mem.endpoint), _open(mem.endpoint)
    assert isinstance(a, inmemory.InMemoryBucket) and isinstance(a, BucketClient)
    etag = a.create("memory/p/mem-00000001.json", b"one")
    assert b.get("memory/p/mem-00000001.json", 10) == (b"one", etag)
    with pytest.raises(PreconditionFailed):
        b.create("memory/p/mem-00000001.json", b"two")
    other = inmemory.endpoint("contract-elsewhere")
    try:
        assert _open(other.endpoint).list("memory/").objects == []  # another endpoint, another server
    finally:
        inmemory.forget("contract-elsewhere")
    assert [m[0] for m in mem.requests] == ["PUT", "GET", "PUT"]
    assert mem.requests[0][1] == "/b/memory/p/mem-00000001.json" and mem.count("PUT", 412) == 1


def test_injected_errors_are_retried_up_to_the_attempts_then_translated(mem: inmemory.InMemoryEndpoint) -> None:
    client = _open(mem.endpoint, attempts=3)
    mem.fail(2)  # 503 SlowDown twice, then the bucket answers
    assert client.list("memory/").objects == [] and mem.count(status=503) == 2
    mem.fail(3)
    with pytest.raises(BucketUnavailable, match="answered 503 SlowDown during LIST memory/"):
        client.list("memory/")
    mem.fail(1, 403, "AccessDenied", when=lambda method, path: method == "PUT")
    assert client.list("memory/").objects == []  # not a PUT: served
    with pytest.raises(BucketUnavailable, match="denied"):
        client.put("memlocal/x", b"x")
    mem.fail(1, 412, "PreconditionFailed")
    with pytest.raises(PreconditionFailed):
        client.put("memlocal/x", b"x")


def test_a_down_or_frozen_endpoint_is_unavailable_within_the_timeout_and_deadline(
        mem: inmemory.InMemoryEndpoint) -> None:
    client = _open(mem.endpoint, attempts=2, timeout_s=0.05)
    mem.down()
    with pytest.raises(BucketUnavailable, match="cannot reach bucket b"):
        client.check()
    mem.up()
    client.check()
    mem.freeze()
    with pytest.raises(BucketUnavailable, match="no answer within 0.05 s"):
        client.get("k", 10)
    deadline = _open(mem.endpoint, attempts=100, timeout_s=0.05, deadline_s=0.2)
    deadline.begin_pass()
    with pytest.raises(BucketUnavailable, match="sync.deadline_s"):
        deadline.get("k", 10)
    mem.thaw()
    deadline.end_pass()
    with pytest.raises(ObjectMissing):
        deadline.get("k", 10)
    assert mem.received > len(mem.requests)  # the frozen requests were read, never answered


def test_hooks_run_before_and_after_a_request_until_they_say_done(mem: inmemory.InMemoryEndpoint) -> None:
    # The racer goes to the same server past this endpoint (its requests run no hooks).
    direct = inmemory.endpoint("contract-direct", server=mem.server)
    client, racer = _open(mem.endpoint), _open(direct.endpoint)
    etag = client.create("memory/p/mem-00000002.json", b"base")
    seen: list[tuple[str, str, dict[str, str]]] = []

    def race(method: str, path: str, headers: dict[str, str]) -> bool:
        seen.append((method, path, headers))
        if "If-Match" in headers:
            racer.replace("memory/p/mem-00000002.json", b"theirs", headers["If-Match"])  # requests of its own
            return True
        return False

    mem.before(race)
    with pytest.raises(PreconditionFailed):
        client.replace("memory/p/mem-00000002.json", b"ours", etag)
    assert seen[-1][2] == {"If-Match": etag} and mem.hooks == []
    answered: list[bytes] = []
    mem.after(lambda method, path, headers: answered.append(racer.get("memory/p/mem-00000002.json", 99)[0]) is None)
    assert client.get("memory/p/mem-00000002.json", 99)[0] == b"theirs" and answered == [b"theirs"]
    inmemory.forget("contract-direct")


def test_the_cli_runs_a_pass_on_a_memory_endpoint_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               mem: inmemory.InMemoryEndpoint) -> None:
    from conftest import Cli

    monkeypatch.setenv("INTERNAL_S3_BUCKET", "cli-bucket")
    monkeypatch.setenv("INTERNAL_S3_ENDPOINT", mem.endpoint)
    monkeypatch.setenv("MEMLOCAL_SYNC_PULL_ON_OPEN", "false")
    a, b = Cli(tmp_path / "a.db"), Cli(tmp_path / "b.db")
    assert a("save", "-p", "alice", "prefers tea to coffee").exit_code == 0  # written through
    res = b("sync", "run")
    assert res.exit_code == 0 and "pulled 1" in res.stdout, res.output
    assert [m["rawInput"] for m in b.json("list", "-p", "alice", "--json")["memories"]] == ["prefers tea to coffee"]
    assert len(mem.server.client("cli-bucket").list("memory/alice/").objects) == 1


def test_stray_keys_are_shown_with_every_unseen_character_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 mem: inmemory.InMemoryEndpoint) -> None:
    """A key under memory/ that is not a memory key is reported by ``sync run`` and ``sync status``
    as written, except that what a terminal would not show, or could show as something else (a
    zero-width space that makes ``alice\u200b`` look like ``alice``, a private-use or unassigned
    code point, a combining mark, a control, another script's space), is an escape."""
    import unicodedata

    from conftest import Cli

    monkeypatch.setenv("INTERNAL_S3_BUCKET", "stray-bucket")
    monkeypatch.setenv("INTERNAL_S3_ENDPOINT", mem.endpoint)
    monkeypatch.setenv("MEMLOCAL_SYNC_PULL_ON_OPEN", "false")
    # profile part as stored -> as shown (letters and digits of any script stay as they are)
    odd = {"alice\u200b": r"alice\u200b", "\ue000": r"\ue000", "al\u0301ice": r"al\u0301ice",
           "x\U000e0fffy": r"x\U000e0fffy", "a\u00a0b": r"a\xa0b", "a\x1bb": r"a\x1bb", "caf\u00e9": "caf\u00e9",
           "\u0663": "\u0663"}
    mem.server.create_bucket("stray-bucket")
    bucket = mem.server.client("stray-bucket")
    for i, name in enumerate(odd):
        bucket.put(f"memory/{name}/mem-0000000{i}.json", b"{}")
    cli = Cli(tmp_path / "a.db")
    run, status = cli("sync", "run"), cli("sync", "status")
    assert run.exit_code == 0, run.output
    for out in (run.stdout, status.stdout):
        assert out.count("not a memory key") == len(odd), out
        for i, shown in enumerate(odd.values()):
            assert f"memory/{shown}/mem-0000000{i}.json" in out, (shown, out)
        unseen = [ch for ch in out if unicodedata.category(ch)[0] in "CZM" and ch not in " \n"]
        assert unseen == [], unseen


def test_a_memory_endpoint_is_a_valid_setting_and_a_bad_name_one_clear_line() -> None:
    from memlocal import Config
    from memlocal.errors import ConfigError

    config = Config.load(environ={"INTERNAL_S3_BUCKET": "b1", "INTERNAL_S3_ENDPOINT": "memory://unit-1"})
    assert config.bucket.endpoint == "memory://unit-1"
    with pytest.raises(ConfigError, match="bucket.endpoint must be empty, an http:// or https:// URL, or memory://<name>"):
        Config.load(environ={"INTERNAL_S3_BUCKET": "b1", "INTERNAL_S3_ENDPOINT": "memory://a b"})


def test_a_memory_endpoint_no_code_made_reaches_no_bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``memory://`` is for tests and embedding: the code that runs the bank makes the endpoint
    (``inmemory.endpoint(name)``). A config that names one nothing made (a CLI run, a daemon, a
    server: each its own process) reaches no bucket: a save stays queued for a real one, never
    "in the bucket" of a bucket that ends with the process, and a pass fails with one line."""
    from conftest import Cli

    monkeypatch.setenv("INTERNAL_S3_BUCKET", "cli-bucket")
    monkeypatch.setenv("INTERNAL_S3_ENDPOINT", "memory://nobody-made-this")
    monkeypatch.setenv("MEMLOCAL_SYNC_PULL_ON_OPEN", "false")
    cli = Cli(tmp_path / "a.db")
    try:
        saved = cli("save", "-p", "ops", "the deploy runs on port 8443")
        assert saved.exit_code == 0 and "in the bucket" not in saved.stdout, saved.output
        res = cli("sync", "run")
        assert res.exit_code != 0 and "memory://nobody-made-this" in res.output, res.output
        assert "no in-process endpoint" in res.output and "Traceback" not in res.output, res.output
        assert "pending:     1 " in cli("sync", "status").stdout
        assert "nobody-made-this" not in inmemory.registered()
    finally:
        inmemory.forget("nobody-made-this")
