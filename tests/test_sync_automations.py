"""Automation notes sync between hosts through ``memlocal/automations/<id>.json``: write-through,
the outbox, the pass, the conflict rules and tolerant reads, against a real moto_server with two
hosts."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

import pytest
from memlocal.model import format_time, utcnow
from memlocal.store import Store
from memlocal.store.replica import StoreReplica
from s3server import S3, FaultProxy, Host, Outage
from memlocal import SaveRequest
from memlocal_sync.report import PassOptions

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

NOTES = "memlocal/automations/"


def key(automation_id: str) -> str:
    return f"{NOTES}{automation_id}.json"


def note_of(host: Host, automation_id: str) -> str | None:
    note = host.bank.automations.get(automation_id)
    return None if note is None else note.note


def settled(*hosts: Host) -> None:
    for host in hosts:
        report = host.sync()
        assert report.ok, report.to_dict()
        assert not any(k.startswith("note") for k, v in report.counts.items() if v), report.counts


def test_a_note_written_on_a_appears_on_b(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    note = a.bank.automations.put("nightly-report", "Stopped at page 3 of 7.")
    assert note is not None
    assert s3.keys(NOTES) == [key("nightly-report")]  # written through, outside memory/
    assert s3.keys() == []
    assert s3.get_json(key("nightly-report")) == note.to_dict()
    assert a.bank.sync_status()["pending"]["automationNotes"] == 0
    report = b.sync()
    assert report.ok and report.counts["notes_pulled"] == 1
    assert b.bank.automations.get("nightly-report") == note
    assert "pulled 1 automation note" in report.summary()
    settled(a, b)


def test_edits_converge_both_ways(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    a.bank.automations.put("n1", "first")
    assert b.sync().counts["notes_pulled"] == 1
    b.bank.automations.put("n1", "second, from b")  # If-Match on the ETag b synced
    assert s3.get_json(key("n1"))["note"] == "second, from b"
    report = a.sync()
    assert report.ok and report.counts["notes_updated"] == 1
    assert note_of(a, "n1") == "second, from b"
    a.bank.automations.put("n1", "third, from a")
    assert b.sync().counts["notes_updated"] == 1
    assert note_of(b, "n1") == "third, from a"
    assert a.bank.automations.get("n1") == b.bank.automations.get("n1")
    settled(a, b)


def test_a_clear_or_delete_on_a_removes_the_note_on_b(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    a.bank.automations.put("cleared", "state")
    a.bank.automations.put("deleted", "state")
    a.bank.automations.put("kept", "state")
    assert b.sync().counts["notes_pulled"] == 3
    assert a.bank.automations.put("cleared", "   ") is None  # an empty write clears
    assert a.bank.automations.delete("deleted") is True
    assert s3.keys(NOTES) == [key("kept")]
    report = b.sync()
    assert report.ok and report.counts["notes_deleted_local"] == 2
    assert [n.automation_id for n in b.bank.automations.list()] == ["kept"]
    settled(a, b)


def test_a_clear_made_offline_reaches_the_bucket_and_wins_over_an_edit(
        hosts: Callable[..., Host], s3: S3, outage: Outage) -> None:
    outage.up()
    a, b = hosts("a", bucket__endpoint=outage.endpoint), hosts("b")
    a.bank.automations.put("n1", "state")
    assert b.sync().ok
    outage.down()
    assert a.bank.automations.clear("n1") is True     # queued: the bucket is down
    b.bank.automations.put("n1", "edited on b")         # the object moves on meanwhile
    outage.up()
    report = a.sync()
    assert report.ok and report.counts["notes_deleted_remote"] == 1  # a deletion wins, as for memories
    assert s3.keys(NOTES) == []
    assert b.sync().counts["notes_deleted_local"] == 1
    assert note_of(b, "n1") is None
    settled(a, b)


def test_a_concurrent_edit_goes_to_the_later_updated_at(hosts: Callable[..., Host], s3: S3, outage: Outage) -> None:
    outage.up()
    a, b = hosts("a", bucket__endpoint=outage.endpoint), hosts("b")
    t0 = utcnow()
    a.bank.automations.put("later-a", "v0", now=t0)
    a.bank.automations.put("later-b", "v0", now=t0)
    assert b.sync().counts["notes_pulled"] == 2
    outage.down()
    # A (offline) writes the later note of "later-a" and the earlier of "later-b"; B writes
    # through the other two, so the bucket holds B's versions when A comes back.
    a.bank.automations.put("later-a", "a wrote this last", now=t0 + timedelta(seconds=20))
    a.bank.automations.put("later-b", "a wrote this first", now=t0 + timedelta(seconds=5))
    b.bank.automations.put("later-a", "b wrote this first", now=t0 + timedelta(seconds=10))
    b.bank.automations.put("later-b", "b wrote this last", now=t0 + timedelta(seconds=30))
    outage.up()
    report = a.sync()
    assert report.ok and report.counts["note_conflicts"] == 2
    assert s3.get_json(key("later-a"))["note"] == "a wrote this last"
    assert s3.get_json(key("later-b"))["note"] == "b wrote this last"
    assert b.sync().ok
    for host in (a, b):
        assert note_of(host, "later-a") == "a wrote this last"
        assert note_of(host, "later-b") == "b wrote this last"
    assert a.bank.automations.list() == b.bank.automations.list()
    settled(a, b)


def test_a_tie_on_updated_at_is_broken_by_the_text_whoever_syncs_first(
        hosts: Callable[..., Host], s3: S3, outage: Outage) -> None:
    outage.up()
    a, b = hosts("a", bucket__endpoint=outage.endpoint), hosts("b", bucket__endpoint=outage.endpoint)
    t = utcnow()
    outage.down()
    # Both hosts create the same automation's note while offline: no base on either side.
    a.bank.automations.put("same-time", "alpha", now=t)
    b.bank.automations.put("same-time", "bravo", now=t)
    a.bank.automations.put("b-first", "zulu", now=t)
    b.bank.automations.put("b-first", "yankee", now=t)
    outage.up()
    assert a.sync().ok and b.sync().ok and a.sync().ok
    for host in (a, b):
        assert note_of(host, "same-time") == "bravo"   # the larger text wins a tie
        assert note_of(host, "b-first") == "zulu"
    assert s3.get_json(key("same-time"))["note"] == "bravo"
    settled(a, b)


def test_bucket_down_the_outbox_drains_later(hosts: Callable[..., Host], s3: S3, outage: Outage) -> None:
    a = hosts("a", bucket__endpoint=outage.endpoint)  # down from the start
    a.bank.automations.put("n1", "written offline")
    a.bank.automations.put("n2", "written offline, then cleared")
    a.bank.automations.clear("n2")
    assert a.bank.sync_status()["pending"]["automationNotes"] == 2
    assert a.bank.replica.outbox(kind="note") == {"n1": ("", "put"), "n2": ("", "delete")}
    assert a.sync().result == "failed"
    outage.up()
    report = a.sync()
    assert report.ok and report.counts["notes_pushed"] == 1
    assert s3.keys(NOTES) == [key("n1")]
    assert a.bank.replica.outbox(kind="note") == {}
    assert a.bank.sync_status()["pending"]["automationNotes"] == 0
    b = hosts("b")
    assert b.sync().ok and note_of(b, "n1") == "written offline"
    settled(a, b)


def test_the_daemon_wakes_for_a_queued_note(hosts: Callable[..., Host], outage: Outage) -> None:
    from memlocal_sync.state import SyncState

    a = hosts("a", bucket__endpoint=outage.endpoint)
    state = SyncState(a.bank.replica)
    assert not state.has_local_work()
    a.bank.automations.put("n1", "queued")
    assert state.has_local_work()


def test_hostile_and_malformed_notes_are_skipped_and_reported(hosts: Callable[..., Host], s3: S3) -> None:
    a = hosts("a")
    now = format_time(utcnow())
    s3.put_raw(key("not-json"), b"{nope")
    s3.put_raw(key("bad-utf8"), b'{"automationId": "bad-utf8", "note": "\xff", "updatedAt": "%s"}' % now.encode())
    s3.put_raw(key("surrogate"), json.dumps({"automationId": "surrogate", "note": "\ud800", "updatedAt": now}).encode())
    s3.put_json(key("other-id"), {"automationId": "someone-else", "note": "x", "updatedAt": now})
    s3.put_json(key("no-time"), {"automationId": "no-time", "note": "x"})
    s3.put_json(key("not-text"), {"automationId": "not-text", "note": 7, "updatedAt": now})
    s3.put_json(key("huge-year"), {"automationId": "huge-year", "note": "x", "updatedAt": "99999-01-01T00:00:00Z"})
    s3.put_raw(key("nan"), b'{"automationId": "nan", "note": "x", "updatedAt": "%s", "n": NaN}' % now.encode())
    s3.put_raw(f"{NOTES}bad id!.json", b"{}")
    s3.put_raw(f"{NOTES}nested/x.json", b"{}")
    # A note another writer stored, unusual but usable: padded text, an offset, an unknown field.
    s3.put_json(key("go-host"), {"automationId": "go-host", "note": "  from Go \n",
                                 "updatedAt": "2026-11-30T23:00:00.123456789+01:00", "agent": "go/1.2"})
    report = a.sync()
    assert report.result == "ok", report.to_dict()
    assert report.counts["notes_pulled"] == 1
    got = a.bank.automations.get("go-host")
    assert got is not None and got.note == "from Go" and format_time(got.updated_at) == "2026-11-30T22:00:00.123456Z"
    skipped = {s["key"]: s["reason"] for s in report.skipped}
    assert set(skipped) == {key(k) for k in ("not-json", "bad-utf8", "surrogate", "other-id", "no-time", "not-text",
                                             "huge-year", "nan")} | {f"{NOTES}bad id!.json", f"{NOTES}nested/x.json"}
    assert "not valid JSON" in skipped[key("not-json")]
    assert "someone-else" in skipped[key("other-id")]
    assert all(r and "\n" not in r for r in skipped.values())
    assert {s["key"] for s in a.bank.sync_status()["skipped"]} == set(skipped)
    # Skipped objects are never rewritten or deleted, and the next pass is quiet about them.
    again = a.sync()
    assert again.ok and not again.counts["notes_pulled"] and len(again.skipped) == len(skipped)
    assert len(s3.keys(NOTES)) == 11
    # The other writer's object is not rewritten (no local change).
    assert s3.get_json(key("go-host"))["agent"] == "go/1.2"


def test_deletions_of_notes_are_guarded_against_an_emptied_or_wrong_bucket(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    for i in range(8):
        a.bank.automations.put(f"n{i}", f"state {i}")
    assert b.sync().counts["notes_pulled"] == 8
    # Every note object gone while the marker stays: more than the share at once is held back.
    for k in s3.keys(NOTES):
        s3.delete(k)
    report = b.sync()
    assert report.result == "guarded" and "automation notes" in report.reason
    assert len(b.bank.automations.list()) == 8
    # The whole bucket emptied (the identity marker too): nothing deleted, nothing written.
    s3.delete("memlocal/bucket.json")
    report = b.sync()
    assert report.result == "guarded" and "identity marker" in report.reason
    assert len(b.bank.automations.list()) == 8
    assert s3.keys(NOTES) == []
    # `--reupload` makes it this host's bucket again: the notes go back up.
    report = b.sync(PassOptions(reupload=True))
    assert report.ok and report.counts["notes_pushed"] == 8
    assert len(s3.keys(NOTES)) == 8


def test_a_few_deletions_arrive_with_a_verified_marker(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    a.bank.automations.put("only", "the one note")
    assert b.sync().counts["notes_pulled"] == 1
    assert b.sync().ok  # b has verified the marker
    a.bank.automations.delete("only")
    report = b.sync()
    assert report.ok and report.counts["notes_deleted_local"] == 1
    assert b.bank.automations.list() == []


def test_scoped_passes_leave_notes_to_full_passes(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    a.bank.save(SaveRequest("p", "a memory"))
    a.bank.automations.put("n1", "state")
    report = b.sync(PassOptions(profiles=("p",)))
    assert report.ok and report.counts["pulled"] == 1 and not report.counts["notes_pulled"]
    assert note_of(b, "n1") is None
    assert b.sync().counts["notes_pulled"] == 1


def test_notes_written_before_the_upgrade_are_queued(tmp_path: Path) -> None:
    """Migration 8 queues every existing note, so a host upgraded with notes pushes them."""
    db = tmp_path / "m.db"
    store = Store(db)
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE automation_outbox")
    conn.execute("DROP INDEX memories_near_key")  # and what migration 9 added: a schema-7 file
    conn.execute("ALTER TABLE memories DROP COLUMN near_key")
    conn.execute("INSERT INTO automation_notes (automation_id, note, updated_us) VALUES ('old', 'kept', 1)")
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    store = Store(db)
    try:
        assert StoreReplica(store).outbox(kind="note") == {"old": ("", "put")}
    finally:
        store.close()


def edit_queued_on_b(hosts: Callable[..., Host], fault_proxy: FaultProxy) -> tuple[Host, Host, datetime]:
    """A's note ``n1`` (at ``t0``) pulled by B (behind the proxy), then B's edit of it (at ``t0``
    + 1 s) left queued for B's next pass: its write-through failed. Returns A, B and ``t0``."""
    a, b = hosts("a"), hosts("b", bucket__endpoint=fault_proxy.endpoint)
    t0 = utcnow()
    a.bank.automations.put("n1", "v0", now=t0)
    assert b.sync().counts["notes_pulled"] == 1
    fault_proxy.fail(1000, status=503)  # B's write-through fails: its edit stays queued
    b.bank.automations.put("n1", "b's edit", now=t0 + timedelta(seconds=1))
    fault_proxy.fail(0)
    return a, b, t0


