"""One declaration of each input (memlocal/faces/inputs.py): the tool JSON Schemas, the MCP tool schemas,
the REST bodies and parameters and the CLI's choices all come from the same models, and every face
rejects a broken rule with the library's own message."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import click
import jsonschema
import pytest
from api_live import LiveServer
import support
from support import http_client, mcp_in_process

from memlocal import BankNotWiredError, MemoryBank
from memlocal.faces.api import create_app
from memlocal.faces.cli import main
from memlocal.faces.cli._common import InputChoice
from memlocal.faces import inputs
from memlocal.errors import InputTooLargeError, ValidationError
from memlocal.faces.inputs import (
    AutomationNoteInput,
    DeleteInput,
    ListInput,
    RecallInput,
    RestoreInput,
    SaveInput,
    choices,
    tool_schema,
)
from memlocal.model import CATEGORIES, ID_PATTERN, PROFILE_PATTERN, validate_category, validate_confidence
from memlocal.faces.tools import TOOL_INPUTS, tool_definitions, validate_arguments

MODELS = {"memory_save": SaveInput, "memory_recall": RecallInput, "memory_list": ListInput,
          "memory_delete": DeleteInput, "memory_restore": RestoreInput}
# The JSON Schema words that state a rule (the rest is documentation).
RULE_WORDS = ("type", "enum", "pattern", "minimum", "maximum", "minLength", "maxLength")


def _rules(prop: dict[str, Any]) -> dict[str, Any]:
    """A property's rules, with the null alternative of an optional REST field folded away."""
    branches = [b for b in prop.get("anyOf", [prop]) if b != {"type": "null"}]
    assert len(branches) == 1, prop
    return {k: v for k, v in {**prop, **branches[0]}.items() if k in RULE_WORDS}


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    return create_app(BankNotWiredError("schema only")).openapi()


def test_tool_definitions_are_the_models(openapi: dict[str, Any]) -> None:
    assert dict(TOOL_INPUTS) == MODELS
    for tool in tool_definitions():
        model = MODELS[tool["name"]]
        assert tool["inputSchema"] == tool_schema(model)
        assert tool["description"] == " ".join((model.__doc__ or "").split())
        assert set(tool["inputSchema"]["properties"]) == {f.alias for f in model.model_fields.values()}
        assert "$defs" not in tool["inputSchema"] and "title" not in str(tool["inputSchema"])
    assert tool_schema(SaveInput)["properties"]["category"]["enum"] == list(CATEGORIES)
    assert tool_schema(DeleteInput)["properties"]["id"]["pattern"] == ID_PATTERN


def test_rest_bodies_and_parameters_are_the_models(openapi: dict[str, Any]) -> None:
    body = openapi["components"]["schemas"]["MemoryCreateRequest"]
    tool = tool_schema(SaveInput)
    assert set(body["properties"]) == set(tool["properties"])
    for name, prop in body["properties"].items():
        assert _rules(prop) == _rules(tool["properties"][name]), name
    assert body["anyOf"] == tool["anyOf"] and body["additionalProperties"] is False

    paths = openapi["paths"]
    note = paths["/api/automations/{id}/memory"]["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert note == AutomationNoteInput.model_json_schema(by_alias=True)

    def param(path: str, method: str, name: str) -> dict[str, Any]:
        [p] = [p for p in paths[path][method]["parameters"] if p["name"] == name]
        return _rules(p["schema"])

    assert param("/api/profiles/{name}/memories/{id}", "get", "name")["pattern"] == PROFILE_PATTERN
    assert param("/api/profiles/{name}/memories/{id}", "delete", "id") == _rules(tool_schema(DeleteInput)["properties"]["id"])
    assert param("/api/profiles/{name}/memories/{id}/restore", "post", "id") == \
        _rules(tool_schema(RestoreInput)["properties"]["id"])
    assert param("/api/profiles/{name}/memories", "get", "category") == _rules(tool["properties"]["category"])
    assert param("/api/memory-bank", "get", "category")["enum"] == list(CATEGORIES)
    assert param("/api/profiles/{name}/memories/search", "get", "minScore") == \
        _rules(tool_schema(RecallInput)["properties"]["minScore"])


def test_mcp_tool_schemas_are_the_models(tmp_path: Path) -> None:
    # The server in this process (what it lists; the process is tests/test_mcp.py's); the MCP SDK
    # is imported by mcp_in_process, not at collection (about a second, in every xdist worker).
    async def listed() -> dict[str, Any]:
        async with mcp_in_process(tmp_path / "m.db", "a") as session:
            return {t.name: (t.description, t.input_schema) for t in (await session.list_tools()).tools}

    tools = anyio.run(listed)
    assert tools == {t["name"]: (t["description"], t["inputSchema"]) for t in tool_definitions()}


def test_cli_choices_come_from_the_models() -> None:
    ctx = click.Context(main)
    commands = [main.get_command(ctx, name) for name in main.list_commands(ctx)]  # lazily loaded
    choice_params = [(cmd.name, p) for cmd in commands if isinstance(cmd, click.Command)
                     for p in cmd.params if isinstance(p.type, click.Choice)]
    assert choice_params, "no CLI option has choices"
    for name, p in choice_params:  # never a hand-written list again
        assert isinstance(p.type, InputChoice), f"memlocal {name} {p.opts[0]}: use InputChoice"
        # the choices a command checks without loading pydantic are the model's
        assert tuple(p.type.choices) == choices(getattr(inputs, p.type.model), p.type.field)
    [category] = [p for name, p in choice_params if name == "save" and p.name == "category"]
    assert tuple(category.type.choices) == choices(SaveInput, "category") == CATEGORIES


def test_start_up_does_not_load_pydantic() -> None:
    code = ("import sys\nfrom memlocal.faces.cli import main\ntry:\n    main(['save', '--help'], prog_name='memlocal')\n"
            "except SystemExit:\n    pass\nprint('pydantic' in sys.modules)")
    out = support.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "--category [preference|fact|behavior|context|general]" in out  # the choices, loaded for help
    code = "import sys\nfrom memlocal.faces.cli import main\nprint('pydantic' in sys.modules)"
    assert support.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60).stdout.strip() == "False"


