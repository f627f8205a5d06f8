"""A C0 control character (NUL, ESC, ...; all but tab and line breaks) in a memory's text is
refused with one line naming it and its position, on every face: the library, the CLI, REST, the
tools and MCP (``printf 'hello\\x00world' | memlocal save -`` stored ``hello world`` and exited 0).
Memories written before are kept: a bucket pull, and an import (an export's round trip)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from api_live import LiveServer
from support import http_client, mcp_in_process

from memlocal import MemoryBank, SaveRequest
from memlocal.faces.api import create_app
from memlocal.errors import ValidationError
from memlocal.bank.portability import import_jsonl
from memlocal.faces.tools import dispatch

NUL_AT_6 = "hello\x00world"


@pytest.mark.parametrize("kwargs", [{"raw_input": NUL_AT_6}, {"content": NUL_AT_6},
                                    {"content": "ok", "summary": "a\x1bb"}])
def test_the_library_refuses_a_control_character_naming_its_position(bank: MemoryBank, kwargs: Any) -> None:
    with pytest.raises(ValidationError, match=r"control character \(U\+00(00 NUL|1B ESC)\) at character (6|2)"):
        bank.save(SaveRequest("p", **kwargs))
    assert bank.stats()["totalMemories"] == 0


def test_tab_and_line_breaks_are_text(bank: MemoryBank) -> None:
    saved = bank.save(SaveRequest("p", content="a\tb\r\nc\nd"))
    assert saved.memory.processed_content == "a\tb\r\nc\nd"


def test_the_cli_refuses_a_nul_from_stdin_in_one_line(cli: Any) -> None:
    code, out, err = cli("save", "-p", "p", "-", input=NUL_AT_6)
    assert code == 1 and out == "", out
    assert err.strip() == "Error: rawInput holds a control character (U+0000 NUL) at character 6; " \
                          "only tab and line breaks are allowed"
    assert cli.json("stats", "--json")["totalMemories"] == 0


def test_the_tools_and_rest_refuse_it(bank: MemoryBank) -> None:
    with pytest.raises(ValidationError, match="at character 6"):
        dispatch(bank, "memory_save", {"content": NUL_AT_6}, "p")
    with LiveServer(create_app(bank)) as server, http_client(base_url=server.url) as client:
        r = client.post("/api/profiles/p/memories", json={"rawInput": NUL_AT_6})
        assert r.status_code == 400, r.text
        assert "control character (U+0000 NUL) at character 6" in r.json()["error"]["message"]
    assert bank.stats()["totalMemories"] == 0


def test_mcp_answers_it_as_a_tool_error(db_path: Path) -> None:
    MemoryBank(db_path).close()

    async def scenario() -> tuple[bool, str]:
        async with mcp_in_process(db_path, "p") as s:  # the tool's answer; the process is test_mcp's
            result = await s.call_tool("memory_save", {"content": NUL_AT_6})
            return bool(result.is_error), result.content[0].text  # type: ignore[union-attr]

    is_error, text = anyio.run(scenario)
    assert is_error and "control character (U+0000 NUL) at character 6" in text, text


def test_an_import_keeps_what_an_export_wrote(bank: MemoryBank, make_bank: Any) -> None:
    from memlocal.model import Memory

    older = Memory.from_dict({"id": "mem-0000000a", "profileName": "p", "rawInput": "a\x1b[1mbold", "summary": "x\x07y",
                              "createdAt": "2024-01-01T00:00:00Z"}, lenient=True)
    bank.store.upsert(older)  # as a pull (or a version before this rule) stored it
    exported = [json.dumps(m.to_dict()) for m in bank.export("p")]
    report = import_jsonl(make_bank(), io.StringIO("\n".join(exported)))
    assert (report.imported, report.rejected) == (1, [])


def test_a_pulled_object_keeps_its_control_characters(bank: MemoryBank) -> None:
    from memlocal.model import Memory

    pulled = Memory.from_dict({"id": "mem-0000000b", "profileName": "p", "rawInput": NUL_AT_6,
                               "createdAt": "2024-01-01T00:00:00Z"}, lenient=True)
    assert pulled.raw_input == NUL_AT_6
