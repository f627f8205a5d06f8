"""Tokenizer for the topic signal: lowercase Unicode words, stopwords removed, Snowball stems.

The same function turns a query and a memory into a set of *terms*, so matching is a set
intersection. Decisions:

- Words are runs of Unicode letters and digits (``[^\\W_]``), with inner apostrophes kept so that
  the stemmer can drop a possessive (``Caroline's`` -> ``carolin``). Text is NFKC-normalised,
  case-folded, and Latin diacritics are stripped (``café`` matches ``cafe``).
- Stopwords are the Snowball English list (plus apostrophe-less contractions): data, below.
  One-letter words are dropped; numbers are kept (``2023`` is a useful term).
- Stemming is the Snowball English ("Porter2") stemmer from PyStemmer, a C extension: the design's
  measurements (docs/spec.md, "Relevance") found stemming to help on LoCoMo (coverage 0.576 with,
  0.538 without), and the C stemmer keeps tokenising a 10k-memory profile cheap. Porter2 keeps
  comparatives and superlatives apart ("flakiest" is not "flaky"); :func:`_degree` and the
  degree forms in :data:`memlocal.relevance.vocab.VARIANTS` join them (docs/relevance.md, "Word forms").

- Vocabulary bridging (:mod:`memlocal.relevance.vocab`, data): a compound of two or three words also yields
  its joined word, found before stopwords are removed ("time zone", "time-zone" -> ``time``,
  ``zone`` and ``timezone``; "set up" -> ``set``, ``setup``): the bridge adds a term and never
  removes a word, so every word a memory says finds it, spelling
  variants and abbreviations are mapped to one form ("colour" -> ``color``, "k8s" ->
  ``kubernetes``), and a specific word also yields its broader word ("pytest" -> ``test``,
  ``framework``); an IANA zone name ("Europe/Lisbon") yields ``timezone``.

:func:`memory_terms` is *the* function that turns a stored memory into terms, and :func:`terms`
the one for a query: a persisted copy of a memory's terms must be made with ``memory_terms`` and
tagged with ``TERMS_VERSION``, which changes whenever anything here or in :mod:`memlocal.relevance.vocab`
would turn the same text into different terms (cluster membership is derived from terms at query
time, so editing :mod:`memlocal.relevance.clusters` does not change it).
"""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from itertools import chain
from typing import Callable, Container, Final, Iterable, NamedTuple, Sequence, TypeVar

import Stemmer  # PyStemmer

from ..model import default_summary, to_us
from .vocab import BROADER, CLOCK_BROADER, COMPOUNDS, PLACE_NAMES, VARIANTS, ZONE_REGIONS

TERMS_VERSION: Final = 9

