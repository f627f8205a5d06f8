"""memlocal behind Claude's memory tool (memlocal.integrations.claude).

The oracle is the SDK's own ``BetaLocalFilesystemMemoryTool`` on a temporary folder: a seeded
script of hundreds of commands (nested paths, edits, renames, deletes, every error, traversal
attempts) must get the same result text from both, and leave the same files. Then a tool-runner
loop against the fake Messages API (tests/anthropic_fake.py) saves and finds memories.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from anthropic_fake import FAKE_KEY, FakeAnthropic, Reply

from memlocal import MemoryBank, RecallQuery, SaveRequest

if TYPE_CHECKING:
    from anthropic.lib.tools import ToolError
    from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool

    from memlocal.integrations.claude import (FILE_FIELD, MemlocalAsyncMemoryTool, MemlocalMemoryTool,
                                              category_for_path)

PROFILE = "claude"


@pytest.fixture(autouse=True, scope="module")
def _the_sdk() -> None:
    """Import the anthropic SDK (about 3 s of CPU) and the integration when this module's first
    test runs: at module level every xdist worker paid for it while collecting, whether or not
    it ran a test of this module."""
    global ToolError, BetaLocalFilesystemMemoryTool, FILE_FIELD, MemlocalAsyncMemoryTool, MemlocalMemoryTool
    global category_for_path
    from anthropic.lib.tools import ToolError
    from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool

    from memlocal.integrations.claude import (FILE_FIELD, MemlocalAsyncMemoryTool, MemlocalMemoryTool,
                                              category_for_path)


def outcome(tool: Any, command: dict[str, Any]) -> tuple[str, str]:
    """What the tool runner would send back: the text, or the error's content, or the repr of
    any other exception (which is what the runner shows for it)."""
    try:
        return "ok", tool.call(command)
    except ToolError as exc:
        return "error", str(exc.content)
    except Exception as exc:  # noqa: BLE001 - the runner shows every exception's repr
        return "raised", repr(exc)


# --- the generated script ---------------------------------------------------------------------

NAMES = ["notes.md", "prefs.md", "a", "b", "deep", "x.txt", ".hidden", "my file.md", "ünï.md", "c"]
TRAVERSALS = ["/memories/../etc/passwd", "/memories/a/../../x.md", "/etc/passwd", "memories/x.md",
              "/memories/..", "/memories/./a/../../../tmp", "/Memories/x.md", "", "/memories/../memories/t.md",
              "/memoriesfoo/x.md", "/memories/./a/./b.md", "/memories//a//n.md", "/memories/a/..", "/memories/",
              "/memories"]
SYLLABLES = ["ka", "zo", "rim", "vel", "tu", "qua", "nex", "bor", "lis", "fen", "dra", "mo", "pix", "sul"]


class Script:
    """Commands drawn with a seeded RNG, aimed at the current files (read from the oracle's
    folder, so the script is the same whatever the backend does)."""

    def __init__(self, seed: int, root: Path) -> None:
        self.rng = random.Random(seed)
        self.root = root
        self.words = 0

    def word(self) -> str:
        # Pseudo-words unique to the run: no two files' texts repeat each other (the bank would
        # refuse a duplicate, which a disk does not; that rule has its own test).
        self.words += 1
        return "".join(self.rng.choice(SYLLABLES) for _ in range(3)) + str(self.words)

    def text(self) -> str:
        r = self.rng.random()
        if r < 0.06:
            return self.rng.choice(["", "\n", "   ", "\n\n"])
        lines = [" ".join(self.word() for _ in range(self.rng.randint(1, 6))) for _ in range(self.rng.randint(1, 6))]
        if self.rng.random() < 0.3:
            lines.insert(self.rng.randrange(len(lines) + 1), "- repeated line")
            lines.insert(self.rng.randrange(len(lines) + 1), "- repeated line")
        body = "\n".join(lines)
        return body + ("\n" if self.rng.random() < 0.6 else "")

    def existing(self) -> tuple[list[str], list[str]]:
        files, dirs = [], []
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            base = "/memories" + ("" if rel == "." else "/" + rel)
            dirs.append(base)
            files += [f"{base}/{f}" for f in filenames]
        return sorted(files), sorted(dirs)

    def new_path(self) -> str:
        depth = self.rng.choice([1, 1, 2, 2, 3])
        return "/memories/" + "/".join(self.rng.choice(NAMES) for _ in range(depth))

    def any_path(self) -> str:
        files, dirs = self.existing()
        r = self.rng.random()
        if r < 0.45 and files:
            return self.rng.choice(files)
        if r < 0.6:
            return self.rng.choice(dirs)
        if r < 0.7:
            return self.rng.choice(TRAVERSALS)
        if r < 0.75 and files:
            return self.rng.choice(files) + "/" + self.rng.choice(NAMES)  # below a file
        if r < 0.8:
            return self.rng.choice(dirs) + "/"
        return self.new_path()

    def content(self, path: str) -> str:
        try:
            return (self.root / path[len("/memories/"):]).read_text(encoding="utf-8")
        except (OSError, ValueError):
            return ""

    def command(self) -> dict[str, Any]:
        kind = self.rng.choices(["create", "view", "str_replace", "insert", "rename", "delete"],
                                weights=[28, 20, 18, 12, 12, 10])[0]
        if kind == "create":
            path = self.new_path() if self.rng.random() < 0.8 else self.any_path()
            return {"command": "create", "path": path, "file_text": self.text()}
        if kind == "view":
            cmd: dict[str, Any] = {"command": "view", "path": self.any_path()}
            if self.rng.random() < 0.3:
                cmd["view_range"] = [self.rng.randint(-2, 6), self.rng.choice([-1, 0, 1, 2, 4, 9])]
            return cmd
        if kind == "str_replace":
            path = self.any_path()
            text = self.content(path)
            r = self.rng.random()
            if text and r < 0.55:
                start = self.rng.randrange(len(text))
                old = text[start:start + self.rng.randint(1, 25)]
            elif r < 0.7:
                old = "- repeated line"
            elif r < 0.8:
                old = ""
            else:
                old = self.word()
            new = self.rng.choice(["", self.word(), f"{self.word()}\n{self.word()}", "- repeated line"])
            return {"command": "str_replace", "path": path, "old_str": old, "new_str": new}
        if kind == "insert":
            path = self.any_path()
            n = len(self.content(path).split("\n"))
            return {"command": "insert", "path": path, "insert_line": self.rng.randint(-1, n + 1),
                    "insert_text": self.rng.choice([self.word(), self.word() + "\n", f"{self.word()}\n{self.word()}",
                                                    "", "\n"])}
        if kind == "rename":
            old = self.any_path()
            r = self.rng.random()
            files, dirs = self.existing()
            if r < 0.6:
                new = self.new_path()
            elif r < 0.75:
                new = self.rng.choice(files + dirs)  # the destination exists
            elif r < 0.85:
                new = old.rstrip("/") + "/" + self.rng.choice(NAMES)  # into itself, or below a file
            else:
                new = self.rng.choice(TRAVERSALS)
            return {"command": "rename", "old_path": old, "new_path": new}
        return {"command": "delete", "path": self.any_path()}


def disk_files(root: Path) -> dict[str, str]:
    out = {}
    for path in root.rglob("*"):
        if path.is_file():
            out[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
    return out


def bank_files(bank: MemoryBank) -> dict[str, str]:
    return {m.extra[FILE_FIELD][len("/memories/"):]: m.processed_content
            for m in bank.store.iter_profile(PROFILE, active_only=True) if FILE_FIELD in m.extra}


@pytest.mark.parametrize("seed", [1])
def test_every_command_answers_as_the_sdk_local_filesystem_tool_does(seed: int, disk_tmp_path: Path,
                                                                    bank: MemoryBank) -> None:
    oracle = BetaLocalFilesystemMemoryTool(base_path=str(disk_tmp_path / "disk"))  # a disk's 4K directories
    root = disk_tmp_path / "disk" / "memories"
    ours = MemlocalMemoryTool(bank, PROFILE)
    script = Script(seed, root)
    kinds: dict[tuple[str, str], int] = {}
    for step in range(300):
        command = script.command()
        expected = outcome(oracle, command)
        got = outcome(ours, command)
        assert got == expected, f"step {step}: {command}"
        first_line = expected[1].split("\n", 1)[0]
        kinds[(command["command"], expected[0] if expected[0] == "ok" else first_line.split(" ")[0])] = 1
    # Same files, same texts; every file with text is an active memory of the profile.
    on_disk = disk_files(root)
    seen = ours.view(_view("/memories"))
    assert seen == oracle.view(_view("/memories"))
    assert bank_files(bank) == {k: v for k, v in on_disk.items() if v.strip()}
    # The script did reach the errors, not only the happy paths.
    assert {("create", "ok"), ("view", "ok"), ("str_replace", "ok"), ("insert", "ok"), ("rename", "ok"),
            ("delete", "ok")} <= set(kinds)
    assert len({k for k in kinds if k[1] != "ok"}) >= 12


def _view(path: str) -> Any:
    from anthropic.types.beta import BetaMemoryTool20250818ViewCommand

    return BetaMemoryTool20250818ViewCommand(command="view", path=path)


def test_every_error_text_is_the_sdk_tools(disk_tmp_path: Path, bank: MemoryBank) -> None:
    """One command for each error the SDK tool can give, against both."""
    oracle = BetaLocalFilesystemMemoryTool(base_path=str(disk_tmp_path / "disk"))
    ours = MemlocalMemoryTool(bank, PROFILE)
    script = [
        {"command": "create", "path": "/memories/user/prefs.md", "file_text": "likes tea\n- x\n- x\n"},
        {"command": "create", "path": "/memories/user/prefs.md", "file_text": "again"},
        {"command": "create", "path": "/memories/user/prefs.md/x.md", "file_text": "below a file"},
        {"command": "create", "path": "/memories/user/prefs.md/y/x.md", "file_text": "below a file"},
        {"command": "create", "path": "/memories", "file_text": "the root"},
        {"command": "create", "path": "/memories/user", "file_text": "a directory"},
        {"command": "create", "path": "/tmp/x.md", "file_text": "outside"},
        {"command": "create", "path": "/memories/../x.md", "file_text": "outside"},
        {"command": "view", "path": "/memories/none.md"},
        {"command": "view", "path": "/memories/user/prefs.md/x"},
        {"command": "view", "path": "/memories/user/prefs.md", "view_range": [2, -1]},
        {"command": "view", "path": "/memories/user/"},
        {"command": "str_replace", "path": "/memories/user/prefs.md", "old_str": "coffee", "new_str": "x"},
        {"command": "str_replace", "path": "/memories/user/prefs.md", "old_str": "- x", "new_str": "y"},
        {"command": "str_replace", "path": "/memories/user", "old_str": "a", "new_str": "b"},
        {"command": "str_replace", "path": "/memories/gone.md", "old_str": "a", "new_str": "b"},
        {"command": "insert", "path": "/memories/user/prefs.md", "insert_line": 9, "insert_text": "z"},
        {"command": "insert", "path": "/memories/user/prefs.md", "insert_line": -1, "insert_text": "z"},
        {"command": "insert", "path": "/memories/user", "insert_line": 0, "insert_text": "z"},
        {"command": "insert", "path": "/memories/gone.md", "insert_line": 0, "insert_text": "z"},
        {"command": "delete", "path": "/memories"},
        {"command": "delete", "path": "/memories/gone.md"},
        {"command": "delete", "path": "/memories/../../etc"},
        {"command": "rename", "old_path": "/memories", "new_path": "/memories/r"},
        {"command": "rename", "old_path": "/memories/gone.md", "new_path": "/memories/new/here.md"},
        {"command": "view", "path": "/memories"},  # the failed rename left new/ behind, as mkdir -p does
        {"command": "rename", "old_path": "/memories/user/prefs.md", "new_path": "/memories/user"},
        {"command": "rename", "old_path": "/memories/user", "new_path": "/memories/user/inner"},
        {"command": "rename", "old_path": "/memories/user/prefs.md", "new_path": "/memories/user/prefs.md/x"},
        {"command": "rename", "old_path": "/memories/user/prefs.md/x", "new_path": "/memories/q.md"},
        {"command": "rename", "old_path": "/memories/nowhere/x", "new_path": "/memories/user/prefs.md/x"},
        {"command": "rename", "old_path": "/memories/user/prefs.md", "new_path": "/etc/x"},
        {"command": "rename", "old_path": "/memories/user", "new_path": "/memories/people/me"},
        {"command": "view", "path": "/memories"},
        {"command": "delete", "path": "/memories/people"},
        {"command": "view", "path": "/memories"},
    ]
    for command in script:
        assert outcome(ours, command) == outcome(oracle, command), command


def test_a_file_is_a_ranked_memory_and_an_edit_a_new_version(bank: MemoryBank) -> None:
    tool = MemlocalMemoryTool(bank, PROFILE)
    tool.call({"command": "create", "path": "/memories/preferences/food.md",
               "file_text": "Ana is allergic to peanuts\nShe prefers green tea\n"})
    [hit] = bank.recall(RecallQuery(PROFILE, "what should Ana eat for lunch?"))
    assert hit.memory.category == "preference" and hit.memory.extra[FILE_FIELD] == "/memories/preferences/food.md"
    tool.call({"command": "str_replace", "path": "/memories/preferences/food.md", "old_str": "green", "new_str": "mint"})
    [now] = [m for m in bank.list(PROFILE, active_only=True)]
    assert "mint tea" in now.processed_content and now.supersedes == hit.memory.id
    assert [m.id for m in bank.history(PROFILE, now.id)] == [hit.memory.id, now.id]
    assert "@memory" and "mint tea" in bank.inject(PROFILE, ["@memory"], "Plan Ana's lunch")
    tool.call({"command": "rename", "old_path": "/memories/preferences", "new_path": "/memories/facts"})
    [moved] = bank.list(PROFILE, active_only=True)
    assert moved.category == "fact" and moved.extra[FILE_FIELD] == "/memories/facts/food.md"
    tool.call({"command": "delete", "path": "/memories/facts/food.md"})
    assert bank.list(PROFILE).total == 0  # the file's earlier versions went with it
    assert tool.call({"command": "view", "path": "/memories"}).endswith("4K\t/memories/facts/")


def test_what_a_memory_cannot_hold_is_refused_and_nothing_changes(bank: MemoryBank) -> None:
    tool = MemlocalMemoryTool(bank, PROFILE)
    with pytest.raises(ToolError, match="at most 4096 bytes"):
        tool.call({"command": "create", "path": "/memories/big.md", "file_text": "x" * 4097})
    tool.call({"command": "create", "path": "/memories/a.md", "file_text": "The deploy key rotates every Monday"})
    with pytest.raises(ToolError, match=r"repeats memory mem-[0-9a-f]{8} \(/memories/a.md\)"):
        tool.call({"command": "create", "path": "/memories/b.md", "file_text": "The deploy key rotates every Monday"})
    saved = bank.save(SaveRequest(PROFILE, content="Prefers answers in French"))
    with pytest.raises(ToolError, match="saved outside /memories"):
        tool.call({"command": "create", "path": "/memories/c.md", "file_text": "Prefers answers in French"})
    assert bank.list(PROFILE).total == 2 and bank.get(PROFILE, saved.memory.id)
    assert "b.md" not in tool.call({"command": "view", "path": "/memories"})


def test_credentials_are_redacted_before_they_are_stored(bank: MemoryBank) -> None:
    tool = MemlocalMemoryTool(bank, PROFILE)
    tool.call({"command": "create", "path": "/memories/ops.md",
               "file_text": "deploy with AKIAIOSFODNN7EXAMPLE and the usual bucket\n"})
    shown = tool.call({"command": "view", "path": "/memories/ops.md"})
    assert "AKIAIOSFODNN7EXAMPLE" not in shown and "[REDACTED:" in shown


def test_category_follows_the_paths_words() -> None:
    assert category_for_path("preferences/food.md") == "preference"
    assert category_for_path("project_context.md") == "context"
    assert category_for_path("people/behaviours.md") == "behavior"
    assert category_for_path("notes.md") == "general"


def test_the_async_tool_answers_the_same(bank: MemoryBank) -> None:
    tool = MemlocalAsyncMemoryTool(bank, PROFILE)

    async def run() -> list[str]:
        return [await tool.call({"command": "create", "path": "/memories/n.md", "file_text": "hello there\n"}),
                await tool.call({"command": "view", "path": "/memories/n.md"})]

    assert asyncio.run(run()) == ["File created successfully at: /memories/n.md",
                                  "Here's the content of /memories/n.md with line numbers:\n     1\thello there\n     2\t"]


def _tool_use(n: int, command: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n:02d}", "name": "memory", "input": command}


def test_a_tool_runner_loop_saves_and_finds_memories(anthropic_fake: FakeAnthropic, bank: MemoryBank) -> None:
    """Claude (the fake, with scripted tool_use blocks) writes a memory file, reads it, edits it."""
    import anthropic

    anthropic_fake.respond(
        Reply.message([_tool_use(1, {"command": "view", "path": "/memories"})], stop_reason="tool_use"),
        Reply.message([_tool_use(2, {"command": "create", "path": "/memories/user.md",
                                     "file_text": "Ana prefers Python and is allergic to peanuts\n"})],
                      stop_reason="tool_use"),
        Reply.message([_tool_use(3, {"command": "str_replace", "path": "/memories/user.md",
                                     "old_str": "Python", "new_str": "Rust"}),
                       _tool_use(4, {"command": "view", "path": "/memories/../secrets"})], stop_reason="tool_use"),
        Reply.text("Noted."),
    )
    client = anthropic.Anthropic(base_url=anthropic_fake.url, api_key=FAKE_KEY, max_retries=0)
    runner = client.beta.messages.tool_runner(
        model="claude-sonnet-4-5", max_tokens=512, tools=[MemlocalMemoryTool(bank, PROFILE)],
        messages=[{"role": "user", "content": "Remember that I prefer Python."}])
    final = runner.until_done()
    assert final.content[0].type == "text" and final.content[0].text == "Noted."
    bodies = [r.body for r in anthropic_fake.requests]
    assert bodies[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    results = [block for body in bodies for msg in body["messages"] if msg["role"] == "user"
               and isinstance(msg["content"], list) for block in msg["content"] if block.get("type") == "tool_result"]
    texts = {r["tool_use_id"]: (r["content"], r.get("is_error", False)) for r in results}
    assert texts["toolu_01"] == ("Here're the files and directories up to 2 levels deep in /memories, excluding "
                                 "hidden items:\n4K\t/memories", False)
    assert texts["toolu_02"] == ("File created successfully at: /memories/user.md", False)
    assert texts["toolu_04"] == ("Path /memories/../secrets would escape /memories directory", True)
    [hit] = bank.recall(RecallQuery(PROFILE, "which language does Ana prefer?"))
    assert hit.memory.processed_content == "Ana prefers Rust and is allergic to peanuts\n"


def test_files_sync_to_another_host_as_memories(hosts: Any, s3: Any) -> None:
    """A file Claude writes on host A is in the bucket at once (memory/<profile>/<id>.json) and
    in host B's /memories after B's pass; B's edit supersedes it everywhere."""
    a, b = hosts("a"), hosts("b")
    tool_a, tool_b = MemlocalMemoryTool(a.bank, PROFILE), MemlocalMemoryTool(b.bank, PROFILE)
    tool_a.call({"command": "create", "path": "/memories/team/oncall.md", "file_text": "Rui is on call this week\n"})
    [key] = s3.keys()
    assert key.startswith(f"memory/{PROFILE}/mem-") and s3.get_json(key)[FILE_FIELD] == "/memories/team/oncall.md"
    assert b.sync().ok
    assert tool_b.call({"command": "view", "path": "/memories/team/oncall.md"}).endswith("1\tRui is on call this week\n     2\t")
    tool_b.call({"command": "str_replace", "path": "/memories/team/oncall.md", "old_str": "Rui", "new_str": "Ana"})
    assert a.sync().ok
    assert "Ana is on call" in tool_a.call({"command": "view", "path": "/memories/team/oncall.md"})


def test_the_tools_table_is_a_migration_set_of_its_own(bank: MemoryBank) -> None:
    MemlocalMemoryTool(bank, PROFILE)
    MemlocalMemoryTool(bank, "other")  # current: nothing to do
    assert bank.store.meta_get("schema.claude_memory") == "1"
