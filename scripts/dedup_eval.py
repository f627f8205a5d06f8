#!/usr/bin/env python3
"""False merges of the near-duplicate rule on LoCoMo's turns.

Every dialog turn of conversations 0-4 (``speaker: text``, as ``scripts/locomo_eval.py`` builds
them) is a statement; LoCoMo's turns are distinct utterances, so every pair the rule merges is a
candidate false merge. For each threshold of the Jaccard similarity of the formula's terms:

- ``terms alone``: pairs whose terms reach the threshold (what the rule would merge without
  its guards on small words, numbers and order);
- ``rule pairs``: pairs of turns of one conversation that :func:`memlocal.hygiene.rules.near_duplicate`
  would merge (every pair compared: an upper bound on what saves can merge, since a save only
  examines the full-text index's best candidates);
- ``strict-distinct``: those whose words differ under a stricter rule (the word sequences,
  unstemmed, stopwords kept, only articles and fillers dropped, must be equal); each is printed
  for a reading by hand;
- ``bank merges``: the turns saved one by one through ``MemoryBank.save`` with that threshold
  (the real path: exact keys, then the full-text candidates): how many saves were deduplicated,
  and how many of those were not exact duplicates of the memory returned.

And the exact rule (``exact``): how many of :data:`EXACT_DISTINCT` (texts that differ in
case inside a path, a flag or an identifier, or in an operator or a separator that changes the
meaning) the exact rule merges (goal 0), and how many of the turns, changed only in case and
punctuation (upper case, the sentence's punctuation swapped), it still merges with the turn (goal:
all but those whose technical tokens change case, "3pm" / "3PM").

    python scripts/dedup_eval.py [PATH] [--thresholds 1.0,0.9,0.8] [--json] [--no-bank]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo_eval import DEFAULT_DATA, load  # noqa: E402

from memlocal import MemoryBank, SaveRequest  # noqa: E402
from memlocal.config import Config  # noqa: E402
from memlocal.hygiene.rules import FILLER_WORDS, NEAR_MIN_TERMS, jaccard, near_duplicate, normalise, signature  # noqa: E402
from memlocal.relevance.text import words  # noqa: E402


# Distinct texts the exact rule must keep apart: eight reported merged (docs/hygiene.md), and more of each kind.
EXACT_DISTINCT = [
    ("/etc/App/config.yml", "/etc/app/config.yml"), ("-v", "-V"), ("a * b", "a / b"), ("3/2", "3-2"),
    ("NODE_ENV", "NODE-ENV"), ("--force", "-force"), ("x_1", "x-1"), ("C:\\Users\\build", "C:/Users/build"),
    ("Run pytest -k Slow", "Run pytest -k slow"), ("git log -S foo", "git log -s foo"),
    ("The bucket is s3://Logs-Prod", "The bucket is s3://logs-prod"), ("Set MAX_RETRIES=3", "Set MAX-RETRIES=3"),
    ("The key is user:id", "The key is user_id"), ("Use ~/bin/Tool", "Use ~/bin/tool"),
    ("The formula is a*b+c", "The formula is a/b+c"), ("Call getUser_v2", "Call getUser-v2"),
    ("Mount \\\\nas01\\Share", "Mount //nas01/Share"), ("The flag is --dry-run", "The flag is --dry_run"),
    ("Version 1.2-rc", "Version 1.2_rc"), ("Ratio 16:9", "Ratio 16/9"),
]


def exact_same(a: str, b: str) -> bool:
    """Whether the exact rule merges ``a`` and ``b``: the stored key, confirmed on the exact form
    where the bank has one (memlocal.hygiene.dedup.exact_form), else on the key's own form."""
    try:
        from memlocal.hygiene.dedup import exact_form  # type: ignore[attr-defined]
    except ImportError:  # an older bank: the key's normal form decided
        return normalise(a) == normalise(b)
    return normalise(a) == normalise(b) and exact_form(a) == exact_form(b)


_PROSE_PUNCT = {".": "!", ",": ";", "?": ".", "!": "."}
_SENTENCE_PUNCT_RE = re.compile(r"[.,?!](?=\s|$)")  # the sentence's, not a token's ("J.K.", "3.5")


def prose_variant(turn: str) -> str:
    """``turn`` in upper case, its sentence punctuation swapped, spaces around it."""
    return "  " + _SENTENCE_PUNCT_RE.sub(lambda m: _PROSE_PUNCT[m.group()], turn.upper()) + "!! "


def exact_rule(turns: list[str]) -> dict[str, Any]:
    """The exact rule on :data:`EXACT_DISTINCT` and on the turns changed in case and punctuation."""
    merged_distinct = [p for p in EXACT_DISTINCT if exact_same(*p)]
    variants = [(t, prose_variant(t)) for t in turns]
    kept_apart = [t for t, v in variants if not exact_same(t, v)]
    return {"distinctPairs": len(EXACT_DISTINCT), "distinctMerged": len(merged_distinct),
            "mergedPairs": merged_distinct, "proseVariants": len(variants),
            "proseMerged": len(variants) - len(kept_apart), "proseKeptApart": kept_apart}


