"""Memory hygiene without an LLM: duplicate detection, supersession lineage and retention.

Pure functions (no store, no I/O); :class:`memlocal.MemoryBank` applies them. docs/hygiene.md
explains each rule, its setting and its cost.

- **Exact duplicates.** Two memories are the same, whatever their categories, when their
  texts have the same :func:`normalise` form (and :func:`exact_form`, which decides): the one
  normalisation of every check without the compatibility folds that change the meaning
  (:func:`memlocal.relevance.fold.fold_exact`: invisible characters dropped, NFKC but for superscripts,
  subscripts, fractions and symbols, look-alikes mapped to ASCII),
  case folded, Latin diacritics stripped, whitespace collapsed, and punctuation that only
  separates words dropped; what carries meaning is kept: the sign of a number (``-5``), currency
  and other symbols (``$``, ``€``, ``+``, ``°``), ``%``, ``#`` and ``@`` (``C++``, ``C#``),
  decimal points and thousands separators between digits. :func:`text_key`, the hash of the
  text alone, is stored beside each memory so the check is one indexed lookup; a hit is always
  confirmed on the texts, so a stale key can never merge two different memories.
- **Near duplicates** (:func:`near_duplicate`): the same statement reworded slightly. Candidates
  are found through the formula's own terms (Snowball stems, stopwords removed); a pair merges
  only when the Jaccard similarity of their terms reaches ``dedup.near_threshold`` *and* nothing
  the terms leave out tells them apart: the same small words that carry meaning (negations,
  pronouns, prepositions, modals: "before" vs "after", "he" vs "she", "not"), the same numbers,
  and the shared terms in the same order ("Ana owes Ben" vs "Ben owes Ana").
- **Across hosts** (:func:`converge`): after a sync pass has pulled, the copies that two hosts'
  concurrent saves or supersessions made redundant, and which one stays active (decided by what
  the bucket holds, never by a clock).
- **Retention** (:func:`retention_reason`): which memories a prune removes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from functools import lru_cache
from typing import Callable, Collection, Container, Final, Iterable, Mapping

import unicodedata

from ..relevance import text
from ..errors import ValidationError, fold_whitespace
from ..relevance.fold import fold, fold_exact
from ..model import CATEGORIES, CORE_CATEGORIES, Memory, compute_staleness, parse_age

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


# Punctuation that carries meaning inside a token and is kept: number sign, percent (the Arabic
# percent sign too: "5٪" is not "5"), per mille, at, ampersand. Symbols (category S: + $ € ° ^
# ∞ ...) are always kept.
_KEPT_PUNCTUATION: Final = frozenset("#%\u066a\u2030\u2031@&")
# Dashes that may stand for a minus sign (hyphen-minus, the Unicode dashes, the minus sign).
_DASHES: Final = "\\-\u2010-\u2015\u2212\ufe58\ufe63\uff0d"
# A dash is a sign when a digit (or a decimal point and a digit, or ∞) follows and no letter or
# digit precedes: "-5", "-.5", "(-5)", "—5", "-∞"; in "dark-mode" or "5-6" it only joins words.
_SIGN_RE: Final = re.compile(r"(?<![^\W_])[%s](?=\.?\d|\u221e)" % _DASHES)
_DECIMAL_RE: Final = re.compile(r"(?<=\d)[.,](?=\d)")
_DIGIT_RE: Final = re.compile(r"\d")
_INNER_APOSTROPHE_RE: Final = re.compile(r"(?<=[^\W_])'(?=[^\W_])")
# Placeholders (control characters, which fold() never leaves) for what the punctuation pass keeps.
_MARKS: Final = {"-": "\x01", ".": "\x02", ",": "\x03", "'": "\x04"}
_UNMARK: Final = str.maketrans({v: k for k, v in _MARKS.items()})


class _SeparatorTable(dict[int, str]):
    """``str.translate`` table: punctuation that only separates words becomes a space."""

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        self[code] = value = " " if unicodedata.category(ch).startswith("P") and ch not in _KEPT_PUNCTUATION else ch
        return value


_SEPARATORS: Final = _SeparatorTable()


# The ASCII punctuation that only separates words.
_ASCII_SEPARATING: Final = "".join(chr(c) for c in range(128)
                                   if unicodedata.category(chr(c)).startswith("P") and chr(c) not in _KEPT_PUNCTUATION)
# The tokens of an ASCII text: runs of anything but white space and separating punctuation (the
# reference; normalise() finds the same runs with a translation to spaces and a split).
_ASCII_TOKEN_RE: Final = re.compile("[^\\s%s]+" % re.escape(_ASCII_SEPARATING))
# Every ASCII character has an entry (itself, or a space): a missing one costs a KeyError per call.
_ASCII_SEPARATORS: Final = {c: 32 if chr(c) in _ASCII_SEPARATING else c for c in range(128)}


def _strip_marks(value: str) -> str:
    """Combining marks stripped (café -> cafe) through the *canonical* decomposition: the
    compatibility one would fold 10⁶ into 106 again."""
    decomposed = unicodedata.normalize("NFD", value)
    return unicodedata.normalize("NFC", "".join(ch for ch in decomposed if not unicodedata.combining(ch)))


# The fold both of the exact rule's forms start from (normalise, exact_form), once per text.
_fold_exact: Final = lru_cache(maxsize=1024)(fold_exact)


@lru_cache(maxsize=4096)  # a save or an import row normalises the same text for both keys
def normalise(value: str) -> str:
    """The form exact duplicates share (see the module docstring)."""
    folded = _fold_exact(value).casefold()
    if not folded.isascii():
        folded = _strip_marks(folded.translate(text.APOSTROPHES))
    marked = False
    # A decimal point or a sign needs a digit: the one fast search first.
    digits = ("." in folded or "," in folded or "-" in folded or not folded.isascii()) and (
        _DIGIT_RE.search(folded) is not None or "\u221e" in folded)
    if digits and ("." in folded or "," in folded) and _DECIMAL_RE.search(folded):
        folded, marked = _DECIMAL_RE.sub(lambda m: _MARKS[m.group()], folded), True
    if digits and _SIGN_RE.search(folded):
        folded, marked = _SIGN_RE.sub(_MARKS["-"], folded), True
    if "'" in folded and _INNER_APOSTROPHE_RE.search(folded):
        folded, marked = _INNER_APOSTROPHE_RE.sub(_MARKS["'"], folded), True
    if folded.isascii():
        out = " ".join(folded.translate(_ASCII_SEPARATORS).split())  # = _ASCII_TOKEN_RE's runs
    else:
        out = fold_whitespace(folded.translate(_SEPARATORS))
    return out.translate(_UNMARK) if marked else out


def text_key(value: str) -> str:
    """A 16-hex-digit hash of :func:`normalise` (stored per memory for the indexed lookup)."""
    return hashlib.blake2b(normalise(value).encode("utf-8"), digest_size=8).hexdigest()


def exact_key(category: str, value: str) -> str:
    """A 16-hex-digit hash of ``category`` and :func:`normalise` of ``value``: the same on any
    host (it depends on nothing else). Not the duplicate rule's identity: the same text in
    another category is the same memory (:func:`exact_form` decides, the category aside)."""
    return hashlib.blake2b(f"{category}\x1f{normalise(value)}".encode("utf-8"), digest_size=8).hexdigest()


# The meta key under which the store records :func:`keys_fingerprint` of its stored keys.
KEYS_META_KEY: Final = "hygiene.keys"


@lru_cache(maxsize=1)
def keys_fingerprint() -> str:
    """A digest of everything that decides the stored duplicate keys (:func:`text_key`,
    :func:`near_key`): the source of this module, of :mod:`memlocal.relevance.fold` and of
    :mod:`memlocal.relevance.text`, the confusables data's version and Python's Unicode version. The store
    derives every key again when the digest it recorded differs (``Store`` on open)."""
    import confusable_homoglyphs

    from ..relevance import fold as _fold

    h = hashlib.sha256(b"hygiene-keys-1")
    for src in (__file__, _fold.__file__, text.__file__):
        try:
            h.update(Path(src).read_bytes())
        except OSError:  # no source shipped: the versions below still stamp the data
            pass
    h.update(f"{confusable_homoglyphs.__version__}/{unicodedata.unidata_version}".encode())
    return h.hexdigest()[:16]


# Exact means exact (docs/hygiene.md, "The duplicate key"): the stored key (hygiene.text_key) folds
# case and every separating punctuation, so it finds the candidates; what decides is the exact
# form below, which keeps, in a *technical* token (a path, a flag, an identifier, an operator, a
# number), its case and the separators that change a meaning. Prose words keep the key's folds:
# "ana PREFERS dark-mode!" is "Ana prefers dark mode."
# The characters that make a token technical wherever they stand inside it.
_TECHNICAL_RE: Final = re.compile(r"[\d*/\\_:=<>|~^]|\w\.\w")
# What a sentence puts around a word: stripped before the token is read (never a leading dash,
# slash or backslash: "-v", "/etc", "\\\\files01").
_EDGE_LEFT: Final = "\"'([{\u2018\u201c"
_EDGE_RIGHT: Final = "\"')]}.,;:!?\u2019\u201d"


# Every dash is one dash in a technical token, as the key's sign rule reads it ("−5" is "-5").
_DASH_TABLE: Final = str.maketrans({c: "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"})
# A number with an ordinal or plural suffix ("18th", "1990s"): its case says nothing.
_COUNTED_RE: Final = re.compile(r"\d+(?:st|nd|rd|th|s)", re.IGNORECASE)


def is_technical(token: str) -> bool:
    """Whether ``token`` is technical under the exact rule (:func:`exact_form`): its case and
    separators are kept."""
    return (token[:1] in "-*" or bool(_TECHNICAL_RE.search(token))) and not _COUNTED_RE.fullmatch(token)


# A flag as a command line writes it: one or two ASCII dashes, then a letter ("-k", "--name";
# never "-5", a lone "-" or an em dash). Its argument is part of it (see exact_form).
_FLAG_RE: Final = re.compile(r"--?[A-Za-z][\w-]*")
# A quoted argument runs to its closing quote, over at most this many tokens.
_QUOTED_MAX: Final = 16


def _flag_argument(raws: list[str], at: int) -> int:
    """How many tokens from ``raws[at]`` on are the argument of the flag just before it: 0 when
    there is none (the end, or another flag), the run up to its closing quote when it opens one
    (``-k "Slow and not DB"``), else 1."""
    if at >= len(raws) or raws[at].startswith("-"):
        return 0
    first = raws[at]
    quote = first[:1]
    if quote not in "\"'":
        return 1
    for n, raw in enumerate(raws[at:at + _QUOTED_MAX]):
        closed = raw.rstrip(".,;:!?)]}")
        if closed.endswith(quote) and (n or len(closed) > 1):
            return n + 1
    return 1  # never closed: the one token


@lru_cache(maxsize=4096)  # a save compares its text with each candidate's
def exact_form(value: str) -> tuple[str, ...]:
    """What the exact rule compares of a text: its tokens (runs of non-space, the sentence's
    punctuation around them stripped), a technical one as written (look-alikes and invisible
    characters folded as the key folds them, :func:`memlocal.relevance.fold.fold_exact`, but its case and
    every operator and separator kept: ``/etc/App/config.yml``, ``-V``, ``--force``, ``NODE_ENV``,
    ``x_1``, ``3/2``, ``a * b``, ``C:\\Users``), a prose word as the key reads it
    (:func:`memlocal.hygiene.rules.normalise`: case, diacritics and punctuation folded). A token is
    technical when it starts with a dash or ``*``, holds a digit or one of ``* / \\ _ : = < > | ~
    ^``, or a dot between two word characters; a word of letters joined by hyphens is prose
    ("SELF-CARE" is "self-care", "dark-mode" is "dark mode"). A flag (``-k``, ``--name``) not
    followed by the sentence's punctuation takes the next token, or a quoted run, as its
    argument, kept as written with it in one token: ``-k SLOW`` is not ``-k slow``, and
    ``--name Prod`` not ``--name prod`` (an argument in plain letters is no prose word)."""
    out: list[str] = []
    raws = _fold_exact(value).split()
    i = 0
    while i < len(raws):
        raw = raws[i]
        i += 1
        token = raw.lstrip(_EDGE_LEFT).rstrip(_EDGE_RIGHT) or raw
        if not token.isascii():
            token = token.translate(_DASH_TABLE)
        if not is_technical(token):
            out += normalise(token).split()  # "dark-mode" is "dark mode"
            continue
        # "-k," ends at the sentence's comma: no argument.
        n = _flag_argument(raws, i) if _FLAG_RE.fullmatch(token) and raw.endswith(token) else 0
        if n:
            arg = " ".join(raws[i:i + n]).lstrip(_EDGE_LEFT).rstrip(_EDGE_RIGHT)
            token = f"{token} {arg if arg.isascii() else arg.translate(_DASH_TABLE)}"
            i += n
        out.append(token)
    return tuple(out)


def same_text(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` have the same text under the exact rule (:func:`text_key` finds the
    candidates, :func:`exact_form` decides)."""
    return normalise(a) == normalise(b) and exact_form(a) == exact_form(b)


