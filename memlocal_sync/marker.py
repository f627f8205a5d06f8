"""The bucket's identity marker, ``memlocal/bucket.json``, and the probe of conditional writes.

The marker holds a random id and the layout version. It is created once, by the first host that
syncs with the bucket, with ``If-None-Match: *`` (a host that loses that race adopts the
winner's), outside ``memory/`` so that readers of the memory layout never see it. Each host
remembers the id it synced with (the ``sync.marker`` meta row, reset with the base when the
configured bucket changes), and every pass reads the marker first:

- the id this host remembers: the bucket it synced with, so an empty listing of a profile is a
  deletion made elsewhere (the proportional mass-delete guard still applies);
- no marker, while this host remembers one: the bucket was emptied, recreated, or is not the
  one this host synced with: the pass deletes and writes nothing and says so (``--reupload``
  makes it this host's bucket again);
- another id: another bucket under the same name: the base is dropped, so its contents read as
  "not synced yet" (pushes and pulls), never as deletions, and the pass says so;
- no marker and none remembered: the first pass against this bucket creates it.

The creation doubles as a probe: a second conditional create of the marker must answer 412,
and a replace with a wrong ``If-Match`` too. A server that ignores them (``rclone serve s3``;
older MinIO and Ceph releases) would turn every conditional write into a silent overwrite, so
sync refuses to write to it, unless ``sync.allow_unconditional`` accepts last-writer-wins. The
probe rewrites the marker with the bytes just read, so on such a server it changes nothing.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Final

from memlocal.errors import SyncError
from memlocal.model import format_time, utcnow

from .bucket import BucketClient as Bucket, ObjectMissing, PreconditionFailed
from .state import META_MARKER

MARKER_KEY: Final = "memlocal/bucket.json"
LAYOUT_VERSION: Final = 1
# An ETag no object has: a replace conditional on it must fail.
_NO_SUCH_ETAG: Final = '"00000000000000000000000000000000"'


class MarkerGone(SyncError):
    """The marker this host synced with is missing: nothing may be deleted or written."""


class ConditionsIgnored(SyncError):
    """The server ignores ``If-None-Match``/``If-Match``: conditional writes would overwrite."""


@dataclass
class Identity:
    """What the marker check found: the bucket's id, and what the pass should know.

    ``verified``: the marker is the one this host remembers, so an empty listing is a deletion
    made elsewhere. A host meeting a marker for the first time (a new host, or one upgraded from
    a memlocal without markers) keeps the older rule that an empty listing deletes nothing.
    """

    id: str
    verified: bool = False
    conditional: bool = True
    notes: list[str] = field(default_factory=list)


def _parse(data: bytes) -> dict[str, Any]:
    try:
        marker = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise SyncError(f"{MARKER_KEY} in the bucket is not a memlocal identity marker (not JSON)") from None
    if not isinstance(marker, dict) or not isinstance(marker.get("id"), str) or not marker["id"]:
        raise SyncError(f"{MARKER_KEY} in the bucket is not a memlocal identity marker (no id)")
    layout = marker.get("layout")
    if isinstance(layout, int) and not isinstance(layout, bool) and layout > LAYOUT_VERSION:
        raise SyncError(f"the bucket's layout is version {layout}, newer than this memlocal's "
                        f"({LAYOUT_VERSION}): upgrade memlocal")
    return marker


def probe(bucket: Bucket, body: bytes, etag: str) -> str | None:
    """Whether the server honours conditional writes: ``None`` if it does, else which one it ignores.

    Both probes target the marker with the bytes it already holds, so a server that ignores the
    condition rewrites the marker unchanged.
    """
    try:
        bucket.create(MARKER_KEY, body)
    except PreconditionFailed:
        pass
    else:
        return "If-None-Match"
    try:
        bucket.replace(MARKER_KEY, body, _NO_SUCH_ETAG if etag != _NO_SUCH_ETAG else '"1"')
    except (PreconditionFailed, ObjectMissing):
        return None
    return "If-Match"


def ignored_message(bucket: Bucket, header: str) -> str:
    """The one-line error for a server that ignores conditional writes."""
    return (f"bucket {bucket.settings.describe()} ignores {header} (a second conditional write of "
            f"{MARKER_KEY} succeeded): every create and merge would silently overwrite other hosts' "
            "changes, so sync writes nothing; use a server that honours conditional writes, or set "
            "sync.allow_unconditional = true (MEMLOCAL_SYNC_ALLOW_UNCONDITIONAL) to accept last-writer-wins")


def check(bucket: Bucket, state: Any, *, allow_unconditional: bool, reupload: bool = False,
          pull_only: bool = False, reprobe_s: float = 0.0, now: float | None = None) -> Identity:
    """Read (or create) the marker and compare it with the one this host remembers.

    Raises ``MarkerGone`` (nothing may be deleted or written), ``ConditionsIgnored`` (nothing may
    be written) or ``SyncError`` (the marker is unreadable); bucket trouble raises as
    ``BucketUnavailable``. ``pull_only`` never creates or probes (the read path writes nothing).
    The remembered marker is ``{"id", "conditional", "probedAt"}``, ``conditional`` ``None``
    until probed. A server found honouring the conditions is probed again once ``probedAt`` is
    ``reprobe_s`` old (another server may have been put behind the same endpoint); another
    endpoint starts from no remembered marker at all (``SyncState.ensure_bucket``), so it is
    probed at once.
    """
    now = float(int(time.time() if now is None else now))  # whole seconds: the same after a JSON round trip
    remembered = state.get_json(META_MARKER)
    if not isinstance(remembered, dict) or not isinstance(remembered.get("id"), str):
        remembered = None
    notes: list[str] = []
    try:
        data, etag = bucket.get(MARKER_KEY, 64 * 1024)
    except ObjectMissing:
        data, etag = b"", ""
    if not data:
        if remembered is not None and not reupload:
            raise MarkerGone(
                f"the bucket's identity marker {MARKER_KEY} is gone (this host synced with bucket id "
                f"{remembered['id']}): the bucket was emptied, recreated or is not the one this host synced "
                "with; nothing was deleted or written (`memlocal sync run --reupload` pushes this host's "
                "memories to it as a new bucket)")
        if pull_only:
            return Identity("", verified=False, notes=notes)
        body = json.dumps({"id": secrets.token_hex(16), "layout": LAYOUT_VERSION,
                           "createdAt": format_time(utcnow())}, separators=(",", ":")).encode()
        try:
            etag = bucket.create(MARKER_KEY, body)
            data = body
        except PreconditionFailed:  # another host created it first: adopt theirs
            data, etag = bucket.get(MARKER_KEY, 64 * 1024)
    marker = _parse(data)
    identity = Identity(marker["id"], notes=notes)
    if remembered is not None and remembered["id"] != identity.id:
        state.reset_base()
        state.add_note(f"the bucket's identity changed (marker {identity.id}, this host synced with "
                     f"{remembered['id']}): another bucket under this name; starting from an empty base, "
                     "nothing deleted")
        remembered = None
    identity.verified = remembered is not None
    conditional: bool | None = remembered.get("conditional") if remembered else None
    probed_at = remembered.get("probedAt") if remembered else None
    probed_at = float(probed_at) if isinstance(probed_at, (int, float)) and not isinstance(probed_at, bool) else 0.0
    due = conditional is not True or now - probed_at >= reprobe_s
    if not pull_only and due:
        # A server found wanting is probed again each pass (it may have been upgraded since);
        # one found honouring the conditions, on the schedule (it may have been swapped).
        ignored = probe(bucket, data, etag)
        conditional = ignored is None
        probed_at = now
        if ignored and not allow_unconditional:
            state.set_json(META_MARKER, {"id": identity.id, "conditional": False, "probedAt": now})
            raise ConditionsIgnored(ignored_message(bucket, ignored))
    if (remembered is None or remembered.get("conditional") != conditional
            or remembered.get("probedAt") != probed_at):
        state.set_json(META_MARKER, {"id": identity.id, "conditional": conditional, "probedAt": probed_at})
    identity.conditional = conditional is not False
    if conditional is False:
        notes.append(f"bucket {bucket.settings.describe()} ignores conditional writes: "
                     "last-writer-wins (sync.allow_unconditional)")
    return identity


def writable(state: Any, *, allow_unconditional: bool, reprobe_s: float | None = None,
             now: float | None = None) -> bool | None:
    """For write-through: ``True`` when the remembered marker says the bucket honours conditional
    writes (or last-writer-wins is allowed), ``False`` when it says it does not, ``None`` when
    nothing is known yet or the last probe is ``reprobe_s`` old (the caller runs ``check``)."""
    remembered = state.get_json(META_MARKER)
    if not isinstance(remembered, dict) or remembered.get("conditional") is None:
        return None
    probed_at = remembered.get("probedAt")
    if (reprobe_s is not None and remembered["conditional"] is True
            and (not isinstance(probed_at, (int, float)) or (time.time() if now is None else now) - probed_at >= reprobe_s)):
        return None
    return bool(remembered["conditional"]) or allow_unconditional
