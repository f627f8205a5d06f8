"""The recall service (:class:`RecallIndex`): per bank, the profiles' indexes (an LRU cache),
their background builds and the warm-up thread, the access bumps applied ahead of their write,
and the choice, per query, between the index and the cold path."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Callable, Final, Iterable, Iterator, Sequence

from ..relevance.features import parse as parse_features
from ..model import Memory, compute_staleness, from_us, to_us, utcnow
from ..relevance.scoring import (
    RERANK_DEPTH,
    Breakdown,
    RankQuery,
    Ranking,
    ScoredMemory,
    evidence_of,
    evidence_rank,
    maturity,
    rerank,
    weights_for,
)
from ..store import Store
from ..store.recall_reads import RecallReads
from ..relevance.text import query_dates
from .classes import WARM_IDLE_S, RecallTuning
from .cold import ColdAnswer, cold_query
from .index import ProfileIndex

log = logging.getLogger("memlocal")

class RecallIndex:
    """Per-bank cache of :class:`ProfileIndex` objects, one per recently used profile.

    No query waits for an index to be built. A profile's first ``cold_queries`` queries are
    answered from the persisted features (:func:`cold_query`; a one-shot process such as
    ``memlocal recall`` or ``inject`` never builds anything); the next one starts the build on a
    background thread, with its own read-only connection, and is answered from the persisted
    features too, as is every query until the index is ready: the same answer, float for float.
    ``background=False`` builds in the foreground instead (tests of the index itself).

    Freshness: one indexed read of ``profile_revs`` (kept by triggers, migration 2) per query;
    when it moved, only rows with a newer ``rev`` are read, plus the id list after deletions.
    A query runs inside one read transaction, so the index and the rows returned agree.
    """

    def __init__(self, store: Store, max_profiles: int = 16, *, tuning: RecallTuning = RecallTuning(),
                 warm: Callable[[], None] | None = None) -> None:
        self.store = store
        self.max_profiles = max(1, max_profiles)
        self.tuning = tuning  # replaced whole (``dataclasses.replace``), never changed in place
        # Called on the builder thread with the profile once its index is built, before it is
        # installed (tests hold the build there to query while it is "still building").
        self.build_hook: Callable[[str], None] | None = None
        # Called once, on a thread of its own, after the first background build and once no query
        # has run for ``WARM_IDLE_S``: what a process that stays up may soon need (the bank's:
        # the credential detectors). Not beside the queries: a thread importing modules holds the
        # GIL for tens of ms, and a query hands it over at each SQLite call.
        self.warm = warm
        self._last_query = time.monotonic()
        self._stop = threading.Event()
        self._cold: dict[str, int] = {}
        self._indexes: OrderedDict[str, ProfileIndex] = OrderedDict()
        self._building: dict[str, threading.Thread] = {}
        self._failed: set[str] = set()  # a background build failed: the next query builds in the foreground
        self._generation = 0  # bumped by clear(): a build started before it is not installed
        self._closed = False
        self._lock = threading.RLock()
        # Access bumps applied to an index ahead of their commit (``bump``): per profile, the
        # memories with bumps queued and not yet written. Guarded by ``_settle``, never by
        # ``_lock``: the thread that writes them reports here while a query may hold ``_lock``.
        self._settle = threading.Condition()
        # profile -> memory id -> [bumps queued, the latest bump's time (us)]
        self._inflight: dict[str, dict[str, list[int]]] = {}
        self._invalid: set[str] = set()  # a queued bump failed: the index is rebuilt from the rows
        # The open ``reading`` (the thread that holds it, its profile, the rows read so far by id).
        self._reading: tuple[int, str, dict[str, Memory | None]] | None = None

    def clear(self) -> None:
        with self._lock:
            self._indexes.clear()
            self._generation += 1

    def close(self, timeout: float = 5.0) -> None:
        """Stop any background build (it gives up at its next batch of rows) and wait for it."""
        self._stop.set()
        with self._lock:
            self._closed = True
            threads = list(self._building.values())
        for t in threads:
            t.join(timeout)

    def building(self, profile: str) -> bool:
        """Whether ``profile``'s index is being built in the background."""
        with self._lock:
            return profile in self._building

    def ready(self, profile: str) -> bool:
        """Whether ``profile``'s index is built (queries are answered from memory)."""
        with self._lock:
            return profile in self._indexes

    def wait_built(self, profile: str, timeout: float | None = None) -> bool:
        """Wait for a background build of ``profile`` to end; whether its index is ready."""
        with self._lock:
            t = self._building.get(profile)
        if t is not None:
            t.join(timeout)
        return self.ready(profile)

    def bump(self, profile: str, memory_ids: Sequence[str], now_us: int) -> bool:
        """Apply an access bump to ``profile``'s index ahead of its write, which the caller
        queues and reports with :meth:`settled`. Every later query of this index ranks as if it
        were written; one whose results include a memory with a bump still queued reads that
        row once it is written. ``False`` (nothing done): the index is not ready, so the queries
        read the rows, and the caller writes the bump before it returns."""
        with self._lock:
            idx = self._indexes.get(profile)
            if idx is None:
                return False
            idx.bump(memory_ids, now_us)
            with self._settle:
                queued = self._inflight.setdefault(profile, {})
                for mid in set(memory_ids):
                    entry = queued.setdefault(mid, [0, now_us])
                    entry[0] += 1
                    entry[1] = max(entry[1], now_us)
        return True

    def settled(self, profile: str, memory_ids: Sequence[str], ok: bool) -> None:
        """The bump queued after :meth:`bump` is written (``ok``) or failed: then the index,
        which holds it, is rebuilt from the rows at its next query."""
        with self._settle:
            queued = self._inflight.get(profile)
            if queued is not None:
                for mid in set(memory_ids):
                    entry = queued.get(mid)
                    if entry is not None:
                        entry[0] -= 1
                        if entry[0] <= 0:
                            del queued[mid]
                if not queued:
                    del self._inflight[profile]
            if not ok:
                self._invalid.add(profile)
            self._settle.notify_all()

    def _queued(self, profile: str, memory_ids: Iterable[str] | None = None) -> dict[str, int]:
        """Of ``memory_ids`` (default: all), those of ``profile`` with a bump queued, each with
        the latest queued bump's time (us)."""
        with self._settle:
            queued = self._inflight.get(profile)
            if not queued:
                return {}
            if memory_ids is None:
                return {m: e[1] for m, e in queued.items()}
            return {m: queued[m][1] for m in memory_ids if m in queued}

    def _wait_written(self, profile: str) -> None:
        """Wait until the bumps queued for ``profile`` are written. A writer that never reports
        (it would be a bug) does not hang the queries: past the store's busy timeout the index
        is rebuilt from the rows instead."""
        def written() -> bool:
            return not self._inflight.get(profile)

        with self._settle:
            if not self._settle.wait_for(written, timeout=self.store.busy_timeout_s + 5):
                log.warning("queued access bumps of %s were not written in time; rebuilding its index", profile)
                self._inflight.pop(profile, None)
                self._invalid.add(profile)

    def _install(self, profile: str, idx: ProfileIndex) -> None:
        tuning = self.tuning
        if tuning.direct is not None:
            idx.direct = tuning.direct
        if tuning.head_size is not None:
            idx.head_size = tuning.head_size
        if tuning.moved_max is not None:
            idx.moved_max = tuning.moved_max
        self._indexes[profile] = idx
        self._indexes.move_to_end(profile)
        while len(self._indexes) > self.max_profiles:
            self._indexes.popitem(last=False)

    def _start_build(self, profile: str) -> None:
        if profile in self._building or self._closed:
            return
        t = threading.Thread(target=self._build, args=(profile, self._generation), daemon=True,
                             name=f"memlocal-recall-index[{profile}]")
        self._building[profile] = t
        t.start()

    def _build(self, profile: str, generation: int) -> None:
        """The builder thread: a snapshot on its own connection, read in batches; between batches
        it lets the queries' threads run (and gives up when the index is closed)."""
        def pause() -> None:
            if self._closed:
                raise _Cancelled
            # A query holds the index's lock from start to end: wait here until none runs, so
            # that the build takes the GIL between queries rather than in the middle of one (a
            # thread that releases the GIL for each SQLite call would otherwise get it back only
            # after the builder's switch interval, each time).
            with self._lock:
                pass
            time.sleep(0)  # release the GIL: a query waiting for it runs now

        try:
            with RecallReads.read_only(self.store.path, self.store.busy_timeout_s) as reads:
                idx = ProfileIndex.build(reads, profile, to_us(utcnow()) or 0, pause)
            hook = self.build_hook
            if hook is not None:
                hook(profile)
            while True:
                # A bump applied to the index in use while this one was built, and not written
                # yet, is not in this one's rows: install it once no bump is queued.
                self._wait_written(profile)
                with self._lock:
                    if self._queued(profile):
                        continue
                    if not self._closed and generation == self._generation:
                        self._install(profile, idx)
                    break
            self._start_warm()
        except _Cancelled:
            pass
        except Exception as exc:  # noqa: BLE001 - never fatal: the persisted path still answers
            log.warning("building the recall index of %s in the background failed (%s); "
                        "the next query builds it", profile, exc)
            with self._lock:
                self._failed.add(profile)
        finally:
            with self._lock:
                self._building.pop(profile, None)

    def _start_warm(self) -> None:
        with self._lock:
            warm, self.warm = self.warm, None
        if warm is not None:
            threading.Thread(target=self._warm_when_idle, args=(warm,), daemon=True, name="memlocal-warm").start()

    def _warm_when_idle(self, warm: Callable[[], None]) -> None:
        pause = self.tuning.warm_idle_s
        while not self._stop.is_set():
            idle = time.monotonic() - self._last_query
            if idle >= pause and self._lock.acquire(blocking=False):
                self._lock.release()
                try:
                    warm()
                except Exception as exc:  # noqa: BLE001 - a head start, never needed: the first use loads it
                    log.warning("warming up failed (%s); the first query that needs it does it", exc)
                return
            self._stop.wait(max(pause - idle, 0.005))

    def _refresh(self, reads: RecallReads, profile: str) -> ProfileIndex:
        rev, resets = reads.revision(profile)
        idx = self._indexes.get(profile)
        if self._invalid:
            with self._settle:
                if profile in self._invalid:
                    self._invalid.discard(profile)
                    idx = None
        if idx is not None and idx.rev == rev and idx.resets == resets:
            self._indexes.move_to_end(profile)
            return idx
        if idx is None or rev < idx.rev:  # new, or the database was replaced under us
            idx = ProfileIndex.build(reads, profile, to_us(utcnow()) or 0)
        else:
            if resets != idx.resets:
                live = reads.ids(profile)
                for mid in [m for m in idx.doc if m not in live]:
                    idx.remove(mid)
            for r in reads.changed(profile, idx.rev):
                idx.apply(r)
            idx._settle()
        idx.rev, idx.resets = rev, resets
        self._install(profile, idx)
        if idx.dead > max(1024, idx.size) and self.tuning.background:
            self._start_build(profile)  # many rewrites left dead slots: a compact one, beside the queries
        return idx

    def query(self, profile: str, rq: RankQuery) -> list[ScoredMemory]:
        """The exact top ``rq.limit`` of ``profile`` for ``rq.text`` under ``rq.ranking`` (no side
        effects): what :func:`memlocal.relevance.scoring.rank_brute_force` returns for the same ``rq``.

        ``rq.similarity``: the semantic signal's embedding top-k (id -> cosine), added to the topic
        in evidence mode (:func:`memlocal.relevance.scoring.with_similarity`); ignored in spec mode. In
        evidence mode the gate's first ``max(limit, RERANK_DEPTH)`` are re-ordered by the bounded
        second pass (:func:`memlocal.relevance.scoring.rerank`), as the full scan does; from the index, on
        its own arrays (:func:`memlocal.relevance.scoring.rerank_order`), so only the ``limit`` kept are read.
        """
        try:
            return self._query(profile, rq)
        finally:
            self._last_query = time.monotonic()  # the warm-up waits for a pause in the queries

    @contextmanager
    def reading(self, profile: str) -> Iterator[None]:
        """Several queries of ``profile`` read as one (a memory block ranks three tiers): in one
        read transaction, so that they agree with one another, and each row is read once. The
        caller writes nothing on the store's connection meanwhile; other threads' queries wait."""
        if self._own_reading() is not None:
            yield  # already inside one
            return
        self._prepare(profile)
        with self._lock, self.store.snapshot():
            self._reading = (threading.get_ident(), profile, {})
            try:
                yield
            finally:
                self._reading = None

    def _own_reading(self) -> tuple[int, str, dict[str, Memory | None]] | None:
        """The :meth:`reading` this thread has open, if any."""
        reading = self._reading
        return reading if reading is not None and reading[0] == threading.get_ident() else None

    def _prepare(self, profile: str) -> None:
        """What a read of ``profile`` needs done before its snapshot starts."""
        # Rows written without features (raw SQL) get them now; one indexed probe when none.
        self.store.derive_stale_features(profile)
        if self._inflight and not self.ready(profile):
            self._wait_written(profile)  # bumps applied to an index since dropped: the rows must hold them

    def _rows(self, reads: RecallReads, profile: str, ids: Sequence[str],
              idx: ProfileIndex | None = None) -> dict[str, Memory]:
        """The memories of ``profile`` among ``ids``, by id: those ``idx`` (refreshed in this
        snapshot) keeps, the others read (and kept); inside :meth:`reading`, each read once."""
        if idx is not None:
            kept = idx.rows
            out = {mid: m for mid in ids if (m := kept.get(mid)) is not None}
            if len(out) < len(ids):
                found = self._rows(reads, profile, [mid for mid in ids if mid not in out])
                out.update(found)
                idx.remember(found.values())
            return out
        reading = self._own_reading()
        if reading is None or reading[1] != profile:
            return reads.memories(profile, ids)
        seen = reading[2]
        missing = [i for i in ids if i not in seen]
        if missing:
            found = reads.memories(profile, missing)
            for mid in missing:
                seen[mid] = found.get(mid)  # None: not there (remembered too)
        return {mid: m for mid in ids if (m := seen[mid]) is not None}

    def _query(self, profile: str, rq: RankQuery) -> list[ScoredMemory]:
        ranking = rq.ranking
        # The gate's first RERANK_DEPTH are re-ordered by the second pass, its first ``keep`` kept;
        # every step scores at one clock.
        keep = rq.limit if ranking.gated else None
        wide = replace(rq, limit=max(rq.limit, RERANK_DEPTH) if ranking.gated else rq.limit, now=rq.now or utcnow())
        if self._own_reading() is None:
            self._prepare(profile)
        tuning = self.tuning
        with self._lock, RecallReads.snapshot(self.store) as reads:
            if profile not in self._indexes:
                served = self._cold.get(profile, 0)
                self._cold[profile] = served + 1
                if served >= tuning.cold_queries:
                    if tuning.background and profile not in self._failed:
                        self._start_build(profile)
                    else:
                        self._failed.discard(profile)
                        self._refresh(reads, profile)
            if profile not in self._indexes:
                cold = cold_query(reads, profile, wide, tuning)
                if cold is not None:
                    found = self._cold_results(reads, profile, cold, ranking)
                    return found if keep is None else rerank(found, rq.text, keep)
            idx = self._refresh(reads, profile)
            pq = idx.prepare(rq.text)
            mat = maturity(idx.total_accesses)
            w = weights_for(mat)
            best = 0.0
            counted: dict[int, float] = {}
            if ranking.gated:
                top, best, counted = idx.top_k_gated(pq, wide, tuning.essential_budget)
            else:
                top = idx.top_k(pq, wide, tuning.essential_budget)
            windows = query_dates(rq.text) if keep is not None else ()
            if keep is not None:
                top = idx.rerank(top, pq, counted, windows)[:keep]
            ids = [idx.ids[h.doc] or "" for h in top]
            memories = self._rows(reads, profile, ids, idx)
            # A memory whose bump this index holds and this snapshot may not (it is queued): it
            # is shown as the ranking saw it (``with_bump``).
            queued = self._queued(profile, ids) if self._inflight else {}
            out = []
            for mid, h in zip(ids, top):
                memory = memories.get(mid)
                if memory is None:
                    continue
                d = h.doc
                if mid in queued:
                    memory = with_bump(memory, idx.count[d], queued[mid])
                evidence = None
                if ranking.gated:
                    cos = counted.get(d)
                    evidence = evidence_of(pq, *idx.held(pq, h.mask), h.topic, best, cos, evidence_rank(
                        h.topic, idx.words[d] if idx.core[d] else None, idx.created[d], cos, windows))
                out.append(ScoredMemory(memory, h.score, Breakdown(h.recency, idx.use[d], h.topic, idx.cm[d], w, mat,
                                                                   h.score), evidence))
            return out

    def _cold_results(self, reads: RecallReads, profile: str, cold: ColdAnswer,
                      ranking: Ranking) -> list[ScoredMemory]:
        found = self._rows(reads, profile, [r.hit.id for r in cold.kept])
        out = []
        for h, s, rec, t in cold.kept:
            if h.id in found:
                evidence = None
                if ranking.gated:
                    terms, clusters = parse_features(h.features)
                    evidence = evidence_of(cold.pq, terms, clusters, t, cold.best, cold.counted.get(h.id))
                out.append(ScoredMemory(found[h.id], s, Breakdown(rec, h.use, t, h.cm, cold.weights, cold.maturity, s),
                                        evidence))
        return out


def with_bump(memory: Memory, count: int, bumped_us: int) -> Memory:
    """``memory``, read before its queued access bumps were written, as they leave it (what
    ``Store.mark_accessed`` writes): the count the index holds, lastAccessedAt the latest bump's
    time, and the staleness recomputed then."""
    last = from_us(max(to_us(memory.last_accessed_at) or 0, bumped_us))
    count = max(count, memory.access_count)
    if count == memory.access_count and last == memory.last_accessed_at:
        return memory  # the row already holds them
    staleness = compute_staleness(category=memory.category, confidence=memory.confidence, access_count=count,
                                  created_at=memory.created_at, last_accessed_at=last, now=from_us(bumped_us))
    return replace(memory, access_count=count, last_accessed_at=last, staleness_score=staleness)


class _Cancelled(Exception):
    """The index was closed while a background build ran."""
