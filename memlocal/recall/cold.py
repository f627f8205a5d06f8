"""The cold path: a query answered from the persisted FTS5 features, without an index in memory
(:func:`cold_query`): a process's first queries, and those while the index is built."""

from __future__ import annotations

import heapq
import sqlite3
from dataclasses import dataclass
from itertools import chain
from typing import Any, Callable, Final, Iterable, Iterator, Mapping, Sequence

from ..features import CLUSTER_PREFIX, cluster_token, encode_term, features_of, scope_token, term_token
from ..model import CORE_CATEGORIES
from ..scoring import (
    HALF_LIFE_DAYS,
    PREFERENCE_TIER,
    USAGE_FLOOR,
    US_PER_DAY,
    PreparedQuery,
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
from .classes import _EPS, _MAX_COMMON, _offer, gated_classes, split_features
from .rows import _ROW_SQL

# The FTS5 match drives (CROSS JOIN keeps that order; "+" keeps the profile index out), then each
# hit is one rowid lookup in ``memories``.
_HIT_SQL: Final = (
    "SELECT m.id, m.created_us, m.last_accessed_us, m.access_count, m.confidence, m.category, m.features"
    " FROM memory_features f CROSS JOIN memories m ON m.rowid = f.rowid"
    " WHERE memory_features MATCH ? AND +m.profile = ? AND m.is_active = 1 AND m.features IS NOT NULL"
)
_COUNT_SQL: Final = "SELECT count(*) FROM memory_features WHERE memory_features MATCH ?"
# The profile's active memories waiting for the FTS5 index (recall schema step 7: at most a batch).
_WAITING_SQL: Final = (_ROW_SQL.replace("FROM memories", "FROM memory_features_pending p CROSS JOIN memories"
                                        " ON memories.rowid = p.rowid")
                       + " AND is_active = 1 AND features IS NOT NULL")
# The two orders of a profile's memories the store indexes (memlocal/store/schemas/recall.py,
# step 3): by anchor, newest first (the order of recency), and by access count (of usage).
_ANCHOR_SQL: Final = "max(created_us, coalesce(last_accessed_us, created_us))"
# Each order is two reads (recall schema step 8: the indexes hold only the memories a recall
# returned): by anchor, the never-accessed by createdAt (their anchor) merged with the accessed;
# by access count, the used ones, then the others (all of usage 0) in any order.
_WALK_X_NEW_SQL: Final = _ROW_SQL + " AND is_active = 1 AND last_accessed_us IS NULL ORDER BY created_us DESC"
_WALK_X_SEEN_SQL: Final = _ROW_SQL + f" AND is_active = 1 AND last_accessed_us IS NOT NULL ORDER BY {_ANCHOR_SQL} DESC"
_WALK_Y_USED_SQL: Final = _ROW_SQL + " AND is_active = 1 AND access_count > 0 ORDER BY access_count DESC"
_WALK_Y_REST_SQL: Final = _ROW_SQL + " AND is_active = 1 AND NOT access_count > 0"


def _neg_anchor(r: Sequence[Any]) -> int:
    anchor: int = max(r[1], r[2] or r[1])
    return -anchor


def _walk_by_anchor(conn: sqlite3.Connection, profile: str) -> Iterator[Sequence[Any]]:
    """The profile's active rows by anchor, newest first."""
    return heapq.merge(conn.execute(_WALK_X_NEW_SQL, (profile,)), conn.execute(_WALK_X_SEEN_SQL, (profile,)),
                       key=_neg_anchor)


def _walk_by_count(conn: sqlite3.Connection, profile: str) -> Iterator[Sequence[Any]]:
    """The profile's active rows by access count, highest first."""
    return chain(conn.execute(_WALK_Y_USED_SQL, (profile,)), conn.execute(_WALK_Y_REST_SQL, (profile,)))


# A class of memories (one set of common features held) up to this size is read in the order
# SQLite gives it (``_CLASS_SQL``); a larger, dense one is walked in the two indexed orders.
_COLD_DIRECT: Final = 1024
# The cold path reads up to this many postings of the query's rarest features row by row.
_COLD_BUDGET: Final = 256
# A class's rows ordered by the score SQLite computes with the formula's constants; only a hint
# for the order of reading (every row read is scored in Python), so it needs SQLite's math
# functions (3.35+, on in Python's builds; without them the class is read whole).
_CLASS_SQL: Final = (
    "SELECT m.id, m.created_us, m.last_accessed_us, m.access_count, m.confidence, m.category, m.features,"
    f" (? * pow(0.5, (max(0, ? - max(m.created_us, coalesce(m.last_accessed_us, m.created_us)))"
    f" / {float(US_PER_DAY)!r}) / {float(HALF_LIFE_DAYS)!r})"
    f" + ? * (1.0 - {1.0 - USAGE_FLOOR!r} / (1.0 + log10(1 + max(0, m.access_count)))) + ?)"
    " * (0.5 + 0.5 * m.confidence) AS hint"
    " FROM memory_features f CROSS JOIN memories m ON m.rowid = f.rowid"
    " WHERE memory_features MATCH ? AND +m.profile = ? AND m.is_active = 1 AND m.features IS NOT NULL"
    " ORDER BY hint DESC"
)
# How far the hint may be from the exact score (a few ulps of pow and log10; scores are ≤ 1).
_HINT_EPS: Final = 1e-9


def _has_math(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT pow(0.5, 1.0), log10(10.0)").fetchone()
        return True
    except sqlite3.OperationalError:
        return False


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
    direct: int = _COLD_DIRECT,
) -> ColdAnswer | None:
    """An evidence-gated query answered from the persisted features, without building an index
    (``spec``: the spec mode's top-k instead, see the end).

    The rows are :func:`gate_select` over every active memory of ``profile`` that shares a term
    or a cluster with ``query`` (or is in the ``similarity`` top-k), in ``tier`` and not
    excluded, each scored with :func:`score_parts` (and :func:`with_similarity`): the full
    scan's answer, float for float.

    Statistics are the profile's true ones: N and the accesses from ``profile_revs`` (kept by
    triggers), each term's document frequency from the FTS5 table ``memory_features`` (plus rows
    whose features are not derived yet, tokenised here). The memories holding a *selective*
    feature (a short posting list) are read and scored. Those holding only *common* ones fall
    into classes, one per subset of the common features held, each with one topic; they are
    taken best topic first, as the in-memory index does, and a class is sized with an FTS5
    count: a small one (up to ``direct`` memories) is read whole; a large one is walked in the
    two orders the store indexes (memories by anchor, newest first, and by access count), which
    stops once no member not read yet could reach the class's ``limit``-th score. So a query
    reads a bounded number of rows however common its words. ``max_rows``: when a class to read
    whole holds more, ``None`` (the caller builds the index instead; a test knob). Runs inside
    the caller's read transaction.

    ``spec``: the spec's literal top ``limit`` by score (no gate, ``similarity`` ignored): the
    memories holding a selective feature are read and scored, then one walk over both orders
    scores the others (their topic is at most that of all the common features).
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
    # Rows without stored features (written by raw SQL, not derived yet): tokenised here. And the
    # new memories not in the FTS5 index yet (waiting for their batch): read with their features.
    # Both are counted in the document frequencies and visited first, whatever the matches find.
    stale = conn.execute(_ROW_SQL.replace("FROM memories", "FROM memories INDEXED BY memories_features_stale")
                         + " AND features IS NULL AND is_active = 1", (profile,)).fetchall()
    stale_features = [features_of(r[8], r[9]) for r in stale]
    waiting = conn.execute(_WAITING_SQL, (profile,)).fetchall()
    stale += waiting
    stale_features += [r[6] for r in waiting]
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
    padded_toks = pq_tok.terms + pq_tok.clusters
    fts_toks = [term_token(t) for t in pq.terms] + [cluster_token(c) for c in pq.clusters]
    weights = pq.weights + pq.cluster_weights
    feats: list[tuple[int, float, int]] = []
    for i, tok in enumerate(fts_toks):
        size = (df(pq.terms[i]) if i < len(pq.terms)
                else conn.execute(_COUNT_SQL, (scope + tok,)).fetchone()[0])
        if size > 0:  # nothing holds it (stale rows are visited anyway)
            feats.append((size, weights[i], i))
    budget = _COLD_BUDGET if essential_budget is None else essential_budget
    selective, common, _ = split_features(feats, budget)
    if len(common) > _MAX_COMMON:
        selective += common[:-_MAX_COMMON]
        common = common[-_MAX_COMMON:]
    ordered_sql = _has_math(conn)
    sim = {} if spec else (similarity or {})
    seen: set[str] = set(exclude_ids)
    excluded = set(seen)
    rows: list[ColdRow] = []
    counted: dict[str, float] = {}
    topics: dict[int, float] = {}

    def topic_of(mask: int) -> float:
        t = topics.get(mask)
        if t is None:
            nt = len(pq.terms)
            t = topics[mask] = topic(pq, frozenset(x for j, x in enumerate(pq.terms) if mask >> j & 1),
                                     frozenset(x for j, x in enumerate(pq.clusters) if mask >> (nt + j) & 1))
        return t

    def in_tier(category: str) -> bool:
        if tier == PREFERENCE_TIER:
            return category == "preference"
        return tier is None or (category in CORE_CATEGORIES) == (tier == "core")

    def visit(r: Sequence[Any], features: str) -> None:
        (mid, created_us, last_us, count, confidence, category) = r[:6]
        if mid in seen:
            return
        seen.add(mid)
        if not in_tier(category):
            return
        anchor = max(created_us, last_us or created_us)
        use, cm = usage(count), confidence_mul(confidence)
        padded = f" {features} "  # encoded terms and "@cluster"s: one string serves as both
        score, rec, top = score_parts(anchor, now_us, use, cm, padded, padded, pq_tok, w)
        if sim:
            score, top, cos = with_similarity(score, rec, use, cm, top, sim.get(mid), w)
            if cos is not None:
                counted[mid] = cos
        if top > 0.0 or spec:
            rows.append((ColdHit(mid, created_us, use, cm, features), score, rec, top))

    def read(match: str) -> None:
        for r in conn.execute(_HIT_SQL, (match, profile)):
            visit(r, r[6])

    for r, f in zip(stale, stale_features):
        visit(r, f)
    if selective:
        read(f"{scope}({' OR '.join(fts_toks[i] for i in selective)})")
    wanted = [mid for mid in sim if mid not in seen]
    if wanted:  # the similarity top-k that shares no selective feature: read by id
        marks = ", ".join("?" for _ in wanted)
        for r in conn.execute(_ROW_SQL + f" AND is_active = 1 AND id IN ({marks})", (profile, *wanted)):
            visit(r, r[6] if r[6] is not None else features_of(r[8], r[9]))

    def walk(member: Callable[[str], float | None], top_bound: float, floor: float) -> list[ColdRow]:
        """The threshold walk over the store's two orders: every row that ``member`` accepts
        (its topic) and that could still reach the ``limit``-th score (at least ``floor``) is
        scored; any other has anchor ≤ the anchor at the first order's position and access count
        ≤ the count at the second's (and confidenceMul ≤ 1), so its score is at most
        wR·recency + wU·usage of those + wT·``top_bound``; the walk stops below the ``limit``-th."""
        heads: list[tuple[Sequence[Any], str, float] | None] = [None, None]
        cursors = [_walk_by_anchor(conn, profile)]
        if w.usage > 0.0:
            cursors.append(_walk_by_count(conn, profile))
        done: set[str] = set()
        found: list[ColdRow] = []
        best: list[float] = []

        def head(k: int) -> tuple[Sequence[Any], str, float] | None:
            h = heads[k]
            if h is not None and h[0][0] not in done:
                return h
            for r in cursors[k]:
                if r[0] in done or r[0] in seen or r[6] is None or not in_tier(r[5]):
                    continue
                padded = f" {r[6]} "
                t = member(padded)
                if t is not None:
                    heads[k] = (r, padded, t)
                    return heads[k]
            heads[k] = None
            return None

        while True:
            hx = head(0)
            if hx is None:
                break
            hy = head(1) if len(cursors) > 1 else None
            r = hx[0]
            bx = recency(max(r[1], r[2] or r[1]), now_us)
            by = usage(hy[0][3]) if hy is not None else 0.0
            threshold = max(best[0], floor) if len(best) >= limit else floor
            if w.recency * bx + w.usage * by + w.topic * top_bound + _EPS < threshold:
                break
            r, padded, t = hy if (hy is not None and w.usage * by > w.recency * bx) else hx
            done.add(r[0])
            anchor = max(r[1], r[2] or r[1])
            use, cm = usage(r[3]), confidence_mul(r[4])
            s, rec, top = score_with_topic(anchor, now_us, use, cm, t, w)
            if s < floor:
                continue
            if not _offer(best, s, limit):
                continue
            found.append((ColdHit(r[0], r[1], use, cm, r[6]), s, rec, top))
        seen.update(done)
        return found

    def ordered(match: str, top: float) -> list[ColdRow]:
        """The best ``limit`` of a class (topic ``top``) by score: SQLite orders the class's rows
        by the score it computes (a hint: its pow and log10 may differ from Python's in the last
        bits), each row read is scored exactly here, and the read stops once a row's hint is below
        the ``limit``-th exact score by more than any such difference (so are all after it)."""
        found: list[ColdRow] = []
        best: list[float] = []
        args = (w.recency, now_us, w.usage, w.topic * top, match, profile)
        for cap in (4 * limit + 8, None):  # most classes end within a few rows: a bounded sort first
            found.clear()
            best.clear()
            returned, stopped = 0, False
            for r in conn.execute(_CLASS_SQL if cap is None else f"{_CLASS_SQL} LIMIT {cap}", args):
                returned += 1
                if len(best) >= limit and r[7] + _HINT_EPS < best[0]:
                    stopped = True
                    break
                mid = r[0]
                if mid in seen or not in_tier(r[5]):
                    continue
                anchor = max(r[1], r[2] or r[1])
                use, cm = usage(r[3]), confidence_mul(r[4])
                s, rec, _ = score_with_topic(anchor, now_us, use, cm, top, w)
                if not _offer(best, s, limit):
                    continue
                found.append((ColdHit(mid, r[1], use, cm, r[6]), s, rec, top))
            if stopped or cap is None or returned < cap:
                break
        seen.update(h.id for h, *_ in found)
        return found

    # The classes of the memories holding only common features: one per subset, an FTS5
    # expression (the held AND-ed, NOT any other feature), with its topic.
    pending: list[tuple[float, int]] = []
    for sub in range(1, 1 << len(common)):
        m = 0
        for j, i in enumerate(common):
            if sub >> j & 1:
                m |= 1 << i
        pending.append((topic_of(m), m))
    pending.sort(key=lambda c: -c[0])

    def class_rows(top: float, m: int) -> list[ColdRow] | None:
        """The best ``limit`` of one class by score (``None``: the ``max_rows`` test knob)."""
        held = [i for i in common if m >> i & 1]
        others = selective + [i for i in common if not m >> i & 1]
        match = f"({scope}{' AND '.join(fts_toks[i] for i in held)})"
        if others:
            match += f" NOT ({' OR '.join(fts_toks[i] for i in others)})"
        size = conn.execute(_COUNT_SQL, (match,)).fetchone()[0]
        if size == 0:
            return []
        if max_rows is not None and size > max_rows and size <= direct:
            return None
        if size <= direct and not ordered_sql:
            before = len(rows)
            read(match)
            found = rows[before:]
            del rows[before:]
            return found
        if size <= direct or size * 16 < n:  # sparse: a walk would skip more rows than it reads
            return ordered(match, top)
        want = [padded_toks[i] for i in held]
        unwanted = [padded_toks[i] for i in others]

        def in_class(padded: str) -> float | None:
            if all(tok in padded for tok in want) and not any(tok in padded for tok in unwanted):
                return top
            return None

        return walk(in_class, top, float("-inf"))

    if spec and tier == PREFERENCE_TIER:
        # A profile's preferences are few: every one is read and scored.
        for r in conn.execute(_ROW_SQL + " AND is_active = 1 AND category = 'preference'", (profile,)):
            visit(r, r[6] if r[6] is not None else features_of(r[8], r[9]))
        scored = [r for r in rows if r[1] >= min_score and r[0].id not in excluded]
        return ColdAnswer(heapq.nsmallest(limit, scored, key=lambda r: rank_key(r[1], r[0].created_us, r[0].id)),
                          0.0, {}, pq, w, mat)
    if spec:
        # Each class's best (a class whose best possible score is below the k-th so far ends
        # this), then one walk over the memories holding no query feature (topic 0).
        for top, m in pending:
            kth = heapq.nlargest(limit, [r[1] for r in rows if r[1] >= min_score])
            if len(kth) >= limit and w.recency + w.usage + w.topic * top + _EPS < kth[-1]:
                break
            found = class_rows(top, m)
            if found is None:
                return None
            rows += found
        every = padded_toks

        def featureless(padded: str) -> float | None:
            return None if any(tok in padded for tok in every) else 0.0

        rows += walk(featureless, 0.0, min_score)
        scored = [r for r in rows if r[1] >= min_score and r[0].id not in excluded]
        return ColdAnswer(heapq.nsmallest(limit, scored, key=lambda r: rank_key(r[1], r[0].created_us, r[0].id)),
                          0.0, {}, pq, w, mat)

    # Evidence mode: the classes best topic first, as the in-memory index takes them.
    best = max((r[3] for r in rows), default=0.0)

    def strong(h: ColdHit) -> bool:
        return h.id in counted or literal(pq_tok, f" {h.features} ")

    def strong_row(r: ColdRow) -> bool:
        return strong(r[0])

    term_bits = (1 << len(pq.terms)) - 1
    for top, m in gated_classes(pending, rows, best, ratio=ratio, min_score=min_score, limit=limit,
                                term_bits=term_bits, strong_of=strong_row):
        found = class_rows(top, m)
        if found is None:
            return None  # a test knob: the caller builds the index instead
        rows += found

    def ident(h: ColdHit) -> tuple[int, str]:
        return h.created_us, h.id

    kept, best = gate_select(rows, limit=limit, ratio=ratio, min_score=min_score, ident=ident, strong=strong)
    return ColdAnswer(kept, best, {h.id: counted[h.id] for h, *_ in kept if h.id in counted},
                      pq, w, mat)
