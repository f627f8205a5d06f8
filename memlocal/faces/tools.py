"""The memory tools as data an agent runtime can register, and their dispatcher: the spec's four
(save, recall, list, delete) and ``memory_restore``, the undo of an update (``MemoryBank.restore``).

Every tool acts on the *session's* profile: no tool takes a profile argument, and one that is
passed is rejected, so an agent of profile A can never read, list or delete profile B's memories.
The tools' descriptions and JSON Schemas come from their input models (``memlocal.faces.inputs``), the
one declaration of each input; ``dispatch`` validates the arguments with the same model, calls
:class:`memlocal.MemoryBank`, and returns a JSON-ready dict. The MCP server reuses it.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Final, Mapping

from pydantic import ValidationError as PydanticError

from ..errors import ValidationError, fold_whitespace
from ..humanize import plural, round_floats
from .inputs import (
    LIST_DEFAULT_LIMIT,
    LIST_MAX_LIMIT,
    RECALL_MAX_LIMIT,
    DeleteInput,
    InputModel,
    ListInput,
    RecallInput,
    RestoreInput,
    SaveInput,
    describe_error,
    tool_schema,
)
from ..model import MEMORY_TOOL_NAMES, RecallQuery, validate_profile
from ..bank.saving import SaveRequest

if TYPE_CHECKING:
    from ..bank.facade import MemoryBank
    from ..model import Memory
    from ..relevance.scoring import ScoredMemory

__all__ = [
    "LIST_DEFAULT_LIMIT",
    "LIST_MAX_LIMIT",
    "MEMORY_TOOL_NAMES",
    "RECALL_MAX_LIMIT",
    "TOOL_INPUTS",
    "TOOL_NAMES",
    "TOOLS",
    "dispatch",
    "lean_memory",
    "lean_result",
    "result_line",
    "tool_definitions",
    "validate_arguments",
]

# Each tool's input model (memlocal/faces/inputs.py): its docstring is the tool's description, its
# JSON Schema the tool's inputSchema, and it validates the arguments.
# The spec's four, then the undo of an update (a save that superseded a memory on its own,
# memlocal.hygiene.updates, says so in its result; memory_restore takes it back, as `memlocal restore`
# and REST's .../restore do).
TOOL_NAMES: Final = (*MEMORY_TOOL_NAMES, "memory_restore")
TOOL_INPUTS: Final[Mapping[str, type[InputModel]]] = dict(zip(
    TOOL_NAMES, (SaveInput, RecallInput, ListInput, DeleteInput, RestoreInput), strict=True))


def _description(model: type[InputModel]) -> str:
    return fold_whitespace(model.__doc__ or "")


TOOLS: Final[tuple[dict[str, Any], ...]] = tuple(
    {"name": name, "description": _description(model), "inputSchema": tool_schema(model)}
    for name, model in TOOL_INPUTS.items()
)


def tool_definitions() -> list[dict[str, Any]]:
    """The tools (name, description, inputSchema), as fresh copies a caller may modify."""
    return copy.deepcopy(list(TOOLS))


def validate_arguments(tool_name: str, arguments: object) -> InputModel:
    """The tool's input model read from ``arguments``; a one-line ``ValidationError`` (or
    ``InputTooLargeError``) naming the tool and the argument when they do not fit its schema."""
    model = TOOL_INPUTS.get(tool_name)
    if model is None:
        raise ValidationError(f"unknown tool {tool_name!r}: expected one of {', '.join(TOOL_NAMES)}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise ValidationError(f"{tool_name}: arguments must be a JSON object")
    for key, value in arguments.items():
        if "profile" in str(key).lower():
            raise ValidationError(
                f"{tool_name}: argument {key!r} is not accepted; memory tools act on the session's profile only"
            )
        if value is None:  # the schema has no null: an argument not given is left out
            raise ValidationError(f"{tool_name}: {key}: null is not accepted; leave the argument out")
    try:
        return model.model_validate(dict(arguments))
    except PydanticError as exc:
        accepted = [f.alias or name for name, f in model.model_fields.items()]
        reasons = "; ".join(describe_error(e, accepted=accepted) for e in exc.errors())
        raise ValidationError(f"{tool_name}: {reasons}") from None
    except ValidationError as exc:  # a rule of the library (memlocal.model), its class kept
        raise type(exc)(f"{tool_name}: {exc}") from None


# Decimals of the scores in a lean result: enough to order and compare them, short in a context.
LEAN_DIGITS: Final = 3


def lean_memory(memory: "Memory") -> dict[str, Any]:
    """What an agent needs of a memory: ``id``, ``category``, ``content`` (processedContent),
    ``summary`` only when it is not just the content's beginning, and ``createdAt``."""
    out: dict[str, Any] = {"id": memory.id, "category": memory.category, "content": memory.processed_content}
    if not fold_whitespace(memory.processed_content).startswith(fold_whitespace(memory.summary)):
        out["summary"] = memory.summary
    out["createdAt"] = memory.to_dict()["createdAt"]
    return out


