#!/usr/bin/env python3
"""Retrieval quality on LoCoMo: memlocal's ranking against BM25, in the same run.

Every dialog turn of a conversation is one memory (``speaker: text``, plus ``[image: caption]``
when the turn shared an image), every question of categories 1-4 with evidence one query
(category 5, the adversarial questions, has no answer to retrieve). For each question the
evidence turns are looked up in each system's top 10:

- recall@k: the fraction of the question's evidence turns in the top k, averaged over questions;
- MRR@10: 1 / rank of the first evidence turn in the top 10 (0 when none is), averaged.

Systems, all over the same turns and questions:

- ``memlocal``: the real recall path (``MemoryBank.query_with_relevance``, the spec's formula
  intact: recency, usage, topic, confidence) with every turn saved at the same moment, as a bulk
  import would, so recency and usage are equal for all turns and the topic signal decides;
- ``bm25``: BM25 Okapi (the ``rank-bm25`` package, k1 = 1.5, b = 0.75) over the same tokens
  (memlocal's tokenizer: Snowball stems, stopwords removed, repeated words kept for term frequency);
- ``fts5``: SQLite FTS5's ``bm25()`` with the ``porter unicode61`` tokenizer, the query's words OR-ed
  (the full-text index memlocal's store already keeps);
- ``memlocal-dated`` (overall only): the same recall path with each turn created at its session's
  date and "now" the day after the last session: what the 30-day recency half-life does to a
  conversation that spans months.

The data file is LoCoMo's (see its README for the source and licence). A few evidence strings are
malformed upstream: ``D8:6; D9:17`` is split, ``D:11:26`` repaired, zero-padded turns read as
numbers, and ids of turns that do not exist dropped.

    python scripts/locomo_eval.py [PATH] [--json]      # PATH: ../shared/data/locomo/locomo-dev.json
    python scripts/locomo_eval.py [PATH] --living [--mode evidence|spec] [--ratio R] [--json]

``--living`` is the living-bank benchmark (:func:`evaluate_living`): dated turns, and three
phases through the public API: fresh, every question once through ``recall`` (which counts what
it returns as used), and again read-only on the used bank; with the padding rate.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from memlocal import MemoryBank
from memlocal.config import Config
from memlocal.model import Memory, default_summary
from memlocal.store import WRITE_COLUMNS, write_row
from memlocal.text import stem, words

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "locomo" / "locomo-dev.json"
KS = (1, 5, 8, 10)
DEPTH = max(KS)
IMPORTED_AT = datetime(2025, 1, 1, tzinfo=timezone.utc)  # every turn "saved" at this moment
_EVIDENCE_RE = re.compile(r"D:?(\d+):0*(\d+)")


@dataclass
class Turn:
    dia_id: str
    text: str
    when: datetime | None


@dataclass
class Question:
    text: str
    evidence: frozenset[str]
    category: int


@dataclass
class Conversation:
    name: str
    turns: list[Turn]
    questions: list[Question]


def _session_time(text: str | None) -> datetime | None:
    """LoCoMo's ``1:56 pm on 8 May, 2023`` (no zone: read as UTC)."""
    if not text:
        return None
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def repair_evidence(raw: Sequence[str], known: set[str]) -> frozenset[str]:
    """Split, repair and filter one question's evidence ids (see the module docstring)."""
    out = set()
    for item in raw:
        for piece in re.split(r"[;,\s]+", str(item)):
            m = _EVIDENCE_RE.fullmatch(piece.strip())
            if m:
                dia = f"D{int(m.group(1))}:{int(m.group(2))}"
                if dia in known:
                    out.add(dia)
    return frozenset(out)


def load(path: Path) -> list[Conversation]:
    data = json.loads(path.read_text(encoding="utf-8"))
    convs: list[Conversation] = []
    for item in data:
        conv = item["conversation"]
        turns: list[Turn] = []
        sessions = sorted((int(k.split("_")[1]), k) for k in conv if re.fullmatch(r"session_\d+", k))
        for _, key in sessions:
            when = _session_time(conv.get(f"{key}_date_time"))
            for t in conv[key]:
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [image: {t['blip_caption']}]"
                turns.append(Turn(str(t["dia_id"]), text, when))
        known = {t.dia_id for t in turns}
        questions = []
        for qa in item["qa"]:
            category = int(qa.get("category", 0))
            if category == 5:
                continue
            evidence = repair_evidence(qa.get("evidence", []), known)
            if evidence:
                questions.append(Question(str(qa["question"]), evidence, category))
        convs.append(Conversation(str(item.get("sample_id", f"conv-{len(convs)}")), turns, questions))
    return convs


