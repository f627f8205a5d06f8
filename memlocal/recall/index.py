"""The in-memory recall index of one profile (:class:`ProfileIndex`): typed arrays, posting
lists, bitmaps of the common features' postings, the two static orders and the tiers' heads;
an exact top-k in both ranking modes (see :mod:`memlocal.recall`)."""

from __future__ import annotations

import bisect
import functools
import heapq
import math
import operator
import re
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any, Callable, Collection, Container, Final, Iterable, Iterator, Mapping, NamedTuple, Sequence

from ..relevance.features import CLUSTER_PREFIX, encode_term, features_of
from ..model import CORE_CATEGORIES, Memory
from ..store.recall_reads import RecallReads
from ..relevance.scoring import (
    HALF_LIFE_DAYS,
    PREFERENCE_TIER,
    US_PER_DAY,
    PreparedQuery,
    RankQuery,
    Weights,
    confidence_mul,
    gate_select,
    maturity,
    prepare_query,
    rank_key,
    rerank_order,
    score_with_topic,
    topic,
    usage,
    weights_for,
    with_similarity,
)
from .classes import EPS, MAX_COMMON, offer, default_budget, gated_classes, split_features

_LN2_PER_US: Final = math.log(2.0) / (HALF_LIFE_DAYS * US_PER_DAY)

# A class of memories holding the same query features with more members than this is ranked by
# the threshold walk over the static orders instead of scoring every member.
_DIRECT: Final = 384

class Hit(NamedTuple):
    """A doc as the index ranks it: its score and the parts the breakdown shows."""

    doc: int
    score: float
    recency: float
    topic: float
    mask: int  # the query features the doc holds (bit i: feature i, terms then clusters)

