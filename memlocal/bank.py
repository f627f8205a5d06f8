"""``MemoryBank``: the library facade over the store, the scorer, the LLM processor and the sync hook.

Everything a user or a boundary (CLI, REST, MCP, tools) does goes through this class, so each rule
is enforced in one place: validation before anything is written, no lock held while waiting on the
network, and a save that returns only once it is committed durably.
"""

from __future__ import annotations

import builtins
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence

from .config import Config
from .errors import ConfigError, ValidationError
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

if TYPE_CHECKING:
    from concurrent.futures import Future
    from datetime import datetime

    from .automation import AutomationNotes
    from .injection import AccessMarker, RenderedBlock
    from .recall import RecallIndex
    from .scoring import ScoredMemory

log = logging.getLogger("memlocal")

REPLICATOR_ENTRY_POINTS = "memlocal.replicators"
DAEMON_ENTRY_POINTS = "memlocal.daemons"


class Extractor(Protocol):
    """The LLM processor's interface (see ``memlocal.llm``)."""

    def extract(self, raw_input: str) -> Extraction | None:
        """Structure for ``raw_input``; ``None`` when extraction was skipped or the call failed."""


class Replicator(Protocol):
    """Write-through to the bucket, provided by the ``sync`` package through an entry point.

    The store records each change in its own change log (the outbox) inside the change's
    transaction; ``push_*`` run after the commit and report whether the bucket now has it.
    """

    def push_saved(self, memory: Memory) -> bool: ...

    def push_deleted(self, memory: Memory) -> bool: ...

    def refresh_if_stale(self, profile: str, ttl: float) -> bool:
        """Pull ``profile`` from the bucket if its last pull is older than ``ttl`` seconds."""
        ...

    def status(self) -> dict[str, Any]:
        """What ``memlocal sync status --json`` shows: the bucket and its source, what is pending,
        the last pass and error, skipped objects (the dashboard's sync panel)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SaveResult:
    """What a save returns: the stored memory, and whether the bucket has it yet."""

    memory: Memory
    synced: bool

    def to_dict(self) -> dict[str, Any]:
        return {"memory": self.memory.to_dict(), "synced": self.synced}


def _discover(group: str) -> list[Any]:
    """The objects registered under an entry point group (the sync package registers here, so
    memlocal never imports it by name: the daemon depends on the library, not the reverse)."""
    from importlib.metadata import entry_points

    return [ep.load() for ep in entry_points(group=group)]


class SyncDaemonHandle:
    """The sync daemon running in a background thread of this process (``memlocal serve --with-sync``)."""

    def __init__(self, daemon: Any) -> None:
        import threading

        self.daemon = daemon
        self.thread = threading.Thread(target=daemon.run, name="memlocal-sync-daemon", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop the daemon; returns once the pass in flight has finished."""
        self.daemon.stop()
        self.thread.join()


