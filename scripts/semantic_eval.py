#!/usr/bin/env python3
"""LoCoMo recall with and without the semantic signal (the ``memlocal[semantic]`` extra), through
the real recall path.

Same data, turns and questions as ``locomo_eval.py``. Two banks get the same turns: one with
``semantic.enabled`` off, one with it on; every question goes through
``MemoryBank.query_with_relevance`` (evidence mode, limit 10, min_score 0), so what is measured
is what ``recall`` returns: the evidence gate over the union of the lexical candidates and the
embedding top 50, each memory's topic raised by ``1.0·max(0, cos − 0.1)`` (docs/relevance.md).
``--dated`` gives each turn its session's date (the living bank's "fresh" phase); by default
every turn is saved at one instant, so the topic decides. Also prints the per-query cost of the
semantic query (``similar``), the stored bytes per memory, and the share of questions answered
with at least one memory admitted on similarity alone.

    python scripts/semantic_eval.py [PATH] [--dated] [--evidence-min COS] [--json]
    python scripts/semantic_eval.py --paraphrases [--json]

``--paraphrases``: the queries that share no word with the memory they need
(``tests/paraphrases.py``, over the tests' two developer profiles): the share whose memory is in
recall's top 3 (``query_with_relevance``, limit 3), with the extra off and on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo_eval import DEFAULT_DATA, DEPTH, Scores, load, load_turns  # noqa: E402

from memlocal import MemoryBank, RecallQuery
from memlocal.relevance import scoring  # noqa: E402
from memlocal.config import Config  # noqa: E402
from memlocal.recall.semantic import available  # noqa: E402


def evaluate(path: Path, *, dated: bool = False) -> dict[str, Any]:
    convs = load(path)
    scores = {"memlocal": Scores(), "memlocal+semantic": Scores()}
    total_ms: dict[str, list[float]] = {"memlocal": [], "memlocal+semantic": []}
    sim_ms: list[float] = []
    semantic_only = 0
    with tempfile.TemporaryDirectory(prefix="memlocal-semantic-") as tmp:
        banks = {name: MemoryBank(Path(tmp) / f"{i}.db", config=Config.load(
                     environ={}, overrides={"semantic.enabled": name.endswith("semantic")}))
                 for i, name in enumerate(scores)}
        try:
            sem = banks["memlocal+semantic"].semantic
            assert sem is not None
            for conv in convs:
                for name, bank in banks.items():
                    profile, by_id, now = load_turns(bank, conv, dated=dated)
                    for _ in range(2):  # embeds the turns; the first query is cold, the second builds the index
                        bank.query_with_relevance(RecallQuery(profile, "warm up", now=now))
                    for q in conv.questions:
                        t = time.perf_counter()
                        results = bank.query_with_relevance(RecallQuery(profile, q.text, limit=DEPTH, min_score=0.0, now=now))
                        total_ms[name].append((time.perf_counter() - t) * 1000)
                        scores[name].add([by_id[r.memory.id] for r in results], q.evidence)
                        if name.endswith("semantic"):
                            t = time.perf_counter()
                            sem.similar(profile, q.text)
                            sim_ms.append((time.perf_counter() - t) * 1000)
                            semantic_only += any(r.evidence is not None and not r.evidence.terms
                                                 and not r.evidence.clusters for r in results)
            stored = banks["memlocal+semantic"].store.read("SELECT avg(length(vector)) FROM memory_vectors")[0][0]
        finally:
            for bank in banks.values():
                bank.close()
    n = scores["memlocal"].n
    return {"data": str(path), "dated": dated, "similarity_evidence_min": scoring.SIMILARITY_EVIDENCE,
            **{name: s.to_dict() for name, s in scores.items()},
            "query_p50_ms": {name: round(statistics.median(v), 3) for name, v in total_ms.items()},
            "similar_p50_ms": round(statistics.median(sim_ms), 3), "vector_bytes_per_memory": stored,
            "questions_with_a_similarity_only_result": round(semantic_only / max(1, n), 4)}


def evaluate_paraphrases() -> dict[str, Any]:
    """The paraphrase set's top-3 share with the extra off and on (see the module docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from dev_profile import agent_profile, dev_profile
    from memory_factory import NOW
    from paraphrases import PARAPHRASES

    out: dict[str, Any] = {"queries": len(PARAPHRASES)}
    with tempfile.TemporaryDirectory(prefix="memlocal-paraphrases-") as tmp:
        for on in (False, True):
            with MemoryBank(Path(tmp) / f"{on}.db", config=Config.load(environ={}, overrides={"semantic.enabled": on})) as bank:
                keys = {m.id: ("agent", k) for k, m in agent_profile(bank, "agent").items()}
                keys |= {m.id: ("dev", k) for k, m in dev_profile(bank, "dev").items()}
                missed = []
                for profile, key, query in PARAPHRASES:
                    top = bank.query_with_relevance(RecallQuery(profile, query, limit=3, min_score=0.0, now=NOW))
                    if (profile, key) not in [keys[r.memory.id] for r in top]:
                        missed.append(query)
            out["semantic" if on else "lexical"] = {"top3": round(1 - len(missed) / len(PARAPHRASES), 4),
                                                    "missed": missed}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--dated", action="store_true", help="each turn created at its session's date")
    ap.add_argument("--evidence-min", type=float,
                    help="experiment: the cosine from which similarity alone is evidence (default: the shipped value)")
    ap.add_argument("--paraphrases", action="store_true", help="the paraphrase set (tests/paraphrases.py) instead")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not available():
        print("error: the semantic extra is not installed (pip install -e '.[semantic]')", file=sys.stderr)
        return 2
    if args.evidence_min is not None:
        scoring.SIMILARITY_EVIDENCE = args.evidence_min
    if args.paraphrases:
        para = evaluate_paraphrases()
        if args.json:
            print(json.dumps(para, indent=2))
        else:
            for name in ("lexical", "semantic"):
                print(f"{name:<9} top 3 {para[name]['top3']:.3f} of {para['queries']} queries sharing no word with their memory")
            print("missed with the extra: " + "; ".join(para["semantic"]["missed"]))
        return 0
    result = evaluate(args.path.resolve(), dated=args.dated)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for s in ("memlocal", "memlocal+semantic"):
            r = result[s]
            print(f"{s:<18} R@1 {r['recall@1']:.3f}  R@5 {r['recall@5']:.3f}  R@8 {r['recall@8']:.3f}  "
                  f"R@10 {r['recall@10']:.3f}  MRR@10 {r['mrr@10']:.3f}  ({r['questions']} questions, "
                  f"query p50 {result['query_p50_ms'][s]} ms)")
        print(f"similar() p50 {result['similar_p50_ms']} ms per query; {result['vector_bytes_per_memory']:.0f} "
              f"bytes of vector per memory; similarity alone admitted a result for "
              f"{result['questions_with_a_similarity_only_result']:.1%} of the questions "
              f"(from cos {result['similarity_evidence_min']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