def strict_same(a: str, b: str) -> bool:
    """The stricter rule: the same words in the same order, only articles and fillers aside."""
    return [w for w in words(a) if w not in FILLER_WORDS] == [w for w in words(b) if w not in FILLER_WORDS]


def rule_pairs(turns: list[str], threshold: float) -> tuple[list[tuple[str, str]], int]:
    """Pairs the rule merges, and how many the terms alone would merge (no guards)."""
    sigs = [signature(t) for t in turns]
    out = []
    unguarded = 0
    for i, j in itertools.combinations(range(len(turns)), 2):
        if normalise(turns[i]) == normalise(turns[j]):
            continue  # exact duplicates are the exact rule's, and the same memory by definition
        a, b = sigs[i], sigs[j]
        if min(len(a.terms), len(b.terms)) >= NEAR_MIN_TERMS and jaccard(a.terms, b.terms) >= threshold:
            unguarded += 1
            if near_duplicate(a, b, threshold):
                out.append((turns[i], turns[j]))
    return out, unguarded


def bank_merges(turns: list[str], threshold: float, near: bool = True) -> tuple[int, int, list[tuple[str, str]]]:
    """Save every turn; (saves deduplicated, of which not exact duplicates, those pairs)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Config.load().with_overrides(dedup__near_threshold=threshold, dedup__near=near)
        with MemoryBank(Path(tmp) / "d.db", config=config) as bank:
            merged = inexact = 0
            pairs = []
            for t in turns:
                res = bank.save(SaveRequest("locomo", content=t, use_llm=False))
                if res.deduplicated:
                    merged += 1
                    if normalise(res.memory.processed_content) != normalise(t):
                        inexact += 1
                        pairs.append((res.memory.processed_content, t))
    return merged, inexact, pairs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--thresholds", default="1.0,0.9,0.8,0.7")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-bank", action="store_true", help="skip the saves through MemoryBank")
    args = ap.parse_args(argv)
    convs = load(args.path)
    turns_by_conv = [[t.text for t in c.turns] for c in convs]
    n_turns = sum(len(t) for t in turns_by_conv)
    n_pairs = sum(len(t) * (len(t) - 1) // 2 for t in turns_by_conv)
    exact = sum(len(t) - len({normalise(x) for x in t}) for t in turns_by_conv)
    report: dict[str, Any] = {"turns": n_turns, "pairs": n_pairs, "exactDuplicateTurns": exact,
                              "exact": exact_rule([t for ts in turns_by_conv for t in ts]), "thresholds": {}}
    for th in (float(x) for x in args.thresholds.split(",")):
        found = [rule_pairs(t, th) for t in turns_by_conv]
        pairs = [p for ps, _ in found for p in ps]
        distinct = [p for p in pairs if not strict_same(*p)]
        row: dict[str, Any] = {"termsOnlyPairs": sum(n for _, n in found), "rulePairs": len(pairs),
                               "strictDistinct": len(distinct),
                               "falseMergeRate": len(distinct) / n_pairs, "pairsToRead": distinct}
        if not args.no_bank:
            merged, inexact, bank_pairs = 0, 0, []
            for t in turns_by_conv:
                m, i, bp = bank_merges(t, th)
                merged, inexact, bank_pairs = merged + m, inexact + i, bank_pairs + bp
            row.update(bankMerges=merged, bankNearMerges=inexact, bankNearPairs=bank_pairs)
        report["thresholds"][f"{th:g}"] = row
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    print(f"LoCoMo conversations 0-4: {n_turns} turns, {n_pairs} pairs within conversations, "
          f"{exact} turns repeat an earlier one exactly")
    ex = report["exact"]
    print(f"exact rule: {ex['distinctMerged']} of {ex['distinctPairs']} distinct technical pairs merged; "
          f"{ex['proseMerged']} of {ex['proseVariants']} turns merged with their case/punctuation variant")
    for a, b in ex["mergedPairs"]:
        print(f"    merged: {a!r} = {b!r}")
    for t in ex["proseKeptApart"][:20]:
        print(f"    kept apart from its variant: {t!r}")
    for th, row in report["thresholds"].items():
        line = (f"threshold {th}: terms alone {row['termsOnlyPairs']} pairs; rule merges {row['rulePairs']} pairs, {row['strictDistinct']} of them "
                f"distinct by the stricter rule (false-merge rate {row['falseMergeRate']:.2e} of all pairs)")
        if "bankMerges" in row:
            line += f"; saves deduplicated {row['bankMerges']} ({row['bankNearMerges']} near)"
        print(line)
        for a, b in row["pairsToRead"][:40]:
            print(f"    {a!r}\n  ~ {b!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
