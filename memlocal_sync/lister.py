"""The pass's listing of the bucket (docs/sync.md, "Listing"): a prefix that fills more than one
page is listed in parallel parts (one per first hex digit of the ids, ``_id_listings``), and a
fresh profile's snapshot entries are pulled while the listing still runs, as each part confirms
their keys and ETags (``EarlyTake``). ``SyncEngine`` mixes ``Lister`` in.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, InvalidStateError, ThreadPoolExecutor, wait
from typing import Any, Mapping, Sequence

from . import prepared
from .bucket import BucketClient, Listing
from .feeds import SnapshotFeeds
from .objects import Listed, object_key, parse_key, profile_prefix
from .plan import Action, Base, Local, Op, first_copy, unusable
from .report import PassReport
from .state import DeleteLocal, Effect, SkipObject, Synced


class Lister:
    """The pass's part that lists the bucket (mixed into ``SyncEngine``, which sets the
    attributes below)."""

    bucket: BucketClient
    workers: int

    def _list(self, prefix: str, early: EarlyTake | None = None) -> tuple[list[Listed], int]:
        """Every object under ``prefix``, in key order, and the pages that took.

        A prefix that fits one page costs one request, as before. Past it, the rest of the
        profile whose keys the first page ended in is listed as one listing per first hex digit
        of the id (``…/mem-3`` from the last key seen, then ``…/mem-4`` … ``…/mem-f``; ids are
        ``mem-`` plus random hex, so these hold about the same number of keys), plus two ranges
        for whatever odd keys sort between and after them; in parallel on ``sync.workers``
        threads. What comes after that profile is listed the same way, from just past its last
        possible key. Together they cover every key once at least (a key two of them see is kept
        once), whatever the bucket holds. On S3 the pages of a listing are sequential round
        trips; this makes them parallel, and the client's parsing overlaps the server's work.
        ``early``: handed the objects of each part on this thread as it is listed (a key two
        parts see may come twice), while the other parts are still being listed, and woken
        when one of its snapshot feeds has finished."""
        found: dict[str, Listed] = {}
        pages = 0
        pending: dict[Future[Any], bool] = {}  # the listings running: whether each is a first page

        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="memlocal-sync-list") as pool:
            def came(part: Listing, first: bool) -> None:
                # What follows a first page is asked for before its objects are handed on.
                nonlocal pages
                pages += part.pages
                if first and part.truncated and part.objects:
                    last = part.objects[-1].key
                    parts = _id_listings(last)
                    if parts is None:  # not a memory key: go on page by page from it
                        pending[pool.submit(self.bucket.list, prefix, start_after=last, max_pages=1)] = True
                    else:
                        pending.update((pool.submit(self.bucket.list, sub or prefix, start_after=lo, last=hi), False)
                                       for sub, lo, hi in parts)
                        # past every key of that profile
                        pending[pool.submit(self.bucket.list, prefix, start_after=parts[-1][2], max_pages=1)] = True
                found.update((o.key, o) for o in part.objects)
                if early is not None:
                    early.listed(part.objects)

            try:
                # The first page on this thread (its kept-alive connection): a prefix that fits one
                # page costs that one request, as before. The other parts, each as it comes, in
                # any order (the first error to come is raised).
                came(self.bucket.list(prefix, max_pages=1), True)
                while pending:
                    woken = early.woken() if early is not None else None
                    for future in wait([*pending, *([woken] if woken else [])], return_when=FIRST_COMPLETED).done:
                        if future is woken:
                            assert early is not None
                            early.listed(())
                        else:
                            came(future.result(), pending.pop(future))
            finally:
                for future in pending:  # the parts not started yet are not started; the others end
                    future.cancel()
        return [found[k] for k in sorted(found)], pages


class EarlyTake:
    """A fresh profile's snapshot entries pulled while the listing still runs.

    A fresh host's pass used to list the whole bucket, plan, and only then insert what the
    snapshots hold: the inserts followed the listing. Here each part of the listing, as it comes
    (``SyncEngine._list``), confirms the keys it shows, and once a profile's snapshot has been
    read whole (its feed finished: until then the second core is the snapshot helper's, and where
    the listing ends first nothing is taken here at all), an entry of a profile this host has
    nothing of is pulled once its key is confirmed with the entry's ETag, by the same rule as
    after the plan (``_take_snapshot_entries``: the listed ETag, the body it names,
    within the size cap). What the plan would do with such a key is known before the listing
    ends: nothing here holds its id (no local row, no base, no queued deletion) and the object
    is usable, so the plan fetches it. A hint still decides nothing alone: an entry whose key no
    listing shows, or shows with another ETag, is never used. ``finish`` then hands the plan those
    memories as synced (local rows and bases, as a later pass would read them), so that it
    plans nothing more for them; an id that the whole listing shows under two profiles is
    resolved by the plan as for any memory this host holds."""

    def __init__(self, engine: SnapshotFeeds, feeds: Mapping[str, prepared.Feed], held: set[str],
                 known_bad: Mapping[str, tuple[str, str]], report: PassReport) -> None:
        self._engine, self._feeds, self._held, self._known_bad, self._report = engine, feeds, held, known_bad, report
        # Keys the listing showed (their fetch as the plan would make it), not matched yet.
        self._confirmed: dict[str, dict[str, Action]] = {p: {} for p in feeds}
        # Entries read from the feeds whose keys the listing has not shown (yet): the plan's.
        self.waiting: dict[str, dict[str, prepared.Prepared]] = {p: {} for p in feeds}
        self._parts: list[Sequence[Listed]] = []  # parts listed, their keys not read yet
        self._taken: set[str] = set()
        self._effects: list[Effect] = []
        self._applied: list[Effect] = []
        engine._from_snapshot = {}
        self._wake: Future[None] = Future()
        for feed in feeds.values():
            feed.notify = self._chunk_came

    def _chunk_came(self) -> None:  # on the feeds' thread
        try:
            self._wake.set_result(None)
        except InvalidStateError:  # set already, by another feed the pass has not taken yet
            pass

    def woken(self) -> Future[None] | None:
        """Done once a feed has finished (``None`` once every feed has been taken whole): the
        listing's wait includes it, so that the entries are taken then, not only as parts of the
        listing come."""
        return None if all(feed.ended for feed in self._feeds.values()) else self._wake

    def listed(self, objects: Sequence[Listed]) -> None:
        """A part of the listing: confirm its keys, take the entries that match, insert them."""
        if objects:
            self._parts.append(objects)
        self._take()

    def _confirm(self) -> None:
        """The keys of the parts listed so far, read once a feed has finished (until then, and
        where none finishes before the listing ends, no key is read twice: the plan reads them)."""
        cap = self._engine.max_object_bytes
        for objects in self._parts:
            for obj in objects:
                parsed = parse_key(obj.key)
                if parsed is None or parsed[0] not in self._confirmed or parsed[1] in self._held:
                    continue
                if obj.key not in self._taken and unusable(obj, self._known_bad, cap) is None:
                    self._confirmed[parsed[0]][obj.key] = Action(Op.FETCH, parsed[1], parsed[0], obj.etag)
        self._parts = []

    def _take(self) -> None:
        if self._wake.done():  # a new one before the feeds are read: a chunk put after sets it
            self._wake = Future()
        if not any(feed.finished for feed in self._feeds.values()):
            return
        self._confirm()
        for profile, feed in self._feeds.items():
            if not feed.finished:
                # Its chunks wait in the feed until it has them all: while the snapshot is being
                # read, the second core is its helper's. Where the listing is the shorter
                # (a fast server) nothing is taken here at all, as before this class.
                continue
            waiting, confirmed = self.waiting[profile], self._confirmed[profile]
            for chunk in feed.chunks(wait=False):
                waiting.update(chunk)
            ready = {key: waiting.pop(key) for key in [k for k in confirmed if k in waiting]}
            if ready:
                used = self._engine._take_snapshot_entries(ready, confirmed, set(), self._taken, self._effects,
                                                           self._report)
                self._report.counts["from_snapshot"] += used
                for key in ready:  # matched or not, decided: a mismatch is the plan's fetch
                    del confirmed[key]
        if self._effects:  # one transaction for what a part or a chunk confirmed (hundreds at most)
            self._engine._check_cancelled()  # what was applied stays applied
            self._engine.state.apply(self._effects)
            self._applied += self._effects
            self._effects = []

    def finish(self, local: dict[str, Local], base: dict[str, Base],
               known_bad: dict[str, tuple[str, str]], listing: Sequence[Listed] = ()) -> None:
        """The listing is over: take what the feeds sent since, then add what was pulled to the
        plan's sides (``local``, ``base``) and what was found unusable to ``known_bad``. A memory
        taken whose id the whole ``listing`` shows under another profile too, where that copy is
        the older (``plan.first_copy``), is taken back: the plan fetches the other, as on every
        host (docs/sync.md, "One id, one profile")."""
        self._take()
        pulled = {e.memory.id: e for e in self._applied if isinstance(e, Synced)}
        if pulled:
            cap = self._engine.max_object_bytes
            copies: dict[str, list[tuple[str, Listed]]] = {}
            for obj in listing:
                parsed = parse_key(obj.key)
                if parsed is not None and unusable(obj, known_bad, cap) is None:
                    copies.setdefault(parsed[1], []).append((parsed[0], obj))
            undo = [DeleteLocal(mid, e.memory.profile_name) for mid, e in pulled.items()
                    if len(copies.get(mid, ())) > 1 and first_copy(copies[mid]) != e.memory.profile_name]
            if undo:
                self._engine.state.apply(undo)
                self._report.counts["pulled"] -= len(undo)
                for d in undo:
                    del pulled[d.id]
                    self._taken.discard(object_key(d.profile, d.id))
        if pulled:
            stored = self._engine.state.base_entries(list(self._feeds))
            for mid, synced in pulled.items():
                b = stored.get(mid)
                if b is not None and b.etag == synced.etag and b.profile == synced.memory.profile_name:
                    base[mid] = b
                    local[mid] = Local(mid, b.profile, synced.base_hash, 0, inactive=not synced.memory.is_active)
        for skip in self._applied:
            if isinstance(skip, SkipObject):
                known_bad[skip.key] = (skip.etag, skip.reason)

    def profiles(self) -> set[str]:
        """The profiles this took memories into (changed by this pass)."""
        return {parsed[0] for key in self._taken if (parsed := parse_key(key)) is not None}


# Sorts after any character a key can hold: ``<profile prefix>`` + this is past the profile's keys.
_PAST: str = "\U0010ffff"
_HEX: str = "0123456789abcdef"


def _id_listings(last: str) -> list[tuple[str | None, str | None, str | None]] | None:
    """The listings (prefix, ``start_after``, ``last``) that cover every key of ``last``'s profile
    after ``last``; a ``None`` prefix is the pass's own. ``None`` when ``last`` is not a memory key.

    One per first hex digit of the id from ``last``'s own on (a prefix listing: the server reads
    and returns only those keys), and two ranges for the keys that no such prefix holds: those
    between ``mem-9…`` and ``mem-a`` (``mem-A…``, ``mem-~``) and those after ``mem-f…`` (``zz.json``,
    ``sub/…``). Keys between two consecutive digits' prefixes can only be the next prefix itself,
    which its listing holds."""
    parsed = parse_key(last)
    if parsed is None:
        return None
    profile = profile_prefix(parsed[0])
    head = f"{profile}mem-"
    digit = last[len(head)]
    out: list[tuple[str | None, str | None, str | None]] = [(head + digit, last, None)]
    out += [(head + h, None, None) for h in _HEX if h > digit]
    if digit <= "9":
        out.append((profile, head + "9" + _PAST, head + "a"))
    out.append((profile, head + "f" + _PAST, profile + _PAST))
    return out
