"""The mass-delete guard cannot be bypassed: a wiped bucket deletes nothing locally, however the
wipe is shaped (the whole bucket, some profiles, some id prefixes; the marker kept or not), and
whichever of its rules trips, the whole pass is held (docs/sync.md, "Safety")."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import pytest

from memlocal_sync.plan import Base, Listed, Local, Op, plan_pass
from s3server import S3, Host
from memlocal import SaveRequest

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

MIN, SHARE = 5, 0.5


def _key(profile: str, mid: str) -> str:
    return f"memory/{profile}/{mid}.json"


def _keys(sizes: dict[str, int]) -> list[str]:
    """Distinct ids across profiles, their first hex digit spread like random ids'."""
    return sorted(_key(p, f"mem-{n % 16:x}{p[-1]}{n:06x}") for p, count in sizes.items() for n in range(count))


def test_a_wipe_that_keeps_the_marker_deletes_nothing_here(hosts: Callable[..., Host], s3: S3) -> None:
    """Profile big (6) and alice, bob, carol (2 each) on A, pulled by B; every memory/ object
    deleted, memlocal/bucket.json kept: B's pass deletes nothing and says exactly that."""
    a, b = hosts("a"), hosts("b")
    for profile, n in (("big", 6), ("alice", 2), ("bob", 2), ("carol", 2)):
        for i in range(n):
            a.bank.save(SaveRequest(profile, f"{profile} memory number {i}"))
    assert b.sync().ok and b.bank.store.count() == 12
    for key in s3.keys("memory/"):
        s3.delete(key)
    assert s3.keys("memlocal/bucket.json")
    report = b.sync()
    assert report.result == "guarded"
    assert b.bank.store.count() == 12 and sorted(b.bank.store.profiles()) == ["alice", "big", "bob", "carol"]
    assert report.counts["deleted_local"] == 0
    assert "would delete 6 of the 6 synced memories of profile big" in report.reason
    assert "would delete 12 of the 12 synced memories in this pass" in report.reason
    assert "held back 12 local deletions (profiles alice 2, big 6, bob 2, carol 2)" in report.reason
    assert "nothing was deleted locally" in report.reason


# --- the rules as a property of the plan: many shapes of wipe, at no I/O cost ---------------------

profile_sizes = st.dictionaries(st.sampled_from(["p0", "p1", "p2", "p3", "p4", "p5"]), st.integers(1, 14),
                                min_size=1, max_size=6)


@st.composite
def wipes(draw: st.DrawFn) -> tuple[dict[str, int], set[str], bool]:
    """Profile sizes, the keys a wipe removes (whole bucket, whole profiles, id prefixes), and
    whether the identity marker is verified."""
    sizes = draw(profile_sizes)
    keys = set(_keys(sizes))
    kind = draw(st.sampled_from(["whole", "profiles", "hex"]))
    if kind == "whole":
        gone = set(keys)
    elif kind == "profiles":
        chosen = draw(st.sets(st.sampled_from(sorted(sizes)), min_size=1))
        gone = {k for k in keys if k.split("/")[1] in chosen}
    else:
        digits = draw(st.sets(st.sampled_from("0123456789abcdef"), min_size=1))
        gone = {k for k in keys if k.rsplit("/", 1)[1][4] in digits}
    return sizes, gone, draw(st.booleans())


def _expected_held(sizes: dict[str, int], gone: set[str]) -> bool:
    per = {p: sum(1 for k in gone if k.split("/")[1] == p) for p in sizes}
    total = sum(per.values())
    return (any(n > MIN and n > SHARE * sizes[p] for p, n in per.items())
            or (total > MIN and total > SHARE * sum(sizes.values())))


@settings(max_examples=120, deadline=None)
@given(wipes())
def test_any_wipe_over_the_bounds_deletes_nothing_and_one_within_them_deletes_exactly_it(
        case: tuple[dict[str, int], set[str], bool]) -> None:
    sizes, gone, verified = case
    keys = _keys(sizes)
    local, base, listing = {}, {}, []
    for k in keys:
        profile, mid = k.split("/")[1], k.rsplit("/", 1)[1][:-5]
        local[mid] = Local(mid, profile, "h")
        base[mid] = Base(mid, profile, '"e"', "h")
        if k not in gone:
            listing.append(Listed(k, '"e"', 10))
    plan = plan_pass(local, listing, base, {}, {}, max_object_bytes=1 << 20, mass_delete_min=MIN,
                     max_delete_share=SHARE, verified=verified)
    deleted = {_key(a.profile, a.id) for a in plan.actions if a.op is Op.DELETE_LOCAL}
    held = _expected_held(sizes, gone) or (not listing and not verified)
    if held:
        assert deleted == set() and sum(g.deletions for g in plan.guards) == len(gone)
    else:
        assert deleted == gone and not plan.guards


# --- the same against moto_server, the marker kept or not (few examples: each is real I/O) --------

_bucket_names = (f"memlocal-guard-{n}" for n in itertools.count())


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.dictionaries(st.sampled_from(["big", "alice", "bob"]), st.integers(1, 7), min_size=1, max_size=3),
       shape=st.sampled_from(["whole", "one profile", "hex"]), keep_marker=st.booleans())
def test_a_wiped_bucket_deletes_nothing_here(s3: S3, sizes: dict[str, int], shape: str, keep_marker: bool) -> None:
    name = next(_bucket_names)
    s3.create_bucket(name)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Host(Path(tmp) / "a.db", {"bucket.name": name}), Host(Path(tmp) / "b.db", {"bucket.name": name})
        try:
            for profile, n in sizes.items():
                for i in range(n):
                    a.bank.save(SaveRequest(profile, f"{profile} memory {i}"))
            assert b.sync().ok
            before = b.bank.store.count()
            keys = [o["Key"] for o in s3.client.list_objects_v2(Bucket=name, Prefix="memory/").get("Contents", [])]
            first = sorted(sizes)[0]
            gone = [k for k in keys if shape == "whole" or (shape == "one profile" and k.split("/")[1] == first)
                    or (shape == "hex" and k.rsplit("/", 1)[1][4] in "01234567")]
            for k in gone:
                s3.client.delete_object(Bucket=name, Key=k)
            if not keep_marker:
                s3.client.delete_object(Bucket=name, Key="memlocal/bucket.json")
            report = b.sync()
            per = {p: sum(1 for k in gone if k.split("/")[1] == p) for p in sizes}
            if keep_marker and not _expected_held(sizes, set(gone)):
                assert report.ok and b.bank.store.count() == before - len(gone)   # a handful: deleted
            else:
                assert report.result == "guarded", report.reason
                assert b.bank.store.count() == before, (per, report.reason)
        finally:
            a.close()
            b.close()
