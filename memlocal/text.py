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
  0.538 without), and the C stemmer keeps tokenising a 10k-memory profile cheap.

``TERMS_VERSION`` changes whenever anything here (or the cluster vocabulary) would turn the same
text into different terms, so caches of terms built by an older version are not reused.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Final, Iterable

import Stemmer  # PyStemmer

TERMS_VERSION: Final = 1

# Snowball's English stopword list (snowballstem.org/algorithms/english/stop.txt) plus the
# contractions written without an apostrophe, and a few fillers that carry no topic.
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
    can will just also may might must shall yes yeah ok okay oh hey hi
    """.split()
)

# Letters and digits, with apostrophes allowed between them (possessives, contractions).
_WORD_RE: Final = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_ASCII_WORD_RE: Final = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")  # the same, for lowercased ASCII
_APOSTROPHES: Final = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})

_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=1 << 16)
def _term(word: str) -> str | None:
    """The term for one lowercased word, or ``None`` for a stopword / one-letter word."""
    if word in STOPWORDS:
        return None
    if len(word) < 2:
        return None
    stem: str = _stemmer.stemWord(word)
    # A trailing possessive the stemmer left behind ("james'") is not part of the word.
    return stem.rstrip("'") or None


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold().translate(_APOSTROPHES)
    if text.isascii():
        return text
    # Strip combining marks (café -> cafe) the way SQLite's unicode61 tokenizer does.
    decomposed = unicodedata.normalize("NFKD", text)
    return unicodedata.normalize(
        "NFC", "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    )


def words(text: str) -> list[str]:
    """The lowercased words of ``text`` (no stopword removal, no stemming)."""
    if text.isascii():  # the common case, several times faster
        return _ASCII_WORD_RE.findall(text.lower())
    return _WORD_RE.findall(_fold(text))


def terms(text: str) -> frozenset[str]:
    """The set of stemmed, non-stopword terms of ``text``."""
    out = set(map(_term, words(text)))
    out.discard(None)
    return frozenset(out)  # type: ignore[arg-type]


def terms_of(texts: Iterable[str]) -> frozenset[str]:
    """The union of the terms of several texts (a memory's processedContent and summary)."""
    out: set[str] = set()
    for text in texts:
        out |= terms(text)
    return frozenset(out)


def stem(word: str) -> str | None:
    """The term one word maps to (``None`` for a stopword); used to stem the cluster vocabulary."""
    return _term(_fold(word).strip())
