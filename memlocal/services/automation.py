"""Automation notes: one short note per automation, rewritten by its agent after every firing.

Spec ("Memory or context?"): the note belongs to the schedule and dies with it; an empty write
clears it; it records state, never rules; and it reaches the agent as a context block whose
preamble says it is a scribe's observation, not operator input, and that the agent's own
instructions take precedence.

Decisions:
- Automation ids: 1-128 characters of ``[A-Za-z0-9._-]``, starting with a letter or digit (so an
  id can never be a path, an option or a query fragment). An id that holds a credential is
  refused (``ValidationError`` naming its kind, never the value): an id is stored, synced and is
  part of a bucket key, and redacting it would make two ids one (docs/hygiene.md, "Secrets").
- A note is at most ``NOTE_MAX_BYTES`` (4096) bytes of UTF-8, like a memory's rawInput; over that
  the write is rejected with ``InputTooLargeError`` and nothing changes.
- Surrounding whitespace is trimmed; a note that is empty after that clears the note.
- Stored in the ``automation_notes`` table of the local database (migration 1), through the
  store, which records each write and clear in its change log (``automation_outbox``, migration
  8) in the same transaction. With a bucket, the replicator writes the note through to
  ``memlocal/automations/<id>.json`` after the commit; the sync's passes reconcile the rest
  (docs/sync.md, "Automation notes").
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Callable

from ..errors import InputTooLargeError
from .injection import NOTE_HEADER, NOTE_PREAMBLE, context_block
from ..model import check_text, utcnow
from ..store import Store, from_us, to_us

from ..plugins import (
    AUTOMATION_ID_PATTERN,
    NOTE_MAX_BYTES,
    AutomationNote,
    NoteReplicator,
    read_foreign_note,
    validate_automation_id,
)


def _check_note(text: object) -> str:
    checked = check_text(text, "automation note")
    size = len(checked.encode("utf-8"))
    if size > NOTE_MAX_BYTES:
        raise InputTooLargeError(f"automation note is {size} bytes of UTF-8; the cap is {NOTE_MAX_BYTES} bytes")
    return checked.strip()


class AutomationNotes:
    """The automation notes of one store (``MemoryBank.automations``)."""

    def __init__(self, store: Store, replicator: NoteReplicator | None = None,
                 redactor: Callable[[str], tuple[str, tuple[str, ...]]] | None = None) -> None:
        self._store = store
        self._replicator = replicator
        # secrets.mode applied to a note before it is stored (the bank's); default: redact.
        self._redactor = redactor or _redacted

    def get(self, automation_id: str) -> AutomationNote | None:
        """The note of ``automation_id``, or ``None`` when it has none."""
        _checked_id(automation_id)
        found = self._store.note_get(automation_id)
        if found is None:
            return None
        # Redacted on the way out too: a note pulled from the bucket did not pass through put.
        return AutomationNote(automation_id, _redacted(found[0])[0], from_us(found[1]))

    def list(self) -> builtins.list[AutomationNote]:
        """Every automation's note, most recently written first (the dashboard's listing)."""
        return [AutomationNote(a, _redacted(n)[0], from_us(u)) for a, n, u in self._store.notes()]

    def put(self, automation_id: str, text: str, *, now: datetime | None = None) -> AutomationNote | None:
        """Replace the note (durably); an empty or blank ``text`` clears it and returns ``None``."""
        _checked_id(automation_id)
        note = _check_note(text)
        if not note:
            self.clear(automation_id)
            return None
        note = self._redactor(note)[0]  # credentials never reach the store, the bucket or a prompt
        updated_us = to_us(now or utcnow())
        assert updated_us is not None
        self._store.note_put(automation_id, note, updated_us)
        # As stored (to the microsecond), so that it compares equal to what ``get`` returns.
        stored = AutomationNote(automation_id, note, from_us(updated_us))
        if self._replicator is not None:
            self._replicator.push_note(automation_id, stored)  # after the commit; never raises
        return stored

    def clear(self, automation_id: str) -> bool:
        """Remove the note; ``True`` if there was one."""
        _checked_id(automation_id)
        existed = self._store.note_delete(automation_id)
        if existed and self._replicator is not None:
            self._replicator.push_note(automation_id, None)
        return existed

    def delete(self, automation_id: str) -> bool:
        """Forget everything kept for a deleted automation (today: its note)."""
        return self.clear(automation_id)

    def block(self, automation_id: str) -> str:
        """The note as a context block for the automation's next run ("" without a note)."""
        note = self.get(automation_id)
        return note_block(note.note) if note is not None else ""


def _checked_id(automation_id: str) -> str:
    """A valid automation id that holds no credential, or ``ValidationError``."""
    from .redact import refuse_credential_name

    return refuse_credential_name(validate_automation_id(automation_id), "automation id")


def _redacted(text: str) -> tuple[str, tuple[str, ...]]:
    from .redact import redact

    found = redact(text)
    return found.text, found.kinds


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
    "NoteReplicator",
    "note_block",
    "read_foreign_note",
    "validate_automation_id",
]
