"""``memlocal mcp``: the memory tools over the Model Context Protocol (stdio), for one profile.

The server is a thin adapter: tool schemas come from :mod:`memlocal.tools` and every call goes
through :func:`memlocal.tools.dispatch` with the profile fixed at start-up, so no tool argument can
reach another profile. A prompt, ``memory_context``, returns the context block for a query so a
client can inject it. This is the only module that imports the ``mcp`` SDK.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from . import __version__
from .bank import MemoryBank
from .errors import MemoryBankError
from .model import validate_profile
from .tools import dispatch, tool_definitions

log = logging.getLogger("memlocal.mcp")

CONTEXT_PROMPT = "memory_context"


def build_server(bank: MemoryBank, profile: str) -> Server[Any]:
    """An MCP server exposing the four memory tools and the context prompt for ``profile``."""
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
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
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
            "memory_list to browse, memory_delete to remove a wrong memory."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


def run_stdio(bank: MemoryBank, profile: str) -> None:
    """Serve ``profile``'s memory over stdin/stdout until the client closes the stream."""
    server = build_server(bank, profile)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
