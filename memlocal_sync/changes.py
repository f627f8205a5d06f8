"""The change record: what memlocal hosts wrote to the bucket, in order, so that a pass that
finds nothing to do costs a constant number of requests, and a deletion carries its intent.

Layout (under ``memlocal/``, which readers of ``memory/`` never list)::

    memlocal/changes/<seq, 16 digits>.json   one segment: the changes one host published at once
    memlocal/changes/head.json               a hint: a sequence number at or below the last one

A segment is created with ``If-None-Match: *`` at the next free sequence number, so two hosts
publishing at once get two numbers (the loser of the race gets 412 and takes the next). A
reader remembers the last number it applied (its cursor) and lists the record after it: a pass
with nothing new costs one LIST that returns nothing. The listing shows every later number, so
a **gap** (a missing number with later ones present: a segment whose upload is still in flight,
or lost) is seen at once: the reader waits for it a bounded time (``GAP_WAIT_S``), listing the
bucket in full meanwhile, then moves past it.

The record is a **hint**, never an order (docs/sync.md, "What a hint may do"): a segment that is
malformed, of another format or marker, over ``MAX_SEGMENT_BYTES`` or ``SEGMENT_CHANGES``
changes, or whose body names another number (out of order) is skipped and reported
(``Reading.skipped``), and the reader reads on past it; the pass that meets one lists in full.

A change is ``{"key", "etag", "op": "put"|"delete", "size"}``; a ``delete`` is a **delete
record**: a deliberate deletion made through memlocal (a user's delete, ``prune``, retention,
a clean-up). Another host applies it without the mass-delete guard, but only once the bucket
shows the object gone (a listing, or a GET that answers 404): a record for an object that is
still there deletes nothing. A disappearance no record explains (a wipe, a foreign writer's
deletion) is still guarded.

Segments live ``sync.change_retention_days`` (7): a full pass of a writing host deletes older
ones, oldest first, never the newest. Because of that, a host trusts its cursor (and a writer
its idea of the last number) only for half of that time: older, it lists the bucket in full
(and searches for the last number) before using the record again. Clocks only decide *when* a
host lists in full, never what it keeps.

The pass's reading of the record is the last part here (``RecordReader``, mixed into
``SyncEngine``): whether a pass follows the record or lists in full (``RecordView``), the plan's
sides for the ids its segments name, the delete records verified, what the reading says about the
record kept for ``sync status``, and after the pass the cursor moved, the journal published and
the record compacted.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Final, Sequence

from memlocal.humanize import plural
from memlocal.model import format_time, parse_time, utcnow
from memlocal.plugins import Replica

from . import marker
from .bucket import BucketClient, BucketUnavailable, ObjectMissing, ObjectTooLarge, PreconditionFailed
from .objects import NOTE_PREFIX, Listed, content_hash, object_key, parse_key
from .plan import Local, Op, Plan
from .report import PassReport
from .state import SyncState

log = logging.getLogger(__name__)
# The pass's own lines (``RecordReader``), under the engine's logger as before they had a module.
pass_log = logging.getLogger("memlocal_sync.engine")

CHANGES_PREFIX: Final = "memlocal/changes/"
HEAD_KEY: Final = CHANGES_PREFIX + "head.json"
FORMAT: Final = "memlocal-changes/1"
# The head hint is moved forward once every this many segments (a hint, never the truth).
HEAD_EVERY: Final = 64
# Changes per segment (a host that was offline may publish a long journal as several); a
# segment holding more is not one of ours and is skipped.
SEGMENT_CHANGES: Final = 2000
# The size cap of a segment: 2000 changes of the longest keys memlocal writes are ~400 KiB. A
# larger object under memlocal/changes/ is skipped unread (its listed size says so).
MAX_SEGMENT_BYTES: Final = 1024 * 1024
# Segments a pass reads one by one before a full listing is the cheaper way to catch up (at
# most MAX_SEGMENTS_READ x MAX_SEGMENT_BYTES read by a pass).
MAX_SEGMENTS_READ: Final = 200
# How long a reader waits for a missing segment while later ones exist (an upload still in
# flight: a request ends within sync.deadline_s), listing in full meanwhile, before it moves
# its cursor past the gap.
GAP_WAIT_S: Final = 60.0
# Gaps a reader moved past that it still looks into (a writer with an old idea of the end may
# claim one later), for as long as a writer trusts that idea (half the retention).
MAX_HOLES: Final = 32
# Slots tried when others keep taking them (each 412 looks for the last number again).
CLAIM_ATTEMPTS: Final = 16
# Old segments a pass deletes at most.
COMPACT_MAX: Final = 200


class Untrusted(Exception):
    """The record cannot be used for this pass: list the bucket in full (the reason says why)."""


@dataclass(slots=True)
class Reading:
    """What a reader found after its cursor: the usable ``segments`` in order; ``end``, the
    cursor once they are applied (past skipped segments, never past a gap still waited for);
    ``skipped``, one line per segment not used; ``gap``, the first missing number with later
    ones present (``None``: none); ``last``, the highest number listed."""

    segments: list["Segment"] = field(default_factory=list)
    end: int = 0
    skipped: list[str] = field(default_factory=list)
    gap: int | None = None
    last: int = 0
    missing: list[int] = field(default_factory=list)  # every missing number below ``last``
    filled: list[int] = field(default_factory=list)  # holes found written since


@dataclass(frozen=True, slots=True)
class Change:
    """One object written (``put``, with its new ETag) or deleted (``delete``: a delete record)."""

    key: str
    etag: str
    op: str
    size: int = 0


@dataclass(frozen=True, slots=True)
class Segment:
    seq: int
    marker: str
    host: str
    created_at: float  # Unix seconds, the writer's clock (only compaction reads it)
    changes: tuple[Change, ...]


def segment_key(seq: int) -> str:
    return f"{CHANGES_PREFIX}{seq:016d}.json"


def parse_segment_key(key: str) -> int | None:
    name = key[len(CHANGES_PREFIX):] if key.startswith(CHANGES_PREFIX) else ""
    if len(name) == 21 and name.endswith(".json") and name[:16].isdigit():
        return int(name[:16])
    return None


def encode_segment(seg: Segment) -> bytes:
    return json.dumps({
        "format": FORMAT, "seq": seg.seq, "marker": seg.marker, "host": seg.host,
        "createdAt": format_time(utcnow() if not seg.created_at else _utc(seg.created_at)),
        "changes": [{"key": c.key, "etag": c.etag, "op": c.op, "size": c.size} for c in seg.changes],
    }, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _utc(ts: float) -> Any:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc)


def decode_segment(data: bytes, seq: int) -> Segment:
    """A segment read back; ``Untrusted`` for anything that is not one of ours at ``seq``."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Untrusted(f"{segment_key(seq)} is not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise Untrusted(f"{segment_key(seq)} has an unknown format {str(doc.get('format') if isinstance(doc, dict) else '')[:40]!r}")
    if doc.get("seq") != seq or isinstance(doc.get("seq"), bool):
        raise Untrusted(f"{segment_key(seq)} is not a segment of this record (its body names number "
                        f"{str(doc.get('seq'))[:20]!r}: out of order or malformed)")
    if not isinstance(doc.get("marker"), str) or not isinstance(doc.get("changes"), list):
        raise Untrusted(f"{segment_key(seq)} is not a segment of this record (no marker or change list)")
    if len(doc["changes"]) > SEGMENT_CHANGES:
        raise Untrusted(f"{segment_key(seq)} holds {len(doc['changes'])} changes, more than {SEGMENT_CHANGES}")
    changes: list[Change] = []
    for c in doc["changes"]:
        if (not isinstance(c, dict) or not isinstance(c.get("key"), str) or c.get("op") not in ("put", "delete")
                or not isinstance(c.get("etag", ""), str) or not isinstance(c.get("size", 0), int)):
            raise Untrusted(f"{segment_key(seq)} holds a change that is not one")
        changes.append(Change(c["key"], c.get("etag", ""), c["op"], max(0, c.get("size", 0))))
    try:
        when = parse_time(doc.get("createdAt"))
        created = when.timestamp() if when is not None else 0.0
    except Exception:
        created = 0.0
    return Segment(seq, doc["marker"], str(doc.get("host", "")), created, tuple(changes))