# Arguments whose verdict JSON Schema can state; the published schema and the model must agree.
CORPUS: list[tuple[str, dict[str, Any]]] = [
    ("memory_save", {"content": "x"}), ("memory_save", {"rawInput": "x", "content": "y"}),
    ("memory_save", {"rawInput": "x", "category": "fact", "confidence": 0, "summary": "s" * 50}),
    ("memory_save", {"content": "x", "confidence": 1}), ("memory_save", {}), ("memory_save", {"summary": "x"}),
    ("memory_save", {"content": ""}), ("memory_save", {"content": "x", "confidence": 1.01}),
    ("memory_save", {"content": "x", "confidence": -0.5}), ("memory_save", {"content": "x", "confidence": "1"}),
    ("memory_save", {"content": "x", "confidence": True}), ("memory_save", {"content": "x", "category": "Fact"}),
    ("memory_save", {"content": "x", "summary": "s" * 51}), ("memory_save", {"content": 5}),
    ("memory_save", {"content": "x", "raw_input": "y"}), ("memory_save", {"content": "x", "tags": []}),
    ("memory_save", {"content": "x", "supersedes": "mem-0123abcd"}), ("memory_save", {"content": "x", "supersedes": "42"}),
    ("memory_recall", {"query": "q"}), ("memory_recall", {"query": "q", "limit": 50, "minScore": 1}),
    ("memory_recall", {"query": ""}), ("memory_recall", {"query": "q", "limit": 51}),
    ("memory_recall", {"query": "q", "limit": 0}), ("memory_recall", {"query": "q", "minScore": 1.5}),
    ("memory_recall", {"query": "q", "min_score": 0.5}), ("memory_recall", {"limit": 3}),
    ("memory_list", {}), ("memory_list", {"limit": 100, "offset": 10**6}), ("memory_list", {"limit": 101}),
    ("memory_list", {"offset": -1}), ("memory_list", {"limit": "20"}),
    ("memory_delete", {"id": "mem-0123abcd"}), ("memory_delete", {"id": "mem-0123ABCD"}),
    ("memory_delete", {"id": "mem-0123abcd0"}), ("memory_delete", {}), ("memory_delete", {"id": 7}),
]


@pytest.mark.parametrize(("tool", "args"), CORPUS)
def test_the_published_schema_and_the_model_agree(tool: str, args: dict[str, Any]) -> None:
    [schema] = [t["inputSchema"] for t in tool_definitions() if t["name"] == tool]
    published = jsonschema.Draft202012Validator(schema).is_valid(args)
    try:
        validate_arguments(tool, args)
        accepted = True
    except ValidationError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{tool}: ")
        accepted = False
    assert accepted == published


def test_the_model_is_stricter_than_json_schema_only_where_it_cannot_say() -> None:
    """Byte caps, blank text and lone surrogates are rules JSON Schema cannot state: the schema
    lets them through, the model refuses them with the library's message."""
    for args, error, message in (({"rawInput": "é" * 2049}, InputTooLargeError, "4098 bytes of UTF-8"),
                                 ({"content": "   "}, ValidationError, "content is empty"),
                                 ({"content": "x\ud800"}, ValidationError, "not valid Unicode")):
        with pytest.raises(error, match=message):
            validate_arguments("memory_save", args)


def test_every_face_words_a_broken_rule_as_the_library_does(bank: MemoryBank) -> None:
    """The same rule, the same message: the tool, REST (400) and the bank itself."""
    messages = []
    for check, value, args in ((validate_category, "gossip", {"content": "x", "category": "gossip"}),
                               (validate_confidence, 1.5, {"content": "x", "confidence": 1.5})):
        with pytest.raises(ValidationError) as library:
            check(value)
        with pytest.raises(ValidationError) as tool:
            validate_arguments("memory_save", args)
        assert str(tool.value) == f"memory_save: {library.value}"
        messages.append((str(library.value), args))
    with LiveServer(create_app(bank)) as server, http_client(base_url=server.url) as client:
        for message, args in messages:
            r = client.post("/api/profiles/a/memories", json=args)
            assert (r.status_code, r.json()["error"]["message"]) == (400, message)
        r = client.get("/api/memory-bank", params={"category": "gossip"})
        assert (r.status_code, r.json()["error"]["message"]) == (400, messages[0][0])
        r = client.post("/api/profiles/a/memories", json={"content": "x", "confidence": "high"})
        assert r.status_code == 422 and "confidence" in r.json()["error"]["message"]
        r = client.post("/api/profiles/a/memories", json={"raw_input": "x"})  # the JSON names only
        assert r.status_code == 422 and "raw_input" in r.json()["error"]["message"]
    assert bank.stats()["totalMemories"] == 0
