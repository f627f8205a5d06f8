"""The four memory tools as data an agent runtime can register, and their dispatcher.

Every tool acts on the *session's* profile: no tool takes a profile argument, and one that is
passed is rejected, so an agent of profile A can never read, list or delete profile B's memories.
``dispatch`` validates the arguments against the tool's JSON Schema (the ``jsonschema`` library,
imported on first use), calls :class:`memlocal.MemoryBank`, and returns a JSON-ready dict. The
REST API and the MCP server reuse it.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Final, Mapping

from .errors import ValidationError
from .model import CATEGORIES, ID_PATTERN, MEMORY_TOOL_NAMES, RAW_INPUT_MAX_BYTES, SUMMARY_MAX_CHARS, validate_profile

if TYPE_CHECKING:
    from .bank import MemoryBank

RECALL_MAX_LIMIT: Final = 50
LIST_MAX_LIMIT: Final = 100
LIST_DEFAULT_LIMIT: Final = 20

TOOLS: Final[tuple[dict[str, Any], ...]] = (
    {
        "name": "memory_save",
        "description": (
            "Save a memory about yourself or your work for future runs of this profile. Give "
            "rawInput (free text; the bank extracts structure) or content with an optional "
            "category, confidence and summary for a pre-structured save. Saving something already "
            "remembered returns the existing memory (deduplicated: true). If the result has "
            "proposedSupersedes, repeat the same save with supersedes set to that id to retire the "
            "old memory, or ignore it."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "rawInput": {
                    "type": "string", "minLength": 1,
                    "description": f"Free text to remember, at most {RAW_INPUT_MAX_BYTES} bytes of UTF-8.",
                },
                "content": {
                    "type": "string", "minLength": 1,
                    "description": "Pre-structured, retrieval-friendly text of the memory.",
                },
                "category": {
                    "type": "string", "enum": list(CATEGORIES),
                    "description": ("preference and fact are always injected; behavior, context and "
                                    "general when relevant."),
                },
                "confidence": {"type": "number", "minimum": 0, "maximum": 1,
                               "description": "How sure you are, 0 to 1 (default 1)."},
                "summary": {"type": "string", "maxLength": SUMMARY_MAX_CHARS,
                            "description": f"At most {SUMMARY_MAX_CHARS} characters, shown in lists."},
                "supersedes": {"type": "string", "pattern": "^mem-[0-9a-f]{8}$",
                               "description": ("Id of one of your memories that this one replaces (it is "
                                               "outdated or wrong); the old one is no longer recalled.")},
            },
            "anyOf": [{"required": ["rawInput"]}, {"required": ["content"]}],
            "additionalProperties": False,
        },
    },
    {
        "name": "memory_recall",
        "description": (
            "Search this profile's memories by topic. Returns only memories the query gives evidence "
            "for (shared words or topics), ranked, each with the relevance breakdown (recency, usage, "
            "topic, confidence) and the evidence it matched on. Counts as a use of every memory returned."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What you are looking for."},
                "limit": {"type": "integer", "minimum": 1, "maximum": RECALL_MAX_LIMIT, "default": 8,
                          "description": "Most results to return."},
                "minScore": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.05,
                             "description": "Lowest score to return."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    {
        "name": "memory_list",
        "description": ("List this profile's active memories, newest first. Read-only: does not count "
                        "as a use."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": LIST_MAX_LIMIT,
                          "default": LIST_DEFAULT_LIMIT, "description": "Page size."},
                "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Memories to skip."},
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "memory_delete",
        "description": "Delete one of this profile's memories by id.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": ID_PATTERN, "description": "The memory id (mem-<8 hex>)."},
            },
            "required": ["id"],
            "additionalProperties": False,
        },
    },
)

_BY_NAME: Final = {t["name"]: t for t in TOOLS}


def tool_definitions() -> list[dict[str, Any]]:
    """The four tools (name, description, inputSchema), as fresh copies a caller may modify."""
    return copy.deepcopy(list(TOOLS))


_validators: dict[str, Any] = {}


def validate_arguments(tool_name: str, arguments: object) -> dict[str, Any]:
    """Check ``arguments`` against the tool's schema; raise a one-line ``ValidationError``."""
    tool = _BY_NAME.get(tool_name)  # type: ignore[arg-type]
    if tool is None:
        raise ValidationError(f"unknown tool {tool_name!r}: expected one of {', '.join(MEMORY_TOOL_NAMES)}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise ValidationError(f"{tool_name}: arguments must be a JSON object")
    for key in arguments:
        if "profile" in str(key).lower():
            raise ValidationError(
                f"{tool_name}: argument {key!r} is not accepted; memory tools act on the session's profile only"
            )
    validator = _validators.get(tool_name)
    if validator is None:
        import jsonschema  # third-party, loaded only when a tool is dispatched

        validator = _validators[tool_name] = jsonschema.Draft202012Validator(tool["inputSchema"])
        validator.check_schema(tool["inputSchema"])
    args = dict(arguments)
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(args))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "anyOf" and tool_name == "memory_save":
            message = "give rawInput or content"
        elif error.validator == "additionalProperties":
            allowed = ", ".join(tool["inputSchema"]["properties"])
            message = f"{error.message} (accepted: {allowed})"
        else:
            message = error.message
        raise ValidationError(f"{tool_name}: {where + ': ' if where else ''}{message}")
    return args


def dispatch(
    bank: "MemoryBank", tool_name: str, arguments: Mapping[str, Any] | None, session_profile: str
) -> dict[str, Any]:
    """Run one memory tool for the session's profile and return its JSON-ready result.

    - ``memory_save`` -> ``{"memory": {...}, "synced": bool, "deduplicated": bool, "redacted": [kinds],
      "proposedSupersedes": id | None}``
    - ``memory_recall`` -> ``{"results": [{"memory": {...}, "score": s, "breakdown": {...}, "evidence": {...}}]}``
      (marks every returned memory accessed)
    - ``memory_list`` -> ``{"memories": [...], "total": n, "limit": l, "offset": o}``
    - ``memory_delete`` -> ``{"deleted": id}`` (``NotFoundError`` if the session's profile has no such id)
    """
    if not session_profile:
        raise ValidationError(f"{tool_name}: memory tools need a session with a profile")
    profile = validate_profile(session_profile)
    args = validate_arguments(tool_name, arguments)
    if tool_name == "memory_save":
        result = bank.save(
            profile,
            args.get("rawInput"),
            content=args.get("content"),
            summary=args.get("summary"),
            category=args.get("category"),
            confidence=args.get("confidence"),
            supersedes=args.get("supersedes"),
        )
        return result.to_dict()
    if tool_name == "memory_recall":
        scored = bank.recall(profile, args["query"], limit=args.get("limit"), min_score=args.get("minScore"))
        return {"results": [s.to_dict() for s in scored]}
    if tool_name == "memory_list":
        page = bank.list(profile, limit=args.get("limit", LIST_DEFAULT_LIMIT), offset=args.get("offset", 0),
                         active_only=True)
        return page.to_dict()
    deleted = bank.delete(profile, args["id"])
    return {"deleted": deleted.id}
