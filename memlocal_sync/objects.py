"""Bucket objects: the key layout, the JSON body, and the content hash. Pure: no I/O.

An object lives at ``memory/<profile>/<id>.json`` and holds the memory's camelCase JSON (the
same as ``Memory.to_dict``, unknown fields of other writers included); an automation note lives
at ``memlocal/automations/<automation id>.json`` (``AutomationNote.to_dict``). Decoding is strict about
what can hurt us (invalid UTF-8, invalid JSON, NaN/Infinity, lone surrogates, a body whose id or
profile is not the key's) and reports each as a one-line reason, so a bad object is skipped, never
fatal; what can be made valid (another writer's long summary, capitalised category, confidence
out of range, huge counts) is read, normalised the same way every time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Final

from memlocal.plugins import AutomationNote, read_foreign_note, validate_automation_id
from memlocal.errors import ValidationError, fold_whitespace
from memlocal.model import COUNT_MAX, Memory, format_time, read_foreign, utcnow, validate_id, validate_profile

PREFIX: Final = "memory/"
SUFFIX: Final = ".json"
# Automation notes live outside ``memory/`` (readers of the memory layout never list them).
NOTE_PREFIX: Final = "memlocal/automations/"
# Fields a merge may change without the memory's content changing.
ACCESS_FIELDS: Final = frozenset({"accessCount", "lastAccessedAt", "stalenessScore"})


@dataclass(frozen=True, slots=True)
class Listed:
    """One entry of a bucket listing: what the bucket client returns and the plan reads."""

    key: str
    etag: str
    size: int
    modified: str = ""  # LastModified as the server sent it (read only to age snapshots)


class BadObject(Exception):
    """A bucket object that is not a usable memory; ``reason`` is one line for logs and status."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def profile_prefix(profile: str | None = None) -> str:
    """``memory/`` for every profile, ``memory/<profile>/`` for one."""
    return PREFIX if profile is None else f"{PREFIX}{validate_profile(profile)}/"


def object_key(profile: str, memory_id: str) -> str:
    """``memory/<profile>/<id>.json`` (both parts validated, so no key can escape its prefix)."""
    return f"{PREFIX}{validate_profile(profile)}/{validate_id(memory_id)}{SUFFIX}"


def parse_key(key: str) -> tuple[str, str] | None:
    """``(profile, id)`` of a well-formed memory key, else ``None``."""
    if not key.startswith(PREFIX) or not key.endswith(SUFFIX):
        return None
    parts = key[len(PREFIX): -len(SUFFIX)].split("/")
    if len(parts) != 2:
        return None
    try:
        return validate_profile(parts[0]), validate_id(parts[1])
    except ValidationError:
        return None


def encode(memory: Memory) -> bytes:
    """The object body: compact UTF-8 JSON, as Go's encoder writes it. The count goes out within
    the documented 0 … 2^53 whatever the local row holds (local bumps on a count read at the cap)."""
    body = memory.to_dict(wire=True)
    if isinstance(body.get("accessCount"), int) and body["accessCount"] > COUNT_MAX:
        body["accessCount"] = COUNT_MAX
    return _BODY_ENCODER.encode(body).encode("utf-8")


# One encoder for every body (``json.dumps`` with these options makes a new one per call).
_BODY_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _read_json(data: bytes) -> object:
    """The JSON value of an object's body; ``BadObject`` for invalid UTF-8 or JSON (NaN and
    Infinity tokens included)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadObject(f"not valid UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise BadObject("not valid JSON: nested too deeply to read") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError, and so are NaN/Infinity and 5000-digit numbers
        raise BadObject(f"not valid JSON: {_one_line(exc)}") from None


def decode(data: bytes, profile: str, memory_id: str) -> Memory:
    """Read the body of ``memory/<profile>/<memory_id>.json``; ``BadObject`` if it cannot be used.

    Tolerant of what can be made valid (``memlocal.model.read_foreign``: case, clamped numbers,
    long summaries, unknown fields), strict about what would hurt: invalid UTF-8 or JSON,
    NaN/Infinity tokens, lone surrogates, a body whose id or profile is not the key's. It never
    raises anything but ``BadObject``: one object's trouble must not end a pass.
    """
    memory: Memory = _contained(read_foreign, _read_json(data), "memory", one_line=False)
    if memory.id != memory_id or memory.profile_name != profile:
        raise BadObject(
            f"key names {memory_id} in profile {profile} but the body is {memory.id} in profile {memory.profile_name}"
        )
    return clamp_times(memory)


# ``sync.max_clock_skew_s``: how far past this host's clock a body's times may be (set from the
# configuration by each engine, ``set_max_clock_skew``; a helper process is handed it).
_max_clock_skew_s = 300.0


def set_max_clock_skew(seconds: float) -> None:
    """``sync.max_clock_skew_s`` for this process's reads of bucket objects (``clamp_times``)."""
    global _max_clock_skew_s
    _max_clock_skew_s = float(seconds)


