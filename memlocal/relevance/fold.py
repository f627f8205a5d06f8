"""The one normalisation every hygiene check sees: what a text *looks like*, not how it is spelled.

Credential detection (:mod:`memlocal.services.redact`), header neutralisation (:mod:`memlocal.services.injection`)
and the duplicate keys (:mod:`memlocal.hygiene.rules`) all look at :func:`fold` of a text, so that an
invisible character inside a key, or a look-alike letter in a header, changes nothing they see:

- **Invisible characters are removed**, by Unicode property: every ``Default_Ignorable_Code_Point``
  (zero-width spaces and joiners, the soft hyphen, the combining grapheme joiner U+034F, variation
  selectors, the Hangul fillers U+115F/U+1160/U+3164/U+FFA0, tag characters, ...), every format
  character (category ``Cf``: bidi marks, embeddings and isolates, U+061C, ...), control
  characters other than whitespace (``Cc``), and U+2800 BRAILLE PATTERN BLANK, the one blank
  glyph that no property marks as invisible or as a space. The property comes from the ``regex``
  module's Unicode tables (``\\p{Default_Ignorable_Code_Point}``; Python's ``unicodedata`` has no
  such property).
- **Compatibility forms are folded** (NFKC, one character at a time: fullwidth and mathematical
  letters and digits become ASCII).
- **Confusables are mapped towards ASCII** with Unicode TR39's confusables data (as shipped by
  the ``confusable-homoglyphs`` package): a non-ASCII character whose prototype is ASCII becomes
  that prototype (Cyrillic ``С`` -> ``C``, U+2217 ``∗`` -> ``*``, U+02D7 ``˗`` -> ``-``). ASCII
  itself is never remapped (``l``, ``I`` and ``1`` stay apart), so a fold never merges two
  texts that a reader can tell apart, nor breaks the shape of a real key.

Case and spacing are kept: each check adds what it needs (:func:`skeleton` for headers).
:func:`fold_map` also gives, for each folded character, the index of the character of the
original text it came from, so that a span found in the fold can be cut out of the original.

Cost: an ASCII text without control characters is returned as it is (one ``isascii`` and one
regex search); other texts go through one ``str.translate`` over a table filled lazily, one entry
per distinct character (the confusables data, 0.9 MB of JSON, is read on the first non-ASCII
character that needs it).
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Callable, Final

from ..errors import fold_whitespace

if TYPE_CHECKING:
    import regex

__all__ = ["DASH", "fold", "fold_exact", "fold_map", "is_dash", "is_invisible", "project", "skeleton", "strip_invisible"]

# ASCII controls other than the whitespace ones (tab, line feed, vertical tab, form feed, CR).
_ASCII_CONTROL: Final = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
# The one blank glyph that no Unicode property marks as invisible or as white space.
_BLANKS: Final = frozenset("\u2800")
DASH: Final = "-"


@lru_cache(maxsize=1)
def _default_ignorable() -> regex.Pattern[str]:
    import regex  # the Unicode property tables Python's unicodedata lacks

    return regex.compile(r"\p{Default_Ignorable_Code_Point}")


def is_invisible(ch: str) -> bool:
    """Whether the character ``ch`` shows nothing: default-ignorable, format, a control other
    than whitespace, or a blank glyph (see the module docstring)."""
    if ch.isascii():
        return bool(_ASCII_CONTROL.match(ch))
    cat = unicodedata.category(ch)
    if cat == "Cf" or (cat == "Cc" and not ch.isspace()) or ch in _BLANKS:
        return True
    return bool(_default_ignorable().match(ch))


@lru_cache(maxsize=1)
def _confusables() -> dict[str, list[dict[str, str]]]:
    """confusable-homoglyphs' TR39 data: each character -> the characters it is confusable with
    (a character that is not itself a prototype lists just its prototype)."""
    data: dict[str, list[dict[str, str]]] = json.loads(
        resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8"))
    return data


@lru_cache(maxsize=1)
def _ascii_prototypes() -> dict[str, str]:
    """TR39 confusables: each non-ASCII character whose prototype is ASCII, to that prototype."""
    out: dict[str, str] = {}
    for ch, homoglyphs in _confusables().items():
        if len(ch) != 1 or ch.isascii() or len(homoglyphs) != 1:
            continue
        target = homoglyphs[0]["c"].replace("\u200e", "")  # the data wraps RTL characters in LRMs
        if target and target.isascii() and target.isprintable():
            if unicodedata.category(ch) == "Lu" and target.islower() and len(target) == 1:
                # TR39 is caseless: capital I-likes (Cyrillic І, Greek Ι) share l's prototype.
                # A capital stays a capital, so that AKIA with a Cyrillic І is still seen as AKIA.
                target = "I" if target == "l" else target.upper()
            out[ch] = target
    return out


class _FoldTable(dict[int, str]):
    """``str.translate`` table of :func:`fold`, filled one character at a time."""

    def __missing__(self, code: int) -> str:
        self[code] = value = _fold_char(chr(code))
        return value


def _fold_char(ch: str) -> str:
    if is_invisible(ch):
        return ""
    if ch.isascii():
        return ch
    out = []
    for c in unicodedata.normalize("NFKC", ch):
        if c.isascii():
            out.append(c)
        elif not is_invisible(c):
            out.append(_ascii_prototypes().get(c, c))
    return "".join(out)


_TABLE: Final = _FoldTable()


def _plain(text: str) -> bool:
    # isprintable is one C pass and true for most ASCII text; tabs and line breaks need the regex.
    return text.isascii() and (text.isprintable() or not _ASCII_CONTROL.search(text))


def fold(text: str) -> str:
    """``text`` as every check sees it (the module docstring); ``text`` itself when already so."""
    if _plain(text):
        return text
    return text.translate(_TABLE)


def fold_map(text: str) -> tuple[str, list[int] | None]:
    """:func:`fold` of ``text`` and, when it differs, the index in ``text`` of each folded
    character's source, plus ``len(text)`` at the end (so a span ``[a, b)`` of the fold covers
    ``[index[a], index[b - 1] + 1)`` of the original)."""
    if _plain(text):
        return text, None
    folded = text.translate(_TABLE)
    if folded == text:
        return text, None
    index: list[int] = []
    for i, ch in enumerate(text):
        index.extend([i] * len(_TABLE[ord(ch)]))
    index.append(len(text))
    return folded, index


def _project_char(ch: str) -> str:
    """What :func:`project` keeps of ``ch``: its fold's ASCII characters, a digit of any script as
    its ASCII digit, white space as a space; nothing else."""
    out = []
    for c in _TABLE[ord(ch)]:
        if c.isascii():
            out.append(c)
        elif c.isspace():
            out.append(" ")
        else:
            digit = unicodedata.decimal(c, None)
            if digit is not None:
                out.append(str(digit))
            else:  # a decorated letter is its base letter (Á is A), anything else nothing
                out += [d for d in unicodedata.normalize("NFD", c) if d.isascii()]
    return "".join(out)


class _ProjectTable(dict[int, str]):
    """``str.translate`` table of :func:`project`, filled one character at a time."""

    def __missing__(self, code: int) -> str:
        self[code] = value = _project_char(chr(code))
        return value


_PROJECT: Final = _ProjectTable()


def project(text: str) -> tuple[str, Callable[[], list[int]] | None]:
    """The projection credential detectors read: :func:`fold` of ``text``, then only what a
    credential can be made of. ASCII stays, a digit of any script
    becomes its ASCII digit (Devanagari ``७`` is ``7``), a letter with diacritics its ASCII base
    letter, other white space a space, and every other
    character is dropped: combining marks, private-use, unassigned and format characters,
    letters, symbols and punctuation of other scripts. So a key split or decorated by any such
    character reads as the key.

    Returns the projection and, when it differs from ``text``, a function giving the index in
    ``text`` of each projected character's source plus ``len(text)`` at the end (a span ``[a, b)``
    of the projection covers ``[index[a], index[b - 1] + 1)`` of the original, the dropped
    characters inside it included); it is computed only when asked (a span was found)."""
    if _plain(text):
        return text, None
    projected = text.translate(_PROJECT)
    if projected == text:
        return text, None

    def index() -> list[int]:
        out: list[int] = []
        for i, ch in enumerate(text):
            out.extend([i] * len(_PROJECT[ord(ch)]))
        out.append(len(text))
        return out

    return projected, index


# Compatibility forms whose fold changes what the text says, not how it is drawn: 10⁶ is not
# 106, H₂O's 2 is not a separate 2, ½ is not 1/2 (nor "1 2" once the slash separates words).
_MEANINGFUL_COMPAT: Final = ("<super>", "<sub>", "<fraction>")


def _fold_exact_char(ch: str) -> str:
    if ch.isascii():
        return _TABLE[ord(ch)]
    if unicodedata.decomposition(ch).startswith(_MEANINGFUL_COMPAT) or (
            unicodedata.category(ch)[0] == "S" and not unicodedata.normalize("NFKC", ch).isascii()):
        return ch  # (a symbol's look-alike is another symbol: ∞ is not "oo"; ＋ is still +)
    return _TABLE[ord(ch)]


class _ExactTable(dict[int, str]):
    """``str.translate`` table of :func:`fold_exact`, filled one character at a time."""

    def __missing__(self, code: int) -> str:
        self[code] = value = _fold_exact_char(chr(code))
        return value


_EXACT: Final = _ExactTable()


def fold_exact(text: str) -> str:
    """:func:`fold` for the exact-duplicate key: the same, except that superscripts, subscripts
    and vulgar fractions stay themselves (their compatibility fold changes the meaning: ``10⁶``
    is not ``106``), and so do symbols that are not a compatibility form of an ASCII one (``∞`` is
    not ``oo``, ``−`` stays a minus). Detection folds them all (a key in superscripts is a key)."""
    if _plain(text):
        return text
    return text.translate(_EXACT)


class _StripTable(dict[int, "int | None"]):
    """``str.translate`` table of :func:`strip_invisible`, filled one character at a time."""

    def __missing__(self, code: int) -> int | None:
        self[code] = value = None if is_invisible(chr(code)) else code
        return value


_STRIP: Final = _StripTable()


def strip_invisible(text: str) -> str:
    """``text`` without its invisible characters (rendering): what is shown is what was checked.
    Whitespace controls (tab, line breaks) are kept: the renderer folds them itself."""
    if _plain(text):
        return text
    return text.translate(_STRIP)


_DASH_WORDS: Final = frozenset({"DASH", "HYPHEN", "MINUS"})
_LINE_NAME: Final = re.compile(r"\bHORIZONTAL (?:LINE|BAR|SCAN LINE)\b|^BOX DRAWINGS (?:LIGHT|HEAVY|DOUBLE) HORIZONTAL$")


@lru_cache(maxsize=4096)
def is_dash(ch: str) -> bool:
    """Whether ``ch`` reads as a dash or a horizontal rule: ``-``, any dash punctuation (Pd),
    anything TR39 maps to ``-`` or to the long-dash prototype U+30FC (em dash, box-drawing
    lines, ...), and symbols named as a dash, hyphen, minus or horizontal line (U+23AF, U+2796)."""
    if ch == DASH:
        return True
    if ch.isascii():
        return False
    if unicodedata.category(ch) == "Pd" or ch == "\u30fc":
        return True
    if _ascii_prototypes().get(ch) == DASH:
        return True
    name = unicodedata.name(ch, "")
    return bool(_DASH_WORDS & set(name.split())) or bool(_LINE_NAME.search(name)) or _long_dash_lookalike(ch)


@lru_cache(maxsize=1)
def _long_dashes() -> frozenset[str]:
    """Characters TR39 lists as confusable with U+30FC (the prototype of the long dashes)."""
    return frozenset(h["c"] for h in _confusables().get("\u30fc", ()) if len(h["c"]) == 1)


def _long_dash_lookalike(ch: str) -> bool:
    return ch in _long_dashes()


def skeleton(line: str) -> str:
    """What a line looks like, for matching against block delimiters and headers: :func:`fold`,
    every dash made ``-``, case folded, whitespace collapsed."""
    folded = fold(line)
    if not folded.isascii():
        folded = "".join(DASH if is_dash(c) else c for c in folded)
    return fold_whitespace(folded.casefold())
