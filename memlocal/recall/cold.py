"""The cold path: a query answered from the persisted FTS5 features, without an index in memory
(:func:`cold_query`): a process's first queries, and those while the index is built."""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass
from typing import Any, Callable, Final, Iterable, Iterator, Mapping, NamedTuple, Sequence

from ..relevance.features import CLUSTER_PREFIX, cluster_token, encode_term, features_of, scope_token, term_token
from ..model import CORE_CATEGORIES
from ..store.recall_reads import RecallReads
from ..relevance.scoring import (
    PREFERENCE_TIER,
    PreparedQuery,
    RankQuery,
    Weights,
    confidence_mul,
    gate_select,
    literal,
    maturity,
    prepare_query,
    rank_key,
    recency,
    score_parts,
    score_with_topic,
    topic,
    usage,
    weights_for,
    with_similarity,
)
from .classes import EPS, MAX_COMMON, RecallTuning, offer, gated_classes, split_features

# A class of memories (one set of common features held) up to this size is read in the order
# SQLite gives it (``RecallReads.by_hint``); a larger, dense one is walked in the two indexed orders.
COLD_DIRECT: Final = 1024
# The cold path reads up to this many postings of the query's rarest features row by row.
_COLD_BUDGET: Final = 256
# FTS5 parses an OR chain into a tree at most 256 deep: held_any asks about this many terms at a time.
_ANY_CHUNK: Final = 128
# How far the hint may be from the exact score (a few ulps of pow and log10; scores are ≤ 1).
_HINT_EPS: Final = 1e-9


class ColdHit:
    """A candidate read straight from the store by :func:`cold_query` (no index built)."""

    __slots__ = ("id", "created_us", "use", "cm", "features")

    def __init__(self, mid: str, created_us: int, use: float, cm: float, features: str) -> None:
        self.id = mid
        self.created_us = created_us
        self.use = use
        self.cm = cm
        self.features = features  # the stored features string (memlocal.relevance.features)


class ColdRow(NamedTuple):
    """A candidate of the cold path as it is ranked: the memory read, its score and the parts the
    breakdown shows."""

    hit: ColdHit
    score: float
    recency: float
    topic: float


@dataclass(frozen=True, slots=True)
class ColdAnswer:
    """What :func:`cold_query` found: the gate's rows, the best topic, the similarity that
    counted per kept id, and the query and weights they were scored with."""

    kept: list[ColdRow]
    best: float
    counted: dict[str, float]
    pq: PreparedQuery
    weights: Weights
    maturity: float


Member = Callable[[str], "float | None"]  # a padded features string -> its topic in a walk, None: not walked


def _in_class(want: Sequence[str], unwanted: Sequence[str], top: float, padded: str) -> float | None:
    """A walk's member test for one class of common features: holds every one of ``want`` and
    none of ``unwanted`` (each a padded token); its topic is the class's."""
    if all(tok in padded for tok in want) and not any(tok in padded for tok in unwanted):
        return top
    return None


def _featureless(every: Sequence[str], padded: str) -> float | None:
    """A walk's member test for the memories holding no query feature (topic 0)."""
    return None if any(tok in padded for tok in every) else 0.0


def _ident(h: ColdHit) -> tuple[int, str]:
    return h.created_us, h.id


def _rank(r: ColdRow) -> tuple[float, int, str]:
    return rank_key(r.score, r.hit.created_us, r.hit.id)


