"""A pass waits at most ``sync.deadline_s`` for the bucket, by construction (docs/sync.md, "What
a hint may do"): every attempt checks what is left of the pass's deadline first and waits at most
that (socket timeouts capped by it), counted from the pass's start (a cron ``sync run``: its
process's start) or the bucket's last answer."""

from __future__ import annotations

import time

import pytest

from s3server import ACCESS_KEY, SECRET_KEY, S3, FaultProxy

from memlocal_sync.bucket import Bucket, BucketSettings, BucketUnavailable


def bucket(s3: S3, fault_proxy: FaultProxy, **kw: float) -> Bucket:
    settings = BucketSettings(name=s3.bucket, source="test", endpoint=fault_proxy.endpoint, region="us-east-1",
                              access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    return Bucket(settings, timeout_s=kw.get("timeout_s", 30.0), attempts=20, deadline_s=kw.get("deadline_s", 1.0))


@pytest.mark.s3_servers("moto")  # the proxy is frozen: no server answers, whichever is behind it
def test_an_attempt_waits_only_what_is_left_of_the_pass_deadline(s3: S3, fault_proxy: FaultProxy) -> None:
    b = bucket(s3, fault_proxy)  # 30 s a request, 20 attempts: only the deadline can end it soon
    try:
        fault_proxy.freeze()
        b.begin_pass(time.monotonic() - 0.5)  # half the deadline already spent (a slow start)
        t = time.monotonic()
        with pytest.raises(BucketUnavailable, match="cannot reach bucket"):
            b.get("memlocal/bucket.json", 1024)
        assert time.monotonic() - t < 5.0  # about 0.5 s: capped by what was left, not 30 s
        for op in (lambda: b.list("memory/"), lambda: b.create("memory/p/mem-00000001.json", b"{}"),
                   lambda: b.delete("memory/p/mem-00000001.json")):
            received = fault_proxy.received
            with pytest.raises(BucketUnavailable, match="no answer for 1 s"):
                op()  # nothing left: refused before a request is sent
            assert fault_proxy.received == received
    finally:
        fault_proxy.thaw()
        b.end_pass()
        b.close()


@pytest.mark.s3_servers()
def test_an_answer_gives_the_pass_its_whole_deadline_again(s3: S3, fault_proxy: FaultProxy) -> None:
    b = bucket(s3, fault_proxy, deadline_s=2.0)
    try:
        b.list("memory/")  # the listing's client made (botocore's start-up is not the bucket's answer)
        b.begin_pass(time.monotonic() - 1.5)
        assert b.list("memory/").objects == []  # answered: the deadline runs from now
        assert b.clock is not None and b.clock.left() > 1.5
        # The pass's own work after an answer (a fresh host's inserts, slow under load) is not
        # the bucket's silence: the next request has the whole deadline again.
        b.clock.since = time.monotonic() - 5.0  # as if 5 s of work had passed since that answer
        assert b.list("memory/").objects == []
        b.end_pass()
        assert b.clock.left() == 2.0  # outside a pass every attempt has the whole deadline
    finally:
        b.close()
