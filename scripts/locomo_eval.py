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
    python scripts/locomo_eval.py [PATH] --agent-bank [--semantic] [--mode evidence|spec] [--json [--items]]

``--living`` is the living-bank benchmark (:func:`evaluate_living`): dated turns, and three
phases through the public API: fresh, every question once through ``recall`` (which counts what
it returns as used), and again read-only on the used bank; with the padding rate.

``--agent-bank`` is the bank of facts an agent saves (:func:`evaluate_agent_bank`): LoCoMo's
observations (short LLM-written facts, each tied to the dialog turns it came from) as ``fact``
memories, and the ``--- CONTEXT FROM MEMORY ---`` block as the measure: does the block a run
receives hold what the question needs, fresh and after every question went once through
``build_context_block`` (which marks what the run saw as used); beside a block filled from
plain FTS5 ``bm25`` and BM25's top 5, in the same run.
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

from memlocal import MemoryBank, RecallQuery
from memlocal.config import Config
from memlocal.model import Memory, default_summary
from memlocal.store import WRITE_COLUMNS, write_row
from memlocal.relevance.text import stem, words

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
        results = bank.query_with_relevance(RecallQuery(profile, query, limit=DEPTH, min_score=0.0, now=now))
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


# --- the agent bank: observations as facts, the block as the measure ----------------------------


@dataclass
class Observation:
    text: str
    dia_ids: frozenset[str]
    when: datetime


@dataclass
class AgentTask:
    text: str
    gold: frozenset[int]  # indexes into the conversation's observations


def load_agent_bank(path: Path) -> list[tuple[str, list[Observation], list[AgentTask], datetime]]:
    """Per conversation: (name, observations in order, tasks, now). An observation is created at
    its session's date + 30 s per observation of that session (in order); now = one day after
    the last session. A task is a question of categories 1-4 whose evidence ids carry at least
    one observation; its gold memories are those observations."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, item in enumerate(data):
        conv = item["conversation"]
        known = {str(t["dia_id"]) for k, v in conv.items() if re.fullmatch(r"session_\d+", k) for t in v}
        obs: list[Observation] = []
        sessions = sorted((int(k.split("_")[1]), k) for k in item.get("observation", {}))
        last: datetime | None = None
        for n, key in sessions:
            when = _session_time(conv.get(f"session_{n}_date_time"))
            if when is None:
                continue
            j = 0
            for speaker_obs in item["observation"][key].values():
                for text, ids in speaker_obs:
                    raw = ids if isinstance(ids, list) else [ids]
                    obs.append(Observation(str(text), repair_evidence(raw, known), when + timedelta(seconds=30 * j)))
                    j += 1
            last = when if last is None or when > last else last
        by_dia: dict[str, list[int]] = {}
        for k, o in enumerate(obs):
            for d in o.dia_ids:
                by_dia.setdefault(d, []).append(k)
        tasks = []
        for qa in item["qa"]:
            if int(qa.get("category", 0)) not in (1, 2, 3, 4):
                continue
            evidence = repair_evidence(qa.get("evidence", []), known)
            gold = frozenset(k for d in evidence for k in by_dia.get(d, ()))
            if gold:
                tasks.append(AgentTask(str(qa["question"]), gold))
        name = str(item.get("sample_id", f"conv-{i}"))
        out.append((name, obs, tasks, (last or IMPORTED_AT) + timedelta(days=1)))
    return out


def _fill(lines: Sequence[str], budget: int) -> int:
    """How many of ``lines`` (best first) a block of ``budget`` characters holds, with the
    memory block's header, one heading and closing line, as the renderer counts them."""
    from memlocal.services.injection import BLOCK_END, CORE_HEADING, MEMORY_HEADER

    room = budget - (len(MEMORY_HEADER) + 1 + len(CORE_HEADING) + 1 + len(BLOCK_END))
    n = 0
    for line in lines:
        room -= len(line) + 1
        if room < 0:
            break
        n += 1
    return n


@dataclass
class BlockScores:
    n: int = 0
    hit: float = 0.0
    share: float = 0.0
    top5: float = 0.0
    lines: float = 0.0

    def add(self, block: set[int], top5: Sequence[int], gold: frozenset[int]) -> None:
        self.n += 1
        self.hit += 1.0 if block & gold else 0.0
        self.share += len(block & gold) / len(gold)
        self.top5 += 1.0 if set(top5) & gold else 0.0
        self.lines += len(block)

    def to_dict(self) -> dict[str, Any]:
        n = max(1, self.n)
        return {"block_hit": round(self.hit / n, 4), "gold_share": round(self.share / n, 4),
                "hit@5": round(self.top5 / n, 4), "lines": round(self.lines / n, 2), "tasks": self.n}


