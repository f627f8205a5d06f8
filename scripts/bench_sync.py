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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchlib import BUCKET, fill, s3_client, s3_env, start_moto, stop_moto  # noqa: E402

from memlocal import Config  # noqa: E402
from memlocal.store import Store  # noqa: E402
from memlocal.store.replica import StoreReplica  # noqa: E402


def run(count: int, workers: int) -> dict[str, Any]:
    from memlocal_sync.engine import SyncEngine

    tmp = Path(tempfile.mkdtemp(prefix="memlocal-bench-"))
    proc, endpoint = start_moto(tmp / "moto.log")
    try:
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        config = Config.load(environ=s3_env(endpoint, BUCKET, workers))
        results: dict[str, Any] = {"count": count, "workers": workers}

        a = Store(tmp / "a.db")
        fill(a, count)
        engine = SyncEngine(config, StoreReplica(a))
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
        engine = SyncEngine(config, StoreReplica(b))
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
        stop_moto(proc)


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
