"""Relevance: the composite score, its signals, and the reference full scan. Pure: no store.

score = (wR·recency + wU·usage + wT·topic) · confidenceMul        (docs/spec.md, "Relevance")

- recency  = 0.5 ** (age_days / 30), age from max(createdAt, lastAccessedAt), never negative.
- usage    = 1 − 0.4 / (1 + log10(1 + accessCount)): 0.6 never accessed, 0.8 at 9, 0.867 at 99,
  0.9 at 999, strictly increasing toward 1.0.
- maturity = min(1, totalAccesses / 50) over the profile's active memories; wU = 0.30·m and the
  slack 0.30·(1 − m) goes to recency and topic in proportion to their 0.35 / 0.35 (half each).
- topic    = IDF-weighted query coverage plus shared clusters (see :func:`prepare_query`).
- confidenceMul = 0.5 + 0.5·confidence.

Ranking modes (:class:`Ranking`): ``evidence`` (default) returns only memories the query gives
evidence for, strong enough relative to the best match (:func:`gate_select`), ordered by the
score; ``spec`` is the spec's literal top-k by score.

Exactness: :func:`rank_brute_force` (:class:`FullScan`) is the reference (a full scan with the
formula), given a :class:`RankQuery`. The
recall index (:mod:`memlocal.recall`) answers the same top-k much faster; both paths score a
memory with the very same function (:func:`score_parts`), so the floats, and hence the ranking,
are identical.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Callable, Container, Final, Iterable, Mapping, Sequence, TypeVar

from . import text
from .clusters import TERM_CLUSTERS, clusters_of
from ..model import CORE_CATEGORIES, Memory, RecallQuery, to_us, utcnow
from .text import memory_terms, stem
from .vocab import GENERIC_WORDS

HALF_LIFE_DAYS: Final = 30.0
BASE_WEIGHTS: Final = (0.35, 0.30, 0.35)  # recency, usage, topic
MATURITY_ACCESSES: Final = 50
USAGE_FLOOR: Final = 0.6
# Each cluster a query touches adds this fraction of the query's mean term weight, shared out
# among its clusters by the weight of the query words in each (see docs/relevance.md).
CLUSTER_WEIGHT: Final = 0.25
# The optional semantic signal (memlocal.recall.semantic, MiniLM, cosines of profile-centred vectors)
# adds to the topic: BONUS·max(0, cos − FLOOR). Tuned on the agent bank's dev conversations
# (docs/relevance.md, "The semantic extra"): BONUS 0.25 -> 1.0 took hit@5 0.788 -> 0.813.
SIMILARITY_BONUS: Final = 1.0
SIMILARITY_FLOOR: Final = 0.1
# Similarity alone (no shared term or cluster) admits a memory only from this cosine on: off-topic
# queries stay below it against a developer's memories (docs/relevance.md). Below it, similarity
# only adds to the topic of memories that have lexical evidence. (Not Final: scripts sweep it.)
SIMILARITY_EVIDENCE = 0.3
# A query weighs a generic word (memlocal.relevance.vocab.GENERIC_WORDS: "get", "thing", "how long") at
# this share of its IDF: in a bank of facts such words are rare, hence "informative" by IDF,
# and outranked the name or object a question is about (docs/relevance.md).
GENERIC_WEIGHT: Final = 0.5
US_PER_DAY: Final = 86_400_000_000
# A query word of at least NEAR_MIN_LENGTH letters that no memory of the profile says stands for
# the word one edit away that some do ("torunament" -> "tournament"; docs/relevance.md, "Typos").
# Shorter words are left alone: one edit turns too many of them into another real word (measured
# on the agent bank: 5 letters gained nothing, 7 a task or two of hit@5).
NEAR_MIN_LENGTH: Final = 7

GENERIC_TERMS: Final = frozenset(t for t in map(stem, GENERIC_WORDS) if t)
# The bounded second pass of the evidence mode (:func:`rerank`): the gate's first RERANK_DEPTH
# (or ``limit``, if more) are re-ordered by a richer key, and the first ``limit`` returned.
# Three times the default limit: hit@5 0.735 at 24, 0.737 at 50 for 40 % more CPU per query.
RERANK_DEPTH: Final = 24
# Length normalisation of that pass, for facts and preferences (the core tier): topic / (1 +
# words / LENGTH_SCALE), words the memory's processedContent's whitespace-separated words (BM25's
# normalisation for a term seen once). A fact states one thing, so of two that match the same
# words the shorter says less else; a context note or a transcript turn is long by nature, and
# there shortness measured as no evidence of relevance (LoCoMo's dialog turns lost 0.01 R@8).
LENGTH_SCALE: Final = 60.0
# What a memory created within a date the query names ("on 9 November, 2022") adds to it.
DATE_BONUS: Final = 0.3
# What the semantic signal's cosine adds, times this, in the second pass (on top of the topic's
# similarity bonus); 0.25 and 1.0 measured no better on the agent bank (docs/relevance.md).
SIMILARITY_RERANK: Final = 0.5

TIERS: Final = ("core", "other")
# Not a tier of the spec: the core tier's preferences alone (spec-mode ranking only), which the
# evidence block reads so that every preference can apply whatever the facts' ranks.
PREFERENCE_TIER: Final = "preference"


# --- the signals -----------------------------------------------------------------------------


def recency(anchor_us: int, now_us: int) -> float:
    """0.5 ** (age_days / 30); an anchor in the future (another host's clock) counts as age 0."""
    age_days = max(0, now_us - anchor_us) / US_PER_DAY
    weight: float = 0.5 ** (age_days / HALF_LIFE_DAYS)  # float ** float is typed Any (it may be complex)
    return weight


def usage(access_count: int) -> float:
    """0.6 for a never-accessed memory, rising logarithmically toward 1.0."""
    return 1.0 - (1.0 - USAGE_FLOOR) / (1.0 + math.log10(1 + max(0, access_count)))


def maturity(total_accesses: int) -> float:
    """min(1, totalAccesses / 50)."""
    return min(1.0, max(0, total_accesses) / MATURITY_ACCESSES)


def confidence_mul(confidence: float) -> float:
    return 0.5 + 0.5 * confidence


@dataclass(frozen=True, slots=True)
class Weights:
    """Effective signal weights for one profile at one maturity."""

    recency: float
    usage: float
    topic: float

    def to_dict(self) -> dict[str, float]:
        return {"recency": self.recency, "usage": self.usage, "topic": self.topic}


def weights_for(m: float) -> Weights:
    """wU = 0.30·m; the slack 0.30·(1−m) is shared by recency and topic in proportion (0.35:0.35)."""
    r0, u0, t0 = BASE_WEIGHTS
    wu = u0 * m
    slack = u0 - wu
    return Weights(r0 + slack * r0 / (r0 + t0), wu, t0 + slack * t0 / (r0 + t0))


def combine(rec: float, use: float, topic: float, cmul: float, w: Weights) -> float:
    """The composite score."""
    return (w.recency * rec + w.usage * use + w.topic * topic) * cmul


def idf(df: int, n: int) -> float:
    """BM25's smoothed inverse document frequency: always > 0, larger for rarer terms."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


@dataclass(frozen=True, slots=True)
class PreparedQuery:
    """A query turned into weighted features against one profile's statistics.

    topic(M) = (Σ_{t ∈ Q∩M} idf(t) + Σ_{k ∈ C_Q∩C_M} c_k) / (Σ_{t ∈ Q} idf(t) + Σ_{k ∈ C_Q} c_k),
    with c_k = CLUSTER_WEIGHT · mean_{t ∈ Q} idf(t) · |C_Q| · m_k / Σ_{j ∈ C_Q} m_j and
    m_k = Σ_{t ∈ Q touching k} idf(t): the share of the (weighted) query that the memory covers,
    where each cluster the query touches is one more, lighter, query feature that a memory covers
    only if it touches the same cluster. Together the clusters weigh c = CLUSTER_WEIGHT · mean
    idf each; a cluster that more (or rarer) query words touch takes more of that.
    """

    terms: tuple[str, ...]  # sorted: the summation order is fixed, so every path adds alike
    weights: tuple[float, ...]
    clusters: tuple[str, ...]
    cluster_weights: tuple[float, ...]  # c_k of each of ``clusters``
    denominator: float
    words: tuple[text.QueryWord, ...] = ()  # the query's words as written, what evidence shows


    @property
    def empty(self) -> bool:
        return self.denominator <= 0.0


def prepare_query(query: str, df: Callable[[str], int], n: int,
                  held_any: Callable[[Sequence[str]], bool] | None = None) -> PreparedQuery:
    """Tokenise ``query`` and weight its terms by IDF over ``n`` memories (``df(term)`` each).
    ``held_any(terms)``: whether some memory holds one of ``terms`` (as ``df`` counts), when one
    such question is cheaper than a ``df`` per term (the cold path's FTS5 counts): a misspelt
    word's few hundred neighbours are then counted one by one only if some memory holds one."""
    found = text.terms(query)
    if not found:
        return PreparedQuery((), (), (), (), 0.0)
    words = text.query_words(query)
    narrowed = text.narrow_places(words)
    if narrowed is not words:
        kept = frozenset().union(*(e.terms for e in narrowed))
        found = frozenset(t for t in found if t in kept or not any(t in e.terms for e in words))
        words = narrowed
    dfs = {t: df(t) for t in found}
    near = _near_terms(words, dfs, df, held_any)
    if near:
        words = tuple(e._replace(terms=e.terms | {near[e.word]}) if e.word in near and not e.whole else e
                      for e in words)
    # A misspelt word stands for the word it meant: its own terms, which no memory holds, leave
    # the query (they would only lower every memory's share of it) and the known term comes in.
    unknown = {t for e in words if e.word in near for t in e.terms if dfs.get(t, 0) == 0}
    qterms = tuple(sorted((found - unknown) | set(near.values())))
    weights = tuple(idf(dfs[t], n) * (GENERIC_WEIGHT if t in GENERIC_TERMS else 1.0) for t in qterms)
    total = 0.0
    for w in weights:
        total += w
    per_cluster: dict[str, float] = {}
    for t, w in zip(qterms, weights):  # in the terms' sorted order: the same floats every time
        for c in TERM_CLUSTERS.get(t, ()):
            per_cluster[c] = per_cluster.get(c, 0.0) + w
    qclusters = tuple(sorted(per_cluster))
    mass = 0.0
    for c in qclusters:
        mass += per_cluster[c]
    share = CLUSTER_WEIGHT * total / len(qterms) * len(qclusters)
    cws = tuple(share * per_cluster[c] / mass for c in qclusters)
    denominator = total
    for cw in cws:
        denominator += cw
    return PreparedQuery(qterms, weights, qclusters, cws, denominator, words)


def _near_terms(words: Sequence[text.QueryWord], dfs: dict[str, int], df: Callable[[str], int],
                held_any: Callable[[Sequence[str]], bool] | None = None) -> dict[str, str]:
    """The misspelt words of a query and the term each stands for: a word of at least
    ``NEAR_MIN_LENGTH`` letters none of whose terms the profile holds, one edit away from a term
    it does hold (:func:`memlocal.relevance.text.near_spellings`; the most frequent such term, then the
    first in order). ``dfs`` gains the document frequency of each term chosen."""
    out: dict[str, str] = {}
    for e in words:
        w = e.word.casefold()
        if (e.whole or len(w) < NEAR_MIN_LENGTH or not w.isascii() or not w.isalpha()
                or any(dfs.get(t, 0) > 0 for t in e.terms)):
            continue
        near = text.near_spellings(w)
        if held_any is not None and not any(dfs.get(t, 0) > 0 for t in near) and not held_any(near):
            continue
        best, best_df = "", 0
        for t in near:
            f = dfs[t] if t in dfs else df(t)
            if f > best_df:
                best, best_df = t, f
        if best:
            dfs[best] = best_df
            out[e.word] = best
    return out


def topic(pq: PreparedQuery, terms: Container[str], clusters: Container[str]) -> float:
    """The topic signal of a memory (its ``terms`` and ``clusters``) for a prepared query: the
    share of the weighted query it covers. It depends only on which of the query's features the
    memory holds, so the index ranks a class of memories holding the same ones with one topic.
    ``terms`` and ``clusters`` only need ``in`` against ``pq``'s features (sets, or the cold
    path's stored feature string with ``pq``'s features written as its space-delimited tokens)."""
    if pq.denominator <= 0.0:
        return 0.0
    covered = 0.0
    for t, w in zip(pq.terms, pq.weights):
        if t in terms:
            covered += w
    for c, cw in zip(pq.clusters, pq.cluster_weights):
        if c in clusters:
            covered += cw
    return min(1.0, covered / pq.denominator)


def literal(pq: PreparedQuery, terms: Container[str]) -> bool:
    """True when the memory (its ``terms``) shares a query term, not only a cluster."""
    for t in pq.terms:
        if t in terms:
            return True
    return False


def score_parts(
    anchor_us: int,
    now_us: int,
    use: float,
    cmul: float,
    terms: Container[str],
    clusters: Container[str],
    pq: PreparedQuery,
    w: Weights,
) -> tuple[float, float, float]:
    """(score, recency, topic) of one memory. Every ranking path scores through this one
    function (or its two halves, :func:`topic` then :func:`score_with_topic`), so their floats
    are identical."""
    return score_with_topic(anchor_us, now_us, use, cmul, topic(pq, terms, clusters), w)


def score_with_topic(anchor_us: int, now_us: int, use: float, cmul: float, top: float,
                     w: Weights) -> tuple[float, float, float]:
    """(score, recency, topic) of one memory whose :func:`topic` is ``top``; it inlines
    :func:`recency` and :func:`combine` (same arithmetic) because it runs once per memory
    visited. The gated index computes the topic first and skips this for a memory whose topic
    can no longer pass the gate."""
    rec = 0.5 ** ((max(0, now_us - anchor_us) / US_PER_DAY) / HALF_LIFE_DAYS)
    return (w.recency * rec + w.usage * use + w.topic * top) * cmul, rec, top


def similarity_bonus(cos: float) -> float:
    """What the semantic signal adds to a memory's topic: ``1.0·max(0, cos − 0.1)``."""
    return SIMILARITY_BONUS * max(0.0, cos - SIMILARITY_FLOOR)


def with_similarity(score: float, rec: float, use: float, cmul: float, top: float, cos: float | None,
                    w: Weights) -> tuple[float, float, float | None]:
    """(score, topic, cos-if-it-counted) of a memory once the semantic signal is added: its topic
    becomes ``topic + similarity_bonus(cos)`` (evidence mode, docs/relevance.md). ``cos`` is
    ``None`` for a memory outside the embedding top-k; a similarity at or below the floor adds
    nothing, and for a memory without lexical evidence (topic 0) one below
    ``SIMILARITY_EVIDENCE`` adds nothing either, so similarity alone admits only a clear match.
    Every path adds the signal through this function, so their floats agree."""
    if cos is None:
        return score, top, None
    bonus = similarity_bonus(cos)
    if bonus <= 0.0 or (top <= 0.0 and cos < SIMILARITY_EVIDENCE):
        return score, top, None
    top = top + bonus
    return (w.recency * rec + w.usage * use + w.topic * top) * cmul, top, cos


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Breakdown:
    """How one score was made (the ``breakdown`` object of ``memory_recall`` and the API)."""

    recency: float
    usage: float
    topic: float
    confidence_mul: float
    weights: Weights
    maturity: float
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "recency": self.recency,
            "usage": self.usage,
            "topic": self.topic,
            "confidenceMul": self.confidence_mul,
            "weights": self.weights.to_dict(),
            "maturity": self.maturity,
            "score": self.score,
        }


@dataclass(frozen=True, slots=True)
class Evidence:
    """Why a memory passed the evidence gate: what it shares with the query, and how strongly.

    ``terms``: the query's words, as the query writes them, whose terms the memory holds
    ("database", "time zone"; never a stem: :func:`memlocal.relevance.text.shown_words`); ``clusters``: the
    clusters both touch; ``strength``: its topic value; ``best``: the best topic value of any
    candidate for the query (the gate lets a memory through when ``strength ≥ ratio · best``);
    ``rank``: the evidence the results are ordered by (:func:`evidence_rank`: the topic with a
    fact's length, a date the query names and the similarity; results are listed by a shared
    word before a cluster alone, then ``rank``, then the score). ``semantic``: the third
    kind of evidence, the similarity of query and memory (their centred cosine plus the best
    of its context's, times at most 0.3, :meth:`memlocal.recall.semantic.SemanticIndex.similar`: at most 1.3)
    when the optional semantic signal is enabled and contributed to the topic (``None`` otherwise, and left out of
    ``to_dict``): a signal that adds to the topic is evidence like a shared term.
    """

    terms: tuple[str, ...]
    clusters: tuple[str, ...]
    strength: float
    best: float
    semantic: float | None = None
    rank: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"terms": list(self.terms), "clusters": list(self.clusters),
                               "strength": self.strength, "best": self.best, "rank": self.rank}
        if self.semantic is not None:
            out["semantic"] = self.semantic
        return out


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """One recall result. ``evidence`` is ``None`` in spec mode (no gate) and for the core tier."""

    memory: Memory
    score: float
    breakdown: Breakdown
    evidence: Evidence | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"memory": self.memory.to_dict(), "score": self.score, "breakdown": self.breakdown.to_dict(),
                "evidence": self.evidence.to_dict() if self.evidence is not None else None}


