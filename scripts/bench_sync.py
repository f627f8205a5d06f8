#!/usr/bin/env python3
"""Benchmark the sync against a real S3 server (moto_server, started here on 127.0.0.1).

Measures, for N memories in one profile (default 10,000):
  1. the first push: a host with N local memories and an empty bucket, one pass (objects/s);
  2. a no-op pass over N objects (nothing changed on either side);
  3. hydration: a fresh, empty database pulling all N objects in one pass (objects/s).

Usage: python scripts/bench_sync.py [--count 10000] [--workers 16] [--json]
Needs the test extras (moto[s3,server], flask, flask-cors). Everything stays on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from memlocal import Config
from memlocal.model import Memory, new_id, utcnow
from memlocal.store import MEMORY_COLUMNS, Store, memory_to_row

BUCKET = "memlocal-bench"


def start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).read()
            return proc, endpoint
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"moto_server did not start (see {log})")


def fill(store: Store, n: int) -> None:
    """N memories inserted in one transaction (setup, not measured)."""
    now = utcnow()
    rows = []
    seen: set[str] = set()
    while len(rows) < n:
        mid = new_id()
        if mid in seen:
            continue
        seen.add(mid)
        text = f"benchmark memory {len(rows)}: the user prefers structured JSON output for report {mid}"
        rows.append(memory_to_row(Memory(id=mid, profile_name="bench", raw_input=text, processed_content=text,
                                         summary=text[:50], created_at=now)))
    with store.transaction() as c:
        c.executemany(f"INSERT INTO memories ({', '.join(MEMORY_COLUMNS)}) VALUES "
                      f"({', '.join('?' for _ in MEMORY_COLUMNS)})", rows)


def run(count: int, workers: int) -> dict[str, Any]:
    from sync.engine import SyncEngine

    tmp = Path(tempfile.mkdtemp(prefix="memlocal-bench-"))
    proc, endpoint = start_moto(tmp / "moto.log")
    try:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                     aws_secret_access_key="bench").create_bucket(Bucket=BUCKET)
        env = {"INTERNAL_S3_BUCKET": BUCKET, "INTERNAL_S3_ENDPOINT": endpoint, "INTERNAL_S3_REGION": "us-east-1",
               "INTERNAL_S3_ACCESS_KEY_ID": "bench", "INTERNAL_S3_SECRET_ACCESS_KEY": "bench",
               "MEMLOCAL_SYNC_WORKERS": str(workers)}
        config = Config.load(environ=env)
        results: dict[str, Any] = {"count": count, "workers": workers}

        a = Store(tmp / "a.db")
        fill(a, count)
        engine = SyncEngine(config, a)
        t0 = time.perf_counter()
        report = engine.run_pass()
        push_s = time.perf_counter() - t0
        assert report.ok and report.counts["pushed"] == count, report.summary()
        results["first_push_s"] = round(push_s, 2)
        results["first_push_objects_per_s"] = round(count / push_s)

        t0 = time.perf_counter()
        report = engine.run_pass()
        noop_s = time.perf_counter() - t0
        assert report.ok and not report.planned, report.summary()
        results["noop_pass_s"] = round(noop_s, 2)
        results["noop_listing_pages"] = report.pages
        engine.close()

        b = Store(tmp / "b.db")
        engine = SyncEngine(config, b)
        t0 = time.perf_counter()
        report = engine.run_pass()
        pull_s = time.perf_counter() - t0
        assert report.ok and report.counts["pulled"] == count, report.summary()
        results["hydration_s"] = round(pull_s, 2)
        results["hydration_objects_per_s"] = round(count / pull_s)
        engine.close()
        a.close()
        b.close()
        return results
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.count, args.workers)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    n = results["count"]
    print(f"sync benchmark against moto_server on 127.0.0.1, {n} memories, {results['workers']} workers")
    print(f"  first push:  {results['first_push_s']:>7.2f} s  ({results['first_push_objects_per_s']} objects/s)")
    print(f"  no-op pass:  {results['noop_pass_s']:>7.2f} s  ({results['noop_listing_pages']} listing pages)")
    print(f"  hydration:   {results['hydration_s']:>7.2f} s  ({results['hydration_objects_per_s']} objects/s)")


if __name__ == "__main__":
    main()