# --- metrics ---------------------------------------------------------------------------------


@dataclass
class Scores:
    """Running sums of recall@k and reciprocal ranks over questions."""

    n: int = 0
    recall: dict[int, float] = field(default_factory=lambda: {k: 0.0 for k in KS})
    rr: float = 0.0

    def add(self, ranked: Sequence[str], evidence: frozenset[str]) -> None:
        self.n += 1
        for k in KS:
            self.recall[k] += len(evidence.intersection(ranked[:k])) / len(evidence)
        for i, dia in enumerate(ranked[:DEPTH]):
            if dia in evidence:
                self.rr += 1.0 / (i + 1)
                break

    def merge(self, other: "Scores") -> None:
        self.n += other.n
        for k in KS:
            self.recall[k] += other.recall[k]
        self.rr += other.rr

    def to_dict(self) -> dict[str, Any]:
        n = max(1, self.n)
        out: dict[str, Any] = {f"recall@{k}": round(self.recall[k] / n, 4) for k in KS}
        out["mrr@10"] = round(self.rr / n, 4)
        out["questions"] = self.n
        return out


# --- the systems -----------------------------------------------------------------------------

Ranker = Callable[[str], list[str]]  # query -> dia ids, best first, at most DEPTH


def _memory_id(conv: str, dia_id: str) -> str:
    """A stable id per turn, so every run breaks score ties the same way."""
    return "mem-" + hashlib.sha256(f"{conv}/{dia_id}".encode()).hexdigest()[:8]


def load_turns(bank: MemoryBank, conv: Conversation, *, dated: bool) -> tuple[str, dict[str, str], datetime]:
    """Load the turns as memories of one profile: (profile, memory id -> dia id, the "now" to
    rank at: the day after the last session when ``dated``, else the day after the import)."""
    profile = re.sub(r"[^A-Za-z0-9._-]", "-", conv.name) or "conv"
    by_id: dict[str, str] = {}
    rows = []
    last = max((t.when for t in conv.turns if t.when), default=IMPORTED_AT)
    for t in conv.turns:
        mid = _memory_id(conv.name, t.dia_id)
        while mid in by_id:  # a hash collision within one conversation: step to a free id
            mid = "mem-" + f"{(int(mid[4:], 16) + 1) % (1 << 32):08x}"
        by_id[mid] = t.dia_id
        created = (t.when or last) if dated else IMPORTED_AT
        m = Memory(id=mid, profile_name=profile, raw_input=t.text, processed_content=t.text,
                   summary=default_summary(t.text), category="general", confidence=1.0, created_at=created)
        rows.append(write_row(m))
    with bank.store.transaction() as c:
        c.executemany(f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}) VALUES "
                      f"({', '.join('?' for _ in WRITE_COLUMNS)})", rows)
    return profile, by_id, (last if dated else IMPORTED_AT) + timedelta(days=1)


def memlocal_ranker(bank: MemoryBank, conv: Conversation, *, dated: bool) -> Ranker:
    """Load the turns as memories of one profile and rank through ``query_with_relevance``."""
    profile, by_id, now = load_turns(bank, conv, dated=dated)

    def rank(query: str) -> list[str]:
        results = bank.query_with_relevance(profile, query, limit=DEPTH, min_score=0.0, now=now)
        return [by_id[r.memory.id] for r in results]

    return rank


def bm25_tokens(text: str) -> list[str]:
    """memlocal's terms with repeats kept (BM25 counts term frequency)."""
    out = []
    for w in words(text):
        t = stem(w)
        if t:
            out.append(t)
    return out