class _ColdScan:
    """One cold query's state and steps (:func:`cold_query` runs them in order): the profile's
    statistics, the query prepared against them, the memories seen, the rows scored so far and
    the similarity that counted. Runs inside the caller's read transaction."""

    def __init__(self, reads: RecallReads, profile: str, rq: RankQuery, *, spec: bool, direct: int,
                 max_rows: int | None) -> None:
        self.reads, self.profile, self.now_us, self.limit, self.tier, self.spec = (
            reads, profile, rq.now_us(), rq.limit, rq.tier, spec)
        self.direct, self.max_rows = direct, max_rows
        self.n, accesses = reads.totals(profile)
        self.maturity = maturity(accesses)
        self.w = weights_for(self.maturity)
        # When no other profile has an active memory, every indexed document is this profile's: the
        # scope token (a posting list as long as the bank) is left out of the matches.
        self.scope = f"{scope_token(profile)} AND " if reads.others_active(profile) else ""
        # Rows without stored features (written by raw SQL, not derived yet): tokenised here. And the
        # new memories not in the FTS5 index yet (waiting for their batch): read with their features.
        # Both are counted in the document frequencies and visited first, whatever the matches find.
        stale = reads.stale(profile)
        stale_features = [features_of(r[8], r[9]) for r in stale]
        waiting = reads.waiting(profile)
        self.stale = stale + waiting
        self.stale_features = stale_features + [r[6] for r in waiting]
        self.stale_tokens = [frozenset(f.split()) for f in self.stale_features]
        self.dfs: dict[str, int] = {}
        self.sim = {} if spec else (rq.similarity or {})
        self.seen: set[str] = set(rq.exclude_ids)
        self.excluded = set(self.seen)
        self.rows: list[ColdRow] = []
        self.counted: dict[str, float] = {}
        self.topics: dict[int, float] = {}

    def df(self, term: str) -> int:
        """A term's document frequency: the FTS5 table's count plus the rows waiting for it."""
        dfs = self.dfs
        if term not in dfs:
            tok = encode_term(term)
            dfs[term] = (self.reads.count(self.scope + term_token(term))
                         + sum(1 for ts in self.stale_tokens if tok in ts))
        return dfs[term]

    def held_any(self, terms: Sequence[str]) -> bool:
        """Whether some memory holds one of ``terms``: one FTS5 count per ``_ANY_CHUNK`` of them
        (a misspelt query word's neighbours, :func:`memlocal.relevance.scoring.prepare_query`), not one each."""
        for i in range(0, len(terms), _ANY_CHUNK):
            if self.reads.count(f"{self.scope}({' OR '.join(map(term_token, terms[i:i + _ANY_CHUNK]))})") > 0:
                return True
        toks = {encode_term(t) for t in terms}
        return any(not toks.isdisjoint(ts) for ts in self.stale_tokens)

    def prepare(self, query: str) -> PreparedQuery:
        """The query, its tokens as the features string holds them, and as FTS5 tokens."""
        pq = self.pq = prepare_query(query, self.df, self.n, self.held_any)
        # The same query over the stored string: each feature as " token " is found in " features "
        # exactly when the memory has it (tokens hold no space), so score_parts can test membership
        # on the string without splitting it; the same weights in the same order, so the same floats.
        self.pq_tok = PreparedQuery(tuple(f" {encode_term(t)} " for t in pq.terms), pq.weights,
                                    tuple(f" {CLUSTER_PREFIX}{c} " for c in pq.clusters), pq.cluster_weights,
                                    pq.denominator)
        self.padded_toks = self.pq_tok.terms + self.pq_tok.clusters
        self.fts_toks = [term_token(t) for t in pq.terms] + [cluster_token(c) for c in pq.clusters]
        return pq

    def plan(self, essential_budget: int | None) -> None:
        """Which features are read posting by posting (selective), which split into classes."""
        pq = self.pq
        weights = pq.weights + pq.cluster_weights
        feats: list[tuple[int, float, int]] = []
        for i, tok in enumerate(self.fts_toks):
            size = (self.df(pq.terms[i]) if i < len(pq.terms)
                    else self.reads.count(self.scope + tok))
            if size > 0:  # nothing holds it (stale rows are visited anyway)
                feats.append((size, weights[i], i))
        budget = _COLD_BUDGET if essential_budget is None else essential_budget
        selective, common, _ = split_features(feats, budget)
        if len(common) > MAX_COMMON:
            selective += common[:-MAX_COMMON]
            common = common[-MAX_COMMON:]
        self.selective, self.common = selective, common
        self.ordered_sql = self.reads.has_math()

    def topic_of(self, mask: int) -> float:
        t = self.topics.get(mask)
        if t is None:
            pq = self.pq
            nt = len(pq.terms)
            t = self.topics[mask] = topic(pq, frozenset(x for j, x in enumerate(pq.terms) if mask >> j & 1),
                                          frozenset(x for j, x in enumerate(pq.clusters) if mask >> (nt + j) & 1))
        return t

    def in_tier(self, category: str) -> bool:
        tier = self.tier
        if tier == PREFERENCE_TIER:
            return category == "preference"
        return tier is None or (category in CORE_CATEGORIES) == (tier == "core")

    def visit(self, r: Sequence[Any], features: str) -> None:
        """Score one row (once; with its similarity, evidence mode) and keep it if it holds a
        query feature (any row, in spec mode)."""
        (mid, created_us, last_us, count, confidence, category) = r[:6]
        if mid in self.seen:
            return
        self.seen.add(mid)
        if not self.in_tier(category):
            return
        anchor = max(created_us, last_us or created_us)
        use, cm = usage(count), confidence_mul(confidence)
        padded = f" {features} "  # encoded terms and "@cluster"s: one string serves as both
        w = self.w
        score, rec, top = score_parts(anchor, self.now_us, use, cm, padded, padded, self.pq_tok, w)
        if self.sim:
            score, top, cos = with_similarity(score, rec, use, cm, top, self.sim.get(mid), w)
            if cos is not None:
                self.counted[mid] = cos
        if top > 0.0 or self.spec:
            self.rows.append(ColdRow(ColdHit(mid, created_us, use, cm, features), score, rec, top))

    def read(self, match: str) -> None:
        """Visit every memory of the profile an FTS5 expression matches."""
        for r in self.reads.matching(match, self.profile):
            self.visit(r, r[6])

    def read_candidates(self) -> None:
        """Visit the rows waiting for the FTS5 index, those holding a selective feature, and the
        similarity top-k (read by id)."""
        for r, f in zip(self.stale, self.stale_features):
            self.visit(r, f)
        if self.selective:
            self.read(f"{self.scope}({' OR '.join(self.fts_toks[i] for i in self.selective)})")
        wanted = [mid for mid in self.sim if mid not in self.seen]
        if wanted:  # the similarity top-k that shares no selective feature: read by id
            for r in self.reads.by_ids(self.profile, wanted):
                self.visit(r, r[6] if r[6] is not None else features_of(r[8], r[9]))

    def read_preferences(self) -> None:
        """Visit every preference of the profile (few)."""
        for r in self.reads.preferences(self.profile):
            self.visit(r, r[6] if r[6] is not None else features_of(r[8], r[9]))

    def _walk_head(self, cursor: Iterator[Sequence[Any]], head: tuple[Sequence[Any], str, float] | None,
                   done: set[str], member: Member) -> tuple[Sequence[Any], str, float] | None:
        """The next row of one order that the walk takes (``head`` if still unvisited): not
        done, not seen, derived, in the tier and a ``member`` (with its padded features and topic)."""
        if head is not None and head[0][0] not in done:
            return head
        seen = self.seen
        for r in cursor:
            if r[0] in done or r[0] in seen or r[6] is None or not self.in_tier(r[5]):
                continue
            padded = f" {r[6]} "
            t = member(padded)
            if t is not None:
                return (r, padded, t)
        return None

    def walk(self, member: Member, top_bound: float, floor: float) -> list[ColdRow]:
        """The threshold walk over the store's two orders: every row that ``member`` accepts
        (its topic) and that could still reach the ``limit``-th score (at least ``floor``) is
        scored; any other has anchor ≤ the anchor at the first order's position and access count
        ≤ the count at the second's (and confidenceMul ≤ 1), so its score is at most
        wR·recency + wU·usage of those + wT·``top_bound``; the walk stops below the ``limit``-th."""
        reads, profile, now_us, limit, w = self.reads, self.profile, self.now_us, self.limit, self.w
        by_anchor = reads.by_anchor(profile)
        by_count = reads.by_count(profile) if w.usage > 0.0 else None
        hx: tuple[Sequence[Any], str, float] | None = None
        hy: tuple[Sequence[Any], str, float] | None = None
        done: set[str] = set()
        found: list[ColdRow] = []
        best: list[float] = []
        while True:
            hx = self._walk_head(by_anchor, hx, done, member)
            if hx is None:
                break
            hy = self._walk_head(by_count, hy, done, member) if by_count is not None else None
            r = hx[0]
            bx = recency(max(r[1], r[2] or r[1]), now_us)
            by = usage(hy[0][3]) if hy is not None else 0.0
            threshold = max(best[0], floor) if len(best) >= limit else floor
            if w.recency * bx + w.usage * by + w.topic * top_bound + EPS < threshold:
                break
            r, padded, t = hy if (hy is not None and w.usage * by > w.recency * bx) else hx
            done.add(r[0])
            anchor = max(r[1], r[2] or r[1])
            use, cm = usage(r[3]), confidence_mul(r[4])
            s, rec, top = score_with_topic(anchor, now_us, use, cm, t, w)
            if s < floor:
                continue
            if not offer(best, s, limit):
                continue
            found.append(ColdRow(ColdHit(r[0], r[1], use, cm, r[6]), s, rec, top))
        self.seen.update(done)
        return found

    def ordered(self, match: str, top: float) -> list[ColdRow]:
        """The best ``limit`` of a class (topic ``top``) by score: SQLite orders the class's rows
        by the score it computes (a hint: its pow and log10 may differ from Python's in the last
        bits), each row read is scored exactly here, and the read stops once a row's hint is below
        the ``limit``-th exact score by more than any such difference (so are all after it)."""
        now_us, limit, w, seen = self.now_us, self.limit, self.w, self.seen
        found: list[ColdRow] = []
        best: list[float] = []
        for cap in (4 * limit + 8, None):  # most classes end within a few rows: a bounded sort first
            found.clear()
            best.clear()
            returned, stopped = 0, False
            for r in self.reads.by_hint(match, self.profile, (w.recency, w.usage, w.topic * top), now_us, cap):
                returned += 1
                if len(best) >= limit and r[7] + _HINT_EPS < best[0]:
                    stopped = True
                    break
                mid = r[0]
                if mid in seen or not self.in_tier(r[5]):
                    continue
                anchor = max(r[1], r[2] or r[1])
                use, cm = usage(r[3]), confidence_mul(r[4])
                s, rec, _ = score_with_topic(anchor, now_us, use, cm, top, w)
                if not offer(best, s, limit):
                    continue
                found.append(ColdRow(ColdHit(mid, r[1], use, cm, r[6]), s, rec, top))
            if stopped or cap is None or returned < cap:
                break
        seen.update(r.hit.id for r in found)
        return found

    def classes(self) -> list[tuple[float, int]]:
        """The classes of the memories holding only common features, best topic first: one per
        subset (its mask of the features held), with its topic."""
        common = self.common
        pending: list[tuple[float, int]] = []
        for sub in range(1, 1 << len(common)):
            m = 0
            for j, i in enumerate(common):
                if sub >> j & 1:
                    m |= 1 << i
            pending.append((self.topic_of(m), m))
        pending.sort(key=lambda c: -c[0])
        return pending

    def class_rows(self, top: float, m: int) -> list[ColdRow] | None:
        """The best ``limit`` of one class by score (``None``: the ``max_rows`` test knob). Its
        FTS5 expression: the held features AND-ed, NOT any other feature."""
        common, selective, fts_toks, scope = self.common, self.selective, self.fts_toks, self.scope
        held = [i for i in common if m >> i & 1]
        others = selective + [i for i in common if not m >> i & 1]
        match = f"({scope}{' AND '.join(fts_toks[i] for i in held)})"
        if others:
            match += f" NOT ({' OR '.join(fts_toks[i] for i in others)})"
        size = self.reads.count(match)
        if size == 0:
            return []
        direct = self.direct
        if self.max_rows is not None and size > self.max_rows and size <= direct:
            return None
        if size <= direct and not self.ordered_sql:
            rows = self.rows
            before = len(rows)
            self.read(match)
            found = rows[before:]
            del rows[before:]
            return found
        if size <= direct or size * 16 < self.n:  # sparse: a walk would skip more rows than it reads
            return self.ordered(match, top)
        padded_toks = self.padded_toks
        member = functools.partial(_in_class, [padded_toks[i] for i in held], [padded_toks[i] for i in others], top)
        return self.walk(member, top, float("-inf"))

    def top(self, min_score: float) -> list[ColdRow]:
        """The spec mode's answer: the best ``limit`` rows at or above ``min_score``, not excluded."""
        excluded = self.excluded
        scored = [r for r in self.rows if r.score >= min_score and r.hit.id not in excluded]
        return heapq.nsmallest(self.limit, scored, key=_rank)

    def strong(self, h: ColdHit) -> bool:
        """Strong evidence: a query term held, or a similarity that counted."""
        return h.id in self.counted or literal(self.pq_tok, f" {h.features} ")

    def strong_row(self, r: ColdRow) -> bool:
        return self.strong(r.hit)