def evidence_of(pq: PreparedQuery, terms: frozenset[str], clusters: frozenset[str], strength: float,
                best: float, semantic: float | None = None, rank: float = 0.0) -> Evidence:
    """The :class:`Evidence` record of one memory that passed the gate (``semantic``: its cosine
    similarity, when the semantic signal contributed to ``strength``; ``rank``: its
    :func:`evidence_rank`, which :func:`rerank` sets)."""
    return Evidence(text.shown_words(pq.words, terms), tuple(c for c in pq.clusters if c in clusters),
                    strength, best, semantic, rank)


# --- ranking modes ---------------------------------------------------------------------------

MODES: Final = ("evidence", "spec")
DEFAULT_EVIDENCE_RATIO: Final = 0.3


@dataclass(frozen=True, slots=True)
class Ranking:
    """How a query's results are chosen (settings ``ranking.mode``, ``ranking.evidence_ratio``).

    ``evidence`` (default): a memory is a result only with evidence from the query, a topic > 0
    (a shared term or a shared cluster), at least ``ratio`` times the best topic of any
    candidate; of those, the ``limit`` first in the evidence order (:func:`gate_select`: a
    shared term before a shared cluster alone, then the most evidence, the score breaking ties)
    are kept, in that order. ``spec``: the spec's literal rule, the top ``limit`` by score over
    every memory (no gate).
    """

    mode: str = "evidence"
    ratio: float = DEFAULT_EVIDENCE_RATIO

    @property
    def gated(self) -> bool:
        return self.mode == "evidence"


