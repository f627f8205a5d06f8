"""Hygiene converges across hosts (a real moto_server): the same text saved on two hosts ends as
one active memory, and two concurrent supersessions of one memory end as one active successor,
the other copy retired with its lineage on every host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from memlocal_sync.changes import CHANGES_PREFIX, parse_segment_key, segment_key
from s3server import S3, Host
from memlocal import RecallQuery, SaveRequest
from memlocal_sync.report import PassOptions

if TYPE_CHECKING:
    from memlocal.model import Memory

P = "researcher"


def key(mid: str) -> str:
    return f"memory/{P}/{mid}.json"


def active(host: Host, ids: set[str]) -> set[str]:
    return {m.id for m in host.bank.store.iter_profile(P) if m.id in ids and m.is_active}


def settle(a: Host, b: Host) -> None:
    """The access bumps of the checks travel; then neither host has anything left to do."""
    for host in (a, b):
        host.bank.drain()
    assert a.sync().ok and b.sync().ok and a.sync().ok
    assert a.sync().summary().startswith("ok: nothing to do")
    assert b.sync().summary().startswith("ok: nothing to do")


def test_the_same_text_saved_on_two_hosts_converges_to_one_memory(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    ma = a.bank.save(SaveRequest(P, "Ana prefers dark mode in every editor", category="preference")).memory
    mb = b.bank.save(SaveRequest(P, "Ana prefers dark mode in every editor", category="preference")).memory
    assert ma.id != mb.id
    b.bank.recall(RecallQuery(P, "dark mode editor"))  # two accesses of b's copy travel with it
    b.bank.recall(RecallQuery(P, "dark mode editor"))
    b.bank.drain()
    winner, loser = sorted((ma.id, mb.id))
    for host in (b, a, b, a):
        assert host.sync().result == "ok"
    for host in (a, b):
        assert active(host, {ma.id, mb.id}) == {winner}
        retired = host.bank.get(P, loser)
        assert retired.is_active is False and retired.superseded_by == winner
        assert host.bank.build_context_block(P, "which editor theme?").count("[preference] Ana prefers dark") == 1
        assert [m.id for m in host.bank.history(P, loser)] == [loser, winner]
    assert s3.get_json(key(loser))["isActive"] is False
    assert s3.get_json(key(loser))["supersededBy"] == winner
    assert s3.get_json(key(winner))["isActive"] is True
    settle(a, b)
    # The loser's accesses are merged into the winner once, whichever host retired it.
    count = a.bank.get(P, winner).access_count
    assert count == b.bank.get(P, winner).access_count == s3.get_json(key(winner))["accessCount"]
    assert count == 2 + 2  # b's two recalls, once, and the two blocks built above


def test_the_same_text_in_two_categories_on_two_hosts_converges_to_one_memory(hosts: Callable[..., Host],
                                                                               s3: S3) -> None:
    """"Ana is allergic to peanuts" as a fact and as general reached the block twice. A
    save on one host answers with the memory already there, whatever its category; two hosts
    saving before either sees the other's converge to one the same way, its category kept."""
    a, b = hosts("a"), hosts("b")
    ma = a.bank.save(SaveRequest(P, "Ana is allergic to peanuts", category="fact")).memory
    mb = b.bank.save(SaveRequest(P, "ana is allergic to peanuts.", category="general")).memory
    for host in (b, a, b, a):
        assert host.sync().result == "ok"
    winner, loser = sorted((ma, mb), key=lambda m: m.id)
    for host in (a, b):
        assert active(host, {ma.id, mb.id}) == {winner.id}
        assert host.bank.get(P, winner.id).category == winner.category
        assert host.bank.get(P, loser.id).superseded_by == winner.id
        assert host.bank.build_context_block(P, "what is Ana allergic to?").lower().count("allergic to peanuts") == 1
    assert s3.get_json(key(loser.id))["supersededBy"] == winner.id
    settle(a, b)


