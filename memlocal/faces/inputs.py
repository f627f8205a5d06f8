"""The one declaration of every input the faces take: pydantic models and field types.

Each rule is written once, here, as a field type that carries both its check and its JSON Schema
facts: the check is the library's own validator (``memlocal.model``), so a face rejects bad input
with the same one-line message, and the same error class, as :class:`memlocal.MemoryBank` does;
the schema facts (pattern, enum, bounds) are taken from the same constants. From these models
come:

- the memory tools' JSON Schemas (:func:`tool_schema`; ``memlocal.faces.tools``) and so the MCP tool
  schemas (``memlocal.faces.mcp_server`` registers the tools' definitions);
- the REST request bodies and path/query types (``memlocal.faces.api``; the OpenAPI schema);
- the CLI's ``click.Choice`` lists (:func:`choices`; ``memlocal.faces.cli``).

Errors: a broken *rule* raises the library's ``ValidationError`` (or ``InputTooLargeError``)
straight through pydantic, which lets exceptions other than ``ValueError`` pass; a wrong *type*,
a missing or unknown field is pydantic's own ``ValidationError``, which each face words once
(:func:`describe_error`; REST answers it 422, the rules 400/413). Only the faces import this
module (it loads pydantic, which ``memlocal --help`` must not pay for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Callable, Final, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import CoreSchema, core_schema

from ..services.automation import AUTOMATION_ID_PATTERN, NOTE_MAX_BYTES, validate_automation_id
from ..errors import ValidationError
from ..model import (
    CATEGORIES,
    ID_PATTERN,
    OFFSET_MAX,
    PAGE_MAX_LIMIT,
    PROFILE_PATTERN,
    RAW_INPUT_MAX_BYTES,
    SUMMARY_MAX_CHARS,
    check_text,
    validate_category,
    validate_confidence,
    validate_id,
    validate_int,
    validate_min_score,
    validate_profile,
    validate_summary,
    validate_text_input,
)

__all__ = [
    "LIST_DEFAULT_LIMIT",
    "LIST_MAX_LIMIT",
    "PAGE_MAX_LIMIT",
    "RECALL_MAX_LIMIT",
    "AutomationId",
    "AutomationNoteInput",
    "Category",
    "Confidence",
    "DeleteInput",
    "InputModel",
    "ListInput",
    "MemoryId",
    "MinScore",
    "Offset",
    "PageLimit",
    "ProfileName",
    "RecallInput",
    "RestoreInput",
    "SaveInput",
    "choices",
    "describe_error",
    "tool_schema",
]

RECALL_MAX_LIMIT: Final = 50  # memory_recall: an agent's context is short
LIST_MAX_LIMIT: Final = 100  # memory_list
LIST_DEFAULT_LIMIT: Final = 20


# --- rules: a check and its schema facts, declared together ---------------------------------------


@dataclass(frozen=True)
class _Rule:
    """A rule of a field type: the check (run after pydantic's type check) and the JSON Schema
    facts that describe it, declared side by side from the same constants."""

    check: Callable[[Any], Any]
    facts: tuple[tuple[str, Any], ...]  # hashable: typing hashes Annotated metadata

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        json_schema = handler(schema)
        json_schema.update({key: list(value) if isinstance(value, tuple) else value for key, value in self.facts})
        return json_schema


def _rule(check: Callable[[Any], Any], **facts: Any) -> _Rule:
    return _Rule(check, tuple((key, tuple(v) if isinstance(v, list) else v) for key, v in facts.items()))


def _int_rule(name: str, low: int, high: int) -> _Rule:
    """An integer from ``low`` to ``high``: ``validate_int`` and ``minimum``/``maximum``."""
    return _rule(lambda value: validate_int(value, name, low, high), minimum=low, maximum=high)


def _free_text(what: str) -> Callable[[str], str]:
    return lambda text: validate_text_input(text, what)


def _query(text: str) -> str:
    if not check_text(text, "query"):
        raise ValidationError("query is empty")
    return text


ProfileName = Annotated[str, _rule(validate_profile, pattern=PROFILE_PATTERN)]
"""1-64 characters of ``A-Z a-z 0-9 . _ -``, not starting with ``.``."""
MemoryId = Annotated[str, _rule(validate_id, pattern=ID_PATTERN)]
"""``mem-`` and 8 lowercase hex digits."""
AutomationId = Annotated[str, _rule(validate_automation_id, pattern=AUTOMATION_ID_PATTERN)]
"""1-128 characters of ``A-Z a-z 0-9 . _ -``, starting with a letter or digit."""
Category = Annotated[str, _rule(validate_category, enum=list(CATEGORIES))]
Confidence = Annotated[float, _rule(validate_confidence, minimum=0, maximum=1)]
MinScore = Annotated[float, _rule(validate_min_score, minimum=0, maximum=1)]
Summary = Annotated[str, _rule(validate_summary, maxLength=SUMMARY_MAX_CHARS)]
RawInput = Annotated[str, _rule(_free_text("rawInput"), minLength=1)]
Content = Annotated[str, _rule(_free_text("content"), minLength=1)]
Query = Annotated[str, _rule(_query, minLength=1)]
PageLimit = Annotated[int, _int_rule("limit", 1, PAGE_MAX_LIMIT)]
Offset = Annotated[int, _int_rule("offset", 0, OFFSET_MAX)]
RecallLimit = Annotated[int, _int_rule("limit", 1, RECALL_MAX_LIMIT)]
ListLimit = Annotated[int, _int_rule("limit", 1, LIST_MAX_LIMIT)]


# --- the inputs -----------------------------------------------------------------------------------


class InputModel(BaseModel):
    """An input: camelCase names only (as every JSON face writes them), unknown fields refused,
    JSON types taken strictly (``"5"`` is not a number, ``true`` is not 1)."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_alias=True, validate_by_name=False, serialize_by_alias=True,
        extra="forbid", strict=True,
    )