def max_clock_skew() -> float:
    """The skew ``clamp_times`` allows (``set_max_clock_skew``)."""
    return _max_clock_skew_s


def clamp_times(memory: Memory) -> Memory:
    """A body's ``createdAt`` and ``lastAccessedAt`` later than now plus ``sync.max_clock_skew_s``
    are taken as now: a forged or far-skewed clock (``2999-01-01``) cannot make a memory the most
    recent for good (recency ranks it; the access merge keeps the later time, so it would be
    pushed back forever). Counts are clamped to 0 … 2^53 by the tolerant reader already. The
    clamped value is what this host stores and what any rewrite of it pushes back."""
    now = utcnow()
    latest = now + timedelta(seconds=_max_clock_skew_s)
    changes: dict[str, Any] = {}
    if memory.created_at > latest:
        changes["created_at"] = now
    if memory.last_accessed_at is not None and memory.last_accessed_at > latest:
        changes["last_accessed_at"] = now
    return memory.with_changes(**changes) if changes else memory


def _contained(reader: Callable[[Any], Any], obj: Any, what: str, *, one_line: bool) -> Any:
    """``reader(obj)``, with any exception turned into ``BadObject``: one object's trouble must
    never end a pass (``one_line``: fold and cut a validation message too)."""
    try:
        return reader(obj)
    except ValidationError as exc:
        raise BadObject(f"not a valid {what}: {_one_line(exc) if one_line else exc}") from None
    except Exception as exc:  # containment: whatever else a hostile body provokes is a skip
        raise BadObject(f"not a usable {what} ({type(exc).__name__}: {_one_line(exc)})") from None


def _one_line(exc: BaseException | str, limit: int = 200) -> str:
    text = fold_whitespace(exc)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def content_hash(memory: Memory) -> str:
    """SHA-256 of the memory without its access metadata (count, last access, staleness).

    Two copies with the same hash are the same memory whose only differences are mergeable.
    Unknown fields are part of the content, so another writer's edit of them is noticed.
    """
    # ``Memory.to_dict`` without the access fields, built directly (a fresh host hashes every
    # memory it pulls: formatting lastAccessedAt only to drop it was a third of the cost).
    m = memory
    body = {k: v for k, v in m.extra.items() if k not in ACCESS_FIELDS} if m.extra else {}
    body.update(id=m.id, profileName=m.profile_name, rawInput=m.raw_input, processedContent=m.processed_content,
                summary=m.summary, category=m.category, source=m.source, confidence=m.confidence,
                createdAt=format_time(m.created_at), isActive=m.is_active, version=m.version)
    return hashlib.sha256(_HASH_ENCODER.encode(body).encode("utf-8")).hexdigest()


_HASH_ENCODER: Final = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# --- automation notes: memlocal/automations/<id>.json ---------------------------------------------


def note_key(automation_id: str) -> str:
    """``memlocal/automations/<id>.json`` (the id validated, so no key can escape its prefix)."""
    return f"{NOTE_PREFIX}{validate_automation_id(automation_id)}{SUFFIX}"


def parse_note_key(key: str) -> str | None:
    """The automation id of a well-formed note key, else ``None``."""
    if not key.startswith(NOTE_PREFIX) or not key.endswith(SUFFIX):
        return None
    name = key[len(NOTE_PREFIX): -len(SUFFIX)]
    try:
        return validate_automation_id(name)
    except ValidationError:
        return None


def encode_note(note: AutomationNote) -> bytes:
    """The note object's body: ``AutomationNote.to_dict`` as compact UTF-8 JSON."""
    return json.dumps(note.to_dict(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode_note(data: bytes, automation_id: str) -> AutomationNote:
    """Read the body of ``memlocal/automations/<automation_id>.json``; ``BadObject`` if it cannot
    be used (the same strictness as ``decode``, tolerance from ``read_foreign_note``)."""
    note: AutomationNote = _contained(read_foreign_note, _read_json(data), "automation note", one_line=True)
    if note.automation_id != automation_id:
        raise BadObject(f"key names automation {automation_id} but the body is automation {_one_line(note.automation_id)}")
    return note


def note_hash(note: AutomationNote) -> str:
    """SHA-256 of the note's text and updatedAt: two copies with the same hash are the same note."""
    text = json.dumps([note.note, note.to_dict()["updatedAt"]], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
