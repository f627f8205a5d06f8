"""``MemoryBank``: the library facade over the store, the scorer, the LLM processor and the sync hook.

Everything a user or a boundary (CLI, REST, MCP, tools) does goes through this class, so each rule
is enforced in one place: validation before anything is written, no lock held while waiting on the
network, and a save that returns only once it is committed durably.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import logging
import os
import threading
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, Required, Sequence, TypedDict, overload

from .config import Config, parse_extra_patterns
from .errors import (ConfigError, InputTooLargeError, MemoryBankError, NotFoundError, SecretFoundError, StoreError,
                     ValidationError)
from .model import (
    OFFSET_MAX,
    PAGE_MAX_LIMIT,
    RAW_INPUT_MAX_BYTES,
    SOURCES,
    SUMMARY_MAX_CHARS,
    cut_preview,
    Extraction,
    Memory,
    RecallQuery,
    check_text,
    compute_staleness,
    default_summary,
    format_time,
    new_id,
    utcnow,
    validate_category,
    validate_confidence,
    validate_id,
    validate_int,
    validate_profile,
    validate_summary,
    validate_text_input,
)
from .plugins import (
    DAEMONS,
    BreakerStatus,
    Daemon,
    DaemonFactory,
    PendingCounts,
    RecordStatus,
    Replica,
    Replicator,
    Retention,
    SkippedObject,
    daemon_factories,
    replicator_factories,
)
from .store import LAZY_CHECKPOINT_COMMITS, IdTakenError, Page, Store, to_us
# Every save and imported line runs these (a function-level import costs microseconds per call);
# the store loads hygiene and text anyway, and redact defers its detectors itself.
from .dedup import Deduplicator, query_terms
from .redact import (Redacted, check_mode, merge_kinds, redact, redact_json, refuse_credential_name,
                     use_extra_patterns)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from concurrent.futures import Future
    from datetime import datetime

    from .audit import Injection
    from .automation import AutomationNotes
    from .hygiene import RetentionRule
    from .injection import RenderedBlock
    from .rescan import RescanReport
    from .recall import RecallIndex
    from .scoring import Ranking, ScoredMemory
    from .semantic import SemanticIndex
    from .store import MigrationSet
    from .store.access import AccessMarker
    from .store.local import LocalTable

log = logging.getLogger("memlocal")

# The spec's start-up warning without a bucket is said once per process (a CLI command is one).
_warned_local_only = False
# ``meta`` key: when this database's local-only notice was given (``_warn_local_only``).
LOCAL_ONLY_NOTICE_META_KEY = "notice.local_only"



class Extractor(Protocol):
    """The LLM processor's interface (see ``memlocal.llm``)."""

    def extract(self, raw_input: str, similar: Sequence[Memory] = ()) -> Extraction | None:
        """Structure for ``raw_input``; ``None`` when extraction was skipped or the call failed.

        ``similar``: existing memories of the profile; the answer may name one of them in
        ``supersedes`` (a proposal the caller decides on)."""


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


class SyncStatus(TypedDict, total=False):
    """What :meth:`MemoryBank.sync_status` returns (``memlocal sync status --json``,
    ``GET /api/sync/status``): the replicator's ``ReplicatorStatus`` (memlocal.plugins) with
    ``localOnly`` false and no message; without a bucket, only the four required keys."""

    localOnly: Required[bool]
    message: Required[str | None]  # without a bucket: "no bucket configured (local only)"
    bucket: Required[dict[str, str | None] | None]
    database: Required[str]
    bucketIdentity: dict[str, Any] | None
    hydrated: dict[str, Any] | None
    breaker: BreakerStatus
    pending: PendingCounts
    lastPass: dict[str, Any] | None
    lastError: dict[str, Any] | None
    resolvedError: dict[str, Any] | None
    skipped: list[SkippedObject]
    record: RecordStatus
    passRunning: bool


@dataclass(frozen=True, slots=True)
class SaveResult:
    """What a save returns: the stored memory, and whether the bucket has it yet.

    ``deduplicated``: the save repeated an active memory, which is returned and nothing new was
    stored. ``redacted``: the kinds of credentials redacted from it (``aws-key``,
    ``private-key``, ...; never their values).
    ``proposed_supersedes``: a memory the LLM processor suggests this one replaces (not applied).
    ``superseded``: the memory this save retired on its own (``dedup.supersede``: it restated that
    memory's subject with a changed value, docs/hygiene.md "Updates"; ``MemoryBank.restore`` undoes
    it); ``None`` when the caller named one with ``supersedes`` or none was retired.
    """

    memory: Memory
    synced: bool
    deduplicated: bool = False
    redacted: tuple[str, ...] = ()
    proposed_supersedes: str | None = None
    superseded: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"memory": self.memory.to_dict(), "synced": self.synced, "deduplicated": self.deduplicated,
                "redacted": list(self.redacted), "proposedSupersedes": self.proposed_supersedes,
                "superseded": self.superseded}


@dataclass(frozen=True, slots=True)
class Pruned:
    """A memory a prune removed (or would remove), and why."""

    memory: Memory
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"memory": self.memory.to_dict(), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ProfileCopy:
    """What a profile copy or rename did: each original id and its copy's new id (oldest first),
    and how many of the writes (the copies' saves, a rename's deletions) the bucket already has;
    the rest are in the change log for the next sync pass."""

    source: str
    target: str
    renamed: bool
    ids: tuple[tuple[str, str], ...]
    synced: int
    pending: int

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "renamed": self.renamed,
                "copied": len(self.ids), "ids": {old: new for old, new in self.ids},
                "synced": self.synced, "pending": self.pending}


