"""The executor of a pass: one pipeline for every synced kind (``memlocal_sync.kinds``).

Bucket requests run on a thread pool (``sync.workers``); each action's worker does its requests
(a 412 read-modify-write loop included) and returns *effects*, which the pass's thread commits in
batches (``Executor._execute``). The local deletions of a pass, the plan's and those found under a
conditional write (an access merge answered 404), meet one mass-delete guard
(``Executor._guarded_deletions``). ``SyncEngine`` runs it; a kind's ``resolve`` is handed it as
its ``Pipeline`` (``push``, ``reid``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from queue import Empty, SimpleQueue
from typing import Any, Callable, Iterator, Mapping, Sequence

from memlocal.errors import SyncError, fold_whitespace
from memlocal.humanize import printable
from memlocal.model import new_id
from memlocal.plugins import Replica

from .bucket import BucketClient, BucketUnavailable, ObjectMissing, ObjectTooLarge, PreconditionFailed
from .kinds import MEMORY, SyncedKind
from .objects import BadObject, object_key
from .plan import Action, Guard, Op, Plan, hold_deletions
from .report import PassReport, Progress
from .state import Changed, Effect, SkipObject, SyncState, Synced

log = logging.getLogger("memlocal_sync.engine")  # the pass's own lines, as before the executor had a module

# Read-modify-write attempts on 412 before an access merge is left for the next pass.
MERGE_ATTEMPTS = 8
# Effects are committed when this many are waiting, or this many seconds after the last commit.
BATCH_SIZE = 500
BATCH_SECONDS = 0.5
# Local memories read per query for the creates of a pass (``SyncEngine._with_locals``).
PRELOAD = 500
# The most actions a worker takes at once (``_chunk_size``).
CHUNK_MAX = 32


class Executor:
    """Runs the actions of a pass's plans and commits their effects (mixed into ``SyncEngine``,
    which sets the attributes below)."""

    state: SyncState
    store: Replica
    bucket: BucketClient
    workers: int
    max_object_bytes: int
    mass_delete_min: int
    max_delete_share: float
    _cancelled: threading.Event
    # Bodies taken from snapshots for this pass's fetches, by key (``feeds``; read by the workers).
    _from_snapshot: dict[str, bytes]
    # Objects found gone under a conditional write of this pass (``_found_gone``).
    _gone: list[_Gone]
    _gone_lock: threading.Lock
    _remote_ids: set[str]  # the ids the pass's listing shows (``reid`` draws none of them)
    # The memory objects this pass wrote, for the snapshot written at its end (``SnapshotFeeds``).
    _written: dict[str, tuple[str, bytes]] | None

    def _execute(self, kind: SyncedKind[Any, Any], plan: Plan, report: PassReport, *, pull_only: bool,
                 progress: Progress | None, seen: Mapping[str, Any] | None = None) -> None:
        """Run ``plan``'s actions of ``kind`` on the worker pool and commit their effects in
        batches (``seen``: the local records the plan was made with, by id). Bucket trouble
        stops the rest and is raised once the actions in flight are done; any other failure is
        reported for that action alone.

        A worker takes a chunk of actions (``_chunk_size``) and runs them one after the other
        (``_run_chunk``): one task, one result and one wake-up of this thread per chunk, where one
        per action cost a first push of 10k a tenth of its CPU (docs/benchmarks.md, "Fifth build, session 4")."""
        seen = seen or {}
        actions = plan.actions
        total = len(actions)
        if not total:
            if progress:
                progress(0, 0)
            return
        buffer: list[Effect] = []
        last_flush = time.monotonic()
        done = 0
        failure: BucketUnavailable | None = None
        # Set on bucket trouble: no new chunk is handed out, and the workers stop at their next action.
        stop = threading.Event()
        size = _chunk_size(total, self.workers)

        def flush() -> None:
            nonlocal last_flush
            if buffer:
                self._apply_contained(buffer, report)
                buffer.clear()
            last_flush = time.monotonic()

        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="memlocal-sync") as pool:
            chunks = _chunks(self._with_locals(kind, actions, seen), size)
            in_flight = 0
            # Finished chunks arrive here: O(1) per completion, where ``wait()`` on a pending
            # set re-arms a waiter on every pending future each time one finishes.
            completed: SimpleQueue[Future[_ChunkResult]] = SimpleQueue()

            def submit_more() -> None:
                nonlocal in_flight
                # Two chunks a worker at most: the queue stays short, so a cancelled pass stops quickly.
                while in_flight < self.workers * 2 and not stop.is_set() and not self._cancelled.is_set():
                    chunk = next(chunks, None)
                    if chunk is None:
                        return
                    fut = pool.submit(self._run_chunk, kind, chunk, pull_only, seen, stop)
                    in_flight += 1
                    fut.add_done_callback(completed.put)

            def next_finished() -> list[Future[_ChunkResult]]:
                try:
                    finished = [completed.get(timeout=BATCH_SECONDS)]
                except Empty:
                    return []
                while True:
                    try:
                        finished.append(completed.get_nowait())
                    except Empty:
                        return finished

            try:
                submit_more()
                while in_flight:
                    for fut in next_finished():
                        in_flight -= 1
                        result = fut.result()  # (``_run_chunk`` raises nothing: its outcome is in the result)
                        done += result.done
                        buffer.extend(result.effects)
                        counts = report.counts
                        for name, n in result.counts.items():
                            counts[name] += n
                        report.errors.extend(result.errors)
                        if result.failure is not None and failure is None:
                            failure = result.failure
                    if progress:
                        progress(done, total)
                    if len(buffer) >= BATCH_SIZE or time.monotonic() - last_flush >= BATCH_SECONDS:
                        flush()
                    submit_more()
            except BaseException:
                # (a progress callback's KeyboardInterrupt, say) the pool waits for its workers: they
                # stop at their next action, not after every chunk handed out.
                stop.set()
                raise
        flush()
        if failure is not None:
            raise failure

    def _run_chunk(self, kind: SyncedKind[Any, Any], chunk: list[tuple[Action, Any]], pull_only: bool,
                   seen: Mapping[str, Any], stop: threading.Event) -> _ChunkResult:
        """Run a chunk of actions on a worker thread, one after the other; never raises. Each
        action's effects and counts join the chunk's only when the action completes (a failed
        one's are dropped, as if it had not run: the next pass finds its object and adopts it).
        Bucket trouble stops the chunk and every other one (``stop``)."""
        result = _ChunkResult()
        for action, loaded in chunk:
            if stop.is_set() or self._cancelled.is_set():
                break
            counts: Counter[str] = Counter()
            try:
                effects = self._run_action(kind, action, pull_only, counts, loaded, seen.get(action.id))
            except BucketUnavailable as exc:
                result.failure = exc
                stop.set()
                break
            except Exception as exc:  # one item's trouble must not stop the others
                log.exception("sync %s of %s%s failed", action.op.value, kind.what, action.id)
                result.errors.append(f"{action.op.value} {kind.what}{action.id}: {exc}")
            else:
                result.effects += effects
                total = result.counts
                for name, n in counts.items():  # (not Counter.update: its Mapping check is an ABC's)
                    total[name] += n
            result.done += 1
        return result

    def _apply_contained(self, effects: list[Effect], report: PassReport) -> None:
        """Commit a batch of effects; if the batch fails, commit them one by one, so that one
        effect the database refuses (whatever the reason) is reported alone and never ends the
        pass: a pulled object that cannot be stored becomes a skipped object."""
        try:
            self.state.apply(effects)
            return
        except Exception as exc:
            log.warning("a batch of %d sync effects failed (%s): applying them one by one", len(effects), exc)
        for eff in effects:
            try:
                self.state.apply([eff])
            except Exception as exc:
                reason = f"cannot be stored here: {fold_whitespace(exc)[:200]}"
                if isinstance(eff, Synced):
                    key = object_key(eff.memory.profile_name, eff.memory.id)
                    log.warning("skipping %s: %s", printable(key), printable(reason))
                    report.counts["skipped_objects"] += 1
                    try:
                        self.state.apply([SkipObject(key, eff.etag, reason)])
                    except Exception:  # the report still lists it
                        report.skipped.append({"key": key, "reason": reason})
                else:
                    report.errors.append(f"{type(eff).__name__} {getattr(eff, 'id', getattr(eff, 'key', ''))}: {reason}")

    # --- one action of any kind (runs on a worker thread) ------------------------------------------

    def _with_locals(self, kind: SyncedKind[Any, Any], actions: Sequence[Action],
                     seen: Mapping[str, Any]) -> Iterator[tuple[Action, Any]]:
        """The actions, each CREATE with its local record, read ``PRELOAD`` ids at a time as the
        queue reaches them (``SyncedKind.load_many``, given the records the plan saw; a kind that
        reads none: ``None``)."""
        for start in range(0, len(actions), PRELOAD):
            chunk = actions[start:start + PRELOAD]
            ids = [a.id for a in chunk if a.op is Op.CREATE]
            loaded = kind.load_many(self.state, ids, seen) if ids else {}
            for action in chunk:
                yield action, loaded.get(action.id)

    def _run_action(self, kind: SyncedKind[Any, Any], action: Action, pull_only: bool, counts: Counter[str],
                    loaded: Any = None, seen: Any = None) -> list[Effect]:
        """One planned action: its requests, and the effects to commit (its counts added to
        ``counts``; ``loaded``: the local record of a CREATE, read ahead; ``seen``: the record the
        plan saw)."""
        op = action.op
        if op is Op.CREATE:
            effects = self._create(kind, action.id, counts, loaded)
        elif op is Op.FETCH:
            effects = self._fetch(kind, action.id, action.profile, action.etag, counts, pull_only=pull_only)
        elif op is Op.UPDATE:
            # The remote is still at the base ETag, so its count is ours minus the unmerged delta.
            record = kind.load(self.state, action.id)
            effects = [] if record is None else self.push(kind, record, action.etag, counts, attempt=1)
        elif op is Op.DELETE_REMOTE:
            key = kind.key(action.profile, action.id)
            self.bucket.delete(key)
            counts[kind.counters.deleted_remote] += 1
            effects = [kind.deleted_remote(action.id), Changed(key, "", "delete")]
        elif op is Op.DELETE_LOCAL:
            counts[kind.counters.deleted_local] += 1
            effects = [kind.delete_local(action, seen)]
        elif op is Op.FORGET:
            effects = [kind.forget(action.id)]
        elif op is Op.REID:
            effects = self.reid(action.id, counts)
        else:  # pragma: no cover
            raise AssertionError(op)
        return effects

    def _create(self, kind: SyncedKind[Any, Any], item_id: str, counts: Counter[str], loaded: Any = None) -> list[Effect]:
        """PUT a local record the bucket does not have (``If-None-Match: *``). ``loaded``: the
        record, read ahead (``None``: read here; one deleted since is not recreated, its outbox
        entry says so)."""
        record = loaded if loaded is not None else kind.load(self.state, item_id)
        if record is None:
            return []
        sent = kind.outgoing(record)
        key, profile, _id = kind.key_of(sent)
        body = kind.encode(sent)
        try:
            etag = self.bucket.create(key, body)
        except PreconditionFailed:
            # Someone holds that key: our own earlier PUT, or another host's.
            return self._fetch(kind, item_id, profile, "", counts)
        counts[kind.counters.created] += 1
        if self._written is not None and kind is MEMORY:
            self._written[key] = (etag, body)
        return [*kind.written(sent, etag, created=True), Changed(key, etag, "put", len(body)),
                *kind.after_create(self, sent, etag, counts)]

    def push(self, kind: SyncedKind[Any, Any], record: Any, etag: str, counts: Counter[str], *,
             attempt: int) -> list[Effect]:
        """PUT ``record`` with ``If-Match: etag`` (also ``Pipeline.push``, for the kinds'
        ``resolve``). A 412 re-reads the object and resolves again (up to ``MERGE_ATTEMPTS``
        writes); a 404 means it was deleted on another host meanwhile: the deletion wins."""
        key, profile, item_id = kind.key_of(record)
        data = kind.encode(record)
        try:
            new_etag = self.bucket.replace(key, data, etag)
        except PreconditionFailed:
            counts["precondition_failed"] += 1
            if attempt >= MERGE_ATTEMPTS:
                raise SyncError(f"{key} kept changing: gave up after {attempt} conditional writes; next pass retries") from None
            return self._fetch(kind, item_id, profile, "", counts, attempt=attempt + 1, merging=True)
        except ObjectMissing:
            return self._found_gone(kind, item_id, profile, record)
        counts[kind.counters.pushed] += 1
        if self._written is not None and kind is MEMORY:
            self._written[key] = (new_etag, data)
        return [*kind.written(record, new_etag, created=False), Changed(key, new_etag, "put", len(data))]

    def _fetch(self, kind: SyncedKind[Any, Any], item_id: str, profile: str, listed_etag: str, counts: Counter[str], *,
               pull_only: bool = False, attempt: int = 1, merging: bool = False) -> list[Effect]:
        """GET an object, decode it, and let the kind resolve it against the local record; an
        object too large or unreadable is skipped (remembered with its ETag), never applied."""
        key = kind.key(profile, item_id)
        try:
            # A body from the profile's snapshot, under the listed ETag, stands for the GET.
            cached = self._from_snapshot.pop(key, None) if attempt == 1 and listed_etag else None
            data, etag = (cached, listed_etag) if cached is not None else self.bucket.get(key, self.max_object_bytes)
        except ObjectMissing:
            if merging:
                # Our conditional write was refused and the object is gone: deleted on another
                # host meanwhile, as when the PUT itself answers 404 (SeaweedFS answers If-Match
                # on a missing key with 412): the deletion wins, subject to the guard.
                return self._found_gone(kind, item_id, profile)
            return []  # gone since the listing: the next pass sees the deletion
        except ObjectTooLarge as exc:
            counts["skipped_objects"] += 1
            return [SkipObject(key, exc.etag or listed_etag, str(exc))]
        try:
            remote = kind.decode(data, profile, item_id)
        except BadObject as exc:
            counts["skipped_objects"] += 1
            log.warning("skipping %s: %s", printable(key), printable(exc.reason))
            return [SkipObject(key, etag or listed_etag, exc.reason)]
        return kind.resolve(self, remote, etag, data, counts, pull_only=pull_only, attempt=attempt)

    def _found_gone(self, kind: SyncedKind[Any, Any], item_id: str, profile: str, record: Any = None) -> list[Effect]:
        """An object gone under a conditional write of ours: deleted elsewhere, and the deletion
        wins, but it is a deletion like any other: counted by the mass-delete guard with the
        plan's (``_guarded_deletions``), so nothing is deleted here yet."""
        effects = kind.gone(self.state, item_id, profile, record)
        if effects:
            with self._gone_lock:
                self._gone.append(_Gone(kind, item_id, profile, effects))
        return []

    def _guarded_deletions(self, report: PassReport, plans: Sequence[tuple[SyncedKind[Any, Any], Plan | None]],
                           deferred: Mapping[str, list[Action]], seen: Mapping[str, Mapping[str, Any]],
                           explained: set[str],
                           synced: Callable[[SyncedKind[Any, Any]], Counter[str]], *, force: bool,
                           pull_only: bool, progress: Progress | None) -> list[Guard]:
        """Every local deletion of the pass meets one guard, whatever path found it: the plan's
        (an object gone from the listing or the record), and those found under a conditional
        write (``_found_gone``: an access merge answered 404). If any rule trips, for memories or
        for notes, none of the unexplained ones is applied (the plan's guards included); else
        they are applied now. Returns the guards."""
        with self._gone_lock:
            gone, self._gone = self._gone, []
        guards: list[Guard] = [g for _kind, p in plans if p is not None for g in p.guards]
        if not force and not guards:
            for kind, _p in plans:
                counted: Counter[str] = Counter(kind.plan.scope(a.profile) for a in deferred.get(kind.what, []))
                counted.update(kind.plan.scope(g.profile) for g in gone if g.kind is kind and not _explains(explained, g))
                if counted:
                    guards += hold_deletions(counted, synced(kind), empty_unverified=False,
                                             minimum=self.mass_delete_min, share=self.max_delete_share,
                                             noun=kind.plan.noun)
        if guards and not force:
            for g in gone:  # the held ones stay: the next pass finds them gone again
                if _explains(explained, g):
                    self._apply_gone(g, report)
            return guards
        for kind, _p in plans:
            actions = deferred.get(kind.what, [])
            if actions:
                self._execute(kind, Plan(actions=actions), report, pull_only=pull_only, progress=None,
                              seen=seen.get(kind.what))
        for g in gone:
            self._apply_gone(g, report)
        return guards

    def _apply_gone(self, g: "_Gone", report: PassReport) -> None:
        report.counts[g.kind.counters.deleted_local] += 1
        self._apply_contained(list(g.effects), report)

    def reid(self, memory_id: str, counts: Counter[str]) -> list[Effect]:
        """Give our memory a fresh id (another host's memory owns ``memory_id``), then push it
        (also ``Pipeline.reid``, for the kinds' ``resolve``)."""
        for _ in range(16):
            candidate = new_id()
            if candidate not in self._remote_ids and not self.store.exists(candidate):
                break
        else:  # pragma: no cover - 2^32 ids
            raise SyncError("could not draw an unused memory id")
        moved = self.state.reid(memory_id, candidate)
        if moved is None:
            return []
        counts["reid"] += 1
        log.warning("memory id %s is taken in the bucket by another memory: ours is now %s", memory_id, candidate)
        return self._create(MEMORY, candidate, counts)



@dataclass(slots=True)
class _ChunkResult:
    """What a worker's chunk of actions did (``Executor._run_chunk``)."""

    effects: list[Effect] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    done: int = 0  # actions run (failed ones included), for the progress
    failure: BucketUnavailable | None = None  # the bucket trouble that stopped the chunk


def _chunk_size(total: int, workers: int) -> int:
    """Actions a worker takes at once: enough for a first push's thousands to cost a few hundred
    hand-offs, few enough that a small pass still spreads over every worker (eight chunks a
    worker at least)."""
    return max(1, min(CHUNK_MAX, total // (workers * 8)))


def _chunks(items: Iterator[tuple[Action, Any]], size: int) -> Iterator[list[tuple[Action, Any]]]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    while True:
        chunk = list(islice(items, size))
        if not chunk:
            return
        yield chunk


@dataclass(frozen=True, slots=True)
class _Gone:
    """An item whose object vanished under a conditional write of this pass (its effects held
    until the guard has counted every deletion of the pass)."""

    kind: Any  # SyncedKind
    id: str
    profile: str
    effects: tuple[Effect, ...] | list[Effect]


def _explains(explained: set[str], gone: _Gone) -> bool:
    """Whether a delete record explains ``gone`` (delete records name memories only)."""
    return gone.kind is MEMORY and gone.id in explained