def test_a_pull_only_refresh_leaves_the_convergence_to_the_next_full_pass(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    ma = a.bank.save(SaveRequest(P, "The staging cluster is in Frankfurt", category="fact")).memory
    mb = b.bank.save(SaveRequest(P, "The staging cluster is in Frankfurt", category="fact")).memory
    assert b.sync(PassOptions(pull_only=True)).ok  # the read path's refresh pulls a's copy and writes nothing
    assert active(b, {ma.id, mb.id}) == {ma.id, mb.id}
    report = b.sync()  # nothing else to do, but the pulled profile converges now
    assert report.counts["retired"] == 1 and active(b, {ma.id, mb.id}) == {min(ma.id, mb.id)}
    # The retirement is in the change record: other hosts' passes that follow it see it.
    loser = key(max(ma.id, mb.id))
    puts = [(c["key"], c["etag"].strip('"')) for k in s3.keys(CHANGES_PREFIX) if (seq := parse_segment_key(k)) is not None
            for c in s3.get_json(segment_key(seq))["changes"] if c["op"] == "put"]
    assert (loser, s3.client.head_object(Bucket=s3.bucket, Key=loser)["ETag"].strip('"')) in puts
    assert a.sync().ok and active(a, {ma.id, mb.id}) == {min(ma.id, mb.id)}
    assert b.sync().summary().startswith("ok: nothing to do")


def test_two_hosts_superseding_one_memory_converge_to_a_chain(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    old = a.bank.save(SaveRequest(P, "Ana lives in Porto", category="fact")).memory
    assert b.sync().ok
    lisbon = a.bank.save(SaveRequest(P, "Ana lives in Lisbon", category="fact", supersedes=old.id)).memory
    madrid = b.bank.save(SaveRequest(P, "Ana lives in Madrid", category="fact", supersedes=old.id)).memory
    assert a.sync().ok  # a's supersession reaches the bucket first: Lisbon is the successor
    for host in (b, a, b):
        host.sync()
    for host in (a, b):
        assert host.bank.get(P, old.id).superseded_by == lisbon.id
        assert active(host, {lisbon.id, madrid.id}) == {lisbon.id}
        loser = host.bank.get(P, madrid.id)
        assert loser.is_active is False and loser.superseded_by == lisbon.id
        block = host.bank.build_context_block(P, "where does Ana live?")
        assert "Lisbon" in block and "Madrid" not in block
        assert [m.id for m in host.bank.history(P, madrid.id)] == [old.id, madrid.id, lisbon.id]
    assert s3.get_json(key(madrid.id))["supersededBy"] == lisbon.id
    settle(a, b)


def test_a_successor_whose_old_memory_is_gone_is_chosen_by_id(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    old = a.bank.save(SaveRequest(P, "The build uses Make", category="fact")).memory
    assert b.sync().ok
    x = a.bank.save(SaveRequest(P, "The build uses Bazel", category="fact", supersedes=old.id)).memory
    y = b.bank.save(SaveRequest(P, "The build uses Ninja", category="fact", supersedes=old.id)).memory
    a.bank.delete(P, old.id)  # the old memory is deleted before either supersession is decided
    for host in (a, b, a, b):
        host.sync(PassOptions(force=True))
    winner = min(x.id, y.id)
    for host in (a, b):
        assert active(host, {x.id, y.id}) == {winner}


# --- the pure rules (memlocal.hygiene.rules.converge) ---------------------------------------------------


def _m(mid: str, text: str = "x", *, category: str = "fact", active: bool = True, **extra: str) -> "Memory":
    from memlocal.model import Memory, utcnow

    return Memory(id=mid, profile_name=P, raw_input=text, processed_content=text, summary=text[:50],
                  category=category, source="explicit", confidence=1.0, created_at=utcnow(),
                  last_accessed_at=None, access_count=0, staleness_score=0.0, is_active=active, extra=extra)


def test_converge_rules_are_deterministic_and_keep_one_active() -> None:
    from memlocal.hygiene.rules import Retirement, chain_head, converge

    dups = [_m("mem-000000c1", "Ana likes tea"), _m("mem-000000a1", "ana likes tea!"), _m("mem-000000b1", "Ana likes tea")]
    stored = {m.id: m for m in dups}
    everything = set(stored)
    # Order of input does not matter; the id sorting first wins; only copies the bucket holds count.
    assert converge(dups, stored.get, everything) == converge(dups[::-1], stored.get, everything) == [
        Retirement("mem-000000b1", "mem-000000a1", True), Retirement("mem-000000c1", "mem-000000a1", True)]
    assert converge(dups, stored.get, {"mem-000000c1", "mem-000000b1"}) == [
        Retirement("mem-000000c1", "mem-000000b1", True)]
    assert converge(dups, stored.get, everything, duplicates=False) == []
    # The same text under another category is the same memory, as at save (docs/hygiene.md, "Exact
    # duplicates"): the id sorting first stays, with its own category.
    assert converge([_m("mem-000000b1", category="context"), _m("mem-000000a1")], stored.get, everything) == [
        Retirement("mem-000000b1", "mem-000000a1", True)]
    # Exact means exact across hosts too (docs/hygiene.md, "The duplicate key"): texts that differ in
    # a flag's case, a path's case or a separator are two memories, never one group.
    for x, y in [("Run the tests with -v", "Run the tests with -V"), ("/etc/App/config.yml", "/etc/app/config.yml"),
                 ("NODE_ENV is set", "NODE-ENV is set"), ("a * b", "a / b")]:
        pair = [_m("mem-000000a1", x), _m("mem-000000b1", y)]
        assert converge(pair, {m.id: m for m in pair}.get, {"mem-000000a1", "mem-000000b1"}) == [], (x, y)
    # Successors: the old memory's supersededBy (the bucket's) decides; through the chain's head.
    old = _m("mem-00000001", active=False, supersededBy="mem-000000f1")
    f1 = _m("mem-000000f1", "v2", active=False, supersedes=old.id, supersededBy="mem-000000f2")
    f2 = _m("mem-000000f2", "v3", supersedes=f1.id)
    late = _m("mem-000000a2", "v2 elsewhere", supersedes=old.id)
    chain = {m.id: m for m in (old, f1, f2, late)}
    assert converge([late], chain.get, set(chain)) == [Retirement(late.id, f2.id, False)]
    assert converge([late], chain.get, set(chain) - {old.id}) == []  # old not settled: wait
    # A cycle made by import ends the walk instead of looping.
    loop = {"mem-0000000a": _m("mem-0000000a", active=False, supersededBy="mem-0000000b"),
            "mem-0000000b": _m("mem-0000000b", active=False, supersededBy="mem-0000000a")}
    assert chain_head("mem-0000000a", loop.get) is None
