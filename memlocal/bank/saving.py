"""A save, as named steps: validate, redact, extract, dedup, updates, insert, push.

Every face (the CLI, REST, MCP and the tools, the integrations) builds one :class:`SaveRequest`
and hands it to :meth:`memlocal.MemoryBank.save`, which runs it through :class:`SavePipeline`
over the bank's parts. The text a save stores is normalised once
(:class:`memlocal.hygiene.normalised.NormalisedText`): the duplicate, near-duplicate and update checks
read its forms from that one value (docs/hygiene.md).

The steps, in order (each a method of :class:`SavePipeline`; the rules they apply are the ones
:class:`SaveRequest` documents, field by field):

1. **validate**: every field checked before anything is read or written;
2. **redact**: ``secrets.mode`` applied to the texts and extra fields, before anything is stored
   or sent (the LLM processor included); the named memory to supersede must be active;
3. **extract**: with the LLM processor, the exact check of the given text first (a repeated note
   costs no call), then the structure, its answer redacted like any input;
4. **judge**: an update the rule is unsure of may be judged by the model, before the write
   transaction (no lock is held over the network);
5. **dedup**: the exact and near rules, inside the write transaction;
6. **updates**: the memory this one updates, when the rule is sure of one;
7. **insert**: the row (and the supersession) committed durably, its vector stored;
8. **push**: written through to the bucket, never an error once committed.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from ..hygiene.dedup import Deduplicator
from ..errors import InputTooLargeError, MemoryBankError, SecretFoundError, ValidationError
from ..model import (RAW_INPUT_MAX_BYTES, SOURCES, SUMMARY_MAX_CHARS, Extraction, Memory, check_text,
                    compute_staleness, cut_preview, default_summary, new_id, utcnow, validate_category,
                    validate_confidence, validate_id, validate_profile, validate_summary, validate_text_input)
from ..hygiene.normalised import NormalisedText
from ..services.redact import Redacted, check_mode, merge_kinds, redact, redact_json, refuse_credential_name
from ..services.shown import shown
from ..store import IdTakenError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..config import Config
    from ..plugins import Replicator
    from ..recall.semantic import SemanticIndex
    from ..store import Store

log = logging.getLogger("memlocal")

# Memories shown to the LLM processor when it may propose one to supersede.
PROPOSAL_CANDIDATES = 3


class Extractor(Protocol):
    """The LLM processor's interface (see ``memlocal.services.llm``)."""

    def extract(self, raw_input: str, similar: Sequence[Memory] = ()) -> Extraction | None:
        """Structure for ``raw_input``; ``None`` when extraction was skipped or the call failed.

        ``similar``: existing memories of the profile; the answer may name one of them in
        ``supersedes`` (a proposal the caller decides on)."""


@dataclass(frozen=True, slots=True)
class SaveRequest:
    """One save, as every face builds it from its input and hands it to
    :meth:`memlocal.MemoryBank.save`: ``profile`` and ``raw_input`` (free text the LLM processor
    may structure) by position, the rest by name. A value: nothing is checked until the bank
    saves it (its validate step), so a face builds it from what it was given as it was given.

    >>> SaveRequest("researcher", content="Prefers JSON output", category="preference")  # doctest: +SKIP

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
    with :meth:`MemoryBank.find_duplicate` itself); ``None`` follows ``dedup.enabled``.

    Updates (docs/hygiene.md, "Updates"): a save that restates an active memory's subject
    with a changed value (:func:`memlocal.hygiene.updates.relation` is sure) supersedes it, and the
    result names it in ``superseded``; with the LLM processor, its proposal is applied when
    the rule finds the two related. ``auto_supersede``: ``False`` retires nothing on its own
    (``--no-supersede``); ``None`` follows ``dedup.supersede`` when the duplicate rules apply
    (``deduplicate`` / ``dedup.enabled``: a caller that keeps its own identities, as the
    integrations do with ``deduplicate=False``, retires nothing it did not name);
    :meth:`MemoryBank.restore` undoes it.
    """

    profile: str
    raw_input: str | None = None
    _: KW_ONLY
    content: str | None = None
    summary: str | None = None
    category: str | None = None
    confidence: float | None = None
    use_llm: bool = True
    supersedes: str | None = None
    extra: "Mapping[str, Any] | None" = None
    deduplicate: bool | None = None
    auto_supersede: bool | None = None
    source: str | None = None


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


