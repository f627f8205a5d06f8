"""The pass's snapshots (docs/sync.md, "Snapshots"): listed, read ahead while the listing runs
(the *feeds*: a fresh profile's snapshot decoded and made into rows on a thread of its own, in a
helper process for a large one, ``memlocal_sync.prepared``), taken for the plan's fetches where
the listing confirms them, and written for a profile that agrees with the bucket.

The snapshot format is ``memlocal_sync.snapshot`` (pure). ``SyncEngine`` mixes this in; the
listing's early take (``lister.EarlyTake``) takes entries through ``_take_snapshot_entries``.
A snapshot can make a pull faster, never hide, add or change a memory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import chain
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from memlocal.model import format_time, parse_time, utcnow
from memlocal.plugins import Replica

from . import prepared, snapshot
from .bucket import BucketClient, BucketUnavailable, ObjectMissing, ObjectTooLarge
from .changes import ChangeLog
from .executor import BATCH_SIZE
from .objects import PREFIX, SUFFIX, BadObject, Listed, content_hash, decode, encode, object_key, parse_key
from .plan import Action, Op, Plan
from .report import PassReport
from .state import Effect, SkipObject, SyncState, Synced

log = logging.getLogger("memlocal_sync.engine")  # the pass's own lines, as before the feeds had a module

_Prefetched = prepared.Prepared


def _planned_key(action: Action) -> str:
    """The object key of a planned action (its profile and id come from a checked key)."""
    return f"{PREFIX}{action.profile}/{action.id}{SUFFIX}"


class SnapshotFeeds:
    """The pass's part that reads and writes snapshots (mixed into ``SyncEngine``, which sets the
    attributes below)."""

    state: SyncState
    store: Replica
    bucket: BucketClient
    changes: ChangeLog
    max_object_bytes: int
    snapshot_min: int
    snapshot_max_bytes: int  # a snapshot's cap, compressed and unpacked
    push_snapshot_min: int
    deadline_s: float
    _cancelled: threading.Event
    _from_snapshot: dict[str, bytes]  # bodies taken for this pass's fetches, by key
    # The memory objects this pass wrote, ``{key: (etag, body)}``, kept for the snapshot written
    # at its end (``_write_pushed_snapshots``; ``None``: no snapshot is written after this pass).
    _written: dict[str, tuple[str, bytes]] | None
    _snapshot_modified: dict[str, str]  # snapshot key -> LastModified (listed)
    # The thread preparing this pass's snapshots (``_start_feeds``) and the event that stops it.
    _feeding: tuple[threading.Thread, threading.Event] | None

    if TYPE_CHECKING:
        def _check_cancelled(self) -> None:
            """Raise ``PassCancelled`` once the pass was cancelled (``SyncEngine``'s)."""

    def _list_snapshots(self, profiles: Sequence[str] | None) -> dict[str, list[str]]:
        """The snapshot keys in the bucket, by profile (one listing; none when snapshots are off)."""
        if self.snapshot_min <= 0 or (profiles is not None and not profiles):  # (none: a notes-only pull)
            return {}
        out: dict[str, list[str]] = {}
        for obj in self.bucket.list(snapshot.SNAPSHOT_PREFIX).objects:
            parsed = snapshot.parse_snapshot_key(obj.key)
            if parsed is not None and (profiles is None or parsed[0] in profiles):
                out.setdefault(parsed[0], []).append(obj.key)
                self._snapshot_modified[obj.key] = obj.modified
        return out

    def _snapshot_aging(self, key: str) -> bool:
        """Whether a snapshot is a quarter of the record's retention old: rewritten then, so that the
        snapshot a fresh host reads is never far behind the bucket (fewer objects to fetch)."""
        try:
            written = parse_time(self._snapshot_modified.get(key, "")).timestamp()  # type: ignore[union-attr]
        except Exception:
            return False  # no time from the server: written when the profile changes
        return time.time() - written >= self.changes.trust_s / 2

    def _start_feeds(self, snapshots: dict[str, list[str]]) -> dict[str, prepared.Feed]:
        """Start reading the first readable snapshot of each profile on a thread of its own: each
        entry decoded and made ready to insert (content hash, MD5, store row), in a helper process
        for a large snapshot (``memlocal_sync.prepared``), else here, chunk by chunk into the
        profile's feed. Runs beside the listing and the inserts; never raises (a snapshot that
        cannot be used here is read again, or its objects fetched, after the plan);
        ``_stop_feeds`` ends it."""
        feeds = {profile: prepared.Feed() for profile in snapshots}
        stop = threading.Event()

        def run() -> None:
            for profile, keys in snapshots.items():
                feed, read = feeds[profile], False
                try:
                    if not stop.is_set() and not self._cancelled.is_set():
                        read = self._feed_snapshot(profile, keys, feed, stop)
                except Exception as exc:  # containment: this is only a head start
                    log.info("snapshot of %s not read ahead: %s", profile, exc)
                finally:
                    feed.finish(read)  # always: the pass may be waiting for it

        thread = threading.Thread(target=run, name="memlocal-sync-snapshots", daemon=True)
        self._feeding = (thread, stop)
        thread.start()
        return feeds

    def _stop_feeds(self) -> None:
        """Stop the snapshot thread of ``_start_feeds`` (its helper process killed) and wait for it."""
        feeding, self._feeding = self._feeding, None
        if feeding is not None:
            feeding[1].set()
            feeding[0].join()

    def _feed_snapshot(self, profile: str, keys: Sequence[str], feed: prepared.Feed, stop: threading.Event) -> bool:
        """Put the entries of the first of ``keys`` that reads as a snapshot of ``profile``,
        prepared, into ``feed``; whether one was read whole (``False``: none reads, or stopped)."""
        def stopped() -> bool:
            return stop.is_set() or self._cancelled.is_set()

        for key in keys:
            try:
                data, _etag = self.bucket.get(key, self.snapshot_max_bytes)
                if len(data) >= prepared.HELPER_MIN_BYTES and self._helper_allowed():
                    try:
                        # A helper that sends nothing for half the pass's deadline is hung: killed,
                        # and the snapshot read here. Half: the deadline of the pass's next request
                        # runs from the bucket's last answer, which came before that wait.
                        return prepared.stream_in_helper(data, profile, self.max_object_bytes, feed.put, stopped,
                                                         timeout_s=self.deadline_s / 2, chunk=prepared.CHUNK,
                                                         max_bytes=self.snapshot_max_bytes)
                    except BadObject:
                        raise
                    except Exception as exc:  # the helper is only a second core: read here (again)
                        log.info("snapshot %s read here (the helper process failed: %s)", key, exc)
                # Decoded and hashed here; the store makes the rows as the pass inserts the entries.
                entries = list(snapshot.entries(data, profile, self.snapshot_max_bytes,
                                                snapshot.entry_cap(self.max_object_bytes)))
                for i in range(0, len(entries), prepared.CHUNK):
                    ready = prepared.prepare_entries(dict(entries[i:i + prepared.CHUNK]), profile,
                                                     self.max_object_bytes, stopped)
                    if ready is None:
                        return False
                    feed.put(ready)
                return True
            except (ObjectMissing, ObjectTooLarge, BadObject) as exc:
                log.info("snapshot %s not used: %s", key, exc)
        return False

    def _helper_allowed(self) -> bool:
        """A helper process decodes and hashes a large snapshot when there is a second core."""
        return prepared.helper_available()

    def _first_snapshot(self, profile: str, keys: Sequence[str]) -> dict[str, tuple[str, bytes]] | None:
        """The entries of the first of ``keys`` that reads as a snapshot of ``profile``
        (``snapshot.read``), or ``None``."""
        for key in keys:
            try:
                data, _etag = self.bucket.get(key, self.snapshot_max_bytes)
                return snapshot.read(data, profile, self.snapshot_max_bytes, snapshot.entry_cap(self.max_object_bytes))
            except (ObjectMissing, ObjectTooLarge, BadObject) as exc:
                log.info("snapshot %s not used: %s", key, exc)
        return None

    def _read_snapshots(self, plan: Plan, snapshots: dict[str, list[str]], report: PassReport,
                        known: set[str], feeds: dict[str, prepared.Feed] | None = None,
                        read: Mapping[str, dict[str, _Prefetched]] | None = None) -> None:
        """For each profile with many objects to fetch, take their bodies from its snapshot where
        the snapshot's ETag is the listing's and the body is the one that ETag names (the listing
        is the truth); the rest are fetched.

        A memory new to this host (no local row, no base: a fresh host's case) is pulled here
        at once, in batches; the others go through the usual fetch, with the body in hand.
        ``feeds``: snapshots being read and prepared since the listing began (``_start_feeds``),
        taken chunk by chunk as they come, so that the inserts overlap the preparing; ``read``:
        entries taken from those feeds already and not used yet (``EarlyTake.waiting``)."""
        self._from_snapshot = {}
        if self.snapshot_min <= 0:
            return
        feeds = feeds or {}
        fetches: dict[str, dict[str, Action]] = {}
        for action in plan.actions:
            if action.op is Op.FETCH and action.etag:
                fetches.setdefault(action.profile, {})[_planned_key(action)] = action
        taken: set[str] = set()  # keys pulled here: their fetches are done
        effects: list[Effect] = []
        for profile, wanted in fetches.items():
            if profile not in snapshots or (len(wanted) < self.snapshot_min and profile not in feeds):
                continue  # (a snapshot read ahead is used whatever is left to fetch)
            feed = feeds.get(profile)
            chunks: Iterable[dict[str, _Prefetched] | dict[str, tuple[str, bytes]]] = ()
            if feed is not None:
                chunks = chain([(read or {}).get(profile, {})], feed.chunks())
            used = 0
            for chunk in chunks:
                used += self._take_snapshot_entries(chunk, wanted, known, taken, effects, report)
                # Inserted in batches, and whenever the next chunk is not ready yet: what the feed
                # prepares meanwhile is the next batch's.
                if len(effects) >= BATCH_SIZE * 4 or (len(effects) >= BATCH_SIZE and feed is not None
                                                      and not feed.pending()):
                    self._check_cancelled()  # what was applied stays applied
                    self.state.apply(effects)
                    effects = []
            if feed is None or not feed.read:  # not read ahead (or that failed): read here, whole
                entries = self._first_snapshot(profile, snapshots[profile])
                if entries is not None:
                    used += self._take_snapshot_entries(
                        {k: v for k, v in entries.items() if k not in taken}, wanted, known, taken, effects, report)
            report.counts["from_snapshot"] += used
        self.state.apply(effects)
        if taken:
            plan.actions = [a for a in plan.actions if not (a.op is Op.FETCH and _planned_key(a) in taken)]

    def _take_snapshot_entries(self, entries: dict[str, _Prefetched] | dict[str, tuple[str, bytes]],
                               wanted: dict[str, Action], known: set[str], taken: set[str], effects: list[Effect],
                               report: PassReport) -> int:
        """The entries (prepared, or ``(etag, body)``) that stand for a planned fetch: the
        listing's ETag, the body that ETag names, within the size limit. A memory this host does
        not know is pulled (its effect appended, its key added to ``taken``); a known one keeps
        its fetch, with the body in hand (``_from_snapshot``). Returns how many were used."""
        used = 0
        for obj_key, entry in entries.items():
            action = wanted.get(obj_key)
            if action is None or obj_key in taken or obj_key in self._from_snapshot:
                continue
            if isinstance(entry, prepared.Prepared):
                pre: _Prefetched | None = entry
                etag, body = entry.etag, entry.body
                # Its body's MD5 (32 hex digits) is the listed ETag: only an MD5 ETag can be
                # equal to it (``snapshot.etag_md5``, without checking the digits a second time).
                matches = bool(entry.md5) and entry.md5 == action.etag.strip('"').lower()
            else:
                pre = None
                etag, body = entry
                matches = snapshot.body_matches(body, action.etag)
            if etag != action.etag or len(body) > self.max_object_bytes or not matches:
                continue
            used += 1
            if action.id in known:
                self._from_snapshot[obj_key] = body
                continue
            taken.add(obj_key)
            if pre is not None and pre.memory is None:
                report.counts["skipped_objects"] += 1
                effects.append(SkipObject(obj_key, action.etag, pre.reason))
                continue
            if pre is not None and pre.memory is not None:
                effects.append(Synced(pre.memory, action.etag, pre.hash, 0, "remote"))
            else:
                try:
                    remote = decode(body, action.profile, action.id)
                except BadObject as exc:
                    report.counts["skipped_objects"] += 1
                    effects.append(SkipObject(obj_key, action.etag, exc.reason))
                    continue
                effects.append(Synced(remote, action.etag, content_hash(remote), 0, "remote"))
            report.counts["pulled"] += 1
        return used

    def _write_snapshots(self, listing: list[Listed], base: dict[str, Any],
                         snapshots: dict[str, list[str]], report: PassReport, busy: set[str], *,
                         marker_id: str | None = None, seq: int | None = None) -> None:
        """Write the snapshot of each profile that agrees with the bucket, has at least
        ``sync.snapshot_min_objects`` objects, and whose snapshot in the bucket is not current.
        A snapshot only holds objects whose exact memory this host has (base ETag = listed ETag,
        content unchanged, no unmerged access bumps); a profile with any other is skipped."""
        if self.snapshot_min <= 0:
            return
        by_profile: dict[str, list[Listed]] = {}
        for obj in listing:  # grouped by the key's profile part; the keys are checked below
            profile, sep, _rest = obj.key[len(PREFIX):].partition("/")
            if sep:
                by_profile.setdefault(profile, []).append(obj)
        for profile, objects in by_profile.items():
            if len(objects) < self.snapshot_min or profile in busy:
                continue  # (a fresh host's pull: every profile is busy, nothing to check)
            objects = [o for o in objects if (parse_key(o.key) or ("", ""))[0] == profile]
            if len(objects) < self.snapshot_min:
                continue
            current = snapshots.get(profile, [])
            name = snapshot.digest((o.key, o.etag) for o in objects)
            if any(snapshot.parse_snapshot_key(k) == (profile, name) and not self._snapshot_aging(k) for k in current):
                continue  # the bucket's snapshot is this listing's (and young enough for a fresh host)
            # Read now (only for a snapshot to write): whatever changed since the pass began
            # fails the checks below, and the profile waits for a later pass.
            local = {m.id: (m, delta) for m, delta in self.store.memories_with_deltas([profile])}
            entries: list[tuple[str, str, bytes]] = []
            for obj in objects:
                mid = obj.key.rsplit("/", 1)[-1][:-5]
                b, here = base.get(mid), local.get(mid)
                if (b is None or here is None or b.etag != obj.etag or here[1] != 0
                        or here[0].profile_name != profile or content_hash(here[0]) != b.content_hash):
                    break
                entries.append((obj.key, obj.etag, encode(here[0])))
            else:
                key, body = snapshot.build(profile, entries, marker=marker_id, seq=seq,
                                           created_at=format_time(utcnow()))
                try:
                    self.bucket.put(key, body)
                    for old in current:
                        if old != key:
                            self.bucket.delete(old)
                    report.counts["snapshots"] += 1
                except BucketUnavailable as exc:  # a snapshot is an optimisation: never fail a pass
                    log.info("snapshot of %s not written: %s", profile, exc)

    def _pushed_snapshot_profiles(self, plan: Plan) -> list[str]:
        """The profiles whose snapshot ``_write_pushed_snapshots`` writes after ``plan``: those
        with ``sync.push_snapshot_min`` creates in it (none when snapshots are off)."""
        if self.snapshot_min <= 0 or self.push_snapshot_min <= 0:
            return []
        created = Counter(a.profile for a in plan.actions if a.op is Op.CREATE)
        return [p for p, n in sorted(created.items()) if n >= max(self.push_snapshot_min, self.snapshot_min)]

    def _write_pushed_snapshots(self, plan: Plan, *, marker_id: str | None, seq: int | None) -> Future[int] | None:
        """After a push of many memories (``sync.push_snapshot_min`` creates of one profile in
        this pass: a first push, an import), write the profile's snapshot now, from what this
        host synced, rather than leave it to a later full pass that finds the profile settled: a
        fresh host right after a first push then reads the whole bank in one GET instead of
        fetching what its hydrate deadline allows. An object this pass wrote goes in as it was
        written (``_written``: the body and the ETag the bucket answered for it) while its base
        is that write; any other memory when its base is its current content, without unmerged
        bumps. A hint like any snapshot: the fresh host lists, and takes an entry only where the
        listing shows its ETag and its body is the one that ETag names.

        Returns the upload under way (how many snapshots it wrote), or ``None``: the engine
        waits for it once the change record is published (``_upload_pushed_snapshots``)."""
        written, self._written = self._written or {}, None
        jobs: list[tuple[str, list[tuple[str, str, bytes]]]] = []
        for profile in self._pushed_snapshot_profiles(plan):
            self._check_cancelled()
            base = self.state.base_entries([profile])
            entries: list[tuple[str, str, bytes]] = []
            others: list[str] = []
            for b in base.values():
                if b.profile != profile:
                    continue
                key = object_key(profile, b.id)
                own = written.get(key)
                if own is not None and own[0] == b.etag:
                    entries.append((key, b.etag, own[1]))
                else:
                    others.append(b.id)
            for memory, delta in (self.store.memories_with_deltas([profile], ids=others) if others else []):
                b = base[memory.id]
                if delta == 0 and content_hash(memory) == b.content_hash:
                    entries.append((object_key(profile, memory.id), b.etag, encode(memory)))
            if len(entries) >= self.snapshot_min:
                jobs.append((profile, entries))
        if not jobs:
            return None
        # Built (JSON, gzip: the GIL is let go while it deflates) and uploaded on a thread of its
        # own while the pass publishes its change record, rather than before: the two wait on the
        # bucket at once. Only the entries cross: the thread reads nothing of the store.
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlocal-sync-snapshot")
        try:
            return pool.submit(self._upload_pushed_snapshots, jobs, marker_id, seq)
        finally:
            pool.shutdown(wait=False)

    def _upload_pushed_snapshots(self, jobs: list[tuple[str, list[tuple[str, str, bytes]]]],
                                 marker_id: str | None, seq: int | None) -> int:
        """Build and write each ``(profile, entries)`` snapshot, and delete the profile's older
        ones; how many were written. Bucket trouble skips a snapshot (an optimisation: it never
        fails a pass)."""
        written = 0
        for profile, entries in jobs:
            key, body = snapshot.build(profile, entries, marker=marker_id, seq=seq, created_at=format_time(utcnow()))
            try:
                older = [k for k in self._list_snapshots([profile]).get(profile, []) if k != key]
                self.bucket.put(key, body)
                for old in older:
                    self.bucket.delete(old)
                written += 1
            except BucketUnavailable as exc:
                log.info("snapshot of %s not written after the push: %s", profile, exc)
        return written