@dataclass(frozen=True, slots=True)
class Signature:
    """What the near-duplicate rule compares of one text."""

    terms: frozenset[str]  # the formula's terms (stems, stopwords removed)
    sequence: tuple[str, ...]  # those terms in text order, first occurrences
    guard: tuple[str, ...]  # the meaningful small words, sorted (a multiset)
    numbers: frozenset[str]  # the tokens of normalise() that hold a digit or a kept symbol


# The term of one (already folded) word, cached: signatures run on every candidate of a save.
_WORD_TERM: Final[text.WordMemo[str | None]] = text.WordMemo(text.stem)


def _guard_of(word: str) -> str | None:
    """The guard word one (already folded) word adds to a signature: ``None`` for a word with a
    term or a filler, else the meaningful small word."""
    if _WORD_TERM[word] is not None or word in FILLER_WORDS:
        return None
    return GUARD_FORMS.get(word) or word.replace("'", "")


# Cached too: signatures run on every save, every imported line and every candidate.
_GUARD_WORD: Final[text.WordMemo[str | None]] = text.WordMemo(_guard_of)


# A token of normalise() whose exact form matters: one with a digit (a number with its sign,
# currency or percent) or a symbol (``c++``, ``c#``): anything but letters and inner apostrophes.
_MARK_RE: Final = re.compile(r"[^\w ']|[\d_]")
_ASCII_MARK_RE: Final = re.compile(r"[^a-z ']")  # the same for ASCII (normalise() is lower case)
_MARKED_TOKEN_RE: Final = re.compile(r"(?<![^ ])[^ ]*?(?:[^\w ']|[\d_])[^ ]*")


