"""The change record: what memlocal hosts wrote to the bucket, in order, so that a pass that
finds nothing to do costs a constant number of requests, and a deletion carries its intent.

Layout (under ``memlocal/``, which readers of ``memory/`` never list)::

    memlocal/changes/<seq, 16 digits>.json   one segment: the changes one host published at once
    memlocal/changes/head.json               a hint: a sequence number at or below the last one

A segment is created with ``If-None-Match: *`` at the next free sequence number, so two hosts
publishing at once get two numbers (the loser of the race gets 412 and takes the next), and the
numbers have no gaps. A reader remembers the last number it applied (its cursor) and reads
``cursor + 1``, ``cursor + 2``, … until one is missing: a pass with nothing new costs one GET
(404). Each segment names the bucket's identity marker; a segment of another marker, of an
unknown format, or a cursor too old to trust sends the pass to a full listing.

A change is ``{"key", "etag", "op": "put"|"delete", "size"}``; a ``delete`` is a **delete
record**: a deliberate deletion made through memlocal (a user's delete, ``prune``, retention,
a clean-up), which other hosts apply without the mass-delete guard. A disappearance no record
explains (a wipe, a foreign writer's deletion) is still guarded.

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
from dataclasses import dataclass
from typing import Any, Final, Sequence

from memlocal.model import format_time, parse_time, utcnow

from .bucket import BucketClient, ObjectMissing, ObjectTooLarge, PreconditionFailed

log = logging.getLogger(__name__)

CHANGES_PREFIX: Final = "memlocal/changes/"
HEAD_KEY: Final = CHANGES_PREFIX + "head.json"
FORMAT: Final = "memlocal-changes/1"
# The head hint is moved forward once every this many segments (a hint, never the truth).
HEAD_EVERY: Final = 64
# Changes per segment (a host that was offline may publish a long journal as several).
SEGMENT_CHANGES: Final = 2000
MAX_SEGMENT_BYTES: Final = 16 * 1024 * 1024
# Segments a pass reads one by one before a full listing is the cheaper way to catch up.
MAX_SEGMENTS_READ: Final = 200
# Slots tried when others keep taking them (each 412 looks for the last number again).
CLAIM_ATTEMPTS: Final = 16
# Old segments a pass deletes at most.
COMPACT_MAX: Final = 200


class Untrusted(Exception):
    """The record cannot be used for this pass: list the bucket in full (the reason says why)."""


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
    if doc.get("seq") != seq or not isinstance(doc.get("marker"), str) or not isinstance(doc.get("changes"), list):
        raise Untrusted(f"{segment_key(seq)} is not a segment of this record")
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

    def read_new(self, marker_id: str, cursor: int) -> list[Segment]:
        """The segments after ``cursor``, in order (none: one GET that finds nothing)."""
        out: list[Segment] = []
        seq = cursor + 1
        while True:
            try:
                data, _etag = self.bucket.get(segment_key(seq), MAX_SEGMENT_BYTES)
            except ObjectMissing:
                return out
            except ObjectTooLarge:
                raise Untrusted(f"{segment_key(seq)} is larger than {MAX_SEGMENT_BYTES} bytes") from None
            seg = decode_segment(data, seq)
            if seg.marker != marker_id:
                raise Untrusted(f"{segment_key(seq)} belongs to bucket marker {seg.marker[:32]!r}, not {marker_id}")
            out.append(seg)
            if len(out) >= MAX_SEGMENTS_READ:
                raise Untrusted(f"more than {MAX_SEGMENTS_READ} segments to read: a full listing catches up faster")
            seq += 1

    def find_tail(self, after: int = 0) -> int:
        """The last sequence number in the bucket (``after`` if none is past it): the head hint,
        then one listing from there."""
        start = after
        try:
            data, _ = self.bucket.get(HEAD_KEY, 64 * 1024)
            hint = json.loads(data.decode("utf-8")).get("seq")
            if isinstance(hint, int) and not isinstance(hint, bool) and hint > start:
                start = hint
        except (ObjectMissing, ObjectTooLarge, ValueError, UnicodeDecodeError, AttributeError):
            pass
        found = [s for o in self.bucket.list(CHANGES_PREFIX, start_after=segment_key(start) if start else None).objects
                 if (s := parse_segment_key(o.key)) is not None]
        return max([start, *found])

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
