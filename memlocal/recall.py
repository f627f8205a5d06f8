"""The recall index: an exact, fast top-k of one profile's memories for a query.

:class:`RecallIndex` keeps, per profile, the memories' terms, an inverted index, and two orders
(by confidenceMul·recency, by confidenceMul·usage), and runs a threshold-algorithm walk that
scores exactly every memory that could still reach the top-k and stops once an upper bound on
all the others falls below the k-th best score. It scores with :func:`memlocal.scoring.score_parts`,
the function the reference full scan (:func:`memlocal.scoring.rank_brute_force`) uses, so the
floats, and hence the ranking, are identical. The formula itself lives in :mod:`memlocal.scoring`
(pure); this module adds what needs the store: reading rows and keeping the index fresh.
"""

from __future__ import annotations

import bisect
import heapq
import math
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Iterable, Mapping, Sequence, TypeVar

from .features import CLUSTER_PREFIX, cluster_token, encode_term, features_of, scope_token, term_token
from .features import parse as parse_features
from .features import term_count
from .model import CORE_CATEGORIES, to_us, utcnow
from .scoring import (
    HALF_LIFE_DAYS,
    PREFERENCE_TIER,
    US_PER_DAY,
    Breakdown,
    PreparedQuery,
    Ranking,
    Row,
    ScoredMemory,
    Weights,
    rank_key,
    confidence_mul,
    evidence_of,
    gate_select,
    literal,
    maturity,
    prepare_query,
    score_parts,
    score_with_topic,
    topic,
    usage,
    weights_for,
    with_similarity,
)
from .store import Store

# Slack for float rounding in the pruning bound: a memory is skipped only when its bound is below
# the k-th best score by more than this, so ties and near-ties are always scored exactly.
_EPS: Final = 1e-9
_LN2_PER_US: Final = math.log(2.0) / (HALF_LIFE_DAYS * US_PER_DAY)


class _Entry:
    """What the index keeps of one active memory."""

    __slots__ = ("id", "created_us", "anchor_us", "count", "cm", "use", "tier", "terms", "clusters", "kx", "y",
                 "features", "length", "preference")

    def __init__(self, row: Sequence[Any], t0_us: int, like: "_Entry | None" = None) -> None:
        (mid, created_us, last_us, count, confidence, category, features, _active, processed, summary) = row[:10]
        self.id: str = mid
        self.created_us: int = created_us
        self.anchor_us: int = max(created_us, last_us or created_us)
        self.count: int = count
        self.cm: float = confidence_mul(confidence)
        self.use: float = usage(count)
        self.tier: str = "core" if category in CORE_CATEGORIES else "other"
        self.preference: bool = category == "preference"
        # The stored features (memlocal.features); a row written without them is tokenised here.
        self.terms: frozenset[str]
        self.clusters: frozenset[str]
        self.features: str | None = features
        if like is not None and features is not None and like.features == features:
            self.terms, self.clusters = like.terms, like.clusters  # same stored features: same sets
        else:
            self.terms, self.clusters = parse_features(features if features is not None
                                                       else features_of(processed, summary))
        self.length: int = len(self.terms)  # the topic's length normalisation
        # Static sort keys: cm·recency = exp(kx − ln2·(now − t0)/halflife) for every ``now``,
        # so ordering by kx orders by cm·recency at any time; y = cm·usage does not move.
        self.kx: float = math.log(self.cm) + (self.anchor_us - t0_us) * _LN2_PER_US
        self.y: float = self.cm * self.use


# The text is read only for a row without stored features (``NULL``: derived lazily).
_ROW_SQL: Final = (
    "SELECT id, created_us, last_accessed_us, access_count, confidence, category, features, is_active,"
    " CASE WHEN features IS NULL THEN processed_content END, CASE WHEN features IS NULL THEN summary END"
    " FROM memories WHERE profile = ?"
)


F = TypeVar("F")


def split_features(feats: list[tuple[int, float, F]], budget: int) -> tuple[list[F], list[F], float]:
    """Split a query's features, given as (posting-list size, weight, list), into *selective*
    ones, the shortest lists up to ``budget`` postings in all, whose memories are scored up
    front, and *common* ones, long lists of light (low IDF) features; and the summed weight of
    the common ones, which bounds the topic a memory holding only those can reach. Every ranking
    path (the index's walk, its gate, the cold path) splits this one way."""
    feats = sorted(feats, key=lambda f: f[0])
    selective: list[F] = []
    common: list[F] = []
    spent, rest = 0, 0.0
    for size, wt, item in feats:
        if spent + size <= budget:
            spent += size
            selective.append(item)
        else:
            common.append(item)
            rest += wt
    return selective, common, rest


