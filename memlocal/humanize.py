"""Words for people: plurals, relative times, cut text with an ellipsis, tidy JSON numbers,
other hosts' text made safe to print.

Used by the CLI and by the sync package's one-line summaries, so every face says "1 profile",
"3 min ago" and "…" the same way. Nothing here changes data: it only formats it.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime, timezone
from typing import Any, Final

from .errors import fold_whitespace

ELLIPSIS: Final = "…"
JSON_FLOAT_DIGITS: Final = 6

# Irregular plurals of the nouns memlocal prints; the rest take an "s".
_PLURALS: Final = {"memory": "memories", "pass": "passes", "entry": "entries", "access update": "access updates"}


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``"1 profile"``, ``"2 profiles"``, ``"1 pass"``, ``"3 memories"``."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural_form or _PLURALS.get(noun, noun + 's')}"


def ellipsize(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters; when cut, it ends at a word boundary
    (a single long word is cut inside) and with ``…``, never mid-word without one."""
    one_line = fold_whitespace(text)
    if len(one_line) <= width:
        return one_line
    if width <= 1:
        return ELLIPSIS[:width]
    cut = one_line[: width - 1]
    space = cut.rfind(" ")
    if space >= width // 2:  # a word boundary that keeps most of the room
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + ELLIPSIS


def shown_summary(summary: str, content: str) -> str:
    """A memory's summary for display: the default summary (the content's first 50 characters)
    gets a ``…`` when the content goes on, after its last whole word (a word the 50 characters cut
    is left out, as :func:`ellipsize` does)."""
    folded = fold_whitespace(content)
    if len(folded) > len(summary) and folded.startswith(summary) and not summary.endswith(ELLIPSIS):
        cut = summary
        if not folded[len(summary)].isspace() and not summary[-1:].isspace():
            space = cut.rfind(" ")  # the summary ends inside a word: end at the word before it
            if space >= len(cut) // 2:
                cut = cut[:space]
        return cut.rstrip(" ,;:.-") + ELLIPSIS
    return summary


def printable(text: str) -> str:
    """``text`` for a terminal, every character that would show nothing or pass for another
    written as Python writes it in a string literal (``\\u200b``, ``\\xa0``, ``\\U000e0fff``):
    controls, format characters, private-use, unassigned and surrogate code points, combining
    marks, and separators other than the ASCII space. Letters, digits, punctuation and symbols
    of every script stay as they are; a backslash is doubled, so that an escape is never text.
    For text another host wrote (a bucket key), so that ``alice\\u200b`` never reads as ``alice``."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text
    return "".join(ch if ch == " " or (unicodedata.category(ch)[0] in "LNPS" and ch != "\\")
                   else ch.encode("unicode_escape").decode("ascii") for ch in text)


def ago(when: datetime | None, now: datetime | None = None) -> str:
    """A relative time for tables: ``just now``, ``5 min ago``, ``3 h ago``, ``yesterday``,
    ``12 days ago``; older than 60 days, or in the future (another host's clock), the date."""
    if when is None:
        return "never"
    now = now or datetime.now(timezone.utc)
    seconds = (now - when).total_seconds()
    if seconds < -60 or seconds >= 60 * 86400:
        return when.astimezone(timezone.utc).strftime("%Y-%m-%d")
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    return "yesterday" if days == 1 else f"{days} days ago"


def round_floats(data: Any, digits: int = JSON_FLOAT_DIGITS) -> Any:
    """``data`` with every float rounded to ``digits`` decimals (``0.020999999999999994`` →
    ``0.021``), for JSON meant to be read; ints, bools and strings are left alone."""
    if isinstance(data, float):
        return round(data, digits)
    if isinstance(data, dict):
        return {k: round_floats(v, digits) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [round_floats(v, digits) for v in data]
    return data
