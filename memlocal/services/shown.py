"""What every face is shown of a memory: its credentials redacted on the way out.

A memory pulled from the bucket never went through this host's save, and the bucket's copy is
the other writer's to fix; every memory this host saved is returned unchanged (docs/hygiene.md,
"Secrets"). The bank and its parts (:mod:`memlocal.bank.retention`, :mod:`memlocal.bank.context`, ...) pass
every memory they return through :func:`shown`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..model import SUMMARY_MAX_CHARS, Memory, cut_preview
from .redact import redact, redact_json

if TYPE_CHECKING:
    from .injection import RenderedBlock
    from ..relevance.scoring import ScoredMemory
    from ..store import Page


def warm_redaction() -> None:
    """Load the credential detectors every face's output may need (``shown``), on the recall
    index's builder thread: a process that stays up would otherwise pay their import (tens of
    ms) inside the first recall whose results hold a long word or a URL."""
    from .redact import warm

    warm()


def shown(memory: Memory) -> Memory:
    """``memory`` as every face returns it: credentials redacted from its texts and unknown
    fields (see the module docstring)."""
    raw, processed, summary = redact(memory.raw_input), redact(memory.processed_content), redact(memory.summary)
    extra, extra_kinds = redact_json(dict(memory.extra)) if memory.extra else (memory.extra, ())
    if not (raw.kinds or processed.kinds or summary.kinds or extra_kinds):
        return memory
    return memory.with_changes(raw_input=raw.text, processed_content=processed.text,
                               summary=cut_preview(summary.text, SUMMARY_MAX_CHARS), extra=extra)


def redacted_text(text: str) -> str:
    """``text`` with its credentials redacted (an integration's local rows as they are read)."""
    return redact(text).text


def shown_page(page: "Page") -> "Page":
    """A page of memories as the faces show them."""
    return replace(page, memories=[shown(m) for m in page.memories])


def shown_scored(scored: "ScoredMemory") -> "ScoredMemory":
    """A ranked memory as the faces show it (the same object when nothing was redacted)."""
    memory = shown(scored.memory)
    return scored if memory is scored.memory else replace(scored, memory=memory)


def shown_block(block: "RenderedBlock") -> "RenderedBlock":
    """The block's memories as the faces show them (its text is redacted as it is rendered)."""
    return replace(block, core=tuple(map(shown_scored, block.core)),
                   relevant=tuple(map(shown_scored, block.relevant)), trimmed=tuple(map(shown_scored, block.trimmed)))