def default_budget(n: int) -> int:
    """How many postings are scored up front for a profile of ``n`` memories: max(256, n/16)."""
    return max(256, n // 16)


def _move(lst: list[tuple[float, str]], old: tuple[float, str], new: tuple[float, str]) -> None:
    """Replace ``old`` by ``new`` in the sorted ``lst``."""
    i = bisect.bisect_left(lst, old)
    if i < len(lst) and lst[i] == old:
        del lst[i]
    bisect.insort(lst, new)


class ProfileIndex:
    """The recall index of one profile, kept current incrementally (see :class:`RecallIndex`)."""

    def __init__(self, t0_us: int) -> None:
        self.t0_us = t0_us
        self.entries: dict[str, _Entry] = {}
        self.postings: dict[str, set[str]] = {}
        self.cluster_postings: dict[str, set[str]] = {}
        self.preferences: set[str] = set()  # the "preference" tier: few, scored directly
        self.total_accesses = 0
        # Per tier (None = all): ascending lists of (-kx, id) and (-y, id), i.e. best first.
        self.by_x: dict[str | None, list[tuple[float, str]]] = {None: [], "core": [], "other": []}
        self.by_y: dict[str | None, list[tuple[float, str]]] = {None: [], "core": [], "other": []}
        # Moves of those lists' items not made yet (access bumps): the evidence gate never reads
        # the lists, so a recall's own bumps cost nothing there; whatever reads or edits them
        # first makes them (``_sorted``).
        self._moves: list[tuple[str, tuple[float, str], tuple[float, str], tuple[float, str], tuple[float, str]]] = []
        self.rev = -1
        self.resets = -1

    # -- maintenance --

    def _sorted(self) -> None:
        """Make the pending moves of the sorted lists: one by one when they are few, else by
        re-sorting each list once (nearly sorted already, so about linear)."""
        moves, self._moves = self._moves, []
        if len(moves) <= 32:
            for tier, old_x, new_x, old_y, new_y in moves:
                for key in (None, tier):
                    _move(self.by_x[key], old_x, new_x)
                    _move(self.by_y[key], old_y, new_y)
            return
        # A moved id's tier did not change and nothing else touched it since (add and remove
        # make the moves first), so its current entry holds its final place.
        gone = {m[1][1] for m in moves}
        moved = [self.entries[i] for i in gone]
        for lists, sort_key in ((self.by_x, lambda e: -e.kx), (self.by_y, lambda e: -e.y)):
            for key, lst in lists.items():
                lst[:] = [t for t in lst if t[1] not in gone]
                lst += [(sort_key(e), e.id) for e in moved if key is None or e.tier == key]
                lst.sort()

    def add(self, e: _Entry, *, sort: bool = True) -> None:
        if self._moves:
            self._sorted()
        self.entries[e.id] = e
        if e.preference:
            self.preferences.add(e.id)
        for t in e.terms:
            self.postings.setdefault(t, set()).add(e.id)
        for c in e.clusters:
            self.cluster_postings.setdefault(c, set()).add(e.id)
        self.total_accesses += e.count
        for key in (None, e.tier):
            if sort:
                bisect.insort(self.by_x[key], (-e.kx, e.id))
                bisect.insort(self.by_y[key], (-e.y, e.id))
            else:
                self.by_x[key].append((-e.kx, e.id))
                self.by_y[key].append((-e.y, e.id))

    def remove(self, memory_id: str) -> _Entry | None:
        if self._moves:
            self._sorted()
        e = self.entries.pop(memory_id, None)
        if e is None:
            return None
        self.preferences.discard(memory_id)
        for t in e.terms:
            ids = self.postings[t]
            ids.discard(memory_id)
            if not ids:
                del self.postings[t]
        for c in e.clusters:
            ids = self.cluster_postings[c]
            ids.discard(memory_id)
            if not ids:
                del self.cluster_postings[c]
        self.total_accesses -= e.count
        for key in (None, e.tier):
            for lst, item in ((self.by_x[key], (-e.kx, e.id)), (self.by_y[key], (-e.y, e.id))):
                i = bisect.bisect_left(lst, item)
                if i < len(lst) and lst[i] == item:
                    del lst[i]
        return e

    def apply(self, row: Sequence[Any]) -> None:
        """Bring one changed row (as selected by ``_ROW_SQL``) into the index."""
        old = self.entries.get(row[0])
        if old is not None and row[7] == 1:
            e = _Entry(row, self.t0_us, like=old)
            if e.terms is old.terms and e.tier == old.tier:
                # An access bump (or any change that leaves the features and the tier): the
                # postings stay, only the sort keys and the counts move.
                self.entries[e.id] = e
                self.total_accesses += e.count - old.count
                self._moves.append((e.tier, (-old.kx, old.id), (-e.kx, e.id), (-old.y, old.id), (-e.y, e.id)))
                if len(self._moves) >= max(64, len(self.entries) // 16):
                    self._sorted()  # bounded: a process that never reads the lists still makes them
                return
        self.remove(row[0])
        if row[7] != 1:  # inactive: not ranked
            return
        self.add(_Entry(row, self.t0_us))

    def finish_bulk(self) -> None:
        self._sorted()
        for lists in (self.by_x, self.by_y):
            for lst in lists.values():
                lst.sort()

    # -- queries --

    def features(self, pq: PreparedQuery) -> list[tuple[int, float, set[str]]]:
        """The query's features held by some memory: (posting-list size, weight, the ids)."""
        feats: list[tuple[int, float, set[str]]] = []
        for t, wt in zip(pq.terms, pq.weights):
            ids = self.postings.get(t)
            if ids:
                feats.append((len(ids), wt, ids))
        for c, cw in zip(pq.clusters, pq.cluster_weights):
            ids = self.cluster_postings.get(c)
            if ids:
                feats.append((len(ids), cw, ids))
        return feats

    def prepare(self, query: str) -> PreparedQuery:
        postings = self.postings
        return prepare_query(query, lambda t: len(postings.get(t, ())), len(self.entries))

    def top_k(
        self,
        pq: PreparedQuery,
        *,
        now_us: int,
        limit: int,
        min_score: float,
        exclude_ids: Iterable[str] = (),
        tier: str | None = None,
        essential_budget: int | None = None,
    ) -> list[tuple[_Entry, float, float, float]]:
        """The exact top ``limit`` entries as (entry, score, recency, topic), best first.

        ``essential_budget`` caps how many postings are scored up front (default: 256 or 1/16
        of the profile); it changes only the speed, never the answer.
        """
        w = weights_for(maturity(self.total_accesses))
        entries = self.entries
        seen: set[str] = set(exclude_ids)
        scored: list[tuple[_Entry, float, float, float]] = []
        best: list[float] = []  # min-heap of the best ``limit`` scores so far
        if tier == PREFERENCE_TIER:  # a profile's preferences are few: every one is scored
            for mid in self.preferences:
                if mid not in seen:
                    e = entries[mid]
                    s, rec, top = score_parts(e.anchor_us, now_us, e.use, e.cm, e.terms, e.clusters, pq, w)
                    if s >= min_score:
                        scored.append((e, s, rec, top))
            scored.sort(key=lambda r: rank_key(r[1], r[0].created_us, r[0].id))
            return scored[:limit]

        def visit(e: _Entry) -> None:
            seen.add(e.id)
            s, rec, top = score_parts(e.anchor_us, now_us, e.use, e.cm, e.terms, e.clusters, pq, w)
            if s >= min_score:
                if len(best) < limit:
                    heapq.heappush(best, s)
                elif s >= best[0]:  # equal may still win on the tie-break
                    heapq.heapreplace(best, s)
                else:
                    return  # below the k-th best: cannot be in the top-k
                scored.append((e, s, rec, top))

        # 1. Features (query terms, then clusters) with short posting lists are "essential":
        #    every memory holding one is scored now. The others, with long lists, are common and
        #    so light (IDF); ``rest`` bounds the topic a memory holding only those can reach.
        rest = 0.0
        if not pq.empty:
            budget = default_budget(len(entries)) if essential_budget is None else essential_budget
            selective, _, rest = split_features(self.features(pq), budget)
            for ids in selective:
                for mid in ids:
                    if mid not in seen:
                        e = entries[mid]
                        if tier is None or e.tier == tier:
                            visit(e)
                        else:
                            seen.add(mid)
            rest = min(1.0, rest / pq.denominator)

        # 2. Threshold walk over the two static orders. Any memory not yet visited has
        #    cm·recency ≤ bx and cm·usage ≤ by (the values at the walk's positions), so its score
        #    is at most wR·bx + wU·by + wT·rest. Stop once that is below the k-th best score.
        if self._moves:
            self._sorted()
        xs, ys = self.by_x[tier], self.by_y[tier]
        k_now = (now_us - self.t0_us) * _LN2_PER_US
        px = py = 0
        nx, ny = len(xs), len(ys)
        topic_bound = w.topic * rest
        while px < nx:
            while px < nx and xs[px][1] in seen:
                px += 1
            while py < ny and ys[py][1] in seen:
                py += 1
            if px >= nx:
                break
            bx = math.exp(min(700.0, -xs[px][0] - k_now))  # capped: an anchor centuries ahead
            by = -ys[py][0] if py < ny else 0.0
            bound = w.recency * bx + w.usage * by + topic_bound
            threshold = max(best[0], min_score) if len(best) >= limit else min_score
            if bound + _EPS < threshold:
                break
            if w.usage * by > w.recency * bx and py < ny:
                visit(entries[ys[py][1]])
            else:
                visit(entries[xs[px][1]])
        scored.sort(key=lambda r: rank_key(r[1], r[0].created_us, r[0].id))
        return scored[:limit]


    def top_k_gated(
        self,
        pq: PreparedQuery,
        *,
        now_us: int,
        limit: int,
        min_score: float,
        ratio: float,
        exclude_ids: Iterable[str] = (),
        tier: str | None = None,
        essential_budget: int | None = None,
        similarity: Mapping[str, float] | None = None,
    ) -> tuple[list[tuple[_Entry, float, float, float]], float, dict[str, float]]:
        """The evidence-gated top ``limit`` (see :class:`Ranking`), the best topic, and the
        similarity that counted for each kept memory (the semantic signal), exactly as
        :func:`gate_select` over every memory holding a query feature, plus the ``similarity``
        top-k (:func:`memlocal.scoring.with_similarity`), would give them.

        Only memories holding a query term or cluster can pass, so only posting lists are read.
        Selective features (short lists) are scored first; the common ones bound the topic a
        memory holding only those can reach (``rest``). When the gate already keeps ``limit``
        memories whose topic is above that bound, no other memory can displace them, and the
        common lists are skipped; otherwise they are scored too. The memories of the similarity
        top-k are always scored (a memory outside it gains nothing, so the bound still holds).
        """
        if pq.empty:
            return [], 0.0, {}
        w = weights_for(maturity(self.total_accesses))
        entries = self.entries
        seen: set[str] = set(exclude_ids)
        rows: list[Row] = []
        counted: dict[str, float] = {}
        sim = similarity or {}

        best_seen = 0.0

        def visit(e: _Entry) -> None:
            nonlocal best_seen
            if sim:
                s, rec, top = score_parts(e.anchor_us, now_us, e.use, e.cm, e.terms, e.clusters, pq, w, e.length)
                s, top, cos = with_similarity(s, rec, e.use, e.cm, top, sim.get(e.id), w)
                if cos is not None:
                    counted[e.id] = cos
                rows.append((e, s, rec, top))
                return
            # Without the semantic signal the topic is known first: one below ratio × the best
            # topic seen so far fails the gate whatever comes later (the best only grows), so its
            # score is never computed. The kept rows and their floats are the same.
            top = topic(pq, e.terms, e.clusters, e.length)
            if top < ratio * best_seen:
                return
            if top > best_seen:
                best_seen = top
            rows.append((e, *score_with_topic(e.anchor_us, now_us, e.use, e.cm, top, w)))

        def visit_all(ids: Iterable[str]) -> None:
            for mid in ids:
                if mid not in seen:
                    seen.add(mid)
                    e = entries.get(mid)
                    if e is not None and (tier is None or e.tier == tier):
                        visit(e)

        budget = default_budget(len(entries)) if essential_budget is None else essential_budget
        selective, common, rest = split_features(self.features(pq), budget)
        for ids in selective:
            visit_all(ids)
        visit_all(sim)

        def ident(e: _Entry) -> tuple[int, str]:
            return e.created_us, e.id

        def strong(e: _Entry) -> bool:
            return e.id in counted or literal(pq, e.terms)

        kept, best = gate_select(rows, limit=limit, ratio=ratio, min_score=min_score, ident=ident, strong=strong)
        if common:
            bound = min(1.0, rest / pq.denominator)
            # A memory holding only common features has a topic of at most ``bound``: below the
            # gate's floor (ratio × a best that can only grow), none of them can pass. Otherwise
            # one could displace a kept memory of weaker evidence (a cluster alone), or of less.
            hopeless = bound < ratio * best - _EPS
            if not hopeless and (len(kept) < limit or not all(strong(r[0]) for r in kept)
                                 or min(r[3] for r in kept) <= bound + _EPS):
                for ids in common:
                    visit_all(ids)
                kept, best = gate_select(rows, limit=limit, ratio=ratio, min_score=min_score, ident=ident,
                                         strong=strong)
        return kept, best, {r[0].id: counted[r[0].id] for r in kept if r[0].id in counted}  # type: ignore[return-value]


# --- the cold path: a first query answered from the persisted features --------------------------

# The FTS5 match drives (CROSS JOIN keeps that order; "+" keeps the profile index out), then each
# hit is one rowid lookup in ``memories``.
_HIT_SQL: Final = (
    "SELECT m.id, m.created_us, m.last_accessed_us, m.access_count, m.confidence, m.category, m.features"
    " FROM memory_features f CROSS JOIN memories m ON m.rowid = f.rowid"
    " WHERE memory_features MATCH ? AND +m.profile = ? AND m.is_active = 1 AND m.features IS NOT NULL"
)
_COUNT_SQL: Final = "SELECT count(*) FROM memory_features WHERE memory_features MATCH ?"


class ColdHit:
    """A candidate read straight from the store by :func:`cold_query` (no index built)."""

    __slots__ = ("id", "created_us", "use", "cm", "features")

    def __init__(self, mid: str, created_us: int, use: float, cm: float, features: str) -> None:
        self.id = mid
        self.created_us = created_us
        self.use = use
        self.cm = cm
        self.features = features  # the stored features string (memlocal.features)


ColdRow = tuple[ColdHit, float, float, float]  # (hit, score, recency, topic)


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


def cold_query(
    conn: sqlite3.Connection,
    profile: str,
    query: str,
    *,
    now_us: int,
    limit: int,
    min_score: float,
    ratio: float,
    exclude_ids: Iterable[str] = (),
    tier: str | None = None,
    similarity: Mapping[str, float] | None = None,
    essential_budget: int | None = None,
    max_rows: int | None = None,
    spec: bool = False,
) -> ColdAnswer | None:
    """An evidence-gated query answered from the persisted features, without building an index
    (``spec``: the spec mode's top-k instead, see the end).

    The rows are :func:`gate_select` over every active memory of ``profile`` that shares a term
    or a cluster with ``query`` (or is in the ``similarity`` top-k), in ``tier`` and not
    excluded, each scored with :func:`score_parts` (and :func:`with_similarity`): the full
    scan's answer, float for float.

    Statistics are the profile's true ones: N and the accesses from ``profile_revs`` (kept by
    triggers), each term's document frequency from the FTS5 table ``memory_features`` (plus rows
    whose features are not derived yet, tokenised here). Candidates are read in two steps, as
    the in-memory index does: first the memories holding a *selective* feature (a short posting
    list); the *common* features are light (low IDF), and when the gate already keeps ``limit``
    memories whose topic is above what the common features alone can give, no memory holding
    only those could displace one, so they are never read. When they must be read and hold more
    than ``max_rows`` memories (default: no limit), ``None``: the caller builds the full index
    instead. Reading even most of the profile's rows costs less than building the index (which
    reads all of them and more), so by default the first query never waits for the build; a
    long-lived process builds the index on its next query. Runs inside the caller's read
    transaction.

    ``spec``: the spec's literal top ``limit`` by score (no gate, ``similarity`` ignored) needs
    every memory of the tier, so they are all read and scored from their stored features: the
    full scan, without tokenising, which still costs less than building the index (inject's core
    tier in a fresh process).
    """
    row = conn.execute("SELECT active, accesses FROM profile_revs WHERE profile = ?", (profile,)).fetchone()
    n, accesses = row if row is not None else (0, 0)
    mat = maturity(accesses)
    w = weights_for(mat)
    # When no other profile has an active memory, every indexed document is this profile's: the
    # scope token (a posting list as long as the bank) is left out of the matches.
    others = conn.execute("SELECT 1 FROM profile_revs WHERE profile <> ? AND active > 0 LIMIT 1",
                          (profile,)).fetchone()
    scope = f"{scope_token(profile)} AND " if others else ""
    # Rows without stored features (written by raw SQL, not derived yet): tokenised here.
    stale = conn.execute(_ROW_SQL + " AND features IS NULL AND is_active = 1", (profile,)).fetchall()
    stale_features = [features_of(r[8], r[9]) for r in stale]
    stale_tokens = [frozenset(f.split()) for f in stale_features]
    dfs: dict[str, int] = {}

    def df(term: str) -> int:
        if term not in dfs:
            tok = encode_term(term)
            dfs[term] = (conn.execute(_COUNT_SQL, (scope + term_token(term),)).fetchone()[0]
                         + sum(1 for ts in stale_tokens if tok in ts))
        return dfs[term]

    pq = prepare_query(query, df, n)
    if pq.empty and not spec:
        return ColdAnswer([], 0.0, {}, pq, w, mat)
    # The same query over the stored string: each feature as " token " is found in " features "
    # exactly when the memory has it (tokens hold no space), so score_parts can test membership
    # on the string without splitting it; the same weights in the same order, so the same floats.
    pq_tok = PreparedQuery(tuple(f" {encode_term(t)} " for t in pq.terms), pq.weights,
                           tuple(f" {CLUSTER_PREFIX}{c} " for c in pq.clusters), pq.cluster_weights, pq.denominator)
    if spec:
        return ColdAnswer(_scan(conn, profile, pq_tok, w, now_us=now_us, limit=limit, min_score=min_score,
                                excluded=set(exclude_ids), tier=tier), 0.0, {}, pq, w, mat)
    feats: list[tuple[int, float, str]] = [(pq_df, wt, term_token(t)) for t, wt, pq_df in
                                           zip(pq.terms, pq.weights, (df(t) for t in pq.terms))]
    for c, cw in zip(pq.clusters, pq.cluster_weights):
        size = conn.execute(_COUNT_SQL, (scope + cluster_token(c),)).fetchone()[0]
        feats.append((size, cw, cluster_token(c)))
    feats = [f for f in feats if f[0] > 0]  # nothing holds it (stale rows are visited anyway)
    budget = default_budget(n) if essential_budget is None else essential_budget
    selective, common, rest = split_features(feats, budget)
    sizes = {token: size for size, _, token in feats}
    common_rows = sum(sizes[token] for token in common)
    sim = similarity or {}
    seen: set[str] = set(exclude_ids)
    rows: list[ColdRow] = []
    counted: dict[str, float] = {}

    def visit(r: Sequence[Any], features: str) -> None:
        (mid, created_us, last_us, count, confidence, category) = r[:6]
        if mid in seen:
            return
        seen.add(mid)
        if tier is not None and (category in CORE_CATEGORIES) != (tier == "core"):
            return
        anchor = max(created_us, last_us or created_us)
        use, cm = usage(count), confidence_mul(confidence)
        padded = f" {features} "  # encoded terms and "@cluster"s: one string serves as both
        score, rec, top = score_parts(anchor, now_us, use, cm, padded, padded, pq_tok, w, term_count(features))
        if sim:
            score, top, cos = with_similarity(score, rec, use, cm, top, sim.get(mid), w)
            if cos is not None:
                counted[mid] = cos
        if top > 0.0:
            rows.append((ColdHit(mid, created_us, use, cm, features), score, rec, top))

    def read(match: str) -> None:
        for r in conn.execute(_HIT_SQL, (match, profile)):
            visit(r, r[6])

    for r, f in zip(stale, stale_features):
        visit(r, f)
    if selective:
        read(f"{scope}({' OR '.join(selective)})")
    wanted = [mid for mid in sim if mid not in seen]
    if wanted:  # the similarity top-k that shares no selective feature: read by id
        marks = ", ".join("?" for _ in wanted)
        for r in conn.execute(_ROW_SQL + f" AND is_active = 1 AND id IN ({marks})", (profile, *wanted)):
            visit(r, r[6] if r[6] is not None else features_of(r[8], r[9]))

    def ident(h: ColdHit) -> tuple[int, str]:
        return h.created_us, h.id

    def strong(h: ColdHit) -> bool:
        return h.id in counted or literal(pq_tok, f" {h.features} ")

    kept, best = gate_select(rows, limit=limit, ratio=ratio, min_score=min_score, ident=ident, strong=strong)
    if common and (len(kept) < limit or not all(strong(r[0]) for r in kept)
                   or min(r[3] for r in kept) <= min(1.0, rest / pq.denominator) + _EPS):
        if max_rows is not None and common_rows > max_rows:
            return None  # reading them row by row would cost more than building the index
        not_selective = f" NOT ({' OR '.join(selective)})" if selective else ""
        read(f"{scope}({' OR '.join(common)}){not_selective}")
        kept, best = gate_select(rows, limit=limit, ratio=ratio, min_score=min_score, ident=ident, strong=strong)
    return ColdAnswer(kept, best, {h.id: counted[h.id] for h, *_ in kept if h.id in counted},  # type: ignore[misc]
                      pq, w, mat)


_CORE_SQL: Final = "category IN (" + ", ".join(f"'{c}'" for c in sorted(CORE_CATEGORIES)) + ")"


def _scan(conn: sqlite3.Connection, profile: str, pq_tok: PreparedQuery, w: Weights, *, now_us: int, limit: int,
          min_score: float, excluded: set[str], tier: str | None) -> list[ColdRow]:
    """The spec's top ``limit`` of every active memory of ``profile`` in ``tier``, scored from
    the stored features (``pq_tok``: the query over stored tokens, see :func:`cold_query`)."""
    sql = _ROW_SQL + " AND is_active = 1"
    if tier == PREFERENCE_TIER:
        sql += " AND category = 'preference'"
    elif tier is not None:
        sql += f" AND {'' if tier == 'core' else 'NOT '}{_CORE_SQL}"
    scored: list[ColdRow] = []
    for r in conn.execute(sql, (profile,)):
        (mid, created_us, last_us, count, confidence, _category, features) = r[:7]
        if mid in excluded:
            continue
        if features is None:  # not derived yet: tokenised here
            features = features_of(r[8], r[9])
        anchor = max(created_us, last_us or created_us)
        use, cm = usage(count), confidence_mul(confidence)
        padded = f" {features} "
        score, rec, top = score_parts(anchor, now_us, use, cm, padded, padded, pq_tok, w)  # spec: no length norm
        if score >= min_score:
            scored.append((ColdHit(mid, created_us, use, cm, features), score, rec, top))
    return heapq.nsmallest(limit, scored, key=lambda r: rank_key(r[1], r[0].created_us, r[0].id))


class RecallIndex:
    """Per-bank cache of :class:`ProfileIndex` objects, one per recently used profile.

    Freshness: one indexed read of ``profile_revs`` (kept by triggers, migration 2) per query;
    when it moved, only rows with a newer ``rev`` are read, plus the id list after deletions.
    A query runs inside one read transaction, so the index and the rows returned agree.
    """

    def __init__(self, store: Store, max_profiles: int = 16, *, essential_budget: int | None = None,
                 cold_queries: int = 2, cold_max_rows: int | None = None) -> None:
        self.store = store
        self.max_profiles = max(1, max_profiles)
        self.essential_budget = essential_budget  # a speed knob for tests; None = automatic
        # How many queries of a profile are answered from the persisted features (:func:`cold_query`)
        # before its index is built: a one-shot process (``memlocal recall``, and ``inject``, which
        # ranks two tiers) never pays for the build; a long-lived one builds it on its third query
        # and is then warm.
        self.cold_queries = cold_queries
        self.cold_max_rows = cold_max_rows
        self._cold: dict[str, int] = {}
        self._indexes: OrderedDict[str, ProfileIndex] = OrderedDict()
        self._lock = threading.RLock()

    def clear(self) -> None:
        with self._lock:
            self._indexes.clear()

    def _refresh(self, conn: sqlite3.Connection, profile: str) -> ProfileIndex:
        row = conn.execute("SELECT rev, resets FROM profile_revs WHERE profile = ?", (profile,)).fetchone()
        rev, resets = row if row is not None else (0, 0)
        idx = self._indexes.get(profile)
        if idx is not None and idx.rev == rev and idx.resets == resets:
            self._indexes.move_to_end(profile)
            return idx
        if idx is None or rev < idx.rev:  # new, or the database was replaced under us
            idx = ProfileIndex(to_us(utcnow()) or 0)
            for r in conn.execute(_ROW_SQL + " AND is_active = 1", (profile,)):
                idx.add(_Entry(r, idx.t0_us), sort=False)
            idx.finish_bulk()
        else:
            if resets != idx.resets:
                live = {mid for (mid,) in conn.execute("SELECT id FROM memories WHERE profile = ?", (profile,))}
                for mid in [m for m in idx.entries if m not in live]:
                    idx.remove(mid)
            for r in conn.execute(_ROW_SQL + " AND rev > ?", (profile, idx.rev)):
                idx.apply(r)
        idx.rev, idx.resets = rev, resets
        self._indexes[profile] = idx
        self._indexes.move_to_end(profile)
        while len(self._indexes) > self.max_profiles:
            self._indexes.popitem(last=False)
        return idx

    def query(
        self,
        profile: str,
        query: str,
        *,
        limit: int,
        min_score: float,
        exclude_ids: Iterable[str] = (),
        now: datetime | None = None,
        tier: str | None = None,
        ranking: Ranking = Ranking(),
        similarity: Mapping[str, float] | None = None,
    ) -> list[ScoredMemory]:
        """The exact top ``limit`` of ``profile`` for ``query`` under ``ranking`` (no side effects).

        ``similarity``: the semantic signal's embedding top-k (id -> cosine), added to the topic
        in evidence mode (:func:`memlocal.scoring.with_similarity`); ignored in spec mode.
        """
        now_us = to_us(now or utcnow())
        assert now_us is not None
        exclude_ids = tuple(exclude_ids)  # read by the cold path, and again if it hands over
        # Rows written without features (raw SQL) get them now; one indexed probe when none.
        self.store.derive_stale_features(profile)
        with self._lock, self.store.snapshot() as conn:
            if profile not in self._indexes and self._cold.get(profile, 0) < self.cold_queries:
                self._cold[profile] = self._cold.get(profile, 0) + 1
                cold = cold_query(conn, profile, query, now_us=now_us, limit=limit, min_score=min_score,
                                  ratio=ranking.ratio, exclude_ids=exclude_ids, tier=tier,
                                  similarity=similarity if ranking.gated else None,
                                  essential_budget=self.essential_budget, max_rows=self.cold_max_rows,
                                  spec=not ranking.gated)
                if cold is not None:
                    found = self.store.get_many(profile, [h.id for h, *_ in cold.kept], conn=conn)
                    out = []
                    for h, s, rec, t in cold.kept:
                        if h.id in found:
                            evidence = None
                            if ranking.gated:
                                terms, clusters = parse_features(h.features)
                                evidence = evidence_of(cold.pq, terms, clusters, t, cold.best, cold.counted.get(h.id))
                            out.append(ScoredMemory(
                                found[h.id], s, Breakdown(rec, h.use, t, h.cm, cold.weights, cold.maturity, s),
                                evidence))
                    return out
            idx = self._refresh(conn, profile)
            pq = idx.prepare(query)
            mat = maturity(idx.total_accesses)
            w = weights_for(mat)
            best = 0.0
            counted: dict[str, float] = {}
            if ranking.gated:
                top, best, counted = idx.top_k_gated(
                    pq, now_us=now_us, limit=limit, min_score=min_score, ratio=ranking.ratio,
                    exclude_ids=exclude_ids, tier=tier, essential_budget=self.essential_budget,
                    similarity=similarity)
            else:
                top = idx.top_k(pq, now_us=now_us, limit=limit, min_score=min_score,
                                exclude_ids=exclude_ids, tier=tier, essential_budget=self.essential_budget)
            memories = self.store.get_many(profile, [e.id for e, *_ in top], conn=conn)
        return [
            ScoredMemory(memories[e.id], s, Breakdown(rec, e.use, t, e.cm, w, mat, s),
                         evidence_of(pq, e.terms, e.clusters, t, best, counted.get(e.id)) if ranking.gated else None)
            for e, s, rec, t in top
            if e.id in memories
        ]