# Memories shown to the LLM processor when it may propose one to supersede.
PROPOSAL_CANDIDATES = 3


def _installed_daemon(config: Config, store: Replica, retention: Retention) -> Daemon | None:
    """The installed sync daemon's factory (:class:`memlocal.plugins.DaemonFactory`), looked up
    only when a daemon is started (loading the sync package costs a one-shot process such as
    ``memlocal recall`` more than its query)."""
    daemons = daemon_factories()
    if not daemons:
        raise ConfigError(f"no sync daemon is installed (entry point group {DAEMONS} is empty)")
    return daemons[0](config, store, retention)


class SyncDaemonHandle:
    """The sync daemon running in a background thread of this process (``memlocal serve --with-sync``)."""

    def __init__(self, daemon: Daemon) -> None:
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
        self._audit_key: bytes | None = None  # the host's audit key (memlocal.audit), read on first use
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
            replicator: Replicator | None = None
            # The bucket's replicator exists only with a bucket: without one, the sync package
            # is not even imported (a local-only one-shot process would pay ~60 ms for it).
            for factory in replicator_factories() if config.get_str("bucket.name").strip() else ():
                from .store.replica import StoreReplica

                replicator = factory(config, StoreReplica(store))
                if replicator is not None:
                    break
            extractor: Extractor | None = None
            if config.llm.enabled and os.environ.get("ANTHROPIC_API_KEY"):
                from .llm import extractor_from_config  # anthropic is imported only there

                extractor = extractor_from_config(config)
        except Exception:
            store.close()
            raise
        if replicator is None and config.get_bool("bucket.local_only_notice"):
            _warn_local_only(store)
        return cls(store, config=config, replicator=replicator, extractor=extractor,
                   daemon_factory=_installed_daemon)

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
        from .store.replica import StoreReplica

        return StoreReplica(self.store)

    @property
    def automations(self) -> "AutomationNotes":
        """The automation notes kept in this bank (get, list, put, clear, delete, block)."""
        if self._automations is None:
            from .automation import AutomationNotes

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
        supersedes: str | None = None,
        extra: "Mapping[str, Any] | None" = None,
        deduplicate: bool | None = None,
        auto_supersede: bool | None = None,
        source: str | None = None,
    ) -> SaveResult:
        """Save a memory and return it once it is durably committed.

        ``raw_input`` alone may be structured by the LLM processor (when configured and
        ``use_llm``); fields the caller supplies always win. Without extraction, the content
        (or rawInput) becomes processedContent, the summary its first 50 characters, the
        category ``general`` and the confidence 1.0.

        Hygiene (docs/hygiene.md): a save that repeats an active memory of the profile (exactly,
        or reworded slightly) stores nothing and returns that memory with ``deduplicated``; no
        access is counted. ``supersedes``: the id of an active memory of the profile that this
        one replaces; in one transaction it becomes inactive (``supersededBy``) and the new one
        records ``supersedes``. With the LLM processor, the result may *propose* a memory to
        supersede (``proposed_supersedes``); nothing is superseded unless the caller asks.

        ``extra``: fields beyond the spec's, kept on the memory and synced with it (the
        integrations keep a file's path or a store item's key there; other readers ignore them).
        ``deduplicate``: ``False`` skips the hygiene rule for this save (a caller that checked
        with :meth:`find_duplicate` itself); ``None`` follows ``dedup.enabled``.

        Updates (docs/hygiene.md, "Updates"): a save that restates an active memory's subject
        with a changed value (:func:`memlocal.updates.relation` is sure) supersedes it, and the
        result names it in ``superseded``; with the LLM processor, its proposal is applied when
        the rule finds the two related. ``auto_supersede``: ``False`` retires nothing on its own
        (``--no-supersede``); ``None`` follows ``dedup.supersede`` when the duplicate rules apply
        (``deduplicate`` / ``dedup.enabled``: a caller that keeps its own identities, as the
        integrations do with ``deduplicate=False``, retires nothing it did not name). :meth:`restore`
        undoes it.
        """
        refuse_credential_name(validate_profile(profile))
        extra = _check_extra(extra)
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
        if source is not None and source not in SOURCES:
            raise ValidationError(f"unknown source {source!r}: expected {' or '.join(SOURCES)}")
        # Credentials go before anything is stored or sent (the LLM processor included); the
        # caps above applied to the input as given.
        raw_input, content, summary, redacted = self.redact_secrets(raw_input, content, summary)
        if extra:  # an integration's fields (a file's path, a store item) are checked as the texts are
            extra, extra_kinds, _names = self.redact_fields(extra)
            redacted = merge_kinds((redacted, extra_kinds))

        if supersedes is not None:
            self._check_supersedable(profile, supersedes)

        dedup = self.config.get_bool("dedup.enabled") if deduplicate is None else bool(deduplicate)
        given = content if content is not None else raw_input
        assert given is not None
        extracting = raw_input is not None and content is None and use_llm and self._extractor is not None
        dedupe = self._deduplicator()
        extraction: Extraction | None = None
        similar: builtins.list[Memory] = []
        if extracting:
            assert raw_input is not None and self._extractor is not None
            if dedup:
                # Before the LLM: a repeated note costs no extraction call. Whatever the category:
                # the same text in another category is the same memory, its category kept.
                dup = dedupe.exact(profile, (given,), None)
                if dup is not None:
                    return self._deduplicated(profile, dup, supersedes, redacted)
            if supersedes is None:  # the caller has not decided: the model may propose one
                similar = self.store.similar(profile, query_terms(raw_input), PROPOSAL_CANDIDATES)
            # No transaction is open here: the network wait holds no database lock.
            extraction = self._extractor.extract(raw_input, similar=similar)
            if extraction is not None:  # the model's answer is text to check like any input
                extraction, answer_kinds = _redacted_extraction(extraction)
                redacted = merge_kinds((redacted, answer_kinds))

        processed = content if content is not None else (extraction.processed_content if extraction else raw_input)
        assert processed is not None
        category = category or (extraction.category if extraction else "general")
        auto: str | None = None
        if auto_supersede is None:  # part of the write-time hygiene: off with it (deduplicate, dedup.enabled)
            auto_supersede = dedup and self.config.dedup.supersede
        judged: str | None = None
        unsure: builtins.list[Memory] = []
        judge = getattr(self._extractor, "judge", None) if use_llm and not extracting else None
        if judge is not None and supersedes is None and auto_supersede:
            # An update the rule is unsure of may be judged by the model (its deadline,
            # llm.timeout_s), before the write transaction: no lock is held over the network.
            unsure = dedupe.unsure_updates(profile, processed)
            if unsure and dedupe.find(profile, processed, None) is None:
                judged = judge(processed, unsure)
        semantic = self.semantic
        vector = None
        retired_memory: Memory | None = None
        # The checks and the insert in one write transaction: the look-ups read the writer's
        # connection, whose pages are cached (a read connection reads again from the log the
        # pages each commit wrote), and no other writer stores the same text between a check
        # and the insert. Not when the text is to be embedded between them: never under the lock.
        with self.store.transaction() if semantic is None else contextlib.nullcontext():
            if dedup:
                # Any category: the same text filed twice is one memory, the first save's
                # category kept (docs/hygiene.md, "Exact duplicates").
                if extracting:  # the given text's exact check ran before the LLM
                    found = None
                    dup = dedupe.exact(profile, (processed,), None) if processed != given else None
                else:  # the same text for both checks: their rows in one query
                    found = dedupe.candidates(profile, given)
                    dup = dedupe.exact(profile, (given,), None, found=found[0] if found else None)
                if dup is None and self.config.dedup.near:
                    dup = dedupe.near(profile, processed, None, found=found[1] if found else None)
                if dup is not None:
                    return self._deduplicated(profile, dup, supersedes, redacted)
            now = utcnow()
            confidence = confidence if confidence is not None else (extraction.confidence if extraction else 1.0)
            memory = Memory(
                id=new_id(),
                profile_name=profile,
                raw_input=raw_input if raw_input is not None else processed,
                processed_content=processed,
                summary=summary if summary is not None else (extraction.summary if extraction else default_summary(processed)),
                category=category,
                source=source or "explicit",
                confidence=confidence,
                created_at=now,
                last_accessed_at=None,
                access_count=0,
                staleness_score=compute_staleness(
                    category=category, confidence=confidence, access_count=0,
                    created_at=now, last_accessed_at=None, now=now,
                ),
                extra=extra,
            )
            if supersedes is None and auto_supersede:
                auto = dedupe.update_of(profile, processed, extraction.supersedes if extraction is not None else judged,
                                        similar or unsure)
                supersedes = auto
            vector = semantic.vectors_for([processed])[0] if semantic is not None else None  # not under the lock
            for _ in range(16):
                try:
                    if supersedes is None:
                        self.store.insert(memory)
                    else:
                        memory, retired_memory = self.store.supersede(profile, supersedes, memory, insert=True)
                    break
                except IdTakenError:
                    memory = memory.with_changes(id=new_id())  # a collision is checked, never assumed away
            else:  # pragma: no cover - 16 collisions in a 2^32 space means the CSPRNG is broken
                raise ValidationError("could not draw an unused memory id")
        if semantic is not None and vector is not None:
            semantic.store_vector(memory.id, vector)
        try:
            synced = self.replicator.push_saved(memory) if self.replicator else False
            if synced and retired_memory is not None and self.replicator is not None:
                # The retired memory too: no other host may hold the old value and the new one as
                # two active facts until this host's next pass.
                self.replicator.push_saved(retired_memory)
        except MemoryBankError as exc:  # committed: the outbox pushes it later; never an error now
            log.warning("memory %s saved; pushing it failed (the sync will retry): %s", memory.id, exc)
            synced = False
        proposed = extraction.supersedes if extraction is not None else None
        if proposed not in {m.id for m in similar}:
            proposed = None  # only ever one of the memories the model was shown
        retired = memory.supersedes if auto is not None else None
        if retired is not None and retired == proposed:
            proposed = None  # applied: the rule agreed with the model
        return SaveResult(memory, synced, redacted=redacted, proposed_supersedes=proposed, superseded=retired)

    def redact_secrets(
        self, raw_input: str | None, content: str | None, summary: str | None
    ) -> tuple[str | None, str | None, str | None, tuple[str, ...]]:
        """``secrets.mode`` applied to a save's (or an import's) text: credentials replaced by
        ``[REDACTED:<kind>]`` (``redact``) or the save refused (``reject``, ``SecretFoundError``).
        Returns the three texts and the kinds found (docs/hygiene.md, "Secrets")."""
        mode = check_mode(self.config.secrets.mode)
        found: dict[str, Redacted] = {}
        for name, value in (("rawInput", raw_input), ("content", content), ("summary", summary)):
            if value is not None:
                # An imported line's rawInput is most often its processedContent: scanned once.
                same = found.get("rawInput") if name == "content" and value == raw_input else None
                found[name] = same if same is not None else redact(value)
        kinds = merge_kinds(r.kinds for r in found.values())
        if not kinds:
            return raw_input, content, summary, ()
        if mode == "reject":
            fields = ", ".join(name for name, r in found.items() if r.kinds)
            raise SecretFoundError(f"{fields} holds a credential ({', '.join(kinds)}); nothing was saved "
                                   "(secrets.mode = reject)")
        for name in ("rawInput", "content"):
            if name in found and found[name].kinds:
                size = len(found[name].text.encode("utf-8"))
                if size > RAW_INPUT_MAX_BYTES:  # only a near-cap input whose short secrets grew
                    raise InputTooLargeError(f"{name} is {size} bytes of UTF-8 once its credentials are "
                                             f"redacted; the cap is {RAW_INPUT_MAX_BYTES} bytes")
        text = {name: r.text for name, r in found.items()}
        if "summary" in text:
            text["summary"] = cut_preview(text["summary"], SUMMARY_MAX_CHARS)  # a preview: never half a marker
        return text.get("rawInput"), text.get("content"), text.get("summary"), kinds

    def redact_fields(self, fields: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
        """``secrets.mode`` applied to the unknown fields of an imported memory (any JSON value:
        every string in it is checked). Returns the fields with credentials replaced, the kinds
        found and the names of the fields that held them; ``SecretFoundError`` in reject mode."""
        out, found = redact_json(dict(fields))  # names and values, at any depth
        kinds = list(found)
        names = [redact(name).text for name, value in fields.items() if redact_json({name: value})[1]] if found else []
        if kinds and check_mode(self.config.secrets.mode) == "reject":
            raise SecretFoundError(f"field {', '.join(names)} holds a credential ({', '.join(kinds)}); nothing was "
                                   "saved (secrets.mode = reject)")
        return out, tuple(kinds), tuple(names)

    def redact_note(self, text: str) -> tuple[str, tuple[str, ...]]:
        """``secrets.mode`` applied to an automation note: the note with its credentials
        replaced and the kinds found; ``SecretFoundError`` in reject mode."""
        return self.redact_text(text, "the automation note"), redact(text).kinds

    # --- hygiene (memlocal.hygiene) -----------------------------------------------------------

    def _check_supersedable(self, profile: str, memory_id: str) -> None:
        validate_id(memory_id)
        old = self.store.get(profile, memory_id)
        if not old.is_active:
            by = old.superseded_by
            raise ValidationError(f"{memory_id} is already inactive" + (f" (superseded by {by})" if by else ""))

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
        return self._deduplicator().find(profile, text, category, frozenset(exclude))

    def _deduplicator(self) -> Deduplicator:
        """The write-time duplicate and update checks (:mod:`memlocal.dedup`) over this store."""
        return Deduplicator(self.store, self.config.dedup)

    def restore(self, profile: str, memory_id: str) -> Memory:
        """Undo a supersession: the superseded memory ``memory_id`` is active again, and the memory
        that superseded it stays active without the link (its ``supersedes`` is removed); both
        are written through to the bucket like saves. ``ValidationError`` when ``memory_id`` is
        active, ``NotFoundError`` when it is not stored in ``profile``. Returns the restored memory."""
        validate_profile(profile)
        validate_id(memory_id)
        old, successor = self.store.restore(profile, memory_id)
        if self.replicator is not None:
            for m in (old, successor):
                if m is not None:
                    self.replicator.push_saved(m)
        return shown(old)

    def _deduplicated(
        self, profile: str, dup: Memory, supersedes: str | None, redacted: tuple[str, ...] = ()
    ) -> SaveResult:
        """The result of a save that repeated ``dup``; with ``supersedes``, link the two."""
        if supersedes is not None:
            if supersedes == dup.id:
                raise ValidationError(f"the text is the same memory as {dup.id}, the one it would supersede")
            dup, _old = self.store.supersede(profile, supersedes, dup, insert=False)
        synced = self.replicator.is_synced(dup) if self.replicator else False
        return SaveResult(shown(dup), synced, deduplicated=True, redacted=redacted)

    def rescan(self, profile: str | None = None, *, dry_run: bool = False) -> "RescanReport":
        """Redact what is already stored (every memory of ``profile``, or of every profile with
        the notes and audit rows, every version in its history) with today's detectors and
        ``secrets.extra_patterns``, written through to the bucket, the old bytes purged from the
        database file (:mod:`memlocal.rescan`; docs/hygiene.md, "Rescan")."""
        from .rescan import rescan

        if profile is not None:
            validate_profile(profile)
        return rescan(self.store, self.replicator, profile, dry_run=dry_run)

    def history(self, profile: str, memory_id: str) -> builtins.list[Memory]:
        """The supersession chain through ``memory_id``, oldest first (just that memory when it
        never superseded nor was superseded). Links to deleted memories end the chain."""
        validate_profile(profile)
        validate_id(memory_id)
        self._own_writes()
        start = self.store.get(profile, memory_id)
        chain = [start]
        seen = {start.id}
        for step in ("supersedes", "superseded_by"):
            cur = start
            while True:
                nxt = getattr(cur, step)
                if nxt is None or nxt in seen:
                    break
                found = self.store.get_many(profile, [nxt]).get(nxt)
                if found is None:
                    break
                seen.add(found.id)
                if step == "supersedes":
                    chain.insert(0, found)
                else:
                    chain.append(found)
                cur = found
        return [shown(m) for m in chain]

    def prune(
        self, profile: str, rule: "RetentionRule", *, dry_run: bool = False, now: "datetime | None" = None
    ) -> "builtins.list[Pruned]":
        """Delete (or with ``dry_run`` only list) the memories of ``profile`` that ``rule``
        selects, through :meth:`delete` (so the deletions reach the bucket), oldest first."""
        from .hygiene import retention_reason

        validate_profile(profile)
        when = now or utcnow()
        chosen = []
        for m in self.store.iter_profile(profile, oldest_first=True):
            reason = retention_reason(m, rule, when)
            if reason is not None:
                chosen.append(Pruned(shown(m), reason))
        if not dry_run:
            for p in chosen:
                try:
                    self.delete(profile, p.memory.id)
                except NotFoundError:
                    pass  # deleted meanwhile: the outcome is the same
        return chosen

    def retention_rule(self) -> "RetentionRule | None":
        """The configured retention policy (``retention.*``), or ``None`` when it is off."""
        from .hygiene import RetentionRule

        if not self.config.retention.enabled:
            return None
        cats = [c.strip() for c in self.config.get_str("retention.categories").split(",") if c.strip()]
        staleness = self.config.get_float("retention.staleness_above")
        return RetentionRule.build(staleness_above=staleness, older_than=self.config.get_str("retention.older_than") or None,
                                   categories=cats)

    def apply_retention(self, *, now: "datetime | None" = None) -> dict[str, int]:
        """Run the configured policy over every profile (the sync daemon's retention job);
        ``{profile: memories pruned}``, empty when the policy is off."""
        rule = self.retention_rule()
        if rule is None:
            return {}
        out = {}
        for profile in self.store.profiles():
            pruned = self.prune(profile, rule, now=now)
            if pruned:
                out[profile] = len(pruned)
        return out

    def delete(self, profile: str, memory_id: str) -> Memory:
        """Delete one memory of ``profile``; ``NotFoundError`` if it is not there."""
        validate_profile(profile)
        validate_id(memory_id)
        memory = self.store.delete(profile, memory_id)
        if self.replicator is not None:
            self.replicator.push_deleted(memory)
        return shown(memory)

    def copy_profile(self, source: str, target: str) -> ProfileCopy:
        """Copy every memory of ``source`` into ``target``, a profile with no memories, under new
        ids, in one durable transaction. A copy keeps every field (text, category, confidence,
        times, access counts, active or superseded), its supersession links point at the other
        copies, and ``copiedFrom`` names its original. The copies are saves: written through to
        the bucket when one is configured, else queued for the next sync pass.

        ``NotFoundError`` when ``source`` has no memories, ``ValidationError`` when ``target``
        has some or is ``source``.
        """
        return self._copy_profile(source, target, move=False)

    def rename_profile(self, source: str, target: str) -> ProfileCopy:
        """Rename ``source`` to ``target`` (a profile with no memories): in one durable transaction
        every memory is copied as :meth:`copy_profile` does and the originals are deleted. A memory's
        bucket key holds its profile (``memory/<profile>/<id>.json``) and an id is unique across
        profiles on every host, so a rename is new ids plus deletions, synced like any save and
        delete: the other hosts' next pass pulls the copies and deletes the originals (a rename of more than
        ``sync.mass_delete_min`` memories is held there by the mass-delete guard, as any mass
        deletion is, until ``memlocal sync run --force``)."""
        return self._copy_profile(source, target, move=True)

    def _copy_profile(self, source: str, target: str, *, move: bool) -> ProfileCopy:
        validate_profile(source)
        refuse_credential_name(validate_profile(target), "target profile name")
        if source == target:
            raise ValidationError(f"{'rename' if move else 'copy'} {source} to itself: give another target profile")
        pairs = self.store.copy_profile(source, target, move=move)
        synced = 0
        if self.replicator is not None:
            for _original, copy in pairs:
                synced += self.replicator.push_saved(copy)
            if move:
                for original, _copy in pairs:
                    synced += self.replicator.push_deleted(original)
        writes = len(pairs) * (2 if move else 1)
        return ProfileCopy(source, target, move, tuple((o.id, c.id) for o, c in pairs), synced, writes - synced)

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
        in ``copied``), or why it was rejected (see ``memlocal.portability``)."""
        return self.store.import_batch(memories, copied)

    def import_batches(self, batches: "Iterable[Sequence[Memory]]", copied: "dict[str, str] | None" = None
                       ) -> "Iterator[builtins.list[str]]":
        """:meth:`import_memories` of each batch in turn, yielding each one's outcomes once it
        is durable; the next batch is taken from ``batches`` (and its lines read) while the one
        before it is written, on a writer thread (``Store.import_batches``). With the semantic
        signal on, each batch's stored memories are embedded once it is durable."""
        semantic = self.semantic
        if semantic is None:
            return self.store.import_batches(batches, copied)
        return self._embedded(semantic, batches, copied)

    def _embedded(self, semantic: "SemanticIndex", batches: "Iterable[Sequence[Memory]]",
                  copied: "dict[str, str] | None") -> "Iterator[builtins.list[str]]":
        """:meth:`import_batches` that stores each imported memory's vector (the save path's,
        batched): an import's memories are found by similarity from the first query on."""
        handed: "deque[Sequence[Memory]]" = deque()

        def tracked() -> "Iterator[Sequence[Memory]]":
            for batch in batches:
                handed.append(batch)
                yield batch

        for outcomes in self.store.import_batches(tracked(), copied):
            batch = handed.popleft()
            semantic.embed_ids([m.id if o == "imported" else o[len("copied:"):]  # the store's outcomes
                                for m, o in zip(batch, outcomes) if o == "imported" or o.startswith("copied:")])
            yield outcomes

    def refresh_if_stale(self, profile: str, ttl: float | None = None) -> bool:
        """Pull ``profile``'s memories from the bucket if the last pull is older than ``ttl`` s
        (default ``sync.refresh_ttl_s``). One pull at a time per profile; a no-op returning
        ``False`` without a bucket, when fresh, or when the bucket cannot be reached (the local
        copy is served). ``True`` when a pull completed.
        """
        validate_profile(profile)
        if self.replicator is None:
            return False
        return self.replicator.refresh_if_stale(profile, self.config.get_float("sync.refresh_ttl_s") if ttl is None else ttl)

    def refresh_for_read(self, profile: str | None = None) -> float | None:
        """The read path's refresh policy: before answering a read of ``profile`` (``None``: a
        read of every profile), ask for a background pull from the bucket if the last one is
        older than ``sync.refresh_ttl_s``, and answer at once from the local index: a read never
        waits on the bucket. Returns the age in seconds of the local copy of ``profile``'s data
        (of the oldest profile for ``None``); ``None`` without a bucket or before a first pull.
        """
        if profile is not None:
            validate_profile(profile)
        if self.replicator is None:
            return None
        return self.replicator.request_refresh(profile, self.config.get_float("sync.refresh_ttl_s"))

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
        return _shown_page(self.store.list(profile, limit, offset, category=category, active_only=active_only))

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
        return _shown_page(self.store.list_all(limit, offset, q=q or None, category=category))

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
        from .store.local import LocalTable

        self.store.migrate(schema)
        return LocalTable(self.store, schema, name, shown=_redacted_text if redacted else str)

    def redact_text(self, text: str, what: str) -> str:
        """``secrets.mode`` applied to a string a memory carries that is not one of its texts (an
        integration's path, namespace label or key): the text with its credentials replaced, or
        ``SecretFoundError`` in reject mode (``what`` names it)."""
        found = redact(text)
        if found.kinds and check_mode(self.config.secrets.mode) == "reject":
            raise SecretFoundError(f"{what} holds a credential ({', '.join(found.kinds)}); nothing was "
                                   "saved (secrets.mode = reject)")
        return found.text

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
        from .model import format_time
        from .store import from_us

        self._ready()
        self._own_writes()
        return [ProfileSummary(name=p, memoryCount=n, lastActivityAt=format_time(from_us(act)))
                for p, n, act in self.store.profile_activity()]

    def sync_status(self) -> SyncStatus:
        """The replicator's ``status()`` with ``"localOnly": False`` and no message; without a
        bucket, ``{"bucket": None, "localOnly": True, "message": "no bucket configured (local only)",
        "database": ...}``."""
        if self.replicator is None:
            return SyncStatus(bucket=None, localOnly=True, message="no bucket configured (local only)",
                              database=str(self.store.path))
        return SyncStatus(localOnly=False, message=None, **self.replicator.status())

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
            from .recall import RecallIndex

            with _LAZY_LOCK:  # one index per bank: concurrent first requests would each build one
                if self._recall_index is None:
                    self._recall_index = RecallIndex(self.store, self.config.get_int("recall.cache_profiles"),
                                                     warm=_warm_redaction)
        return self._recall_index

    @property
    def semantic(self) -> "SemanticIndex | None":
        """The semantic signal's vectors and similarity queries (``memlocal.semantic``), when the
        ``semantic`` extra is installed and ``semantic.enabled`` is set; otherwise ``None``."""
        if self._semantic is None and self.config.semantic.enabled:
            from .semantic import SemanticIndex, available

            if available():
                self._semantic = SemanticIndex(self.store)
        return self._semantic

    def ranking(self) -> "Ranking":
        """The configured ranking (``ranking.mode``, ``ranking.evidence_ratio``)."""
        from .errors import ConfigError
        from .scoring import MODES, Ranking

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
        from .semantic import BLOCK_CANDIDATES, CANDIDATES

        return semantic.similar(profile, query, k=BLOCK_CANDIDATES if block else CANDIDATES)

    @overload
    def query_with_relevance(self, profile: RecallQuery, /) -> "builtins.list[ScoredMemory]": ...

    @overload
    def query_with_relevance(
        self,
        profile: str,
        query: str,
        limit: int | None = None,
        min_score: float | None = None,
        exclude_ids: Iterable[str] = (),
        *,
        now: "datetime | None" = None,
    ) -> "builtins.list[ScoredMemory]": ...

    def query_with_relevance(
        self,
        profile: "str | RecallQuery",
        query: str | None = None,
        limit: int | None = None,
        min_score: float | None = None,
        exclude_ids: Iterable[str] = (),
        *,
        now: "datetime | None" = None,
    ) -> "builtins.list[ScoredMemory]":
        """The top ``limit`` active memories of ``profile`` for ``query``, best first, each with
        its score breakdown and (evidence mode) the evidence it passed the gate on. No side
        effects. Exactly what a full scan under the configured ranking returns (ties: newer
        createdAt, then id). Defaults: ``recall.limit`` (8), ``recall.min_score`` (0.05). In
        evidence mode (the default), a query with no usable words returns nothing.

        Takes a :class:`~memlocal.model.RecallQuery`, or its fields as arguments (a convenience
        that builds one).
        """
        return self._ranked(_recall_query(profile, query, limit, min_score, exclude_ids, now))

    def _ranked(self, query: RecallQuery) -> "builtins.list[ScoredMemory]":
        """What :meth:`query_with_relevance` returns for ``query`` (built once by its caller)."""
        q = query.with_defaults(self.config.get_int("recall.limit"), self.config.get_float("recall.min_score"))
        from .scoring import RankQuery

        ranking = self.ranking()
        self._ready(q.profile)
        rq = RankQuery.of(q, ranking, self._similarity(q.profile, q.text, ranking))
        return [_shown_scored(r) for r in self._index().query(q.profile, rq)]

    @overload
    def recall(self, profile: RecallQuery, /) -> "builtins.list[ScoredMemory]": ...

    @overload
    def recall(
        self,
        profile: str,
        query: str,
        limit: int | None = None,
        min_score: float | None = None,
        exclude_ids: Iterable[str] = (),
        *,
        now: "datetime | None" = None,
    ) -> "builtins.list[ScoredMemory]": ...

    def recall(
        self,
        profile: "str | RecallQuery",
        query: str | None = None,
        limit: int | None = None,
        min_score: float | None = None,
        exclude_ids: Iterable[str] = (),
        *,
        now: "datetime | None" = None,
    ) -> "builtins.list[ScoredMemory]":
        """``query_with_relevance``, then every returned memory is marked accessed (accessCount + 1,
        lastAccessedAt = now, staleness recomputed). The results show the values the ranking
        used, from before the bump. In evidence mode only memories that passed the gate are
        returned, so only they count as used (no feedback loop).

        The bump is this bank's at once and the database's a moment later, as the spec allows
        (MarkAccessed persists asynchronously): this bank's next query ranks with it, and its
        reads (``get``, ``list``, ``stats``, ...) wait for it to be written (see
        :meth:`mark_accessed`). Written not fsynced, and never checkpointed on the caller's path."""
        q = _recall_query(profile, query, limit, min_score, exclude_ids, now)
        results = self._ranked(q)
        if results:
            ids = [r.memory.id for r in results]
            at = q.now or utcnow()
            if self._queue_bump(q.profile, ids, at) is None:
                # No index in memory (a one-shot process): its next query reads the rows, so
                # the bump is written before this returns.
                self.store.mark_accessed(q.profile, ids, at)
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
            from .store.access import AccessMarker

            self._access_marker = AccessMarker(self.store.path, self.store.busy_timeout_s)
        return self._access_marker

    def drain(self, timeout: float | None = None) -> None:
        """Wait until the queued access marks and audit rows are written (tests, shutdown)."""
        if self._access_marker is not None:
            self._access_marker.drain(timeout)

    def render_context_block(self, profile: str, query: str, *, now: "datetime | None" = None) -> "RenderedBlock":
        """The memory block and the memories in it, without marking anything accessed.

        Evidence mode: what ``query`` gives evidence for goes in first, across both tiers
        (:func:`memlocal.injection.build_evidence_block`); spec mode: the spec's tiers."""
        return self._render(profile, query, now=now, trimmed=True)

    def _render(self, profile: str, query: str, *, now: "datetime | None", trimmed: bool) -> "RenderedBlock":
        """The block (:func:`memlocal.injection.render_block`), its memories as the faces show
        them; ``trimmed=False`` (a run's block): the candidates the budget left out are not
        listed (nothing reads them)."""
        from .injection import render_block

        validate_profile(profile)
        check_text(query, "query")
        self._ready(profile)
        ranking = self.ranking()
        block = render_block(self._index(), profile, query, ranking=ranking, now=now or utcnow(),
                             settings=self.config.inject, similarity=self._similarity(profile, query, ranking, block=True),
                             trimmed=trimmed, replaced=self._replaced_values)
        return _shown_block(block)

    def _replaced_values(self, memory: Memory) -> frozenset[str]:
        """The values the memory ``memory`` superseded stated and ``memory`` no longer does
        (:func:`memlocal.updates.replaced_values`; none when that memory is gone): the block
        dates the lines that hold one."""
        from .updates import replaced_values

        old = self.store.find(memory.supersedes) if memory.supersedes else None
        if old is None or old.profile_name != memory.profile_name:
            return frozenset()
        return replaced_values(old.processed_content, memory.processed_content)

    def build_context_block(self, profile: str, query: str, *, now: "datetime | None" = None) -> str:
        """The ``--- CONTEXT FROM MEMORY ---`` block for ``query`` ("" when there is nothing to
        inject), as a run receives it. Without waiting, the memories that made it in are marked
        accessed (in evidence mode only those the query gave evidence for: core entries without any
        are not counted) and the block is recorded in the audit trail (``memlocal.audit``)."""
        block = self._render(profile, query, now=now, trimmed=False)
        ids = block.evidence_ids if self.ranking().gated else block.ids
        if ids:
            self.mark_accessed(profile, ids, now=now)
        if self.config.audit.enabled:
            from .audit import InjectionRecord, record

            row = InjectionRecord(now or utcnow(), profile, self._query_hash(query), len(block.text),
                                  tuple(s.memory.id for s in block.core), tuple(s.memory.id for s in block.relevant))
            self._background().submit_write(
                functools.partial(record, rec=row, max_rows=self.config.get_int("audit.max_rows"),
                                  retention_days=self.config.get_float("audit.retention_days")),
                f"the injection audit row of profile {profile}")
        return block.text

    def _query_hash(self, query: str) -> str:
        """The audit's keyed hash of ``query`` (``""`` when the host's key can neither be read nor
        made, say in a read-only folder: the row is still recorded, without a hash)."""
        from .audit import host_key, query_hash

        if self._audit_key is None:
            try:
                self._audit_key = host_key(self.store.path)
            except OSError as exc:
                log.warning("audit rows go without a query hash: no audit key (%s)", exc)
                self._audit_key = b""
        return query_hash(query, self._audit_key) if self._audit_key else ""

    def injections(self, profile: str, *, memory_id: str | None = None, limit: int = 20) -> "builtins.list[Injection]":
        """The audit trail: the blocks rendered for ``profile``'s runs, newest first, each with
        the memory ids of each tier, its size and its query's hash; with ``memory_id``, only the
        runs that saw that memory. Rows this bank still has queued are written first."""
        from .audit import injections

        _check_paging(limit, 0)
        self._own_writes()
        return injections(self.store, profile, memory_id=memory_id, limit=limit)

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


