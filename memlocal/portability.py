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
  place and the line lists the fields that held one (``fields``); reject mode rejects the line.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Callable, Iterable, Iterator

from .bank import MemoryBank
from .errors import MemoryBankError, fold_whitespace
from .model import Memory, validate_profile

# Lines per durable transaction: a batch is read and checked while the one before it is written,
# and 2,000 measured faster than 500 or 1,000 (fewer hand-overs between the two threads).
BATCH_SIZE = 2000
# The outcome of a line stored as a copy: this prefix and the new id.
COPIED = "copied:"


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

    def summary(self) -> str:
        copies = (f" ({len(self.new_ids)} with new ids: their ids belong to memories of another profile)"
                  if self.new_ids else "")
        text = f"imported {self.imported}{copies}, unchanged {self.unchanged}, rejected {len(self.rejected)}"
        if not self.redacted:
            return text
        fields = sorted({f for _, _, names in self.redacted for f in names})
        return text + f", redacted credentials in {len(self.redacted)}" + (
            f" (unknown fields redacted: {', '.join(fields)})" if fields else "")

    def to_dict(self) -> dict[str, object]:
        return {
            "imported": self.imported,
            "unchanged": self.unchanged,
            "rejected": [{"line": n, "reason": r} for n, r in self.rejected],
            "redacted": [{"line": n, "kinds": list(k), "fields": list(f)} for n, k, f in self.redacted],
            "newIds": [{"line": n, "id": old, "newId": new} for n, old, new in self.new_ids],
        }


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every line: ``json.loads`` with an argument builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _parse(line_no: int, line: str, profile: str | None) -> Memory:
    try:
        if line.startswith("\ufeff"):  # as json.loads says it (the decoder alone would not)
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", line, 0)
        data = _DECODER.decode(line)
    except json.JSONDecodeError as exc:
        raise MemoryBankError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise MemoryBankError("not valid JSON (nested too deeply to read)") from None
    except ValueError as exc:  # NaN/Infinity tokens, numbers of thousands of digits
        raise MemoryBankError(f"not valid JSON ({fold_whitespace(exc)[:200]})") from None
    if profile is not None and isinstance(data, dict):
        data = {**data, "profileName": profile}
    return Memory.from_dict(data)


def import_jsonl(
    bank: MemoryBank,
    lines: Iterable[str | bytes],
    profile: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Validate and import JSON Lines; see the module docstring for the rules."""
    from .redact import merge_kinds, refuse_credential_name

    if profile is not None:
        refuse_credential_name(validate_profile(profile))
    report = ImportReport()
    copied: dict[str, str] = {}  # a line's id -> its copy's new id, across batches
    stored: list[str] = []  # the ids this import stored
    handed: deque[list[tuple[int, Memory]]] = deque()  # the batches given to the store, in order

    def batches() -> Iterator[list[Memory]]:
        """The lines, read and checked in batches (on the caller's thread, while the store
        writes the batch before: ``MemoryBank.import_batches``)."""
        batch: list[tuple[int, Memory]] = []
        for line_no, raw in enumerate(lines, start=1):
            if progress is not None:
                progress(len(raw))
            if isinstance(raw, bytes):
                try:
                    raw = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    report.rejected.append((line_no, f"not valid UTF-8 (byte {exc.start})"))
                    continue
            line = raw.strip()
            if not line:
                continue
            try:
                memory = _parse(line_no, line, profile)
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
            if outcome == "imported":
                report.imported += 1
                stored.append(memory.id)
            elif outcome.startswith(COPIED):
                report.imported += 1
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
