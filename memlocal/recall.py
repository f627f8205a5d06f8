"""The recall index: an exact, fast top-k of one profile's memories for a query.

:class:`RecallIndex` keeps, per profile, a compact inverted index (posting lists of doc numbers
in typed arrays) and two orders (by confidenceMul·recency, by confidenceMul·usage). A memory's
topic depends only on which of the query's features it holds, so candidates are ranked a class
(one set of features held) at a time, best topic first, with set operations on the long posting
lists and a threshold-algorithm walk inside a large class that stops once an upper bound on the
members not visited falls below the k-th best score; the index is built beside the queries, on
a background thread, while the persisted features answer them. It scores with :func:`memlocal.scoring.score_parts`,
the function the reference full scan (:func:`memlocal.scoring.rank_brute_force`) uses, so the
floats, and hence the ranking, are identical. The formula itself lives in :mod:`memlocal.scoring`
(pure); this module adds what needs the store: reading rows and keeping the index fresh.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
import operator
import logging
import re
import sqlite3
import threading
import time
from array import array
from collections import OrderedDict
from contextlib import contextmanager
from itertools import chain, repeat
from dataclasses import dataclass, replace
from typing import Any, Callable, Collection, Container, Final, Iterable, Iterator, Mapping, Sequence, TypeVar

from .features import CLUSTER_PREFIX, cluster_token, encode_term, features_of, scope_token, term_token
from .features import parse as parse_features
from .model import CORE_CATEGORIES, Memory, compute_staleness, from_us, to_us, utcnow
from .text import query_dates
from .scoring import (
    HALF_LIFE_DAYS,
    PREFERENCE_TIER,
    USAGE_FLOOR,
    US_PER_DAY,
    Breakdown,
    PreparedQuery,
    RankQuery,
    Ranking,
    ScoredMemory,
    Weights,
    rank_key,
    RERANK_DEPTH,
    rerank,
    rerank_order,
    confidence_mul,
    evidence_of,
    gate_select,
    literal,
    maturity,
    recency,
    prepare_query,
    score_parts,
    score_with_topic,
    topic,
    usage,
    weights_for,
    with_similarity,
)
from .store import Store

log = logging.getLogger("memlocal")

# Slack for float rounding in the pruning bound: a memory is skipped only when its bound is below
# the k-th best score by more than this, so ties and near-ties are always scored exactly.
_EPS: Final = 1e-9
_LN2_PER_US: Final = math.log(2.0) / (HALF_LIFE_DAYS * US_PER_DAY)


# The text is read only for a row without stored features (``NULL``: derived lazily).
_ROW_SQL: Final = (
    "SELECT id, created_us, last_accessed_us, access_count, confidence, category, features, is_active,"
    " CASE WHEN features IS NULL THEN processed_content END, CASE WHEN features IS NULL THEN summary END"
    " FROM memories WHERE profile = ?"
)

# What the in-memory index reads of a row: the above and the text, for its word count (the
# second pass's length normalisation, ``ProfileIndex.words``).
_INDEX_ROW_SQL: Final = _ROW_SQL.replace(" FROM memories", ", processed_content FROM memories", 1)

F = TypeVar("F")


def _offer(best: list[float], s: float, limit: int) -> bool:
    """Offer score ``s`` to ``best``, the min-heap of the ``limit`` best scores so far: whether
    it is among them (an equal score may still win on the tie-break)."""
    if len(best) < limit:
        heapq.heappush(best, s)
    elif s >= best[0]:
        heapq.heapreplace(best, s)
    else:
        return False
    return True


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
    """How many postings are read one by one for a query over ``n`` memories: max(256, n/64).
    Memories holding only features with longer lists are found by set operations, a class at a
    time (:meth:`ProfileIndex.top_k_gated`), so this bounds the per-posting Python work."""
    return max(256, n // 64)


# A class of memories holding the same query features with more members than this is ranked by
# the threshold walk over the static orders instead of scoring every member.
_DIRECT: Final = 384
# At most this many common features are split into classes (2^k subsets); any more are read
# posting by posting like the selective ones (a query rarely holds more than three).
_MAX_COMMON: Final = 6

Hit = tuple[int, float, float, float, int]  # (doc, score, recency, topic, mask of the query features held)

# How many docs a tier's head keeps (the best by their score with topic 0; see ``_Head``); a head
# folds its changed docs in once they are more than a quarter of that, and is dropped (made again
# when next needed) once this many changed without a query reading it.
_HEAD_SIZE: Final = 256
# How many memories a profile's index keeps as read (``ProfileIndex.rows``): some 20 blocks' worth.
_ROWS_MAX: Final = 1024
# A background build reads rows in batches of this many, and sorts the static orders in runs of
# ``_SORT_RUN``, letting the queries run between them (``RecallIndex._build``).
_BUILD_BATCH: Final = 256
# How long no query must have run before the index's warm-up (``RecallIndex.warm``) starts.
WARM_IDLE_S: Final = 0.05
_SORT_RUN: Final = 4096
_HEAD_DIRTY_MAX: Final = 4096
# Docs out of place in the static orders (bumped, new, removed) are scored apart by every walk
# until more than this many; then they are filed in one pass (``ProfileIndex._sorted``).
_MOVED_MAX: Final = 256
# A head that could not answer a query and is older than this (µs) is made again at the next.
_HEAD_TTL_US: Final = 60 * 1_000_000


@dataclass(slots=True)
class _Head:
    """The best docs of a tier by their score with topic 0 (no query feature held) at ``now_us``
    under ``weights``: the first ``_HEAD_SIZE`` results of the walk over the static orders. Every
    other doc of the tier scored at most ``floor`` then (``-inf``: there are no others), and a
    score never rises as the clock moves on (recency only decays), so a later query under the same
    weights whose ``limit``-th best is above ``floor`` needs no walk: it scores ``docs`` and the
    ``dirty`` ones (added, or changed in place, since) exactly, at its own "now". Not tied to the
    task: every block of a profile reuses its core tier's head until the weights change."""

    now_us: int
    weights: Weights
    docs: list[int]  # best first
    scores: list[float]  # theirs at ``now_us``: bounds on their scores at any later time
    floor: float
    dirty: set[int]


# The posting bitmaps of the long lists a query splits into classes (``ProfileIndex._bitmap``) are
# kept up to this many bytes in all (an eighth of a byte per memory each: 12.5 KB at 100k).
_BITMAP_BYTES: Final = 8 << 20
_NONZERO: Final = re.compile(rb"[^\x00]")
_BYTE_BITS: Final = tuple(tuple(j for j in range(8) if b >> j & 1) for b in range(256))


def _bits_of(docs: Iterable[int]) -> int:
    """A bitmap (as an int) of a few doc numbers."""
    out = 0
    for d in docs:
        out |= 1 << d
    return out


def bit_docs(x: int) -> list[int]:
    """The doc numbers whose bits are set in ``x`` (a bitmap as an int), ascending: the zero
    bytes are skipped in C, so this costs about one step per doc found."""
    if not x:
        return []
    raw = x.to_bytes((x.bit_length() + 7) >> 3, "little")
    out: list[int] = []
    for m in _NONZERO.finditer(raw):
        i = m.start()
        base = i << 3
        out += [base + j for j in _BYTE_BITS[raw[i]]]
    return out


class BitSet:
    """A set of doc numbers held as a bitmap (an int for set algebra, its bytes for membership):
    what a class of memories holding only common features is, however many they are."""

    __slots__ = ("bits", "raw", "n")

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.raw = bits.to_bytes((bits.bit_length() + 7) >> 3, "little")
        self.n = bits.bit_count()

    def __len__(self) -> int:
        return self.n

    def __contains__(self, d: object) -> bool:
        i: int = d >> 3  # type: ignore[operator]  # doc numbers only
        return i < len(self.raw) and bool(self.raw[i] >> (d & 7) & 1)  # type: ignore[operator]

    def __iter__(self) -> Iterator[int]:
        return iter(bit_docs(self.bits))