@lru_cache(maxsize=1024)  # a save computes it for its near-duplicate check, then for its row's near_key
def signature(value: str) -> Signature:
    """The :class:`Signature` of a text (after the one normalisation, :func:`memlocal.relevance.fold.fold`)."""
    norm = normalise(value)  # of the text as given: its numbers as the exact rule keeps them (10⁶ is not 106)
    value = fold(value)
    marked = _ASCII_MARK_RE.search(norm) if norm.isascii() else _MARK_RE.search(norm)
    numbers = set(_MARKED_TOKEN_RE.findall(norm)) if marked else set()
    ws = text.word_tuple(value)  # split once: the features read the same words
    # Per word, cached lookups mapped in C: the terms in text order (first occurrences), the
    # guard words sorted. (Neither a term nor a guard word is ever empty.)
    seq = tuple(dict.fromkeys(filter(None, map(_WORD_TERM.__getitem__, ws))))
    guard = tuple(sorted(filter(None, map(_GUARD_WORD.__getitem__, ws))))
    return Signature(frozenset(seq), seq, guard, frozenset(numbers))


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


# --- across hosts: convergence after a pull ----------------------------------------------------
#
# Two hosts may each save the same text, or each supersede the same memory, before either has
# seen the other's write. Every host applies the rules below to what it holds once a pass has
# pulled the bucket, and they all reach the same answer, because the answer depends only on what
# the bucket holds (ids, and the old memory's ``supersededBy`` as the bucket arbitrated it with a
# conditional write), never on a clock.

