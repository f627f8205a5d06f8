"""The pure side of the sync: keys, bodies, hashes, and the reconciliation decisions as tables."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from memlocal.model import Memory
from memlocal_sync.objects import BadObject, content_hash, decode, encode, object_key, parse_key
from memlocal_sync.plan import Base, Listed, Local, Op, after_fetch, plan_pass

P = "prof"
A, B, C = "mem-0000000a", "mem-0000000b", "mem-0000000c"


def key(mid: str, profile: str = P) -> str:
    return f"memory/{profile}/{mid}.json"


def mem(mid: str = A, profile: str = P, **kw: object) -> Memory:
    base = dict(id=mid, profile_name=profile, raw_input="likes tea", processed_content="likes tea",
                summary="likes tea", created_at=datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc))
    base.update(kw)
    return Memory(**base)  # type: ignore[arg-type]


# --- keys and bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize("k, expected", [
    ("memory/prof/mem-0123abcd.json", ("prof", "mem-0123abcd")),
    ("memory/a.b_c-d/mem-ffffffff.json", ("a.b_c-d", "mem-ffffffff")),
    ("memory/prof/mem-0123ABCD.json", None),       # ids are lowercase hex
    ("memory/prof/mem-0123abc.json", None),        # 7 hex digits
    ("memory/.hidden/mem-0123abcd.json", None),    # profile may not start with '.'
    ("memory/prof/sub/mem-0123abcd.json", None),   # nested
    ("memory/prof/mem-0123abcd.txt", None),
    ("other/prof/mem-0123abcd.json", None),
    ("memory//mem-0123abcd.json", None),
])
def test_parse_key(k: str, expected: tuple[str, str] | None) -> None:
    assert parse_key(k) == expected


def test_key_round_trip_and_body_round_trip() -> None:
    m = mem(extra={"embeddingModel": "none"})
    assert parse_key(object_key(P, A)) == (P, A)
    back = decode(encode(m), P, A)
    assert back == m and back.extra == {"embeddingModel": "none"}


@pytest.mark.parametrize("body, reason", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe{}", "not valid UTF-8"),
    (b"", "not valid JSON"),
    (b"[]", "not a valid memory"),
    (b'{"id": "mem-0000000a", "profileName": "prof", "rawInput": "x", "createdAt": "2025-01-01T00:00:00Z",'
     b' "stalenessScore": NaN}', "not valid JSON"),
])
def test_decode_rejects_bad_bodies(body: bytes, reason: str) -> None:
    with pytest.raises(BadObject, match=reason):
        decode(body, P, A)


def test_decode_rejects_a_body_that_names_another_id_or_profile() -> None:
    with pytest.raises(BadObject, match="body is mem-0000000b"):
        decode(encode(mem(B)), P, A)
    with pytest.raises(BadObject, match="in profile other"):
        decode(encode(mem(A, "other")), P, A)


def test_content_hash_ignores_access_metadata_only() -> None:
    m = mem()
    same = m.with_changes(access_count=7, last_accessed_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                          staleness_score=0.4)
    assert content_hash(m) == content_hash(same)
    assert content_hash(m) != content_hash(m.with_changes(processed_content="likes coffee"))
    assert content_hash(m) != content_hash(m.with_changes(extra={"tags": ["x"]}))



def test_content_hash_is_the_sha256_of_the_sorted_json_without_access_fields() -> None:
    """The definition the hashes every base already holds were computed with (a host that
    hashed differently would see every memory as changed)."""
    import hashlib
    import json

    for m in (mem(), mem().with_changes(extra={"tags": ["é", 1.5], "zeta": None, "Alpha": {"b": 1}}, is_active=False)):
        body = {k: v for k, v in m.to_dict().items() if k not in ("accessCount", "lastAccessedAt", "stalenessScore")}
        text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        assert content_hash(m) == hashlib.sha256(text.encode("utf-8")).hexdigest()

# --- the plan -----------------------------------------------------------------------------------

H1, H2 = "h1", "h2"


def plan(local=(), remote=(), base=(), deletes=(), bad=None, **kw):  # type: ignore[no-untyped-def]
    kw.setdefault("max_object_bytes", 1 << 20)
    kw.setdefault("mass_delete_min", 5)
    return plan_pass({x.id: x for x in local}, list(remote), {x.id: x for x in base},
                     {d: P for d in deletes}, bad or {}, **kw)


def L(mid: str = A, h: str = H1, delta: int = 0, profile: str = P) -> Local:
    return Local(mid, profile, h, delta)


def R(mid: str = A, etag: str = '"e1"', size: int = 300, profile: str = P) -> Listed:
    return Listed(key(mid, profile), etag, size)


def Bs(mid: str = A, etag: str = '"e1"', h: str = H1, profile: str = P) -> Base:
    return Base(mid, profile, etag, h)


SCENARIOS = [
    # name, local, remote, base, outbox deletes, expected (op, etag)
    ("new local is created", [L()], [], [], [], [(Op.CREATE, "")]),
    ("new remote is fetched", [], [R()], [], [], [(Op.FETCH, '"e1"')]),
    ("both, no base: fetch to adopt or re-id", [L()], [R()], [], [], [(Op.FETCH, '"e1"')]),
    ("gone remotely: delete here", [L()], [], [Bs()], [], [(Op.DELETE_LOCAL, "")]),
    ("deleted here: delete remotely", [], [R()], [Bs()], [], [(Op.DELETE_REMOTE, "")]),
    ("deleted here before any base: delete remotely", [], [R()], [], [A], [(Op.DELETE_REMOTE, "")]),
    ("gone on both sides: forget", [], [], [Bs()], [], [(Op.FORGET, "")]),
    ("outbox deletion of something never pushed", [], [], [], [A], [(Op.FORGET, "")]),
    ("in sync: nothing", [L()], [R()], [Bs()], [], []),
    ("remote moved: fetch", [L()], [R(etag='"e2"')], [Bs()], [], [(Op.FETCH, '"e2"')]),
    ("remote moved and local bumps: fetch (then merge)", [L(delta=2)], [R(etag='"e2"')], [Bs()], [], [(Op.FETCH, '"e2"')]),
    ("local bumps only: update if-match base", [L(delta=3)], [R()], [Bs()], [], [(Op.UPDATE, '"e1"')]),
    ("local content edit only: update if-match base", [L(h=H2)], [R()], [Bs()], [], [(Op.UPDATE, '"e1"')]),
    ("deletion wins over local bumps", [L(delta=5)], [], [Bs()], [], [(Op.DELETE_LOCAL, "")]),
    ("deletion here wins over remote changes", [], [R(etag='"e9"')], [Bs()], [], [(Op.DELETE_REMOTE, "")]),
    ("a re-created local id ignores a stale outbox deletion", [L()], [], [], [A], [(Op.CREATE, "")]),
]


@pytest.mark.parametrize("name, local, remote, base, deletes, expected", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_plan_table(name: str, local, remote, base, deletes, expected) -> None:  # type: ignore[no-untyped-def]
    # Plus a memory in sync on all sides, so the bucket is not empty (that has its own guard).
    p = plan([*local, L(C)], [*remote, R(C)], [*base, Bs(C)], deletes)
    assert [(a.op, a.etag) for a in p.actions] == expected
    assert not p.guards and not p.skips


PULL_ONLY = [
    ("new local is not pushed", [L()], [], [], [], []),
    ("new remote is fetched", [], [R()], [], [], [Op.FETCH]),
    ("adoption needs a push: left for the full pass", [L()], [R()], [], [], []),
    ("remote deletion applies", [L()], [], [Bs()], [], [Op.DELETE_LOCAL]),
    ("local deletion is not pushed", [], [R()], [Bs()], [], []),
    ("local bumps are not pushed", [L(delta=1)], [R()], [Bs()], [], []),
    ("remote change is pulled", [L(delta=1)], [R(etag='"e2"')], [Bs()], [], [Op.FETCH]),
]


@pytest.mark.parametrize("name, local, remote, base, deletes, expected", PULL_ONLY, ids=[s[0] for s in PULL_ONLY])
def test_plan_pull_only(name: str, local, remote, base, deletes, expected) -> None:  # type: ignore[no-untyped-def]
    p = plan([*local, L(C)], [*remote, R(C)], [*base, Bs(C)], deletes, pull_only=True)
    assert [a.op for a in p.actions] == expected


def test_bad_objects_are_skipped_and_never_touch_local() -> None:
    p = plan(
        local=[L(A), L(B)],
        remote=[R(A, etag='"bad"'), R(B, size=11 << 20), Listed("memory/prof/notes.txt", '"x"', 5),
                Listed("memory/prof/", '"d"', 0)],
        base=[Bs(A), Bs(B)],
        bad={key(A): ('"bad"', "not valid JSON")},
    )
    assert p.actions == []
    reasons = {s.key: s.reason for s in p.skips}
    assert reasons[key(A)] == "not valid JSON"
    assert "cap is 1048576" in reasons[key(B)]
    assert "not a memory key" in reasons["memory/prof/notes.txt"]
    assert "memory/prof/" not in reasons  # folder markers are ignored silently


def test_a_known_bad_object_that_changed_is_fetched_again() -> None:
    p = plan(local=[L()], remote=[R(etag='"fixed"')], base=[Bs()], bad={key(A): ('"bad"', "not valid JSON")})
    assert [(a.op, a.etag) for a in p.actions] == [(Op.FETCH, '"fixed"')]


def test_a_deletion_here_still_removes_a_bad_object() -> None:
    p = plan(remote=[R(etag='"bad"')], base=[Bs()], bad={key(A): ('"bad"', "not valid JSON")})
    assert [a.op for a in p.actions] == [Op.DELETE_REMOTE]


def test_same_id_under_another_profile() -> None:
    # Unsynced local memory; another host's memory holds the id under profile "other": re-id ours.
    p = plan(local=[L()], remote=[R(profile="other")])
    assert [a.op for a in p.actions] == [Op.REID]
    assert [s.persist for s in p.skips] == [False]
    # Nothing local: the first profile's copy is pulled, the other reported.
    p = plan(remote=[R(profile="zz"), R(profile="aa")])
    assert [(a.op, a.profile) for a in p.actions] == [(Op.FETCH, "aa")]
    assert [s.key for s in p.skips] == [key(A, "zz")]


def ids(n: int) -> list[str]:
    return [f"mem-{i:08x}" for i in range(n)]


def test_mass_delete_guard() -> None:
    synced = ids(20)
    # 11 of 20 gone remotely: more than half and more than a handful -> held back.
    remaining = synced[11:]
    p = plan(local=[L(i) for i in synced], remote=[R(i) for i in remaining], base=[Bs(i) for i in synced])
    assert not [a for a in p.actions if a.op is Op.DELETE_LOCAL]
    assert len(p.guards) == 1 and p.guards[0].deletions == 11 and p.guards[0].synced == 20
    # Forced: applied.
    p = plan(local=[L(i) for i in synced], remote=[R(i) for i in remaining], base=[Bs(i) for i in synced], force=True)
    assert len([a for a in p.actions if a.op is Op.DELETE_LOCAL]) == 11
    # Exactly half is allowed, and so is a handful of a small profile.
    p = plan(local=[L(i) for i in synced], remote=[R(i) for i in synced[10:]], base=[Bs(i) for i in synced])
    assert not p.guards and len(p.actions) == 10
    small = ids(4)
    p = plan(local=[L(i) for i in small], remote=[R(i) for i in small[3:]], base=[Bs(i) for i in small])
    assert not p.guards and len(p.actions) == 3


def test_mass_delete_guard_is_per_profile() -> None:
    big = [f"mem-1{i:07x}" for i in range(10)]
    small = [f"mem-2{i:07x}" for i in range(10)]
    local = [L(i) for i in big] + [L(i, profile="other") for i in small]
    base = [Bs(i) for i in big] + [Bs(i, profile="other") for i in small]
    remote = [R(i, profile="other") for i in small] + [R(big[0])]   # 9 of 10 gone in P
    p = plan(local=local, remote=remote, base=base)
    assert [g.profile for g in p.guards] == [P]


def test_an_empty_bucket_never_deletes_even_a_handful() -> None:
    p = plan(local=[L(A), L(B)], remote=[], base=[Bs(A), Bs(B)])
    assert p.actions == [] and len(p.guards) == 1 and "no objects" in p.guards[0].reason
    # ...but a new local memory is still pushed.
    p = plan(local=[L(A), L(C)], remote=[], base=[Bs(A)])
    assert [(a.op, a.id) for a in p.actions] == [(Op.CREATE, C)]


# --- after a fetch --------------------------------------------------------------------------------

FETCH_CASES = [
    # name, local, base, remote hash, expected (reid, content, base_hash, push, conflict)
    ("new remote", None, None, H1, (False, "remote", H1, False, False)),
    ("our own object, no base: adopt", L(h=H1), None, H1, (False, "remote", H1, False, False)),
    ("adopt then merge local bumps", L(h=H1, delta=2), None, H1, (False, "remote", H1, True, False)),
    ("different content under our id: re-id", L(h=H2), None, H1, (True, "local", "", False, False)),
    ("remote access changed only", L(h=H1), Bs(h=H1), H1, (False, "remote", H1, False, False)),
    ("remote changed, local bumps: merge", L(h=H1, delta=1), Bs(h=H1), H1, (False, "remote", H1, True, False)),
    ("remote content edit wins", L(h=H1), Bs(h=H1), H2, (False, "remote", H2, False, False)),
    ("local content edit kept and pushed", L(h=H2), Bs(h=H1), H1, (False, "local", H1, True, False)),
    ("both edited: remote wins, reported", L(h=H2), Bs(h=H1), "h3", (False, "remote", "h3", False, True)),
    ("both made the same edit", L(h=H2), Bs(h=H1), H2, (False, "remote", H2, False, False)),
]


@pytest.mark.parametrize("name, local, base, rhash, expected", FETCH_CASES, ids=[c[0] for c in FETCH_CASES])
def test_after_fetch(name: str, local, base, rhash, expected) -> None:  # type: ignore[no-untyped-def]
    d = after_fetch(local, base, P, rhash)
    assert (d.reid, d.content, d.base_hash, d.push, d.conflict) == expected


def test_after_fetch_pull_only_never_pushes_or_reids() -> None:
    assert after_fetch(L(h=H2), None, P, H1, pull_only=True).skip
    assert not after_fetch(L(h=H1, delta=3), Bs(h=H1), P, H1, pull_only=True).push
    d = after_fetch(L(h=H2), Bs(h=H1), P, H1, pull_only=True)
    assert (d.content, d.base_hash, d.push) == ("local", H1, False)


def test_after_fetch_other_profile_is_a_collision() -> None:
    assert after_fetch(L(h=H1, profile="mine"), None, "theirs", H1).reid


def test_plan_never_compares_timestamps() -> None:
    """The plan's inputs carry no time at all: no merge decision can depend on clocks."""
    for cls in (Local, Listed, Base):
        fields = getattr(cls, "__dataclass_fields__", None) or getattr(cls, "_fields")  # dataclass or NamedTuple
        assert not [f for f in fields if "time" in f or f.endswith(("_at", "_us"))]
    assert json.loads(encode(mem()))["createdAt"] == "2025-01-02T03:04:05.678Z"


