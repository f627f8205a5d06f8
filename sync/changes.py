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
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Final, Sequence

from memlocal.model import format_time, parse_time, utcnow

from .bucket import BucketClient, ObjectMissing, ObjectTooLarge, PreconditionFailed

log = logging.getLogger(__name__)

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