def evaluate_agent_bank(path: Path, *, semantic: bool = False, mode: str = "evidence",
                        limit: int | None = None, filler: str | None = None, items: bool = False) -> dict[str, Any]:
    """The bank of facts (see the module docstring): per system and phase, the block hit (some
    gold memory in the block), the share of gold memories in the block, and hit@5 (some gold
    memory in the top 5 of ``query_with_relevance``, limit 8; BM25's top 5). ``items``: also
    one record per task of the fresh phase (``"items"``: the question, its gold facts, whether
    one is in the block and in the top 5, the top 5 with their evidence): what a miss looks like."""
    convs = load_agent_bank(path)[:limit]
    overrides: dict[str, Any] = {"ranking.mode": mode, "semantic.enabled": semantic}
    if filler is not None:
        overrides["inject.filler"] = filler
    config = Config.load(environ={}, overrides=overrides)
    budget = int(config["inject.budget_chars"])
    res = {k: BlockScores() for k in ("fresh", "after", "bm25")}
    per_task: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memlocal-locomo-agent-") as tmp:
        with MemoryBank(Path(tmp) / "agent.db", config=config) as bank:
            for name, obs, tasks, now in convs:
                profile = re.sub(r"[^A-Za-z0-9._-]", "-", name) or "conv"
                index: dict[str, int] = {}
                rows = []
                for k, o in enumerate(obs):
                    mid = _memory_id(name, f"obs{k}")
                    index[mid] = k
                    m = Memory(id=mid, profile_name=profile, raw_input=o.text, processed_content=o.text,
                               summary=default_summary(o.text), category="fact", confidence=1.0, created_at=o.when)
                    rows.append(write_row(m))
                with bank.store.transaction() as c:
                    c.executemany(f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}) VALUES "
                                  f"({', '.join('?' for _ in WRITE_COLUMNS)})", rows)
                db = sqlite3.connect(":memory:")
                db.execute("CREATE VIRTUAL TABLE obs USING fts5(k UNINDEXED, text, tokenize='porter unicode61')")
                db.executemany("INSERT INTO obs (k, text) VALUES (?, ?)", [(k, o.text) for k, o in enumerate(obs)])

                def ours(phase: str) -> None:
                    for t in tasks:
                        block = bank.render_context_block(profile, t.text, now=now)
                        top = bank.query_with_relevance(RecallQuery(profile, t.text, limit=8, min_score=0.0, now=now))
                        res[phase].add({index[i] for i in block.ids}, [index[r.memory.id] for r in top[:5]], t.gold)
                        if items and phase == "fresh":
                            shown = {index[i] for i in block.ids}
                            per_task.append({
                                "conversation": name, "question": t.text,
                                "gold": [obs[k].text for k in sorted(t.gold)],
                                "in_block": bool(shown & t.gold),
                                "in_top5": any(index[r.memory.id] in t.gold for r in top[:5]),
                                "top5": [{"text": r.memory.processed_content, "gold": index[r.memory.id] in t.gold,
                                          "evidence": r.evidence.to_dict() if r.evidence else None} for r in top[:5]],
                            })

                ours("fresh")
                for t in tasks:
                    bank.build_context_block(profile, t.text, now=now)
                bank.drain()
                ours("after")
                for t in tasks:
                    terms = [w.replace('"', '""') for w in words(t.text)]
                    ranked: list[int] = []
                    if terms:
                        match = " OR ".join(f'"{w}"' for w in terms)
                        ranked = [r[0] for r in db.execute(
                            "SELECT k FROM obs WHERE obs MATCH ? ORDER BY bm25(obs) LIMIT 60", (match,))]
                    n = _fill([f"* [fact] {obs[k].text}" for k in ranked], budget)
                    res["bm25"].add(set(ranked[:n]), ranked[:5], t.gold)
                db.close()
    out = {"data": str(path), "conversations": len(convs), "semantic": semantic, "mode": mode,
           "filler": config["inject.filler"], "budget": budget,
           "memlocal": {"fresh": res["fresh"].to_dict(), "after_use": res["after"].to_dict()},
           "fts5_bm25": res["bm25"].to_dict()}
    if items:
        out["items"] = per_task
    return out


def format_agent_bank(result: dict[str, Any]) -> str:
    lines = [f"LoCoMo agent bank (observations as facts, {result['conversations']} conversations, "
             f"mode {result['mode']}, filler {result['filler']}, semantic {'on' if result['semantic'] else 'off'}, "
             f"budget {result['budget']}): {result['data']}", ""]
    head = f"{'system':<22}{'block hit':>10}{'gold share':>11}{'hit@5':>8}{'lines':>7}{'tasks':>7}"
    lines += [head, "-" * len(head)]
    rows = [("memlocal fresh", result["memlocal"]["fresh"]), ("memlocal after use", result["memlocal"]["after_use"]),
            ("FTS5 bm25", result["fts5_bm25"])]
    for label, v in rows:
        lines.append(f"{label:<22}{v['block_hit']:>10.3f}{v['gold_share']:>11.3f}{v['hit@5']:>8.3f}"
                     f"{v['lines']:>7.1f}{v['tasks']:>7}")
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
    ap.add_argument("--agent-bank", action="store_true",
                    help="the agent bank: observations as facts; the block's hit fresh and after use, beside FTS5 bm25")
    ap.add_argument("--semantic", action="store_true", help="with --agent-bank: semantic.enabled (memlocal[semantic])")
    ap.add_argument("--conversations", type=int, help="with --agent-bank: only the first N conversations")
    ap.add_argument("--items", action="store_true",
                    help="with --agent-bank --json: one record per task of the fresh phase (what a miss looks like)")
    ap.add_argument("--filler", choices=("labelled", "core", "omit"),
                    help="with --agent-bank: inject.filler (default: the setting's default)")
    args = ap.parse_args(argv)
    path = args.path.resolve()
    if not path.is_file():
        print(f"error: no LoCoMo file at {path}", file=sys.stderr)
        return 2
    if args.agent_bank:
        agent = evaluate_agent_bank(path, semantic=args.semantic, mode=(args.mode or ["evidence"])[0],
                                    limit=args.conversations, filler=args.filler, items=args.items)
        print(json.dumps(agent, indent=2) if args.json else format_agent_bank(agent))
        return 0
    if args.living:
        living = evaluate_living(path, args.mode or ("evidence", "spec"), args.ratio)
        print(json.dumps(living, indent=2) if args.json else format_living(living))
        return 0
    result = evaluate(path, dated=not args.no_dated)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