def test_a_verified_bucket_lets_a_profiles_last_memories_go() -> None:
    """With the identity marker verified, an empty listing is a deletion made elsewhere."""
    p = plan(local=[L(A), L(B)], remote=[], base=[Bs(A), Bs(B)], verified=True)
    assert sorted((a.op, a.id) for a in p.actions) == [(Op.DELETE_LOCAL, A), (Op.DELETE_LOCAL, B)]
    assert not p.guards


def test_the_guard_share_is_a_setting_and_also_bounds_the_whole_pass() -> None:
    synced = ids(20)
    kw = dict(local=[L(i) for i in synced], remote=[R(i) for i in synced[12:]], base=[Bs(i) for i in synced],
              verified=True)
    assert plan(**kw).guards and "sync.max_delete_share = 0.5" in plan(**kw).guards[0].reason
    assert not plan(**kw, max_delete_share=0.7).guards
    # Four profiles losing 4 of 5 each: no profile over the minimum, the pass is (16 of 20).
    profiles = [f"p{n}" for n in range(4)]
    mids = {p: [f"mem-{n}{i:07x}" for i in range(5)] for n, p in enumerate(profiles)}
    local = [L(m, profile=p) for p in profiles for m in mids[p]]
    base = [Bs(m, profile=p) for p in profiles for m in mids[p]]
    remote = [R(mids[p][0], profile=p) for p in profiles]
    got = plan(local=local, remote=remote, base=base, verified=True)
    assert sorted(g.profile for g in got.guards) == profiles and "16 of the 20" in got.guards[0].reason
    assert not [a for a in got.actions if a.op is Op.DELETE_LOCAL]