@dataclass(slots=True)
class _Draft:
    """A save between its steps: the request's fields as checked and redacted, then what each
    step adds."""

    profile: str
    raw_input: str | None
    content: str | None
    summary: str | None
    category: str | None
    confidence: float | None
    supersedes: str | None
    extra: dict[str, Any]
    source: str | None
    use_llm: bool
    dedup: bool  # the duplicate rules apply (deduplicate / dedup.enabled)
    auto_supersede: bool | None
    redacted: tuple[str, ...] = ()
    extracting: bool = False
    given: NormalisedText | None = None  # the text as given, when the LLM may change it
    extraction: Extraction | None = None
    similar: list[Memory] = field(default_factory=list)  # shown to the LLM processor
    text: NormalisedText | None = None  # the text stored, normalised once
    judged: str | None = None
    unsure: list[Memory] = field(default_factory=list)
    auto: str | None = None  # the memory the update rule retires

    @property
    def processed(self) -> NormalisedText:
        assert self.text is not None, "the extract step sets the text"
        return self.text


class SavePipeline:
    """The save's steps (see the module docstring) over one bank's parts: its store, settings,
    LLM processor and replicator; ``semantic`` gives the semantic index when it is on."""

    def __init__(self, store: "Store", config: "Config", extractor: Extractor | None,
                 replicator: "Replicator | None", semantic: "Callable[[], SemanticIndex | None]") -> None:
        self.store = store
        self.config = config
        self.extractor = extractor
        self.replicator = replicator
        self.semantic = semantic

    def deduplicator(self) -> "Deduplicator":
        """The write-time duplicate and update checks (:mod:`memlocal.hygiene.dedup`) over this store."""
        return Deduplicator(self.store, self.config.dedup)

    def save(self, request: SaveRequest) -> SaveResult:
        """Run ``request`` through the steps; returns once it is durably committed."""
        draft = self.validate(request)
        self.redact(draft)
        dedupe = self.deduplicator()
        repeated = self.extract(draft, dedupe)
        if repeated is not None:
            return self.deduplicated(draft, repeated)
        self.judge(draft, dedupe)
        semantic = self.semantic()
        vector = None
        retired: Memory | None = None
        # The checks and the insert in one write transaction: the look-ups read the writer's
        # connection, whose pages are cached (a read connection reads again from the log the
        # pages each commit wrote), and no other writer stores the same text between a check
        # and the insert. Not when the text is to be embedded between them: never under the lock.
        with self.store.transaction() if semantic is None else contextlib.nullcontext():
            repeated = self.dedup(draft, dedupe)
            if repeated is not None:
                return self.deduplicated(draft, repeated)
            memory = self.memory(draft)
            self.updates(draft, dedupe)
            vector = semantic.vectors_for([draft.processed.value])[0] if semantic is not None else None  # not under the lock
            memory, retired = self.insert(draft, memory)
        if semantic is not None and vector is not None:
            semantic.store_vector(memory.id, vector)
        return self.push(draft, memory, retired)

    # --- the steps -----------------------------------------------------------------------------

    def validate(self, request: SaveRequest) -> _Draft:
        """Every field checked before anything is read or written."""
        profile = request.profile
        refuse_credential_name(validate_profile(profile))
        extra = check_extra(request.extra)
        raw_input, content = request.raw_input, request.content
        if raw_input is None and content is None:
            raise ValidationError("give rawInput or content")
        if raw_input is not None:
            validate_text_input(raw_input, "rawInput")
        if content is not None:
            validate_text_input(content, "content")
        if request.summary is not None:
            validate_summary(request.summary)
        if request.category is not None:
            validate_category(request.category)
        confidence = request.confidence
        if confidence is not None:
            confidence = validate_confidence(confidence)
        source = request.source
        if source is not None and source not in SOURCES:
            raise ValidationError(f"unknown source {source!r}: expected {' or '.join(SOURCES)}")
        dedup = self.config.get_bool("dedup.enabled") if request.deduplicate is None else bool(request.deduplicate)
        return _Draft(profile, raw_input, content, request.summary, request.category, confidence, request.supersedes,
                      extra, source, request.use_llm, dedup, request.auto_supersede)

    def redact(self, draft: _Draft) -> None:
        """Credentials go before anything is stored or sent (the LLM processor included); the
        caps of the validate step applied to the input as given. Then the named memory to
        supersede must be an active one of the profile."""
        mode = self.config.secrets.mode
        draft.raw_input, draft.content, draft.summary, draft.redacted = redact_secrets(
            mode, draft.raw_input, draft.content, draft.summary)
        if draft.extra:  # an integration's fields (a file's path, a store item) are checked as the texts are
            draft.extra, extra_kinds, _names = redact_fields(mode, draft.extra)
            draft.redacted = merge_kinds((draft.redacted, extra_kinds))
        if draft.supersedes is not None:
            self.check_supersedable(draft.profile, draft.supersedes)

    def extract(self, draft: _Draft, dedupe: "Deduplicator") -> Memory | None:
        """With the LLM processor (a rawInput alone, ``use_llm``): a repeat of the given text is
        found before the call (returned: a repeated note costs no extraction call), then the
        model's structure, its answer redacted like any input. Sets the text to store."""
        given = draft.content if draft.content is not None else draft.raw_input
        assert given is not None
        draft.extracting = (draft.raw_input is not None and draft.content is None and draft.use_llm
                            and self.extractor is not None)
        if not draft.extracting:
            draft.text = NormalisedText(given)
            return None
        assert draft.raw_input is not None and self.extractor is not None
        draft.given = NormalisedText(given)
        if draft.dedup:
            # Before the LLM: a repeated note costs no extraction call. Whatever the category:
            # the same text in another category is the same memory, its category kept.
            dup = dedupe.exact(draft.profile, (draft.given,), None)
            if dup is not None:
                return dup
        if draft.supersedes is None:  # the caller has not decided: the model may propose one
            draft.similar = self.store.similar(draft.profile, draft.given.query_terms, PROPOSAL_CANDIDATES)
        # No transaction is open here: the network wait holds no database lock.
        extraction = self.extractor.extract(draft.raw_input, similar=draft.similar)
        if extraction is not None:  # the model's answer is text to check like any input
            extraction, answer_kinds = redacted_extraction(extraction)
            draft.redacted = merge_kinds((draft.redacted, answer_kinds))
        draft.extraction = extraction
        processed = extraction.processed_content if extraction is not None else draft.raw_input
        draft.text = draft.given if processed == given else NormalisedText(processed)
        return None

    def judge(self, draft: _Draft, dedupe: "Deduplicator") -> None:
        """Whether this save may retire a memory on its own (``auto_supersede``, else
        ``dedup.supersede`` when the duplicate rules apply); an update the rule is unsure of may
        then be judged by the model (its deadline, llm.timeout_s), before the write transaction:
        no lock is held over the network."""
        if draft.auto_supersede is None:  # part of the write-time hygiene: off with it (deduplicate, dedup.enabled)
            draft.auto_supersede = draft.dedup and self.config.dedup.supersede
        judge = getattr(self.extractor, "judge", None) if draft.use_llm and not draft.extracting else None
        if judge is not None and draft.supersedes is None and draft.auto_supersede:
            draft.unsure = dedupe.unsure_updates(draft.profile, draft.processed)
            if draft.unsure and dedupe.find(draft.profile, draft.processed, None) is None:
                draft.judged = judge(draft.processed.value, draft.unsure)

    def dedup(self, draft: _Draft, dedupe: "Deduplicator") -> Memory | None:
        """The active memory this save repeats, in any category (the same text filed twice is one
        memory, the first save's category kept; docs/hygiene.md, "Exact duplicates"): the exact
        rule, then the near rule when ``dedup.near`` is on. ``None`` when the rules are off."""
        if not draft.dedup:
            return None
        processed = draft.processed
        if draft.extracting:  # the given text's exact check ran before the LLM
            found = None
            dup = dedupe.exact(draft.profile, (processed,), None) if processed is not draft.given else None
        else:  # the same text for both checks: their rows in one query
            found = dedupe.candidates(draft.profile, processed)
            dup = dedupe.exact(draft.profile, (processed,), None, found=found[0] if found else None)
        if dup is None and self.config.dedup.near:
            dup = dedupe.near(draft.profile, processed, None, found=found[1] if found else None)
        return dup

    def memory(self, draft: _Draft) -> Memory:
        """The memory to insert: the caller's fields, else the LLM processor's, else the defaults
        (the text's first 50 characters as summary, ``general``, confidence 1.0)."""
        extraction = draft.extraction
        processed = draft.processed.value
        category = draft.category or (extraction.category if extraction else "general")
        confidence = draft.confidence if draft.confidence is not None else (extraction.confidence if extraction else 1.0)
        now = utcnow()
        return Memory(
            id=new_id(),
            profile_name=draft.profile,
            raw_input=draft.raw_input if draft.raw_input is not None else processed,
            processed_content=processed,
            summary=draft.summary if draft.summary is not None else (extraction.summary if extraction else default_summary(processed)),
            category=category,
            source=draft.source or "explicit",
            confidence=confidence,
            created_at=now,
            last_accessed_at=None,
            access_count=0,
            staleness_score=compute_staleness(
                category=category, confidence=confidence, access_count=0,
                created_at=now, last_accessed_at=None, now=now,
            ),
            extra=draft.extra,
        )

    def updates(self, draft: _Draft, dedupe: "Deduplicator") -> None:
        """The memory this save updates (docs/hygiene.md, "Updates"), when the caller named none
        and it may retire one: the rule's sure one, or the model's proposal or verdict when the
        rule finds the two related."""
        if draft.supersedes is None and draft.auto_supersede:
            proposed = draft.extraction.supersedes if draft.extraction is not None else draft.judged
            draft.auto = dedupe.update_of(draft.profile, draft.processed, proposed, draft.similar or draft.unsure)
            draft.supersedes = draft.auto

    def insert(self, draft: _Draft, memory: Memory) -> tuple[Memory, Memory | None]:
        """Insert ``memory`` (superseding the memory named, in the same transaction); returns it
        and the memory it retired."""
        retired: Memory | None = None
        for _ in range(16):
            try:
                if draft.supersedes is None:
                    self.store.insert(memory)
                else:
                    memory, retired = self.store.supersede(draft.profile, draft.supersedes, memory, insert=True)
                return memory, retired
            except IdTakenError:
                memory = memory.with_changes(id=new_id())  # a collision is checked, never assumed away
        raise ValidationError("could not draw an unused memory id")  # pragma: no cover - a broken CSPRNG

    def push(self, draft: _Draft, memory: Memory, retired: Memory | None) -> SaveResult:
        """Write the committed memory through to the bucket (the outbox pushes it later when that
        fails: never an error now) and say what the save did."""
        try:
            synced = self.replicator.push_saved(memory) if self.replicator else False
            if synced and retired is not None and self.replicator is not None:
                # The retired memory too: no other host may hold the old value and the new one as
                # two active facts until this host's next pass.
                self.replicator.push_saved(retired)
        except MemoryBankError as exc:  # committed: the outbox pushes it later; never an error now
            log.warning("memory %s saved; pushing it failed (the sync will retry): %s", memory.id, exc)
            synced = False
        proposed = draft.extraction.supersedes if draft.extraction is not None else None
        if proposed not in {m.id for m in draft.similar}:
            proposed = None  # only ever one of the memories the model was shown
        superseded = memory.supersedes if draft.auto is not None else None
        if superseded is not None and superseded == proposed:
            proposed = None  # applied: the rule agreed with the model
        return SaveResult(memory, synced, redacted=draft.redacted, proposed_supersedes=proposed,
                          superseded=superseded)

    # --- what the steps share ------------------------------------------------------------------

    def check_supersedable(self, profile: str, memory_id: str) -> None:
        """``memory_id`` is an active memory of ``profile`` (``NotFoundError``, ``ValidationError``)."""
        validate_id(memory_id)
        old = self.store.get(profile, memory_id)
        if not old.is_active:
            by = old.superseded_by
            raise ValidationError(f"{memory_id} is already inactive" + (f" (superseded by {by})" if by else ""))

    def deduplicated(self, draft: _Draft, dup: Memory) -> SaveResult:
        """The result of a save that repeated ``dup``; with ``supersedes``, link the two."""
        if draft.supersedes is not None:
            if draft.supersedes == dup.id:
                raise ValidationError(f"the text is the same memory as {dup.id}, the one it would supersede")
            dup, _old = self.store.supersede(draft.profile, draft.supersedes, dup, insert=False)
        synced = self.replicator.is_synced(dup) if self.replicator else False
        return SaveResult(shown(dup), synced, deduplicated=True, redacted=draft.redacted)


