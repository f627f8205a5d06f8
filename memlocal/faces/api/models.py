"""Pydantic models of the REST API's request and response bodies (the OpenAPI schema).

JSON field names are camelCase, as everywhere in memlocal. The request bodies are the inputs
declared once in :mod:`memlocal.faces.inputs` (shared with the tools, the MCP server and the CLI), so
every face checks the same rules with the library's own messages; the models here are the
responses.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import core_schema as cs

from ..inputs import SaveInput
from ...model import CATEGORIES, ID_PATTERN, LINK_FIELDS

# pydantic's JsonDict is not exported (pydantic.json_schema re-imports it privately).
JsonDict = dict[str, Any]

_CATEGORY_SCHEMA: JsonDict = {"enum": list(CATEGORIES)}
_TIME: JsonDict = {"format": "date-time"}


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ErrorDetail(_Model):
    """One error: a stable machine code and a one-line human message."""

    code: str = Field(description="invalid_input, too_large, not_found, unauthorized, not_wired, ...")
    message: str


class ErrorResponse(_Model):
    """Every error the API answers has this body."""

    error: ErrorDetail


class MemoryOut(_Model):
    """A memory, as stored: the spec's object. Fields other implementations wrote are passed
    through beside the declared ones (the schema's ``additionalProperties``), as every reader of
    the bucket keeps them; every field this library writes is declared here (``tests/test_api_models.py``
    checks the model against :class:`memlocal.model.Memory`)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              json_schema_extra={"additionalProperties": True})

    id: str = Field(pattern=ID_PATTERN)
    profile_name: str
    raw_input: str
    processed_content: str
    summary: str
    category: str = Field(json_schema_extra=_CATEGORY_SCHEMA)
    source: str
    confidence: float
    created_at: str = Field(json_schema_extra=_TIME)
    last_accessed_at: str | None = Field(
        json_schema_extra=_TIME, description="null when never accessed"
    )
    access_count: int
    staleness_score: float
    is_active: bool
    version: int
    supersedes: str | None = Field(
        None, pattern=ID_PATTERN, description="the memory this one replaced; absent when none")
    superseded_by: str | None = Field(
        None, pattern=ID_PATTERN, description="the memory that replaced this one; absent when none")

    # The other writers' fields: data, not schema, so they are kept apart from the declared ones
    # (a field of this library cannot slip through here: the model test names them all).
    _others: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_others(cls, data: Any, handler: ModelWrapValidatorHandler["MemoryOut"]) -> "MemoryOut":
        out = handler(data)
        if isinstance(data, dict):
            declared = {f.alias or n for n, f in cls.model_fields.items()} | set(cls.model_fields)
            out._others = {k: v for k, v in data.items() if k not in declared}
        return out

    @model_serializer(mode="wrap")
    def _with_others(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body: dict[str, Any] = handler(self)
        for link in LINK_FIELDS:  # absent rather than null, as in the bucket object
            if body.get(link, "") is None:
                del body[link]
        return {**self._others, **body}

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: cs.CoreSchema, handler: GetJsonSchemaHandler) -> JsonDict:
        # The wrap serializer hides the fields from the response (serialization) schema: document
        # the model's own fields in both directions.
        inner: Any = schema.get("schema", schema) if schema["type"] == "function-wrap" else schema
        return handler({k: v for k, v in inner.items() if k != "serialization"})


class MemoryPage(_Model):
    """A page of memories, newest first, and the total it was cut from."""

    memories: list[MemoryOut]
    total: int
    limit: int
    offset: int


class MemoryCreateRequest(SaveInput):
    """A new memory: ``rawInput`` (free text, structured by the LLM processor when configured)
    or ``content`` (pre-structured), or both. The fields and their rules are the ``memory_save``
    tool's (``memlocal.faces.inputs.SaveInput``): a broken rule answers 400 (413 for a text over its
    cap), a wrong type or an unknown field 422."""


class SaveResponse(_Model):
    """A created memory, and whether the bucket already has it (false without a bucket).

    ``deduplicated``: the body repeated an active memory, which is returned; nothing new was
    stored (status 200 instead of 201). ``redacted``: kinds of secrets removed from the input.
    ``proposedSupersedes``: a memory the LLM processor suggests this one replaces (not applied:
    repeat the save with ``supersedes`` to apply it)."""

    memory: MemoryOut
    synced: bool
    deduplicated: bool = Field(False, description="true when an equal active memory was returned instead")
    redacted: list[str] = Field(
        default_factory=list, description="kinds of credentials replaced by [REDACTED:<kind>] (never their values)")
    proposed_supersedes: str | None = Field(
        None, description="a memory the LLM processor proposes this one supersedes (not applied)")
    superseded: str | None = Field(
        None, description="the memory this save retired on its own: it restated that memory's subject with a changed "
        "value (undo: POST .../memories/{id}/restore)")


class MemoryResponse(_Model):
    memory: MemoryOut


class MemoryHistory(_Model):
    """A memory's supersession chain, oldest first: the versions it replaced, itself, the
    versions that replaced it (links to deleted memories end the chain)."""

    memories: list[MemoryOut]


class Weights(_Model):
    """The effective weights after the maturity redistribution."""

    recency: float
    usage: float
    topic: float


class Breakdown(_Model):
    """How a score was made: score = (wR·recency + wU·usage + wT·topic) · confidenceMul."""

    recency: float
    usage: float
    topic: float
    confidence_mul: float
    weights: Weights
    maturity: float
    score: float


