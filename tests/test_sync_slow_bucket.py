"""Every request bounded by the clock, whole (docs/sync.md, "The wire"): against a bucket that answers one
byte every 50 ms (``trickle``: tests/trickle.py, a TCP proxy in front of the test's server), every
read of a socket gets its byte in time, so a timeout per read never fires; a request must end
within its share of the deadline as a whole (connect, send, every byte of the answer). Before the
wire was bounded this way, `sync run` took 522 s with a 12 s deadline and `save` 37 s with a 2 s
put timeout; these tests ran into their process timeouts there.

``sync run``, ``save``, a fresh runner's ``inject`` (hydrate on open) and ``serve``'s start are
real ``memlocal`` processes, timed from their start (interpreter start-up included, hence the
slack).

One server (moto_server): at 20 bytes a second no answer is ever whole within these deadlines
(an answer's status line and headers alone are some hundred bytes, several seconds), so which
server answers changes nothing these tests see; the servers' own answers are
tests/test_bucket_contract.py's and test_sync_wire.py's."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from api_live import ServeProcess
from s3server import ACCESS_KEY, SECRET_KEY, S3
from trickle import TrickleProxy

from memlocal_sync.bucket import Bucket, BucketSettings, BucketUnavailable

pytestmark = [pytest.mark.s3_servers("moto"), pytest.mark.slow]

P = "slow"
# A process's own start-up (interpreter, imports, opening the index) on a loaded 2-core machine.
START_UP_S = 6.0


@pytest.fixture
def trickle(s3: S3) -> Iterator[TrickleProxy]:
    """The test's S3 server behind a proxy that answers one byte every 50 ms."""
    proxy = TrickleProxy(s3.endpoint, delay=0.05)
    try:
        yield proxy
    finally:
        proxy.close()


def _env(trickle: TrickleProxy, **settings: str) -> dict[str, str]:
    return {"INTERNAL_S3_ENDPOINT": trickle.endpoint, **settings}


def _timed(cli: Any, *args: str, env: dict[str, str], timeout: float = 90) -> tuple[Any, float]:
    t = time.monotonic()
    res = cli.process(*args, env=env, timeout=timeout)
    return res, time.monotonic() - t


def test_each_request_ends_within_what_is_left_of_the_deadline(s3: S3, trickle: TrickleProxy) -> None:
    """The client itself: 30 s a request and 3 attempts, but a 0.5 s deadline: each operation
    (the objects' through obstore, the listing's through botocore) ends within it."""
    settings = BucketSettings(name=s3.bucket, source="test", endpoint=trickle.endpoint, region="us-east-1",
                              access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    b = Bucket(settings, timeout_s=30.0, attempts=3, deadline_s=0.5)
    s3.put_raw("memory/p/mem-00000001.json", b"{}")
    try:
        for op in (lambda: b.get("memory/p/mem-00000001.json", 1024), lambda: b.list("memory/"),
                   lambda: b.create("memory/p/mem-00000002.json", b"{}"),
                   lambda: b.replace("memory/p/mem-00000001.json", b"{}", '"x"'),
                   lambda: b.delete("memory/p/mem-00000001.json"), b.check):
            b.begin_pass()
            t = time.monotonic()
            with pytest.raises(BucketUnavailable, match="cannot reach bucket"):
                op()
            assert time.monotonic() - t < 0.5 + 1.0, op
            b.end_pass()
    finally:
        b.close()


def test_sync_run_ends_within_its_deadline(cli: Any, s3: S3, trickle: TrickleProxy) -> None:
    """A fresh host's pass of a bucket with 20 memories (written by another host, straight to the
    server): the marker, a listing of some kilobytes, the objects; each a trickle."""
    writer = cli.at(cli.db.with_name("writer.db"))
    for i in range(20):
        assert writer("save", "-p", P, f"memory number {i} of the trickling bucket").exit_code == 0
    assert writer("sync", "run").exit_code == 0
    res, took = _timed(cli, "sync", "run", env=_env(trickle, MEMLOCAL_SYNC_DEADLINE_S="3"))
    assert res.exit_code != 0 and "cannot reach bucket" in res.output, res.output
    assert took < 3 + START_UP_S, took


def test_a_save_waits_at_most_its_put_timeout(cli: Any, trickle: TrickleProxy) -> None:
    env = _env(trickle, MEMLOCAL_SYNC_PUT_TIMEOUT_S="1")
    res, took = _timed(cli, "save", "-p", P, "--json", "saved while the bucket trickles", env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["synced"] is False
    assert took < 2 * 1 + START_UP_S, took


def test_a_fresh_runners_inject_waits_at_most_its_hydrate_deadline(cli: Any, trickle: TrickleProxy) -> None:
    env = _env(trickle, MEMLOCAL_SYNC_PULL_ON_OPEN="true", MEMLOCAL_SYNC_HYDRATE_DEADLINE_S="2",
               MEMLOCAL_SYNC_DEADLINE_S="3")
    res, took = _timed(cli, "inject", "-p", P, "what do you know?", env=env)
    assert res.exit_code == 0, res.output
    assert "answering from this host's index" in res.stderr, res.stderr
    # The hydrate deadline, then the exit: the pull in flight ends within its request's budget.
    assert took < 2 + 3 + START_UP_S, took


def test_serve_starts_within_its_bound(tmp_path: Path, trickle: TrickleProxy) -> None:
    env = _env(trickle, MEMLOCAL_SYNC_PULL_ON_OPEN="true", MEMLOCAL_SYNC_HYDRATE_DEADLINE_S="2",
               MEMLOCAL_SYNC_DEADLINE_S="3")
    t = time.monotonic()
    server = ServeProcess(tmp_path, ["--db", str(tmp_path / "serve.db")], env=env)
    try:
        server.wait_ready(timeout=60)
        took = time.monotonic() - t
        assert took < 2 + START_UP_S, (took, server.log)
    finally:
        server.stop()
