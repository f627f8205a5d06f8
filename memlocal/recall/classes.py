"""What both ranking paths (the in-memory index, the cold path) share: their speed knobs
(:class:`RecallTuning`), the split of a query's features into selective and common ones, the
bounded best-``limit`` heap, and the loop over the classes of candidates (one per set of common
features held) that the evidence gate may keep."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Callable, Final, Iterable, Iterator, Sequence, TypeVar

# Slack for float rounding in the pruning bound: a memory is skipped only when its bound is below
# the k-th best score by more than this, so ties and near-ties are always scored exactly.
EPS: Final = 1e-9

# At most this many common features are split into classes (2^k subsets); any more are read
# posting by posting like the selective ones (a query rarely holds more than three).
MAX_COMMON: Final = 6

F = TypeVar("F")

# How long no query must have run before the index's warm-up (``RecallIndex.warm``) starts
# (``RecallTuning.warm_idle_s``'s default).
WARM_IDLE_S: Final = 0.05


@dataclass(frozen=True, slots=True)
class RecallTuning:
    """The recall index's speed knobs, in one value. None changes an answer, only which path
    finds it and how fast: the defaults are what a bank runs with, and tests set small ones to
    reach every path with a few memories (``cold_queries=0, background=False``: an index built at
    the first query, in the foreground)."""

    # Postings read one by one per query (``None``: :func:`default_budget` of the profile's size).
    essential_budget: int | None = None
    # A profile's first queries answered by the cold path before its index is built.
    cold_queries: int = 2
    # The cold path gives up on a class to read whole with more rows (the index is built instead).
    cold_max_rows: int | None = None
    # The index is built on a background thread (``False``: by the query that needs it).
    background: bool = True
    # A class up to this size is scored member by member (``None``: ``_DIRECT``, the cold
    # path's ``COLD_DIRECT``; 0 walks every class).
    direct: int | None = None
    # Docs a tier's head keeps (``None``: ``_HEAD_SIZE``).
    head_size: int | None = None
    # Docs out of place in the orders before they are filed (``None``: ``_MOVED_MAX``).
    moved_max: int | None = None
    # How long no query must have run before the warm-up (``RecallIndex.warm``) starts.
    warm_idle_s: float = WARM_IDLE_S


def offer(best: list[float], s: float, limit: int) -> bool:
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
