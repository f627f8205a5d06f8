"""``MemoryBank``: the library facade over the store, the scorer, the LLM processor and the sync hook.

Everything a user or a boundary (CLI, REST, MCP, tools) does goes through this class, so each rule
is enforced in one place: validation before anything is written, no lock held while waiting on the
network, and a save that returns only once it is committed durably.

The class wires the bank's parts and delegates each job to its module: the save's steps
(:mod:`memlocal.bank.saving`), history, prune and retention (:mod:`memlocal.bank.retention`), profile copy
(:mod:`memlocal.bank.profiles`), import (:mod:`memlocal.bank.importing`), the injection path and its audit
(:mod:`memlocal.bank.context`), the sync's hooks (:mod:`memlocal.bank.replication`) and what every face is
shown (:mod:`memlocal.services.shown`). What stays here: opening and closing, the reads, the recall index
and its access bumps.
"""

from __future__ import annotations

import builtins
import functools
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence, TypedDict

from . import context, replication, retention
from ..config import Config, parse_extra_patterns
from ..errors import ConfigError
from .importing import import_batches
from ..model import (OFFSET_MAX, PAGE_MAX_LIMIT, Memory, RecallQuery, check_text, format_time, utcnow,
                    validate_category, validate_id, validate_int, validate_profile)
from ..hygiene.normalised import NormalisedText
from ..plugins import DAEMONS, DaemonFactory, Replica, Replicator
from .profiles import ProfileCopy, copy_profile
from ..services.redact import redact, use_extra_patterns
from .replication import SyncDaemonHandle, SyncStatus
from .retention import Pruned
# Every save and imported line runs the save's steps (a function-level import costs microseconds
# per call); the store loads hygiene and text anyway, and redact defers its detectors itself.
from .saving import Extractor, SavePipeline, SaveRequest, SaveResult, redact_fields, redact_secrets, redact_text
from ..services.shown import redacted_text, shown, shown_page, shown_scored, warm_redaction
from ..store import LAZY_CHECKPOINT_COMMITS, Page, Store, to_us

if TYPE_CHECKING:
    from collections.abc import Mapping
    from concurrent.futures import Future
    from datetime import datetime

    from ..services.audit import Injection
    from ..services.automation import AutomationNotes
    from ..hygiene.rules import RetentionRule
    from ..services.injection import RenderedBlock
    from .rescan import RescanReport
    from ..recall import RecallIndex
    from ..relevance.scoring import Ranking, ScoredMemory
    from ..recall.semantic import SemanticIndex
    from ..store import MigrationSet
    from ..store.access import AccessMarker
    from ..store.local import LocalTable

log = logging.getLogger("memlocal")

class Stats(TypedDict):
    """What :meth:`MemoryBank.stats` returns (the JSON of ``memlocal stats --json`` and
    ``GET /api/stats``): counts over every profile, superseded memories included except in the
    ``active`` ones."""

    totalMemories: int
    activeMemories: int
    supersededMemories: int
    profilesWithMemory: int
    perProfile: dict[str, int]
    perProfileActive: dict[str, int]


class ProfileSummary(TypedDict):
    """One entry of :meth:`MemoryBank.profiles`: a profile, its memories and its latest activity
    (RFC 3339: the latest createdAt or lastAccessedAt)."""

    name: str
    memoryCount: int
    lastActivityAt: str


