"""Access metadata converges: lastAccessedAt becomes the later of the hosts'
values on every host and in the bucket, and access counts stay exact under 412 races."""

from __future__ import annotations

from datetime import timedelta
from typing import Callable

import pytest

from memlocal.model import format_time, utcnow
from s3server import S3, FaultProxy, Host
from memlocal import SaveRequest

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

P = "conv"


def seed(a: Host, b: Host) -> str:
    mid = a.bank.save(SaveRequest(P, "a memory recalled on two hosts")).memory.id
    assert b.sync().ok
    return mid


def row(host: Host, mid: str) -> tuple[int, str, int]:
    m = host.bank.get(P, mid)
    delta = host.bank.store.read("SELECT access_delta FROM memories WHERE id = ?", (mid,))[0][0]
    return m.access_count, format_time(m.last_accessed_at), delta


@pytest.mark.parametrize("later", ["a", "b"])
def test_last_accessed_at_converges_to_the_later_value(later: str, hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    mid = seed(a, b)
    early, late = utcnow() - timedelta(minutes=5), utcnow()
    a.bank.store.mark_accessed(P, [mid], late if later == "a" else early)
    a.bank.store.mark_accessed(P, [mid], early)
    b.bank.store.mark_accessed(P, [mid], late if later == "b" else early)
    for host in (a, b, a, b):
        assert host.sync().ok
    bucket = s3.get_json(f"memory/{P}/{mid}.json")
    assert (bucket["accessCount"], bucket["lastAccessedAt"]) == (3, format_time(late))
    assert row(a, mid) == row(b, mid) == (3, format_time(late), 0)
    assert a.sync().summary().startswith("ok: nothing to do")
    assert b.sync().summary().startswith("ok: nothing to do")


def test_counts_exact_and_times_converge_under_a_412_race(
        hosts: Callable[..., Host], s3: S3, fault_proxy: FaultProxy) -> None:
    """B reads, then A's merge lands before B's If-Match PUT: B gets 412, re-reads, re-merges."""
    a, b = hosts("a"), hosts("b", bucket__endpoint=fault_proxy.endpoint)
    mid = seed(a, b)
    early, late = utcnow() - timedelta(minutes=5), utcnow()
    for _ in range(4):
        a.bank.store.mark_accessed(P, [mid], early)
    for _ in range(3):
        b.bank.store.mark_accessed(P, [mid], late)
    raced: list[bool] = []

    def race(method: str, path: str, headers: dict[str, str]) -> bool:
        if method == "PUT" and "If-Match" in headers and "/memory/" in path and not raced:
            raced.append(True)
            assert a.sync().counts["merged"] == 1
            return True
        return False

    fault_proxy.before(race)
    report = b.sync()
    assert raced and report.ok and report.counts["precondition_failed"] == 1
    assert a.sync().ok
    bucket = s3.get_json(f"memory/{P}/{mid}.json")
    assert (bucket["accessCount"], bucket["lastAccessedAt"]) == (7, format_time(late))
    assert row(a, mid) == row(b, mid) == (7, format_time(late), 0)
