#!/usr/bin/env python3
"""Recall latency at 1k / 10k (/ 100k) memories in one profile.

Builds a throw-away database per size with synthetic memories (Zipf-distributed vocabulary with
the cluster words mixed in, ages over a year, Zipf access counts), then times, per query:

- ``query_with_relevance`` on a warm index (no side effects),
- ``recall`` (the same plus the synchronous access bump and the incremental index refresh the
  bump causes on the next query),
- ``inject`` with ``@memory`` (both tiers ranked, the block rendered, the bump queued),
- the first query of a fresh bank (cold: the index is built from the database),
- a bare FTS5 bm25 top-8 query on the same data (a floor for "any SQLite text search"),
- a brute-force full scan with the formula over pre-tokenised memories (the reference), and
  checks that the fast path returns exactly the brute-force top-k for every timed query.

    python scripts/bench_recall.py                  # 1k and 10k, 200 queries each
    python scripts/bench_recall.py --sizes 100000 --queries 50 --json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from memlocal import MemoryBank
from memlocal.clusters import CLUSTER_WORDS
from memlocal.config import Config
from memlocal.model import Memory, new_id, staleness_of, utcnow
from memlocal.scoring import (
    Breakdown, ScoredMemory, _rank_key, clusters_of, confidence_mul, maturity, memory_terms, prepare_query,
    score_parts, usage, weights_for,
)
from memlocal.store import memory_to_row, to_us

CATEGORIES = ("preference", "fact", "behavior", "context", "general")


def vocabulary(rng: random.Random, size: int = 6000) -> list[str]:
    """Pseudo-words with a Zipf rank order, real cluster words spread through it."""
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pa", "do", "gre", "tra", "spi", "ble"]
    words = {"".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(size)}
    vocab = sorted(words)
    rng.shuffle(vocab)
    real = sorted({w for text in CLUSTER_WORDS.values() for w in text.split()})
    for w in real:
        vocab.insert(rng.randrange(len(vocab)), w)
    return vocab


class Zipf:
    def __init__(self, n: int, s: float = 1.05) -> None:
        weights = [1.0 / (i + 1) ** s for i in range(n)]
        total = sum(weights)
        acc, self.cdf = 0.0, []
        for w in weights:
            acc += w / total
            self.cdf.append(acc)

    def sample(self, rng: random.Random) -> int:
        import bisect

        return min(bisect.bisect_left(self.cdf, rng.random()), len(self.cdf) - 1)


def build(path: Path, n: int, rng: random.Random, vocab: list[str], zipf: Zipf) -> MemoryBank:
    bank = MemoryBank(path, config=Config.load(environ={}), replicator=False)
    now = utcnow()
    batch = []
    ids: set[str] = set()
    for _ in range(n):
        mid = new_id()
        while mid in ids:  # 2^32 ids: a 100k profile draws a duplicate or two
            mid = new_id()
        ids.add(mid)
        words = [vocab[zipf.sample(rng)] for _ in range(rng.randint(6, 22))]
        text = " ".join(words).capitalize() + "."
        created = now - timedelta(days=rng.random() * 365)
        count = int(rng.paretovariate(1.3)) - 1 if rng.random() < 0.4 else 0
        last = created + (now - created) * rng.random() if count else None
        m = Memory(id=mid, profile_name="bench", raw_input=text, processed_content=text,
                   summary=text[:50], category=rng.choice(CATEGORIES), confidence=rng.choice((1.0, 1.0, 0.9, 0.7, 0.5)),
                   created_at=created, last_accessed_at=last, access_count=count)
        batch.append(m.with_changes(staleness_score=staleness_of(m, now)))
    with bank.store.transaction() as c:
        cols = "id, profile, raw_input, processed_content, summary, category, source, confidence, created_us, " \
               "last_accessed_us, access_count, staleness, is_active, version, extra"
        c.executemany(f"INSERT INTO memories ({cols}) VALUES ({', '.join('?' * 15)})",
                      [memory_to_row(m) for m in batch])
    return bank


def queries(rng: random.Random, vocab: list[str], zipf: Zipf, count: int) -> list[str]:
    out = []
    for _ in range(count):
        k = rng.randint(1, 5)
        words = [vocab[zipf.sample(rng)] if rng.random() < 0.7 else rng.choice(vocab[:3000]) for _ in range(k)]
        out.append(" ".join(words))
    return out


class BruteForce:
    """The formula over every memory, terms tokenised once up front (the reference's inner loop)."""

    def __init__(self, memories: list[Memory]) -> None:
        self.memories = [m for m in memories if m.is_active]
        self.terms = [memory_terms(m.processed_content, m.summary) for m in self.memories]
        self.clusters = [clusters_of(t) for t in self.terms]
        self.df: dict[str, int] = {}
        for ts in self.terms:
            for t in ts:
                self.df[t] = self.df.get(t, 0) + 1

    def rank(self, query: str, limit: int, min_score: float, now_us: int) -> list[ScoredMemory]:
        mat = maturity(sum(m.access_count for m in self.memories))
        w = weights_for(mat)
        pq = prepare_query(query, lambda t: self.df.get(t, 0), len(self.memories))
        out = []
        for m, ts, cs in zip(self.memories, self.terms, self.clusters):
            created = to_us(m.created_at) or 0
            anchor = max(created, to_us(m.last_accessed_at) or created)
            use, cm = usage(m.access_count), confidence_mul(m.confidence)
            s, rec, top = score_parts(anchor, now_us, use, cm, ts, cs, pq, w)
            if s >= min_score:
                out.append((_rank_key(s, created, m.id), ScoredMemory(m, s, Breakdown(rec, use, top, cm, w, mat, s))))
        out.sort(key=lambda p: p[0])
        return [s for _, s in out[:limit]]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(p / 100 * len(values)) - 1))]