def lean_result(scored: "ScoredMemory") -> dict[str, Any]:
    """One recall result for an agent's context: the memory (:func:`lean_memory`, without its
    time), the score and the breakdown's four signals to :data:`LEAN_DIGITS` decimals, and the
    evidence in brief (the query's terms and clusters it shares; its semantic similarity, if any)."""
    out = lean_memory(scored.memory)
    del out["createdAt"]
    b = scored.breakdown
    out["score"] = round(scored.score, LEAN_DIGITS)
    out["breakdown"] = round_floats({"recency": b.recency, "usage": b.usage, "topic": b.topic,
                                     "confidenceMul": b.confidence_mul}, LEAN_DIGITS)
    if scored.evidence is not None:
        e = scored.evidence
        evidence: dict[str, Any] = {"terms": list(e.terms), "clusters": list(e.clusters)}
        if e.semantic is not None:
            evidence["semantic"] = round(e.semantic, LEAN_DIGITS)
        out["evidence"] = evidence
    return out


def dispatch(
    bank: "MemoryBank", tool_name: str, arguments: Mapping[str, Any] | None, session_profile: str
) -> dict[str, Any]:
    """Run one memory tool for the session's profile and return its JSON-ready result.

    - ``memory_save`` -> ``{"memory": lean memory, "synced": bool, "deduplicated": bool, "redacted": [kinds],
      "proposedSupersedes": id | None}`` (:func:`lean_memory`: the agent wrote the memory, it needs
      its id and what was kept, not every stored field)
    - ``memory_recall`` -> ``{"results": [lean result, ...]}`` (:func:`lean_result`); with
      ``full: true``, ``{"results": [{"memory": {...}, "score": s, "breakdown": {...}, "evidence": {...}}]}``
      (marks every returned memory accessed)
    - ``memory_list`` -> ``{"memories": [lean memory, ...], "total": n, "limit": l, "offset": o}``
      (:func:`lean_memory`); with ``full: true`` every field of each memory
    - ``memory_delete`` -> ``{"deleted": id}`` (``NotFoundError`` if the session's profile has no such id)
    - ``memory_restore`` -> ``{"memory": lean memory}``, the restored one (``ValidationError`` when
      it is active, ``NotFoundError`` when the session's profile has no such id)
    """
    if not session_profile:
        raise ValidationError(f"{tool_name}: memory tools need a session with a profile")
    profile = validate_profile(session_profile)
    args = validate_arguments(tool_name, arguments)
    if isinstance(args, SaveInput):
        result = bank.save(SaveRequest(profile, args.raw_input, content=args.content, summary=args.summary,
                           category=args.category, confidence=args.confidence, supersedes=args.supersedes,
                           auto_supersede=args.auto_supersede))
        saved = lean_memory(result.memory)
        retired = args.supersedes or result.superseded
        if retired is not None:  # what the save retired, as the agent asked or on its own (an update)
            saved["supersedes"] = retired
        return {**result.to_dict(), "memory": saved}
    if isinstance(args, RecallInput):
        scored = bank.recall(RecallQuery(profile, args.query, args.limit, args.min_score))
        if args.full:
            return {"results": [round_floats(s.to_dict()) for s in scored]}
        return {"results": [lean_result(s) for s in scored]}
    if isinstance(args, ListInput):
        page = bank.list(profile, limit=args.limit, offset=args.offset, active_only=True)
        if args.full:
            return page.to_dict()
        return {"memories": [lean_memory(m) for m in page], "total": page.total, "limit": page.limit,
                "offset": page.offset}
    if isinstance(args, RestoreInput):
        return {"memory": lean_memory(bank.restore(profile, args.id))}
    assert isinstance(args, DeleteInput)
    deleted = bank.delete(profile, args.id)
    return {"deleted": deleted.id}


def result_line(tool_name: str, result: Mapping[str, Any]) -> str:
    """One short line saying what a tool did (``dispatch``'s ``result``), for a runtime that sends
    the result as structured data and wants a text beside it (the MCP server's ``content``)."""
    if tool_name == "memory_save":
        memory = result["memory"]
        line = (f"already saved as {memory['id']} ({memory['category']})" if result.get("deduplicated")
                else f"saved {memory['id']} ({memory['category']})")
        if memory.get("supersedes"):
            line += f", replacing {memory['supersedes']}"
        if result.get("redacted"):
            line += "; redacted: " + ", ".join(result["redacted"])
        if result.get("proposedSupersedes"):
            line += f"; it may replace {result['proposedSupersedes']} (save again with supersedes to retire it)"
        return line
    if tool_name == "memory_recall":
        found = result["results"]
        ids = [r["memory"]["id"] if "memory" in r else r["id"] for r in found]
        return f"{plural(len(ids), 'result')}" + (": " + ", ".join(ids) if ids else "")
    if tool_name == "memory_list":
        shown = len(result["memories"])
        return f"{shown} of {plural(result['total'], 'memory')}" + (f" from offset {result['offset']}" if result["offset"] else "")
    if tool_name == "memory_restore":
        return f"restored {result['memory']['id']}"
    return f"deleted {result['deleted']}"
