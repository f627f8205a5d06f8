"""Memory hygiene without an LLM: duplicate detection, supersession lineage and retention.

Pure functions (no store, no I/O); :class:`memlocal.MemoryBank` applies them. docs/hygiene.md
explains each rule, its setting and its cost.

- **Exact duplicates.** Two texts are the same memory when their normalised forms are equal:
  NFKC, case-folded, Latin diacritics stripped, punctuation dropped, whitespace collapsed (the
  words of :func:`memlocal.text.words`, joined by one space). :func:`text_key` is a short hash of
  that form, stored beside each memory so the check is one indexed lookup; a hit is always
  confirmed on the texts themselves, so a stale key can never merge two different memories.
- **Near duplicates** (:func:`near_duplicate`): the same statement reworded slightly. Candidates
  are found through the formula's own terms (Snowball stems, stopwords removed); a pair merges
  only when the Jaccard similarity of their terms reaches ``dedup.near_threshold`` *and* nothing
  the terms leave out tells them apart: the same small words that carry meaning (negations,
  pronouns, prepositions, modals: "before" vs "after", "he" vs "she", "not"), the same numbers,
  and the shared terms in the same order ("Ana owes Ben" vs "Ben owes Ana").
- **Retention** (:func:`retention_reason`): which memories a prune removes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Collection, Final, Iterable, Mapping

from . import text
from .errors import ValidationError
from .model import CATEGORIES, CORE_CATEGORIES, Memory, compute_staleness, parse_age

# Extra fields of the memory object that record supersession (docs/hygiene.md).
SUPERSEDES: Final = "supersedes"
SUPERSEDED_BY: Final = "supersededBy"
# The extra field a copy (a profile copy or rename, or an import whose id was taken) records its
# original's id in: the lineage, and what makes a repeated import of the same file a no-op.
COPIED_FROM: Final = "copiedFrom"

# Words the near-duplicate guard may ignore: articles and fillers that never change a statement.
# Every other stopword (not, no, he, she, before, after, can, should, ...) must match exactly.
FILLER_WORDS: Final = frozenset("a an the just really very so also too quite".split())
# Stopwords that are forms of one verb count as that verb in the guard: "she uses" and "she used"
# differ by tense only, as two forms of any other verb do once stemmed.
GUARD_FORMS: Final = {form: "use" for form in ("use", "uses", "used", "using")}
# Fewer terms than this and only an exact duplicate merges: short texts differ by one word.
NEAR_MIN_TERMS: Final = 4
# Default Jaccard threshold on the formula's terms (scripts/dedup_eval.py measured it on LoCoMo).
DEFAULT_NEAR_THRESHOLD: Final = 1.0


def relinked(memory: Memory, ids: Mapping[str, str]) -> Memory:
    """``memory`` with its supersession links (``supersedes``, ``supersededBy``) moved to the new
    ids of ``ids`` (old id -> new id); links to ids not in it are kept as they are."""
    extra = dict(memory.extra)
    for field_name in (SUPERSEDES, SUPERSEDED_BY):
        target = extra.get(field_name)
        if isinstance(target, str) and target in ids:
            extra[field_name] = ids[target]
    return memory if extra == memory.extra else memory.with_changes(extra=extra)


def copy_of(memory: Memory, new_id: str, profile: str, ids: Mapping[str, str]) -> Memory:
    """A copy of ``memory`` in ``profile`` under ``new_id``: every field kept (text, times, access
    counts, state), its links moved through ``ids``, and ``copiedFrom`` naming the original it
    was copied from (a copy of a copy names the copy: the lineage is a chain)."""
    copy = relinked(memory, ids)
    return copy.with_changes(id=new_id, profile_name=profile, extra={**copy.extra, COPIED_FROM: memory.id})


def normalise(value: str) -> str:
    """The form exact duplicates share: case, whitespace, punctuation and diacritics folded."""
    return " ".join(text.words(value))


def text_key(value: str) -> str:
    """A 16-hex-digit hash of :func:`normalise` (stored per memory for the indexed lookup)."""
    return hashlib.blake2b(normalise(value).encode("utf-8"), digest_size=8).hexdigest()


def same_text(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are exact duplicates (the rule :func:`text_key` indexes)."""
    return normalise(a) == normalise(b)


@dataclass(frozen=True, slots=True)
class Signature:
    """What the near-duplicate rule compares of one text."""

    terms: frozenset[str]  # the formula's terms (stems, stopwords removed)
    sequence: tuple[str, ...]  # those terms in text order, first occurrences
    guard: tuple[str, ...]  # the meaningful small words, sorted (a multiset)
    numbers: frozenset[str]


_DIGIT_RE: Final = re.compile(r"\d")
# The term of one (already folded) word, cached: signatures run on every candidate of a save.
_word_term = lru_cache(maxsize=1 << 16)(text.stem)


