"""Two hosts, two databases, one bucket (real S3 servers: each test on moto_server and on
SeaweedFS): saves, deletes, access merges."""

from __future__ import annotations

import json
from typing import Callable

import pytest
from conftest import Cli

from memlocal.model import utcnow
from memlocal.store import Store
from s3server import S3, FaultProxy, Host, Outage
from memlocal import SaveRequest

P = "researcher"

pytestmark = pytest.mark.s3_servers()


def bump(host: Host, memory_id: str, times: int = 1, profile: str = P) -> None:
    for _ in range(times):
        host.bank.store.mark_accessed(profile, [memory_id], utcnow())


def seed(a: Host, b: Host, n: int) -> list[str]:
    """``n`` memories saved on A (write-through) and pulled by B."""
    ids = [a.bank.save(SaveRequest(P, f"memory number {i}")).memory.id for i in range(n)]
    assert b.sync().ok
    return ids


def test_a_save_on_a_appears_on_b_with_every_field(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    result = a.bank.save(SaveRequest(P, "Prefers JSON output", category="preference", confidence=0.8))
    assert result.synced is True
    key = f"memory/{P}/{result.memory.id}.json"
    assert s3.keys() == [key]
    assert s3.get_json(key) == result.memory.to_dict(wire=True)
    report = b.sync()
    assert report.ok and report.counts["pulled"] == 1
    assert b.bank.get(P, result.memory.id) == result.memory
    assert a.sync().summary().startswith("ok: nothing to do")
    assert b.sync().summary().startswith("ok: nothing to do")


def test_hydration_of_an_empty_database_gets_every_profile(hosts: Callable[..., Host], s3: S3) -> None:
    a = hosts("a")
    saved = {p: {a.bank.save(SaveRequest(p, f"{p} fact {i}")).memory.id for i in range(3)} for p in ("alpha", "beta", "gamma.x")}
    fresh = hosts("fresh")
    assert fresh.bank.stats()["totalMemories"] == 0
    report = fresh.sync()
    assert report.ok and report.counts["pulled"] == 9
    assert {p: fresh.ids(p) for p in saved} == saved


def test_a_delete_on_a_disappears_from_b(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    ids = seed(a, b, 3)
    a.bank.delete(P, ids[0])
    assert f"memory/{P}/{ids[0]}.json" not in s3.keys()
    report = b.sync()
    assert report.ok and report.counts["deleted_local"] == 1
    assert b.ids(P) == set(ids[1:])


def test_a_delete_wins_over_recalls_elsewhere(hosts: Callable[..., Host], s3: S3, outage: Outage) -> None:
    outage.up()
    a, b = hosts("a", bucket__endpoint=outage.endpoint), hosts("b")
    ids = seed(a, b, 4)
    # 1) B keeps recalling m0 while A deletes it: B's pass deletes it, its bumps do not revive it.
    bump(b, ids[0], 3)
    a.bank.delete(P, ids[0])
    assert b.sync().ok
    assert ids[0] not in b.ids(P)
    # 2) A, offline, deletes m1; B's bumps of m1 reach the bucket first (its ETag moves).
    outage.down()
    a.bank.delete(P, ids[1])  # not in the bucket yet: stays in the outbox
    assert a.bank.store.read("SELECT op FROM sync_outbox WHERE id = ?", (ids[1],)) == [("delete",)]
    bump(b, ids[1], 2)
    assert b.sync().counts["merged"] == 1
    assert a.sync().result == "failed"
    outage.up()
    assert a.sync().counts["deleted_remote"] == 1
    assert f"memory/{P}/{ids[1]}.json" not in s3.keys()
    assert b.sync().ok and ids[1] not in b.ids(P)
    assert b.ids(P) == a.ids(P) == set(ids[2:])


def test_access_counts_from_two_hosts_converge_to_the_sum(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    (mid,) = seed(a, b, 1)
    bump(a, mid, 2)
    bump(b, mid, 3)
    assert a.sync().counts["merged"] == 1          # bucket: 2
    report = b.sync()                              # B's base is stale: 412, re-read, merge
    assert report.ok and report.counts["precondition_failed"] == 0 and report.counts["merged"] == 1
    assert a.sync().ok
    key = f"memory/{P}/{mid}.json"
    assert s3.get_json(key)["accessCount"] == 5
    for host in (a, b):
        m = host.bank.get(P, mid)
        assert m.access_count == 5
        assert host.bank.store.read("SELECT access_delta FROM memories WHERE id = ?", (mid,))[0][0] == 0
    assert a.sync().summary().startswith("ok: nothing to do")
    assert b.sync().summary().startswith("ok: nothing to do")


def test_access_merge_under_a_forced_412_race(hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy) -> None:
    """B's If-Match PUT is held at the proxy while A merges its own bumps: B's PUT gets 412 and
    B re-reads, re-merges and retries; nothing is lost."""
    a, b = hosts("a"), hosts("b", bucket__endpoint=fault_proxy.endpoint)
    (mid,) = seed(a, b, 1)
    bump(a, mid, 4)
    bump(b, mid, 3)
    raced: list[str] = []

    def race(method: str, path: str, headers: dict[str, str]) -> bool:
        if method == "PUT" and "If-Match" in headers and not raced:
            raced.append(headers["If-Match"])
            assert a.sync().counts["merged"] == 1   # A's write lands between B's read and B's PUT
            return True
        return False

    fault_proxy.before(race)
    report = b.sync()
    assert raced, "B never sent a conditional PUT"
    assert report.ok and report.counts["precondition_failed"] == 1 and report.counts["merged"] == 1
    # (the marker's probe, during the seeding pass, answered 412 too: count memory objects only)
    assert sum(1 for m, path, st in fault_proxy.requests if m == "PUT" and st == 412 and "/memory/" in path) == 1
    assert s3.get_json(f"memory/{P}/{mid}.json")["accessCount"] == 7
    assert a.sync().ok
    assert a.bank.get(P, mid).access_count == b.bank.get(P, mid).access_count == 7


def test_concurrent_bumps_during_a_merge_are_kept(hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy) -> None:
    """A bump that lands locally while the merge PUT is in flight stays as the unmerged delta."""
    a, b = hosts("a", bucket__endpoint=fault_proxy.endpoint), hosts("b")
    (mid,) = seed(a, b, 1)
    bump(a, mid, 2)
    during = Store(a.path)

    def bump_during(method: str, path: str, headers: dict[str, str]) -> bool:
        if method == "PUT" and "If-Match" in headers:
            during.mark_accessed(P, [mid], utcnow())
            return True
        return False

    fault_proxy.before(bump_during)
    assert a.sync().counts["merged"] == 1
    during.close()
    assert s3.get_json(f"memory/{P}/{mid}.json")["accessCount"] == 2
    assert a.bank.get(P, mid).access_count == 3
    assert a.bank.store.read("SELECT access_delta FROM memories WHERE id = ?", (mid,))[0][0] == 1
    assert a.sync().counts["merged"] == 1
    assert b.sync().ok and b.bank.get(P, mid).access_count == 3


def test_a_local_content_edit_is_pushed_with_if_match(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    (mid,) = seed(a, b, 1)
    with a.bank.store.transaction() as c:  # an edit by another writer (an import, the sqlite3 shell)
        c.execute("UPDATE memories SET processed_content = 'edited on A', summary = 'edited on A' WHERE id = ?", (mid,))
    assert a.sync().counts["merged"] == 1
    assert s3.get_json(f"memory/{P}/{mid}.json")["processedContent"] == "edited on A"
    assert b.sync().counts["updated"] == 1
    assert b.bank.get(P, mid).processed_content == "edited on A"


def test_an_update_retires_the_old_fact_on_other_hosts_without_a_pass_here(hosts: Callable[..., Host], s3: S3) -> None:
    """A save that supersedes writes both objects through: the new memory and the retired one
    (``If-Match`` on the version this host last synced), so another host's next pass never holds
    the old value and the new one as two active facts while this host has run no pass."""
    a, b = hosts("a"), hosts("b")
    old = a.bank.save(SaveRequest(P, "The staging server runs on port 8443")).memory
    new = a.bank.save(SaveRequest(P, "The staging server now runs on port 9443"))
    assert new.superseded == old.id and new.synced is True
    assert s3.get_json(f"memory/{P}/{old.id}.json")["isActive"] is False
    assert b.sync().ok
    assert {m.id for m in b.bank.list(P, active_only=True).memories} == {new.memory.id}
    assert a.sync().summary().startswith("ok: nothing to do")
    restored = a.bank.restore(P, old.id)  # the undo writes both through too
    assert restored.is_active and s3.get_json(f"memory/{P}/{old.id}.json")["isActive"] is True
    assert "supersedes" not in s3.get_json(f"memory/{P}/{new.memory.id}.json")
    assert b.sync().ok and {m.id for m in b.bank.list(P, active_only=True).memories} == {old.id, new.memory.id}


def test_an_edit_of_any_content_column_is_pushed_though_hashes_are_remembered(
        hosts: Callable[..., Host], s3: S3) -> None:
    """A pass remembers each memory's content hash with its content signature (sync_base.row_sig)
    and does not hash an unchanged row again; an edit of any one content column by another
    writer changes the signature, so it is hashed and pushed."""
    a, b = hosts("a"), hosts("b")
    edits = {"raw_input": "'raw edited on A'", "source": "'inferred'", "extra": """'{"note": "edited on A"}'""",
             "version": "2", "confidence": "0.25", "category": "'behavior'"}
    ids = seed(a, b, len(edits))
    sigs = a.bank.store.read("SELECT row_sig FROM sync_base")
    assert len(sigs) == len(edits) and all(sig for (sig,) in sigs)
    assert a.sync().summary().startswith("ok: nothing to do")
    with a.bank.store.transaction() as c:  # edits by another writer, one column each
        for mid, (column, value) in zip(ids, edits.items()):
            c.execute(f"UPDATE memories SET {column} = {value} WHERE id = ?", (mid,))
    report = a.sync()
    assert report.counts["merged"] == len(edits), report.summary()
    bodies = {mid: s3.get_json(f"memory/{P}/{mid}.json") for mid in ids}
    got = [bodies[ids[0]]["rawInput"], bodies[ids[1]]["source"], bodies[ids[2]]["note"], bodies[ids[3]]["version"],
           bodies[ids[4]]["confidence"], bodies[ids[5]]["category"]]
    assert got == ["raw edited on A", "inferred", "edited on A", 2, 0.25, "behavior"]
    assert a.sync().summary().startswith("ok: nothing to do")


def test_an_id_taken_by_another_host_is_re_ided_never_overwritten(
        hosts: Callable[..., Host], s3: S3, outage: Outage) -> None:
    online = hosts("a", bucket__endpoint=outage.endpoint)   # offline: the save stays local
    mine = online.bank.save(SaveRequest(P, "my own memory")).memory
    theirs = mine.with_changes(raw_input="another host's memory", processed_content="another host's memory",
                               summary="another host's memory")
    key = f"memory/{P}/{mine.id}.json"
    s3.put_json(key, theirs.to_dict())
    outage.up()
    report = online.sync()
    assert report.ok and report.counts["reid"] == 1 and report.counts["pulled"] == 1
    assert s3.get_json(key)["rawInput"] == "another host's memory"      # never overwritten
    texts = {m.raw_input: m.id for m in online.bank.store.iter_profile(P)}
    assert texts["another host's memory"] == mine.id
    new_id = texts["my own memory"]
    assert new_id != mine.id and s3.get_json(f"memory/{P}/{new_id}.json")["rawInput"] == "my own memory"
    assert online.sync().summary().startswith("ok: nothing to do")


def test_a_crash_after_put_is_adopted_not_duplicated(hosts: Callable[..., Host], s3: S3) -> None:
    """Object in the bucket, base never recorded (a crash between the PUT and the commit)."""
    a = hosts("a")
    m = a.bank.save(SaveRequest(P, "saved just before a crash")).memory
    bump(a, m.id, 2)
    a.bank.store.conn.execute("DELETE FROM sync_base")
    report = a.sync()
    assert report.ok and report.counts["adopted"] == 1 and report.counts["reid"] == 0
    assert report.counts["merged"] == 1
    assert s3.keys() == [f"memory/{P}/{m.id}.json"]
    assert s3.get_json(s3.keys()[0])["accessCount"] == 2
    assert a.bank.get(P, m.id).access_count == 2


def test_the_mass_delete_guard_holds_then_force_applies(hosts: Callable[..., Host], s3: S3) -> None:
    """Objects gone from the bucket with no delete record (another tool removed them)."""
    a, b = hosts("a"), hosts("b")
    ids = seed(a, b, 20)
    for mid in ids[:12]:
        s3.delete(f"memory/{P}/{mid}.json")
    report = b.sync()
    assert report.result == "guarded"
    assert "would delete 12 of the 20 synced memories of profile researcher" in report.reason
    assert len(b.ids(P)) == 20
    assert b.sync(force=True).counts["deleted_local"] == 12
    assert b.ids(P) == set(ids[12:])


def test_refresh_if_stale_pulls_one_profile_at_most_once_per_ttl(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    m = a.bank.save(SaveRequest(P, "seen by the dashboard")).memory
    other = a.bank.save(SaveRequest("other", "not asked for")).memory
    assert b.bank.refresh_if_stale(P, ttl=60.0) is True
    assert b.bank.get(P, m.id) == m
    assert other.id not in b.ids("other")          # one profile's prefix only
    m2 = a.bank.save(SaveRequest(P, "saved a moment later")).memory
    assert b.bank.refresh_if_stale(P, ttl=60.0) is False   # fresh: no bucket round trip
    assert m2.id not in b.ids(P)
    assert b.bank.refresh_if_stale(P, ttl=0.0) is True
    assert m2.id in b.ids(P)
    # The read path never pushes: B's bump stays local until a full pass.
    bump(b, m.id)
    assert b.bank.refresh_if_stale(P, ttl=0.0) is True
    assert s3.get_json(f"memory/{P}/{m.id}.json")["accessCount"] == 0
    local_only = hosts("solo", bucket__name="")
    assert local_only.bank.refresh_if_stale(P) is False


def test_save_json_reports_synced(hosts: Callable[..., Host], s3: S3, cli: Cli) -> None:
    assert cli.json("save", "-p", P, "--json", "from the CLI")["synced"] is True


def test_an_id_used_under_another_profile_converges_in_two_passes(
        hosts: Callable[..., Host], s3: S3, outage: Outage) -> None:
    a = hosts("a", bucket__endpoint=outage.endpoint)
    mine = a.bank.save(SaveRequest(P, "mine, in researcher")).memory
    theirs = mine.with_changes(profile_name="writer", raw_input="theirs, in writer", processed_content="theirs")
    s3.put_json(f"memory/writer/{mine.id}.json", theirs.to_dict())
    outage.up()
    first = a.sync()
    assert first.ok and first.counts["reid"] == 1
    assert any("also used in profile" in s["reason"] for s in first.skipped)
    second = a.sync()
    assert second.ok and second.counts["pulled"] == 1 and not second.skipped
    assert a.bank.get("writer", mine.id).raw_input == "theirs, in writer"
    (moved,) = a.ids(P)
    assert moved != mine.id and a.bank.get(P, moved).raw_input == "mine, in researcher"
    assert sorted(s3.keys()) == sorted([f"memory/writer/{mine.id}.json", f"memory/{P}/{moved}.json"])
