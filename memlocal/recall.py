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
from datetime import datetime
from typing import Any, Final, Iterable, Sequence

from .features import features_of
from .features import parse as parse_features
from .model import CORE_CATEGORIES, to_us, utcnow
from .scoring import (
    HALF_LIFE_DAYS,
    US_PER_DAY,
    Breakdown,
    PreparedQuery,
    Ranking,
    Row,
    ScoredMemory,
    rank_key,
    confidence_mul,
    evidence_of,
    gate_select,
    maturity,
    prepare_query,
    score_parts,
    usage,
    weights_for,
)
from .store import Store

# Slack for float rounding in the pruning bound: a memory is skipped only when its bound is below
# the k-th best score by more than this, so ties and near-ties are always scored exactly.
_EPS: Final = 1e-9
_LN2_PER_US: Final = math.log(2.0) / (HALF_LIFE_DAYS * US_PER_DAY)


class _Entry:
    """What the index keeps of one active memory."""

    __slots__ = ("id", "created_us", "anchor_us", "count", "cm", "use", "tier", "terms", "clusters", "kx", "y")

    def __init__(self, row: Sequence[Any], t0_us: int) -> None:
        (mid, created_us, last_us, count, confidence, category, features, _active, processed, summary) = row[:10]
        self.id: str = mid
        self.created_us: int = created_us
        self.anchor_us: int = max(created_us, last_us or created_us)
        self.count: int = count
        self.cm: float = confidence_mul(confidence)
        self.use: float = usage(count)
        self.tier: str = "core" if category in CORE_CATEGORIES else "other"
        # The stored features (memlocal.features); a row written without them is tokenised here.
        self.terms: frozenset[str]
        self.clusters: frozenset[str]
        self.terms, self.clusters = parse_features(features if features is not None
                                                   else features_of(processed, summary))
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


