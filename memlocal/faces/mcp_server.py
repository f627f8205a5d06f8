"""``memlocal mcp``: the memory tools over the Model Context Protocol (stdio), for one profile.

The server is a thin adapter: tool schemas come from :mod:`memlocal.faces.tools` (which derives them
from the input models of :mod:`memlocal.faces.inputs`, as the REST bodies are) and every call goes
through :func:`memlocal.faces.tools.dispatch` with the profile fixed at start-up, so no tool argument can
reach another profile. A prompt, ``memory_context``, returns the context block for a query so a
client can inject it. This is the only module that imports the ``mcp`` SDK.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from typing import Any, AsyncIterator

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from .. import __version__
from ..bank.facade import MemoryBank
from ..errors import MemoryBankError
from ..model import check_text, validate_profile
from .tools import dispatch, result_line, tool_definitions

log = logging.getLogger("memlocal.mcp")

CONTEXT_PROMPT = "memory_context"


def build_server(bank: MemoryBank, profile: str) -> Server[Any]:
    """An MCP server exposing the memory tools (``memlocal.faces.tools``: the spec's four and
    ``memory_restore``) and the context prompt for ``profile``."""
    validate_profile(profile)
    tools = [
        types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"])
        for t in tool_definitions()
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            # SQLite and the LLM processor block: keep them off the event loop.
            result = await anyio.to_thread.run_sync(dispatch, bank, params.name, params.arguments, profile)
        except MemoryBankError as exc:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"error: {exc}")],
                structured_content={"error": {"code": exc.code, "message": str(exc)}},
                is_error=True,
            )
        # The result once: as structured content, with one short line of text beside it (not the
        # same JSON again as text, which doubled every answer an agent's context paid for).
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result_line(params.name, result))],
            structured_content=result,
        )

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=CONTEXT_PROMPT,
                    description=(
                        f"The --- CONTEXT FROM MEMORY --- block of profile {profile} for a task: core "
                        "knowledge plus the memories relevant to the query. Prepend it to the task prompt."
                    ),
                    arguments=[types.PromptArgument(name="query", description="The task or question.", required=False)],
                )
            ]
        )

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != CONTEXT_PROMPT:
            raise ValueError(f"unknown prompt {params.name!r}: expected {CONTEXT_PROMPT}")
        query = (params.arguments or {}).get("query", "") or ""
        try:
            block = await anyio.to_thread.run_sync(bank.build_context_block, profile, query)
        except MemoryBankError as exc:
            raise ValueError(str(exc)) from None
        return types.GetPromptResult(
            description=f"memory context for profile {profile}",
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=block))],
        )

    return Server(
        "memlocal",
        version=__version__,
        instructions=(
            f"Long-lived memory of the agent profile {profile!r}. Use memory_recall before a task to "
            "find what earlier runs learned, memory_save for durable preferences, facts and behaviors, "
            "memory_list to browse, memory_delete to remove a wrong memory, memory_restore to undo a "
            "save that replaced a memory it should not have (its result names it in supersedes)."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


def _invalid_text(value: Any, where: str = "arguments") -> str | None:
    """The one-line reason ``value`` (parsed JSON) holds text that is not valid Unicode, if it does."""
    if isinstance(value, str):
        try:
            check_text(value, where)
        except MemoryBankError as exc:
            return str(exc)
    elif isinstance(value, dict):
        for key, item in value.items():
            reason = _invalid_text(key, where) or _invalid_text(item, f"{where}.{key}" if where != "arguments"
                                                                else str(key))
            if reason:
                return reason
    elif isinstance(value, list):
        for i, item in enumerate(value):
            reason = _invalid_text(item, f"{where}[{i}]")
            if reason:
                return reason
    return None


def _answer_unparsable(line: str) -> SessionMessage | None:
    """An answer to a request the SDK cannot parse because its JSON escapes a lone surrogate.

    The SDK's parser rejects such a line without answering, so the client would wait forever;
    Python's own JSON reader accepts it, which gives us the id to answer. A ``tools/call`` gets
    an error result like any other bad tool input, other requests a JSON-RPC invalid-params error.
    """
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or "method" not in data:
        return None
    if "id" not in data:
        return None  # a notification: JSON-RPC answers none
    request_id = data.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str)) or _invalid_text(request_id):
        # An id that cannot be echoed (a lone surrogate cannot be written as UTF-8): JSON-RPC's
        # answer to a request whose id cannot be read is an Invalid Request error with a null id.
        reason = _invalid_text(request_id, "the request id") or "the request id must be a string or an integer"
        return SessionMessage(types.JSONRPCError(
            jsonrpc="2.0", id=None, error=types.ErrorData(code=types.INVALID_REQUEST, message=reason)))
    params = data.get("params")
    if data.get("method") == "tools/call" and isinstance(params, dict):
        name = params.get("name") if isinstance(params.get("name"), str) and not _invalid_text(params["name"]) else "tool"
        reason = f"{name}: {_invalid_text(params.get('arguments')) or _invalid_text(params, 'params')}"
        result = types.CallToolResult(
            content=[types.TextContent(type="text", text=f"error: {reason}")],
            structured_content={"error": {"code": "invalid_input", "message": reason}},
            is_error=True,
        )
        return SessionMessage(types.JSONRPCResponse(
            jsonrpc="2.0", id=request_id, result=result.model_dump(by_alias=True, exclude_none=True)))
    reason = _invalid_text(params, "params") or "the request is not valid JSON-RPC"
    return SessionMessage(types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=types.INVALID_PARAMS, message=reason)))


class _GuardedLines:
    """Standard input as the SDK's reader consumes it (an async iterator of lines), answering
    the requests it could not parse (:func:`_answer_unparsable`) on the server's write stream."""

    def __init__(self, lines: Any) -> None:
        self._lines = lines
        self._reply: Any = None
        self._ready = anyio.Event()

    def attach(self, write_stream: Any) -> None:
        self._reply = write_stream
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._lines:
            if "\\u" in line:  # only a JSON escape can smuggle in a lone surrogate
                try:
                    types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception:
                    answer = _answer_unparsable(line)
                    if answer is not None:
                        await self._ready.wait()
                        await self._reply.send(answer)
                        continue
            yield line


def run_stdio(bank: MemoryBank, profile: str) -> None:
    """Serve ``profile``'s memory over stdin/stdout until the client closes the stream."""
    server = build_server(bank, profile)

    async def main() -> None:
        # Undecodable bytes become U+FFFD, as in the SDK's own reader.
        stdin = _GuardedLines(anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")))
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
            stdin.attach(write_stream)
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