SPEC: Final = Ranking("spec")


@dataclass(frozen=True, slots=True)
class RankQuery:
    """One ranking, as every ranking path takes it (the recall index, its cold path, the full
    scan): a :class:`memlocal.model.RecallQuery` with its settings applied (:meth:`of`), or
    what the context block asks of a tier.

    ``text``: the query; ``limit``: most results; ``min_score``: lowest score kept;
    ``exclude_ids``: memories never returned; ``now``: the clock the scores are computed at
    (``None``: the current time); ``tier``: ``None`` (every memory), ``"core"``, ``"other"`` or
    ``PREFERENCE_TIER``; ``ranking``: the evidence gate or the spec's rule; ``similarity``: the
    semantic signal's embedding top-k (id -> cosine), evidence mode only. Not validated: the
    faces' rules (a limit up to 1000, ...) are :class:`~memlocal.model.RecallQuery`'s, and the
    block asks for as many core entries as its budget could hold.
    """

    text: str
    limit: int
    min_score: float
    exclude_ids: tuple[str, ...] = ()
    now: datetime | None = None
    tier: str | None = None
    ranking: Ranking = Ranking()
    similarity: Mapping[str, float] | None = None

    @classmethod
    def of(cls, q: RecallQuery, ranking: Ranking, similarity: Mapping[str, float] | None = None) -> RankQuery:
        """``q`` (its ``limit`` and ``min_score`` given: :meth:`RecallQuery.with_defaults`) ranked
        under ``ranking``, over the whole profile."""
        if q.limit is None or q.min_score is None:
            raise ValueError("a ranking needs the query's limit and min_score: apply RecallQuery.with_defaults first")
        return cls(q.text, q.limit, q.min_score, q.exclude_ids, q.now, None, ranking, similarity)

    def now_us(self) -> int:
        """The clock the scores are computed at, in µs: ``now``, or the current time when it is
        ``None`` (a caller that ranks in several steps fixes ``now`` first, so they agree)."""
        now_us = to_us(self.now or utcnow())
        assert now_us is not None
        return now_us


