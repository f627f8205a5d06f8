#!/usr/bin/env python3
"""LoCoMo recall with and without the semantic signal (the ``memlocal[semantic]`` extra).

Same data, turns and questions as ``locomo_eval.py`` (every turn saved at one instant, so the
topic decides). ``memlocal`` is the lexical recall path; ``memlocal+semantic`` adds the
semantic signal as docs/relevance.md defines it: over the union of the lexical top 50 and the
embedding top 50 (``SemanticIndex.similar``), each memory's topic becomes
``topic + 0.25·max(0, cos − 0.1)``, ranked by that (ties: the lexical order, then id). Also
prints the per-query cost of the similarity query and the stored bytes per memory.

    python scripts/semantic_eval.py [PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo_eval import DEFAULT_DATA, DEPTH, IMPORTED_AT, Scores, load, memlocal_ranker  # noqa: E402

from memlocal import MemoryBank  # noqa: E402
from memlocal.config import Config  # noqa: E402
from memlocal.semantic import CANDIDATES, SemanticIndex, available, similarity_bonus  # noqa: E402


def evaluate(path: Path) -> dict[str, Any]:
    convs = load(path)
    plain, fused = Scores(), Scores()
    sim_ms: list[float] = []
    now = IMPORTED_AT.replace(day=2)
    with tempfile.TemporaryDirectory(prefix="memlocal-semantic-") as tmp:
        bank = MemoryBank(Path(tmp) / "s.db", config=Config.load(environ={}))
        try:
            sem = SemanticIndex(bank.store)
            for conv in convs:
                lexical = memlocal_ranker(bank, conv, dated=False)
                profile = re.sub(r"[^A-Za-z0-9._-]", "-", conv.name) or "conv"
                turn_of = {mid: dia for mid, dia in _turn_ids(bank, profile, conv)}
                sem.similar(profile, "warm up")  # embeds the conversation's turns once (not timed)
                for q in conv.questions:
                    plain.add(lexical(q.text), q.evidence)
                    results = bank.query_with_relevance(profile, q.text, limit=CANDIDATES, min_score=0.0, now=now)
                    topic = {r.memory.id: r.breakdown.topic for r in results}
                    order = {r.memory.id: i for i, r in enumerate(results)}
                    t = time.perf_counter()
                    cos = sem.similar(profile, q.text, CANDIDATES)
                    sim_ms.append((time.perf_counter() - t) * 1000)
                    pool = set(topic) | set(cos)
                    # A memory only the embeddings found has the topic the formula gives it.
                    if pool - set(topic):
                        topic = {**_topics(bank, profile, q.text), **topic}
                    ranked = sorted(pool, key=lambda m: (-(topic[m] + similarity_bonus(cos.get(m, 0.0))),
                                                         order.get(m, len(order)), m))
                    fused.add([turn_of[m] for m in ranked[:DEPTH]], q.evidence)
            stored = bank.store.read("SELECT avg(length(vector)) FROM memory_vectors")[0][0]
        finally:
            bank.close()
    return {"data": str(path), "memlocal": plain.to_dict(), "memlocal+semantic": fused.to_dict(),
            "similar_p50_ms": round(statistics.median(sim_ms), 3), "vector_bytes_per_memory": stored}


def _turn_ids(bank: MemoryBank, profile: str, conv: Any) -> list[tuple[str, str]]:
    from locomo_eval import _memory_id

    ids: list[tuple[str, str]] = []
    taken: set[str] = set()
    for t in conv.turns:  # the same ids memlocal_ranker gave the turns
        mid = _memory_id(conv.name, t.dia_id)
        while mid in taken:
            mid = "mem-" + f"{(int(mid[4:], 16) + 1) % (1 << 32):08x}"
        taken.add(mid)
        ids.append((mid, t.dia_id))
    return ids


def _topics(bank: MemoryBank, profile: str, query: str) -> dict[str, float]:
    """The formula's topic of every memory of ``profile`` for ``query`` (the full scan)."""
    from memlocal.scoring import rank_brute_force

    return {r.memory.id: r.breakdown.topic for r in rank_brute_force(
        bank.store.iter_profile(profile), query, limit=10**6, min_score=0.0, now=IMPORTED_AT.replace(day=2))}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not available():
        print("error: the semantic extra is not installed (pip install -e '.[semantic]')", file=sys.stderr)
        return 2
    result = evaluate(args.path.resolve())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for s in ("memlocal", "memlocal+semantic"):
            r = result[s]
            print(f"{s:<18} R@1 {r['recall@1']:.3f}  R@5 {r['recall@5']:.3f}  R@8 {r['recall@8']:.3f}  "
                  f"R@10 {r['recall@10']:.3f}  MRR@10 {r['mrr@10']:.3f}  ({r['questions']} questions)")
        print(f"similar() p50 {result['similar_p50_ms']} ms per query; {result['vector_bytes_per_memory']:.0f} "
              "bytes of vector per memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