R = TypeVar("R", bound=Sequence[Any])  # a row: (item, score, recency, topic, ...)

_TAKE, _SKIP, _STOP = 0, 1, 2


def _class_verdict(rows: Iterable[R], top: float, strong: bool, best: float, *, ratio: float, min_score: float,
                   limit: int, strong_of: Callable[[R], bool]) -> int:
    """Whether a class of candidates (topic ``top``; ``strong``: it shares a query term) can
    change what the gate (:func:`gate_select`) keeps, given the ``rows`` found so far, classes
    being taken best topic first. ``_SKIP``: ``limit`` rows that pass the gate come before any of
    its members in the gate's order (a shared term first, then the topic), so none could be
    kept; ``_STOP``: so many come before any member of a later class too (strong rows of a
    higher topic). A class of a topic above the best so far is always taken: its members may
    raise the gate's floor; once the best is at least ``top``, it and the floor are final."""
    if top > best:
        return _TAKE
    floor = ratio * best
    before = strong_before = 0
    for r in rows:
        if r[1] < min_score or r[3] < floor:
            continue
        s = strong_of(r)
        if s and r[3] > top:
            strong_before += 1
        if (s and not strong) or (s == strong and r[3] > top):
            before += 1
    if strong_before >= limit:
        return _STOP
    return _SKIP if before >= limit else _TAKE


C = TypeVar("C", bound=tuple[Any, ...])  # a class of candidates: (topic, mask of the features held, ...)


def gated_classes(pending: Iterable[C], rows: list[R], best: float, *, ratio: float, min_score: float, limit: int,
                  term_bits: int, strong_of: Callable[[R], bool]) -> Iterator[C]:
    """The classes of candidates whose members the gate may keep, from ``pending`` sorted best
    topic first: the loop both ranking paths (the index's, the cold path's) run over classes.

    The caller reads each class yielded and appends its best to ``rows`` before taking the next;
    a class that added rows raises the best topic to its own (the gate's floor follows it). Ends
    at a class whose topic fails the gate (``ratio`` × the best), as does every class after it,
    or once ``limit`` strong rows of a higher topic come first (:func:`_class_verdict`)."""
    for c in pending:
        top, m = c[0], c[1]
        if top <= 0.0 or top < ratio * best:
            return
        verdict = _class_verdict(rows, top, bool(m & term_bits), best, ratio=ratio, min_score=min_score,
                                 limit=limit, strong_of=strong_of)
        if verdict == _STOP:
            return
        if verdict == _SKIP:
            continue
        before = len(rows)
        yield c
        if len(rows) > before:
            best = max(best, top)