def rank_key(score: float, created_us: int, memory_id: str) -> tuple[float, int, str]:
    """Sort key, best first: higher score, then newer createdAt, then smaller id."""
    return (-score, -created_us, memory_id)


def _in_tier(category: str, tier: str | None) -> bool:
    if tier is None:
        return True
    if tier == PREFERENCE_TIER:
        return category == "preference"
    return (category in CORE_CATEGORIES) == (tier == "core")


Row = tuple[Any, float, float, float]  # (item, score, recency, topic)
RowT = TypeVar("RowT", bound=Row)  # a row of any ranking path (the recall index's, the cold path's)


def gate_select(rows: Iterable[RowT], *, limit: int, ratio: float, min_score: float,
                ident: Callable[[Any], tuple[int, str]],
                strong: Callable[[Any], bool] | None = None) -> tuple[list[RowT], float]:
    """The evidence gate: of ``rows`` (every candidate with topic > 0 that could pass, including
    the best one), keep those with topic ≥ ``ratio``·best and score ≥ ``min_score``, at most
    ``limit`` of them, in the evidence order: strong evidence first (``strong(item)``: a shared
    query term or a counted similarity; a shared cluster alone is weak), then the most evidence
    (topic), then the higher score, newer createdAt, smaller id.

    Returns them in that order, and the best topic. ``ident(item)`` gives (createdAt µs, id).
    Every ranking path (the index, the cold path, the full scan) selects through this function,
    so they agree exactly. The composite score only breaks ties of evidence: recency and use
    then cannot carry a memory above one the query gives more evidence for, which is what made
    what a run was shown crowd out what the next task needs (docs/relevance.md).
    """
    rows = [r for r in rows if r[3] > 0.0]
    if not rows:
        return [], 0.0
    best = max(r[3] for r in rows)
    floor = ratio * best
    passing = [r for r in rows if r[3] >= floor and r[1] >= min_score]

    def by_evidence(r: Row) -> tuple[bool, float, float, int, str]:
        created, mid = ident(r[0])
        return (strong is not None and not strong(r[0]), -r[3], -r[1], -created, mid)

    kept = heapq.nsmallest(limit, passing, key=by_evidence)  # = sorted(...)[:limit], without sorting all
    return kept, best