# Snowball's English stopword list (snowballstem.org/algorithms/english/stop.txt) plus the
# contractions written without an apostrophe, and a few fillers that carry no topic. "user" is
# one in a memory bank: it is the subject of the memories ("The user is allergic to…") and of
# the questions about them ("what time zone is the user in?"), so as a term it only ties the
# questions to the few memories that happen to say it. The verb "use" says how, not what
# ("what database does staging use?" is not about "I use 4 spaces for indentation").
STOPWORDS: Final[frozenset[str]] = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom this
    that these those am is are was were be been being have has had having do does did doing would
    should could ought i'm you're he's she's it's we're they're i've you've we've they've i'd
    you'd he'd she'd we'd they'd i'll you'll he'll she'll we'll they'll isn't aren't wasn't weren't
    hasn't haven't hadn't doesn't don't didn't won't wouldn't shan't shouldn't can't cannot
    couldn't mustn't let's that's who's what's here's there's when's where's why's how's a an the
    and but if or because as until while of at by for with about against between into through
    during before after above below to from up down in out on off over under again further then
    once here there when where why how all any both each few more most other some such no nor not
    only own same so than too very
    im youre hes shes weve theyve ive id youd hed wed theyd ill youll isnt arent wasnt werent
    hasnt havent hadnt doesnt dont didnt wont wouldnt shouldnt cant couldnt mustnt lets thats
    whos whats heres theres
    can will just also may might must shall yes yeah ok okay oh hey hi user users use uses used using
    now anyone anybody someone somebody anything something everyone everybody
    """.split()
)

# Letters and digits, with apostrophes allowed between them (possessives, contractions).
_WORD_RE: Final = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_ASCII_WORD_RE: Final = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")  # the same, for lowercased ASCII
APOSTROPHES: Final = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})

_stemmer = Stemmer.Stemmer("english")
_V = TypeVar("_V")
_COMPOUND_FIRSTS: Final = frozenset(phrase[0] for phrase in COMPOUNDS)
_CLOCK_RE: Final = re.compile(r"(?:[1-9]|1[0-2])(am|pm)")
_ZONE_RE: Final = re.compile(r"\b(?:%s)/[a-z_]+" % "|".join(ZONE_REGIONS))


class WordMemo(dict[str, _V]):
    """A per-word cache of ``fn``, read as ``map(memo.__getitem__, words)``: a hit is one dict
    lookup in C (an ``lru_cache`` call costs several times that, and a text maps every word).
    Bounded: emptied once it holds ``limit`` words."""

    def __init__(self, fn: Callable[[str], "_V"], limit: int = 1 << 16) -> None:
        super().__init__()
        self.fn, self.limit = fn, limit

    def __missing__(self, word: str) -> "_V":
        if len(self) >= self.limit:
            self.clear()
        self[word] = value = self.fn(word)
        return value


@lru_cache(maxsize=1 << 16)
def _term(word: str) -> str | None:
    """The term for one lowercased word, or ``None`` for a stopword / one-letter word."""
    if word in STOPWORDS:
        return None
    if len(word) < 2:
        return None
    stem: str = _degree(_stemmer.stemWord(word))
    # A trailing possessive the stemmer left behind ("james'") is not part of the word.
    return stem.rstrip("'") or None


# A superlative with a doubled final consonant ("biggest", "hottest", "thinnest").
_DOUBLED_EST: Final = re.compile(r"(.*[aeiou])([bdgmnpt])\2est")


def _degree(stem: str) -> str:
    """A Snowball stem with its degree ending removed where Porter2 keeps it: "-iest"/"-ier" after
    a consonant become the "-i" of the base's own stem ("flakiest", "flakier" -> ``flaki``, as
    "flaky"; "earliest" -> ``earli``), and a doubled consonant's "-est" goes ("biggest" -> ``big``).
    Regular "-er"/"-est" forms are data (:data:`memlocal.relevance.vocab.VARIANTS`): by rule they would take
    "interest", "honest", "summer" and "letter" apart."""
    if len(stem) >= 7 and stem.endswith("iest") and stem[-5] not in "aeiou":
        return stem[:-4] + "i"
    if len(stem) >= 5 and stem.endswith("ier") and stem[-4] not in "aeiou":
        return stem[:-3] + "i"
    m = _DOUBLED_EST.fullmatch(stem)
    return m.group(1) + m.group(2) if m else stem


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold().translate(APOSTROPHES)
    if text.isascii():
        return text
    return strip_diacritics(text)


def strip_diacritics(text: str) -> str:
    """Combining marks stripped (café -> cafe), the way SQLite's unicode61 tokenizer does."""
    decomposed = unicodedata.normalize("NFKD", text)
    return unicodedata.normalize(
        "NFC", "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    )


@lru_cache(maxsize=1 << 16)
def _word_terms(word: str) -> tuple[str, ...]:
    """Every term one lowercased word yields: its own (variant applied), then its broader words."""
    word = VARIANTS.get(word, word)
    out: list[str] = []
    broader = BROADER.get(word, ())
    clock = _CLOCK_RE.fullmatch(word)
    if clock:
        broader = CLOCK_BROADER[clock.group(1)]
    for w in (word, *broader):
        t = _term(w)
        if t is not None and t not in out:
            out.append(t)
    return tuple(out)


_WORD_TERMS: Final[WordMemo[tuple[str, ...]]] = WordMemo(_word_terms.__wrapped__)


def compounds_in(ws: Sequence[str]) -> list[tuple[int, int, str]]:
    """The compounds of two or three words in ``ws`` ("time", "zone"; "out", "of", "office"), as
    (first index, index after the last, joined word): the longer match first, none overlapping."""
    out: list[tuple[int, int, str]] = []
    i, n = 0, len(ws)
    while i < n - 1:
        w = ws[i]
        if w in _COMPOUND_FIRSTS:
            joined = COMPOUNDS.get((w, ws[i + 1], ws[i + 2])) if i + 2 < n else None
            if joined is not None:
                out.append((i, i + 3, joined))
                i += 3
                continue
            joined = COMPOUNDS.get((w, ws[i + 1]))
            if joined is not None:
                out.append((i, i + 2, joined))
                i += 2
                continue
        i += 1
    return out


def _join_compounds(ws: Sequence[str]) -> list[str]:
    """``ws`` with each compound's joined word ("timezone", "outofoffice") added after the words
    it joins: the bridge adds a term and never removes a word, so "build" still finds "The build
    server is ci-3" (a word the memory says always finds it, docs/relevance.md, "Topic")."""
    return [*ws, *(joined for _, _, joined in compounds_in(ws))]


# ASCII that ends a word (everything but a-z, 0-9 and the apostrophe) becomes a space: words()'s
# fast path. Every ASCII character has an entry: a missing one costs a KeyError per call.
_ASCII_NON_WORD: Final = {c: c if "a" <= chr(c) <= "z" or "0" <= chr(c) <= "9" or chr(c) == "'" else 32
                          for c in range(128)}


def words(text: str) -> list[str]:
    """The lowercased words of ``text`` (no stopword removal, no stemming)."""
    if text.isascii():  # the common case, several times faster
        low = text.lower()
        if "'" not in low:  # runs of a-z0-9: the regex's words, found by two C passes instead
            return low.translate(_ASCII_NON_WORD).split()
        return _ASCII_WORD_RE.findall(low)
    return _WORD_RE.findall(_fold(text))


@lru_cache(maxsize=256)
def word_tuple(text: str) -> tuple[str, ...]:
    """:func:`words` of ``text``, cached: a memory's text is split once for its features
    (:func:`terms`) and its near-duplicate signature (:func:`memlocal.hygiene.rules.signature`)."""
    return tuple(words(text))


def terms(text: str) -> frozenset[str]:
    """The set of stemmed, non-stopword terms of ``text`` (compounds joined, variants unified,
    broader words added): the terms of a query, and of each text of a memory."""
    ws: Sequence[str] = word_tuple(text)
    if not _COMPOUND_FIRSTS.isdisjoint(ws):
        ws = _join_compounds(ws)
    out = frozenset(chain.from_iterable(map(_WORD_TERMS.__getitem__, ws)))
    if "/" in text and _ZONE_RE.search(text.lower()):
        out = out | _TIMEZONE
    return out


class QueryWord(NamedTuple):
    """One word of a query as the user wrote it (:func:`query_words`), with the terms it yields.
    ``compound``: the index of the compound it belongs to (-1: none); ``whole``: this entry is
    that compound itself ("time zone"), holding its joined word's terms."""

    word: str
    terms: frozenset[str]
    compound: int = -1
    whole: bool = False


# A word of the text as written (case kept), on words()'s boundaries.
_SHOWN_WORD_RE: Final = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_ZONE_SHOWN_RE: Final = re.compile(_ZONE_RE.pattern, re.IGNORECASE)


def query_words(text: str) -> tuple[QueryWord, ...]:
    """The words of a query as the user wrote them, each with the terms it yields: what evidence
    shows instead of stems ("database", not ``databas``). A compound ("time zone", "time-zone")
    is one more entry, as written, holding its joined word's terms, before its words; an IANA
    zone name ("Europe/Lisbon") one holding ``timezone``. The entries' terms together are
    :func:`terms` of ``text``, so a memory that shares a term with the query shares a word."""
    ws = word_tuple(text)
    norm = unicodedata.normalize("NFKC", text).translate(APOSTROPHES)
    spans = [m.span() for m in _SHOWN_WORD_RE.finditer(norm)]
    if len(spans) != len(ws):  # a character whose folding splits or joins words: show them folded
        norm = " ".join(ws)
        spans = [m.span() for m in _SHOWN_WORD_RE.finditer(norm)]
    found = compounds_in(ws) if not _COMPOUND_FIRSTS.isdisjoint(ws) else []
    part_of = [-1] * len(ws)
    starts: dict[int, tuple[int, int, str]] = {}
    for k, (i, j, joined) in enumerate(found):
        starts[i] = (k, j, joined)
        for x in range(i, j):
            part_of[x] = k
    out: list[QueryWord] = []
    for i, w in enumerate(ws):
        if i in starts:
            k, j, joined = starts[i]
            out.append(QueryWord(norm[spans[i][0]:spans[j - 1][1]], frozenset(_WORD_TERMS[joined]), k, True))
        ts = _WORD_TERMS[w]
        if ts:  # a stopword is never evidence
            out.append(QueryWord(norm[spans[i][0]:spans[i][1]], frozenset(ts), part_of[i]))
    if "/" in text:
        zone = _ZONE_SHOWN_RE.search(norm)
        if zone:
            out.append(QueryWord(zone.group(0), _TIMEZONE))
    return tuple(out)


def narrow_places(entries: tuple[QueryWord, ...]) -> tuple[QueryWord, ...]:
    """``entries`` with a place name's broader words left out (:data:`memlocal.relevance.vocab.PLACE_NAMES`):
    a memory that names a place says its kind too, but a question that names one asks about that
    place, not about every place of its kind. The same tuple when the query names none."""
    out: list[QueryWord] = []
    for e in entries:
        ws = word_tuple(e.word)
        key = "".join(ws) if e.whole else (ws[0] if ws else "")
        out.append(e._replace(terms=frozenset(_WORD_TERMS[key][:1])) if key in PLACE_NAMES else e)
    return tuple(out) if any(a is not b for a, b in zip(out, entries)) else entries


_LETTERS: Final = "abcdefghijklmnopqrstuvwxyz"


def near_spellings(word: str) -> list[str]:
    """The terms of the words one edit away from ``word`` (lowercase ASCII letters: a letter
    deleted, two neighbours swapped, one replaced or inserted), each once, sorted, ``word``'s own
    term left out: where a misspelt query word ("torunament") looks for the word the bank knows
    ("tournament", :func:`memlocal.relevance.scoring.prepare_query`)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    edits = {a + b[1:] for a, b in splits if b}
    edits.update(a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1)
    edits.update(a + c + b[1:] for a, b in splits if b for c in _LETTERS)
    edits.update(a + c + b for a, b in splits for c in _LETTERS)
    edits.discard(word)
    # Each edit's own term (a broader word is no spelling of it), stemmed in one C call and not
    # through the per-word caches, which a few hundred made-up words would only flush.
    unified = [VARIANTS.get(w, w) for w in edits]
    stems = _stemmer.stemWords([w for w in unified if w not in STOPWORDS])
    own = set(_WORD_TERMS[word])
    out = {t for t in (_degree(s).rstrip("'") for s in stems) if len(t) > 1 and t not in own}
    return sorted(out)


def shown_words(entries: Sequence[QueryWord], held: Container[str]) -> tuple[str, ...]:
    """The words of a query (:func:`query_words`) whose terms a memory holds (``held``), in the
    query's order, each once: a compound the memory holds is shown whole ("time zone"), and its
    words then not again."""
    out: list[str] = []
    seen: set[str] = set()
    whole: set[int] = set()
    for e in entries:
        if e.compound in whole or not any(t in held for t in e.terms):
            continue
        if e.whole:
            whole.add(e.compound)
        key = e.word.casefold()
        if key not in seen:
            seen.add(key)
            out.append(e.word)
    return tuple(out)


def terms_of(texts: Iterable[str]) -> frozenset[str]:
    """The union of the terms of several texts (a memory's processedContent and summary)."""
    out: set[str] = set()
    for text in texts:
        out |= terms(text)
    return frozenset(out)


def stem(word: str) -> str | None:
    """The term one word maps to (``None`` for a stopword), its spelling variant unified; used
    to stem the cluster vocabulary."""
    w = _fold(word).strip()
    return _term(VARIANTS.get(w, w))


_TIMEZONE: Final = frozenset({stem("timezone") or "timezon"})


def memory_terms(processed_content: str, summary: str) -> frozenset[str]:
    """The terms a memory is matched on: its processedContent and summary.

    A summary that is a prefix of the content, or its default preview (the first 50 characters,
    whitespace folded), adds nothing but a word cut in half, so it is left out.
    """
    if processed_content.startswith(summary) or summary == default_summary(processed_content):
        return terms(processed_content)
    return terms_of((processed_content, summary))


# --- dates a query names -----------------------------------------------------------------------

_MONTHS: Final = ("january", "february", "march", "april", "may", "june", "july", "august",
                  "september", "october", "november", "december")
_MONTH_RE: Final = "|".join(_MONTHS)
# "9 November, 2022", "9th of November 2022"; "November 9, 2022"; "November 2022".
_DAY_MONTH_YEAR: Final = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE}),?\s+(\d{{4}})\b")
_MONTH_DAY_YEAR: Final = re.compile(rf"\b({_MONTH_RE})\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b")
_MONTH_YEAR: Final = re.compile(rf"\b({_MONTH_RE}),?\s+(\d{{4}})\b")
_DAY: Final = timedelta(days=1)