class MemoryBank:
    """A profile-scoped store of long-lived memories.

    ``MemoryBank.open()`` finds everything from the configuration (the database, the bucket's
    replicator, the LLM processor, the sync daemon); the constructor takes ready objects:

    >>> with MemoryBank.open("/tmp/demo.db") as bank:   # doctest: +SKIP
    ...     bank.save(SaveRequest("researcher", content="Prefers JSON output", category="preference"))
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        *,
        config: Config | None = None,
        replicator: Replicator | None = None,
        extractor: Extractor | None = None,
        daemon_factory: DaemonFactory | None = None,
    ) -> None:
        """A bank over ``store`` (a :class:`Store`, or the path of a database file to open).

        Nothing is discovered here: without ``replicator`` the bank is local only, without
        ``extractor`` saves are not structured by an LLM. ``config`` defaults to the built-in
        defaults (no file, no environment). The bank owns, and closes, what it is given.
        """
        self.config = config if config is not None else Config.defaults()
        if not isinstance(store, Store):
            store = Store(Path(store), busy_timeout_s=self.config.get_float("store.busy_timeout_s"))
        self.store = store
        self.replicator = replicator
        self._extractor = extractor
        self._daemon_factory = daemon_factory
        self._recall_index: RecallIndex | None = None  # built on first recall (memlocal.recall)
        self._access_marker: AccessMarker | None = None  # fire-and-forget access bumps
        self._semantic: SemanticIndex | None = None  # with semantic.enabled and the extra installed
        self._automations: AutomationNotes | None = None
        self._saver = SavePipeline(self.store, self.config, extractor, replicator, lambda: self.semantic)
        self._audit = context.AuditTrail(self.store, self.config)  # the injection audit trail
        self._closed = False
        if self.config.secrets.extra_patterns:  # secrets.extra_patterns: redacted on every path
            use_extra_patterns(parse_extra_patterns(self.config.secrets.extra_patterns))

    @classmethod
    def open(
        cls, path: str | os.PathLike[str] | None = None, *, config: Config | None = None
    ) -> "MemoryBank":
        """Open the bank at ``path`` (else the configured or default database) with what the
        configuration asks for: the bucket's replicator and the sync daemon (from the installed
        sync package, when a bucket is configured) and the LLM processor (when enabled and
        ``ANTHROPIC_API_KEY`` is set). ``config`` defaults to ``Config.load()``."""
        config = config if config is not None else Config.load()
        store = Store(Path(path) if path is not None else config.db_path,
                      busy_timeout_s=config.get_float("store.busy_timeout_s"))
        try:
            replicator = replication.configured_replicator(config, store)
            extractor: Extractor | None = None
            if config.llm.enabled and os.environ.get("ANTHROPIC_API_KEY"):
                from ..services.llm import extractor_from_config  # anthropic is imported only there

                extractor = extractor_from_config(config)
        except Exception:
            store.close()
            raise
        if replicator is None and config.get_bool("bucket.local_only_notice"):
            replication.warn_local_only(store)
        return cls(store, config=config, replicator=replicator, extractor=extractor,
                   daemon_factory=replication.installed_daemon)

    def prepare(self) -> None:
        """Start the pull on open now, without waiting (a server's or an MCP server's start-up):
        with a bucket, a host whose index has never completed a pass against it starts pulling
        all of it (the first reads wait for it up to ``sync.hydrate_deadline_s``); a hydrated host
        queues a background refresh of every profile. Reads do this themselves when it was not
        done: ``MemoryBank.open`` alone sends no request."""
        if self.replicator is not None:
            self.replicator.prepare(None, wait=False)

    def _ready(self, profile: str | None = None) -> None:
        """Before a read: the pull on open (``Replicator.prepare``), waited for within its deadline.
        A read that answers from part of the bucket (the pull still running, or failed) leaves
        why in ``partial``."""
        if self.replicator is not None:
            notice = self.replicator.prepare(profile, wait=True)
            if notice:
                self.partial = notice

    # Why this bank's first read answered from part of the bucket (``None``: it did not): the
    # pull on open had not completed within sync.hydrate_deadline_s, or failed (``inject --json``).
    partial: str | None = None

    def _own_writes(self) -> None:
        """Before a read of rows: this bank's queued access bumps and audit rows are written
        first, so that it reads its own writes (nothing to wait for when none is queued)."""
        if self._access_marker is not None:
            self._access_marker.settle()

    @property
    def path(self) -> Path:
        return self.store.path

    @property
    def local_only(self) -> bool:
        """No bucket: reads never wait on the network (no pull on open to wait for)."""
        return self.replicator is None

    @property
    def replica(self) -> "Replica":
        """This bank's store as the replication port (:mod:`memlocal.plugins`): all that a
        replicator (the sync package) is given of it."""
        from ..store.replica import StoreReplica

        return StoreReplica(self.store)

    @property
    def automations(self) -> "AutomationNotes":
        """The automation notes kept in this bank (get, list, put, clear, delete, block)."""
        if self._automations is None:
            from ..services.automation import AutomationNotes

            self._automations = AutomationNotes(self.store, self.replicator, redactor=self.redact_note)
        return self._automations

    def start_sync_daemon(self) -> SyncDaemonHandle | None:
        """Run the sync daemon in a background thread, sharing this bank's store (and its lock).

        ``None`` when no bucket is configured; ``ConfigError`` when no sync package is installed.
        Stop it with the handle's ``stop()`` before closing the bank.
        """
        if self._daemon_factory is None:
            raise ConfigError(f"no sync daemon is installed (entry point group {DAEMONS} is empty)")
        daemon = self._daemon_factory(self.config, self.replica, self.apply_retention)
        return SyncDaemonHandle(daemon) if daemon is not None else None

    def close(self) -> None:
        """Drain queued access bumps and release everything the bank holds (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._recall_index is not None:
            self._recall_index.close()  # a background build reads the file: it stops first
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

    # --- writes -------------------------------------------------------------------------------

    def save(self, request: SaveRequest) -> SaveResult:
        """Save the memory ``request`` describes (built by the face; its fields' rules:
        :class:`~memlocal.bank.saving.SaveRequest`) and return it once it is durably committed: a repeat
        of an active memory stores nothing and returns that memory (``deduplicated``), an update
        of one retires it (``superseded``; :meth:`restore` undoes it). The steps: :mod:`memlocal.bank.saving`."""
        return self._saver.save(request)

    def redact_secrets(
        self, raw_input: str | None, content: str | None, summary: str | None
    ) -> tuple[str | None, str | None, str | None, tuple[str, ...]]:
        """``secrets.mode`` applied to a save's (or an import's) text (:func:`memlocal.bank.saving.redact_secrets`)."""
        return redact_secrets(self.config.secrets.mode, raw_input, content, summary)

    def redact_fields(self, fields: "Mapping[str, Any]") -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
        """``secrets.mode`` applied to a memory's unknown fields (:func:`memlocal.bank.saving.redact_fields`)."""
        return redact_fields(self.config.secrets.mode, fields)

    def redact_note(self, text: str) -> tuple[str, tuple[str, ...]]:
        """``secrets.mode`` applied to an automation note: the note with its credentials
        replaced and the kinds found; ``SecretFoundError`` in reject mode."""
        return self.redact_text(text, "the automation note"), redact(text).kinds

    def redact_text(self, text: str, what: str) -> str:
        """``secrets.mode`` applied to a string a memory carries that is not one of its texts (an
        integration's path, namespace label or key): the text with its credentials replaced, or
        ``SecretFoundError`` in reject mode (``what`` names it)."""
        return redact_text(self.config.secrets.mode, text, what)

    def find_duplicate(self, profile: str, text: str, *, category: str | None = None,
                       exclude: Iterable[str] = ()) -> Memory | None:
        """The active memory of ``profile`` that a save of ``text`` in ``category`` (``None``: any)
        would be deduplicated to (the exact rule, then the near rule when ``dedup.near`` is on),
        ignoring the ids in ``exclude``; ``None`` when there is none or ``dedup.enabled`` is off.
        Read-only."""
        validate_profile(profile)
        check_text(text, "text")
        if category is not None:
            validate_category(category)
        if not self.config.dedup.enabled:
            return None
        return self._saver.deduplicator().find(profile, NormalisedText(text), category, frozenset(exclude))

    def restore(self, profile: str, memory_id: str) -> Memory:
        """Undo a supersession: the superseded memory ``memory_id`` is active again, and the memory
        that superseded it stays active without the link (its ``supersedes`` is removed); both
        are written through to the bucket like saves. ``ValidationError`` when ``memory_id`` is
        active, ``NotFoundError`` when it is not stored in ``profile``. Returns the restored memory."""
        return retention.restore(self.store, self.replicator, profile, memory_id)

    def rescan(self, profile: str | None = None, *, dry_run: bool = False) -> "RescanReport":
        """Redact what is already stored (every memory of ``profile``, or of every profile with
        the notes and audit rows, every version in its history) with today's detectors and
        ``secrets.extra_patterns``, written through to the bucket, the old bytes purged from the
        database file (:mod:`memlocal.bank.rescan`; docs/hygiene.md, "Rescan")."""
        from .rescan import rescan

        if profile is not None:
            validate_profile(profile)
        return rescan(self.store, self.replicator, profile, dry_run=dry_run)

    def history(self, profile: str, memory_id: str) -> builtins.list[Memory]:
        """The supersession chain through ``memory_id``, oldest first (just that memory when it
        never superseded nor was superseded). Links to deleted memories end the chain."""
        self._own_writes()
        return retention.history(self.store, profile, memory_id)

    def prune(
        self, profile: str, rule: "RetentionRule", *, dry_run: bool = False, now: "datetime | None" = None
    ) -> "builtins.list[Pruned]":
        """Delete (or with ``dry_run`` only list) the memories of ``profile`` that ``rule``
        selects, through :meth:`delete` (so the deletions reach the bucket), oldest first."""
        return retention.prune(self.store, self.replicator, profile, rule, dry_run=dry_run, now=now)

    def retention_rule(self) -> "RetentionRule | None":
        """The configured retention policy (``retention.*``), or ``None`` when it is off."""
        return retention.retention_rule(self.config)

    def apply_retention(self, *, now: "datetime | None" = None) -> dict[str, int]:
        """Run the configured policy over every profile (the sync daemon's retention job);
        ``{profile: memories pruned}``, empty when the policy is off."""
        return retention.apply_retention(self.store, self.replicator, self.config, now=now)

    def delete(self, profile: str, memory_id: str) -> Memory:
        """Delete one memory of ``profile``; ``NotFoundError`` if it is not there."""
        return retention.delete(self.store, self.replicator, profile, memory_id)

    def copy_profile(self, source: str, target: str) -> ProfileCopy:
        """Copy every memory of ``source`` into ``target``, a profile with no memories, under new
        ids, in one durable transaction (:func:`memlocal.bank.profiles.copy_profile`)."""
        return copy_profile(self.store, self.replicator, source, target, move=False)

    def rename_profile(self, source: str, target: str) -> ProfileCopy:
        """Rename ``source`` to ``target`` (a profile with no memories): the memories copied as
        :meth:`copy_profile` does and the originals deleted (:func:`memlocal.bank.profiles.copy_profile`)."""
        return copy_profile(self.store, self.replicator, source, target, move=True)

    def relink(self, ids: Sequence[str], copied: "Mapping[str, str]") -> int:
        """After an import that gave some memories new ids (``copied``: old id -> new id), move
        the supersession links of the imported memories ``ids`` that still point at an old id."""
        return self.store.relink(ids, dict(copied)) if copied else 0

    def import_memories(self, memories: Sequence[Memory], copied: "dict[str, str] | None" = None
                        ) -> builtins.list[str]:
        """Insert memories written elsewhere (ids and timestamps kept) in one durable transaction,
        never overwriting; queued for the bucket like saves. One outcome per memory: ``imported``,
        ``unchanged`` (already in that profile, or a copy of it is), ``copied:<new id>`` (its id
        belongs to another profile's memory, so it was stored as a copy under a new id, recorded
        in ``copied``), or why it was rejected (see ``memlocal.bank.portability``)."""
        return self.store.import_batch(memories, copied)

    def import_batches(self, batches: "Iterable[Sequence[Memory]]", copied: "dict[str, str] | None" = None
                       ) -> "Iterator[builtins.list[str]]":
        """:meth:`import_memories` of each batch in turn, yielding each one's outcomes once it
        is durable; the next batch is taken from ``batches`` (and its lines read) while the one
        before it is written, on a writer thread (``Store.import_batches``). With the semantic
        signal on, each batch's stored memories are embedded once it is durable."""
        return import_batches(self.store, self.semantic, batches, copied)

    def refresh_if_stale(self, profile: str, ttl: float | None = None) -> bool:
        """Pull ``profile``'s memories from the bucket if the last pull is older than ``ttl`` s
        (:func:`memlocal.bank.replication.refresh_if_stale`); ``True`` when a pull completed."""
        return replication.refresh_if_stale(self.replicator, self.config, profile, ttl)

    def refresh_for_read(self, profile: str | None = None) -> float | None:
        """The read path's refresh policy (:func:`memlocal.bank.replication.refresh_for_read`): a
        background pull when stale, never waited for; the age in seconds of the local copy."""
        return replication.refresh_for_read(self.replicator, self.config, profile)

    # --- reads --------------------------------------------------------------------------------

    def get(self, profile: str, memory_id: str) -> Memory:
        """One memory of ``profile``; ``NotFoundError`` if absent (or in another profile)."""
        validate_profile(profile)
        validate_id(memory_id)
        self._ready(profile)
        self._own_writes()
        return shown(self.store.get(profile, memory_id))

    def get_many(self, profile: str, ids: Iterable[str]) -> dict[str, Memory]:
        """The memories of ``profile`` among ``ids``, by id; ids not stored there are left out."""
        validate_profile(profile)
        checked = list(dict.fromkeys(validate_id(i) for i in ids))
        found: dict[str, Memory] = {}
        self._own_writes()
        for i in range(0, len(checked), 500):  # one IN (...) stays under SQLite's variable limit
            found.update(self.store.get_many(profile, checked[i:i + 500]))
        return {i: shown(m) for i, m in found.items()}  # as every read: redacted

    def list(self, profile: str, limit: int = 50, offset: int = 0, *, category: str | None = None,
             active_only: bool = False) -> Page:
        """Memories of ``profile``, newest first, optionally of one ``category``; inactive
        (superseded) ones too unless ``active_only``, each with its ``isActive``. Read-only:
        access counts do not change."""
        validate_profile(profile)
        _check_paging(limit, offset)
        if category is not None:
            validate_category(category)
        self._ready(profile)
        self._own_writes()
        return shown_page(self.store.list(profile, limit, offset, category=category, active_only=active_only))

    def list_all(
        self, limit: int = 50, offset: int = 0, *, q: str | None = None, category: str | None = None
    ) -> Page:
        """Memories of every profile, newest first, filtered by ``category`` and by ``q`` (a
        substring of the text, case-insensitive for ASCII). Read-only, like ``list``."""
        _check_paging(limit, offset)
        if category is not None:
            validate_category(category)
        if q is not None:
            check_text(q, "q")
        self._ready()
        self._own_writes()
        return shown_page(self.store.list_all(limit, offset, q=q or None, category=category))

    def memories(self, profile: str, *, with_field: str | None = None) -> builtins.list[Memory]:
        """The active memories of ``profile``, newest first, as every face shows them (redacted);
        ``with_field``: only those that carry that extra field (an integration's files or items,
        found in SQL without reading the profile's others). Read-only."""
        validate_profile(profile)
        self._ready(profile)
        self._own_writes()
        found = (self.store.iter_with_extra(profile, with_field) if with_field is not None
                 else self.store.iter_profile(profile, active_only=True))
        return [shown(m) for m in found]

    def local_table(self, schema: "MigrationSet", name: str, *, redacted: bool = True) -> "LocalTable":
        """An integration's own table of local rows ``(profile, path, kind, text)``, created by
        its migration set ``schema`` (brought up to date here, cheap when current): the extension
        point for what an integration keeps beside its memories that is not one. Its rows are
        read through the redaction every face reads through; ``redacted=False`` for a table of
        identifiers and hashes only, never text (the memory stores bridge's links: a hosted id
        reads as high-entropy to the detectors)."""
        from ..store.local import LocalTable

        self.store.migrate(schema)
        return LocalTable(self.store, schema, name, shown=redacted_text if redacted else str)

    def export(self, profile: str | None = None) -> Iterator[Memory]:
        """Every memory of ``profile`` (or of every profile, by name), oldest first. Read-only."""
        if profile is not None:
            validate_profile(profile)
        self._ready(profile)
        self._own_writes()
        memories = (self.store.iter_all(oldest_first=True) if profile is None
                    else self.store.iter_profile(profile, oldest_first=True))
        yield from map(shown, memories)

    def grouped(self) -> dict[str, builtins.list[Memory]]:  # (``list`` here is the method above)
        """Every memory grouped by profile: profiles by name, newest first within each. Read-only."""
        self._ready()
        self._own_writes()
        out: dict[str, list[Memory]] = {}
        for memory in self.store.iter_all():
            out.setdefault(memory.profile_name, []).append(shown(memory))
        return out

    def profiles(self) -> builtins.list[ProfileSummary]:
        """``[{"name", "memoryCount", "lastActivityAt"}]``, newest activity first (a profile's
        activity: its latest createdAt or lastAccessedAt). Counts are the ones ``stats`` gives."""
        from ..model import format_time
        from ..store import from_us

        self._ready()
        self._own_writes()
        return [ProfileSummary(name=p, memoryCount=n, lastActivityAt=format_time(from_us(act)))
                for p, n, act in self.store.profile_activity()]

    def sync_status(self) -> SyncStatus:
        """The replicator's ``status()`` with ``"localOnly": False`` and no message; without a
        bucket, ``{"bucket": None, "localOnly": True, "message": "no bucket configured (local only)",
        "database": ...}``."""
        return replication.sync_status(self.replicator, self.store)

    def stats(self) -> Stats:
        """``{"totalMemories": N, "activeMemories": A, "supersededMemories": N - A,
        "profilesWithMemory": K, "perProfile": {name: n}, "perProfileActive": {name: a}}``: every
        count includes superseded (inactive) memories except the ``active`` ones, which are what
        ``list`` shows without ``--all`` and what recall and injection draw from."""
        self._ready()
        self._own_writes()
        per_profile = self.store.profiles()
        active = self.store.active_counts()
        total, live = sum(per_profile.values()), sum(active.values())
        return Stats(
            totalMemories=total,
            activeMemories=live,
            supersededMemories=total - live,
            profilesWithMemory=len(per_profile),
            perProfile=per_profile,
            perProfileActive={p: active.get(p, 0) for p in per_profile},
        )

    # --- relevance, recall and injection (memlocal.recall, .injection, .automation) ----------

    def _index(self) -> "RecallIndex":
        if self._recall_index is None:
            from ..recall import RecallIndex

            with _LAZY_LOCK:  # one index per bank: concurrent first requests would each build one
                if self._recall_index is None:
                    self._recall_index = RecallIndex(self.store, self.config.get_int("recall.cache_profiles"),
                                                     warm=warm_redaction)
        return self._recall_index

    @property
    def semantic(self) -> "SemanticIndex | None":
        """The semantic signal's vectors and similarity queries (``memlocal.recall.semantic``), when the
        ``semantic`` extra is installed and ``semantic.enabled`` is set; otherwise ``None``."""
        if self._semantic is None and self.config.semantic.enabled:
            from ..recall.semantic import SemanticIndex, available

            if available():
                self._semantic = SemanticIndex(self.store)
        return self._semantic

    def ranking(self) -> "Ranking":
        """The configured ranking (``ranking.mode``, ``ranking.evidence_ratio``)."""
        from ..errors import ConfigError
        from ..relevance.scoring import MODES, Ranking

        mode = self.config.get_str("ranking.mode")
        ratio = self.config.get_float("ranking.evidence_ratio")
        if mode not in MODES:
            raise ConfigError(f"ranking.mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"ranking.evidence_ratio must be from 0 to 1, got {ratio!r}")
        return Ranking(mode, ratio)

    def _similarity(self, profile: str, query: str, ranking: "Ranking", *,
                    block: bool = False) -> "Mapping[str, float] | None":
        """The semantic signal's embedding top-k for ``query`` (id -> similarity), when it is on
        and the ranking is evidence-gated (the spec mode is the spec's literal rule); else
        ``None``, and nothing of the extra (numpy, onnxruntime) is imported. ``block``: the
        context block's deeper top-k (``semantic.BLOCK_CANDIDATES``: it holds ~20 lines)."""
        if not ranking.gated:
            return None
        semantic = self.semantic
        if semantic is None:
            return None
        from ..recall.semantic import BLOCK_CANDIDATES, CANDIDATES

        return semantic.similar(profile, query, k=BLOCK_CANDIDATES if block else CANDIDATES)

    def query_with_relevance(self, query: RecallQuery) -> "builtins.list[ScoredMemory]":
        """The top ``limit`` active memories of the query's profile for its text, best first, each
        with its score breakdown and (evidence mode) the evidence it passed the gate on. No side
        effects. Exactly what a full scan under the configured ranking returns (ties: newer
        createdAt, then id). Defaults: ``recall.limit`` (8), ``recall.min_score`` (0.05). In
        evidence mode (the default), a query with no usable words returns nothing. ``query``: a
        :class:`~memlocal.model.RecallQuery`, validated when the face built it."""
        return self._ranked(query)

    def _ranked(self, query: RecallQuery) -> "builtins.list[ScoredMemory]":
        """What :meth:`query_with_relevance` returns for ``query`` (built once by its caller)."""
        q = query.with_defaults(self.config.get_int("recall.limit"), self.config.get_float("recall.min_score"))
        from ..relevance.scoring import RankQuery

        ranking = self.ranking()
        self._ready(q.profile)
        rq = RankQuery.of(q, ranking, self._similarity(q.profile, q.text, ranking))
        return [shown_scored(r) for r in self._index().query(q.profile, rq)]

    def recall(self, query: RecallQuery) -> "builtins.list[ScoredMemory]":
        """``query_with_relevance``, then every returned memory is marked accessed (accessCount + 1,
        lastAccessedAt = now, staleness recomputed). The results show the values the ranking
        used, from before the bump. In evidence mode only memories that passed the gate are
        returned, so only they count as used (no feedback loop).

        The bump is this bank's at once and the database's a moment later, as the spec allows
        (MarkAccessed persists asynchronously): this bank's next query ranks with it, and its
        reads (``get``, ``list``, ``stats``, ...) wait for it to be written (see
        :meth:`mark_accessed`). Written not fsynced, and never checkpointed on the caller's path."""
        results = self._ranked(query)
        if results:
            ids = [r.memory.id for r in results]
            at = query.now or utcnow()
            if self._queue_bump(query.profile, ids, at) is None:
                # No index in memory (a one-shot process): its next query reads the rows, so
                # the bump is written before this returns.
                self.store.mark_accessed(query.profile, ids, at)
                if self.store.lazy_commits >= LAZY_CHECKPOINT_COMMITS:
                    # The bumps' commits do not checkpoint the log inline: the background thread does.
                    self.store.lazy_commits = 0
                    self._background().submit_checkpoint()
        return results

    def mark_accessed(self, profile: str, ids: Iterable[str], *, now: "datetime | None" = None) -> "Future[int]":
        """Mark memories accessed without waiting (fire-and-forget, on a background connection).

        Returns a future of how many were updated; a failure is logged, never raised. Bad input
        (profile name, ids) is still rejected here, synchronously. This bank's own recall index
        takes the bump at once (its next query ranks with it; a result whose bump is still
        queued is read once written), and its reads of rows wait for the queued bumps: other
        processes see the bump once it is written, a moment later.
        """
        validate_profile(profile)
        checked = [validate_id(i) for i in ids]
        at = now or utcnow()
        return self._queue_bump(profile, checked, at) or self._background().submit(profile, checked, at)

    def _queue_bump(self, profile: str, ids: "builtins.list[str]", now: "datetime") -> "Future[int] | None":
        """Apply a bump to the recall index in memory and queue its write; ``None`` when the
        profile's index is not in memory (nothing done)."""
        index = self._index()
        if not index.bump(profile, ids, to_us(now) or 0):
            return None
        return self._background().submit(profile, ids, now, written=functools.partial(index.settled, profile, ids))

    def _background(self) -> "AccessMarker":
        if self._access_marker is None:
            from ..store.access import AccessMarker

            self._access_marker = AccessMarker(self.store.path, self.store.busy_timeout_s)
        return self._access_marker

    def drain(self, timeout: float | None = None) -> None:
        """Wait until the queued access marks and audit rows are written (tests, shutdown)."""
        if self._access_marker is not None:
            self._access_marker.drain(timeout)

    def render_context_block(self, profile: str, query: str, *, now: "datetime | None" = None) -> "RenderedBlock":
        """The memory block and the memories in it, without marking anything accessed.

        Evidence mode: what ``query`` gives evidence for goes in first, across both tiers
        (:func:`memlocal.services.injection.build_evidence_block`); spec mode: the spec's tiers."""
        return self._render(profile, query, now=now, trimmed=True)

    def _render(self, profile: str, query: str, *, now: "datetime | None", trimmed: bool) -> "RenderedBlock":
        """The block as the faces show it (:func:`memlocal.bank.context.render`)."""
        validate_profile(profile)
        check_text(query, "query")
        self._ready(profile)
        ranking = self.ranking()
        return context.render(self._index(), self.store, profile, query, ranking=ranking, now=now or utcnow(),
                              settings=self.config.inject, trimmed=trimmed,
                              similarity=self._similarity(profile, query, ranking, block=True))

    def build_context_block(self, profile: str, query: str, *, now: "datetime | None" = None) -> str:
        """The ``--- CONTEXT FROM MEMORY ---`` block for ``query`` ("" when there is nothing to
        inject), as a run receives it. Without waiting, the memories that made it in are marked
        accessed (in evidence mode only those the query gave evidence for: core entries without any
        are not counted) and the block is recorded in the audit trail (``memlocal.services.audit``)."""
        block = self._render(profile, query, now=now, trimmed=False)
        ids = block.evidence_ids if self.ranking().gated else block.ids
        if ids:
            self.mark_accessed(profile, ids, now=now)
        if self._audit.enabled:
            self._audit.record(self._background(), profile, query, block, now or utcnow())
        return block.text

    def injections(self, profile: str, *, memory_id: str | None = None, limit: int = 20) -> "builtins.list[Injection]":
        """The audit trail: the blocks rendered for ``profile``'s runs, newest first, each with
        the memory ids of each tier, its size and its query's hash; with ``memory_id``, only the
        runs that saw that memory. Rows this bank still has queued are written first."""
        _check_paging(limit, 0)
        self._own_writes()
        return self._audit.injections(profile, memory_id=memory_id, limit=limit)

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
        from ..services.injection import assemble, memory_enabled, operator_block

        validate_profile(profile)
        check_text(prompt, "prompt")
        if query is not None:
            check_text(query, "query")
        self._ready(profile)
        blocks = [operator_block(list(contexts))]
        if automation_id is not None:
            blocks.append(self.automations.block(automation_id))
        if memory_enabled(tools):
            blocks.append(self.build_context_block(profile, prompt if query is None else query, now=now))
        return assemble(blocks, prompt)

# Guards the lazy creation of a bank's parts that must exist once (``MemoryBank._index``).
_LAZY_LOCK = threading.Lock()


def _check_paging(limit: object, offset: object) -> None:
    validate_int(limit, "limit", 1, PAGE_MAX_LIMIT)
    validate_int(offset, "offset", 0, OFFSET_MAX)