def _warn_local_only(store: Store) -> None:
    """The spec's start-up warning of a bank without a bucket: once per database (its ``meta``
    remembers it was given, so a local-only user's every later command is quiet), and at most
    once per process (on stderr where nothing configured logging: Python's last-resort handler
    prints warnings). ``memlocal serve`` says it in its start-up lines whatever this remembers."""
    global _warned_local_only
    if _warned_local_only:
        return
    try:
        if store.meta_get(LOCAL_ONLY_NOTICE_META_KEY) is not None:
            return
        store.meta_set(LOCAL_ONLY_NOTICE_META_KEY, format_time(utcnow()))
    except StoreError:  # a read-only or busy file: say it (again) rather than not at all
        pass
    _warned_local_only = True
    log.warning("no bucket configured (set INTERNAL_S3_BUCKET or S3_BUCKET to sync): memories stay on this host only"
                " (said once per database; bucket.local_only_notice = false silences it)")


def _warm_redaction() -> None:
    """Load the credential detectors every face's output may need (``shown``), on the recall
    index's builder thread: a process that stays up would otherwise pay their import (tens of
    ms) inside the first recall whose results hold a long word or a URL."""
    from .redact import warm

    warm()


def shown(memory: Memory) -> Memory:
    """``memory`` as every face returns it: credentials redacted from its texts and unknown
    fields. A memory pulled from the bucket never went through this host's save, and the bucket's
    copy is the other writer's to fix; every memory this host saved is returned unchanged."""
    raw, processed, summary = redact(memory.raw_input), redact(memory.processed_content), redact(memory.summary)
    extra, extra_kinds = redact_json(dict(memory.extra)) if memory.extra else (memory.extra, ())
    if not (raw.kinds or processed.kinds or summary.kinds or extra_kinds):
        return memory
    return memory.with_changes(raw_input=raw.text, processed_content=processed.text,
                               summary=cut_preview(summary.text, SUMMARY_MAX_CHARS), extra=extra)