def test_a_412_race_during_a_pass_is_resolved_by_updated_at(hosts: Callable[..., Host], s3: S3,
                                                            fault_proxy: FaultProxy) -> None:
    """B's If-Match PUT of its note is held at the proxy while A writes a later note: B's PUT
    gets 412, B re-reads and lets the later note win; both hosts and the bucket agree."""
    a, b, t0 = edit_queued_on_b(hosts, fault_proxy)
    raced: list[str] = []

    def race(method: str, path: str, headers: dict[str, str]) -> bool:
        if method == "PUT" and "If-Match" in headers and "/memlocal/automations/" in path and not raced:
            raced.append(path)
            a.bank.automations.put("n1", "a's later edit", now=t0 + timedelta(seconds=2))
            return True
        return False

    fault_proxy.before(race)
    report = b.sync()
    assert raced and report.ok, report.to_dict()
    assert report.counts["precondition_failed"] == 1 and report.counts["note_conflicts"] == 1
    assert note_of(b, "n1") == "a's later edit"
    assert s3.get_json(key("n1"))["note"] == "a's later edit"
    assert a.sync().ok and note_of(a, "n1") == "a's later edit"
    settled(a, b)


def test_a_clear_elsewhere_wins_over_an_edit_whose_if_match_answers_412(hosts: Callable[..., Host], s3: S3,
                                                                        fault_proxy: FaultProxy) -> None:
    """A clears the note while B's pass pushes B's edit; the server answers B's If-Match on the
    missing key with 412 (as SeaweedFS does; S3 and moto answer 404): B re-reads, finds the
    object gone, and clears its note in that pass, as a memory's merge does (the deletion wins)."""
    a, b, t0 = edit_queued_on_b(hosts, fault_proxy)

    def clear_first(method: str, path: str, headers: dict[str, str]) -> bool:
        if method == "PUT" and "If-Match" in headers and "/memlocal/automations/" in path:
            assert a.bank.automations.delete("n1") is True  # the object is gone from the bucket
            fault_proxy.fail(1, 412, "PreconditionFailed")  # answered as SeaweedFS answers it
            return True
        return False

    fault_proxy.before(clear_first)
    report = b.sync()
    assert report.ok and report.counts["precondition_failed"] == 1, report.to_dict()
    assert report.counts["notes_deleted_local"] == 1 and note_of(b, "n1") is None
    assert s3.keys(NOTES) == []
    settled(a, b)