# The second pass's key is kept to this many decimals, the ones `recall`'s table shows: two
# results whose keys differ only further down are ordered by their score, so the order is the
# one the table and --json show (a result never follows one with the same shown rank and a lower
# score).
RANK_DIGITS: Final = 4


def evidence_rank(strength: float, fact_words: int | None, created_us: int, semantic: float | None,
                  windows: "Sequence[tuple[int, int]]") -> float:
    """The evidence the second pass orders by (``Evidence.rank``), from a memory's primitive
    fields (what the in-memory index holds, so it reranks before reading any row): the topic
    (``strength``), divided by ``1 + words / LENGTH_SCALE`` for a fact or preference
    (``fact_words``: its processedContent's whitespace-separated words; None for another
    category), plus ``DATE_BONUS`` when the memory was created within one of ``windows`` (µs,
    from :func:`memlocal.relevance.text.query_dates`), plus ``SIMILARITY_RERANK`` times its cosine when
    the semantic signal counted; rounded to :data:`RANK_DIGITS` decimals."""
    key = strength
    if fact_words is not None:  # a fact states one thing: see LENGTH_SCALE
        key /= 1.0 + fact_words / LENGTH_SCALE
    for start, end in windows:
        if start <= created_us < end:
            key += DATE_BONUS
            break
    if semantic is not None:
        key += SIMILARITY_RERANK * semantic
    return round(key, RANK_DIGITS)


