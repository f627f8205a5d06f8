"""JSON Lines export and import: one camelCase memory object per line.

Import rules (decided here; the spec is silent):
- every line is validated on its own (strictly, as a save is: ``Memory.from_dict``); a bad line,
  hostile ones included (lone surrogates, NaN/Infinity, numbers outside 0 ... 2^53, deep
  nesting), is reported with its number and reason and the rest of the file is still imported;
- ids and timestamps are kept, so exporting from one host and importing on another moves the
  same memories, and importing the same file twice creates no duplicate: a line whose id is
  already present in that profile is ``unchanged`` (the local copy, with any access counted
  since, is kept: an import never overwrites);
- a line whose id belongs to a memory of another profile (``--profile`` into the same database,
  to copy a profile, or a rare id collision between hosts) is imported as a copy with a new id:
  its ``copiedFrom`` names the line's id, its supersession links follow the other new ids, and
  it is reported (``new ids``); a line whose profile already holds a copy of it is
  ``unchanged``, so importing the same file twice still creates nothing new;
- ``profile`` (the CLI's ``--profile``) moves every imported memory into that profile;
- imported memories go through the same write path as saves, so with a bucket configured they are
  queued in the sync outbox and pushed by the next pass;
- credentials are handled as in a save (``secrets.mode``): redacted (the line is imported and
  listed with the kinds found) or, in reject mode, the line is rejected. Unknown fields (kept
  for other writers) are checked too, every string in them: a credential there is redacted in
  place and the line lists the fields that held one (``fields``); reject mode rejects the line;
- a line written by hand needs only its text (``content``, ``rawInput`` or ``processedContent``)
  and a profile (``profileName``, or ``--profile``): without ``createdAt`` it is dated now, and
  without an ``id`` it gets one derived from its profile and text (so importing the file again
  finds it ``unchanged``); the summary counts both;
- a file that is not JSON Lines (a binary file, a JSON array, a CSV) stops the import when its
  first ``NOT_JSONL_AFTER`` lines are all unreadable (not UTF-8, not JSON, not an object), or
  when ``GIVE_UP_AFTER`` unreadable lines come in a row: ``stopped`` says why, in one line;
- ``stop`` (the CLI's first Ctrl-C) ends the import between two lines: what was read is written,
  ``interrupted`` names the first line not read, and importing the same file again continues
  (the lines already in are ``unchanged``).
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Final, Iterable, Iterator

from .facade import MemoryBank
from ..errors import MemoryBankError, fold_whitespace
from ..humanize import plural
from ..model import Memory, format_time, utcnow, validate_profile

# Lines per durable transaction: a batch is read and checked while the one before it is written,
# and 2,000 measured faster than 500 or 1,000 (fewer hand-overs between the two threads).
BATCH_SIZE = 2000
# The outcome of a line stored as a copy: this prefix and the new id.
COPIED = "copied:"
# A file whose first lines are this many unreadable ones in a row is not JSON Lines: the import
# stops there (a binary file printed one error per "line", 494 of them) ...
NOT_JSONL_AFTER: Final = 5
# ... as does one that turns unreadable for this many lines in a row further on.
GIVE_UP_AFTER: Final = 100
# The fields a line written by hand may give its text in (``content`` is the save's name for it).
_TEXT_FIELDS: Final = ("rawInput", "processedContent", "content")


def export_memories(bank: MemoryBank, profile: str | None = None) -> Iterator[Memory]:
    """Every memory of ``profile`` (or of all profiles), by profile, oldest first."""
    return bank.export(profile)


def write_jsonl(memories: Iterable[Memory], out: IO[str]) -> int:
    count = 0
    for memory in memories:
        out.write(json.dumps(memory.to_dict(), ensure_ascii=False, separators=(",", ":")) + "\n")
        count += 1
    return count


@dataclass
class ImportReport:
    """What an import did: counts, and each rejected line with its number and reason."""

    imported: int = 0
    unchanged: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    # (line, kinds, unknown fields that held a credential)
    redacted: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    # Lines imported as copies under a new id: (line, the line's id, the new id).
    new_ids: list[tuple[int, str, str]] = field(default_factory=list)
    # Lines without createdAt (dated now) and without an id (given one), by number.
    dated: list[int] = field(default_factory=list)
    given_ids: list[int] = field(default_factory=list)
    # Why the import stopped reading early (the file is not JSON Lines), else ``None``.
    stopped: str | None = None
    # The first line not read when ``stop`` ended the import (Ctrl-C), else ``None``.
    interrupted: int | None = None

    def summary(self) -> str:
        copies = (f" ({len(self.new_ids)} with new ids: their ids belong to memories of another profile)"
                  if self.new_ids else "")
        text = f"imported {self.imported}{copies}, unchanged {self.unchanged}, rejected {len(self.rejected)}"
        if self.dated or self.given_ids:
            made = [f"{plural(len(self.dated), 'line')} without createdAt dated now"] if self.dated else []
            made += [f"{plural(len(self.given_ids), 'line')} without an id given one"] if self.given_ids else []
            text += f" ({'; '.join(made)})"
        if self.redacted:
            fields = sorted({f for _, _, names in self.redacted for f in names})
            text += f", redacted credentials in {len(self.redacted)}" + (
                f" (unknown fields redacted: {', '.join(fields)})" if fields else "")
        if self.interrupted is not None:
            text = (f"interrupted before line {self.interrupted}: {text}; run the same import again to "
                    "continue (the lines already imported are skipped as unchanged)")
        return text

    def to_dict(self) -> dict[str, object]:
        return {
            "imported": self.imported,
            "unchanged": self.unchanged,
            "rejected": [{"line": n, "reason": r} for n, r in self.rejected],
            "redacted": [{"line": n, "kinds": list(k), "fields": list(f)} for n, k, f in self.redacted],
            "newIds": [{"line": n, "id": old, "newId": new} for n, old, new in self.new_ids],
            "dated": self.dated,
            "givenIds": self.given_ids,
            "stopped": self.stopped,
            "interrupted": self.interrupted,
        }


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every line: ``json.loads`` with an argument builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


class _Unreadable(MemoryBankError):
    """A line that is not a JSON object at all (what a file that is not JSON Lines is made of)."""


def _decode(line: str) -> dict[str, Any]:
    try:
        if line.startswith("\ufeff"):  # as json.loads says it (the decoder alone would not)
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", line, 0)
        data = _DECODER.decode(line)
    except json.JSONDecodeError as exc:
        raise _Unreadable(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise _Unreadable("not valid JSON (nested too deeply to read)") from None
    except ValueError as exc:  # NaN/Infinity tokens, numbers of thousands of digits
        raise _Unreadable(f"not valid JSON ({fold_whitespace(exc)[:200]})") from None
    if not isinstance(data, dict):
        raise _Unreadable("a memory must be a JSON object")
    return data


def _derived_id(data: dict[str, Any]) -> str:
    """The id of a line that has none: from its profile and text, so that the same line imported
    again is found (``unchanged``) instead of stored twice."""
    text = next((data[k] for k in _TEXT_FIELDS if isinstance(data.get(k), str) and data[k]), "")
    seed = json.dumps([data.get("profileName"), text], ensure_ascii=False).encode("utf-8", "surrogatepass")
    return "mem-" + hashlib.blake2b(seed, digest_size=4, person=b"memlocal-import").hexdigest()


def _parse(data: dict[str, Any], profile: str | None, now: str) -> tuple[Memory, bool, bool]:
    """The memory of a decoded line, and whether it was dated now and given an id (a line
    written by hand: its text and a profile are enough)."""
    if profile is not None:
        data = {**data, "profileName": profile}
    content = data.get("content")
    if isinstance(content, str) and data.get("rawInput") in (None, "") and data.get("processedContent") in (None, ""):
        data = {k: v for k, v in data.items() if k != "content"}  # the save's name for the text
        data["rawInput"] = data["processedContent"] = content
    dated = data.get("createdAt") is None and "profileName" in data
    if dated:
        data = {**data, "createdAt": now}
    given_id = "id" not in data and "profileName" in data
    if given_id:
        data = {**data, "id": _derived_id(data)}
    if "profileName" not in data:
        raise MemoryBankError("memory object lacks 'profileName' (give one on the line, or --profile)")
    return Memory.from_dict(data), dated, given_id


def import_jsonl(
    bank: MemoryBank,
    lines: Iterable[str | bytes],
    profile: str | None = None,
    progress: Callable[[int], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> ImportReport:
    """Validate and import JSON Lines; see the module docstring for the rules. ``stop`` is asked
    before each line: when it answers true, the lines read so far are written and the import
    ends (``ImportReport.interrupted``)."""
    from ..services.redact import merge_kinds, refuse_credential_name

    if profile is not None:
        refuse_credential_name(validate_profile(profile))
    report = ImportReport()
    copied: dict[str, str] = {}  # a line's id -> its copy's new id, across batches
    stored: list[str] = []  # the ids this import stored
    handed: deque[list[tuple[int, Memory]]] = deque()  # the batches given to the store, in order
    dated: set[int] = set()  # lines dated now, and lines given an id: counted once stored
    given: set[int] = set()
    now = format_time(utcnow())

    def batches() -> Iterator[list[Memory]]:
        """The lines, read and checked in batches (on the caller's thread, while the store
        writes the batch before: ``MemoryBank.import_batches``)."""
        batch: list[tuple[int, Memory]] = []
        readable = False  # a line of the file was a JSON object
        unreadable_run = 0  # unreadable lines in a row
        for line_no, raw in enumerate(lines, start=1):
            if stop is not None and stop():
                report.interrupted = line_no
                break
            if progress is not None:
                progress(len(raw))
            try:
                if isinstance(raw, bytes):
                    try:
                        raw = raw.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise _Unreadable(f"not valid UTF-8 (byte {exc.start})") from None
                line = raw.strip()
                if not line:
                    continue
                data = _decode(line)
                readable, unreadable_run = True, 0
                memory, was_dated, was_given = _parse(data, profile, now)
                if profile is None:
                    refuse_credential_name(memory.profile_name)
                raw_input, processed, summary, kinds = bank.redact_secrets(memory.raw_input,
                                                                           memory.processed_content, memory.summary)
                extra, extra_kinds, fields = bank.redact_fields(memory.extra) if memory.extra else ({}, (), ())
                if kinds or extra_kinds:
                    memory = memory.with_changes(raw_input=raw_input, processed_content=processed, summary=summary,
                                                 extra=extra if extra_kinds else memory.extra)
                    report.redacted.append((line_no, merge_kinds((kinds, extra_kinds)), fields))
                batch.append((line_no, memory))
                if was_dated:
                    dated.add(line_no)
                if was_given:
                    given.add(line_no)
            except _Unreadable as exc:
                report.rejected.append((line_no, str(exc)))
                unreadable_run += 1
                if unreadable_run >= (GIVE_UP_AFTER if readable else NOT_JSONL_AFTER):
                    first = line_no - unreadable_run + 1
                    report.stopped = (f"not JSON Lines: lines {first}-{line_no} are not JSON objects "
                                      f"(line {first}: {report.rejected[-unreadable_run][1]}); stopped reading there")
                    break
                continue
            except MemoryBankError as exc:
                report.rejected.append((line_no, str(exc)))
                continue
            except Exception as exc:  # containment: one hostile line never ends the import
                report.rejected.append((line_no, f"not a usable memory ({type(exc).__name__})"))
                continue
            if len(batch) >= BATCH_SIZE:
                handed.append(batch)
                yield [m for _, m in batch]
                batch = []
        if batch:
            handed.append(batch)
            yield [m for _, m in batch]

    for outcomes in bank.import_batches(batches(), copied):
        for (line_no, memory), outcome in zip(handed.popleft(), outcomes):
            if outcome == "imported" or outcome.startswith(COPIED):
                report.imported += 1
                if line_no in dated:
                    report.dated.append(line_no)
                if line_no in given:
                    report.given_ids.append(line_no)
            if outcome == "imported":
                stored.append(memory.id)
            elif outcome.startswith(COPIED):
                new_id = outcome[len(COPIED):]
                report.new_ids.append((line_no, memory.id, new_id))
                stored.append(new_id)
            elif outcome == "unchanged":
                report.unchanged += 1
            else:
                report.rejected.append((line_no, outcome))
    bank.relink(stored, copied)  # links to lines that came later in the file than the link
    report.rejected.sort()
    return report