# --- secrets.mode on what a save (or an import) is given ----------------------------------------

def redact_secrets(mode: object, raw_input: str | None, content: str | None, summary: str | None
                   ) -> tuple[str | None, str | None, str | None, tuple[str, ...]]:
    """``secrets.mode`` (``mode``) applied to a save's (or an import's) text: credentials replaced
    by ``[REDACTED:<kind>]`` (``redact``) or the save refused (``reject``, ``SecretFoundError``).
    Returns the three texts and the kinds found (docs/hygiene.md, "Secrets")."""
    mode = check_mode(mode)
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


def redact_fields(mode: object, fields: "Mapping[str, Any]") -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
    """``secrets.mode`` (``mode``) applied to the unknown fields of a memory (any JSON value: every
    string in it is checked). Returns the fields with credentials replaced, the kinds found and the
    names of the fields that held them; ``SecretFoundError`` in reject mode."""
    out, found = redact_json(dict(fields))  # names and values, at any depth
    kinds = list(found)
    names = [redact(name).text for name, value in fields.items() if redact_json({name: value})[1]] if found else []
    if kinds and check_mode(mode) == "reject":
        raise SecretFoundError(f"field {', '.join(names)} holds a credential ({', '.join(kinds)}); nothing was "
                               "saved (secrets.mode = reject)")
    return out, tuple(kinds), tuple(names)


