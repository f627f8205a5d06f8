"""The recall index: an exact, fast top-k of one profile's memories for a query.

:class:`RecallIndex` keeps, per profile, a compact inverted index (posting lists of doc numbers
in typed arrays) and two orders (by confidenceMul·recency, by confidenceMul·usage). A memory's
topic depends only on which of the query's features it holds, so candidates are ranked a class
(one set of features held) at a time, best topic first, with set operations on the long posting
lists and a threshold-algorithm walk inside a large class that stops once an upper bound on the
members not visited falls below the k-th best score; the index is built beside the queries, on
a background thread, while the persisted features answer them. It scores with :func:`memlocal.relevance.scoring.score_parts`,
the function the reference full scan (:func:`memlocal.relevance.scoring.rank_brute_force`) uses, so the
floats, and hence the ranking, are identical. The formula itself lives in :mod:`memlocal.relevance.scoring`
(pure); this package adds what needs the store: reading rows and keeping the index fresh.

The package: :mod:`.index` (:class:`ProfileIndex`, the in-memory index of one profile),
:mod:`.cold` (:func:`cold_query`, the cold path from the persisted FTS5 features),
:mod:`.service` (:class:`RecallIndex`, the cache of indexes, their background builds and the
choice between the two paths) and :mod:`.classes` (what both paths share, and
:class:`RecallTuning`, their speed knobs). Each ranking takes one
:class:`memlocal.relevance.scoring.RankQuery`. The SQL they read with, and the connection, are the
store's (:class:`memlocal.store.recall_reads.RecallReads`).
"""

from __future__ import annotations

from .classes import WARM_IDLE_S, RecallTuning, default_budget, gated_classes, split_features
from .cold import ColdAnswer, ColdHit, ColdRow, cold_query
from .index import BitSet, Hit, ProfileIndex, bit_docs
from .service import RecallIndex, with_bump

__all__ = [
    "WARM_IDLE_S",
    "BitSet",
    "ColdAnswer",
    "ColdHit",
    "ColdRow",
    "Hit",
    "ProfileIndex",
    "RecallIndex",
    "RecallTuning",
    "bit_docs",
    "cold_query",
    "default_budget",
    "gated_classes",
    "split_features",
    "with_bump",
]
