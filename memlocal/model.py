"""The memory object: fields, validation, ids, timestamps and staleness.

JSON field names are camelCase everywhere (bucket, REST, tools, ``--json``). Objects written by
another implementation of the spec (a Go service) are read as well: nanosecond timestamps, numeric
offsets, Go's zero time for "never accessed", and fields we do not know, which are kept in
``Memory.extra`` so that our rewrites do not drop them.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Final, Mapping, overload

from .errors import InputTooLargeError, ValidationError, fold_whitespace

SCHEMA_VERSION: Final = 1
RAW_INPUT_MAX_BYTES: Final = 4096
SUMMARY_MAX_CHARS: Final = 50
CATEGORIES: Final = ("preference", "fact", "behavior", "context", "general")
SOURCES: Final = ("explicit", "inferred")
CORE_CATEGORIES: Final = ("preference", "fact")
# The spec's four memory tools; a profile whose tools list names one opts in to injection.
# Defined here, not in ``tools``, so that injection need not import the tool dispatcher (which
# refers to the bank: bank -> injection -> tools -> bank was a circle).
MEMORY_TOOL_NAMES: Final = ("memory_save", "memory_recall", "memory_list", "memory_delete")
# Staleness tilt per category (docs/spec.md, "Staleness").
CATEGORY_WEIGHTS: Final[Mapping[str, float]] = {
    "preference": 0.5,
    "fact": 0.7,
    "behavior": 1.0,
    "context": 1.5,
    "general": 1.0,
}

# A page or a search returns at most this many memories; SQLite integers are 64-bit, so a larger
# offset would overflow in the query rather than just miss.
PAGE_MAX_LIMIT: Final = 1000
OFFSET_MAX: Final = 2**63 - 1
# The one declaration of each name rule: validators, JSON Schemas (tools, REST, MCP) and docs
# take these (anchored, as JSON Schema's "pattern" needs).
PROFILE_PATTERN: Final = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"
ID_PATTERN: Final = r"^mem-[0-9a-f]{8}$"
_PROFILE_RE: Final = re.compile(PROFILE_PATTERN)
_ID_RE: Final = re.compile(ID_PATTERN)
# What RFC 3339 accepts (``datetime.fromisoformat`` parses; this keeps out ISO-only forms).
_RFC3339_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})")
ZERO_TIME_TEXT: Final = "0001-01-01T00:00:00Z"
# Counts (accessCount) and versions live in 0 ... 2^53: exact as an IEEE double (what a
# JavaScript or Go float64 reader sees) and far inside SQLite's 64-bit INTEGER.
COUNT_MAX: Final = 2**53
# Nesting deeper than this in a memory object (unknown fields) is refused, not walked.
MAX_JSON_DEPTH: Final = 64

JSON_FIELDS: Final = (
    "id",
    "profileName",
    "rawInput",
    "processedContent",
    "summary",
    "category",
    "source",
    "confidence",
    "createdAt",
    "lastAccessedAt",
    "accessCount",
    "stalenessScore",
    "isActive",
    "version",
)
_JSON_FIELD_SET: Final = frozenset(JSON_FIELDS)


# --- validation -------------------------------------------------------------------------------


def validate_profile(name: object) -> str:
    """Return ``name`` if it is a valid profile name, else raise ``ValidationError``.

    1-64 characters of ``[A-Za-z0-9._-]``, not starting with ``.``: a profile name becomes part
    of an object key and a file name, so nothing like ``../x`` or ``a/b`` may pass.
    """
    if not isinstance(name, str) or not _PROFILE_RE.fullmatch(name):
        raise ValidationError(
            f"invalid profile name {name!r}: use 1-64 characters of A-Z a-z 0-9 . _ -, "
            "not starting with '.'"
        )
    return name


def validate_id(memory_id: object) -> str:
    """Return ``memory_id`` if it matches ``mem-<8 lowercase hex>``, else raise."""
    if not isinstance(memory_id, str) or not _ID_RE.fullmatch(memory_id):
        raise ValidationError(f"invalid memory id {memory_id!r}: expected mem- followed by 8 lowercase hex digits")
    return memory_id


# The extra fields that link memories (docs/hygiene.md, "Supersession"): each holds a memory id.
LINK_FIELDS: Final = ("supersedes", "supersededBy")


def _checked_links(extra: dict[str, Any], *, lenient: bool) -> dict[str, Any]:
    """``extra`` with its supersession links checked as memory ids. Strict (new input: an
    import) raises ``ValidationError``; ``lenient`` (another writer's object) drops a link that
    is not a memory id, the one change that makes such an object valid. ``null`` means no link."""
    bad = [f for f in LINK_FIELDS if extra.get(f) is not None and not (isinstance(extra[f], str) and _ID_RE.fullmatch(extra[f]))]
    if not bad:
        return extra
    if not lenient:
        raise ValidationError(f"{bad[0]} must be a memory id (mem- followed by 8 lowercase hex digits), "
                              f"got {_short(extra[bad[0]])}")
    return {k: v for k, v in extra.items() if k not in bad}


def validate_category(category: object) -> str:
    if category not in CATEGORIES:
        raise ValidationError(f"unknown category {category!r}: expected one of {', '.join(CATEGORIES)}")
    return str(category)


def validate_confidence(confidence: object) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
        raise ValidationError(f"confidence must be a number in [0, 1], got {confidence!r}")
    value = float(confidence)
    if not (0.0 <= value <= 1.0):  # also rejects NaN
        raise ValidationError(f"confidence must be in [0, 1], got {confidence!r}")
    return value


def validate_int(value: object, name: str, low: int, high: int) -> int:
    """Return ``value`` if it is an integer (not a bool) from ``low`` to ``high``, else raise."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        top = "2^63-1" if high == OFFSET_MAX else str(high)
        raise ValidationError(f"{name} must be an integer from {low} to {top}, got {_short(value)}")
    return value


def validate_min_score(value: object) -> float:
    """Return ``value`` as a float if it is a number from 0 to 1 (a recall's ``minScore``), else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:  # NaN too
        raise ValidationError(f"minScore must be a number from 0 to 1, got {_short(value)}")
    return float(value)


def check_text(text: object, what: str) -> str:
    """The one rule for every text field of every face (library, CLI, REST, tools, MCP, import):
    a ``str`` that is valid Unicode, i.e. encodable as UTF-8 (no lone surrogates, which Python
    lets through from ``\\udXXX`` JSON escapes and from undecodable command-line bytes, and
    which SQLite, JSON output and the bucket cannot take). Control, bidi and zero-width
    characters are kept as given; the block renderer neutralises them (``memlocal.services.injection``).
    """
    if not isinstance(text, str):
        raise ValidationError(f"{what} must be a string")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValidationError(
                f"{what} is not valid Unicode text ({exc.reason} U+{ord(text[exc.start]):04X} at "
                f"character {exc.start})"
            ) from None
    return text


# C0 control characters a memory's text may not hold: every one but tab, newline and carriage
# return (a CRLF line ending). A NUL or an escape in a text is almost always a broken pipe or a
# binary file; it was stored (as a space) without a word, so it is refused where new text enters.
_CONTROL_RE: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_CONTROL_NAMES: Final = {0: "NUL", 7: "BEL", 8: "backspace", 0x1B: "ESC"}


def refuse_controls(text: str, what: str) -> str:
    """The one rule for control characters in new text (a save's rawInput, content and summary,
    on every face: the library, the CLI, REST, the tools and MCP): a C0 control other than tab,
    newline and carriage return is a ``ValidationError`` naming it and its position (1-based, in
    characters). Memories written before are kept as they are: a bucket pull, and an import (an
    export's lines: its round trip stays exact)."""
    found = _CONTROL_RE.search(text)
    if found is None:
        return text
    code = ord(found.group())
    name = f"U+{code:04X}" + (f" {_CONTROL_NAMES[code]}" if code in _CONTROL_NAMES else "")
    raise ValidationError(f"{what} holds a control character ({name}) at character {found.start() + 1}; "
                          "only tab and line breaks are allowed")


def validate_text_input(text: object, what: str = "rawInput") -> str:
    """Check a free-text input against the 4096-byte UTF-8 cap (docs/spec.md, "The memory object")
    and the control-character rule (:func:`refuse_controls`): a new text, as every face's save
    gives it."""
    return refuse_controls(_capped_text(text, what), what)


def _capped_text(text: object, what: str) -> str:
    """The cap and the emptiness check of a text, for new input and for an imported line alike
    (an import keeps what an export wrote, control characters included: its round trip is exact)."""
    text = check_text(text, what)
    size = len(text.encode("utf-8"))
    if size > RAW_INPUT_MAX_BYTES:
        raise InputTooLargeError(
            f"{what} is {size} bytes of UTF-8; the cap is {RAW_INPUT_MAX_BYTES} bytes"
        )
    if not text.strip():
        raise ValidationError(f"{what} is empty")
    return text


def validate_summary(summary: object) -> str:
    """A new summary: at most 50 characters, no control character (:func:`refuse_controls`)."""
    return refuse_controls(_capped_summary(summary), "summary")


def _capped_summary(summary: object) -> str:
    summary = check_text(summary, "summary")
    if len(summary) > SUMMARY_MAX_CHARS:
        raise ValidationError(
            f"summary is {len(summary)} characters; the cap is {SUMMARY_MAX_CHARS}"
        )
    return summary


# What memlocal.services.redact puts in place of a credential: a preview never cuts one in half.
_MARKER_RE: Final = re.compile(r"\[REDACTED:[a-z-]+\]")


def cut_preview(text: str, limit: int = SUMMARY_MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters, but never inside a ``[REDACTED:<kind>]`` marker:
    a marker that would be cut goes whole."""
    if len(text) <= limit:
        return text
    if "[REDACTED:" in text:
        for m in _MARKER_RE.finditer(text, 0, limit + 32):
            if m.start() < limit < m.end():
                return text[:m.start()].rstrip()
    return text[:limit]


def default_summary(text: str) -> str:
    """The spec's deterministic preview: the first 50 characters, on one line (a credential's
    marker is never cut: see :func:`cut_preview`)."""
    return cut_preview(fold_whitespace(text))


def _short(value: object, limit: int = 40) -> str:
    """``repr`` cut to ``limit`` characters (a 5000-digit number must not become the message)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_json_value(value: object) -> None:
    """Raise ``ValidationError`` unless ``value`` can be stored and written back as JSON:
    no lone surrogate in any string or key, no NaN or infinity, nesting at most
    ``MAX_JSON_DEPTH``. Walks iteratively (a hostile object cannot exhaust the stack)."""
    if _plainly_valid(value):
        return
    _check_json_value(value)  # the walk that names what is wrong (or finds nothing after all)


_SCALARS: Final = (int, bool, type(None))


def _plainly_valid(value: object) -> bool:
    """``True`` when ``value`` is certainly valid JSON to store: the common case, checked without
    building a path for every member (an ASCII string needs no encoding check). ``False`` means
    "let the full walk decide": something may be wrong, or a type is not one of JSON's own."""
    stack: list[tuple[object, int]] = []
    if type(value) is dict:  # a memory object: its members are mostly scalars, checked in place
        for k, v in value.items():
            if type(k) is not str or not k.isascii():
                return False
            kind = type(v)
            if kind is str:
                if not v.isascii():
                    try:
                        v.encode("utf-8")
                    except UnicodeEncodeError:
                        return False
            elif kind is float:
                if not math.isfinite(v):
                    return False
            elif kind not in _SCALARS:
                stack.append((v, 1))
    else:
        stack.append((value, 0))
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return False
        kind = type(item)
        if kind is str:
            if not item.isascii():  # type: ignore[attr-defined]
                try:
                    item.encode("utf-8")  # type: ignore[attr-defined]
                except UnicodeEncodeError:
                    return False
        elif kind is dict:
            for k, v in item.items():  # type: ignore[attr-defined]
                if type(k) is not str or not k.isascii():
                    return False
                stack.append((v, depth + 1))
        elif kind is list or kind is tuple:
            stack.extend((v, depth + 1) for v in item)  # type: ignore[attr-defined]
        elif kind is float:
            if not math.isfinite(item):  # type: ignore[arg-type]
                return False
        elif kind not in _SCALARS:
            return False
    return True


def _check_json_value(value: object) -> None:
    stack: list[tuple[object, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ValidationError(f"nested deeper than {MAX_JSON_DEPTH} levels at {where or 'the top'}")
        if isinstance(item, str):
            _check_text(item, where)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValidationError(f"{where or 'a value'} holds a number out of range ({item!r})")
        elif isinstance(item, dict):
            for k, v in item.items():
                _check_text(str(k), f"the key of {where}" if where else "a key")
                stack.append((v, f"{where}.{k}" if where else str(k), depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{where or 'a string'} holds a lone surrogate (not valid Unicode text)") from None


def _clamped(value: object, low: float, high: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{name} must be a number, got {_short(value)}")
    if isinstance(value, float) and math.isnan(value):
        raise ValidationError(f"{name} is NaN")
    if isinstance(value, int):  # compared as an int: float(10**400) would overflow
        return float(low) if value < low else float(high) if value > high else float(value)
    return min(high, max(low, value))


def read_foreign(data: object) -> Memory:
    """Read a memory object that another writer stored (another host, a Go service), making it
    valid where that can be done without guessing, else raise ``ValidationError`` with a reason.

    Made valid: ``category`` in any case or padding (an unknown one reads as ``general``),
    ``source`` in any case (an unknown one reads as ``explicit``), ``confidence`` and
    ``stalenessScore`` clamped to [0, 1] (infinities included), ``accessCount`` clamped to
    0 ... 2^53 (a finite float is truncated), ``isActive`` 0/1; summaries and rawInputs over
    our caps are kept as written; unknown fields are kept verbatim. Refused: not an object,
    lone surrogates, non-finite numbers in unknown fields, a version outside 0 ... 2^53, a bad
    timestamp, id or profile, and values of the wrong type. Deterministic, so the same object
    always reads the same (a pass compares content hashes of what it read).
    """
    if not isinstance(data, dict):
        raise ValidationError("a memory must be a JSON object")
    fixed = dict(data)  # numbers are clamped first; ``from_dict`` then checks every value
    category = fixed.get("category")
    if isinstance(category, str):
        low = category.strip().lower()
        fixed["category"] = low if low in CATEGORIES else "general"
    elif category is not None:
        fixed["category"] = "general"
    source = fixed.get("source")
    if isinstance(source, str):
        low = source.strip().lower()
        fixed["source"] = low if low in SOURCES else "explicit"
    if fixed.get("confidence") is not None:
        fixed["confidence"] = _clamped(fixed["confidence"], 0.0, 1.0, "confidence")
    if fixed.get("stalenessScore") is not None:
        fixed["stalenessScore"] = _clamped(fixed["stalenessScore"], 0.0, 1.0, "stalenessScore")
    count = fixed.get("accessCount")
    if count is None:
        fixed["accessCount"] = 0
    else:
        fixed["accessCount"] = int(_clamped(count, 0, COUNT_MAX, "accessCount"))
    active = fixed.get("isActive")
    if isinstance(active, int) and not isinstance(active, bool) and active in (0, 1):
        fixed["isActive"] = bool(active)
    version = fixed.get("version")
    if isinstance(version, float) and version.is_integer():
        fixed["version"] = int(version)
    return Memory.from_dict(fixed, lenient=True)


# --- ids and time -----------------------------------------------------------------------------


def new_id() -> str:
    """A fresh ``mem-<8hex>`` id from the OS CSPRNG. Callers must still check for collisions."""
    return f"mem-{secrets.token_hex(4)}"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@overload
def to_us(dt: datetime) -> int: ...
@overload
def to_us(dt: None) -> None: ...
@overload
def to_us(dt: datetime | None) -> int | None: ...
def to_us(dt: datetime | None) -> int | None:
    """Aware datetime -> integer microseconds since the epoch (exact, unlike float seconds)."""
    if dt is None:
        return None
    delta = dt - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


@overload
def from_us(us: int) -> datetime: ...
@overload
def from_us(us: None) -> None: ...
@overload
def from_us(us: int | None) -> datetime | None: ...
def from_us(us: int | None) -> datetime | None:
    """Integer microseconds since the epoch -> aware UTC datetime (the inverse of :func:`to_us`)."""
    if us is None:
        return None
    return _EPOCH + timedelta(microseconds=us)


def parse_time(value: object) -> datetime | None:
    """Parse an RFC 3339 timestamp into an aware UTC datetime; Go's zero time reads as ``None``.

    Accepts nanoseconds (truncated to microseconds), ``Z`` or a numeric offset. The parsing is
    ``datetime.fromisoformat``'s; the pattern only keeps out what ISO 8601 allows and RFC 3339
    does not (a date alone, week dates, a time without an offset).
    """
    if value is None or value == ZERO_TIME_TEXT:  # "never", as the bucket's objects (and older exports) spell it
        return None
    if not isinstance(value, str):
        raise ValidationError(f"timestamp must be an RFC 3339 string, got {value!r}")
    text = value.strip()
    if not _RFC3339_RE.fullmatch(text):
        raise ValidationError(f"invalid RFC 3339 timestamp {value!r}")
    try:
        dt = datetime.fromisoformat(text.upper())  # RFC 3339 allows a lowercase t and z
    except ValueError:
        raise ValidationError(f"invalid RFC 3339 timestamp {value!r}") from None
    if dt.year <= 1 and dt.month == 1 and dt.day == 1:
        return None  # the zero time (any offset) means "never"
    if dt.tzinfo is timezone.utc:  # a "Z" time: already what astimezone would return
        return dt
    try:
        return dt.astimezone(timezone.utc)
    except OverflowError:  # pragma: no cover - the first hours of year 1 with a negative offset
        raise ValidationError(f"invalid RFC 3339 timestamp {value!r}") from None


def format_time(dt: datetime | None) -> str:
    """Format as RFC 3339 in UTC with ``Z``; ``None`` is written as Go's zero time."""
    if dt is None:
        return ZERO_TIME_TEXT
    if dt.tzinfo is not timezone.utc:
        dt = dt.astimezone(timezone.utc)
    if dt.year >= 1000:  # strftime's result, without its cost (content hashes format every memory)
        text = f"{dt.year}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
    else:  # strftime's own padding of a short year is the platform's: kept as it was
        text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        text += "." + f"{dt.microsecond:06d}".rstrip("0")
    return text + "Z"


# --- the object -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory of one profile. Immutable: changes produce a new object via ``replace``."""

    id: str
    profile_name: str
    raw_input: str
    processed_content: str
    summary: str
    category: str = "general"
    source: str = "explicit"
    confidence: float = 1.0
    created_at: datetime = field(default_factory=utcnow)
    last_accessed_at: datetime | None = None
    access_count: int = 0
    staleness_score: float = 0.0
    is_active: bool = True
    version: int = SCHEMA_VERSION
    # Fields of the bucket object that this implementation does not know, kept verbatim.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self, *, wire: bool = False) -> dict[str, Any]:
        """The camelCase JSON object (unknown fields from other writers included), as every face
        shows it (REST, ``--json``, export, the tools): ``lastAccessedAt`` is ``null`` for a
        memory never accessed. ``wire``: the bucket object's form, which writes Go's zero time
        there as the spec's other implementations do (``sync``'s encoder; docs/storage.md)."""
        out: dict[str, Any] = dict(self.extra)
        out.update(
            {
                "id": self.id,
                "profileName": self.profile_name,
                "rawInput": self.raw_input,
                "processedContent": self.processed_content,
                "summary": self.summary,
                "category": self.category,
                "source": self.source,
                "confidence": self.confidence,
                "createdAt": format_time(self.created_at),
                "lastAccessedAt": (format_time(self.last_accessed_at)
                                   if wire or self.last_accessed_at is not None else None),
                "accessCount": self.access_count,
                "stalenessScore": self.staleness_score,
                "isActive": self.is_active,
                "version": self.version,
            }
        )
        return out

    @classmethod
    def from_dict(cls, data: object, *, lenient: bool = False) -> "Memory":
        """Build and validate a memory from its JSON object; raises ``ValidationError``.

        Strict (the default) for what this host accepts as new input (saves, imports).
        ``lenient`` is for objects another writer already stored (see ``read_foreign``): the
        caps on rawInput and summary, which bound what *we* write, are not applied to them.
        Either way no string may hold a lone surrogate and no number may leave its domain
        (counts and versions 0 to 2^53, finite scores), so whatever is returned can be stored,
        written back and printed as JSON.
        """
        if not isinstance(data, dict):
            raise ValidationError("a memory must be a JSON object")
        check_json_value(data)
        for key in ("id", "profileName"):
            if key not in data:
                raise ValidationError(f"memory object lacks {key!r}")
        raw = data.get("rawInput")
        processed = data.get("processedContent")
        if raw in (None, "") and processed in (None, ""):
            raise ValidationError("memory object has neither rawInput nor processedContent")
        raw = raw if raw not in (None, "") else processed
        processed = processed if processed not in (None, "") else raw
        if lenient:
            raw = check_text(raw, "rawInput")
            if not raw.strip():
                raise ValidationError("rawInput must be a non-empty string")
        else:
            raw = _capped_text(raw, "rawInput")  # an import keeps control characters: see _capped_text
        processed = check_text(processed, "processedContent")
        summary = data.get("summary")
        if summary in (None, ""):
            summary = default_summary(processed)
        summary = summary if lenient and isinstance(summary, str) else _capped_summary(summary)
        source = data.get("source") or "explicit"
        if source not in SOURCES:
            raise ValidationError(f"unknown source {source!r}: expected explicit or inferred")
        access_count = data.get("accessCount", 0)
        if isinstance(access_count, bool) or not isinstance(access_count, int) or not 0 <= access_count <= COUNT_MAX:
            raise ValidationError(f"accessCount must be an integer from 0 to 2^53, got {_short(access_count)}")
        staleness = data.get("stalenessScore", 0.0)
        if isinstance(staleness, bool) or not isinstance(staleness, (int, float)) or not math.isfinite(staleness):
            raise ValidationError(f"stalenessScore must be a finite number, got {_short(staleness)}")
        is_active = data.get("isActive", True)
        if not isinstance(is_active, bool):
            raise ValidationError(f"isActive must be a boolean, got {_short(is_active)}")
        version = data.get("version", SCHEMA_VERSION)
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= COUNT_MAX:
            raise ValidationError(f"version must be an integer from 0 to 2^53, got {_short(version)}")
        created = parse_time(data.get("createdAt"))
        if created is None:
            raise ValidationError("memory object lacks a createdAt timestamp")
        extra = {} if _JSON_FIELD_SET.issuperset(data) else {k: v for k, v in data.items() if k not in _JSON_FIELD_SET}
        if extra:  # unknown fields are stored and re-sent verbatim: they must be valid text too
            check_text(json.dumps(extra, ensure_ascii=False, default=str), "an unknown field")
            extra = _checked_links(extra, lenient=lenient)
        return cls(
            id=validate_id(data["id"]),
            profile_name=validate_profile(data["profileName"]),
            raw_input=raw,
            processed_content=processed,
            summary=summary,
            category=validate_category(data.get("category") or "general"),
            source=source,
            confidence=validate_confidence(data.get("confidence", 1.0)),
            created_at=created,
            last_accessed_at=parse_time(data.get("lastAccessedAt")),
            access_count=access_count,
            # Derived (recomputed on every access); clamped so that no reader sees it leave [0, 1].
            staleness_score=min(1.0, max(0.0, float(staleness))),
            is_active=is_active,
            version=version,
            extra=extra,
        )

    def with_changes(self, **changes: Any) -> "Memory":
        return replace(self, **changes)

    @property
    def supersedes(self) -> str | None:
        """The id of the memory this one replaced (the ``supersedes`` extra field), if any."""
        value = self.extra.get("supersedes")
        return value if isinstance(value, str) else None

    @property
    def superseded_by(self) -> str | None:
        """The id of the memory that replaced this one (the ``supersededBy`` extra field), if any."""
        value = self.extra.get("supersededBy")
        return value if isinstance(value, str) else None


def compute_staleness(
    *,
    category: str,
    confidence: float,
    access_count: int,
    created_at: datetime,
    last_accessed_at: datetime | None,
    now: datetime | None = None,
) -> float:
    """The staleness of docs/spec.md, "Staleness", clamped to [0, 1].

    (daysSinceAccess*0.05 - log10(accessCount+1)*0.2 + (1-confidence)*0.3) * categoryWeight,
    with daysSinceAccess counted from lastAccessedAt, or createdAt when never accessed.
    """
    now = now or utcnow()
    anchor = last_accessed_at or created_at
    days = max(0.0, (now - anchor).total_seconds() / 86400.0)
    raw = days * 0.05 - math.log10(access_count + 1) * 0.2 + (1.0 - confidence) * 0.3
    value = raw * CATEGORY_WEIGHTS.get(category, 1.0)
    return min(1.0, max(0.0, value))


def staleness_of(memory: Memory, now: datetime | None = None) -> float:
    return compute_staleness(
        category=memory.category,
        confidence=memory.confidence,
        access_count=memory.access_count,
        created_at=memory.created_at,
        last_accessed_at=memory.last_accessed_at,
        now=now,
    )


@dataclass(frozen=True, slots=True)
class Extraction:
    """Structure the LLM processor extracted from a rawInput (already validated and clamped)."""

    processed_content: str
    summary: str
    category: str
    confidence: float
    # The id of an existing memory (one of those shown to the model) this note replaces, if
    # the model proposes one; the caller decides whether to supersede (docs/hygiene.md).
    supersedes: str | None = None


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """One recall request, validated when it is built: every face (the tools and MCP, REST's
    search, ``memlocal recall``, the integrations) builds one and passes it to
    :meth:`memlocal.MemoryBank.recall` or :meth:`~memlocal.MemoryBank.query_with_relevance`.

    ``profile``: whose memories; ``text``: the query; ``limit``: most results (1 to 1000;
    ``None``: the setting ``recall.limit``); ``min_score``: lowest score returned (0 to 1;
    ``None``: ``recall.min_score``); ``exclude_ids``: memories never returned (one id or
    several); ``now``: the time the scores are computed at (``None``: the current time).
    A broken rule raises ``ValidationError`` with the message the faces show.
    """

    profile: str
    text: str
    limit: int | None = None
    min_score: float | None = None
    exclude_ids: tuple[str, ...] = ()
    now: datetime | None = None

    def __post_init__(self) -> None:
        validate_profile(self.profile)
        check_text(self.text, "query")
        if self.limit is not None:
            validate_int(self.limit, "limit", 1, PAGE_MAX_LIMIT)
        if self.min_score is not None:
            object.__setattr__(self, "min_score", validate_min_score(self.min_score))
        # One id is one id, not its characters.
        ids = (self.exclude_ids,) if isinstance(self.exclude_ids, str) else self.exclude_ids
        object.__setattr__(self, "exclude_ids", tuple(validate_id(i) for i in ids))

    def with_defaults(self, limit: int, min_score: float) -> "RecallQuery":
        """This query with the settings' values where it leaves ``limit`` or ``min_score`` open."""
        return replace(self, limit=limit if self.limit is None else self.limit,
                       min_score=min_score if self.min_score is None else self.min_score)


# An age given by a person (prune --older-than, retention.older_than): the one parser.
_AGE_RE: Final = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNIT_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(value: str) -> timedelta:
    """``90d``, ``12h``, ``2w``, ``30m``, ``45s`` as a duration; ``ValidationError`` otherwise."""
    m = _AGE_RE.fullmatch(value.strip().lower()) if isinstance(value, str) else None
    if m is None:
        raise ValidationError(f"invalid age {value!r}: use a number and a unit, e.g. 90d, 12h, 2w")
    return timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])
