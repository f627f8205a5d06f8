"""``MemoryBank``: the library facade over the store, the scorer, the LLM processor and the sync hook.

Everything a user or a boundary (CLI, REST, MCP, tools) does goes through this class, so each rule
is enforced in one place: validation before anything is written, no lock held while waiting on the
network, and a save that returns only once it is committed durably.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .config import Config
from .errors import ValidationError
from .model import (
    Extraction,
    Memory,
    compute_staleness,
    default_summary,
    new_id,
    utcnow,
    validate_category,
    validate_confidence,
    validate_id,
    validate_profile,
    validate_summary,
    validate_text_input,
)
from .store import IdTakenError, Page, Store

log = logging.getLogger("memlocal")

REPLICATOR_ENTRY_POINTS = "memlocal.replicators"


class Extractor(Protocol):
    """The LLM processor's interface (see ``memlocal.llm``)."""

    def extract(self, raw_input: str) -> Extraction | None:
        """Structure for ``raw_input``; ``None`` when extraction was skipped or the call failed."""


class Replicator(Protocol):
    """Write-through to the bucket, provided by the ``sync`` package through an entry point.

    ``record_*`` run inside the local transaction (so the outbox entry commits with the change);
    ``push_*`` run after the commit and report whether the bucket now has the change.
    """

    def record_save(self, conn: sqlite3.Connection, memory: Memory) -> None: ...

    def push_saved(self, memory: Memory) -> bool: ...

    def record_delete(self, conn: sqlite3.Connection, memory: Memory) -> None: ...

    def push_deleted(self, memory: Memory) -> bool: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SaveResult:
    """What a save returns: the stored memory, and whether the bucket has it yet."""

    memory: Memory
    synced: bool

    def to_dict(self) -> dict[str, Any]:
        return {"memory": self.memory.to_dict(), "synced": self.synced}


def _load_replicator(config: Config, store: Store) -> Replicator | None:
    """Find the bucket replicator through the ``memlocal.replicators`` entry point group.

    memlocal never imports ``sync`` by name (the daemon depends on the library, not the reverse);
    the installed ``sync`` package registers itself here.
    """
    from importlib.metadata import entry_points

    for ep in entry_points(group=REPLICATOR_ENTRY_POINTS):
        factory = ep.load()
        replicator = factory(config, store)
        if replicator is not None:
            return replicator
    return None