def fts_query(query: str) -> str:
    from memlocal.text import words

    terms = [w.replace('"', '""') for w in words(query)]
    return " OR ".join(f'"{t}"' for t in terms) if terms else '""'


def bench(n: int, n_queries: int, seed: int, tmp: Path) -> dict[str, object]:
    rng = random.Random(seed)
    vocab = vocabulary(rng)
    zipf = Zipf(len(vocab))
    path = tmp / f"bench-{n}.db"
    t0 = time.perf_counter()
    bank = build(path, n, rng, vocab, zipf)
    built_s = time.perf_counter() - t0
    qs = queries(rng, vocab, zipf, n_queries)
    ms = 1000.0
    try:
        t = time.perf_counter()
        bank.query_with_relevance("bench", qs[0])
        cold = (time.perf_counter() - t) * ms
        bank.query_with_relevance("bench", qs[0])

        qwr, mismatches = [], 0
        brute = BruteForce(bank.store.iter_profile("bench", active_only=True))
        brute_ms = []
        for q in qs:
            now = utcnow()
            t = time.perf_counter()
            got = bank.query_with_relevance("bench", q, now=now)
            qwr.append((time.perf_counter() - t) * ms)
            t = time.perf_counter()
            want = brute.rank(q, 8, 0.05, to_us(now) or 0)
            brute_ms.append((time.perf_counter() - t) * ms)
            if [(r.memory.id, r.score) for r in got] != [(r.memory.id, r.score) for r in want]:
                mismatches += 1

        fts = []
        for q in qs:
            t = time.perf_counter()
            bank.store.read(
                "SELECT m.id FROM memories_fts JOIN memories m ON m.rowid = memories_fts.rowid"
                " WHERE memories_fts MATCH ? AND m.profile = ? ORDER BY bm25(memories_fts) LIMIT 8",
                (fts_query(q), "bench"),
            )
            fts.append((time.perf_counter() - t) * ms)

        rec = []
        for q in qs:
            t = time.perf_counter()
            bank.recall("bench", q)
            rec.append((time.perf_counter() - t) * ms)

        # After all the bumps, check exactness once more against a fresh full scan.
        brute = BruteForce(bank.store.iter_profile("bench", active_only=True))
        for q in qs[:20]:
            now = utcnow()
            got = bank.query_with_relevance("bench", q, now=now)
            want = brute.rank(q, 8, 0.05, to_us(now) or 0)
            if [(r.memory.id, r.score) for r in got] != [(r.memory.id, r.score) for r in want]:
                mismatches += 1

        inj = []
        for q in qs:
            t = time.perf_counter()
            bank.inject("bench", ["@memory"], q)  # core + relevant tiers; the bump is fire-and-forget
            inj.append((time.perf_counter() - t) * ms)
    finally:
        bank.close()
    return {
        "memories": n,
        "queries": n_queries,
        "build_s": round(built_s, 2),
        "cold_first_query_ms": round(cold, 2),
        "query_with_relevance_ms": {"p50": round(statistics.median(qwr), 3), "p95": round(pct(qwr, 95), 3)},
        "recall_ms": {"p50": round(statistics.median(rec), 3), "p95": round(pct(rec, 95), 3)},
        "inject_ms": {"p50": round(statistics.median(inj), 3), "p95": round(pct(inj, 95), 3)},
        "fts5_bm25_top8_ms": {"p50": round(statistics.median(fts), 3), "p95": round(pct(fts, 95), 3)},
        "brute_force_pretokenized_ms": {"p50": round(statistics.median(brute_ms), 3),
                                        "p95": round(pct(brute_ms, 95), 3)},
        "mismatches_vs_brute_force": mismatches,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000", help="comma-separated profile sizes")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="memlocal-bench-") as tmp:
        for size in (int(s) for s in args.sizes.split(",") if s.strip()):
            results.append(bench(size, args.queries, args.seed, Path(tmp)))
            if not args.json:
                r = results[-1]
                print(f"{r['memories']:>7} memories  {r['queries']} queries  (built in {r['build_s']} s)")
                for key in ("query_with_relevance_ms", "recall_ms", "inject_ms", "fts5_bm25_top8_ms",
                            "brute_force_pretokenized_ms"):
                    v = r[key]
                    print(f"  {key:<30} p50 {v['p50']:>9.3f}  p95 {v['p95']:>9.3f}")  # type: ignore[index]
                print(f"  {'cold first query (index build)':<30} {r['cold_first_query_ms']:>9.1f} ms")
                print(f"  {'mismatches vs brute force':<30} {r['mismatches_vs_brute_force']}")
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if any(r["mismatches_vs_brute_force"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