def _redacted_text(text: str) -> str:
    return redact(text).text


def _redacted_extraction(extraction: Extraction) -> tuple[Extraction, tuple[str, ...]]:
    """The LLM processor's answer with its credentials redacted (the model may join what the
    input kept apart, ``AKIA IOSF …`` -> ``AKIAIOSF…``). Always redacted, never refused: the
    input as given passed ``secrets.mode``."""
    processed, summary = redact(extraction.processed_content), redact(extraction.summary)
    if not (processed.kinds or summary.kinds):
        return extraction, ()
    return (replace(extraction, processed_content=processed.text, summary=cut_preview(summary.text, SUMMARY_MAX_CHARS)),
            merge_kinds((processed.kinds, summary.kinds)))


def _shown_page(page: Page) -> Page:
    return replace(page, memories=[shown(m) for m in page.memories])


def _shown_scored(scored: "ScoredMemory") -> "ScoredMemory":
    memory = shown(scored.memory)
    return scored if memory is scored.memory else replace(scored, memory=memory)


def _shown_block(block: "RenderedBlock") -> "RenderedBlock":
    """The block's memories as the faces show them (its text is redacted as it is rendered)."""
    return replace(block, core=tuple(map(_shown_scored, block.core)),
                   relevant=tuple(map(_shown_scored, block.relevant)), trimmed=tuple(map(_shown_scored, block.trimmed)))