class SaveInput(InputModel):
    """Save a memory about yourself or your work for future runs of this profile. Give rawInput
    (free text; the bank extracts structure) or content with an optional category, confidence and
    summary for a pre-structured save. Saving something already remembered returns the existing
    memory (deduplicated: true). If the result has proposedSupersedes, repeat the same save with
    supersedes set to that id to retire the old memory, or ignore it."""

    model_config = ConfigDict(json_schema_extra={"anyOf": [{"required": ["rawInput"]}, {"required": ["content"]}]})

    raw_input: RawInput | None = Field(
        None, description=f"Free text to remember, at most {RAW_INPUT_MAX_BYTES} bytes of UTF-8; structured by "
        "the LLM processor when one is configured.")
    content: Content | None = Field(
        None, description="Pre-structured, retrieval-friendly text of the memory (skips the LLM processor).")
    summary: Summary | None = Field(
        None, description=f"At most {SUMMARY_MAX_CHARS} characters, shown in lists (default: the first "
        f"{SUMMARY_MAX_CHARS} of the content).")
    category: Category | None = Field(
        None, description="preference and fact are always injected; behavior, context and general when "
        "relevant (default: general, or the LLM processor's choice).")
    confidence: Confidence | None = Field(None, description="How sure you are, 0 to 1 (default 1).")
    supersedes: MemoryId | None = Field(
        None, description="Id of one of your memories that this one replaces (it is outdated or wrong); the old "
        "one is no longer recalled.")
    auto_supersede: bool | None = Field(
        None, description="false: retire nothing on its own. By default a save that restates one of your memories' "
        "subject with a changed value (a number, time, date, version, name) supersedes it, and the result names it in "
        "superseded.")

    @model_validator(mode="after")
    def _one_text(self) -> "SaveInput":
        if self.raw_input is None and self.content is None:
            raise ValidationError("give rawInput or content")
        return self


