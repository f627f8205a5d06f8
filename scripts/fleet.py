#!/usr/bin/env python3
"""A fleet of hosts on one bucket: N processes, each its own SQLite file, saving, deleting,
superseding, pruning, recalling and syncing at random on one SeaweedFS bucket, some killed with
SIGKILL (and started again on the same file), then settled: every host's passes until a round of
passes changes nothing, one full pass each (``found_by_full_listing``: what the change record had
not brought), and record passes until quiet again. Then it checks what a user of the sync relies on:

- every host identical: the same memories (id, profile, content hash, active or not) on every
  host, and the same ids as the bucket's ``memory/`` objects;
- nothing acknowledged lost: every save a host journalled after ``save`` returned is on every host
  (unless some host deleted it, or may have: a delete or a prune that was killed before its
  journal line);
- no deletion resurrected: every deletion a host journalled after ``delete`` returned is on no
  host and not in the bucket;
- requests per host per pass, against docs/sync.md's cost model: a pass that follows the change
  record and finds nothing to do makes 2 requests (the marker and the next segment's 404) plus a
  GET per new segment it reads; once settled, every host's pass makes 2; the others are reported.

    python scripts/fleet.py --hosts 20 --seconds 60 --kills 6          # starts its own weed
    python scripts/fleet.py --hosts 20 --seconds 60 --kills 6 --json

Each host journals to a file of its own (``<host>/journal``, one JSON line per acknowledged
operation, fsynced). ``run_fleet`` is what tests/test_sync_fleet.py and ``bench.py``'s ``fleet``
section call. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable
from memlocal import RecallQuery

sys.path.insert(0, str(Path(__file__).resolve().parent))

PROFILES = ("alpha", "beta", "gamma")
CATEGORIES = ("fact", "context", "preference")
WORDS = ("deploy", "review", "schema", "budget", "lunch", "keyboard", "rollout", "invoice", "sprint", "offsite",
         "latency", "backlog", "roadmap", "retro", "ticket", "postgres", "terraform", "kafka", "oncall", "pager")


def host_env(endpoint: str, bucket: str, key: str, secret: str) -> dict[str, str]:
    """A host's environment: the bucket, few workers (20 hosts share the machine), the defaults
    otherwise (write-through on, the change record followed, a full listing hourly)."""
    return {"INTERNAL_S3_BUCKET": bucket, "INTERNAL_S3_ENDPOINT": endpoint, "INTERNAL_S3_REGION": "us-east-1",
            "INTERNAL_S3_ACCESS_KEY_ID": key, "INTERNAL_S3_SECRET_ACCESS_KEY": secret,
            "MEMLOCAL_SYNC_WORKERS": "4", "MEMLOCAL_SYNC_PUT_TIMEOUT_S": "5"}


# --- one host (a process) ----------------------------------------------------------------------------


class Journal:
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, **entry: Any) -> None:
        os.write(self.fd, (json.dumps(entry) + "\n").encode())
        os.fsync(self.fd)


def one_pass(bank: Any, config: Any, *, full: bool = False) -> dict[str, Any]:
    """One reconciliation pass of ``bank``: its report and the bucket requests it made."""
    from memlocal_sync.engine import SyncEngine
    from memlocal_sync.report import PassOptions

    engine = SyncEngine(config, bank.replica)
    try:
        report = engine.run_pass(PassOptions(full=full, lock_timeout=30.0))
        requests = sum(engine.bucket.requests.values()) if hasattr(engine.bucket, "requests") else -1
    finally:
        engine.close()
    # A pass that only verified (a GET or LIST per record the bucket must confirm) changed nothing.
    quiet = report.ok and not any(v for k, v in report.counts.items() if k not in ("skipped", "verified")) \
        and not report.planned
    return {"requests": requests, "mode": report.mode, "segments": report.segments, "result": report.result,
            "quiet": quiet, "summary": report.summary(), "reason": report.reason,
            "counts": {k: v for k, v in report.counts.items() if v}, "planned": dict(report.planned)}


def host_main(db: Path, journal_path: Path, seed: int, seconds: float) -> None:
    """The host's loop until ``seconds`` have passed (from its first start: the journal's first line)."""
    from memlocal import Config, MemoryBank, SaveRequest
    from memlocal.hygiene.rules import RetentionRule

    journal = Journal(journal_path)
    rng = random.Random(seed ^ os.getpid())
    started = time.time()
    lines = journal_path.read_text().splitlines()
    if lines:
        started = json.loads(lines[0]).get("t", started)
    else:
        journal.write(op="start", t=started)
    config = Config.load()
    bank = MemoryBank.open(db, config=config)
    host = db.parent.name
    n = len(lines)
    try:
        while time.time() - started < seconds:
            n += 1
            profile = rng.choice(PROFILES)
            r = rng.random()
            try:
                if r < 0.35:
                    text = f"{host} note {n}: " + " ".join(rng.sample(WORDS, 4)) + f" {rng.getrandbits(32):08x}"
                    res = bank.save(SaveRequest(profile, text, category=rng.choice(CATEGORIES), use_llm=False))
                    journal.write(op="save", id=res.memory.id, profile=profile, category=res.memory.category)
                elif r < 0.47:
                    ids = [m.id for m in bank.store.iter_profile(profile)]
                    if ids:
                        victim = rng.choice(ids)
                        journal.write(op="delete-intent", id=victim)
                        bank.delete(profile, victim)
                        journal.write(op="delete", id=victim)
                elif r < 0.55:
                    active = [m.id for m in bank.store.iter_profile(profile) if m.is_active]
                    if active:
                        old = rng.choice(active)
                        text = f"{host} update {n}: " + " ".join(rng.sample(WORDS, 4)) + f" {rng.getrandbits(32):08x}"
                        res = bank.save(SaveRequest(profile, text, category="fact", use_llm=False, supersedes=old))
                        journal.write(op="save", id=res.memory.id, profile=profile, category="fact")
                elif r < 0.58:
                    journal.write(op="prune-intent", profile=profile)
                    pruned = bank.prune(profile, RetentionRule.build(categories=["context"], older_than="0s"))
                    journal.write(op="prune", profile=profile, ids=[p.memory.id for p in pruned])
                elif r < 0.78:
                    bank.recall(RecallQuery(profile, " ".join(rng.sample(WORDS, 2))))
                else:
                    journal.write(op="pass", **one_pass(bank, config))
            except Exception as exc:  # a host's trouble is data for the checker, never the end of the host
                journal.write(op="error", what=f"{type(exc).__name__}: {exc}"[:300])
            time.sleep(rng.uniform(0, 0.05))
    finally:
        bank.close()


# --- the fleet ------------------------------------------------------------------------------------


def read_journal(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut by SIGKILL
    return out


def run_fleet(endpoint: str, bucket: str, key: str, secret: str, work: Path, *, hosts: int, seconds: float,
              kills: int, seed: int = 7, spawn: Callable[..., "subprocess.Popen[Any]"] | None = None,
              stop: Callable[["subprocess.Popen[Any]"], Any] | None = None,
              log: Callable[[str], None] = lambda _msg: None) -> dict[str, Any]:
    """Run the fleet and settle it; returns the checks and the figures (see the module's doc)."""
    from _weed import spawn_group, stop_group

    from memlocal import Config, MemoryBank

    spawn = spawn or spawn_group
    stop = stop or stop_group
    rng = random.Random(seed)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("MEMLOCAL_", "INTERNAL_S3_", "S3_"))},
           **host_env(endpoint, bucket, key, secret)}
    dirs = [work / f"host{i:02d}" for i in range(hosts)]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)

    def start(i: int) -> "subprocess.Popen[Any]":
        out = open(dirs[i] / "stderr", "ab")
        try:
            return spawn([sys.executable, __file__, "host", "--db", str(dirs[i] / "memlocal.db"),
                          "--journal", str(dirs[i] / "journal"), "--seed", str(seed * 1000 + i),
                          "--seconds", str(seconds)], env=env, stdout=subprocess.DEVNULL, stderr=out,
                         stdin=subprocess.DEVNULL)
        finally:
            out.close()

    t0 = time.perf_counter()
    procs = {i: start(i) for i in range(hosts)}
    kill_at = sorted(rng.uniform(seconds * 0.15, seconds * 0.85) for _ in range(kills))
    killed: list[int] = []
    try:
        while any(p.poll() is None for p in procs.values()):
            now = time.perf_counter() - t0
            if kill_at and now >= kill_at[0]:
                kill_at.pop(0)
                alive = [i for i, p in procs.items() if p.poll() is None]
                if alive:
                    victim = rng.choice(alive)
                    try:
                        os.killpg(procs[victim].pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    procs[victim].wait()
                    killed.append(victim)
                    log(f"  fleet: kill -9 host {victim} at {now:.1f} s; started again")
                    procs[victim] = start(victim)
            if now > seconds * 3 + 120:
                raise RuntimeError(f"the fleet's hosts did not end within {seconds * 3 + 120:.0f} s")
            time.sleep(0.1)
    finally:
        for p in procs.values():
            stop(p)
    churn_s = time.perf_counter() - t0

    # Settle: rounds of one pass per host until a whole round finds nothing to do; then one full
    # pass each (the hourly listing, which sees what no record explains: what it still finds is
    # reported), and record passes again until quiet.
    log("  fleet: settling")
    env_config = Config.load(environ=host_env(endpoint, bucket, key, secret))
    settle_rounds: list[list[dict[str, Any]]] = []

    def round_of_passes(full: bool = False) -> list[dict[str, Any]]:
        results = []
        for d in dirs:
            bank = MemoryBank.open(d / "memlocal.db", config=env_config)
            try:
                results.append(one_pass(bank, env_config, full=full))
            finally:
                bank.close()
        settle_rounds.append(results)
        return results

    def settle() -> None:
        for _round in range(8):
            if all(r["quiet"] for r in round_of_passes()):
                return

    settle()
    record_settled = [r["summary"] for r in settle_rounds[-1] if not r["quiet"]]
    found_by_full = [r["summary"] for r in round_of_passes(full=True) if not r["quiet"]]
    settle()

    # What each host holds, and the bucket.
    def state(d: Path) -> dict[str, tuple[str, bool, str]]:
        from memlocal_sync.objects import content_hash

        bank = MemoryBank.open(d / "memlocal.db", config=Config.load(environ={}))  # no bucket: no pull
        try:
            return {m.id: (m.profile_name, m.is_active, content_hash(m)) for p in PROFILES
                    for m in bank.store.iter_profile(p)}
        finally:
            bank.close()

    states = [state(d) for d in dirs]
    import boto3
    from botocore.config import Config as BotoConfig

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
                      aws_secret_access_key=secret, config=BotoConfig(s3={"addressing_style": "path"}))
    in_bucket = {o["Key"].rsplit("/", 1)[-1][:-5] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="memory/") for o in page.get("Contents", [])}

    journals = [read_journal(d / "journal") for d in dirs]
    saved = {e["id"]: e for j in journals for e in j if e.get("op") == "save"}
    deleted = {e["id"] for j in journals for e in j if e.get("op") == "delete"}
    deleted |= {i for j in journals for e in j if e.get("op") == "prune" for i in e["ids"]}
    maybe_deleted = {e["id"] for j in journals for e in j if e.get("op") == "delete-intent"}
    unfinished_prunes: set[str] = set()  # profiles with a prune whose result was never journalled
    for j in journals:
        open_prunes: list[str] = []
        for e in j:
            if e.get("op") == "prune-intent":
                open_prunes.append(e["profile"])
            elif e.get("op") == "prune" and e["profile"] in open_prunes:
                open_prunes.remove(e["profile"])
        unfinished_prunes |= set(open_prunes)
    first = states[0]
    identical = all(s == first for s in states) and set(first) == in_bucket
    lost = sorted(i for i, e in saved.items() if i not in deleted and i not in maybe_deleted
                  and not (e["profile"] in unfinished_prunes and e.get("category") == "context")
                  and not all(i in s for s in states))
    resurrected = sorted(i for i in deleted if any(i in s for s in states) or i in in_bucket)
    passes = [e for j in journals for e in j if e.get("op") == "pass"]
    final = settle_rounds[-1]
    busy = [p["requests"] for p in passes if not p["quiet"]]
    # docs/sync.md's cost model: a pass that follows the record and finds nothing to do makes 2
    # requests (the marker, the next segment's 404) plus one GET per new segment it reads and one
    # request per record it verifies (counts["verified"]).
    quiet = [p for p in passes if p["quiet"] and p["mode"] == "record"] + [r for r in final if r["quiet"]]
    beyond_model = [p["summary"] for p in quiet
                    if p["requests"] != 2 + p["segments"] + p["counts"].get("verified", 0)]
    return {
        "hosts": hosts, "seconds": seconds, "churn_s": round(churn_s, 1), "kills": len(killed),
        "identical": identical, "lost": lost, "resurrected": resurrected,
        "settle_rounds": len(settle_rounds), "settled": all(r["quiet"] for r in final),
        "record_not_settled": record_settled, "found_by_full_listing": found_by_full,
        "memories": len(first), "in_bucket": len(in_bucket),
        "acknowledged_saves": len(saved), "acknowledged_deletes": len(deleted),
        "passes": len(passes), "errors": sum(1 for j in journals for e in j if e.get("op") == "error"),
        "quiet_pass_requests": dict(Counter(p["requests"] for p in quiet)),
        "settled_pass_requests": dict(Counter(r["requests"] for r in final)),
        "quiet_passes_beyond_model": beyond_model[:5],
        "busy_pass_requests_mean": round(sum(busy) / len(busy), 1) if busy else None,
        "busy_pass_requests_max": max(busy) if busy else None,
        "pass_results": dict(Counter(p["result"] for p in passes)),
        "pass_modes": dict(Counter(p["mode"] for p in passes)),
        "not_settled": [f"{r['summary']} {r['reason']} counts={r['counts']} planned={r['planned']}"
                        for r in final if not r["quiet"]][:5],
        "differences": _differences(states, in_bucket)[:10],
    }