@dataclass(frozen=True)
class Compaction:
    """What :meth:`ChangeLog.compact` did: segments ``deleted``, and the time (Unix seconds, the
    log's clock) before which another compaction would find nothing old enough to delete."""

    deleted: int
    due: float


class ChangeLog:
    """Reads, publishes and compacts the change record of one bucket."""

    def __init__(self, bucket: BucketClient, *, retention_s: float, clock: Any = time.time) -> None:
        self.bucket = bucket
        self.retention_s = retention_s
        self.clock = clock

    @property
    def trust_s(self) -> float:
        """How long a cursor or a known last number stays trustworthy: half the retention."""
        return self.retention_s / 2

    def read_new(self, marker_id: str, cursor: int, *, holes: Sequence[int] = (),
                 pass_gap: Callable[[int], bool] = lambda _g: False) -> Reading:
        """The segments after ``cursor``: one listing of the record after it (a pass with nothing
        new: that one request), then a GET of each segment listed, in order. A segment that
        cannot be used is skipped and reported; a missing number with later ones listed is a
        gap, read past but not moved past unless ``pass_gap(number)`` says its wait is over.
        ``holes``: numbers at or below the cursor that were gaps when it moved past them; the
        same listing starts below the oldest, so a segment that appears in one later (a writer
        that claimed it from an old idea of the end) is still read (``Reading.filled``).
        ``Untrusted`` when there are more than ``MAX_SEGMENTS_READ`` to read."""
        out = Reading(end=cursor, last=cursor)
        wanted = set(holes)
        numbers: dict[int, int] = {}  # number -> listed size
        after = segment_key(min([cursor, *(h - 1 for h in wanted)]))
        while True:
            page = self.bucket.list(CHANGES_PREFIX, start_after=after, max_pages=1)
            for o in page.objects:
                n = parse_segment_key(o.key)
                if n is not None and (n > cursor or n in wanted):
                    numbers[n] = o.size
            if len(numbers) > MAX_SEGMENTS_READ:
                raise Untrusted(f"more than {MAX_SEGMENTS_READ} segments to read: a full listing catches up faster")
            if not page.truncated or not page.objects:
                break
            after = page.objects[-1].key
        expected = cursor + 1
        for seq in sorted(numbers):
            key = segment_key(seq)
            if seq > cursor:
                if seq > expected and out.gap is None:
                    out.gap = expected
                expected = seq + 1
                out.last = seq
            else:
                out.filled.append(seq)
            try:
                if numbers[seq] > MAX_SEGMENT_BYTES:
                    raise ObjectTooLarge(numbers[seq], MAX_SEGMENT_BYTES)
                data, _etag = self.bucket.get(key, MAX_SEGMENT_BYTES)
                seg = decode_segment(data, seq)
                if seg.marker != marker_id:
                    raise Untrusted(f"{key} belongs to bucket marker {seg.marker[:32]!r}, not {marker_id}")
                out.segments.append(seg)
            except ObjectMissing:  # deleted since the listing (compacted): a gap like any other
                if out.gap is None and seq > cursor:
                    out.gap = seq
            except ObjectTooLarge as exc:
                out.skipped.append(f"{key} is larger than {MAX_SEGMENT_BYTES} bytes ({exc.size}): skipped unread")
            except Untrusted as exc:
                out.skipped.append(str(exc))
        if out.gap is not None:
            present = {n for n in numbers if n > cursor}
            out.missing = [n for n in range(cursor + 1, out.last) if n not in present][:MAX_HOLES]
        out.end = out.last if out.gap is None or pass_gap(out.gap) else out.gap - 1
        return out

    def find_tail(self, after: int = 0) -> int:
        """The last sequence number in the bucket (``after`` if none is past it): the head hint,
        if its own segment exists (a hint naming a number nobody wrote is ignored), then one
        listing from there."""
        start = after
        try:
            data, _ = self.bucket.get(HEAD_KEY, 64 * 1024)
            hint = json.loads(data.decode("utf-8")).get("seq")
            if isinstance(hint, int) and not isinstance(hint, bool) and hint > start:
                found = self._numbers(segment_key(hint - 1))
                if hint in found:
                    return max(found)
        except (ObjectMissing, ObjectTooLarge, ValueError, UnicodeDecodeError, AttributeError):
            pass
        return max([start, *self._numbers(segment_key(start) if start else None)])

    def _numbers(self, start_after: str | None) -> list[int]:
        return [s for o in self.bucket.list(CHANGES_PREFIX, start_after=start_after).objects
                if (s := parse_segment_key(o.key)) is not None]

    def publish(self, marker_id: str, host: str, changes: Sequence[Change], tail: int | None) -> int:
        """Create the next segment holding ``changes``; returns its number. ``tail``: the last
        number this host knows (trusted), or ``None`` to look it up."""
        seq = (self.find_tail() if tail is None else tail) + 1
        for _ in range(CLAIM_ATTEMPTS):
            body = encode_segment(Segment(seq, marker_id, host, 0.0, tuple(changes)))
            try:
                self.bucket.create(segment_key(seq), body)
            except PreconditionFailed:  # taken by another host: look for the end again
                seq = self.find_tail(seq) + 1
                continue
            if seq % HEAD_EVERY == 0:
                self._move_head(seq)
            return seq
        raise PreconditionFailed(f"could not claim a change segment after {CLAIM_ATTEMPTS} attempts")

    def _move_head(self, seq: int) -> None:
        """Move the hint forward (never back: ``If-Match`` on the hint read); best effort."""
        body = json.dumps({"seq": seq}).encode()
        try:
            try:
                data, etag = self.bucket.get(HEAD_KEY, 64 * 1024)
            except ObjectMissing:
                self.bucket.create(HEAD_KEY, body)
                return
            current = json.loads(data.decode("utf-8")).get("seq")
            if isinstance(current, int) and current >= seq:
                return
            self.bucket.replace(HEAD_KEY, body, etag)
        except Exception as exc:  # a hint: another host moves it next time
            log.debug("change record head not moved: %s", exc)

    def compact(self) -> Compaction:
        """Delete segments older than the retention, oldest first, never the newest one. One
        listing page, then a GET and a DELETE per old segment; then the first young segment's
        age says when the next deletion can be due (``Compaction.due``, on this log's clock)."""
        page = self.bucket.list(CHANGES_PREFIX, max_pages=1)
        seqs = sorted(s for o in page.objects if (s := parse_segment_key(o.key)) is not None)
        if not page.truncated:
            seqs = seqs[:-1]  # the newest stays: it tells a writer where the numbers are
        now = self.clock()
        cutoff = now - self.retention_s
        # Nothing older left: the newest (kept) or a later segment is the next to age, at the
        # earliest a quarter of the retention from now (a bound, whatever the segments' clocks say).
        due = now + self.retention_s / 4
        deleted = 0
        for seq in seqs[:COMPACT_MAX]:
            try:
                data, _ = self.bucket.get(segment_key(seq), MAX_SEGMENT_BYTES)
                created = decode_segment(data, seq).created_at
            except ObjectMissing:
                continue
            except (Untrusted, ObjectTooLarge):
                created = 0.0  # not a readable segment: only its place in the order matters
            if created >= cutoff:
                due = min(due, created + self.retention_s)
                break
            self.bucket.delete(segment_key(seq))
            deleted += 1
        else:
            if page.truncated or len(seqs) > COMPACT_MAX:
                due = now  # more old segments than one compaction takes: the next pass goes on
        return Compaction(deleted, due)