# How many docs a tier's head keeps (the best by their score with topic 0; see ``_Head``); a head
# folds its changed docs in once they are more than a quarter of that, and is dropped (made again
# when next needed) once this many changed without a query reading it.
_HEAD_SIZE: Final = 256
# How many memories a profile's index keeps as read (``ProfileIndex.rows``): some 20 blocks' worth.
_ROWS_MAX: Final = 1024
# A background build reads rows in batches of this many, and sorts the static orders in runs of
# ``_SORT_RUN``, letting the queries run between them (``RecallIndex._build``).
_BUILD_BATCH: Final = 256
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
        """Bring one changed row (as :meth:`RecallReads.changed` reads it) into the index."""
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
        and which are split into classes (common, at most ``MAX_COMMON``)."""
        lists = self._lists(pq)
        weights = pq.weights + pq.cluster_weights
        feats = [(len(p), weights[i], i) for i, p in enumerate(lists) if p]
        budget = default_budget(len(self.doc)) if budget is None else budget
        selective, common, _ = split_features(feats, budget)
        if len(common) > MAX_COMMON:  # common is shortest first: the shortest extra ones go selective
            selective += common[:-MAX_COMMON]
            common = common[-MAX_COMMON:]
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
                    hits.append(Hit(d, *score_with_topic(anchor[d], now_us, use[d], cm[d], top, w), mask))
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
                offer(best, s, limit)  # kept as a hit either way: the caller's cut decides
                hits.append(Hit(d, s, rec, top, mask))
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
            if len(best) >= limit and w.recency * bx + w.usage * by + topic_bound + EPS < best[0]:
                break
            d = ys[py] if (w.usage * by > w.recency * bx and py < ny) else xs[px]
            want[d >> 3] &= ~(1 << (d & 7)) & 0xFF  # visited
            s, rec, _ = score_with_topic(anchor[d], now_us, use[d], cm[d], top, w)
            if not offer(best, s, limit):
                continue
            hits.append(Hit(d, s, rec, top, mask))
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
        return rank_key(h.score, self.created[h.doc], self.ids[h.doc] or "")

    def _best(self, hits: list[Hit], limit: int) -> list[Hit]:
        """The best ``limit`` of ``hits`` in rank order (score, newer createdAt, smaller id): the
        ``limit``-th best score is found on the floats alone, so only hits at or above it pay
        for the full sort key."""
        if len(hits) > 2 * limit:
            floor = heapq.nlargest(limit, [h.score for h in hits])[-1]
            hits = [h for h in hits if h.score >= floor]
        return heapq.nsmallest(limit, hits, key=self._tie)

    def top_k(self, pq: PreparedQuery, rq: RankQuery, essential_budget: int | None = None) -> list[Hit]:
        """The spec's exact top ``rq.limit`` (no gate, whatever ``rq.ranking``) of ``rq.tier``,
        ``rq.exclude_ids`` left out, scored at ``rq.now``, as hits, best first; ``pq``: ``rq.text``
        prepared against this index (:meth:`prepare`).

        Docs holding a query feature are grouped by the features they hold (one topic per
        group: posting by posting for the selective features, by set operations for the docs
        holding only common ones) and each group's best are found (:meth:`_class_top`); a
        threshold walk over the static orders, which visits docs best cm·recency / cm·usage
        first, finds the best of those holding no query feature (topic 0). ``essential_budget`` caps
        how many postings are read one by one; it changes only the speed, never the answer.
        """
        now_us, limit, min_score, tier = rq.now_us(), rq.limit, rq.min_score, rq.tier
        w = weights_for(maturity(self.total_accesses))
        core = None if tier is None else int(tier == "core")
        skip = {self.doc[i] for i in rq.exclude_ids if i in self.doc}
        tier_of = self.core
        if tier == PREFERENCE_TIER:
            if len(self.preferences) <= self.direct:  # a profile's preferences are usually few: each is scored
                prefs, _ = self._preference_rows(pq, now_us, w, skip, None)
                return self._best([h for h in prefs if h.score >= min_score], limit)
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
                kth = heapq.nlargest(limit, [h.score for h in hits if h.score >= min_score])
                if len(kth) >= limit and bound is None:
                    # The best cm·recency and cm·usage: the orders' first, or a doc out of place in them.
                    out_of_place = [d for d in self._moved if self.ids[d] is not None]
                    top_kx = max([kx[d] for d in out_of_place] + ([kx[xs[0]]] if xs else []), default=None)
                    top_x = math.exp(min(700.0, top_kx - k_now)) if top_kx is not None else 0.0
                    top_y = max([y[d] for d in out_of_place] + ([y[ys[0]]] if ys else []), default=0.0)
                    bound = w.recency * top_x + w.usage * top_y
                if bound is not None and len(kth) >= limit and bound + w.topic * top + EPS < kth[-1]:
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
        best = [h.score for h in heapq.nsmallest(limit, hits, key=self._tie)]
        best = [s for s in best if s >= min_score]
        heapq.heapify(best)
        hits += self._walk0(now_us, w, limit, min_score, tier_of, core, excluded, best)
        return self._best([h for h in hits if h.score >= min_score], limit)

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
            hits = [Hit(d, *score_with_topic(anchor[d], now_us, use[d], cm[d], 0.0, w), 0)
                    for d in set(head.docs) | head.dirty
                    if ids[d] is not None and (core is None or tier_of[d] == core)]
            top = self._best(hits, size)
            floor = max(head.floor, top[-1].score if len(top) >= size else float("-inf"))
            head = self._heads[tier] = _Head(now_us, w, [h.doc for h in top], [h.score for h in top], floor, set())
        if head is None or head.weights != w or now_us < head.now_us:
            found = self._walk0(now_us, w, size, float("-inf"), tier_of, core, lambda d: False, [])
            top = self._best(found, size)
            floor = top[-1].score if len(top) >= size else float("-inf")
            head = self._heads[tier] = _Head(now_us, w, [h.doc for h in top], [h.score for h in top], floor, set())
        return head

    def _from_head(self, head: _Head, hits: list[Hit], limit: int, min_score: float, now_us: int, w: Weights,
                   tier_of: "array[int]", core: int | None, excluded: Callable[[int], bool]) -> list[Hit] | None:
        """The top ``limit`` of ``hits`` (the classes' best) and the head's docs and dirty docs
        that hold no query feature, each scored at ``now_us``; ``None`` when the head cannot
        vouch for it: the ``limit``-th best is not above the head's floor (a doc outside the head
        might tie or beat it, and ``min_score`` does not rule it out)."""
        anchor, use, cm, ids = self.anchor, self.use, self.cm, self.ids
        out = [h for h in hits if h.score >= min_score]
        best = heapq.nlargest(limit, (h.score for h in out))
        heapq.heapify(best)  # a min-heap of the best ``limit`` scores so far

        def take(d: int) -> None:
            if ids[d] is None or (core is not None and tier_of[d] != core) or excluded(d):
                return
            s, rec, top = score_with_topic(anchor[d], now_us, use[d], cm[d], 0.0, w)
            if s < min_score:
                return
            out.append(Hit(d, s, rec, top, 0))
            if len(best) < limit:
                heapq.heappush(best, s)
            elif s > best[0]:
                heapq.heapreplace(best, s)

        for d in head.dirty:
            take(d)
        dirty = head.dirty
        for d, bound in zip(head.docs, head.scores):
            if len(best) >= limit and bound + EPS < best[0]:
                break  # this one and every later one score at most their bound now: none can enter
            if d not in dirty:
                take(d)
        answer = self._best(out, limit)
        floor = head.floor + EPS
        if min_score > floor or (len(answer) >= limit and answer[-1].score > floor):
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
            offer(best, s, limit)  # kept as a hit either way: the caller's cut decides
            hits.append(Hit(d, s, rec, top, 0))

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
            if w.recency * bx + w.usage * by + EPS < threshold:
                break
            d = ys[py] if (w.usage * by > w.recency * bx and py < ny) else xs[px]
            done.add(d)
            s, rec, top = score_with_topic(anchor[d], now_us, use[d], cm[d], 0.0, w)
            if s < min_score:
                continue
            if not offer(best, s, limit):
                continue
            hits.append(Hit(d, s, rec, top, 0))
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
            hits.append(Hit(d, s, rec, top, m))
        return hits, counted

    def top_k_gated(self, pq: PreparedQuery, rq: RankQuery,
                    essential_budget: int | None = None) -> tuple[list[Hit], float, dict[int, float]]:
        """The evidence-gated top ``rq.limit`` (see :class:`Ranking`; the ratio ``rq.ranking``'s)
        of ``rq.tier``, ``rq.exclude_ids`` left out, scored at ``rq.now``; the best topic; and the
        similarity that counted for each kept doc (the semantic signal), exactly as
        :func:`gate_select` over every memory holding a query feature, plus the ``rq.similarity``
        top-k (:func:`memlocal.relevance.scoring.with_similarity`), would give them. ``pq``: ``rq.text``
        prepared against this index (:meth:`prepare`).

        The topic of a memory depends only on which of the query's features it holds, so the
        candidates fall into *classes*, one per set of features held, each with one topic
        (:func:`memlocal.relevance.scoring.topic` of that set). Docs holding a selective feature (short
        posting lists) are classed posting by posting; the docs holding only common ones are
        classed by set operations on the common lists (one class per subset), never one by one.
        The gate orders by topic first, so classes are taken best topic first, and a class's own
        best are found by :meth:`_class_top`; it stops at a class whose topic fails the gate
        (ratio × the best topic), or below ``limit`` passing rows of a higher topic. The
        similarity top-k are scored one by one (a memory outside it gains nothing).
        """
        if pq.empty:
            return [], 0.0, {}
        now_us, limit, min_score, tier = rq.now_us(), rq.limit, rq.min_score, rq.tier
        ratio, similarity = rq.ranking.ratio, rq.similarity
        w = weights_for(maturity(self.total_accesses))
        core = None if tier is None else int(tier == "core")
        doc, anchor, use, cm, core_of = self.doc, self.anchor, self.use, self.cm, self.core
        skip = {doc[i] for i in rq.exclude_ids if i in doc}
        term_bits = (1 << len(pq.terms)) - 1

        def ident(item: tuple[int, int]) -> tuple[int, str]:
            return self.created[item[0]], self.ids[item[0]] or ""

        rows: list[Hit] = []
        counted: dict[int, float] = {}

        def strong(item: tuple[int, int]) -> bool:
            return bool(item[1] & term_bits) or item[0] in counted

        if tier == PREFERENCE_TIER:  # a profile's preferences are few: every one is scored
            rows, counted = self._preference_rows(pq, now_us, w, skip, similarity or {})
            kept, best = gate_select([((h.doc, h.mask), h.score, h.recency, h.topic) for h in rows], limit=limit, ratio=ratio,
                                     min_score=min_score, ident=ident, strong=strong)
            hits: list[Hit] = [Hit(dm[0], s, rec, top, dm[1]) for dm, s, rec, top in kept]
            return hits, best, {h.doc: counted[h.doc] for h in hits if h.doc in counted}
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
            rows.append(Hit(d, s, rec, top, m))

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
            return bool(h.mask & term_bits) or h.doc in counted

        for top, m, members in gated_classes(pending, rows, best, ratio=ratio, min_score=min_score, limit=limit,
                                             term_bits=term_bits, strong_of=strong_hit):
            if members is None:
                members = self._subset(m, common, bits, excl)
                if not members:
                    continue
            rows += self._class_top(members, top, m, limit, now_us, w, core, skip)

        kept, best = gate_select([((h.doc, h.mask), h.score, h.recency, h.topic) for h in rows], limit=limit, ratio=ratio,
                                 min_score=min_score, ident=ident, strong=strong)
        hits = [Hit(dm[0], s, rec, top, dm[1]) for dm, s, rec, top in kept]
        return hits, best, {h.doc: counted[h.doc] for h in hits if h.doc in counted}

    def rerank(self, hits: list[Hit], pq: PreparedQuery, counted: Mapping[int, float],
               windows: Sequence[tuple[int, int]]) -> list[Hit]:
        """``hits`` (the gate's, from :meth:`top_k_gated`) in the second pass's order
        (:func:`memlocal.relevance.scoring.rerank_order`), from the index's own fields: the same order
        :func:`memlocal.relevance.scoring.rerank` gives the memories once read."""
        term_bits = (1 << len(pq.terms)) - 1
        core, words, created, ids = self.core, self.words, self.created, self.ids

        def order(h: Hit) -> tuple[bool, float, float, int, str]:
            d, cos = h.doc, counted.get(h.doc)
            return rerank_order(bool(h.mask & term_bits) or cos is not None, h.topic, words[d] if core[d] else None,
                                created[d], cos, h.score, ids[d] or "", windows)

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
    def build(cls, reads: RecallReads, profile: str, t0_us: int,
              pause: Callable[[], None] | None = None) -> "ProfileIndex":
        """A full index of ``profile`` read inside the caller's read transaction; ``pause`` is
        called every few thousand rows (the background builder yields there)."""
        idx = cls(t0_us)
        idx.rev, idx.resets = reads.revision(profile)
        # Small batches beside the queries (a batch holds the GIL for a few ms at most).
        for batch in reads.index_rows(profile, 2048 if pause is None else _BUILD_BATCH):
            idx._append_batch(batch)
            if pause is not None:
                pause()
        idx._make_orders(pause)
        return idx