def rerank_order(strong: bool, strength: float, fact_words: int | None, created_us: int, semantic: float | None,
                 score: float, memory_id: str, windows: "Sequence[tuple[int, int]]") -> tuple[bool, float, float, int, str]:
    """The second pass's order, best first: strong evidence first (as the gate), then the
    :func:`evidence_rank`, then the score, newer createdAt, smaller id. What ``recall`` shows
    beside each result (its evidence's words or [clusters] alone, ``rank``, ``score``) is this
    order's key."""
    return (not strong, -evidence_rank(strength, fact_words, created_us, semantic, windows), -score, -created_us,
            memory_id)


def _rank_fields(s: "ScoredMemory") -> tuple[bool, int | None, int, float | None]:
    ev = s.evidence
    semantic = ev.semantic if ev is not None else None
    strong = ev is not None and (bool(ev.terms) or semantic is not None)
    words = len(s.memory.processed_content.split()) if s.memory.category in CORE_CATEGORIES else None
    return strong, words, to_us(s.memory.created_at) or 0, semantic


def rerank_key(s: "ScoredMemory", windows: "Sequence[tuple[int, int]]") -> tuple[bool, float, float, int, str]:
    """:func:`rerank_order` of a scored memory."""
    strong, words, created, semantic = _rank_fields(s)
    return rerank_order(strong, s.breakdown.topic, words, created, semantic, s.score, s.memory.id, windows)