def publish_journal(log_: ChangeLog, state: Any, marker_id: str, *, now: float | None = None) -> int:
    """Publish this host's journal (``SyncState.journal``: its writes not yet in the record) as
    segments; returns how many. Each published part leaves the journal only once its segment
    exists; a failure leaves the rest for the next pass or save. The cursor follows a segment of
    ours only if it had reached the one before it (everything up to it applied here)."""
    now = log_.clock() if now is None else now
    cs = state.changes_state()
    tail = cs.get("tail") if cs.get("marker") == marker_id else None
    if not isinstance(tail, int) or now - float(cs.get("tailAt") or 0) >= log_.trust_s:
        tail = None  # too old to claim after: look for the end first
    host = state.host_id()
    published = 0
    while True:
        rows = state.journal(SEGMENT_CHANGES)
        if not rows:
            return published
        seq = log_.publish(marker_id, host, [Change(k, e, op, size) for _n, k, e, op, size in rows], tail)
        state.journal_done(rows[-1][0])
        state.update_changes(marker_id, tail=seq, now=now, cursor_from=seq - 1, cursor=seq, checked=now)
        tail = seq
        published += 1


# --- the pass's reading of the record (docs/sync.md, "The change record") ---------------------------

# Changes named by the segments a pass reads, beyond which a full listing (with snapshots) is
# the better way to catch up.
RECORD_MAX_CHANGES = 2000
# Delete records a record pass verifies with a GET each (a 404 says the object is gone); more,
# and the pass lists in full instead (a listing shows every disappearance at once).
VERIFY_MAX = 64
# A change a full listing found that no segment explains is a suspect for this long (a pass
# publishes its segments when it ends) before it counts as a writer that keeps no record.
FOREIGN_GRACE_S = 600.0
# Suspects kept at most (the first few name the writer in `sync status`).
MAX_SUSPECTS = 50