# --- the note decoder, fed generated JSON (hypothesis) -----------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from memlocal_sync.objects import BadObject, decode_note, encode_note  # noqa: E402

_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(st.characters(codec=None), max_size=40) | st.just("2026-11-30T23:00:00Z"))
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=12), inner, max_size=3), max_leaves=12)


@st.composite
def note_like(draw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"automationId": "n1", "note": "state", "updatedAt": "2026-11-30T23:00:00Z"}
    for field in draw(st.lists(st.sampled_from(["automationId", "note", "updatedAt", "extra"]), max_size=3)):
        out[field] = draw(_json)
    return out


@pytest.mark.slow  # a long property: started first
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=note_like() | _json, raw=st.binary(max_size=48))
def test_the_note_decoder_returns_a_note_or_a_skip_reason(value: Any, raw: bytes) -> None:
    for body in (json.dumps(value).encode("utf-8"), raw):
        try:
            note = decode_note(body, "n1")
        except BadObject as exc:
            assert exc.reason and "\n" not in exc.reason
            continue
        assert note.automation_id == "n1" and note.note and note.note == note.note.strip()
        note.note.encode("utf-8")  # valid Unicode: storable and printable
        assert decode_note(encode_note(note), "n1") == note  # reads the same again


def test_the_conductors_api_sees_a_runners_note_without_a_pass(hosts: Callable[..., Host], s3: S3) -> None:
    """The REST reads of notes ask for a background pull (as the global memory reads do), so a
    note a runner wrote reaches the conductor's API without `--with-sync` or a cron pass."""
    from api_live import LiveServer
    from support import http_client, wait_for

    from memlocal.faces.api import create_app

    conductor, runner = hosts("conductor", sync__refresh_ttl_s=0.2), hosts("runner")
    with LiveServer(create_app(conductor.bank)) as server, http_client(base_url=server.url, timeout=30) as c:
        assert c.get("/api/automations/nightly/memory").json() == {"memory": ""}
        runner.bank.automations.put("nightly", "Stopped at page 3 of 7.")
        wait_for(lambda: c.get("/api/automations/nightly/memory").json()["memory"] == "Stopped at page 3 of 7.",
                 what="the runner's note on the conductor")
        runner.bank.automations.put("weekly", "Nothing new.")
        wait_for(lambda: "weekly" in {n["automationId"] for n in c.get("/api/automations").json()["automations"]},
                 what="the runner's second note in the listing")
        # A note written through the conductor's API goes to the bucket at once.
        assert c.put("/api/automations/nightly/memory", json={"memory": "Corrected by hand."}).status_code == 200
        assert s3.get_json(key("nightly"))["note"] == "Corrected by hand."
        assert c.delete("/api/automations/weekly").status_code == 204
        assert key("weekly") not in s3.keys(NOTES)
    assert runner.sync().counts["notes_updated"] == 1 and note_of(runner, "nightly") == "Corrected by hand."
    assert note_of(runner, "weekly") is None