class Evidence(_Model):
    """Why a result passed the evidence gate (``ranking.mode = "evidence"``): the query's words
    (as the query writes them, never stems) and the clusters it shares with the query, its topic
    value, and the best topic value of any candidate (it passed with ``strength ≥
    ranking.evidence_ratio · best``)."""

    terms: list[str]
    clusters: list[str]
    strength: float
    best: float
    rank: float = Field(default=0.0, description="what the results are ordered by after a shared word before a cluster alone, then the score: the topic, for a fact per its length, with a date the query names and the similarity (docs/relevance.md)")
    semantic: float | None = Field(default=None, description="similarity (the cosine, plus at most 0.3 of its context's best; at most 1.3), when the semantic signal is on")


class SearchResult(_Model):
    memory: MemoryOut
    score: float
    breakdown: Breakdown
    evidence: Evidence | None = Field(
        default=None, description="why it passed the gate; null in spec mode and for the core tier")


class SearchResponse(_Model):
    """Ranked best first. A read for dashboards: access counts are not bumped."""

    results: list[SearchResult]


class GroupedMemories(_Model):
    """Every memory, grouped by profile (newest first within each profile)."""

    profiles: dict[str, list[MemoryOut]]


class Stats(_Model):
    total_memories: int = Field(description="every memory, superseded ones included")
    active_memories: int = Field(description="memories not superseded (what lists show and recall draws from)")
    superseded_memories: int = Field(description="inactive memories, superseded by another")
    profiles_with_memory: int
    per_profile: dict[str, int] = Field(description="every memory of each profile")
    per_profile_active: dict[str, int] = Field(description="the active memories of each profile")


class AutomationNote(_Model):
    """An automation's note; the empty string when it has none."""

    memory: str


class Health(_Model):
    """``ok`` when the bank is wired; ``degraded`` (with the reason) when it is not."""

    status: Literal["ok", "degraded"]
    reason: str | None = None
    version: str


# --- the dashboard's reads ------------------------------------------------------------------------


class ProfileSummary(_Model):
    """One profile: its memory count (as in the stats) and its latest createdAt or lastAccessedAt."""

    name: str
    memory_count: int
    last_activity_at: str = Field(json_schema_extra=_TIME)


class ProfileList(_Model):
    """Every profile with memories, newest activity first."""

    profiles: list[ProfileSummary]


class PreviewEntry(SearchResult):
    """A memory the context block considered, with its tier (core: preference and fact)."""

    tier: Literal["core", "relevant"]


class InjectionPreview(_Model):
    """The exact memory block that prompt injection would prepend for ``query`` (nothing is marked
    accessed), its size against the budget, what made it in and what the budget trimmed."""

    query: str
    block: str = Field(description="the block, first line to closing ---; empty when nothing would be injected")
    chars: int = Field(description="the block's length in characters (Unicode code points)")
    budget: int = Field(description="inject.budget_chars (2000 by default)")
    included: list[PreviewEntry]
    trimmed: list[PreviewEntry]


class InjectionEntry(_Model):
    """One rendered memory block of a run (the audit trail)."""

    id: int
    at: str = Field(json_schema_extra=_TIME)
    profile: str
    query_hash: str = Field(description="16 hex digits of HMAC-SHA-256 over the query, keyed by the host's audit key (the text is not kept)")
    chars: int = Field(description="the block's length in characters; 0 when nothing was injected")
    core: list[str] = Field(description="memory ids in the core tier, best first")
    relevant: list[str] = Field(description="memory ids in the relevant tier, best first")


class InjectionList(_Model):
    """Rendered blocks, newest first."""

    injections: list[InjectionEntry]
    summaries: dict[str, str] = Field(
        description="memory id -> its summary, for the memories of these blocks still stored (deleted ones are absent)")


class AutomationNoteEntry(_Model):
    """An automation's note and when it was last written."""

    automation_id: str
    note: str
    updated_at: str = Field(json_schema_extra=_TIME)


class AutomationList(_Model):
    """Every automation that has a note, most recently written first."""

    automations: list[AutomationNoteEntry]


class SyncStatus(_Model):
    """``memlocal sync status --json``, or ``localOnly`` with a message when no bucket is
    configured (the fields it does not have are absent)."""

    local_only: bool
    bucket: dict[str, str | None] | None = Field(
        None, description="name, source (where the name came from), endpoint, region"
    )
    message: str | None = Field(None, description="without a bucket: no bucket configured (local only)")
    database: str | None = None
    bucket_identity: dict[str, Any] | None = Field(
        None, description="the bucket's identity marker memlocal/bucket.json as this host last met it")
    hydrated: dict[str, Any] | None = Field(
        None, description="when this index completed a pass of every profile against the bucket; null: never")
    breaker: dict[str, Any] | None = Field(
        None, description="the host's write-through circuit breaker: state closed, open or half-open")
    pending: dict[str, int] | None = Field(None, description="what this host has that the bucket does not (yet)")
    last_pass: dict[str, Any] | None = Field(None, description="the last pass's report")
    last_error: dict[str, Any] | None = Field(
        None, description="the last failed pass's error (at, message) while it is current: null once a later pass succeeded")
    resolved_error: dict[str, Any] | None = Field(
        None, description="the last error when a later pass cleared it (at, message, resolvedAt); null otherwise")
    skipped: list[dict[str, Any]] | None = Field(None, description="bucket objects skipped, with the reason")
    record: dict[str, Any] | None = Field(
        None, description="the change record as this host follows it: cursor, listsInFullUntil, why, waitingFor, problems")
    pass_running: bool | None = Field(None, description="whether a pass runs now")