def query_dates(query: str) -> tuple[tuple[int, int], ...]:
    """The dates ``query`` names, as windows of createdAt (µs, start inclusive, end exclusive):
    a day ("on 9 November, 2022", "November 9, 2022") from the day before to the day after it
    (a day in the asker's time zone, not UTC), a month ("in August 2023") that month with a day
    either side. Nothing else (relative dates, a bare year) is read. Used by the evidence
    mode's second pass (:func:`memlocal.relevance.scoring.rerank`): a memory saved on the day a task names
    is more likely what it asks about."""
    low = query.lower()
    if not any(m in low for m in _MONTHS):
        return ()
    days: list[datetime] = []
    for m in _DAY_MONTH_YEAR.finditer(low):
        days.append(_date(int(m[3]), m[2], int(m[1])))
    for m in _MONTH_DAY_YEAR.finditer(low):
        days.append(_date(int(m[3]), m[1], int(m[2])))
    windows = []
    try:  # a date at the edge of datetime's range (year 1, year 9999) is no window
        windows = [(d - _DAY, d + 2 * _DAY) for d in days if d.year > 1]
        if not windows:
            for m in _MONTH_YEAR.finditer(low):
                start = _date(int(m[2]), m[1], 1)
                if start.year > 1:
                    end = datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=timezone.utc)
                    windows.append((start - _DAY, end + _DAY))
    except (ValueError, OverflowError):
        pass
    out = []
    for a, b in windows:
        ua, ub = to_us(a), to_us(b)
        if ua is not None and ub is not None:
            out.append((ua, ub))
    return tuple(out)