def cold_query(reads: RecallReads, profile: str, rq: RankQuery, tuning: RecallTuning = RecallTuning()) -> ColdAnswer | None:
    """``rq`` over ``profile`` answered from the persisted features, without building an index:
    in evidence mode the gated top ``rq.limit`` (the spec mode's top-k when ``rq.ranking`` is
    :data:`~memlocal.relevance.scoring.SPEC`, see the end). ``tuning``: the speed knobs it reads
    (``essential_budget``, ``cold_max_rows``, ``direct``); none changes the answer.

    The rows are :func:`gate_select` over every active memory of ``profile`` that shares a term
    or a cluster with ``rq.text`` (or is in the ``rq.similarity`` top-k), in ``rq.tier`` and not
    excluded, each scored at ``rq.now`` with :func:`score_parts` (and :func:`with_similarity`):
    the full scan's answer, float for float.

    Statistics are the profile's true ones: N and the accesses from ``profile_revs`` (kept by
    triggers), each term's document frequency from the FTS5 table ``memory_features`` (plus rows
    whose features are not derived yet, tokenised here). The memories holding a *selective*
    feature (a short posting list) are read and scored. Those holding only *common* ones fall
    into classes, one per subset of the common features held, each with one topic; they are
    taken best topic first, as the in-memory index does, and a class is sized with an FTS5
    count: a small one (up to ``tuning.direct`` memories, :data:`COLD_DIRECT` by default) is read whole; a large one is walked in the
    two orders the store indexes (memories by anchor, newest first, and by access count), which
    stops once no member not read yet could reach the class's ``limit``-th score. So a query
    reads a bounded number of rows however common its words. ``tuning.cold_max_rows``: when a class
    to read whole holds more, ``None`` (the caller builds the index instead; a test knob). Runs inside
    the caller's read transaction.

    Spec mode: the spec's literal top ``rq.limit`` by score (no gate, ``rq.similarity`` ignored):
    the memories holding a selective feature are read and scored, then one walk over both orders
    scores the others (their topic is at most that of all the common features).
    """
    spec = not rq.ranking.gated
    limit, min_score, ratio, tier = rq.limit, rq.min_score, rq.ranking.ratio, rq.tier
    scan = _ColdScan(reads, profile, rq, spec=spec,
                     direct=COLD_DIRECT if tuning.direct is None else tuning.direct, max_rows=tuning.cold_max_rows)
    pq = scan.prepare(rq.text)
    if pq.empty and not spec:
        return ColdAnswer([], 0.0, {}, pq, scan.w, scan.maturity)
    scan.plan(tuning.essential_budget)
    scan.read_candidates()
    pending = scan.classes()
    rows = scan.rows
    if spec and tier == PREFERENCE_TIER:
        scan.read_preferences()  # a profile's preferences are few: every one is read and scored
        return ColdAnswer(scan.top(min_score), 0.0, {}, pq, scan.w, scan.maturity)
    if spec:
        # Each class's best (a class whose best possible score is below the k-th so far ends
        # this), then one walk over the memories holding no query feature (topic 0).
        w = scan.w
        for top, m in pending:
            kth = heapq.nlargest(limit, [r.score for r in rows if r.score >= min_score])
            if len(kth) >= limit and w.recency + w.usage + w.topic * top + EPS < kth[-1]:
                break
            found = scan.class_rows(top, m)
            if found is None:
                return None
            rows += found
        rows += scan.walk(functools.partial(_featureless, scan.padded_toks), 0.0, min_score)
        return ColdAnswer(scan.top(min_score), 0.0, {}, pq, scan.w, scan.maturity)

    # Evidence mode: the classes best topic first, as the in-memory index takes them.
    best = max((r.topic for r in rows), default=0.0)
    term_bits = (1 << len(pq.terms)) - 1
    for top, m in gated_classes(pending, rows, best, ratio=ratio, min_score=min_score, limit=limit,
                                term_bits=term_bits, strong_of=scan.strong_row):
        found = scan.class_rows(top, m)
        if found is None:
            return None  # a test knob: the caller builds the index instead
        rows += found
    kept, best = gate_select(rows, limit=limit, ratio=ratio, min_score=min_score, ident=_ident, strong=scan.strong)
    counted = scan.counted
    return ColdAnswer(kept, best, {r.hit.id: counted[r.hit.id] for r in kept if r.hit.id in counted},
                      pq, scan.w, scan.maturity)