class MemoryBank:
    """A profile-scoped store of long-lived memories.

    >>> with MemoryBank.open("/tmp/demo.db") as bank:   # doctest: +SKIP
    ...     bank.save("researcher", content="Prefers JSON output", category="preference")
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        config: Config | None = None,
        extractor: Extractor | None = None,
        replicator: Replicator | None | bool = True,
    ) -> None:
        """Open (creating if needed) the bank at ``path``, else the configured or default database.

        ``extractor``: an LLM processor to use instead of the configured one. ``replicator``:
        ``True`` discovers the configured bucket, ``False``/``None`` keeps the bank local-only.
        """
        self.config = config if config is not None else Config.load()
        db_path = Path(path) if path is not None else self.config.db_path
        self.store = Store(db_path, busy_timeout_s=float(self.config["store.busy_timeout_s"]))
        self._extractor = extractor if extractor is not None else self._configured_extractor()
        if replicator is True:
            try:
                self.replicator: Replicator | None = _load_replicator(self.config, self.store)
            except Exception:
                self.store.close()
                raise
        else:
            self.replicator = replicator or None

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, config: Config | None = None) -> "MemoryBank":
        """Open the bank at ``path`` (or the configured/default database) with the configured extras."""
        return cls(path, config=config)

    def _configured_extractor(self) -> Extractor | None:
        if not self.config["llm.enabled"] or not os.environ.get("ANTHROPIC_API_KEY"):
            return None
        from .llm import extractor_from_config  # anthropic is imported only there

        return extractor_from_config(self.config)

    @property
    def path(self) -> Path:
        return self.store.path

    def close(self) -> None:
        if self.replicator is not None:
            self.replicator.close()
        self.store.close()

    def __enter__(self) -> "MemoryBank":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writes -------------------------------------------------------------------------------

    def save(
        self,
        profile: str,
        raw_input: str | None = None,
        *,
        content: str | None = None,
        summary: str | None = None,
        category: str | None = None,
        confidence: float | None = None,
        use_llm: bool = True,
    ) -> SaveResult:
        """Save a memory and return it once it is durably committed.

        ``raw_input`` alone may be structured by the LLM processor (when configured and
        ``use_llm``); fields the caller supplies always win. Without extraction, the content
        (or rawInput) becomes processedContent, the summary its first 50 characters, the
        category ``general`` and the confidence 1.0.
        """
        validate_profile(profile)
        if raw_input is None and content is None:
            raise ValidationError("give rawInput or content")
        if raw_input is not None:
            validate_text_input(raw_input, "rawInput")
        if content is not None:
            validate_text_input(content, "content")
        if summary is not None:
            validate_summary(summary)
        if category is not None:
            validate_category(category)
        if confidence is not None:
            confidence = validate_confidence(confidence)

        extraction: Extraction | None = None
        if raw_input is not None and content is None and use_llm and self._extractor is not None:
            # No transaction is open here: the network wait holds no database lock.
            extraction = self._extractor.extract(raw_input)

        processed = content if content is not None else (extraction.processed_content if extraction else raw_input)
        assert processed is not None
        now = utcnow()
        category = category or (extraction.category if extraction else "general")
        confidence = confidence if confidence is not None else (extraction.confidence if extraction else 1.0)
        memory = Memory(
            id=new_id(),
            profile_name=profile,
            raw_input=raw_input if raw_input is not None else processed,
            processed_content=processed,
            summary=summary if summary is not None else (extraction.summary if extraction else default_summary(processed)),
            category=category,
            source="explicit",
            confidence=confidence,
            created_at=now,
            last_accessed_at=None,
            access_count=0,
            staleness_score=compute_staleness(
                category=category, confidence=confidence, access_count=0,
                created_at=now, last_accessed_at=None, now=now,
            ),
        )
        record = self.replicator.record_save if self.replicator else None
        for _ in range(16):
            try:
                self.store.insert(memory, on_insert=record)
                break
            except IdTakenError:
                memory = memory.with_changes(id=new_id())  # a collision is checked, never assumed away
        else:  # pragma: no cover - 16 collisions in a 2^32 space means the CSPRNG is broken
            raise ValidationError("could not draw an unused memory id")
        synced = self.replicator.push_saved(memory) if self.replicator else False
        return SaveResult(memory, synced)

    def delete(self, profile: str, memory_id: str) -> Memory:
        """Delete one memory of ``profile``; ``NotFoundError`` if it is not there."""
        validate_profile(profile)
        validate_id(memory_id)
        record = self.replicator.record_delete if self.replicator else None
        memory = self.store.delete(profile, memory_id, on_delete=record)
        if self.replicator is not None:
            self.replicator.push_deleted(memory)
        return memory

    # --- reads --------------------------------------------------------------------------------

    def get(self, profile: str, memory_id: str) -> Memory:
        """One memory of ``profile``; ``NotFoundError`` if absent (or in another profile)."""
        validate_profile(profile)
        validate_id(memory_id)
        return self.store.get(profile, memory_id)

    def list(self, profile: str, limit: int = 50, offset: int = 0) -> Page:
        """Memories of ``profile``, newest first. Read-only: access counts do not change."""
        validate_profile(profile)
        _check_paging(limit, offset)
        return self.store.list(profile, limit, offset)

    def stats(self) -> dict[str, Any]:
        """``{"totalMemories": N, "profilesWithMemory": K, "perProfile": {name: n}}``."""
        per_profile = self.store.profiles()
        return {
            "totalMemories": sum(per_profile.values()),
            "profilesWithMemory": len(per_profile),
            "perProfile": per_profile,
        }


def _check_paging(limit: object, offset: object, max_limit: int = 1000) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not (1 <= limit <= max_limit):
        raise ValidationError(f"limit must be an integer from 1 to {max_limit}, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError(f"offset must be a non-negative integer, got {offset!r}")