@dataclass(frozen=True, slots=True)
class RecordView:
    """What the change record says for one pass: follow it (``incremental``) or list in full;
    the segments read; the cursor once the pass completes (``tail``: the last segment number
    read before the listing, never past a gap still waited for); why the record was not
    followed (``reason``); the cursor the pass started from (``None``: untrusted or none);
    ``last``: the highest segment number known (where this host's next segment goes)."""

    incremental: bool
    segments: list[Segment]
    tail: int | None
    reason: str = ""
    cursor: int | None = None
    fresh: bool = False  # a host with nothing yet (it reads its snapshots while it lists)
    last: int | None = None


class RecordReader:
    """The pass's part that reads the change record (mixed into ``SyncEngine``, which sets the
    attributes below): whether to follow it or list in full, the plan's sides for the ids it
    names, its hints kept for ``sync status``, and after the pass the cursor, the journal published
    and the record compacted."""

    state: SyncState
    store: Replica
    bucket: BucketClient
    changes: ChangeLog
    workers: int
    snapshot_min: int
    full_listing_s: float
    foreign_listing_s: float

    # --- the change record (docs/sync.md, "The change record") ----------------------------------

    def _record_view(self, identity: marker.Identity, *, profiles: Sequence[str] | None, pull_only: bool,
                     reupload: bool, full: bool) -> RecordView:
        """Whether this pass may follow the change record instead of listing, and the segments
        it reads. Scoped and pull-only passes list their prefixes as before and leave the record
        alone; on a server that ignores conditional writes the record is never used (two hosts
        could take one segment number). The record is a hint: a bad segment, a gap, changes a
        full listing found that no record explains, or delete records to verify by the dozen
        send the pass to a full listing (docs/sync.md, "What a hint may do")."""
        if profiles is None and pull_only and identity.id and self.snapshot_min > 0 and self.state.is_empty():
            # A fresh host's pull (hydration on open): it lists, and reads its snapshots while it
            # does; the record's cursor is left to its first full pass.
            return RecordView(False, [], None, "", None, fresh=True)
        if profiles is not None or pull_only or not identity.conditional or not identity.id:
            return RecordView(False, [], None)
        now = self.changes.clock()
        cs = self.state.changes_state()
        same = cs.get("marker") == identity.id and identity.verified
        cursor = cs.get("cursor") if same else None
        reason = ""
        trusted = isinstance(cursor, int) and now - float(cs.get("checked") or 0) < self.changes.trust_s
        if not same or cursor is None:
            reason = "no change record followed yet for this bucket: listed in full"
        elif not trusted:
            reason = "the change record was last read too long ago (sync.change_retention_days / 2): listed in full"
        reading = Reading()
        holes = [h for h in cs.get("holes") or [] if isinstance(h, int)] if same else []
        if trusted:
            assert isinstance(cursor, int)

            def gap_over(gap: int) -> bool:  # waited out since this host first saw it
                return cs.get("gap") == gap and now - float(cs.get("gapSince") or now) >= GAP_WAIT_S

            try:
                reading = self.changes.read_new(identity.id, cursor, holes=holes, pass_gap=gap_over)
            except Untrusted as exc:
                trusted, reason = False, f"the change record cannot be trusted ({exc}): listed in full"
        segments = reading.segments
        tail = reading.end if trusted else self.changes.find_tail()
        why_full = self._record_hints(identity.id, reading, cursor if trusted else None, holes, now, cs) if same else []
        # Delete records are kept only for ids this host has: the others explain nothing here.
        deletes = [(c.key, parsed[1], seg.seq) for seg in segments for c in seg.changes
                   if c.op == "delete" and (parsed := parse_key(c.key)) is not None]
        known = self.state.base_for({d[1] for d in deletes}) if deletes else {}
        if known:
            self.state.record_deletes([d for d in deletes if d[1] in known])
        due = (full or reupload or self.full_listing_s <= 0
               or now - float(cs.get("fullAt") or 0) >= self.full_listing_s)
        if not same and not full and self.snapshot_min > 0 and self.state.is_empty():
            return RecordView(False, [], tail, reason, None, fresh=True, last=tail)
        size = sum(len(seg.changes) for seg in segments)
        # Each delete record for an object this host holds is verified with a GET, and so is one
        # for a key it does not hold that a segment names a PUT of (``_record_side``).
        put_keys = {c.key for seg in segments for c in seg.changes if c.op == "put"}
        verify = len(known) + len({d[0] for d in deletes if d[1] not in known and d[0] in put_keys})
        last = max(reading.last, tail)
        if trusted and not due and not why_full and size <= RECORD_MAX_CHANGES and verify <= VERIFY_MAX:
            return RecordView(True, segments, tail, "", cursor, last=last)
        if trusted and size > RECORD_MAX_CHANGES:
            reason = f"{size} changes recorded since the last pass: listed in full (snapshots apply)"
        elif trusted and verify > VERIFY_MAX:
            reason = f"{verify} delete records to verify: listed in full (a listing shows what is gone)"
        elif trusted and why_full and not (full or due):
            reason = "; ".join(why_full) + ": listed in full"
        return RecordView(False, segments, tail, reason if not (full or due) or not trusted else "",
                           cursor if trusted else None, last=last)

    def _record_hints(self, marker_id: str, reading: Reading, cursor: int | None, holes: list[int],
                      now: float, cs: dict[str, Any]) -> list[str]:
        """Keep what the record's reading says about the record itself (its bad segments, a gap
        waited for, the gaps moved past, changes no record explained) in the change-record state
        for ``sync status``, and say why this pass must list in full (none: it may follow it)."""
        why: list[str] = []
        values: dict[str, Any] = {}
        stamp = format_time(utcnow())
        problems = [p for p in cs.get("problems") or [] if isinstance(p, dict)]
        for line in reading.skipped:
            pass_log.warning("change record: %s", line)
            problems.append({"at": stamp, "what": f"skipped {line}"})
        if reading.skipped:
            why.append(f"{plural(len(reading.skipped), 'change segment')} skipped ({reading.skipped[0]}"
                       f"{', …' if len(reading.skipped) > 1 else ''})")
        if cursor is not None:
            if reading.gap is not None and reading.end < reading.gap:  # waiting for it
                if cs.get("gap") != reading.gap:
                    values.update(gap=reading.gap, gapSince=now)
                    problems.append({"at": stamp, "what": f"a gap in the change record: segment {reading.gap} is missing while later ones exist: "
                                                          f"waiting up to {GAP_WAIT_S:g} s for it"})
                why.append(f"waiting for missing change segment {reading.gap}")
            else:
                if reading.gap is not None:
                    problems.append({"at": stamp, "what": f"moved past missing change segment(s) "
                                                          f"{', '.join(map(str, reading.missing[:5]))} after "
                                                          f"{GAP_WAIT_S:g} s"})
                if cs.get("gap") is not None:
                    values.update(gap=None, gapSince=None)
            kept = [h for h in holes if h not in reading.filled and reading.end - h < 900]
            if reading.end >= reading.last:
                kept += [m for m in reading.missing if m not in kept]
            if kept != holes:
                values["holes"] = kept[-MAX_HOLES:]
            # Changes a full listing found unexplained: explained by the segments read since, or,
            # once older than FOREIGN_GRACE_S (a pass publishes its segments when it ends), the
            # sign of a writer that keeps no record: list in full on every pass for a while.
            suspects = cs.get("suspects") or {}
            if isinstance(suspects, dict) and suspects:
                named = {(c.key, c.etag if c.op == "put" else "") for seg in reading.segments for c in seg.changes}
                left = {k: v for k, v in suspects.items()
                        if isinstance(v, list) and len(v) == 2 and (k, v[0]) not in named}
                aged = sorted(k for k, v in left.items() if now - float(v[1]) >= FOREIGN_GRACE_S)
                if aged and self.foreign_listing_s > 0:
                    what = (f"a full listing found {plural(len(aged), 'change')} that no change record explains "
                            f"({', '.join(aged[:3])}{', …' if len(aged) > 3 else ''}): a writer that keeps no record "
                            f"(another implementation of the layout, a person with the AWS CLI) writes this bucket")
                    values.update(fullUntil=now + self.foreign_listing_s, fullWhy=what)
                    problems.append({"at": stamp, "what": what})
                    pass_log.warning("listing the bucket in full on every pass for %gs: %s", self.foreign_listing_s, what)
                left = {k: v for k, v in left.items() if k not in aged}
                if left != suspects:
                    values["suspects"] = left
        until = values.get("fullUntil", cs.get("fullUntil"))
        if isinstance(until, (int, float)) and now < float(until):
            why.append("changes no record explains were seen (sync.foreign_listing_s)")
        if len(problems) != len(cs.get("problems") or []):
            values["problems"] = problems[-20:]
        if values:
            self.state.update_changes(marker_id, **values)
        return why

    def _record_side(self, segments: Sequence[Segment], report: PassReport) -> (
            tuple[dict[str, Local], list[Listed], dict[str, Any], dict[str, str], bool] | None):
        """The plan's three sides for the ids the segments name and the ids with local work,
        with a listing made of the base's ETags and the segments' changes; ``None`` when there
        is nothing at all to do. A delete record stands for "gone" only once a GET of its object
        answers 404: a record for an object still there is ignored (and reported)."""
        latest: dict[str, Change] = {}
        deleted: set[str] = set()  # keys any segment read here records a deletion of
        named: dict[str, set[str]] = {}  # the ETags the segments read here name for each key's PUTs
        for seg in segments:
            for c in seg.changes:
                latest[c.key] = c
                if c.op == "delete":
                    deleted.add(c.key)
                else:
                    named.setdefault(c.key, set()).add(c.etag)
        note_work = any(k.startswith(NOTE_PREFIX) for k in latest) or bool(self.store.outbox(kind="note"))
        ids = {parsed[1] for k in latest if (parsed := parse_key(k)) is not None} | self.state.local_work_ids()
        if not ids and not note_work:
            return None
        with self.store.snapshot():
            base = self.state.base_for(ids)
            rows = self.store.memories_with_deltas(None, ids=sorted(ids))
            outbox_deletes = self.state.outbox_deletes()
        local = {m.id: Local(m.id, m.profile_name, content_hash(m), d, inactive=not m.is_active) for m, d in rows}
        listing: dict[str, Listed] = {}
        for mid, b in base.items():
            key = object_key(b.profile, mid)
            listing[key] = Listed(key, b.etag, 0)
        claimed: list[str] = []
        for key, c in latest.items():
            parsed = parse_key(key)
            if parsed is None:
                continue
            if key in deleted and (key in listing or key in named):
                # A memory this host has, deleted in some segment read here: verified below even
                # when a later segment names a PUT (a writer that published late: its PUT may
                # have come before the deletion), so no delete record is lost to the order. And
                # one it does not hold (or holds at another ETag) that some segment names a PUT
                # of: a delete record never cancels that fetch on its own (a forged, replayed or
                # late record, or a re-creation after the deletion): the GET decides.
                claimed.append(key)
            elif c.op == "put" and key in listing and listing[key].etag == c.etag and len(named[key]) > 1:
                # The last segment names this host's own version, and another names a different
                # one: segments go out after their PUTs, in any order (a writer publishes when
                # its pass ends, a killed one at its next pass), so the one named last need not
                # be the newest. Only the bucket says which is current: verified below.
                claimed.append(key)
            elif c.op == "put":
                listing[key] = Listed(key, c.etag, c.size)
            else:
                listing.pop(key, None)
        report.counts["verified"] += len(claimed)  # one GET each: the cost model counts them
        present = self._still_there(claimed)
        for key in claimed:
            if key in present:
                listing[key] = Listed(key, present[key], 0)
            else:
                listing.pop(key, None)
        # One id under two profiles, neither held here: the plan keeps the older object, as a
        # full listing shows it (``plan.first_copy``): their LastModified, one LIST each (rare).
        keys_of: dict[str, list[str]] = {}
        for key in listing:
            if (parsed := parse_key(key)) is not None and parsed[1] not in base:
                keys_of.setdefault(parsed[1], []).append(key)
        for key in (k for keys in keys_of.values() if len(keys) > 1 for k in keys):
            report.counts["verified"] += 1
            shown = [o for o in self.bucket.list(key, max_pages=1).objects if o.key == key]
            if shown:
                listing[key] = shown[0]
            else:
                listing.pop(key, None)
        self._report_ignored(sorted(k for k in present if k in deleted), report)
        return local, [listing[k] for k in sorted(listing)], base, outbox_deletes, note_work

    def _still_there(self, keys: Sequence[str]) -> dict[str, str]:
        """Which of ``keys`` the bucket still holds, with their ETags: one GET of a byte range
        each, in parallel (a 404 is the only answer that means gone)."""
        if not keys:
            return {}

        def look(key: str) -> tuple[str, str | None]:
            try:
                _data, etag = self.bucket.get(key, 0)  # a non-empty object is over 0 bytes
                return key, etag
            except ObjectTooLarge as exc:
                return key, exc.etag
            except ObjectMissing:
                return key, None

        with ThreadPoolExecutor(max_workers=min(self.workers, len(keys)), thread_name_prefix="memlocal-sync-verify") as pool:
            found = list(pool.map(look, keys))
        return {k: e for k, e in found if e is not None}

    def _ignore_listed_deletes(self, view: RecordView, listing: Sequence[Listed], report: PassReport) -> None:
        """A listing is the truth: a delete record read in this pass (or kept from an earlier
        one) for an object the listing shows is ignored, reported, and forgotten."""
        listed = {o.key for o in listing}
        latest: dict[str, str] = {}
        for seg in view.segments:
            for c in seg.changes:
                latest[c.key] = c.op
        ignored = {k for k, op in latest.items() if op == "delete" and k in listed}
        kept = self.state.delete_records()
        stale = {k for k in kept if k in listed}
        if stale:
            self.state.forget_delete_records(stale)
        self._report_ignored(sorted(ignored | stale), report)

    def _report_ignored(self, keys: Sequence[str], report: PassReport) -> None:
        if not keys:
            return
        note = (f"ignored {plural(len(keys), 'delete record')} for objects still in the bucket "
                f"({', '.join(keys[:3])}{', …' if len(keys) > 3 else ''}): a record deletes nothing the bucket holds")
        report.notes.append(note)
        pass_log.warning("%s", note)

    def _suspect_unexplained(self, marker_id: str, plan: Plan, base: dict[str, Any], local: dict[str, Local],
                             view: RecordView, listing: Sequence[Listed]) -> None:
        """After a full listing that followed a trusted cursor: the changes it found (objects new
        or changed since this host's base, objects gone) that no segment read in this pass names
        become suspects; a later pass that reads their segments clears them (``_record_hints``)."""
        named = {(c.key, c.etag if c.op == "put" else "") for seg in view.segments for c in seg.changes}
        found: dict[str, str] = {}
        for a in plan.actions:
            if a.op is Op.FETCH and (a.id in base or a.id not in local):  # not our own unrecorded PUT
                found[object_key(a.profile, a.id)] = a.etag
        listed = {o.key for o in listing}
        for mid, b in base.items():  # gone from the bucket (deletions the guard held included)
            key = object_key(b.profile, mid)
            if key not in listed and mid in local:
                found[key] = ""
        unexplained = {k: e for k, e in found.items() if (k, e) not in named}
        if not unexplained:
            return
        now = self.changes.clock()
        suspects = self.state.changes_state().get("suspects")
        suspects = dict(suspects) if isinstance(suspects, dict) else {}
        for k, e in sorted(unexplained.items())[:MAX_SUSPECTS]:
            if k not in suspects or suspects[k][0] != e:
                suspects[k] = [e, now]
        self.state.update_changes(marker_id, suspects=dict(list(suspects.items())[-MAX_SUSPECTS:]))

    def _finish_record(self, report: PassReport, identity: marker.Identity, view: RecordView, *,
                       pull_only: bool) -> None:
        """After the pass: move the cursor (only past a pass that applied everything), publish
        this host's journal, and now and then compact the record."""
        if pull_only or not identity.conditional or not identity.id:
            return
        now = time.time()
        clean = report.result == "ok" and not report.errors
        if clean and view.tail is not None:
            last = max(view.tail, view.last or 0)  # a writer's next segment goes past every one seen
            if view.incremental:
                self.state.update_changes(identity.id, cursor_from=view.cursor, cursor=view.tail, checked=now,
                                          tail=last, now=now)
            else:
                self.state.update_changes(identity.id, cursor=view.tail, checked=now, fullAt=now,
                                          tail=last, now=now)
        try:
            report.counts["segments_published"] += publish_journal(self.changes, self.state, identity.id)
            if clean and report.mode == "full" and view.tail is not None:
                # Compaction lists the record and reads its oldest segment's age: skipped until
                # the last one's ``due`` (no segment can have aged out before), so a full pass
                # made every few minutes does not pay two requests to delete nothing.
                if float(self.state.changes_state().get("compactDue") or 0) <= self.changes.clock():
                    done = self.changes.compact()
                    report.counts["segments_compacted"] += done.deleted
                    self.state.update_changes(identity.id, compactDue=done.due)
                self.state.forget_deletes_before(int((now - self.changes.retention_s) * 1e6))
        except BucketUnavailable:
            raise
        except Exception as exc:  # the journal stays; the next pass or save publishes it
            pass_log.warning("change record not published: %s", exc)
            report.errors.append(f"change record: {exc}")

