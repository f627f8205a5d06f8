"""A memory's *features* as the store keeps them: the formula's own tokens, persisted.

The topic signal matches a query against a memory's terms (stems, :func:`memlocal.relevance.scoring.memory_terms`)
and clusters (:func:`memlocal.relevance.clusters.clusters_of`). Tokenising every memory again in each new
process is what made the first recall slow, so the store writes a memory's features beside it,
in the same transaction as the memory (``memories.features``), and SQLite triggers copy them
into the FTS5 table ``memory_features`` (see docs/storage.md, migration 4). A fresh process then
finds candidates and document frequencies with FTS5 lookups instead of tokenising the bank.

Format: one space-separated string, the profile's scope token is *not* part of it (the triggers
add it): the sorted terms, then ``@<cluster>`` for each cluster, e.g.
``allerg peanut @food @health``. A term that the FTS5 ``ascii`` tokenizer below would not keep
as one token (an ASCII character other than ``a-z``, ``0-9``, ``'``) is written as ``~`` + its
UTF-8 in hex; the tokenizer keeps every non-ASCII character, so Unicode stems are stored as they
are. Queries encode their terms the same way, so matching stays exact.

Version stamp: :func:`fingerprint` digests everything that turns text into features (the source
of the tokenizer, vocabulary and cluster modules, ``TERMS_VERSION``, the stemmer's version). The
store records it in ``meta`` (``features.version``); a process whose fingerprint differs
re-derives every memory's features when it opens the database, so a tokenizer change can never
leave stale tokens behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from functools import lru_cache
from pathlib import Path
from typing import Final

from . import clusters as _clusters
from . import text as _text
from .clusters import clusters_of
from .text import memory_terms

# FTS5's ``ascii`` tokenizer: ASCII letters/digits and these characters form tokens, every
# non-ASCII character is a token character, ASCII case is folded (our terms are lowercase).
# No stemming, no diacritic folding: the stored strings are already the formula's terms.
FTS_TOKENIZE: Final = "ascii tokenchars '''@=~'"
CLUSTER_PREFIX: Final = "@"
SCOPE_PREFIX: Final = "="  # the profile scope token (``=`` + hex of the profile name), added by triggers
_ENCODED_PREFIX: Final = "~"
_SAFE: Final = re.compile(r"[a-z0-9'\u0080-\U0010ffff]+")

FEATURES_META_KEY: Final = "features.version"


@lru_cache(maxsize=1 << 16)  # a bank's vocabulary repeats: every save and imported line encodes its terms
def encode_term(term: str) -> str:
    """The stored token of a term (itself, unless the FTS5 tokenizer would split it)."""
    if _SAFE.fullmatch(term):
        return term
    return _ENCODED_PREFIX + term.encode("utf-8").hex()


# encode_term as a per-term cache read in C (every save and imported line encodes its terms).
_ENCODED: Final[_text.WordMemo[str]] = _text.WordMemo(encode_term.__wrapped__)


def decode_term(token: str) -> str:
    """The term a stored token stands for (the inverse of :func:`encode_term`)."""
    if token.startswith(_ENCODED_PREFIX):
        return bytes.fromhex(token[1:]).decode("utf-8")
    return token


def features_of(processed_content: str, summary: str) -> str:
    """The stored features string of a memory with this text."""
    terms = memory_terms(processed_content, summary)
    parts = sorted(map(_ENCODED.__getitem__, terms))
    parts.extend(CLUSTER_PREFIX + c for c in sorted(clusters_of(terms)))
    return " ".join(parts)


def parse(features: str) -> tuple[frozenset[str], frozenset[str]]:
    """(terms, clusters) of a stored features string (the inverse of :func:`features_of`).

    Clusters come last, so everything from the first `` @`` on is clusters (the hot path of
    building an index from the store: two splits, no per-token work unless a term is encoded).
    """
    cut = features.find(CLUSTER_PREFIX)
    if cut < 0:
        head, tail = features, ""
    else:
        head, tail = features[:cut], features[cut + 1:]
    terms = head.split()
    if _ENCODED_PREFIX in head:
        terms = [decode_term(t) for t in terms]
    return frozenset(terms), frozenset(tail.split(" " + CLUSTER_PREFIX)) if tail else frozenset()


def term_token(term: str) -> str:
    """The FTS5 query (one quoted token) that finds memories holding ``term``."""
    return f'"{encode_term(term)}"'


def cluster_token(cluster: str) -> str:
    """The FTS5 query (one quoted token) that finds memories touching ``cluster``."""
    return f'"{CLUSTER_PREFIX}{cluster}"'


def scope_token(profile: str) -> str:
    """The FTS5 query token of a profile's scope: what the triggers write, ``=`` || hex(profile)."""
    return f'"{SCOPE_PREFIX}{profile.encode("utf-8").hex()}"'


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """A digest of everything that decides a memory's features (see the module docstring)."""
    h = hashlib.sha256()
    h.update(f"features-1/terms-{_text.TERMS_VERSION}".encode())
    import Stemmer  # PyStemmer: its algorithms' version changes stems

    version = getattr(Stemmer, "version", "")
    h.update(str(version() if callable(version) else version).encode())
    # memory_terms lives in text.py, so its source is part of this digest (no inspect.getsource:
    # importing inspect alone cost a fresh process more than the rest of the check).
    sources = [_text.__file__, _clusters.__file__]
    vocab = importlib.util.find_spec(f"{__package__}.vocab")
    if vocab is not None and vocab.origin:
        sources.append(vocab.origin)
    for src in sources:
        try:
            h.update(Path(src).read_bytes())
        except OSError:  # no source shipped: TERMS_VERSION alone stamps the tokenizer
            pass
    h.update(FTS_TOKENIZE.encode())
    return h.hexdigest()[:16]