class RecallInput(InputModel):
    """Search this profile's memories by topic. Returns only memories the query gives evidence
    for (shared words or topics), ranked: each result is lean (id, category, content, a summary
    when it says more than the content's start, the score to 3 decimals, a brief relevance
    breakdown: recency, usage, topic, confidence; and the words and topics it matched on). Set
    full to true for every field of each memory and the complete breakdown. Counts as a use of
    every memory returned."""

    query: Query = Field(description="What you are looking for.")
    limit: RecallLimit | None = Field(None, description="Most results to return (default: the recall.limit "
                                      "setting, 8).")
    min_score: MinScore | None = Field(None, description="Lowest score to return (default: the "
                                       "recall.min_score setting, 0.05).")
    full: bool = Field(False, description="true: each result carries the whole memory record (rawInput, "
                       "processedContent, times, counts, ...) and the complete breakdown (weights, maturity) "
                       "and evidence (strength).")


class ListInput(InputModel):
    """List this profile's active memories, newest first: each lean (id, category, content, a
    summary when it says more than the content's start, createdAt); set full to true for every
    field. Read-only: does not count as a use."""

    limit: ListLimit = Field(LIST_DEFAULT_LIMIT, description="Page size.")
    offset: Offset = Field(0, description="Memories to skip.")
    full: bool = Field(False, description="true: every field of each memory (rawInput, processedContent, "
                       "access counts, staleness, ...).")


class DeleteInput(InputModel):
    """Delete one of this profile's memories by id."""

    id: MemoryId = Field(description="The memory id (mem-<8 hex>).")


class RestoreInput(InputModel):
    """Undo an update: make a memory that a later save superseded (it restated the memory's subject
    with a new value) active again. The memory that replaced it stays active, without the link.
    Use it when the save was not an update of that memory."""

    id: MemoryId = Field(description="The superseded memory's id (mem-<8 hex>), as memory_save returned it in supersedes.")


class AutomationNoteInput(InputModel):
    """An automation's note: the JSON form of the body of ``PUT /api/automations/{id}/memory``."""

    memory: str | None = Field(
        description=f"The new note, at most {NOTE_MAX_BYTES} bytes of UTF-8, trimmed; \"\", null or blank "
        "text clears it.")


# --- what the faces derive -----------------------------------------------------------------------


def _clean(node: Any) -> Any:
    """A pydantic JSON Schema as a tool schema: no titles, an optional field as its own type (an
    argument that is not given is left out, never null), no ``"default": null``."""
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _clean(value) for key, value in node.items() if key != "title"}
    branches = out.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        rest = [b for b in branches if b != {"type": "null"}]
        del out["anyOf"]
        if len(rest) == 1:
            out = {**rest[0], **out}
        else:
            out["anyOf"] = rest
    if "default" in out and out["default"] is None:
        del out["default"]
    return out


def tool_schema(model: type[InputModel]) -> dict[str, Any]:
    """The JSON Schema of ``model`` in the form the Anthropic tool format and MCP take for a tool's
    input: a flat object schema (no ``$defs``, no titles, the description left to the tool),
    ``additionalProperties: false``, camelCase property names."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    if "$defs" in schema:  # pragma: no cover - the inputs are flat; a nested one needs inlining first
        raise TypeError(f"{model.__name__} has nested models; tool schemas must be flat")
    schema.pop("description", None)
    cleaned: dict[str, Any] = _clean(schema)
    return cleaned


def choices(model: type[InputModel], name: str) -> tuple[str, ...]:
    """The allowed values of the field ``name`` (its alias or its Python name) of ``model``."""
    properties = model.model_json_schema(by_alias=True)["properties"]
    prop = properties.get(name) or properties[to_camel(name)]
    for branch in (prop, *prop.get("anyOf", ())):
        if "enum" in branch:
            return tuple(branch["enum"])
    raise KeyError(f"{model.__name__}.{name} has no choices")


def describe_error(error: Mapping[str, Any], *, noun: str = "argument", accepted: Iterable[str] = ()) -> str:
    """One of pydantic's errors (a wrong type, a missing or unknown field) as a phrase naming the
    field; ``noun`` is what the face calls a field, ``accepted`` the names it takes."""
    where = ".".join(str(p) for p in error.get("loc", ()))
    kind = error.get("type")
    if kind == "extra_forbidden":
        allowed = ", ".join(accepted)
        return f"unknown {noun} {where!r}" + (f" (accepted: {allowed})" if allowed else "")
    if kind == "missing":
        return f"{where} is required"
    return f"{where + ': ' if where else ''}{error.get('msg')}"