# A date in a query, with the word that attaches it: "on 9 November, 2022", "in August 2023",
# "before July 10, 2022", "in June", "in 2023". A month is read capitalised ("may" is a verb too).
_MONTH_NAMES: Final = "|".join(m.capitalize() for m in _MONTHS)
_PREP: Final = r"\b(?i:on|in|before|after|by|since|during|around|of|as of|between|and)\s+(?:(?i:the)\s+)?"
_DAY_NO: Final = r"\d{1,2}(?:st|nd|rd|th)?"
_YEAR: Final = r"\b(?:19|20)\d\d\b"
_DATE_PHRASE: Final = re.compile(
    # a month with a day or a year ("9 November, 2022", "July 10", "August 2023")
    rf"(?:{_PREP})?(?:\b{_DAY_NO}\s+(?:of\s+)?\b(?:{_MONTH_NAMES})\b(?:,?\s*{_YEAR})?"
    rf"|\b(?:{_MONTH_NAMES})\s+{_DAY_NO}\b(?:,?\s*{_YEAR})?|\b(?:{_MONTH_NAMES}),?\s*{_YEAR})"
    # a month alone after its preposition ("in June"; "May I" is not one), a year alone after its
    # preposition ("in 2023"; "port 2049" and "error 2003" are no year)
    rf"|{_PREP}\b(?:{_MONTH_NAMES})\b|{_PREP}{_YEAR}")


def without_dates(query: str) -> str:
    """``query`` without the dates it names (a day, a month, a year, and the preposition before
    each): what the semantic extra embeds of a query. A memory's text seldom states the date it was
    saved on (its createdAt does, and the second pass reads the query's dates against it), so a
    date in the query only moves its vector away from the memory it asks about."""
    out = re.sub(r"[\s,]+(?=[?.!;:]|$)", "", " ".join(_DATE_PHRASE.sub(" ", query).split()))
    return out or query


def _date(year: int, month: str, day: int) -> datetime:
    """The UTC midnight of a date, or ``datetime.min`` (year 1) when it does not exist."""
    try:
        return datetime(year, _MONTHS.index(month) + 1, day, tzinfo=timezone.utc)
    except (ValueError, OverflowError):
        return datetime(1, 1, 1, tzinfo=timezone.utc)
