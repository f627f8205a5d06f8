"""Reproductions of a second round of trust findings (docs/sync.md, "Safety", "Snapshots" and
"What a hint may do"): a wipe after the agent used its memories, a delete record for an id a
follower does not hold, an id copied under another profile, a decompression bomb as a snapshot, a
fresh runner right after a first push, forged timestamps and counts. Each on moto_server and on
SeaweedFS."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import zlib
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from conftest import Cli

from memlocal.model import COUNT_MAX, parse_time
from memlocal_sync.changes import CHANGES_PREFIX, parse_segment_key, segment_key
from memlocal_sync.marker import MARKER_KEY
from s3server import S3, Host
from memlocal import SaveRequest
from memlocal_sync.report import PassOptions

pytestmark = pytest.mark.s3_servers()

P = "alice"
RECORD = {"sync__full_listing_s": 3600}  # follow the record; list in full once an hour
ENV_RECORD = {"MEMLOCAL_SYNC_FULL_LISTING_S": "3600"}


def _tail(s3: S3) -> int:
    return max((s for k in s3.keys(CHANGES_PREFIX) if (s := parse_segment_key(k)) is not None), default=0)


def _forge(s3: S3, changes: list[dict[str, Any]]) -> None:
    """The next segment, as a hostile (or late, or replaying) host writes it."""
    seq = _tail(s3) + 1
    doc = {"format": "memlocal-changes/1", "seq": seq, "marker": s3.get_json(MARKER_KEY)["id"], "host": "evil",
           "createdAt": "2026-12-02T00:00:00Z", "changes": changes}
    s3.put_json(segment_key(seq), doc)


PREFERENCES = ("green tea", "dark mode", "short answers", "metric units", "British spelling", "tabs over spaces",
               "morning meetings", "Python over Go", "a standing desk", "plain-text email", "vim keybindings",
               "the 24-hour clock", "ISO dates", "bullet points", "quiet notifications", "squash merges",
               "monospace fonts", "a light lunch", "weekly summaries", "small pull requests")


# --- 1. the guard counts every deletion, whatever path found it --------------------------------------


def test_a_wipe_after_inject_is_guarded(hosts: Any, s3: S3, cli: Cli) -> None:
    a = hosts("a")
    for thing in PREFERENCES:
        a.bank.save(SaveRequest(P, f"alice prefers {thing}", category="preference"))
    assert a.sync().ok
    b = hosts("b", **RECORD)
    assert b.sync().ok and b.bank.store.count() == 20 and b.sync().ok  # (the record's cursor is set)
    res = cli.at(b.path)("inject", "-p", P, "write alice's weekly report", env=ENV_RECORD)
    assert res.exit_code == 0, res.output
    bumped = sum(1 for _m, d in b.bank.replica.memories_with_deltas([P]) if d > 0)
    assert bumped > 5, bumped
    for key in s3.keys():
        s3.delete(key)  # every memory object; the marker and the record stay
    res = cli.at(b.path)("sync", "run", env=ENV_RECORD)
    assert res.exit_code == 3, res.output
    assert "mass-delete guard" in res.output, res.output
    assert b.bank.store.count() == 20
    # --force applies what was held.
    res = cli.at(b.path)("sync", "run", "--force", env=ENV_RECORD)
    assert res.exit_code == 0, res.output
    assert b.bank.store.count() == 0


# --- 2. a delete record never cancels a fetch on its own -----------------------------------------------


def test_a_delete_record_does_not_hide_a_memory_the_follower_does_not_hold(hosts: Any, s3: S3) -> None:
    a = hosts("a", **RECORD)
    a.bank.save(SaveRequest(P, "the build cache lives on the second disk"))
    assert a.sync().ok
    b = hosts("b", **RECORD)
    assert b.sync().ok and b.sync().ok
    x = a.bank.save(SaveRequest(P, "the release train leaves every second Thursday")).memory
    key = f"memory/{P}/{x.id}.json"
    assert key in s3.keys()
    _forge(s3, [{"key": key, "etag": "", "op": "delete", "size": 0}])  # forged, replayed or late
    report = b.sync()
    assert report.ok and report.mode == "record", report.reason
    assert x.id in b.ids(P), report.summary()
    assert any("delete record" in n for n in report.notes), report.notes
    # Re-creation after a deletion: the id deleted (recorded), then written again; an old
    # delete segment replayed after it hides nothing either.
    a.bank.delete(P, x.id)
    assert a.sync().ok and b.sync().ok and x.id not in b.ids(P)
    s3.put_raw(key, json.dumps({**x.to_dict(), "rawInput": "the release train leaves on Fridays now",
                                "processedContent": "the release train leaves on Fridays now"}).encode())
    _forge(s3, [{"key": key, "etag": "", "op": "delete", "size": 0}])
    assert b.sync(PassOptions(full=True)).ok and x.id in b.ids(P)


def test_a_replayed_delete_after_a_put_does_not_hide_the_new_memory(hosts: Any, s3: S3) -> None:
    a = hosts("a", **RECORD)
    assert a.bank.save(SaveRequest(P, "seed")).memory and a.sync().ok
    b = hosts("b", **RECORD)
    assert b.sync().ok and b.sync().ok
    x = a.bank.save(SaveRequest(P, "the on-call rota changes on Mondays")).memory
    key = f"memory/{P}/{x.id}.json"
    etag = s3.client.head_object(Bucket=s3.bucket, Key=key)["ETag"]
    # A put and a delete of that key in later segments, the delete last (a replay).
    _forge(s3, [{"key": key, "etag": etag, "op": "put", "size": 10}])
    _forge(s3, [{"key": key, "etag": "", "op": "delete", "size": 0}])
    report = b.sync()
    assert report.ok and x.id in b.ids(P), report.summary()


# --- 3. one id under two profiles ----------------------------------------------------------------------


def _next_second() -> None:
    """Wait into the next whole second of the clock the servers stamp LastModified with (this
    machine's: both run here), so that an object written now is younger than every object
    written before, on a server that keeps seconds only: ~0.5 s on average where a 1.1 s sleep
    was the same guarantee."""
    time.sleep(1.0 - time.time() % 1.0 + 0.01)


def _copy_under(s3: S3, source: str, profile: str) -> str:
    body = s3.get_json(source)
    mid = body["id"]
    key = f"memory/{profile}/{mid}.json"
    s3.put_raw(key, json.dumps({**body, "profileName": profile}).encode())
    return key


def test_an_id_copied_under_another_profile_hides_nothing(hosts: Any, s3: S3, cli: Cli) -> None:
    a = hosts("a")
    x = a.bank.save(SaveRequest("zeta", "zeta deploys from the release branch only")).memory
    assert a.sync().ok
    b = hosts("b")
    assert b.sync().ok and x.id in b.ids("zeta")
    _next_second()  # the copy is the younger object (LastModified has seconds on some servers)
    copy = _copy_under(s3, f"memory/zeta/{x.id}.json", "aaa")
    fresh = hosts("fresh")
    report = fresh.sync()
    assert x.id in fresh.ids("zeta") and not fresh.ids("aaa"), report.summary()
    assert any(s["key"] == copy for s in report.skipped), report.skipped
    res = cli.at(fresh.path)("list", "-p", "zeta")
    assert res.exit_code == 0 and "no memories" not in res.output, res.output
    # Every host agrees, pass after pass.
    for host in (a, b, fresh):
        r = host.sync(PassOptions(full=True))
        assert x.id in host.ids("zeta") and not host.ids("aaa"), r.summary()
        assert any(s["key"] == copy for s in r.skipped), r.skipped
    # The copy's body naming zeta under aaa's key: skipped and reported, zeta's kept.
    s3.put_raw(copy, json.dumps(s3.get_json(f"memory/zeta/{x.id}.json")).encode())
    other = hosts("other")
    report = other.sync()
    assert x.id in other.ids("zeta") and any(s["key"] == copy for s in report.skipped), report.skipped


# --- 7. timestamps and counts are clamped -------------------------------------------------------------------


def test_forged_timestamps_and_counts_are_clamped(hosts: Any, s3: S3, cli: Cli) -> None:
    a = hosts("a")
    x = a.bank.save(SaveRequest(P, "the staging database is reset every night")).memory
    a.bank.save(SaveRequest(P, "the staging cluster runs two nodes"))
    assert a.sync().ok
    key = f"memory/{P}/{x.id}.json"
    s3.put_raw(key, json.dumps({**s3.get_json(key), "createdAt": "2999-01-01T00:00:00Z",
                                "lastAccessedAt": "2999-01-01T00:00:00Z", "accessCount": 2**60}).encode())
    b = hosts("b")
    assert b.sync().ok
    got = b.bank.store.get(P, x.id)
    assert got is not None
    later = datetime.now(timezone.utc) + timedelta(seconds=600)
    assert got.created_at < later and got.last_accessed_at is not None and got.last_accessed_at < later
    assert got.access_count <= COUNT_MAX
    cli.at(b.path)("inject", "-p", P, "what happens to the staging database?")
    assert b.sync().ok
    pushed = s3.get_json(key)
    assert pushed["accessCount"] <= COUNT_MAX, pushed
    for field in ("createdAt", "lastAccessedAt"):
        when = parse_time(pushed[field])
        assert when is not None and when < later, pushed


# --- 5. bounded decompression ----------------------------------------------------------------------------

# The process's own peak (VmHWM: ``ru_maxrss`` keeps the peak of the process that forked it, a
# test worker), and its children's (the snapshot helper's; at most its parent's size at its start
# on top, for the same reason: an upper bound).
_RSS = """
import re, resource, runpy, sys
sys.argv = ["memlocal", *sys.argv[1:]]
try:
    runpy.run_module("memlocal", run_name="__main__")
finally:
    hwm = re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)
    print("RSS", hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
"""


@functools.cache  # ~1 s of CPU to compress; each server's test puts the same bytes
def _bomb(profile: str, unpacked: int) -> bytes:
    """A gzip snapshot of ``profile`` whose one entry's body is ``unpacked`` bytes of text, about
    1.2 MB compressed for 250 MB (so that a second core's helper process reads it)."""
    packer = zlib.compressobj(9, wbits=31)
    head = ('{"format":"memlocal-snapshot/1","profile":"%s","objects":[{"key":"memory/%s/mem-00000001.json",'
            '"etag":"\\"0123456789abcdef0123456789abcdef\\"","body":"' % (profile, profile)).encode()
    out = [packer.compress(head)]
    for _ in range(unpacked >> 20):
        out.append(packer.compress(os.urandom(2400).hex().encode() + b"a" * ((1 << 20) - 4800)))
    out.append(packer.compress(b'"}]}'))
    out.append(packer.flush())
    return b"".join(out)


@pytest.mark.slow  # 250 MB unpacked, a memlocal process and its helper
def test_a_decompression_bomb_as_a_snapshot_costs_its_cap(hosts: Any, s3: S3, tmp_path: Any) -> None:
    a = hosts("a", sync__snapshot_min_objects=3)
    real = {a.bank.save(SaveRequest(P, text)).memory.id for text in (
        "the laptop runs Debian", "the standup is at nine", "the CI cache lives on S3", "the VPN needs a token")}
    assert a.sync(PassOptions(full=True)).ok
    for key in s3.keys("memlocal/snapshots/"):
        s3.delete(key)
    bomb = _bomb(P, 250 << 20)
    assert len(bomb) > 1 << 20
    s3.put_raw(f"memlocal/snapshots/{P}/0123456789abcdef.json.gz", bomb)
    db = tmp_path / "fresh" / "memlocal.db"
    env = {**os.environ, "MEMLOCAL_SYNC_PULL_ON_OPEN": "true", "MEMLOCAL_SYNC_HYDRATE_DEADLINE_S": "60",
           "MEMLOCAL_SYNC_SNAPSHOT_MIN_OBJECTS": "3"}
    p = subprocess.run([sys.executable, "-c", _RSS, "--db", str(db), "list", "-p", P, "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert {m["id"] for m in json.loads(p.stdout)["memories"]} == real
    own, children = (int(x) for x in p.stderr.split("RSS ")[-1].split()[:2])
    print(f"peak RSS: {own >> 10} MB, its children {children >> 10} MB")
    assert own < 300 << 10 and children < 300 << 10, (own, children)  # KiB


# --- 6. a fresh runner right after a first push gets the whole bank ----------------------------------------


def _import(cli: Cli, db: Any, tmp_path: Any, n: int) -> None:
    lines = []
    for i in range(n):
        m = {"id": f"mem-{i:08x}", "profileName": P, "rawInput": f"runbook step {i}: check the queue depth {i}",
             "processedContent": f"runbook step {i}: check the queue depth {i}", "summary": f"runbook step {i}",
             "category": "fact", "source": "explicit", "confidence": 1.0, "createdAt": "2026-12-01T00:00:00Z",
             "lastAccessedAt": None, "accessCount": 0, "stalenessScore": 0.0, "isActive": True, "version": 1}
        lines.append(json.dumps(m))
    path = tmp_path / "bank.jsonl"
    path.write_text("\n".join(lines) + "\n")
    res = cli.at(db)("import", str(path), env={"MEMLOCAL_SYNC_PUT_TIMEOUT_S": "0.001"})
    assert res.exit_code == 0, res.output


def test_a_first_push_writes_the_snapshot_a_fresh_runner_reads(hosts: Any, s3: S3, cli: Cli, tmp_path: Any) -> None:
    a = hosts("a", sync__push_snapshot_min=100)
    a.close()
    _import(cli, a.path, tmp_path, 300)
    a = hosts("a", sync__push_snapshot_min=100)
    report = a.sync()
    assert report.ok and report.counts["snapshots"] == 1, report.summary()
    (key,) = s3.keys(f"memlocal/snapshots/{P}/")
    fresh = tmp_path / "fresh" / "memlocal.db"
    env = {"MEMLOCAL_SYNC_PULL_ON_OPEN": "true", "MEMLOCAL_SYNC_HYDRATE_DEADLINE_S": "60"}
    out = cli.at(fresh).json("inject", "-p", P, "check the queue depth", "--json", env=env)
    assert out["partial"] is None, out
    assert cli.at(fresh).json("stats", "--json", env=env)["totalMemories"] == 300
    # The fresh host took them from the snapshot, and the next full pass of A keeps that one.
    assert a.sync(PassOptions(full=True)).ok and s3.keys(f"memlocal/snapshots/{P}/") == [key]


def test_a_first_read_from_part_of_the_bank_says_so(hosts: Any, s3: S3, cli: Cli, tmp_path: Any) -> None:
    a = hosts("a")
    a.bank.save(SaveRequest(P, "the queue depth alarm is at 500"))
    assert a.sync().ok
    fresh = tmp_path / "fresh" / "memlocal.db"
    env = {"MEMLOCAL_SYNC_PULL_ON_OPEN": "true", "MEMLOCAL_SYNC_HYDRATE_DEADLINE_S": "0.000001"}
    res = cli.at(fresh)("inject", "-p", P, "what is the queue depth alarm?", "--json", env=env)
    assert res.exit_code == 0, res.output
    partial = json.loads(res.stdout)["partial"]
    assert partial and "still running" in partial, res.output


def test_a_follower_that_holds_neither_copy_keeps_the_older_one(hosts: Any, s3: S3) -> None:
    """The same rule in a record pass (no listing: the two keys are listed for their age)."""
    a = hosts("a", **RECORD)
    a.bank.save(SaveRequest("zeta", "seed"))
    assert a.sync().ok
    b = hosts("b", **RECORD)
    assert b.sync().ok and b.sync().ok
    x = a.bank.save(SaveRequest("zeta", "zeta deploys from the release branch only")).memory
    _next_second()
    copy = _copy_under(s3, f"memory/zeta/{x.id}.json", "aaa")
    etag = s3.client.head_object(Bucket=s3.bucket, Key=copy)["ETag"]
    _forge(s3, [{"key": copy, "etag": etag, "op": "put", "size": 100}])
    report = b.sync()
    assert report.ok and report.mode == "record", report.reason
    assert x.id in b.ids("zeta") and not b.ids("aaa"), report.summary()
    assert any(s["key"] == copy for s in report.skipped), report.skipped


def test_a_copy_in_a_profiles_snapshot_is_given_back_to_the_older_one(hosts: Any, s3: S3) -> None:
    """A fresh host takes a fresh profile's snapshot entries while it lists: a copy of another
    profile's memory there is given back once the whole listing shows the older copy."""
    from memlocal_sync import snapshot

    a = hosts("a", sync__snapshot_min_objects=3)
    x = a.bank.save(SaveRequest("zeta", "zeta deploys from the release branch only")).memory
    for text in ("aaa runs the nightly job", "aaa owns the billing service", "aaa reviews on Fridays"):
        a.bank.save(SaveRequest("aaa", text))
    assert a.sync().ok
    _next_second()
    copy = _copy_under(s3, f"memory/zeta/{x.id}.json", "aaa")
    entries = []
    for key in s3.keys("memory/aaa/"):
        got = s3.client.get_object(Bucket=s3.bucket, Key=key)
        entries.append((key, got["ETag"], got["Body"].read()))
    for key in s3.keys("memlocal/snapshots/"):
        s3.delete(key)
    name, body = snapshot.build("aaa", entries)
    s3.put_raw(name, body)
    fresh = hosts("fresh", sync__snapshot_min_objects=3)
    report = fresh.sync()
    assert report.ok, report.reason
    assert x.id in fresh.ids("zeta") and x.id not in fresh.ids("aaa") and len(fresh.ids("aaa")) == 3, report.summary()
    assert any(s["key"] == copy for s in report.skipped), report.skipped