def bm25_ranker(conv: Conversation) -> Ranker | None:
    """BM25 Okapi from ``rank-bm25``; ``None`` when the package is not installed (the [bench] extra)."""
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        return None
    docs = [bm25_tokens(t.text) for t in conv.turns]
    model = BM25Okapi(docs)
    ids = [t.dia_id for t in conv.turns]
    # Ties are broken as memlocal breaks them here (equal createdAt, then the smaller memory id),
    # not by turn order: on LoCoMo, favouring earlier turns on ties alone is worth +0.015 recall@8.
    tiebreak = [_memory_id(conv.name, d) for d in ids]

    def rank(query: str) -> list[str]:
        q = bm25_tokens(query)
        if not q:
            return []
        scores = model.get_scores(q)
        order = sorted(range(len(ids)), key=lambda i: (-scores[i], tiebreak[i]))
        return [ids[i] for i in order[:DEPTH] if scores[i] > 0]

    return rank


def fts5_ranker(conv: Conversation) -> Ranker:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE turns USING fts5(dia_id UNINDEXED, text, tokenize='porter unicode61')")
    db.executemany("INSERT INTO turns (dia_id, text) VALUES (?, ?)", [(t.dia_id, t.text) for t in conv.turns])

    def rank(query: str) -> list[str]:
        terms = [w.replace('"', '""') for w in words(query)]
        if not terms:
            return []
        match = " OR ".join(f'"{t}"' for t in terms)
        rows = db.execute("SELECT dia_id FROM turns WHERE turns MATCH ? ORDER BY bm25(turns) LIMIT ?",
                          (match, DEPTH)).fetchall()
        return [r[0] for r in rows]

    return rank


# --- the run ---------------------------------------------------------------------------------


def evaluate(path: Path, *, dated: bool = True) -> dict[str, Any]:
    """Every system on every conversation: per conversation and overall."""
    convs = load(path)
    systems = ["memlocal", "bm25", "fts5"] + (["memlocal-dated"] if dated else [])
    overall = {s: Scores() for s in systems}
    per_conv: list[dict[str, Any]] = []
    missing: list[str] = []
    with tempfile.TemporaryDirectory(prefix="memlocal-locomo-") as tmp:
        bank = MemoryBank(Path(tmp) / "plain.db", config=Config.load(environ={}))
        dated_bank = MemoryBank(Path(tmp) / "dated.db", config=Config.load(environ={}))
        try:
            for conv in convs:
                rankers: dict[str, Ranker | None] = {
                    "memlocal": memlocal_ranker(bank, conv, dated=False),
                    "bm25": bm25_ranker(conv),
                    "fts5": fts5_ranker(conv),
                }
                if dated:
                    rankers["memlocal-dated"] = memlocal_ranker(dated_bank, conv, dated=True)
                scores = {s: Scores() for s in systems}
                for q in conv.questions:
                    for s, ranker in rankers.items():
                        if ranker is not None:
                            scores[s].add(ranker(q.text), q.evidence)
                row: dict[str, Any] = {"conversation": conv.name, "turns": len(conv.turns),
                                       "questions": len(conv.questions)}
                for s in systems:
                    if rankers[s] is None:
                        if s not in missing:
                            missing.append(s)
                        row[s] = None
                    else:
                        row[s] = scores[s].to_dict()
                        overall[s].merge(scores[s])
                per_conv.append(row)
        finally:
            bank.close()
            dated_bank.close()
    return {
        "data": str(path),
        "conversations": per_conv,
        "overall": {s: (None if s in missing else overall[s].to_dict()) for s in systems},
        "missing": {s: "rank-bm25 is not installed (pip install -e '.[bench]')" for s in missing},
    }


# --- the living bank -------------------------------------------------------------------------

PHASES = ("fresh", "use", "after")