class MemoryBank:
    """A profile-scoped store of long-lived memories.

    ``MemoryBank.open()`` finds everything from the configuration (the database, the bucket's
    replicator, the LLM processor, the sync daemon); the constructor takes ready objects:

    >>> with MemoryBank.open("/tmp/demo.db") as bank:   # doctest: +SKIP
    ...     bank.save("researcher", content="Prefers JSON output", category="preference")
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        *,
        config: Config | None = None,
        replicator: Replicator | None = None,
        extractor: Extractor | None = None,
        daemon_factory: Callable[[Config, Store], Any] | None = None,
        fresh_reads: bool = False,
    ) -> None:
        """A bank over ``store`` (a :class:`Store`, or the path of a database file to open).

        Nothing is discovered here: without ``replicator`` the bank is local only, without
        ``extractor`` saves are not structured by an LLM. ``config`` defaults to the built-in
        defaults (no file, no environment). ``fresh_reads``: every read first pulls its profile
        from the bucket when the last pull is older than ``sync.refresh_ttl_s`` (the spec's
        RefreshIfStale; the REST server's bank). The bank owns, and closes, what it is given.
        """
        self.config = config if config is not None else Config.defaults()
        if not isinstance(store, Store):
            store = Store(Path(store), busy_timeout_s=float(self.config["store.busy_timeout_s"]))
        self.store = store
        self.replicator = replicator
        self._extractor = extractor
        self._daemon_factory = daemon_factory
        self.fresh_reads = fresh_reads
        self._recall_index: RecallIndex | None = None  # built on first recall (memlocal.recall)
        self._access_marker: AccessMarker | None = None  # fire-and-forget access bumps
        self._automations: AutomationNotes | None = None
        self._closed = False

    @classmethod
    def open(
        cls, path: str | os.PathLike[str] | None = None, *, config: Config | None = None, fresh_reads: bool = False
    ) -> "MemoryBank":
        """Open the bank at ``path`` (else the configured or default database) with what the
        configuration asks for: the bucket's replicator and the sync daemon (from the installed
        sync package, when a bucket is configured) and the LLM processor (when enabled and
        ``ANTHROPIC_API_KEY`` is set). ``config`` defaults to ``Config.load()``."""
        config = config if config is not None else Config.load()
        store = Store(Path(path) if path is not None else config.db_path,
                      busy_timeout_s=float(config["store.busy_timeout_s"]))
        try:
            replicator: Replicator | None = None
            for factory in _discover(REPLICATOR_ENTRY_POINTS):
                replicator = factory(config, store)
                if replicator is not None:
                    break
            daemons = _discover(DAEMON_ENTRY_POINTS)
            extractor: Extractor | None = None
            if config["llm.enabled"] and os.environ.get("ANTHROPIC_API_KEY"):
                from .llm import extractor_from_config  # anthropic is imported only there

                extractor = extractor_from_config(config)
        except Exception:
            store.close()
            raise
        return cls(store, config=config, replicator=replicator, extractor=extractor,
                   daemon_factory=daemons[0] if daemons else None, fresh_reads=fresh_reads)

    @property
    def path(self) -> Path:
        return self.store.path

    @property
    def automations(self) -> "AutomationNotes":
        """The automation notes kept in this bank (get, list, put, clear, delete, block)."""
        if self._automations is None:
            from .automation import AutomationNotes

            self._automations = AutomationNotes(self.store)
        return self._automations

    def start_sync_daemon(self) -> SyncDaemonHandle | None:
        """Run the sync daemon in a background thread, sharing this bank's store (and its lock).

        ``None`` when no bucket is configured; ``ConfigError`` when no sync package is installed.
        Stop it with the handle's ``stop()`` before closing the bank.
        """
        if self._daemon_factory is None:
            raise ConfigError(f"no sync daemon is installed (entry point group {DAEMON_ENTRY_POINTS} is empty)")
        daemon = self._daemon_factory(self.config, self.store)
        return SyncDaemonHandle(daemon) if daemon is not None else None

    def close(self) -> None:
        """Drain queued access bumps and release everything the bank holds (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._access_marker is not None:
            self._access_marker.close()  # drains queued access bumps first
        if self.replicator is not None:
            self.replicator.close()
        close_extractor = getattr(self._extractor, "close", None)
        if close_extractor is not None:
            close_extractor()  # the LLM processor's HTTP connection pool
        self.store.close()

    def __enter__(self) -> "MemoryBank":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the read policy ------------------------------------------------------------------------

    def _before_read(self, profiles: Iterable[str] | None = None) -> None:
        """RefreshIfStale before a read of a ``fresh_reads`` bank (``None``: every known profile)."""
        if not self.fresh_reads or self.replicator is None:
            return
        ttl = float(self.config["sync.refresh_ttl_s"])
        for profile in profiles if profiles is not None else builtins.list(self.store.profiles()):
            self.replicator.refresh_if_stale(profile, ttl)

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
        for _ in range(16):
            try:
                self.store.insert(memory)
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
        memory = self.store.delete(profile, memory_id)
        if self.replicator is not None:
            self.replicator.push_deleted(memory)
        return memory

    def import_memories(self, memories: Sequence[Memory]) -> builtins.list[str]:
        """Insert memories written elsewhere (ids and timestamps kept) in one durable transaction,
        never overwriting; queued for the bucket like saves. One outcome per memory: ``imported``,
        ``unchanged`` (already in that profile) or why it was rejected (see ``memlocal.portability``)."""
        return self.store.import_batch(memories)

    def refresh_if_stale(self, profile: str, ttl: float | None = None) -> bool:
        """Pull ``profile``'s memories from the bucket if the last pull is older than ``ttl`` s
        (default ``sync.refresh_ttl_s``). One pull at a time per profile; a no-op returning
        ``False`` without a bucket, when fresh, or when the bucket cannot be reached (the local
        copy is served). ``True`` when a pull completed.
        """
        validate_profile(profile)
        if self.replicator is None:
            return False
        return self.replicator.refresh_if_stale(profile, float(self.config["sync.refresh_ttl_s"]) if ttl is None else ttl)

    # --- reads --------------------------------------------------------------------------------

    def get(self, profile: str, memory_id: str) -> Memory:
        """One memory of ``profile``; ``NotFoundError`` if absent (or in another profile)."""
        validate_profile(profile)
        validate_id(memory_id)
        self._before_read([profile])
        return self.store.get(profile, memory_id)

    def list(self, profile: str, limit: int = 50, offset: int = 0, *, category: str | None = None) -> Page:
        """Memories of ``profile``, newest first, optionally of one ``category``. Read-only:
        access counts do not change."""
        validate_profile(profile)
        _check_paging(limit, offset)
        if category is not None:
            validate_category(category)
        self._before_read([profile])
        return self.store.list(profile, limit, offset, category=category)

    def list_all(
        self, limit: int = 50, offset: int = 0, *, q: str | None = None, category: str | None = None
    ) -> Page:
        """Memories of every profile, newest first, filtered by ``category`` and by ``q`` (a
        substring of the text, case-insensitive for ASCII). Read-only, like ``list``."""
        _check_paging(limit, offset)
        if category is not None:
            validate_category(category)
        if q is not None and not isinstance(q, str):
            raise ValidationError("q must be a string")
        self._before_read()
        return self.store.list_all(limit, offset, q=q or None, category=category)

    def export(self, profile: str | None = None) -> Iterator[Memory]:
        """Every memory of ``profile`` (or of every profile, by name), oldest first. Read-only."""
        profiles = [validate_profile(profile)] if profile is not None else sorted(self.store.profiles())
        for name in profiles:
            memories = self.store.iter_profile(name)
            memories.sort(key=lambda m: (m.created_at, m.id))
            yield from memories

    def grouped(self) -> dict[str, builtins.list[Memory]]:  # (``list`` here is the method above)
        """Every memory grouped by profile: profiles by name, newest first within each. Read-only."""
        self._before_read()
        out: dict[str, list[Memory]] = {}
        for memory in self.store.iter_all():
            out.setdefault(memory.profile_name, []).append(memory)
        return out

    def profiles(self) -> builtins.list[dict[str, Any]]:
        """``[{"name", "memoryCount", "lastActivityAt"}]``, newest activity first (a profile's
        activity: its latest createdAt or lastAccessedAt). Counts are the ones ``stats`` gives."""
        from .model import format_time
        from .store import from_us

        self._before_read()
        return [{"name": p, "memoryCount": n, "lastActivityAt": format_time(from_us(act))}  # type: ignore[arg-type]
                for p, n, act in self.store.profile_activity()]

    def sync_status(self) -> dict[str, Any]:
        """The replicator's ``status()``; without a bucket, ``{"bucket": None, "localOnly": True,
        "message": "no bucket configured (local only)"}``."""
        if self.replicator is None:
            return {"bucket": None, "localOnly": True, "message": "no bucket configured (local only)",
                    "database": str(self.store.path)}
        return {"localOnly": False, **self.replicator.status()}

    def stats(self) -> dict[str, Any]:
        """``{"totalMemories": N, "profilesWithMemory": K, "perProfile": {name: n}}``."""
        self._before_read()
        per_profile = self.store.profiles()
        return {
            "totalMemories": sum(per_profile.values()),
            "profilesWithMemory": len(per_profile),
            "perProfile": per_profile,
        }

    # --- relevance, recall and injection (memlocal.recall, .injection, .automation) ----------

    def _index(self) -> "RecallIndex":
        if self._recall_index is None:
            from .recall import RecallIndex

            self._recall_index = RecallIndex(self.store, int(self.config["recall.cache_profiles"]))
        return self._recall_index

    def query_with_relevance(
        self,
        profile: str,
        query: str,
        limit: int | None = None,
        min_score: float | None = None,
        exclude_ids: Iterable[str] = (),
        *,
        now: "datetime | None" = None,
    ) -> "builtins.list[ScoredMemory]":
        """The top ``limit`` active memories of ``profile`` for ``query``, best first, each with
        its score breakdown. No side effects. Exactly what a full scan with the formula returns
        (ties: newer createdAt, then id). Defaults: ``recall.limit`` (8), ``recall.min_score`` (0.05).
        """
        validate_profile(profile)
        if not isinstance(query, str):
            raise ValidationError("query must be a string")
        limit, min_score = _check_recall_args(
            self.config["recall.limit"] if limit is None else limit,
            self.config["recall.min_score"] if min_score is None else min_score,
        )
        if isinstance(exclude_ids, str):
            exclude_ids = (exclude_ids,)
        exclude = [validate_id(i) for i in exclude_ids]
        self._before_read([profile])
        return self._index().query(profile, query, limit=limit, min_score=min_score, exclude_ids=exclude, now=now)

    def recall(
        self,
        profile: str,
        query: str,
        limit: int | None = None,
        min_score: float | None = None,
        exclude_ids: Iterable[str] = (),
        *,
        now: "datetime | None" = None,
    ) -> "builtins.list[ScoredMemory]":
        """``query_with_relevance``, then every returned memory is marked accessed (accessCount + 1,
        lastAccessedAt = now, staleness recomputed) before this returns. The results show the
        values the ranking used, from before the bump."""
        results = self.query_with_relevance(profile, query, limit, min_score, exclude_ids, now=now)
        if results:
            self.store.mark_accessed(profile, [r.memory.id for r in results], now or utcnow())
        return results

    def mark_accessed(self, profile: str, ids: Iterable[str], *, now: "datetime | None" = None) -> "Future[int]":
        """Mark memories accessed without waiting (fire-and-forget, on a background connection).

        Returns a future of how many were updated; a failure is logged, never raised. Bad input
        (profile name, ids) is still rejected here, synchronously.
        """
        validate_profile(profile)
        checked = [validate_id(i) for i in ids]
        if self._access_marker is None:
            from .injection import AccessMarker

            self._access_marker = AccessMarker(self.store.path, self.store.busy_timeout_s)
        return self._access_marker.submit(profile, checked, now)

    def render_context_block(self, profile: str, query: str, *, now: "datetime | None" = None) -> "RenderedBlock":
        """The memory block and the memories in it, without marking anything accessed."""
        from .injection import build_memory_block

        validate_profile(profile)
        if not isinstance(query, str):
            raise ValidationError("query must be a string")
        self._before_read([profile])
        index = self._index()

        def ranked(tier: str, limit: int, min_score: float) -> "builtins.list[ScoredMemory]":
            return index.query(profile, query, limit=limit, min_score=min_score, now=now, tier=tier)

        return build_memory_block(
            ranked,
            budget=int(self.config["inject.budget_chars"]),
            relevant_limit=int(self.config["inject.relevant_limit"]),
            min_score=float(self.config["inject.min_score"]),
        )

    def build_context_block(self, profile: str, query: str, *, now: "datetime | None" = None) -> str:
        """The ``--- CONTEXT FROM MEMORY ---`` block for ``query`` ("" when there is nothing to
        inject). The memories that made it in are marked accessed without waiting."""
        block = self.render_context_block(profile, query, now=now)
        if block.ids:
            self.mark_accessed(profile, block.ids, now=now)
        return block.text

    def inject(
        self,
        profile: str,
        tools: Iterable[str] | str | None,
        prompt: str,
        *,
        query: str | None = None,
        contexts: Iterable[str] = (),
        automation_id: str | None = None,
        now: "datetime | None" = None,
    ) -> str:
        """The prompt a run of ``profile`` starts with.

        The memory block is added only when ``tools`` opts in (``@memory`` or a ``memory_*`` tool),
        built for ``query`` (default: the prompt). Operator ``contexts`` go in their own block,
        and ``automation_id``'s note in a scribe's-observation block; with none of these the
        prompt is returned unchanged.
        """
        from .injection import assemble, memory_enabled, operator_block

        validate_profile(profile)
        if not isinstance(prompt, str):
            raise ValidationError("prompt must be a string")
        blocks = [operator_block(list(contexts))]
        if automation_id is not None:
            blocks.append(self.automations.block(automation_id))
        if memory_enabled(tools):
            blocks.append(self.build_context_block(profile, prompt if query is None else query, now=now))
        return assemble(blocks, prompt)

def _check_recall_args(limit: object, min_score: object, max_limit: int = 1000) -> tuple[int, float]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not (1 <= limit <= max_limit):
        raise ValidationError(f"limit must be an integer from 1 to {max_limit}, got {limit!r}")
    if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) or not (0.0 <= min_score <= 1.0):
        raise ValidationError(f"minScore must be a number from 0 to 1, got {min_score!r}")
    return limit, float(min_score)


def _check_paging(limit: object, offset: object, max_limit: int = 1000) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not (1 <= limit <= max_limit):
        raise ValidationError(f"limit must be an integer from 1 to {max_limit}, got {limit!r}")
    # SQLite integers are 64-bit: a larger offset would overflow in the query, not just miss.
    if isinstance(offset, bool) or not isinstance(offset, int) or not (0 <= offset < 2**63):
        raise ValidationError(f"offset must be an integer from 0 to 2^63-1, got {offset!r}")
