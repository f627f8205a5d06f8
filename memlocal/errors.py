"""One exception hierarchy for every memlocal failure.

Each boundary (CLI, REST, MCP, tools) translates these once: ``code`` is the error's stable name
(REST and MCP answer it), ``str(err)`` is always a single human-readable line, and the HTTP status
of each class is the REST layer's business (``memlocal.faces.api.errors.HTTP_STATUS``).
"""

from __future__ import annotations


def fold_whitespace(text: object) -> str:
    """``text`` on one line: every run of whitespace (line breaks included) becomes one space,
    and the ends are trimmed. The one whitespace folding of memlocal (messages, summaries, table
    cells, memory text in context blocks)."""
    return " ".join(str(text).split())


class MemoryBankError(Exception):
    """Base class of every error memlocal raises on purpose."""

    code: str = "internal"

    def __init__(self, message: str) -> None:
        # Keep messages to one line: they are printed verbatim by the CLI and the API. A message
        # that quotes bad input must itself stay valid text (a lone surrogate is escaped).
        text = fold_whitespace(message)
        if not text.isascii():
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        super().__init__(text)

    @property
    def message(self) -> str:
        return str(self)


class ValidationError(MemoryBankError):
    """Bad input from a caller: a bad profile name, id, category, confidence or argument."""

    code = "invalid_input"


class InputTooLargeError(ValidationError):
    """An input over its size cap (rawInput over 4096 bytes, an automation note over its cap)."""

    code = "too_large"


class SecretFoundError(ValidationError):
    """A credential in a save while ``secrets.mode`` is ``reject``: nothing was stored."""

    code = "secret_found"


class NotFoundError(MemoryBankError):
    """The memory (or automation note) asked for does not exist in that profile."""

    code = "not_found"


class ConfigError(MemoryBankError):
    """A configuration file, variable or flag that cannot be used."""

    code = "config"


class BankNotWiredError(MemoryBankError):
    """The store could not be opened: the API answers 503 with this reason."""

    code = "not_wired"


class StoreError(MemoryBankError):
    """The local database failed in a way the caller cannot fix by changing its input."""

    code = "store"


class DiskFullError(StoreError):
    """The disk (or the database's size limit) is full: the write was not made."""

    code = "disk_full"


class CorruptDatabaseError(StoreError):
    """The database file is damaged (SQLite found a malformed page or no database at all)."""

    code = "corrupt"


class SyncError(MemoryBankError):
    """A sync pass could not complete (bucket unreachable, another pass holds the lock, guard)."""

    code = "sync"


class BucketError(MemoryBankError):
    """One bucket request's answer that the sync handles where it asked (``memlocal_sync.bucket``):
    never a failed pass by itself, so not a ``SyncError`` (a bucket that cannot be used at all is
    the sync's ``BucketUnavailable``, a ``SyncError``)."""

    code = "bucket"


class PreconditionFailed(BucketError):
    """A conditional write lost: the object exists (create) or moved on (If-Match)."""

    code = "precondition_failed"


class ObjectMissing(BucketError):
    """The object is not (or no longer) in the bucket."""

    code = "object_missing"


class ObjectTooLarge(BucketError):
    """The object is over ``sync.max_object_bytes``: it is skipped, never read whole."""

    code = "object_too_large"

    def __init__(self, size: int, cap: int, etag: str = "") -> None:
        super().__init__(f"object is {size} bytes; the cap is {cap}")
        self.size = size
        self.etag = etag
