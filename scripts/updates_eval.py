#!/usr/bin/env python3
"""Knowledge updates in an agent's bank: does the block a run reads hold the current value, and
can the reader tell it from the stale one? Beside a BM25 block of the same budget, in the same run.

The data (``../shared/data/updates/dev.json``, its README beside it): ``updates`` are ``[old fact,
new fact, task, a string only the new fact holds, a string only the old fact holds]``;
``distinct`` are ``[fact, a look-alike about a different subject, task]``; ``distractors`` other
facts of the profile. The bank is built as its README says: the old facts, the first fact of each
distinct pair and the distractors as ``fact`` memories dated weeks to months ago (one every four
days, oldest first, from 200 days before "now"), then each new fact and each look-alike saved
"now" through ``MemoryBank.save`` without an LLM (category ``fact``), then one block per task.

Measures, per system:

- ``current``: the new fact's string is in the block;
- ``stale``: the old fact's string is in the block (never counted for ``__never__``);
- ``unambiguous``: current, and the stale string absent or both lines dated (``(saved ...)``), so
  that they order;
- ``stale line`` and ``unambiguous (lines)``: the same, not counting the lines of the look-alikes
  (the distinct pairs' second facts, about other subjects by the data's own definition) that
  happen to hold the old string ("The reading group is on Thursdays at 14:00" beside the lab
  meeting's update);
- ``look-alikes kept`` (memlocal): each look-alike active, and its pair's first fact not retired by
  it (an update of the same profile may retire that first fact: "The NeurIPS deadline is 15 May"
  is updated by the extension, never by "The ICML deadline is 15 January");
- ``auto superseded``: the saves that retired a memory on their own (``SaveResult.superseded``),
  and how many of those retired the update's own old fact.

``clear`` is ``unambiguous (lines)`` under its short name. Per item: ``items`` (each update task:
current, stale, stale line, clear, and the block lines holding the new or the stale string),
``lookalikes`` (each pair: kept, the first fact still active) and ``retired`` (each automatic
retirement with its ``memlocal history`` chain, oldest first); the text output lists them too.

Systems: ``memlocal`` (defaults: ``dedup.supersede`` on, evidence mode), ``memlocal no-supersede``
(every save with ``auto_supersede=False``: only the block's dating helps), and ``FTS5 bm25``: the
task's words OR-ed over every fact saved (old and new, as a plain store keeps them), lines filled
best first into the same budget (undated).

    python scripts/updates_eval.py [PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Sequence

from memlocal import MemoryBank, SaveRequest
from memlocal.config import Config
from memlocal.model import Memory, default_summary, new_id
from memlocal.store import WRITE_COLUMNS, write_row
from memlocal.relevance.text import words

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "updates" / "dev.json"
NOW = datetime.now(timezone.utc).replace(microsecond=0)  # the saves stamp the real clock
PROFILE = "agent"
NEVER = "__never__"


@dataclass
class Tally:
    """The block measures of the update tasks. ``lookalikes``: the distinct pairs' second facts,
    about other subjects by the data's own definition; a line of one of them that holds the old
    string (``The reading group is on Thursdays at 14:00``) is stale by the string (the README's
    literal measure, ``stale``/``unambiguous``) but not a stale line (``stale_line``/``clear``)."""

    lookalikes: tuple[str, ...] = ()
    items: list[dict[str, Any]] = field(default_factory=list)  # per task: what the block held
    n: int = 0
    current: int = 0
    stale: int = 0
    unambiguous: int = 0
    stale_line: int = 0
    clear: int = 0

    def add(self, block: str, new: str, old: str) -> None:
        lines = block.splitlines()
        cur = [ln for ln in lines if new in ln]
        old_lines = [] if old == NEVER else [ln for ln in lines if old in ln and new not in ln]
        stale_lines = [ln for ln in old_lines if not any(ln.endswith(" " + t) for t in self.lookalikes)]
        self.n += 1
        self.current += bool(cur)
        self.stale += bool(old_lines)
        self.stale_line += bool(stale_lines)
        unambiguous = bool(cur) and (not old_lines or all("(saved " in ln for ln in (*cur, *old_lines)))
        clear = bool(cur) and (not stale_lines or all("(saved " in ln for ln in (*cur, *stale_lines)))
        self.unambiguous += unambiguous
        self.clear += clear
        self.items.append({"current": bool(cur), "stale": bool(old_lines), "stale_line": bool(stale_lines),
                           "clear": clear, "lines": [*cur, *stale_lines]})

    def to_dict(self) -> dict[str, Any]:
        n = max(1, self.n)
        return {"current": round(self.current / n, 3), "stale": round(self.stale / n, 3),
                "unambiguous": round(self.unambiguous / n, 3), "stale_line": round(self.stale_line / n, 3),
                "unambiguous_lines": round(self.clear / n, 3), "clear": round(self.clear / n, 3), "tasks": self.n}


def _old_rows(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for text in [u[0] for u in data["updates"]] + [d[0] for d in data["distinct"]] + list(data["distractors"]):
        if text not in out:
            out.append(text)
    return out


def _memlocal(data: dict[str, Any], tmp: Path, *, auto: bool) -> dict[str, Any]:
    config = Config.load(environ={}, overrides={})
    tally = Tally(tuple(d[1] for d in data["distinct"]))
    kept = 0
    retired: list[tuple[str, str | None]] = []  # (the save's text, the text it retired)
    retired_ids: list[str] = []  # the saves that retired one
    with MemoryBank(tmp / f"updates-{auto}.db", config=config) as bank:
        old = _old_rows(data)
        start = NOW - timedelta(days=200)
        rows, by_text = [], {}
        for k, text in enumerate(old):
            m = Memory(id=new_id(), profile_name=PROFILE, raw_input=text, processed_content=text,
                       summary=default_summary(text), category="fact", confidence=1.0,
                       created_at=start + timedelta(days=4 * k))
            rows.append(write_row(m))
            by_text[text] = m.id
        with bank.store.transaction() as c:
            c.executemany(f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}) VALUES "
                          f"({', '.join('?' for _ in WRITE_COLUMNS)})", rows)
        text_of = {v: k for k, v in by_text.items()}
        lookalike_ids = []
        for i, text in enumerate([u[1] for u in data["updates"]] + [d[1] for d in data["distinct"]]):
            # saved "now", a minute apart (the bank's clock: the save stamps its own createdAt)
            result = bank.save(SaveRequest(PROFILE, content=text, category="fact", use_llm=False, auto_supersede=auto))
            text_of[result.memory.id] = text
            if i >= len(data["updates"]):
                lookalike_ids.append(result.memory.id)
            if result.superseded:
                retired.append((text, text_of.get(result.superseded)))
                retired_ids.append(result.memory.id)
        pairs = []
        for (first, look, _task), look_id in zip(data["distinct"], lookalike_ids):
            first_m = bank.get(PROFILE, by_text[first])
            look_m = bank.get(PROFILE, look_id)
            ok = look_m.is_active and first_m.superseded_by != look_id and look_m.supersedes != first_m.id
            kept += ok
            pairs.append({"fact": first, "lookalike": look, "kept": bool(ok), "fact_active": first_m.is_active})
        for _old, _new, task, new_s, old_s in data["updates"]:
            tally.add(bank.render_context_block(PROFILE, task, now=NOW + timedelta(minutes=5)).text, new_s, old_s)
        # What `memlocal history` shows for each automatic retirement: the chain, oldest first.
        histories = [[f"{'active' if m.is_active else 'inactive'}: {m.processed_content}"
                      for m in bank.history(PROFILE, mid)] for mid in retired_ids]
    own = {(u[1], u[0]) for u in data["updates"]}
    items = [{"task": u[2], "new": u[1], "old": u[0], **item} for u, item in zip(data["updates"], tally.items)]
    return {**tally.to_dict(), "lookalikes_kept": round(kept / max(1, len(data["distinct"])), 3),
            "auto_superseded": len(retired), "auto_superseded_own_old": sum(p in own for p in retired),
            "retired": [{"by": a, "old": b, "history": h} for (a, b), h in zip(retired, histories)],
            "items": items, "lookalikes": pairs}


def _bm25(data: dict[str, Any], budget: int) -> dict[str, Any]:
    from locomo_eval import _fill  # the same filling as the agent bank's BM25 block

    facts = _old_rows(data) + [u[1] for u in data["updates"]] + [d[1] for d in data["distinct"]]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(k UNINDEXED, text, tokenize='porter unicode61')")
    db.executemany("INSERT INTO f (k, text) VALUES (?, ?)", list(enumerate(facts)))
    tally = Tally(tuple(d[1] for d in data["distinct"]))
    for _old, _new, task, new_s, old_s in data["updates"]:
        terms = [w.replace('"', '""') for w in words(task)]
        ranked = [r[0] for r in db.execute(
            "SELECT k FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT 60", (" OR ".join(f'"{w}"' for w in terms),))]
        lines = [f"* [fact] {facts[k]}" for k in ranked]
        tally.add("\n".join(lines[:_fill(lines, budget)]), new_s, old_s)
    db.close()
    return tally.to_dict()


def evaluate(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    budget = int(Config.load(environ={}, overrides={})["inject.budget_chars"])
    with tempfile.TemporaryDirectory(prefix="memlocal-updates-") as tmp:
        ours = _memlocal(data, Path(tmp), auto=True)
        plain = _memlocal(data, Path(tmp), auto=False)
    return {"data": str(path), "budget": budget, "updates": len(data["updates"]), "distinct": len(data["distinct"]),
            "memlocal": ours, "memlocal_no_supersede": plain, "fts5_bm25": _bm25(data, budget)}


def format_result(r: dict[str, Any]) -> str:
    lines = [f"Knowledge updates ({r['updates']} updates, {r['distinct']} look-alike pairs, budget {r['budget']}): "
             f"{r['data']}", ""]
    head = (f"{'system':<24}{'current':>8}{'stale':>7}{'unambiguous':>12}{'stale line':>11}{'clear':>13}"
            f"{'look-alikes kept':>18}{'auto superseded':>17}")
    lines += [head, "-" * len(head)]
    for label, key in (("memlocal", "memlocal"), ("memlocal no-supersede", "memlocal_no_supersede"),
                       ("FTS5 bm25", "fts5_bm25")):
        v = r[key]
        kept = f"{v['lookalikes_kept']:.3f}" if "lookalikes_kept" in v else "-"
        auto = f"{v['auto_superseded_own_old']}/{v['auto_superseded']}" if "auto_superseded" in v else "-"
        lines.append(f"{label:<24}{v['current']:>8.3f}{v['stale']:>7.3f}{v['unambiguous']:>12.3f}"
                     f"{v['stale_line']:>11.3f}{v['unambiguous_lines']:>13.3f}{kept:>18}{auto:>17}")
    lines.append("")
    lines.append("auto superseded: saves that retired their update's own old fact / all saves that retired one")
    lines += ["", "memlocal, per update task (C current, S stale line, clear):"]
    for item in r["memlocal"]["items"]:
        lines.append(f"  {'C' if item['current'] else '-'}{'S' if item['stale_line'] else '-'}"
                     f"{' clear' if item['clear'] else ' UNCLEAR'}  {item['task']}")
    lines += ["", "memlocal, per look-alike pair:"]
    for pair in r["memlocal"]["lookalikes"]:
        lines.append(f"  {'kept' if pair['kept'] else 'RETIRED'}  {pair['fact']}  /  {pair['lookalike']}")
    lines += ["", "memlocal, automatic retirements (memlocal history, oldest first):"]
    for ret in r["memlocal"]["retired"]:
        lines.append("  " + "  ->  ".join(ret["history"]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT_DATA,
                    help="the updates set (default: ../shared/data/updates/dev.json beside the repo)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    path = args.path.resolve()
    if not path.is_file():
        print(f"error: no updates file at {path}", file=sys.stderr)
        return 2
    result = evaluate(path)
    print(json.dumps(result, indent=2) if args.json else format_result(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