def _recall_query(profile: "str | RecallQuery", query: str | None, limit: int | None, min_score: float | None,
                  exclude_ids: Iterable[str], now: "datetime | None") -> RecallQuery:
    """The query a recall was given, or the one its arguments make."""
    if isinstance(profile, RecallQuery):
        if (query, limit, min_score, tuple(exclude_ids), now) != (None, None, None, (), None):
            raise TypeError("a RecallQuery carries every argument of the recall: pass nothing else")
        return profile
    ids = (exclude_ids,) if isinstance(exclude_ids, str) else tuple(exclude_ids)
    return RecallQuery(profile, query, limit, min_score, ids, now)  # type: ignore[arg-type]


def _check_extra(extra: "Mapping[str, Any] | None") -> dict[str, Any]:
    """A save's extra fields: JSON text that names none of the spec's fields nor the hygiene's."""
    if not extra:
        return {}
    import json

    from .hygiene import SUPERSEDED_BY, SUPERSEDES
    from .model import JSON_FIELDS

    reserved = sorted(set(extra) & {*JSON_FIELDS, SUPERSEDES, SUPERSEDED_BY})
    if reserved:
        raise ValidationError(f"extra fields may not name the memory's own fields: {', '.join(reserved)}")
    try:
        check_text(json.dumps(dict(extra), ensure_ascii=False), "an extra field")
    except TypeError as exc:
        raise ValidationError(f"extra fields must be JSON values: {exc}") from None
    return dict(extra)


def _check_paging(limit: object, offset: object) -> None:
    validate_int(limit, "limit", 1, PAGE_MAX_LIMIT)
    validate_int(offset, "offset", 0, OFFSET_MAX)
