"""A parser of the prompt's blocks, written from docs/hygiene.md ("The grammar of the blocks"),
not from the renderer: the tests render untrusted texts and parse them back with it.

    prompt        := block* rest
    block         := context-block | memory-block
    context-block := HEADER "\\n" PREAMBLE "\\n" text ("\\n" "" "\\n" text)* "\\n" "---" "\\n"
    text          := quoted ("\\n" quoted)*
    quoted        := "> " line-content | ">"
    memory-block  := MEMORY_HEADER "\\n" section ("" "\\n" section)* "---" "\\n"
    section       := HEADING "\\n" entry+       (CORE, RELEVANT, FILLER headings, in this order, each once)
    entry         := "* [" CATEGORY "] " line-content "\\n"

``line-content`` holds no line boundary of any kind (``str.splitlines``); a line that is none of
the forms above inside a block is an error, never skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memlocal.services.injection import (BLOCK_END, CORE_HEADING, FILLER_HEADING, MEMORY_HEADER, NOTE_HEADER,
                                NOTE_PREAMBLE, OPERATOR_HEADER, OPERATOR_PREAMBLE, RELEVANT_HEADING)
from memlocal.model import CATEGORIES

CONTEXT_BLOCKS = {OPERATOR_HEADER: OPERATOR_PREAMBLE, NOTE_HEADER: NOTE_PREAMBLE}
_ENTRY = re.compile(r"\* \[(%s)\] (.*)" % "|".join(CATEGORIES), re.S)


class GrammarError(ValueError):
    """The text is not a sequence of well-formed blocks."""


@dataclass
class Parsed:
    contexts: list[tuple[str, list[list[str]]]] = field(default_factory=list)  # (header, texts' lines)
    core: list[tuple[str, str]] = field(default_factory=list)  # (category, text)
    relevant: list[tuple[str, str]] = field(default_factory=list)
    filler: list[tuple[str, str]] = field(default_factory=list)
    rest: str = ""


def _one_line(line: str) -> str:
    if len(line.splitlines()) > 1 or line != line.rstrip("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"):
        raise GrammarError(f"a line boundary inside a block's line: {line!r}")
    return line


def parse(prompt: str) -> Parsed:
    lines = prompt.split("\n")
    out = Parsed()
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(lines):
            raise GrammarError("the block does not end")
        i += 1
        return _one_line(lines[i - 1])

    while i < len(lines) and (lines[i] in CONTEXT_BLOCKS or lines[i] == MEMORY_HEADER):
        header = take()
        if header in CONTEXT_BLOCKS:
            if take() != CONTEXT_BLOCKS[header]:
                raise GrammarError("a context block without its preamble")
            texts: list[list[str]] = [[]]
            while True:
                line = take()
                if line == BLOCK_END:
                    break
                if line == "":
                    if not texts[-1]:
                        raise GrammarError("an empty line that separates nothing")
                    texts.append([])
                elif line == ">":
                    texts[-1].append("")
                elif line.startswith("> "):
                    texts[-1].append(line[2:])
                else:
                    raise GrammarError(f"an unquoted line in a context block: {line!r}")
            if not texts[-1]:
                raise GrammarError("a context block without text")
            out.contexts.append((header, texts))
            continue
        if out.core or out.relevant or out.filler:
            raise GrammarError("two memory blocks")
        sections = {CORE_HEADING: out.core, RELEVANT_HEADING: out.relevant, FILLER_HEADING: out.filler}
        order = list(sections)
        done = -1  # the index of the last section read
        line = take()
        while line != BLOCK_END:
            if done >= 0:
                if line != "":
                    raise GrammarError(f"not an entry line: {line!r}")
                line = take()
            if line not in sections or order.index(line) <= done:
                raise GrammarError(f"not a section heading: {line!r}")
            done = order.index(line)
            section = sections[line]
            line = take()
            while (m := _ENTRY.fullmatch(line)) is not None:
                section.append((m.group(1), m.group(2)))
                line = take()
            if not section:
                raise GrammarError("a section without entries")
        if done < 0:
            raise GrammarError("a memory block without a section")
    out.rest = "\n".join(lines[i:])
    return out