class ProfileIndex:
    """The recall index of one profile, kept current incrementally (see :class:`RecallIndex`).

    Lean by construction: a memory is a *doc* number; its fields live in typed arrays indexed by
    it (no object per memory); its features are interned ids in one flat array; each feature's
    posting list is an ``array('i')`` of doc numbers, ascending; the two static orders (by
    cm·recency and by cm·usage) are ``array('i')`` too. A doc whose features or tier change gets a
    new number (the old slot is dead until the next full build); an access bump updates in place.
    """

    def __init__(self, t0_us: int) -> None:
        self.t0_us = t0_us
        self.ids: list[str | None] = []
        self.doc: dict[str, int] = {}
        self.created = array("q")
        self.anchor = array("q")
        self.count = array("q")
        self.cm = array("d")
        self.use = array("d")
        self.kx = array("d")  # log(cm) + ln2·(anchor − t0)/halflife: orders cm·recency at any time
        self.y = array("d")  # cm·usage
        self.core = array("b")
        self.pref = array("b")  # a preference (the core tier's other category is fact)
        # The same two flags as bitmaps (bit d: doc d is core / a preference), so that a walk
        # finds a tier's members of a class with one AND; set once, as a doc is appended (a doc
        # whose tier changes gets a new number).
        self.core_bits = bytearray()
        self.pref_bits = bytearray()
        self.words = array("i")  # processedContent's whitespace-separated words (the second pass)
        self.preferences: set[int] = set()  # the "preference" tier: few, each scored directly
        self.tok_at = array("q")  # where the doc's feature ids start in ``toks``
        self.tok_n = array("i")
        self.toks = array("i")
        self.vocab: dict[str, int] = {}  # stored token ("term", "~hex" or "@cluster") -> feature id
        self.postings: list[array[int]] = []
        self.total_accesses = 0
        self.dead = 0
        self.by_x = array("i")  # live docs by (−kx, doc)
        self.by_y = array("i")  # live docs by (−y, doc)
        # The keys the orders are sorted by, position by position (−kx, −y: ascending), so that a
        # doc is found in its order by bisections in C: its key's run, then the doc within it.
        self.neg_x = array("d")
        self.neg_y = array("d")
        # Docs whose place in the orders is out of date since they were last made, with the keys
        # they are filed under (``None``: not filed, a new doc): access bumps, new and removed
        # docs. Each walk scores them apart until they are many, then they are filed in one
        # pass (``_settle``, ``_sorted``).
        self._moved: dict[int, tuple[float, float] | None] = {}
        self.rev = -1
        self.resets = -1
        self.direct = _DIRECT  # a speed knob (tests walk every class); never changes the answer
        self.head_size = _HEAD_SIZE  # a speed knob too (tests make heads tiny)
        self.moved_max = _MOVED_MAX  # and this (tests fold the orders often)
        # Bitmaps (bit d: doc d holds the feature) of the long posting lists queries split into
        # classes, made on first use and kept current as docs come and go; least recently used
        # first. A bitmap answers intersections in C and costs n/8 bytes whatever the list's
        # length (a set of the same list: about 100 bytes a posting).
        self._bits: OrderedDict[int, bytearray] = OrderedDict()
        # Per tier, the head of the walk over every doc (no query feature held): see ``_head``.
        self._heads: dict[str | None, _Head] = {}
        # The memories queries returned, by id, as their rows were read (at most ``_ROWS_MAX``,
        # the oldest read first out): a block reads the same core entries run after run, and
        # reading a row back costs more than ranking it once the page cache is cold (another
        # connection's commit, the access bumps', empties it). A row's every field moves its
        # ``rev`` (recall schema step 6), and every row with a newer rev passes through
        # ``apply`` before a query reads here: it drops the row's memory.
        self.rows: OrderedDict[str, Memory] = OrderedDict()

    @property
    def size(self) -> int:
        return len(self.doc)

    # -- maintenance --

    def _append(self, row: Sequence[Any]) -> int:
        (mid, created_us, last_us, count, confidence, category, features) = row[:7]
        if features is None:  # not derived yet: tokenised here
            features = features_of(row[8], row[9])
        d = len(self.ids)
        self.ids.append(mid)
        self.doc[mid] = d
        anchor = max(created_us, last_us or created_us)
        cm = confidence_mul(confidence)
        self.created.append(created_us)
        self.anchor.append(anchor)
        self.count.append(count)
        self.cm.append(cm)
        use = usage(count)
        self.use.append(use)
        self.kx.append(math.log(cm) + (anchor - self.t0_us) * _LN2_PER_US)
        self.y.append(cm * use)
        self.core.append(1 if category in CORE_CATEGORIES else 0)
        self.pref.append(1 if category == "preference" else 0)
        self._flag(d, category)
        if category == "preference":
            self.preferences.add(d)
        self.words.append(len((row[10] or "").split()))
        self.tok_at.append(len(self.toks))
        vocab, postings, toks = self.vocab, self.postings, self.toks
        n = 0
        for tok in features.split():
            fid = vocab.get(tok)
            if fid is None:
                fid = vocab[tok] = len(postings)
                postings.append(array("i"))
            postings[fid].append(d)
            toks.append(fid)
            n += 1
        if self._bits:
            for fid in toks[len(toks) - n:]:
                b = self._bits.get(fid)
                if b is not None:
                    if (d >> 3) >= len(b):
                        b.extend(bytes((d >> 3) + 1 - len(b) + 1024))
                    b[d >> 3] |= 1 << (d & 7)
        self.tok_n.append(n)
        self.total_accesses += count
        return d

    def _flag(self, d: int, category: str) -> None:
        """Doc ``d``'s bits in the tier bitmaps (``core_bits``, ``pref_bits``)."""
        i, bit = d >> 3, 1 << (d & 7)
        if i >= len(self.core_bits):
            grow = bytes(i + 1 - len(self.core_bits) + 1024)
            self.core_bits += grow
            self.pref_bits += grow
        if category in CORE_CATEGORIES:
            self.core_bits[i] |= bit
            if category == "preference":
                self.pref_bits[i] |= bit

    def _append_batch(self, rows: Sequence[Sequence[Any]]) -> None:
        """Many rows at once (a build): what ``_append`` does, with the per-token work in C
        (one split of the batch's features, one ``map`` of the vocabulary) except the postings'
        appends."""
        d0 = len(self.ids)
        feats = [r[6] if r[6] is not None else features_of(r[8], r[9]) for r in rows]
        t0 = self.t0_us
        for d, r in enumerate(rows, d0):
            (mid, created_us, last_us, count, confidence, category) = r[:6]
            self.ids.append(mid)
            self.doc[mid] = d
            anchor = max(created_us, last_us or created_us)
            cm = confidence_mul(confidence)
            use = usage(count)
            self.created.append(created_us)
            self.anchor.append(anchor)
            self.count.append(count)
            self.cm.append(cm)
            self.use.append(use)
            self.kx.append(math.log(cm) + (anchor - t0) * _LN2_PER_US)
            self.y.append(cm * use)
            self.core.append(1 if category in CORE_CATEGORIES else 0)
            self.pref.append(1 if category == "preference" else 0)
            self._flag(d, category)
            if category == "preference":
                self.preferences.add(d)
            self.words.append(len((r[10] or "").split()))
            self.total_accesses += count
        split = [f.split() for f in feats]
        ns = [len(s) for s in split]
        tokens = list(chain.from_iterable(split))
        vocab, postings = self.vocab, self.postings
        fids = list(map(vocab.get, tokens))
        if None in fids:
            for i, fid in enumerate(fids):
                if fid is None:
                    tok = tokens[i]
                    fid = vocab.get(tok)
                    if fid is None:
                        fid = vocab[tok] = len(postings)
                        postings.append(array("i"))
                    fids[i] = fid
        at = len(self.toks)
        for n in ns:
            self.tok_at.append(at)
            at += n
        self.tok_n.extend(ns)
        self.toks.extend(fids)  # type: ignore[arg-type]  # no None left
        for fid, d in zip(fids, chain.from_iterable(map(repeat, range(d0, d0 + len(rows)), ns))):
            postings[fid].append(d)  # type: ignore[index]

    def _file(self, d: int) -> None:
        """Doc ``d`` is new: it goes into the orders at the next ``_sorted``."""
        self._moved.setdefault(d, None)

    def _unfile(self, d: int) -> None:
        """Doc ``d`` leaves (its slot is dead): out of the orders at the next ``_sorted``."""
        if d not in self._moved:
            self._moved[d] = (self.kx[d], self.y[d])

    def _settle(self) -> None:
        """Fold the docs out of place into the orders once they are many: until then each walk
        scores them first (few: a recall bumps ``limit`` of them), so a query never pays for
        filing them; the fold's copying comes once per ``_MOVED_MAX`` of them."""
        if len(self._moved) > self.moved_max:
            self._sorted()

    def _sorted(self) -> None:
        """File the moved docs at their current keys, in both orders: each is found where it is
        filed by bisections in C (its key's run in ``neg_x``/``neg_y``, then the doc, ascending
        within a run), and each order is copied once, in slices, without them and with them at
        their new places. O(n) copying in C plus O(moved · log n) steps in Python: about 1 ms at
        10k and 6-8 ms at 100k (loaded machine) for 64-200 docs, once per ``moved_max`` of them,
        where filing each with Python sort keys, or sorting again, cost that per few bumps."""
        moved = self._moved
        if not moved:
            return
        self._moved = {}
        ids = self.ids
        live = sorted(d for d in moved if ids[d] is not None)
        bl, br = bisect.bisect_left, bisect.bisect_right
        for which, order, neg, keys in ((0, self.by_x, self.neg_x, self.kx), (1, self.by_y, self.neg_y, self.y)):
            gone = []
            for d, filed in moved.items():
                if filed is None:
                    continue
                k = -filed[which]
                lo = bl(neg, k)
                hi = br(neg, k, lo)
                i = bl(order, d, lo, hi)
                if i < hi and order[i] == d:
                    gone.append(i)
            rest, rest_neg = order, neg
            if gone:
                gone.sort()
                rest, rest_neg = array("i"), array("d")
                prev = 0
                for i in gone:
                    rest += order[prev:i]
                    rest_neg += neg[prev:i]
                    prev = i + 1
                rest += order[prev:]
                rest_neg += neg[prev:]
            new, new_neg = array("i"), array("d")
            prev = 0
            for k, d in sorted((-keys[d], d) for d in live):
                lo = bl(rest_neg, k)
                hi = br(rest_neg, k, lo)
                i = bl(rest, d, lo, hi)
                new += rest[prev:i]
                new_neg += rest_neg[prev:i]
                new.append(d)
                new_neg.append(k)
                prev = i
            new += rest[prev:]
            new_neg += rest_neg[prev:]
            if which == 0:
                self.by_x, self.neg_x = new, new_neg
            else:
                self.by_y, self.neg_y = new, new_neg

    def _make_orders(self, pause: Callable[[], None] | None = None) -> None:
        """Both static orders, made whole. With ``pause`` (a background build), sorted in runs
        of ``_SORT_RUN`` docs with ``pause`` between them and then once more as a whole: timsort
        merges sorted runs in a fraction of a full sort's time, and a sort holds the GIL from
        start to end, so a query never waits for more than one run. The same orders either way
        (a stable sort; ties by ascending doc)."""
        live = [d for d in self.doc.values()]
        live.sort()
        orders = []
        for keys in (self.kx, self.y):
            key = keys.__getitem__
            if pause is None:
                orders.append(array("i", sorted(live, key=key, reverse=True)))  # ties: ascending doc
                continue
            runs: list[int] = []
            for i in range(0, len(live), _SORT_RUN):
                runs += sorted(live[i:i + _SORT_RUN], key=key, reverse=True)
                pause()
            runs.sort(key=key, reverse=True)
            orders.append(array("i", runs))
            pause()
        self.by_x, self.by_y = orders
        self.neg_x = array("d", [-x for x in map(self.kx.__getitem__, self.by_x)])
        if pause is not None:
            pause()
        self.neg_y = array("d", [-v for v in map(self.y.__getitem__, self.by_y)])
        self._moved.clear()

    def _kill(self, d: int) -> None:
        """Remove doc ``d`` (from the id map, its postings and the orders); its slot stays dead."""
        self._unfile(d)
        mid = self.ids[d]
        assert mid is not None
        del self.doc[mid]
        self.rows.pop(mid, None)
        self.ids[d] = None
        self.preferences.discard(d)
        at = self.tok_at[d]
        for fid in self.toks[at:at + self.tok_n[d]]:
            lst = self.postings[fid]
            i = bisect.bisect_left(lst, d)
            if i < len(lst) and lst[i] == d:
                del lst[i]
            b = self._bits.get(fid)
            if b is not None and (d >> 3) < len(b):
                b[d >> 3] &= ~(1 << (d & 7)) & 0xFF
        self.total_accesses -= self.count[d]
        self.dead += 1

    def _touched(self, d: int) -> None:
        """Doc ``d`` is new or its fields changed: every head scores it as a candidate (a head
        folds its dirty docs in at its next use, ``_head``)."""
        for tier, head in list(self._heads.items()):
            head.dirty.add(d)
            if len(head.dirty) > _HEAD_DIRTY_MAX:  # a head no query has read for long: dropped
                del self._heads[tier]

    def remember(self, memories: Iterable[Memory]) -> None:
        """Keep memories read in a snapshot this index was refreshed to (see ``rows``)."""
        rows = self.rows
        for m in memories:
            rows[m.id] = m
        while len(rows) > _ROWS_MAX:
            rows.popitem(last=False)

    def remove(self, memory_id: str) -> bool:
        d = self.doc.get(memory_id)
        if d is None:
            return False
        self._kill(d)
        return True

    def apply(self, row: Sequence[Any]) -> None:
        """Bring one changed row (as selected by ``_INDEX_ROW_SQL``) into the index."""
        self.rows.pop(row[0], None)  # its memory as read before is out of date
        d = self.doc.get(row[0])
        if d is not None and row[7] == 1 and row[6] is not None:
            at, n = self.tok_at[d], self.tok_n[d]
            vocab = self.vocab
            same = ((1 if row[5] in CORE_CATEGORIES else 0) == self.core[d]
                    and (1 if row[5] == "preference" else 0) == self.pref[d]
                    and [vocab.get(t, -1) for t in row[6].split()] == self.toks[at:at + n].tolist())
            if same:
                # An access bump (or any change that leaves the features and the tier): the
                # postings stay, the fields change in place, the orders later (``_sorted``).
                (_, created_us, last_us, count, confidence) = row[:5]
                anchor = max(created_us, last_us or created_us)
                cm = confidence_mul(confidence)
                words = len((row[10] or "").split())
                if (created_us, anchor, count, cm, words) == (self.created[d], self.anchor[d], self.count[d],
                                                              self.cm[d], self.words[d]):
                    return  # nothing moved: a bump this index applied ahead of its row (``bump``)
                if d not in self._moved:
                    self._moved[d] = (self.kx[d], self.y[d])
                self._touched(d)
                self.total_accesses += count - self.count[d]
                self.created[d], self.anchor[d], self.count[d], self.cm[d] = created_us, anchor, count, cm
                self.use[d] = usage(count)
                self.kx[d] = math.log(cm) + (anchor - self.t0_us) * _LN2_PER_US
                self.y[d] = cm * self.use[d]
                self.words[d] = words  # the text may change with the same features
                return
        if d is not None:
            self._kill(d)
        if row[7] != 1:  # inactive: not ranked
            return
        d = self._append(row)
        self._file(d)
        self._touched(d)

    def bump(self, memory_ids: Iterable[str], now_us: int) -> None:
        """An access bump of these memories, in memory: what :meth:`apply` makes of the rows
        ``Store.mark_accessed`` writes (count + 1, lastAccessedAt = max(it, now)), ahead of them.
        When those rows arrive they are applied again, to the same values."""
        for mid in dict.fromkeys(memory_ids):
            d = self.doc.get(mid)
            if d is None:
                continue
            if d not in self._moved:
                self._moved[d] = (self.kx[d], self.y[d])
            self._touched(d)
            anchor = max(self.anchor[d], now_us)
            count = self.count[d] + 1
            cm = self.cm[d]
            self.total_accesses += 1
            self.anchor[d], self.count[d] = anchor, count
            self.use[d] = usage(count)
            self.kx[d] = math.log(cm) + (anchor - self.t0_us) * _LN2_PER_US
            self.y[d] = cm * self.use[d]

    # -- queries --

    def _lists(self, pq: PreparedQuery) -> list[array[int] | None]:
        """The posting list of each of the query's features (terms, then clusters; pq's order)."""
        vocab, postings = self.vocab, self.postings
        out: list[array[int] | None] = []
        for tok in self._tokens(pq):
            fid = vocab.get(tok)
            out.append(postings[fid] if fid is not None and postings[fid] else None)
        return out

    @staticmethod
    def _tokens(pq: PreparedQuery) -> list[str]:
        return [encode_term(t) for t in pq.terms] + [CLUSTER_PREFIX + c for c in pq.clusters]

    def _bitmap(self, fid: int) -> bytearray:
        """Feature ``fid``'s posting bitmap, made on first use (one pass over its list) and kept
        current by ``_append`` and ``_kill``; the least recently used go past ``_BITMAP_BYTES``."""
        b = self._bits.get(fid)
        if b is not None:
            self._bits.move_to_end(fid)
            return b
        b = bytearray((len(self.ids) >> 3) + 1024)
        for d in self.postings[fid]:
            b[d >> 3] |= 1 << (d & 7)
        self._bits[fid] = b
        while len(self._bits) > 1 and len(self._bits) * len(b) > _BITMAP_BYTES:
            self._bits.popitem(last=False)
        return b

    def _common_bits(self, pq: PreparedQuery, common: list[int]) -> dict[int, int]:
        """The posting bitmaps of the query's common features (feature index -> bitmap as an int)."""
        toks = self._tokens(pq)
        return {i: int.from_bytes(self._bitmap(self.vocab[toks[i]]), "little") for i in common}

    def prepare(self, query: str) -> PreparedQuery:
        vocab, postings = self.vocab, self.postings

        def df(term: str) -> int:
            fid = vocab.get(encode_term(term))
            return len(postings[fid]) if fid is not None else 0

        return prepare_query(query, df, len(self.doc))

    def held(self, pq: PreparedQuery, mask: int) -> tuple[frozenset[str], frozenset[str]]:
        """The query's terms and clusters a doc with ``mask`` holds (bit i: feature i, pq's order)."""
        nt = len(pq.terms)
        return (frozenset(t for i, t in enumerate(pq.terms) if mask >> i & 1),
                frozenset(c for i, c in enumerate(pq.clusters) if mask >> (nt + i) & 1))

    def _plan(self, pq: PreparedQuery, budget: int | None) -> tuple[list[array[int] | None], list[int], list[int]]:
        """The query's posting lists, and which features are read posting by posting (selective)
        and which are split into classes (common, at most ``_MAX_COMMON``)."""
        lists = self._lists(pq)
        weights = pq.weights + pq.cluster_weights
        feats = [(len(p), weights[i], i) for i, p in enumerate(lists) if p]
        budget = default_budget(len(self.doc)) if budget is None else budget
        selective, common, _ = split_features(feats, budget)
        if len(common) > _MAX_COMMON:  # common is shortest first: the shortest extra ones go selective
            selective += common[:-_MAX_COMMON]
            common = common[-_MAX_COMMON:]
        return lists, selective, common

    def _masks(self, lists: list[array[int] | None], selective: list[int], common: list[int],
               bits: dict[int, int]) -> tuple[dict[int, int], int]:
        """Doc -> mask of the query features it holds, for every doc holding a selective one; and
        those docs as a bitmap."""
        mask: dict[int, int] = {}
        get = mask.get
        for i in selective:
            bit = 1 << i
            for d in lists[i]:  # type: ignore[union-attr]
                mask[d] = get(d, 0) | bit
        if not mask:
            return mask, 0
        held = bytearray((max(mask) >> 3) + 1)
        for d in mask:
            held[d >> 3] |= 1 << (d & 7)
        mbits = int.from_bytes(held, "little")
        for i in common:
            bit = 1 << i
            for d in bit_docs(mbits & bits[i]):
                mask[d] |= bit
        return mask, mbits

    def _class_top(self, members: Collection[int], top: float, mask: int, limit: int, now_us: int, w: Weights,
                   core: int | None, skip: Collection[int], tier_of: "array[int] | None" = None) -> list[Hit]:
        """The best ``limit`` of ``members`` (docs sharing one topic ``top``) by the gate's order
        within one topic: higher score, newer createdAt, smaller id. Few members are all scored;
        many are found by the threshold walk over the two static orders: a member not visited yet
        has cm·recency ≤ bx and cm·usage ≤ by (the values at the walk's positions), so its score is
        at most wR·bx + wU·by + wT·top; the walk stops once that is below the ``limit``-th score.
        ``core``: only docs with ``tier_of[d] == core`` (``tier_of``: the core flags by default)."""
        anchor, use, cm = self.anchor, self.use, self.cm
        core_of = self.core if tier_of is None else tier_of
        hits: list[Hit] = []
        if len(members) <= self.direct:
            for d in members:
                if (core is None or core_of[d] == core) and d not in skip:
                    hits.append((d, *score_with_topic(anchor[d], now_us, use[d], cm[d], top, w), mask))
            return self._best(hits, limit)
        if not isinstance(members, (set, frozenset, BitSet)):
            members = set(members)
        self._settle()
        xs, ys, kx, y = self.by_x, self.by_y, self.kx, self.y
        k_now = (now_us - self.t0_us) * _LN2_PER_US
        nx, ny = len(xs), len(ys)
        px = py = 0
        best: list[float] = []  # min-heap of the best ``limit`` scores so far
        topic_bound = w.topic * top
        # The docs out of place in the orders are scored first, and the walk passes them by: the
        # bound at its positions holds for every doc filed at its current keys.
        moved = self._moved
        for d in moved:
            if d in members and (core is None or core_of[d] == core) and d not in skip:
                s, rec, _ = score_with_topic(anchor[d], now_us, use[d], cm[d], top, w)
                _offer(best, s, limit)  # kept as a hit either way: the caller's cut decides
                hits.append((d, s, rec, top, mask))
        # What the walk may still take, as a bitmap (bit d: doc d): the members of the tier, less
        # the skipped and the moved ones, each cleared once visited. Testing a bit costs a few
        # steps per position, where the sets took a call.
        want = self._walkable(members, core_of, core, chain(moved, skip))

        while True:
            while px < nx:
                d = xs[px]
                if want[d >> 3] >> (d & 7) & 1:
                    break
                px += 1
            while py < ny:
                d = ys[py]
                if want[d >> 3] >> (d & 7) & 1:
                    break
                py += 1
            if px >= nx:
                break
            bx = math.exp(min(700.0, kx[xs[px]] - k_now))  # capped: an anchor centuries ahead
            by = y[ys[py]] if py < ny else 0.0
            if len(best) >= limit and w.recency * bx + w.usage * by + topic_bound + _EPS < best[0]:
                break
            d = ys[py] if (w.usage * by > w.recency * bx and py < ny) else xs[px]
            want[d >> 3] &= ~(1 << (d & 7)) & 0xFF  # visited
            s, rec, _ = score_with_topic(anchor[d], now_us, use[d], cm[d], top, w)
            if not _offer(best, s, limit):
                continue
            hits.append((d, s, rec, top, mask))
        return self._best(hits, limit)

    def _walkable(self, members: Collection[int], tier_of: "array[int]", core: int | None,
                  left_out: Iterable[int]) -> bytearray:
        """The bitmap of ``members`` in the tier (``tier_of[d] == core``; ``None``: any) without
        ``left_out``, as bytes: one AND with the tier's bitmap, then the few left out cleared."""
        size = (len(self.ids) >> 3) + 1
        if isinstance(members, BitSet):
            bits = members.bits
        else:
            raw = bytearray(size)
            for d in members:
                raw[d >> 3] |= 1 << (d & 7)
            bits = int.from_bytes(raw, "little")
        if core is not None:
            if tier_of is self.core:
                flagged = int.from_bytes(self.core_bits, "little")
            elif tier_of is self.pref:
                flagged = int.from_bytes(self.pref_bits, "little")
            else:
                raise ValueError("a tier is ranked by the core or the preference flags")
            bits = bits & flagged if core else bits & ~flagged
        want = bytearray(bits.to_bytes(size, "little"))
        for d in left_out:
            want[d >> 3] &= ~(1 << (d & 7)) & 0xFF
        return want

    def _tie(self, h: Hit) -> tuple[float, int, str]:
        return rank_key(h[1], self.created[h[0]], self.ids[h[0]] or "")

    def _best(self, hits: list[Hit], limit: int) -> list[Hit]:
        """The best ``limit`` of ``hits`` in rank order (score, newer createdAt, smaller id): the
        ``limit``-th best score is found on the floats alone, so only hits at or above it pay
        for the full sort key."""
        if len(hits) > 2 * limit:
            floor = heapq.nlargest(limit, [h[1] for h in hits])[-1]
            hits = [h for h in hits if h[1] >= floor]
        return heapq.nsmallest(limit, hits, key=self._tie)

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
    ) -> list[Hit]:
        """The spec's exact top ``limit`` (no gate) as hits, best first.

        Docs holding a query feature are grouped by the features they hold (one topic per
        group: posting by posting for the selective features, by set operations for the docs
        holding only common ones) and each group's best are found (:meth:`_class_top`); a
        threshold walk over the static orders, which visits docs best cm·recency / cm·usage
        first, finds the best of those holding no query feature (topic 0). ``essential_budget`` caps
        how many postings are read one by one; it changes only the speed, never the answer.
        """
        w = weights_for(maturity(self.total_accesses))
        core = None if tier is None else int(tier == "core")
        skip = {self.doc[i] for i in exclude_ids if i in self.doc}
        tier_of = self.core
        if tier == PREFERENCE_TIER:
            if len(self.preferences) <= self.direct:  # a profile's preferences are usually few: each is scored
                prefs, _ = self._preference_rows(pq, now_us, w, skip, None)
                return self._best([h for h in prefs if h[1] >= min_score], limit)
            tier_of, core = self.pref, 1  # many: ranked as a tier, by classes and the walk
        hits: list[Hit] = []
        mask: dict[int, int] = {}
        topics: dict[int, float] = {}

        def topic_of(m: int) -> float:
            t = topics.get(m)
            if t is None:
                t = topics[m] = topic(pq, *self.held(pq, m))
            return t

        bits: dict[int, int] = {}
        self._settle()
        xs, ys, kx, y = self.by_x, self.by_y, self.kx, self.y
        k_now = (now_us - self.t0_us) * _LN2_PER_US
        if not pq.empty:
            lists, selective, common = self._plan(pq, essential_budget)
            bits = self._common_bits(pq, common)
            mask, mbits = self._masks(lists, selective, common, bits)
            excl = mbits | _bits_of(skip)
            classes: dict[int, list[int]] = {}
            for d, m in mask.items():
                classes.setdefault(m, []).append(d)
            for m, members in classes.items():
                hits += self._class_top(members, topic_of(m), m, limit, now_us, w, core, skip, tier_of)
            # The docs holding only common features, a class per subset, best topic first; a
            # class whose best possible score (the best cm·recency and cm·usage of the profile,
            # its topic) is below the k-th score so far ends this, as do all after it.
            subsets = []
            for sub in range(1, 1 << len(common)):
                m = 0
                for j, i in enumerate(common):
                    if sub >> j & 1:
                        m |= 1 << i
                subsets.append((topic_of(m), m))
            subsets.sort(key=lambda c: -c[0])
            bound: float | None = None  # wR·(the best cm·recency) + wU·(the best cm·usage), once needed
            for top, m in subsets:
                kth = heapq.nlargest(limit, [h[1] for h in hits if h[1] >= min_score])
                if len(kth) >= limit and bound is None:
                    # The best cm·recency and cm·usage: the orders' first, or a doc out of place in them.
                    out_of_place = [d for d in self._moved if self.ids[d] is not None]
                    top_kx = max([kx[d] for d in out_of_place] + ([kx[xs[0]]] if xs else []), default=None)
                    top_x = math.exp(min(700.0, top_kx - k_now)) if top_kx is not None else 0.0
                    top_y = max([y[d] for d in out_of_place] + ([y[ys[0]]] if ys else []), default=0.0)
                    bound = w.recency * top_x + w.usage * top_y
                if bound is not None and len(kth) >= limit and bound + w.topic * top + _EPS < kth[-1]:
                    break
                found = self._subset(m, common, bits, excl)
                if found:
                    hits += self._class_top(found, top, m, limit, now_us, w, core, skip, tier_of)
        # The docs holding no query feature (topic 0): from the tier's head when it can answer,
        # else by the walk over the static orders.
        held_common = BitSet(functools.reduce(operator.or_, bits.values(), 0))

        def excluded(d: int) -> bool:
            return d in mask or d in skip or d in held_common

        head = self._head(tier, tier_of, core, now_us, w)
        answer = self._from_head(head, hits, limit, min_score, now_us, w, tier_of, core, excluded)
        if answer is not None:
            return answer
        if now_us - head.now_us > _HEAD_TTL_US:
            del self._heads[tier]
        best = [h[1] for h in heapq.nsmallest(limit, hits, key=self._tie)]
        best = [s for s in best if s >= min_score]
        heapq.heapify(best)
        hits += self._walk0(now_us, w, limit, min_score, tier_of, core, excluded, best)
        return self._best([h for h in hits if h[1] >= min_score], limit)

    def _head(self, tier: str | None, tier_of: "array[int]", core: int | None, now_us: int, w: Weights) -> _Head:
        """The tier's head (:class:`_Head`), made now when there is none, the weights changed, or
        ``now_us`` is before the time it was made at (its bound holds only forward in time)."""
        head = self._heads.get(tier)
        size = self.head_size
        if head is not None and head.weights == w and now_us >= head.now_us and len(head.dirty) > size // 4:
            # Fold the dirty docs in without a walk: every doc outside the head and the dirty set
            # still scores at most the old floor; the candidates are ranked at ``now_us`` and the
            # floor becomes the larger of the old one and the last score kept.
            anchor, use, cm, ids = self.anchor, self.use, self.cm, self.ids
            hits = [(d, *score_with_topic(anchor[d], now_us, use[d], cm[d], 0.0, w), 0)
                    for d in set(head.docs) | head.dirty
                    if ids[d] is not None and (core is None or tier_of[d] == core)]
            top = self._best(hits, size)
            floor = max(head.floor, top[-1][1] if len(top) >= size else float("-inf"))
            head = self._heads[tier] = _Head(now_us, w, [h[0] for h in top], [h[1] for h in top], floor, set())
        if head is None or head.weights != w or now_us < head.now_us:
            found = self._walk0(now_us, w, size, float("-inf"), tier_of, core, lambda d: False, [])
            top = self._best(found, size)
            floor = top[-1][1] if len(top) >= size else float("-inf")
            head = self._heads[tier] = _Head(now_us, w, [h[0] for h in top], [h[1] for h in top], floor, set())
        return head

    def _from_head(self, head: _Head, hits: list[Hit], limit: int, min_score: float, now_us: int, w: Weights,
                   tier_of: "array[int]", core: int | None, excluded: Callable[[int], bool]) -> list[Hit] | None:
        """The top ``limit`` of ``hits`` (the classes' best) and the head's docs and dirty docs
        that hold no query feature, each scored at ``now_us``; ``None`` when the head cannot
        vouch for it: the ``limit``-th best is not above the head's floor (a doc outside the head
        might tie or beat it, and ``min_score`` does not rule it out)."""
        anchor, use, cm, ids = self.anchor, self.use, self.cm, self.ids
        out = [h for h in hits if h[1] >= min_score]
        best = heapq.nlargest(limit, (h[1] for h in out))
        heapq.heapify(best)  # a min-heap of the best ``limit`` scores so far

        def take(d: int) -> None:
            if ids[d] is None or (core is not None and tier_of[d] != core) or excluded(d):
                return
            s, rec, top = score_with_topic(anchor[d], now_us, use[d], cm[d], 0.0, w)
            if s < min_score:
                return
            out.append((d, s, rec, top, 0))
            if len(best) < limit:
                heapq.heappush(best, s)
            elif s > best[0]:
                heapq.heapreplace(best, s)

        for d in head.dirty:
            take(d)
        dirty = head.dirty
        for d, bound in zip(head.docs, head.scores):
            if len(best) >= limit and bound + _EPS < best[0]:
                break  # this one and every later one score at most their bound now: none can enter
            if d not in dirty:
                take(d)
        answer = self._best(out, limit)
        floor = head.floor + _EPS
        if min_score > floor or (len(answer) >= limit and answer[-1][1] > floor):
            return answer  # (a floor of -inf: every doc of the tier is the head's or dirty)
        return None

    def _walk0(self, now_us: int, w: Weights, limit: int, min_score: float, tier_of: "array[int]",
               core: int | None, excluded: Callable[[int], bool], best: list[float]) -> list[Hit]:
        """The threshold walk over the two static orders for the best ``limit`` docs of the tier
        (``tier_of[d] == core``) scored with topic 0, ``excluded`` ones skipped: a doc not visited
        yet has cm·recency ≤ bx and cm·usage ≤ by (the values at the walk's positions), so the
        walk stops once wR·bx + wU·by falls below the ``limit``-th score. ``best``: a min-heap of
        scores found already (the classes'), which only lets it stop sooner."""
        self._settle()
        xs, ys, kx, y = self.by_x, self.by_y, self.kx, self.y
        k_now = (now_us - self.t0_us) * _LN2_PER_US
        anchor, use, cm, core_of = self.anchor, self.use, self.cm, tier_of
        hits: list[Hit] = []
        nx, ny = len(xs), len(ys)
        px = py = 0
        # The docs out of place in the orders first (as in ``_class_top``); a dead one is passed by.
        done: set[int] = set(self._moved)
        ids = self.ids
        for d in done:
            if ids[d] is None or (core is not None and core_of[d] != core) or excluded(d):
                continue
            s, rec, top = score_with_topic(anchor[d], now_us, use[d], cm[d], 0.0, w)
            if s < min_score:
                continue
            _offer(best, s, limit)  # kept as a hit either way: the caller's cut decides
            hits.append((d, s, rec, top, 0))

        def wanted(d: int) -> bool:
            return d not in done and (core is None or core_of[d] == core) and not excluded(d)

        while True:
            while px < nx and not wanted(xs[px]):
                px += 1
            while py < ny and not wanted(ys[py]):
                py += 1
            if px >= nx:
                break
            bx = math.exp(min(700.0, kx[xs[px]] - k_now))
            by = y[ys[py]] if py < ny else 0.0
            threshold = max(best[0], min_score) if len(best) >= limit else min_score
            if w.recency * bx + w.usage * by + _EPS < threshold:
                break
            d = ys[py] if (w.usage * by > w.recency * bx and py < ny) else xs[px]
            done.add(d)
            s, rec, top = score_with_topic(anchor[d], now_us, use[d], cm[d], 0.0, w)
            if s < min_score:
                continue
            if not _offer(best, s, limit):
                continue
            hits.append((d, s, rec, top, 0))
        return hits

    def _preference_rows(self, pq: PreparedQuery, now_us: int, w: Weights, skip: Container[int],
                         similarity: Mapping[str, float] | None) -> tuple[list[Hit], dict[int, float]]:
        """Every preference of the profile (the "preference" tier: few), each scored directly
        (with ``similarity``, evidence mode), and the similarity that counted per doc."""
        fids = [self.vocab.get(tok) for tok in self._tokens(pq)]
        hits: list[Hit] = []
        counted: dict[int, float] = {}
        for d in self.preferences:
            if d in skip:
                continue
            at = self.tok_at[d]
            held = set(self.toks[at:at + self.tok_n[d]])
            m = 0
            for i, fid in enumerate(fids):
                if fid is not None and fid in held:
                    m |= 1 << i
            top = topic(pq, *self.held(pq, m)) if m else 0.0
            s, rec, top = score_with_topic(self.anchor[d], now_us, self.use[d], self.cm[d], top, w)
            if similarity is not None:
                s, top, cos = with_similarity(s, rec, self.use[d], self.cm[d], top, similarity.get(self.ids[d] or ""), w)
                if cos is not None:
                    counted[d] = cos
            hits.append((d, s, rec, top, m))
        return hits, counted

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
    ) -> tuple[list[Hit], float, dict[int, float]]:
        """The evidence-gated top ``limit`` (see :class:`Ranking`), the best topic, and the
        similarity that counted for each kept doc (the semantic signal), exactly as
        :func:`gate_select` over every memory holding a query feature, plus the ``similarity``
        top-k (:func:`memlocal.scoring.with_similarity`), would give them.

        The topic of a memory depends only on which of the query's features it holds, so the
        candidates fall into *classes*, one per set of features held, each with one topic
        (:func:`memlocal.scoring.topic` of that set). Docs holding a selective feature (short
        posting lists) are classed posting by posting; the docs holding only common ones are
        classed by set operations on the common lists (one class per subset), never one by one.
        The gate orders by topic first, so classes are taken best topic first, and a class's own
        best are found by :meth:`_class_top`; it stops at a class whose topic fails the gate
        (ratio × the best topic), or below ``limit`` passing rows of a higher topic. The
        similarity top-k are scored one by one (a memory outside it gains nothing).
        """
        if pq.empty:
            return [], 0.0, {}
        w = weights_for(maturity(self.total_accesses))
        core = None if tier is None else int(tier == "core")
        doc, anchor, use, cm, core_of = self.doc, self.anchor, self.use, self.cm, self.core
        skip = {doc[i] for i in exclude_ids if i in doc}
        term_bits = (1 << len(pq.terms)) - 1

        def ident(item: tuple[int, int]) -> tuple[int, str]:
            return self.created[item[0]], self.ids[item[0]] or ""

        rows: list[Hit] = []
        counted: dict[int, float] = {}

        def strong(item: tuple[int, int]) -> bool:
            return bool(item[1] & term_bits) or item[0] in counted

        if tier == PREFERENCE_TIER:  # a profile's preferences are few: every one is scored
            rows, counted = self._preference_rows(pq, now_us, w, skip, similarity or {})
            kept, best = gate_select([((h[0], h[4]), h[1], h[2], h[3]) for h in rows], limit=limit, ratio=ratio,
                                     min_score=min_score, ident=ident, strong=strong)
            hits: list[Hit] = [(dm[0], s, rec, top, dm[1]) for dm, s, rec, top in kept]
            return hits, best, {h[0]: counted[h[0]] for h in hits if h[0] in counted}
        lists, selective, common = self._plan(pq, essential_budget)
        bits = self._common_bits(pq, common)
        mask, mbits = self._masks(lists, selective, common, bits)
        topics: dict[int, float] = {}

        def topic_of(m: int) -> float:
            t = topics.get(m)
            if t is None:
                t = topics[m] = topic(pq, *self.held(pq, m))
            return t

        common_sets = {i: BitSet(b) for i, b in bits.items()} if similarity else {}
        for mid, cos in (similarity or {}).items():
            d = doc.get(mid)
            if d is None or d in skip or (core is not None and core_of[d] != core):
                continue
            skip.add(d)  # scored here, not in its class
            m = mask.get(d)
            if m is None:
                m = 0
                for i in common:
                    if d in common_sets[i]:
                        m |= 1 << i
            s, rec, top = score_with_topic(anchor[d], now_us, use[d], cm[d], topic_of(m) if m else 0.0, w)
            s, top, cos_used = with_similarity(s, rec, use[d], cm[d], top, cos, w)
            if cos_used is not None:
                counted[d] = cos_used
            rows.append((d, s, rec, top, m))

        classes: dict[int, list[int]] = {}
        for d, m in mask.items():
            if d not in skip and (core is None or core_of[d] == core):
                classes.setdefault(m, []).append(d)
        # Every class, by topic: (topic, mask, members or None for a subset of the common features).
        pending: list[tuple[float, int, Collection[int] | None]] = [(topic_of(m), m, ms) for m, ms in classes.items()]
        k = len(common)
        for sub in range(1, 1 << k):
            m = 0
            for j in range(k):
                if sub >> j & 1:
                    m |= 1 << common[j]
            pending.append((topic_of(m), m, None))
        pending.sort(key=lambda c: -c[0])
        best = max((r[3] for r in rows), default=0.0)
        excl = mbits | _bits_of(skip)

        def strong_hit(h: Hit) -> bool:
            return bool(h[4] & term_bits) or h[0] in counted

        for top, m, members in gated_classes(pending, rows, best, ratio=ratio, min_score=min_score, limit=limit,
                                             term_bits=term_bits, strong_of=strong_hit):
            if members is None:
                members = self._subset(m, common, bits, excl)
                if not members:
                    continue
            rows += self._class_top(members, top, m, limit, now_us, w, core, skip)

        kept, best = gate_select([((h[0], h[4]), h[1], h[2], h[3]) for h in rows], limit=limit, ratio=ratio,
                                 min_score=min_score, ident=ident, strong=strong)
        hits = [(dm[0], s, rec, top, dm[1]) for dm, s, rec, top in kept]
        return hits, best, {h[0]: counted[h[0]] for h in hits if h[0] in counted}

    def rerank(self, hits: list[Hit], pq: PreparedQuery, counted: Mapping[int, float],
               windows: Sequence[tuple[int, int]]) -> list[Hit]:
        """``hits`` (the gate's, from :meth:`top_k_gated`) in the second pass's order
        (:func:`memlocal.scoring.rerank_order`), from the index's own fields: the same order
        :func:`memlocal.scoring.rerank` gives the memories once read."""
        term_bits = (1 << len(pq.terms)) - 1
        core, words, created, ids = self.core, self.words, self.created, self.ids

        def order(h: Hit) -> tuple[bool, float, float, int, str]:
            d, cos = h[0], counted.get(h[0])
            return rerank_order(bool(h[4] & term_bits) or cos is not None, h[3], words[d] if core[d] else None,
                                created[d], cos, h[1], ids[d] or "", windows)

        return sorted(hits, key=order)

    def _subset(self, m: int, common: list[int], bits: dict[int, int], excl: int) -> list[int] | BitSet:
        """The docs holding exactly the common features of mask ``m``, none in ``excl`` (the
        docs holding a selective feature, the skipped ones): a list when few, else a bitmap."""
        out = functools.reduce(operator.and_, (bits[i] for i in common if m >> i & 1))
        for i in common:
            if not m >> i & 1:
                out &= ~bits[i]
        out &= ~excl
        found = BitSet(out)
        return bit_docs(out) if len(found) <= self.direct else found

    @classmethod
    def build(cls, conn: sqlite3.Connection, profile: str, t0_us: int,
              pause: Callable[[], None] | None = None) -> "ProfileIndex":
        """A full index of ``profile`` read inside the caller's read transaction; ``pause`` is
        called every few thousand rows (the background builder yields there)."""
        idx = cls(t0_us)
        row = conn.execute("SELECT rev, resets FROM profile_revs WHERE profile = ?", (profile,)).fetchone()
        idx.rev, idx.resets = row if row is not None else (0, 0)
        cur = conn.execute(_INDEX_ROW_SQL + " AND is_active = 1", (profile,))
        while True:
            # Small batches beside the queries (a batch holds the GIL for a few ms at most).
            batch = cur.fetchmany(2048 if pause is None else _BUILD_BATCH)
            if not batch:
                break
            idx._append_batch(batch)
            if pause is not None:
                pause()
        idx._make_orders(pause)
        return idx


