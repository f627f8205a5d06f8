"""Automation notes: one short note per automation, rewritten by its agent after every firing.

Spec ("Memory or context?"): the note belongs to the schedule and dies with it; an empty write
clears it; it records state, never rules; and it reaches the agent as a context block whose
preamble says it is a scribe's observation, not operator input, and that the agent's own
instructions take precedence.

Decisions:
- Automation ids: 1-128 characters of ``[A-Za-z0-9._-]``, starting with a letter or digit (so an
  id can never be a path, an option or a query fragment).
- A note is at most ``NOTE_MAX_BYTES`` (4096) bytes of UTF-8, like a memory's rawInput; over that
  the write is rejected with ``InputTooLargeError`` and nothing changes.
- Surrounding whitespace is trimmed; a note that is empty after that clears the note.
- Stored in the ``automation_notes`` table of the local database (migration 1).
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from .errors import InputTooLargeError, ValidationError
from .injection import NOTE_HEADER, NOTE_PREAMBLE, context_block
from .model import check_text, format_time, utcnow
from .store import Store, from_us, to_us

NOTE_MAX_BYTES: Final = 4096
AUTOMATION_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_AUTOMATION_ID_RE: Final = re.compile(AUTOMATION_ID_PATTERN)


def validate_automation_id(automation_id: object) -> str:
    """Return ``automation_id`` if valid, else raise ``ValidationError``."""
    if not isinstance(automation_id, str) or not _AUTOMATION_ID_RE.fullmatch(automation_id):
        raise ValidationError(
            f"invalid automation id {automation_id!r}: use 1-128 characters of A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return automation_id


@dataclass(frozen=True, slots=True)
class AutomationNote:
    """The note of one automation."""

    automation_id: str
    note: str
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"automationId": self.automation_id, "note": self.note, "updatedAt": format_time(self.updated_at)}


def _check_note(text: object) -> str:
    size = len(check_text(text, "automation note").encode("utf-8"))
    if size > NOTE_MAX_BYTES:
        raise InputTooLargeError(f"automation note is {size} bytes of UTF-8; the cap is {NOTE_MAX_BYTES} bytes")
    return text.strip()


class AutomationNotes:
    """The automation notes of one store (``MemoryBank.automations``)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def get(self, automation_id: str) -> AutomationNote | None:
        """The note of ``automation_id``, or ``None`` when it has none."""
        validate_automation_id(automation_id)
        rows = self._store.read("SELECT note, updated_us FROM automation_notes WHERE automation_id = ?",
                                (automation_id,))
        if not rows:
            return None
        note, updated_us = rows[0]
        return AutomationNote(automation_id, note, from_us(updated_us))  # type: ignore[arg-type]

    def list(self) -> builtins.list[AutomationNote]:
        """Every automation's note, most recently written first (the dashboard's listing)."""
        rows = self._store.read("SELECT automation_id, note, updated_us FROM automation_notes"
                                " ORDER BY updated_us DESC, automation_id")
        return [AutomationNote(a, n, from_us(u)) for a, n, u in rows]  # type: ignore[arg-type]

    def put(self, automation_id: str, text: str, *, now: datetime | None = None) -> AutomationNote | None:
        """Replace the note (durably); an empty or blank ``text`` clears it and returns ``None``."""
        validate_automation_id(automation_id)
        note = _check_note(text)
        if not note:
            self.clear(automation_id)
            return None
        updated = now or utcnow()
        with self._store.transaction() as c:
            c.execute(
                "INSERT INTO automation_notes (automation_id, note, updated_us) VALUES (?, ?, ?)"
                " ON CONFLICT(automation_id) DO UPDATE SET note = excluded.note, updated_us = excluded.updated_us",
                (automation_id, note, to_us(updated)),
            )
        return AutomationNote(automation_id, note, updated)

    def clear(self, automation_id: str) -> bool:
        """Remove the note; ``True`` if there was one."""
        validate_automation_id(automation_id)
        with self._store.transaction() as c:
            return c.execute("DELETE FROM automation_notes WHERE automation_id = ?", (automation_id,)).rowcount > 0

    def delete(self, automation_id: str) -> bool:
        """Forget everything kept for a deleted automation (today: its note)."""
        return self.clear(automation_id)

    def block(self, automation_id: str) -> str:
        """The note as a context block for the automation's next run ("" without a note)."""
        note = self.get(automation_id)
        return note_block(note.note) if note is not None else ""


def note_block(note: str) -> str:
    """A note as a context block for the automation's next run ("" for an empty note)."""
    return context_block(NOTE_HEADER, NOTE_PREAMBLE, (note,))


__all__ = [
    "NOTE_HEADER",
    "NOTE_MAX_BYTES",
    "NOTE_PREAMBLE",
    "AutomationNote",
    "AUTOMATION_ID_PATTERN",
    "AutomationNotes",
    "note_block",
    "validate_automation_id",
]