def _differences(states: list[dict[str, tuple[str, bool, str]]], in_bucket: set[str]) -> list[str]:
    out = []
    for i, s in enumerate(states[1:], 1):
        for mid in sorted(set(s) ^ set(states[0])):
            out.append(f"host{i:02d} vs host00: {mid} only on {'host%02d' % i if mid in s else 'host00'}")
        for mid in sorted(set(s) & set(states[0])):
            if s[mid] != states[0][mid]:
                out.append(f"host{i:02d} vs host00: {mid} differs {s[mid]} {states[0][mid]}")
    for mid in sorted(set(states[0]) ^ in_bucket):
        out.append(f"host00 vs bucket: {mid}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    h = sub.add_parser("host")
    h.add_argument("--db", type=Path, required=True)
    h.add_argument("--journal", type=Path, required=True)
    h.add_argument("--seed", type=int, required=True)
    h.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--kills", type=int, default=6)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "host":
        host_main(args.db, args.journal, args.seed, args.seconds)
        return 0
    from _weed import start_weed

    with tempfile.TemporaryDirectory(prefix="memlocal-fleet-") as tmp:
        weed = start_weed(Path(tmp) / "weed", Path(tmp) / "weed.log", credentials=("fleet", "fleet"))
        try:
            import boto3

            boto3.client("s3", endpoint_url=weed.endpoint, region_name="us-east-1", aws_access_key_id="fleet",
                         aws_secret_access_key="fleet").create_bucket(Bucket="memlocal-fleet")
            result = run_fleet(weed.endpoint, "memlocal-fleet", "fleet", "fleet", Path(tmp) / "hosts",
                               hosts=args.hosts, seconds=args.seconds, kills=args.kills, seed=args.seed,
                               log=lambda m: print(m, file=sys.stderr, flush=True))
        finally:
            weed.stop()
    print(json.dumps(result, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    ok = result["identical"] and not result["lost"] and not result["resurrected"] and result["settled"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