def evaluate_living(path: Path, modes: Sequence[str] = ("evidence", "spec"), ratio: float | None = None) -> dict[str, Any]:
    """A bank that has lived: each turn created at its session's date, "now" the day after the
    last session, through the public API. Phases, in order, per conversation:

    - ``fresh``: every question through ``query_with_relevance`` (read-only);
    - ``use``: every question once through ``recall``, which marks what it returns accessed
      (accessCount + 1, lastAccessedAt = now), so later questions see the earlier ones' use;
    - ``after``: every question again, read-only, on the used bank.

    ``padding``: the share of returned results without query evidence (topic 0).
    """
    convs = load(path)
    out: dict[str, Any] = {"data": str(path), "modes": {}, "evidence_ratio": ratio}
    for mode in modes:
        phases = {p: Scores() for p in PHASES}
        returned = {p: 0 for p in PHASES}
        padded = {p: 0 for p in PHASES}
        with tempfile.TemporaryDirectory(prefix="memlocal-locomo-living-") as tmp:
            overrides: dict[str, Any] = {"ranking.mode": mode}
            if ratio is not None:
                overrides["ranking.evidence_ratio"] = ratio
            config = Config.load(environ={}, overrides=overrides)
            with MemoryBank(Path(tmp) / "living.db", config=config) as bank:
                for conv in convs:
                    profile, by_id, now = load_turns(bank, conv, dated=True)
                    for phase in PHASES:
                        ask = bank.recall if phase == "use" else bank.query_with_relevance
                        for q in conv.questions:
                            results = ask(profile, q.text, limit=DEPTH, min_score=0.0, now=now)
                            returned[phase] += len(results)
                            padded[phase] += sum(1 for r in results if r.breakdown.topic <= 0.0)
                            phases[phase].add([by_id[r.memory.id] for r in results], q.evidence)
        out["modes"][mode] = {
            p: {**phases[p].to_dict(), "padding": round(padded[p] / max(1, returned[p]), 4),
                "returned_per_question": round(returned[p] / max(1, phases[p].n), 2)}
            for p in PHASES
        }
    return out


def format_living(result: dict[str, Any]) -> str:
    lines = [f"LoCoMo living bank (dated turns, now = the day after the last session): {result['data']}", ""]
    head = f"{'mode':<10}{'phase':<8}" + "".join(f"{f'R@{k}':>8}" for k in KS) + f"{'MRR@10':>8}{'padding':>9}{'per q':>7}"
    lines += [head, "-" * len(head)]
    for mode, phases in result["modes"].items():
        for i, (phase, v) in enumerate(phases.items()):
            lines.append(f"{mode if i == 0 else '':<10}{phase:<8}" + "".join(f"{v[f'recall@{k}']:>8.3f}" for k in KS)
                         + f"{v['mrr@10']:>8.3f}{v['padding']:>9.3f}{v['returned_per_question']:>7.2f}")
    return "\n".join(lines)


def format_table(result: dict[str, Any]) -> str:
    systems = [s for s in result["overall"]]
    lines = [f"LoCoMo retrieval: {result['data']}", ""]
    head = f"{'conversation':<14}{'turns':>6}{'qs':>5}  {'system':<15}" + "".join(
        f"{f'R@{k}':>8}" for k in KS) + f"{'MRR@10':>8}"
    lines += [head, "-" * len(head)]

    def emit(name: str, turns: str, qs: str, row: dict[str, Any]) -> None:
        first = True
        for s in systems:
            if s not in row:
                continue
            v = row[s]
            label = f"{name:<14}{turns:>6}{qs:>5}" if first else " " * 25
            first = False
            if v is None:
                lines.append(f"{label}  {s:<15}  (not run: {result['missing'].get(s, 'missing')})")
            else:
                lines.append(f"{label}  {s:<15}" + "".join(f"{v[f'recall@{k}']:>8.3f}" for k in KS)
                             + f"{v['mrr@10']:>8.3f}")

    for row in result["conversations"]:
        emit(row["conversation"], str(row["turns"]), str(row["questions"]),
             {s: row[s] for s in systems if s != "memlocal-dated"})
    total_turns = sum(r["turns"] for r in result["conversations"])
    total_qs = sum(r["questions"] for r in result["conversations"])
    lines.append("-" * len(head))
    emit("overall", str(total_turns), str(total_qs), result["overall"])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT_DATA,
                    help="LoCoMo JSON (default: ../shared/data/locomo/locomo-dev.json beside the repo)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--no-dated", action="store_true", help="skip the memlocal-dated row")
    ap.add_argument("--living", action="store_true",
                    help="the living-bank benchmark: dated turns; phases fresh, use (recall), after")
    ap.add_argument("--mode", action="append", choices=("evidence", "spec"),
                    help="with --living: the ranking modes to run (default: both)")
    ap.add_argument("--ratio", type=float, help="with --living: ranking.evidence_ratio (default: the setting's default)")
    args = ap.parse_args(argv)
    path = args.path.resolve()
    if not path.is_file():
        print(f"error: no LoCoMo file at {path}", file=sys.stderr)
        return 2
    if args.living:
        living = evaluate_living(path, args.mode or ("evidence", "spec"), args.ratio)
        print(json.dumps(living, indent=2) if args.json else format_living(living))
        return 0
    result = evaluate(path, dated=not args.no_dated)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