def redact_text(mode: object, text: str, what: str) -> str:
    """``secrets.mode`` (``mode``) applied to a string a memory carries that is not one of its
    texts: the text with its credentials replaced, or ``SecretFoundError`` in reject mode
    (``what`` names it)."""
    found = redact(text)
    if found.kinds and check_mode(mode) == "reject":
        raise SecretFoundError(f"{what} holds a credential ({', '.join(found.kinds)}); nothing was "
                               "saved (secrets.mode = reject)")
    return found.text


def redacted_extraction(extraction: Extraction) -> tuple[Extraction, tuple[str, ...]]:
    """The LLM processor's answer with its credentials redacted (the model may join what the
    input kept apart, ``AKIA IOSF …`` -> ``AKIAIOSF…``). Always redacted, never refused: the
    input as given passed ``secrets.mode``."""
    processed, summary = redact(extraction.processed_content), redact(extraction.summary)
    if not (processed.kinds or summary.kinds):
        return extraction, ()
    return (replace(extraction, processed_content=processed.text, summary=cut_preview(summary.text, SUMMARY_MAX_CHARS)),
            merge_kinds((processed.kinds, summary.kinds)))


def check_extra(extra: "Mapping[str, Any] | None") -> dict[str, Any]:
    """A save's extra fields: JSON text that names none of the spec's fields nor the hygiene's."""
    if not extra:
        return {}
    import json

    from ..hygiene.rules import SUPERSEDED_BY, SUPERSEDES
    from ..model import JSON_FIELDS

    reserved = sorted(set(extra) & {*JSON_FIELDS, SUPERSEDES, SUPERSEDED_BY})
    if reserved:
        raise ValidationError(f"extra fields may not name the memory's own fields: {', '.join(reserved)}")
    try:
        check_text(json.dumps(dict(extra), ensure_ascii=False), "an extra field")
    except TypeError as exc:
        raise ValidationError(f"extra fields must be JSON values: {exc}") from None
    return dict(extra)