def test_id_listings_cover_the_rest_of_a_profile_and_nothing_else() -> None:
    """The listings the rest of a profile is split into (a prefix, ``start_after`` < key ≤
    ``last``) hold, together, every key after the probe's last key up to the profile's end,
    odd keys included, and no key of the next profile."""
    from memlocal_sync.lister import _id_listings

    keys = sorted([f"memory/p/mem-{h}{i:07x}.json" for h in "0123456789abcdef" for i in (0, 7, 0xfffffff)]
                  + ["memory/p/mem-9~.json", "memory/p/mem-Z.json", "memory/p/mem-", "memory/p/mem-a",
                     "memory/p/mem-f~", "memory/p/zz.json", "memory/p/sub/x.json", "memory/p/mem-3\U0010ffffz",
                     "memory/p0/mem-00000000.json", "memory/q/mem-00000000.json"])

    def listed(prefix: str | None, lo: str | None, hi: str | None) -> set[str]:
        return {k for k in keys if k.startswith(prefix or "memory/") and (lo is None or k > lo)
                and (hi is None or k <= hi)}

    for probe_last in ("memory/p/mem-00000007.json", "memory/p/mem-3fffffff.json", "memory/p/mem-9fffffff.json",
                       "memory/p/mem-b0000007.json", "memory/p/mem-f0000007.json"):
        parts = _id_listings(probe_last)
        assert parts is not None
        covered = set().union(*(listed(*part) for part in parts))
        assert covered == {k for k in keys if probe_last < k and k.startswith("memory/p/")}
        assert all(k > parts[-1][2] for k in keys if not k.startswith("memory/p/") and k > probe_last)
    assert _id_listings("memory/p/zz.json") is None
