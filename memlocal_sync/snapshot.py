"""Per-profile snapshots: every object of a profile, with its ETag, in one compressed object.

A fresh host would otherwise GET its profiles' objects one by one (a round trip each). A pass
that finds a profile in agreement with the bucket writes the profile's snapshot if the bucket's
is not current; a pass that has many objects to fetch reads it first and takes from it every
object whose ETag is the one the listing shows and whose body is the one that ETag names (its
MD5, ``body_matches``): the listing is the truth, so a snapshot entry with another ETag, for a
key no longer listed, or with a body the object does not have, is ignored; the rest is fetched.
A snapshot can make a pull faster, never hide, add or change a memory.

Layout (outside ``memory/``, so readers of ``memory/`` never see it)::

    memlocal/snapshots/<profile>/<digest>.json.gz

``digest``: the first 16 hex digits of SHA-256 over the sorted ``key etag`` lines of its entries,
so a pass tells from one listing of ``memlocal/snapshots/`` whether a profile's snapshot is
current without reading it. The body is gzip-compressed JSON::

    {"format": "memlocal-snapshot/1", "profile": "<profile>",
     "objects": [{"key": "memory/<profile>/<id>.json", "etag": "\\"…\\"", "body": "<the object's JSON>"}]}

Pure: no I/O.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zlib
from typing import Final, Iterable, Iterator

from memlocal.errors import ValidationError
from memlocal.model import validate_profile

from .objects import PREFIX, BadObject

SNAPSHOT_PREFIX: Final = "memlocal/snapshots/"
SUFFIX: Final = ".json.gz"
FORMAT: Final = "memlocal-snapshot/1"
# A snapshot over this (compressed, or unpacked) is ignored and its objects fetched: the default
# of ``sync.snapshot_max_bytes`` (about 100,000 memories of a profile).
MAX_SNAPSHOT_BYTES: Final = 64 << 20


def snapshot_key(profile: str, digest: str) -> str:
    return f"{SNAPSHOT_PREFIX}{validate_profile(profile)}/{digest}{SUFFIX}"


def parse_snapshot_key(key: str) -> tuple[str, str] | None:
    """``(profile, digest)`` of a snapshot key, or ``None`` for anything else."""
    if not key.startswith(SNAPSHOT_PREFIX) or not key.endswith(SUFFIX):
        return None
    rest = key[len(SNAPSHOT_PREFIX):-len(SUFFIX)]
    profile, sep, digest = rest.partition("/")
    if not sep or "/" in digest or not digest:
        return None
    try:
        validate_profile(profile)
    except ValidationError:
        return None
    return profile, digest


def etag_md5(etag: str) -> str | None:
    """The MD5 (lower-case hex) an ETag names, or ``None`` when it is not one: a single-part
    upload's ETag is the MD5 of its bytes (S3 without SSE-KMS, MinIO, SeaweedFS, moto); another
    kind (a multipart upload's ``…-N``, SSE-KMS) cannot be checked, and the object is fetched."""
    tag = etag.strip('"').lower()
    return tag if len(tag) == 32 and all(c in "0123456789abcdef" for c in tag) else None


def body_matches(body: bytes, etag: str) -> bool:
    """Whether ``body`` is the object S3 lists under ``etag`` (its MD5, :func:`etag_md5`)."""
    tag = etag_md5(etag)
    return tag is not None and hashlib.md5(body).hexdigest() == tag


def digest(entries: Iterable[tuple[str, str]]) -> str:
    """The name of a snapshot holding these ``(key, etag)`` entries."""
    h = hashlib.sha256()
    for key, etag in sorted(entries):
        h.update(f"{key} {etag}\n".encode())
    return h.hexdigest()[:16]


# gzip's level for a snapshot: 3 deflates 10k memories (7 MB of JSON) in a third of level 6's CPU
# (0.05 against 0.15 s) for 13% more bytes (0.95 against 0.84 MB), which a fresh host inflates as
# fast; a push writes one at its end.
SNAPSHOT_GZIP_LEVEL: Final = 3


def build(profile: str, entries: Iterable[tuple[str, str, bytes]], *, marker: str | None = None,
          seq: int | None = None, created_at: str | None = None) -> tuple[str, bytes]:
    """``(key, body)`` of the snapshot of ``profile`` holding ``(key, etag, object body)``.

    ``marker``, ``seq``, ``created_at``: the bucket's identity marker and the change record's
    last segment number when the listing the snapshot was made from began, and when it was
    written: for people reading it (no host decides anything by them)."""
    items = sorted(entries)
    payload: dict[str, object] = {
        "format": FORMAT,
        "profile": profile,
        "objects": [{"key": k, "etag": e, "body": b.decode("utf-8")} for k, e, b in items],
    }
    if marker is not None and seq is not None:
        payload.update(marker=marker, seq=seq, createdAt=created_at)
    data = gzip.compress(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode(), compresslevel=SNAPSHOT_GZIP_LEVEL, mtime=0)
    return snapshot_key(profile, digest((k, e) for k, e, _ in items)), data


# One entry's text at most, by default (``entry_cap``): a 1 MiB object escaped as JSON, and room.
MAX_ENTRY_BYTES: Final = 8 << 20


def entry_cap(max_object_bytes: int) -> int:
    """How long one entry's JSON text may be: an object of ``max_object_bytes`` with every byte
    escaped (``\\u00XX``: six characters), its key and ETag. A longer one cannot be taken."""
    return 6 * max_object_bytes + (64 << 10)


def read(data: bytes, profile: str, max_bytes: int = MAX_SNAPSHOT_BYTES,
         max_entry_bytes: int = MAX_ENTRY_BYTES) -> dict[str, tuple[str, bytes]]:
    """``{key: (etag, object body)}`` of a snapshot of ``profile``; ``BadObject`` if it is not one.
    Entries that cannot be used (outside the profile's prefix, malformed) are left out: a
    snapshot only ever saves GETs of objects the listing shows (the engine checks each).

    Read streaming (``entries``): the gzip stream is inflated a window at a time and the object
    list parsed entry by entry, so what this holds at once is the entries kept, the compressed
    bytes and one window, never the whole document as text and again as objects; past
    ``max_bytes`` unpacked (``sync.snapshot_max_bytes``) it stops and the snapshot is ignored.
    A decompression bomb costs its cap, not its size."""
    return dict(entries(data, profile, max_bytes, max_entry_bytes))


# The inflater's output per step: the text of a few hundred entries.
_WINDOW: Final = 1 << 20
_HEAD: Final = re.compile(r'\s*\{\s*"format"\s*:\s*"([^"\\]*)"\s*,\s*"profile"\s*:\s*"([^"\\]*)"\s*,\s*"objects"\s*:\s*\[')
_WS: Final = re.compile(r"\s*")


def entries(data: bytes, profile: str, max_bytes: int = MAX_SNAPSHOT_BYTES,
            max_entry_bytes: int = MAX_ENTRY_BYTES) -> Iterator[tuple[str, tuple[str, bytes]]]:
    """The usable entries of a snapshot of ``profile`` as ``(key, (etag, body))``, read as the gzip
    stream inflates (``read``). The document must open as memlocal writes it (``format``, then
    ``profile``, then ``objects``); anything else is not a snapshot (``BadObject``), as is a
    stream over ``max_bytes`` unpacked, before or after entries were given, or one entry's text
    over ``max_entry_bytes`` (``entry_cap``: no object a pass would take is that large)."""
    inflater = zlib.decompressobj(wbits=31)  # gzip
    decoder = json.JSONDecoder()
    prefix = f"{PREFIX}{profile}/"
    pending = data
    unpacked = 0
    raw = b""
    text = ""
    pos = 0
    started = False
    first = True  # no entry read yet (an empty list may end at once)

    def more() -> bool:
        """Inflate the next window into ``text`` (after what is still unread); ``False`` at the end."""
        nonlocal pending, unpacked, raw, text, pos
        if not pending and inflater.eof:
            return False
        try:
            chunk = inflater.decompress(pending, _WINDOW)
        except zlib.error as exc:
            raise BadObject(f"not a snapshot: {exc}") from None
        pending = inflater.unconsumed_tail
        if not chunk and not pending:
            if not inflater.eof:
                raise BadObject("not a snapshot: the gzip stream is truncated")
            return False
        unpacked += len(chunk)
        if unpacked > max_bytes:
            raise BadObject(f"snapshot is over {max_bytes} bytes uncompressed (sync.snapshot_max_bytes)")
        raw += chunk
        try:  # a window may end inside a character: the rest waits for the next one
            decoded = raw.decode("utf-8")
            raw = b""
        except UnicodeDecodeError as exc:
            if exc.start < len(raw) - 3:
                raise BadObject(f"not a snapshot: not valid UTF-8 ({exc.reason})") from None
            decoded, raw = raw[:exc.start].decode("utf-8"), raw[exc.start:]
        text = text[pos:] + decoded
        pos = 0
        return True

    while not started:
        head = _HEAD.match(text, pos)
        if head is not None:
            if head.group(1) != FORMAT or head.group(2) != profile:
                raise BadObject("not a snapshot of this profile in a known format")
            pos, started = head.end(), True
        elif len(text) > 4096 or not more():
            raise BadObject("not a snapshot of this profile in a known format")
    value = True  # a value comes next (after the "[" or a ","), or the list's end
    while True:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]  # (matches the empty string)
        if pos == len(text):
            if more():
                continue
            raise BadObject("not a snapshot: its object list is cut short")
        if not value or text[pos] == "]":
            if text[pos] == "]" and (not value or first):
                break
            if text[pos] != "," or value:
                raise BadObject("not a snapshot: its object list is not JSON")
            pos, value = pos + 1, True
            continue
        try:
            entry, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            # An entry the window cut: read on until what is left has doubled (so that a huge
            # entry is parsed a few times, not once per window), then again.
            if len(text) - pos > max_entry_bytes:
                raise BadObject(f"snapshot entry over {max_entry_bytes} bytes: no object a pass takes is that large")
            target = 2 * (len(text) - pos) + _WINDOW
            grew = False
            while len(text) - pos < target and more():
                grew = True
            if grew:
                continue
            raise BadObject(f"not a snapshot: {str(exc)[:200]}") from None
        pos, value, first = end, False, False
        if not isinstance(entry, dict):
            continue
        key, etag, body = entry.get("key"), entry.get("etag"), entry.get("body")
        # An entry outside the profile's prefix is never used: the snapshot cannot write elsewhere.
        if isinstance(key, str) and key.startswith(prefix) and isinstance(etag, str) and isinstance(body, str):
            try:
                encoded = body.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: fetch that object instead
                continue
            yield key, (etag, encoded)
    # (What follows the list, the marker, createdAt and seq, is for people: not read.)