# Links followed at most when walking a supersession chain (a cycle made by import ends it).
CHAIN_LIMIT: Final = 1000


@dataclass(frozen=True, slots=True)
class Retirement:
    """Retire ``loser``: make it inactive, ``supersededBy`` ``winner``. ``duplicate``: the two are
    the same text (the loser's access count is merged into the winner); otherwise the loser is a
    concurrent successor of a memory that already has one."""

    loser: str
    winner: str
    duplicate: bool


def chain_head(start: str, get: Callable[[str], Memory | None]) -> Memory | None:
    """The active memory reached from ``start`` by following ``supersededBy`` (``start`` itself
    when it is active); ``None`` when a link is missing or the links make a cycle."""
    seen: set[str] = set()
    cur = get(start)
    while cur is not None and len(seen) < CHAIN_LIMIT:
        if cur.is_active:
            return cur
        seen.add(cur.id)
        nxt = cur.superseded_by
        if nxt is None or nxt in seen:
            return None
        cur = get(nxt)
    return None


def converge(memories: Iterable[Memory], get: Callable[[str], Memory | None],
             in_bucket: Container[str], *, duplicates: bool = True) -> list[Retirement]:
    """The retirements that make one profile's candidates converge (docs/hygiene.md, "Across hosts").

    ``memories``: active memories that may be redundant (each one's duplicates and its siblings
    among them); ``get``: any stored memory of the profile by id; ``in_bucket``: ids whose local
    copy is the one the bucket holds (only those may win or lose: a copy not yet pushed, or
    edited here since, waits for a later pass).

    1. **Concurrent successors.** An active memory that supersedes ``O`` while ``O`` names another
       successor (``O.supersededBy``, which the bucket decided: the first supersession pushed) is
       retired as superseded by the head of ``O``'s chain (its active end). When ``O`` is gone or
       names none, the successors of ``O`` keep the one whose id sorts first.
    2. **Duplicates.** Active memories with the same exact form (:func:`exact_form`, the key a
       save's exact check compares), whatever their categories, keep the one whose id sorts
       first, its category kept (a save that repeats a memory keeps its category too); the others
       are retired as superseded by it. Memories that supersede another are left to rule 1.

    Every id in a result is in ``in_bucket``, and the winner of every retirement stays active.
    """
    pool = sorted({m.id: m for m in memories if m.is_active}.values(), key=lambda m: m.id)
    out: list[Retirement] = []
    retired: set[str] = set()
    successors: dict[str, list[Memory]] = {}
    for m in pool:
        if m.supersedes is not None:
            successors.setdefault(m.supersedes, []).append(m)
    for old_id, group in successors.items():
        old = get(old_id)
        named = old.superseded_by if old is not None and old.profile_name == group[0].profile_name else None
        if named is not None and old is not None and old.id in in_bucket:
            head = chain_head(named, get)
            if head is None or head.id not in in_bucket:
                continue  # a broken chain, or a head not settled yet: nothing to decide
            losers = [m for m in group if m.id != head.id and m.id != named]
            winner = head.id
        elif named is None:
            held = [m for m in group if m.id in in_bucket]
            if len(held) < 2:
                continue
            winner, losers = held[0].id, held[1:]
        else:
            continue  # the old memory's own state is not the bucket's yet
        for m in losers:
            if m.id in in_bucket:
                out.append(Retirement(m.id, winner, duplicate=False))
                retired.add(m.id)
    if duplicates:
        # The save's rule (dedup.Deduplicator.exact): the same text in another category is the
        # same memory, so the category is no part of the group's key.
        groups: dict[tuple[str, tuple[str, ...]], list[Memory]] = {}
        for m in pool:
            if m.id in in_bucket and m.id not in retired and m.supersedes is None:
                groups.setdefault((m.profile_name, exact_form(m.processed_content)), []).append(m)
        for group in groups.values():
            out += [Retirement(m.id, group[0].id, duplicate=True) for m in group[1:]]
    return out
