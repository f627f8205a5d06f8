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
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchlib import FTS_TOP8_SQL, Corpus, build, fts_query, pct, same_ranking  # noqa: E402

from memlocal.model import utcnow  # noqa: E402
from memlocal.relevance.scoring import FullScan, RankQuery  # noqa: E402
from memlocal import RecallQuery


def bench(n: int, n_queries: int, seed: int, tmp: Path) -> dict[str, object]:
    corpus = Corpus(seed)
    path = tmp / f"bench-{n}.db"
    t0 = time.perf_counter()
    bank = build(path, n, corpus)
    built_s = time.perf_counter() - t0
    qs = corpus.queries(n_queries)
    ms = 1000.0
    try:
        t = time.perf_counter()
        bank.query_with_relevance(RecallQuery("bench", qs[0]))
        cold = (time.perf_counter() - t) * ms
        bank.query_with_relevance(RecallQuery("bench", qs[0]))

        qwr, mismatches = [], 0
        brute = FullScan(bank.store.iter_profile("bench", active_only=True))
        brute_ms = []
        for q in qs:
            now = utcnow()
            t = time.perf_counter()
            got = bank.query_with_relevance(RecallQuery("bench", q, now=now))
            qwr.append((time.perf_counter() - t) * ms)
            t = time.perf_counter()
            want = brute.rank(RankQuery(q, 8, 0.05, now=now))
            brute_ms.append((time.perf_counter() - t) * ms)
            if not same_ranking(got, want):
                mismatches += 1

        fts = []
        for q in qs:
            t = time.perf_counter()
            bank.store.read(FTS_TOP8_SQL, (fts_query(q), "bench"))
            fts.append((time.perf_counter() - t) * ms)

        rec = []
        for q in qs:
            t = time.perf_counter()
            bank.recall(RecallQuery("bench", q))
            rec.append((time.perf_counter() - t) * ms)

        # After all the bumps, check exactness once more against a fresh full scan.
        brute = FullScan(bank.store.iter_profile("bench", active_only=True))
        for q in qs[:20]:
            now = utcnow()
            got = bank.query_with_relevance(RecallQuery("bench", q, now=now))
            want = brute.rank(RankQuery(q, 8, 0.05, now=now))
            if not same_ranking(got, want):
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