# --- the cold path: a first query answered from the persisted features --------------------------

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

    def __init__(self, store: Store, max_profiles: int = 16, *, essential_budget: int | None = None,
                 cold_queries: int = 2, cold_max_rows: int | None = None, background: bool = True,
                 direct: int | None = None, head_size: int | None = None, moved_max: int | None = None,
                 warm: Callable[[], None] | None = None) -> None:
        self.store = store
        self.max_profiles = max(1, max_profiles)
        self.essential_budget = essential_budget  # a speed knob for tests; None = automatic
        self.cold_queries = cold_queries
        self.cold_max_rows = cold_max_rows
        self.background = background
        self.direct = direct  # a speed knob for tests (see ProfileIndex.direct); None = automatic
        self.head_size = head_size  # a speed knob for tests (see ProfileIndex.head_size); None = automatic
        self.moved_max = moved_max  # a speed knob for tests (see ProfileIndex.moved_max); None = automatic
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
        if self.direct is not None:
            idx.direct = self.direct
        if self.head_size is not None:
            idx.head_size = self.head_size
        if self.moved_max is not None:
            idx.moved_max = self.moved_max
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
            conn = sqlite3.connect(str(self.store.path), timeout=self.store.busy_timeout_s,
                                   isolation_level=None, check_same_thread=False)
            try:
                conn.execute("PRAGMA query_only = 1")
                conn.execute("BEGIN")
                idx = ProfileIndex.build(conn, profile, to_us(utcnow()) or 0, pause)
                conn.execute("COMMIT")
            finally:
                conn.close()
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
        while not self._stop.is_set():
            idle = time.monotonic() - self._last_query
            if idle >= WARM_IDLE_S and self._lock.acquire(blocking=False):
                self._lock.release()
                try:
                    warm()
                except Exception as exc:  # noqa: BLE001 - a head start, never needed: the first use loads it
                    log.warning("warming up failed (%s); the first query that needs it does it", exc)
                return
            self._stop.wait(max(WARM_IDLE_S - idle, 0.005))

    def _refresh(self, conn: sqlite3.Connection, profile: str) -> ProfileIndex:
        row = conn.execute("SELECT rev, resets FROM profile_revs WHERE profile = ?", (profile,)).fetchone()
        rev, resets = row if row is not None else (0, 0)
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
            idx = ProfileIndex.build(conn, profile, to_us(utcnow()) or 0)
        else:
            if resets != idx.resets:
                live = {mid for (mid,) in conn.execute("SELECT id FROM memories WHERE profile = ?", (profile,))}
                for mid in [m for m in idx.doc if m not in live]:
                    idx.remove(mid)
            for r in conn.execute(_INDEX_ROW_SQL + " AND rev > ?", (profile, idx.rev)):
                idx.apply(r)
            idx._settle()
        idx.rev, idx.resets = rev, resets
        self._install(profile, idx)
        if idx.dead > max(1024, idx.size) and self.background:
            self._start_build(profile)  # many rewrites left dead slots: a compact one, beside the queries
        return idx

    def query(self, profile: str, rq: RankQuery) -> list[ScoredMemory]:
        """The exact top ``rq.limit`` of ``profile`` for ``rq.text`` under ``rq.ranking`` (no side
        effects): what :func:`memlocal.scoring.rank_brute_force` returns for the same ``rq``.

        ``rq.similarity``: the semantic signal's embedding top-k (id -> cosine), added to the topic
        in evidence mode (:func:`memlocal.scoring.with_similarity`); ignored in spec mode. In
        evidence mode the gate's first ``max(limit, RERANK_DEPTH)`` are re-ordered by the bounded
        second pass (:func:`memlocal.scoring.rerank`), as the full scan does; from the index, on
        its own arrays (:func:`memlocal.scoring.rerank_order`), so only the ``limit`` kept are read.
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

    def _rows(self, conn: sqlite3.Connection, profile: str, ids: Sequence[str],
              idx: ProfileIndex | None = None) -> dict[str, Memory]:
        """The memories of ``profile`` among ``ids``, by id: those ``idx`` (refreshed in this
        snapshot) keeps, the others read (and kept); inside :meth:`reading`, each read once."""
        if idx is not None:
            kept = idx.rows
            out = {mid: m for mid in ids if (m := kept.get(mid)) is not None}
            if len(out) < len(ids):
                found = self._rows(conn, profile, [mid for mid in ids if mid not in out])
                out.update(found)
                idx.remember(found.values())
            return out
        reading = self._own_reading()
        if reading is None or reading[1] != profile:
            return self.store.get_many(profile, ids, conn=conn)
        seen = reading[2]
        missing = [i for i in ids if i not in seen]
        if missing:
            found = self.store.get_many(profile, missing, conn=conn)
            for mid in missing:
                seen[mid] = found.get(mid)  # None: not there (remembered too)
        return {mid: m for mid in ids if (m := seen[mid]) is not None}

    def _query(self, profile: str, rq: RankQuery) -> list[ScoredMemory]:
        ranking = rq.ranking
        # The gate's first RERANK_DEPTH are re-ordered by the second pass, its first ``keep`` kept.
        limit, keep = (max(rq.limit, RERANK_DEPTH), rq.limit) if ranking.gated else (rq.limit, None)
        now_us = to_us(rq.now or utcnow())
        assert now_us is not None
        if self._own_reading() is None:
            self._prepare(profile)
        with self._lock, self.store.snapshot() as conn:
            if profile not in self._indexes:
                served = self._cold.get(profile, 0)
                self._cold[profile] = served + 1
                if served >= self.cold_queries:
                    if self.background and profile not in self._failed:
                        self._start_build(profile)
                    else:
                        self._failed.discard(profile)
                        self._refresh(conn, profile)
            if profile not in self._indexes:
                cold = cold_query(conn, profile, rq.text, now_us=now_us, limit=limit, min_score=rq.min_score,
                                  ratio=ranking.ratio, exclude_ids=rq.exclude_ids, tier=rq.tier,
                                  similarity=rq.similarity if ranking.gated else None,
                                  essential_budget=self.essential_budget, max_rows=self.cold_max_rows,
                                  spec=not ranking.gated, direct=_COLD_DIRECT if self.direct is None else self.direct)
                if cold is not None:
                    found = self._cold_results(conn, profile, cold, ranking)
                    return found if keep is None else rerank(found, rq.text, keep)
            idx = self._refresh(conn, profile)
            pq = idx.prepare(rq.text)
            mat = maturity(idx.total_accesses)
            w = weights_for(mat)
            best = 0.0
            counted: dict[int, float] = {}
            if ranking.gated:
                top, best, counted = idx.top_k_gated(
                    pq, now_us=now_us, limit=limit, min_score=rq.min_score, ratio=ranking.ratio,
                    exclude_ids=rq.exclude_ids, tier=rq.tier, essential_budget=self.essential_budget,
                    similarity=rq.similarity)
            else:
                top = idx.top_k(pq, now_us=now_us, limit=limit, min_score=rq.min_score,
                                exclude_ids=rq.exclude_ids, tier=rq.tier, essential_budget=self.essential_budget)
            if keep is not None:
                top = idx.rerank(top, pq, counted, query_dates(rq.text))[:keep]
            ids = [idx.ids[d] or "" for d, *_ in top]
            memories = self._rows(conn, profile, ids, idx)
            # A memory whose bump this index holds and this snapshot may not (it is queued): it
            # is shown as the ranking saw it (``with_bump``).
            queued = self._queued(profile, ids) if self._inflight else {}
            out = []
            for mid, (d, s, rec, t, m) in zip(ids, top):
                memory = memories.get(mid)
                if memory is None:
                    continue
                if mid in queued:
                    memory = with_bump(memory, idx.count[d], queued[mid])
                evidence = None
                if ranking.gated:
                    evidence = evidence_of(pq, *idx.held(pq, m), t, best, counted.get(d))
                out.append(ScoredMemory(memory, s, Breakdown(rec, idx.use[d], t, idx.cm[d], w, mat, s), evidence))
            return out

    def _cold_results(self, conn: sqlite3.Connection, profile: str, cold: ColdAnswer,
                      ranking: Ranking) -> list[ScoredMemory]:
        found = self._rows(conn, profile, [h.id for h, *_ in cold.kept])
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
