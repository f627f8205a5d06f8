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
import zlib
from typing import Final, Iterable

from memlocal.errors import ValidationError
from memlocal.model import validate_profile

from .objects import PREFIX, BadObject

SNAPSHOT_PREFIX: Final = "memlocal/snapshots/"
SUFFIX: Final = ".json.gz"
FORMAT: Final = "memlocal-snapshot/1"
# A snapshot is read whole; past this (compressed or not) it is ignored and objects are fetched.
MAX_SNAPSHOT_BYTES: Final = 256 << 20


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
    data = gzip.compress(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode(), compresslevel=6, mtime=0)
    return snapshot_key(profile, digest((k, e) for k, e, _ in items)), data


def read(data: bytes, profile: str) -> dict[str, tuple[str, bytes]]:
    """``{key: (etag, object body)}`` of a snapshot of ``profile``; ``BadObject`` if it is not one.
    Entries that cannot be used (outside the profile's prefix, malformed) are left out: a
    snapshot only ever saves GETs of objects the listing shows (the engine checks each)."""
    try:
        inflater = zlib.decompressobj(wbits=31)  # gzip
        raw = inflater.decompress(data, MAX_SNAPSHOT_BYTES)
        if inflater.unconsumed_tail:
            raise BadObject(f"snapshot is over {MAX_SNAPSHOT_BYTES} bytes uncompressed")
        doc = json.loads(raw)
    except (zlib.error, ValueError) as exc:
        raise BadObject(f"not a snapshot: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("profile") != profile:
        raise BadObject("not a snapshot of this profile in a known format")
    objects = doc.get("objects")
    if not isinstance(objects, list):
        raise BadObject("snapshot has no object list")
    prefix = f"{PREFIX}{profile}/"
    out: dict[str, tuple[str, bytes]] = {}
    for entry in objects:
        if not isinstance(entry, dict):
            continue
        key, etag, body = entry.get("key"), entry.get("etag"), entry.get("body")
        # An entry outside the profile's prefix is never used: the snapshot cannot write elsewhere.
        if isinstance(key, str) and key.startswith(prefix) and isinstance(etag, str) and isinstance(body, str):
            try:
                out[key] = (etag, body.encode("utf-8"))
            except UnicodeEncodeError:  # a lone surrogate: fetch that object instead
                continue
    return out