class ProfileIndex:
    """The recall index of one profile, kept current incrementally (see :class:`RecallIndex`)."""

    def __init__(self, t0_us: int) -> None:
        self.t0_us = t0_us
        self.entries: dict[str, _Entry] = {}
        self.postings: dict[str, set[str]] = {}
        self.cluster_postings: dict[str, set[str]] = {}
        self.total_accesses = 0
        # Per tier (None = all): ascending lists of (-kx, id) and (-y, id), i.e. best first.
        self.by_x: dict[str | None, list[tuple[float, str]]] = {None: [], "core": [], "other": []}
        self.by_y: dict[str | None, list[tuple[float, str]]] = {None: [], "core": [], "other": []}
        self.rev = -1
        self.resets = -1

    # -- maintenance --

    def add(self, e: _Entry, *, sort: bool = True) -> None:
        self.entries[e.id] = e
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
        e = self.entries.pop(memory_id, None)
        if e is None:
            return None
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
        self.remove(row[0])
        if row[7] != 1:  # inactive: not ranked
            return
        self.add(_Entry(row, self.t0_us))

    def finish_bulk(self) -> None:
        for lists in (self.by_x, self.by_y):
            for lst in lists.values():
                lst.sort()

    # -- queries --

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
            feats: list[tuple[int, float, set[str]]] = []
            for t, wt in zip(pq.terms, pq.weights):
                ids = self.postings.get(t)
                if ids:
                    feats.append((len(ids), wt, ids))
            for c in pq.clusters:
                ids = self.cluster_postings.get(c)
                if ids:
                    feats.append((len(ids), pq.cluster_weight, ids))
            feats.sort(key=lambda f: f[0])
            budget = max(256, len(entries) // 16) if essential_budget is None else essential_budget
            spent = 0
            for size, wt, ids in feats:
                if spent + size <= budget:
                    spent += size
                    for mid in ids:
                        if mid not in seen:
                            e = entries[mid]
                            if tier is None or e.tier == tier:
                                visit(e)
                            else:
                                seen.add(mid)
                else:
                    rest += wt
            rest = min(1.0, rest / pq.denominator)

        # 2. Threshold walk over the two static orders. Any memory not yet visited has
        #    cm·recency ≤ bx and cm·usage ≤ by (the values at the walk's positions), so its score
        #    is at most wR·bx + wU·by + wT·rest. Stop once that is below the k-th best score.
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
    ) -> tuple[list[tuple[_Entry, float, float, float]], float]:
        """The evidence-gated top ``limit`` (see :class:`Ranking`) and the best topic, exactly as
        :func:`gate_select` over every memory holding a query feature would give them.

        Only memories holding a query term or cluster can pass, so only posting lists are read.
        Selective features (short lists) are scored first; the common ones bound the topic a
        memory holding only those can reach (``rest``). When the gate already keeps ``limit``
        memories whose topic is above that bound, no other memory can displace them, and the
        common lists are skipped; otherwise they are scored too.
        """
        if pq.empty:
            return [], 0.0
        w = weights_for(maturity(self.total_accesses))
        entries = self.entries
        seen: set[str] = set(exclude_ids)
        rows: list[Row] = []

        def visit_all(ids: set[str]) -> None:
            for mid in ids:
                if mid not in seen:
                    seen.add(mid)
                    e = entries[mid]
                    if tier is None or e.tier == tier:
                        s, rec, top = score_parts(e.anchor_us, now_us, e.use, e.cm, e.terms, e.clusters, pq, w)
                        rows.append((e, s, rec, top))

        feats: list[tuple[int, float, set[str]]] = []
        for t, wt in zip(pq.terms, pq.weights):
            ids = self.postings.get(t)
            if ids:
                feats.append((len(ids), wt, ids))
        for c in pq.clusters:
            ids = self.cluster_postings.get(c)
            if ids:
                feats.append((len(ids), pq.cluster_weight, ids))
        feats.sort(key=lambda f: f[0])
        budget = max(256, len(entries) // 16) if essential_budget is None else essential_budget
        spent, rest, common = 0, 0.0, []
        for size, wt, ids in feats:
            if spent + size <= budget:
                spent += size
                visit_all(ids)
            else:
                rest += wt
                common.append(ids)

        def ident(e: _Entry) -> tuple[int, str]:
            return e.created_us, e.id

        kept, best = gate_select(rows, limit=limit, ratio=ratio, min_score=min_score, ident=ident)
        if common:
            bound = min(1.0, rest / pq.denominator)
            if len(kept) < limit or min(r[3] for r in kept) <= bound + _EPS:
                for ids in common:
                    visit_all(ids)
                kept, best = gate_select(rows, limit=limit, ratio=ratio, min_score=min_score, ident=ident)
        return kept, best  # type: ignore[return-value]


class RecallIndex:
    """Per-bank cache of :class:`ProfileIndex` objects, one per recently used profile.

    Freshness: one indexed read of ``profile_revs`` (kept by triggers, migration 2) per query;
    when it moved, only rows with a newer ``rev`` are read, plus the id list after deletions.
    A query runs inside one read transaction, so the index and the rows returned agree.
    """

    def __init__(self, store: Store, max_profiles: int = 16, *, essential_budget: int | None = None) -> None:
        self.store = store
        self.max_profiles = max(1, max_profiles)
        self.essential_budget = essential_budget  # a speed knob for tests; None = automatic
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
    ) -> list[ScoredMemory]:
        """The exact top ``limit`` of ``profile`` for ``query`` under ``ranking`` (no side effects)."""
        now_us = to_us(now or utcnow())
        assert now_us is not None
        # Rows written without features (raw SQL) get them now; one indexed probe when none.
        self.store.derive_stale_features(profile)
        with self._lock, self.store.snapshot() as conn:
            idx = self._refresh(conn, profile)
            pq = idx.prepare(query)
            mat = maturity(idx.total_accesses)
            w = weights_for(mat)
            best = 0.0
            if ranking.gated:
                top, best = idx.top_k_gated(pq, now_us=now_us, limit=limit, min_score=min_score, ratio=ranking.ratio,
                                            exclude_ids=exclude_ids, tier=tier,
                                            essential_budget=self.essential_budget)
            else:
                top = idx.top_k(pq, now_us=now_us, limit=limit, min_score=min_score,
                                exclude_ids=exclude_ids, tier=tier, essential_budget=self.essential_budget)
            memories = self.store.get_many(profile, [e.id for e, *_ in top], conn=conn)
        return [
            ScoredMemory(memories[e.id], s, Breakdown(rec, e.use, t, e.cm, w, mat, s),
                         evidence_of(pq, e.terms, e.clusters, t, best) if ranking.gated else None)
            for e, s, rec, t in top
            if e.id in memories
        ]
