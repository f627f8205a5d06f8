#!/usr/bin/env python3
"""Benchmark the sync against a real S3 server (moto_server, started here on 127.0.0.1), or with
``--memory`` against the sync's in-process bucket (``memory://``: no server, no HTTP; what is
left is the sync's own work, the engine's CPU per object).

Measures, for N memories in one profile (default 10,000):
  1. the first push: a host with N local memories and an empty bucket, one pass (objects/s);
  2. a no-op pass over N objects (nothing changed on either side);
  3. hydration: a fresh, empty database pulling all N objects in one pass (objects/s; from the
     snapshot the push wrote, where it wrote one: ``sync.push_snapshot_min``);
  4. a fresh runner right after that push (``fresh_after_push_s``: one ``memlocal inject --json``
     process on an empty data dir, with the pull on open and its default hydrate deadline, no
     full pass since the push; with how many memories it had, and ``partial``: why it answered
     from part of the bank, ``null`` when it had all of it); not with ``--memory``;
and this process's CPU for each (``*_cpu_s``: every thread's; the server's is not in it).

Usage: python scripts/bench_sync.py [--count 10000] [--workers 16] [--memory] [--json]
Needs the test extras (moto[s3,server], flask, flask-cors) unless --memory. Everything stays on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchlib import BUCKET, PROFILE, fill, s3_client, s3_env, start_moto, stop_moto  # noqa: E402

from memlocal import Config  # noqa: E402
from memlocal.store import Store  # noqa: E402
from memlocal.store.replica import StoreReplica  # noqa: E402


def _cpu() -> float:
    """This process's CPU so far (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fresh_after_push(db: Path, env: dict[str, str], profile: str, query: str) -> dict[str, Any]:
    """``sync.fresh_after_push_s``: a fresh runner's first command right after a first push (no
    full pass since, so no snapshot but the one the push wrote): one ``memlocal inject --json``
    process on the empty database ``db`` (the whole process, wall clock), with the pull on open
    and the default ``sync.hydrate_deadline_s``; how many memories its index held when it exited,
    and its ``partial`` (``null``: it answered from the whole bank)."""
    db.parent.mkdir(parents=True, exist_ok=True)
    env = {**env, "MEMLOCAL_SYNC_PULL_ON_OPEN": "true"}
    env.pop("MEMLOCAL_SYNC_HYDRATE_DEADLINE_S", None)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "memlocal", "--db", str(db), "inject", "--profile", profile, query,
                          "--json"], capture_output=True, text=True, check=True, env=env)
    elapsed = time.perf_counter() - t
    with sqlite3.connect(db) as conn:
        held = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
    return {"fresh_after_push_s": round(elapsed, 2), "fresh_after_push_memories": held,
            "fresh_after_push_partial": json.loads(out.stdout).get("partial")}


def run(count: int, workers: int, memory: bool = False) -> dict[str, Any]:
    from memlocal_sync.engine import SyncEngine

    tmp = Path(tempfile.mkdtemp(prefix="memlocal-bench-"))
    if memory:
        from memlocal_sync import inmemory

        proc, endpoint = None, inmemory.endpoint("bench-sync").endpoint  # made here: a config alone makes none
    else:
        proc, endpoint = start_moto(tmp / "moto.log")
    try:
        if proc is not None:
            s3_client(endpoint).create_bucket(Bucket=BUCKET)
        config = Config.load(environ=s3_env(endpoint, BUCKET, workers))
        results: dict[str, Any] = {"count": count, "workers": workers, "server": "memory" if memory else "moto"}

        a = Store(tmp / "a.db")
        fill(a, count)
        engine = SyncEngine(config, StoreReplica(a))
        t0, c0 = time.perf_counter(), _cpu()
        report = engine.run_pass()
        push_s = time.perf_counter() - t0
        results["first_push_cpu_s"] = round(_cpu() - c0, 3)
        assert report.ok and report.counts["pushed"] == count, report.summary()
        results["first_push_s"] = round(push_s, 2)
        results["first_push_objects_per_s"] = round(count / push_s)

        t0, c0 = time.perf_counter(), _cpu()
        report = engine.run_pass()
        noop_s = time.perf_counter() - t0
        results["noop_pass_cpu_s"] = round(_cpu() - c0, 3)
        assert report.ok and not report.planned, f"{report.summary()}: {report.reason}"
        results["noop_pass_s"] = round(noop_s, 2)
        results["noop_listing_pages"] = report.pages
        engine.close()

        b = Store(tmp / "b.db")
        engine = SyncEngine(config, StoreReplica(b))
        t0, c0 = time.perf_counter(), _cpu()
        report = engine.run_pass()
        pull_s = time.perf_counter() - t0
        results["hydration_cpu_s"] = round(_cpu() - c0, 3)
        assert report.ok and report.counts["pulled"] == count, report.summary()
        results["hydration_s"] = round(pull_s, 2)
        results["hydration_objects_per_s"] = round(count / pull_s)
        engine.close()
        a.close()
        b.close()
        if not memory:  # (a memory:// bucket lives in this process only)
            # Last: nothing since the push wrote a snapshot (a no-op pass and a pull write none),
            # and a runner that exits past its deadline leaves moto_server listing for a while.
            env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLOCAL_", "S3_", "INTERNAL_S3_"))}
            results.update(fresh_after_push(tmp / "fresh-after-push" / "memlocal.db",
                                            {**env, **s3_env(endpoint, BUCKET, workers)}, PROFILE,
                                            "which output format does the user prefer for reports?"))
        return results
    finally:
        if proc is not None:
            stop_moto(proc)
        shutil.rmtree(tmp, ignore_errors=True)  # its databases and moto's log: ~30 MB a run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--memory", action="store_true",
                        help="the in-process bucket (memory://) instead of moto_server: the sync's own CPU")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.count, args.workers, memory=args.memory)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    n = results["count"]
    where = "the in-process bucket (memory://)" if args.memory else "moto_server on 127.0.0.1"
    print(f"sync benchmark against {where}, {n} memories, {results['workers']} workers")
    print(f"  first push:  {results['first_push_s']:>7.2f} s  ({results['first_push_objects_per_s']} objects/s, "
          f"{results['first_push_cpu_s'] * 1000 / n:.3f} ms of CPU an object)")
    if "fresh_after_push_s" in results:
        print(f"  fresh runner right after the push: {results['fresh_after_push_s']:.2f} s "
              f"({results['fresh_after_push_memories']} of {n} memories; "
              f"partial: {results['fresh_after_push_partial']})")
    print(f"  no-op pass:  {results['noop_pass_s']:>7.2f} s  ({results['noop_listing_pages']} listing pages, "
          f"{results['noop_pass_cpu_s']:.3f} s of CPU)")
    print(f"  hydration:   {results['hydration_s']:>7.2f} s  ({results['hydration_objects_per_s']} objects/s, "
          f"{results['hydration_cpu_s'] * 1000 / n:.3f} ms of CPU an object)")


if __name__ == "__main__":
    main()