def rerank(results: "Sequence[ScoredMemory]", query: str, limit: int) -> "list[ScoredMemory]":
    """The evidence mode's bounded second pass: ``results`` (the gate's first
    ``max(limit, RERANK_DEPTH)`` for ``query``, in the evidence order) re-ordered by
    :func:`rerank_key`, the first ``limit`` of them, each with its ``Evidence.rank`` set. The
    gate chose *which* memories have evidence enough; this orders a bounded number of them by
    what the class-based first pass cannot see per memory (its length, its date), so it costs
    O(RERANK_DEPTH) per query and every path (index, cold path, full scan) applies it to the same
    exact candidates."""
    windows = text.query_dates(query)
    out = []
    for s in sorted(results, key=lambda s: rerank_key(s, windows))[:limit]:
        if s.evidence is not None:
            _, words, created, semantic = _rank_fields(s)
            s = replace(s, evidence=replace(
                s.evidence, rank=evidence_rank(s.breakdown.topic, words, created, semantic, windows)))
        out.append(s)
    return out


# --- the reference: a full scan ---------------------------------------------------------------


class FullScan:
    """The reference path: the formula over every active memory of one profile, statistics (IDF,
    maturity) over those. Each memory's terms are tokenised once, here, so that many queries can
    be ranked against one corpus (the exactness tests, the bench's full-scan baseline)."""

    def __init__(self, memories: Iterable[Memory]) -> None:
        self.memories = [m for m in memories if m.is_active]
        self.terms = [memory_terms(m.processed_content, m.summary) for m in self.memories]
        self.clusters = [clusters_of(ts) for ts in self.terms]
        self.df: dict[str, int] = {}
        for ts in self.terms:
            for t in ts:
                self.df[t] = self.df.get(t, 0) + 1

    def rank(self, rq: RankQuery) -> list[ScoredMemory]:
        """The top ``rq.limit`` under ``rq.ranking`` (evidence gate or the spec's rule).

        ``rq.similarity`` (evidence mode only): the semantic signal's embedding top-k as id ->
        cosine (:meth:`memlocal.recall.semantic.SemanticIndex.similar`); each of those memories' topic
        gains :func:`similarity_bonus` (:func:`with_similarity`). The spec mode ignores it.
        """
        now_us = rq.now_us()
        ranking, limit, min_score = rq.ranking, rq.limit, rq.min_score
        mat = maturity(sum(m.access_count for m in self.memories))
        w = weights_for(mat)
        pq = prepare_query(rq.text, lambda t: self.df.get(t, 0), len(self.memories))
        # A query with no usable words gives no evidence, semantic or other.
        similarity = rq.similarity if ranking.gated and not pq.empty else None
        excluded, tier = set(rq.exclude_ids), rq.tier
        out = []
        rows: list[Row] = []
        for m, ts, cs in zip(self.memories, self.terms, self.clusters):
            if (excluded and m.id in excluded) or (tier is not None and not _in_tier(m.category, tier)):
                continue
            created = to_us(m.created_at)
            assert created is not None
            anchor = max(created, to_us(m.last_accessed_at) or created)
            use = usage(m.access_count)
            cm = confidence_mul(m.confidence)
            score, rec, top = score_parts(anchor, now_us, use, cm, ts, cs, pq, w)
            if ranking.gated:
                cos = similarity.get(m.id) if similarity else None
                if cos is not None:
                    score, top, cos = with_similarity(score, rec, use, cm, top, cos, w)
                if top > 0.0:  # only a memory with evidence can pass the gate (gate_select)
                    rows.append(((m, created, use, cm, ts, cs, cos), score, rec, top))
            elif score >= min_score:
                breakdown = Breakdown(rec, use, top, cm, w, mat, score)
                out.append((rank_key(score, created, m.id), ScoredMemory(m, score, breakdown)))
        if ranking.gated:
            kept, best = gate_select(rows, limit=max(limit, RERANK_DEPTH), ratio=ranking.ratio, min_score=min_score,
                                     ident=lambda item: (item[1], item[0].id),
                                     strong=lambda item: item[6] is not None or literal(pq, item[4]))
            return rerank([ScoredMemory(m, score, Breakdown(rec, use, top, cm, w, mat, score),
                                        evidence_of(pq, ts, cs, top, best, cos))
                           for (m, _, use, cm, ts, cs, cos), score, rec, top in kept], rq.text, limit)
        out.sort(key=lambda pair: pair[0])
        return [s for _, s in out[:limit]]


def rank_brute_force(memories: Iterable[Memory], rq: RankQuery) -> list[ScoredMemory]:
    """Score every active memory of ``memories`` (one profile's) with the formula and return the
    top ``rq.limit`` (the reference path; :class:`FullScan` ranks many queries on one corpus)."""
    return FullScan(memories).rank(rq)
