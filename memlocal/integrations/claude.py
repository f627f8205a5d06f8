"""A backend for Claude's memory tool (``memory_20250818``) over one profile of a ``MemoryBank``.

``MemlocalMemoryTool(bank, profile)`` is a ``BetaAbstractMemoryTool`` (the anthropic SDK's client
side of the tool), so ``client.beta.messages.tool_runner(..., tools=[MemlocalMemoryTool(bank,
"researcher")])`` gives Claude a ``/memories`` directory that is the bank's profile:

- **a file is a memory**: its text is the memory's ``processedContent`` (and ``rawInput``), its
  path the extra field ``memoryFile``; its category comes from the path's words
  (``/memories/preferences/...`` is a preference), else ``general``. So files are ranked by
  recall and injection, redacted, checked for duplicates and synced like any save;
- **an edit is a new version**: ``str_replace``, ``insert`` and ``rename`` save the new text (or
  path) as a memory that supersedes the previous one (``memlocal history`` shows a file's edits);
  ``delete`` removes the file's memory with its earlier versions;
- **what a memory cannot hold stays on this host**: directories (the parents of the files'
  paths are implied) and files with no text (empty or blank) are rows of the local table
  ``claude_memory_paths``; they become memories, or stop being, as text is written.

Commands answer with the texts of the SDK's own local-filesystem tool
(``BetaLocalFilesystemMemoryTool``), errors included, and no path escapes ``/memories``.
Where a memory's rules differ from a file's, the tool says so in a ``ToolError`` and changes
nothing: a text over 4096 bytes of UTF-8, a text that repeats another memory of the profile
(the bank's duplicate rule), invalid Unicode. Credentials in a text are redacted before it is
stored (docs/hygiene.md). See docs/integrations.md.

The anthropic SDK is imported here (and in ``memlocal.services.llm``) only.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import threading
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from ..errors import InputTooLargeError, MemoryBankError
from ..model import CATEGORIES, RAW_INPUT_MAX_BYTES, Memory, validate_profile
from ..services.redact import redact
from ..bank.saving import SaveRequest
from ..store import MigrationSet
from ..store.local import LocalRow

if TYPE_CHECKING:
    import sqlite_utils

    from ..bank.facade import MemoryBank

__all__ = ["FILE_FIELD", "ROOT", "SCHEMA", "MemlocalAsyncMemoryTool", "MemlocalMemoryTool", "category_for_path"]

ROOT = "/memories"
# The extra field of a memory that is a file: its path, "/memories/notes/user.md".
FILE_FIELD = "memoryFile"
TABLE = "claude_memory_paths"

# As the SDK's tool formats them (anthropic/lib/tools/_beta_builtin_memory_tool.py).
_MAX_LINES = 999999
_LINE_NUMBER_WIDTH = len(str(_MAX_LINES))
# Paths are bounded as Anthropic's hosted memory stores bound theirs: at most this many bytes of
# UTF-8 and this many segments (/memories counted) (so every tree operation is linear in a path's
# length, and a profile's tree in its number of files).
PATH_MAX_BYTES = 1024
PATH_MAX_SEGMENTS = 20
# What a directory's st_size is on ext4 (a block), the size the SDK's tool shows for a directory.
_DIR_SIZE = 4096



def _create_paths(db: "sqlite_utils.Database") -> None:
    db.execute(f"""CREATE TABLE {TABLE} (
        profile TEXT NOT NULL,
        path TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('dir', 'file')),
        text TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (profile, path)
    ) WITHOUT ROWID""")


# The tool's own table, as a migration set of its own (docs/storage.md, "Migrations"), brought up
# to date when a tool is made over a bank (cheap when current).
SCHEMA = MigrationSet("claude_memory", {1: _create_paths}, tables=(TABLE,))

_WORD = re.compile(r"[a-z]+")
# Path words that name a category: the category, its plural, British spelling.
_CATEGORY_WORDS = {**{c: c for c in CATEGORIES}, **{c + "s": c for c in CATEGORIES},
                   "behaviour": "behavior", "behaviours": "behavior"}


def category_for_path(path: str) -> str:
    """The category of the memory behind ``path``: the first word of the path that names one
    (``/memories/preferences/food.md`` is a preference, ``/memories/project_context.md`` a
    context), else ``general``."""
    for word in _WORD.findall(path.lower()):
        if word in _CATEGORY_WORDS:
            return _CATEGORY_WORDS[word]
    return "general"


def _format_size(size: int) -> str:
    # The SDK tool's _format_file_size, so listings read the same.
    if size == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min((size.bit_length() - 1) // 10, len(units) - 1)
    value = size / (1024**i)
    return f"{int(value)}{units[i]}" if value == int(value) else f"{value:.1f}{units[i]}"


def _os_error(code: int) -> OSError:
    """The OSError the local-filesystem tool lets through for ``code`` (the tool runner shows its
    ``repr``, which names the type, the number and the text, never a path)."""
    cls = {errno.ENOTDIR: NotADirectoryError, errno.ENOENT: FileNotFoundError}.get(code, OSError)
    return cls(code, os.strerror(code))


def _parents(rel: str) -> list[str]:
    """The proper ancestors of ``rel`` below the root, outermost first: a/b/c -> [a, a/b]
    (at most ``PATH_MAX_SEGMENTS`` prefixes of a bounded path)."""
    out, at = [], rel.find("/")
    while at != -1:
        out.append(rel[:at])
        at = rel.find("/", at + 1)
    return out


def path_problem(path: str) -> str | None:
    """Why ``path`` is not a path the tool accepts (too long, too deep, a control or format
    character), or None. Checked before anything else reads the path."""
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > PATH_MAX_BYTES:
        return f"Path is {size} bytes long; a path holds at most {PATH_MAX_BYTES} bytes of UTF-8"
    segments = path.count("/")
    if segments > PATH_MAX_SEGMENTS:
        return f"Path has {segments} segments; a path holds at most {PATH_MAX_SEGMENTS}"
    bad = next((ch for ch in path if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")), None)
    if bad is not None:
        return f"Path must not hold control or format characters, got U+{ord(bad):04X}"
    return None


def _under(rel: str, top: str) -> bool:
    return rel.startswith(top + "/")


@dataclass
class _File:
    text: str
    memory: Memory | None = None  # None: a blank file, kept in the local table


@dataclass
class _Tree:
    """The profile's directory as the commands see it: files by relative path ("a/b.md"), and
    directories ("a"; the root is "")."""

    files: dict[str, _File] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)

    def kind(self, rel: str) -> str | None:
        if rel == "" or rel in self.dirs:
            return "dir"
        return "file" if rel in self.files else None

    def under_a_file(self, rel: str) -> bool:
        return any(p in self.files for p in _parents(rel))

    def children(self, rel: str) -> list[str]:
        prefix = rel + "/" if rel else ""
        names = {p[len(prefix):].split("/", 1)[0] for p in (*self.files, *self.dirs)
                 if p.startswith(prefix) and p != rel}
        return sorted(names)


_T = TypeVar("_T")


class MemlocalMemoryTool(BetaAbstractMemoryTool):
    """Claude's memory directory ``/memories`` over ``profile`` of ``bank`` (see the module's
    docstring for how files map onto memories). Thread-safe: one command at a time."""

    def __init__(self, bank: "MemoryBank", profile: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bank = bank
        self.profile = validate_profile(profile)
        self._lock = threading.Lock()
        self._table = bank.local_table(SCHEMA, TABLE)

    # --- the directory -------------------------------------------------------------------------

    def _tree(self) -> _Tree:
        tree = _Tree()
        # Both read through the bank's redaction, as every face reads.
        for row in self._table.rows(self.profile):
            if row.kind == "dir":
                tree.dirs.add(row.path)
            else:
                tree.files[row.path] = _File(row.text)
        memories = sorted((m for m in self.bank.memories(self.profile, with_field=FILE_FIELD)
                           if isinstance(m.extra.get(FILE_FIELD), str)), key=lambda m: (m.created_at, m.id))
        for m in memories:
            rel = self._relative(str(m.extra[FILE_FIELD]))
            if rel is None:
                continue  # written by something else: not a path under /memories
            if rel in tree.files and tree.files[rel].memory is not None:
                # Two hosts wrote the same path before they synced: the later one keeps it, the
                # other shows beside it under its id, for Claude to merge or delete.
                older = tree.files.pop(rel)
                tree.files[f"{rel}.{older.memory.id if older.memory else ''}"] = older
            tree.files[rel] = _File(m.processed_content, m)
        for rel in list(tree.files):
            tree.dirs.update(_parents(rel))
        for rel in [r for r in tree.files if r in tree.dirs]:  # a file where files below imply a directory
            moved = tree.files.pop(rel)
            tree.files[f"{rel}.{moved.memory.id if moved.memory else 'blank'}"] = moved
        return tree

    @staticmethod
    def _relative(path: str) -> str | None:
        """``path`` (a memory's ``memoryFile``) relative to the root, when it is a clean path below it."""
        if not path.startswith(ROOT + "/") or path_problem(path) is not None:
            return None  # another writer's: not a path the tool would accept
        rel = unicodedata.normalize("NFC", path)[len(ROOT) + 1:]
        return rel if rel and posixpath.normpath(rel) == rel and not rel.startswith("..") else None

    def _resolve(self, path: str, *, write: bool = False) -> str:
        """The path relative to the root ("" for the root), as the SDK tool validates it, once
        bounded (:func:`path_problem`), in NFC; a path that holds a credential is refused, read or
        write (``write`` is kept for callers): a path names one file, and redacted two would be one."""
        problem = path_problem(path)
        if problem is not None:
            raise ToolError(problem)
        path = unicodedata.normalize("NFC", path)
        kinds = redact(path).kinds
        if kinds:  # a path is an identifier: redacted, two paths would be one file
            raise ToolError(f"The path holds a credential ({', '.join(kinds)}): choose another name; "
                            "no change was made")
        if not path.startswith(ROOT):
            raise ToolError(f"Path must start with /memories, got: {path}")
        rel = path[len(ROOT):].lstrip("/")
        # The SDK tool resolves under a real folder named "memories"; here the root is /memories.
        full = posixpath.normpath(posixpath.join(ROOT, rel)) if rel else ROOT
        if full != ROOT and not full.startswith(ROOT + "/"):
            raise ToolError(f"Path {path} would escape /memories directory")
        return full[len(ROOT) + 1:] if full != ROOT else ""

    def _run(self, action: Callable[[], _T]) -> _T:
        with self._lock:
            try:
                return action()
            except InputTooLargeError as exc:
                raise ToolError(f"No change was made: a memory holds at most {RAW_INPUT_MAX_BYTES} bytes of "
                                f"UTF-8 ({exc}); split the text into several files") from None
            except MemoryBankError as exc:
                raise ToolError(f"No change was made: {exc}") from None
            except ToolError as exc:  # its text may quote a path or an old_str as the caller wrote it
                if isinstance(exc.content, str) and redact(exc.content).kinds:
                    raise ToolError(redact(exc.content).text) from None
                raise

    # --- writes to the bank --------------------------------------------------------------------

    def _check_text(self, rel: str, text: str, tree: _Tree, own: Memory | None) -> None:
        """Refuse, before anything changes, a text a memory cannot hold or that repeats another."""
        if not text.strip():
            return  # a blank file stays in the local table
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > RAW_INPUT_MAX_BYTES:
            raise InputTooLargeError(f"{ROOT}/{rel} would be {size} bytes")
        dup = self.bank.find_duplicate(self.profile, text, category=category_for_path(rel),
                                       exclude=[own.id] if own else [])
        if dup is not None:
            where = dup.extra.get(FILE_FIELD)
            raise ToolError(f"No change was made: the text repeats memory {dup.id}"
                            + (f" ({where}); edit that file instead" if isinstance(where, str)
                               else " (saved outside /memories)"))

    def _write(self, rel: str, text: str, old: _File | None) -> None:
        """Store ``text`` as the file ``rel``, replacing ``old`` (the file's previous state)."""
        prior = old.memory if old is not None else None
        if not text.strip():
            if prior is not None:
                self._forget(prior)
            self._local(rel, "file", text)
            return
        self.bank.save(SaveRequest(self.profile, content=text, category=category_for_path(rel), use_llm=False,
                       supersedes=prior.id if prior is not None else None, deduplicate=False,
                       auto_supersede=False,  # a file's text never retires another file
                       extra={FILE_FIELD: f"{ROOT}/{rel}"}))
        if old is not None and prior is None:
            self._unlocal(rel)

    def _forget(self, memory: Memory) -> None:
        """Delete a file's memory and its earlier versions."""
        for version in reversed(self.bank.history(self.profile, memory.id)):
            if version.id == memory.id or not version.is_active:
                self.bank.delete(self.profile, version.id)

    def _local(self, rel: str, kind: str, text: str = "") -> None:
        self._local_rows([(rel, kind, text)])

    def _local_rows(self, rows: list[tuple[str, str, str]]) -> None:
        self._table.put(self.profile, [LocalRow(*row) for row in rows])

    def _unlocal(self, rel: str, *, below: bool = False) -> None:
        self._table.delete(self.profile, rel, below=below)

    def _mkdirs(self, tree: _Tree, rels: list[str]) -> None:
        """Record the directories ``rels`` (they stay when their files go, as on a disk)."""
        self._local_rows([(rel, "dir", "") for rel in rels])
        tree.dirs.update(rels)

    # --- the commands --------------------------------------------------------------------------

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return self._run(lambda: self._view(command))

    def _view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        tree = self._tree()
        rel = self._resolve(command.path)
        kind = tree.kind(rel)
        if kind is None:
            raise ToolError(f"The path {command.path} does not exist. Please provide a valid path.")
        if kind == "dir":
            items: list[tuple[str, str]] = []

            def collect(top: str, shown: str, depth: int) -> None:
                for name in tree.children(top):
                    if name.startswith("."):
                        continue
                    child = f"{top}/{name}" if top else name
                    child_shown = f"{shown}/{name}" if shown else name
                    if child in tree.dirs:
                        items.append((_format_size(_DIR_SIZE), f"{child_shown}/"))
                        if depth < 2:
                            collect(child, child_shown, depth + 1)
                    else:
                        items.append((_format_size(len(tree.files[child].text.encode("utf-8"))), child_shown))

            collect(rel, "", 1)
            header = f"Here're the files and directories up to 2 levels deep in {command.path}, excluding hidden items:"
            lines = [f"{_format_size(_DIR_SIZE)}\t{command.path}"]
            lines.extend(f"{size}\t{command.path}/{shown}" for size, shown in items)
            return f"{header}\n" + "\n".join(lines)
        file = tree.files[rel]
        lines = file.text.split("\n")
        if len(lines) > _MAX_LINES:
            raise ToolError(f"File {command.path} exceeds maximum line limit of 999,999 lines.")
        display, start = lines, 1
        if command.view_range and len(command.view_range) == 2:
            first = max(1, command.view_range[0]) - 1
            end = len(lines) if command.view_range[1] == -1 else command.view_range[1]
            display, start = lines[first:end], first + 1
        numbered = [f"{str(i + start).rjust(_LINE_NUMBER_WIDTH)}\t{line}" for i, line in enumerate(display)]
        if file.memory is not None:
            self.bank.mark_accessed(self.profile, [file.memory.id])  # reading a file is using it
        return f"Here's the content of {command.path} with line numbers:\n" + "\n".join(numbered)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self._run(lambda: self._create(command))

    def _create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        tree = self._tree()
        rel = self._resolve(command.path, write=True)
        if tree.under_a_file(rel):
            raise _os_error(errno.ENOTDIR)
        if tree.kind(rel) is not None:
            raise ToolError(f"File {command.path} already exists")
        self._check_text(rel, command.file_text, tree, None)
        self._mkdirs(tree, [p for p in _parents(rel) if p not in tree.dirs])
        self._write(rel, command.file_text, None)
        return f"File created successfully at: {command.path}"

    def _file_for_edit(self, tree: _Tree, path: str) -> tuple[str, _File]:
        rel = self._resolve(path)
        kind = tree.kind(rel)
        if kind is None:
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        if kind != "file":
            raise ToolError(f"The path {path} is not a file.")
        return rel, tree.files[rel]

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return self._run(lambda: self._str_replace(command))

    def _str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        tree = self._tree()
        rel, file = self._file_for_edit(tree, command.path)
        content = file.text
        count = content.count(command.old_str)
        if count == 0:
            raise ToolError(f"No replacement was performed, old_str `{command.old_str}` did not appear verbatim "
                            f"in {command.path}.")
        if count > 1:
            matching: list[int] = []
            start = 0
            while True:
                pos = content.find(command.old_str, start)
                if pos == -1:
                    break
                matching.append(content[:pos].count("\n") + 1)
                start = pos + 1
            raise ToolError(f"No replacement was performed. Multiple occurrences of old_str `{command.old_str}` "
                            f"in lines: {', '.join(map(str, matching))}. Please ensure it is unique")
        pos = content.find(command.old_str)
        changed = content[:pos].count("\n")
        new_content = content.replace(command.old_str, command.new_str)
        if new_content != content:
            self._check_text(rel, new_content, tree, file.memory)
            self._write(rel, new_content, file)
        new_lines = new_content.split("\n")
        first, end = max(0, changed - 2), min(len(new_lines), changed + 3)
        snippet = [f"{str(n).rjust(_LINE_NUMBER_WIDTH)}\t{new_lines[n - 1]}" for n in range(first + 1, end + 1)]
        return ("The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
                + "\n".join(snippet))

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return self._run(lambda: self._insert(command))

    def _insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        tree = self._tree()
        rel, file = self._file_for_edit(tree, command.path)
        lines = file.text.split("\n")
        if lines[-1] == "":
            lines.pop()
        if command.insert_line < 0 or command.insert_line > len(lines):
            raise ToolError(f"Invalid `insert_line` parameter: {command.insert_line}. "
                            f"It should be within the range [0, {len(lines)}].")
        lines.insert(command.insert_line, command.insert_text.rstrip("\n"))
        new_content = "\n".join(lines)
        if not new_content.endswith("\n"):
            new_content += "\n"
        if new_content != file.text:
            self._check_text(rel, new_content, tree, file.memory)
            self._write(rel, new_content, file)
        return f"The file {command.path} has been edited."

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self._run(lambda: self._delete(command))

    def _delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        tree = self._tree()
        rel = self._resolve(command.path)
        if rel == "":
            raise ToolError("Cannot delete the /memories directory itself")
        kind = tree.kind(rel)
        if kind is None:
            raise ToolError(f"The path {command.path} does not exist")
        self._mkdirs(tree, _parents(rel))  # the parents stay, as on a disk
        if kind == "file":
            self._remove_file(rel, tree.files[rel])
        else:
            for sub in [r for r in tree.files if _under(r, rel)]:
                self._remove_file(sub, tree.files[sub])
            self._unlocal(rel, below=True)
        return f"Successfully deleted {command.path}"

    def _remove_file(self, rel: str, file: _File) -> None:
        if file.memory is not None:
            self._forget(file.memory)
        self._unlocal(rel)

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self._run(lambda: self._rename(command))

    def _rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        tree = self._tree()
        old = self._resolve(command.old_path)
        new = self._resolve(command.new_path, write=True)
        if old == "":
            raise ToolError("Cannot rename the /memories directory itself")
        if tree.kind(new) is not None:
            raise ToolError(f"The destination {command.new_path} already exists")
        # The order of a disk's checks: mkdir -p of the destination's folder first (it stays even
        # if the move then fails), then rename(2)'s lookups of the source's folder, the
        # destination's folder and the source.
        parent = posixpath.dirname(new)
        if tree.under_a_file(parent):
            raise _os_error(errno.ENOTDIR)
        self._mkdirs(tree, [p for p in _parents(new) if p not in tree.dirs and p not in tree.files])
        if tree.under_a_file(old):
            raise _os_error(errno.ENOTDIR)
        if any(p not in tree.dirs for p in _parents(old)):
            raise ToolError(f"The path {command.old_path} does not exist")
        if parent in tree.files:
            raise _os_error(errno.ENOTDIR)
        kind = tree.kind(old)
        if kind is None:
            raise ToolError(f"The path {command.old_path} does not exist")
        if kind == "dir" and _under(new, old):
            raise _os_error(errno.EINVAL)
        moves = [(old, new)] if kind == "file" else [
            (r, new + r[len(old):]) for r in sorted(tree.files) if _under(r, old)]
        for src, dst in moves:
            self._move(src, dst, tree.files[src])
        if kind == "dir":
            dirs = [d for d in tree.dirs if d == old or _under(d, old)]
            self._unlocal(old, below=True)
            self._mkdirs(tree, [new + d[len(old):] for d in sorted(dirs)])
        return f"Successfully renamed {command.old_path} to {command.new_path}"

    def _move(self, src: str, dst: str, file: _File) -> None:
        if file.memory is None:
            self._unlocal(src)
            self._local(dst, "file", file.text)
            return
        self.bank.save(SaveRequest(self.profile, content=file.text, category=category_for_path(dst), use_llm=False,
                       supersedes=file.memory.id, deduplicate=False, auto_supersede=False,
                       extra={FILE_FIELD: f"{ROOT}/{dst}"}))

    def clear_all_memory(self) -> str:
        """Delete every file (and its versions) and directory of the profile's ``/memories``."""

        def clear() -> str:
            tree = self._tree()
            for rel, file in tree.files.items():
                self._remove_file(rel, file)
            self._unlocal("", below=True)
            return "All memory cleared"

        return self._run(clear)


class MemlocalAsyncMemoryTool(BetaAsyncAbstractMemoryTool):
    """The async memory tool (``BetaAsyncAbstractMemoryTool``) for ``client.beta.messages.tool_runner``
    on an ``AsyncAnthropic`` client: each command runs :class:`MemlocalMemoryTool`'s in a worker
    thread (the bank's SQLite writes block)."""

    def __init__(self, bank: "MemoryBank", profile: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sync = MemlocalMemoryTool(bank, profile)

    async def _call(self, fn: Callable[[], str]) -> str:
        from anyio.to_thread import run_sync

        return await run_sync(fn)

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await self._call(lambda: self.sync.view(command))

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await self._call(lambda: self.sync.create(command))

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await self._call(lambda: self.sync.str_replace(command))

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await self._call(lambda: self.sync.insert(command))

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await self._call(lambda: self.sync.delete(command))

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await self._call(lambda: self.sync.rename(command))

    async def clear_all_memory(self) -> str:
        return await self._call(self.sync.clear_all_memory)