def signature(value: str) -> Signature:
    """The :class:`Signature` of a text."""
    seq: list[str] = []
    seen: set[str] = set()
    guard: list[str] = []
    numbers: set[str] = set()
    for word in text.words(value):
        if _DIGIT_RE.search(word):
            numbers.add(word)
        term = _word_term(word)
        if term is None:
            if word not in FILLER_WORDS:
                guard.append(GUARD_FORMS.get(word) or word.replace("'", ""))
            continue
        if term not in seen:
            seen.add(term)
            seq.append(term)
    return Signature(frozenset(seq), tuple(seq), tuple(sorted(guard)), frozenset(numbers))


def near_key(value: str) -> str | None:
    """A 16-hex-digit hash of what :func:`near_duplicate` compares at threshold 1.0 (the terms
    in text order, the guard words, the numbers), stored per memory so that a save finds its
    near-duplicates at the default threshold with one index lookup; ``None`` for a text too
    short for the near rule. Two texts with the same key are near-duplicates at 1.0, and two
    near-duplicates at 1.0 have the same key."""
    return signature_key(signature(value))


def signature_key(sig: Signature) -> str | None:
    """:func:`near_key` of an already computed :class:`Signature`."""
    if len(sig.terms) < NEAR_MIN_TERMS:
        return None
    parts = ("\x1f".join(sig.sequence), "\x1f".join(sig.guard), "\x1f".join(sorted(sig.numbers)))
    return hashlib.blake2b("\x1e".join(parts).encode("utf-8"), digest_size=8).hexdigest()


def jaccard(a: Collection[str], b: Collection[str]) -> float:
    """|A ∩ B| / |A ∪ B| (0 for two empty sets)."""
    sa, sb = set(a), set(b)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 0.0


def near_duplicate(a: Signature, b: Signature, threshold: float) -> bool:
    """The near-duplicate rule (see the module docstring). Symmetric."""
    if min(len(a.terms), len(b.terms)) < NEAR_MIN_TERMS:
        return False
    if jaccard(a.terms, b.terms) < threshold:
        return False
    if a.guard != b.guard or a.numbers != b.numbers:
        return False
    shared = a.terms & b.terms
    return [t for t in a.sequence if t in shared] == [t for t in b.sequence if t in shared]


# --- retention -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RetentionRule:
    """Which memories a prune removes: all criteria given must hold (AND).

    ``categories``: the categories a prune may touch; ``None`` means every category except
    preference and fact, which are removed only when named, or every category for an
    ``inactive`` rule (a superseded memory is never recalled or injected, whatever its category).
    """

    staleness_above: float | None = None
    older_than: timedelta | None = None
    categories: frozenset[str] | None = None
    inactive: bool = False

    def __post_init__(self) -> None:
        if self.staleness_above is None and self.older_than is None and not self.inactive:
            raise ValidationError("a prune needs a criterion: --staleness-above, --older-than or --inactive")
        if self.staleness_above is not None and not (0.0 <= self.staleness_above < 1.0):
            raise ValidationError(f"staleness threshold must be in [0, 1), got {self.staleness_above!r}")
        for c in self.categories or ():
            if c not in CATEGORIES:
                raise ValidationError(f"unknown category {c!r}: expected one of {', '.join(CATEGORIES)}")

    @property
    def allowed(self) -> frozenset[str]:
        if self.categories is not None:
            return self.categories
        if self.inactive:
            return frozenset(CATEGORIES)
        return frozenset(c for c in CATEGORIES if c not in CORE_CATEGORIES)

    @classmethod
    def build(cls, *, staleness_above: float | None = None, older_than: str | timedelta | None = None,
              categories: Iterable[str] | None = None, inactive: bool = False) -> "RetentionRule":
        """A rule from user input (``older_than`` as ``90d``; an empty category list means the default)."""
        age = parse_age(older_than) if isinstance(older_than, str) else older_than
        cats = frozenset(categories) if categories else None
        return cls(staleness_above, age, cats, inactive)


def retention_reason(memory: Memory, rule: RetentionRule, now: datetime) -> str | None:
    """Why ``rule`` removes ``memory`` (one line), or ``None`` when it keeps it.

    Staleness is recomputed for ``now`` (the stored score is as of the last save or access), and
    age counts from the last access, or from creation if never accessed, as staleness does.
    """
    if memory.category not in rule.allowed:
        return None
    if rule.inactive and memory.is_active:
        return None
    reasons = []
    if rule.inactive:
        reasons.append("inactive")
    if rule.staleness_above is not None:
        staleness = compute_staleness(
            category=memory.category, confidence=memory.confidence, access_count=memory.access_count,
            created_at=memory.created_at, last_accessed_at=memory.last_accessed_at, now=now,
        )
        if staleness <= rule.staleness_above:
            return None
        reasons.append(f"staleness {staleness:.2f} > {rule.staleness_above:g}")
    if rule.older_than is not None:
        anchor = memory.last_accessed_at or memory.created_at
        idle = now - anchor
        if idle <= rule.older_than:
            return None
        reasons.append(f"untouched for {idle.days} days")
    return ", ".join(reasons)
