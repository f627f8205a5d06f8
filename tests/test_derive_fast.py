"""The fast paths of what every save and imported line derives from its text (words, the exact
key's normal form, the near-duplicate signature, the features) give exactly what the plain
definitions give: the stored keys and features must not depend on which path made them."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from memlocal.hygiene import rules as hygiene
from memlocal.relevance import text
from memlocal.errors import fold_whitespace
from memlocal.relevance.features import features_of
from memlocal.relevance.fold import fold
from memlocal.model import Memory, default_summary
from memlocal.store import write_row

# Text that exercises every branch: ASCII letters, digits, apostrophes, signs, decimal points,
# punctuation of both kinds (separating and kept), whitespace controls, and some non-ASCII.
_ALPHABET = st.sampled_from(list("abcxyzABZ0159'-.,;:!?()[]\"#%@&+$/\\_ \t\n") + ["é", "’", "€", "\u200b", "Ⅻ", "ß"])
_TEXTS = st.text(_ALPHABET, max_size=80) | st.sampled_from([
    "The user's  dark-mode is -5 degrees, 3.5% of C++ and C# in 1,000 rows.",
    "rock'n'roll ''quoted'' a''b 'lead trail' ' x",
    "Set up the time zone: Europe/Lisbon, 9am -.5",
])


def _words_reference(value: str) -> list[str]:
    if value.isascii():
        return re.findall(r"[a-z0-9]+(?:'[a-z0-9]+)*", value.lower())
    return text._WORD_RE.findall(text._fold(value))


def _normalise_reference(value: str) -> str:
    """normalise() as it was written before its fast paths (the regexes over the whole text)."""
    folded = fold(value).casefold()
    if not folded.isascii():
        folded = text.strip_diacritics(folded.translate(text.APOSTROPHES))
    marked = False
    if ("." in folded or "," in folded) and hygiene._DECIMAL_RE.search(folded):
        folded, marked = hygiene._DECIMAL_RE.sub(lambda m: hygiene._MARKS[m.group()], folded), True
    if "-" in folded and hygiene._SIGN_RE.search(folded):
        folded, marked = hygiene._SIGN_RE.sub(hygiene._MARKS["-"], folded), True
    if "'" in folded and hygiene._INNER_APOSTROPHE_RE.search(folded):
        folded, marked = hygiene._INNER_APOSTROPHE_RE.sub(hygiene._MARKS["'"], folded), True
    if folded.isascii():
        out = " ".join(hygiene._ASCII_TOKEN_RE.findall(folded))
    else:
        out = fold_whitespace(folded.translate(hygiene._SEPARATORS))
    return out.translate(hygiene._UNMARK) if marked else out


def _signature_reference(value: str) -> hygiene.Signature:
    """signature() as a plain loop over the words."""
    value = fold(value)
    norm = _normalise_reference(value)
    marked = hygiene._ASCII_MARK_RE.search(norm) if norm.isascii() else hygiene._MARK_RE.search(norm)
    numbers = set(hygiene._MARKED_TOKEN_RE.findall(norm)) if marked else set()
    seq: list[str] = []
    guard: list[str] = []
    for word in _words_reference(value):
        term = text.stem(word)
        if term is not None:
            if term not in seq:
                seq.append(term)
        elif word not in hygiene.FILLER_WORDS:
            guard.append(hygiene.GUARD_FORMS.get(word) or word.replace("'", ""))
    return hygiene.Signature(frozenset(seq), tuple(seq), tuple(sorted(guard)), frozenset(numbers))


@settings(max_examples=300, deadline=None)
@given(_TEXTS)
def test_the_fast_paths_derive_what_the_plain_definitions_do(value: str) -> None:
    assert text.words(value) == _words_reference(value)
    assert hygiene.normalise.__wrapped__(value) == _normalise_reference(value)
    assert hygiene.signature.__wrapped__(value) == _signature_reference(value)
    # The cached split shared by the signature and the features changes neither.
    assert text.terms(value) == text.terms(value + "") == text.terms(str(value))


def test_a_rows_keys_and_features_are_its_texts_own() -> None:
    """write_row (what a save and an import store) equals the keys and features computed one by
    one, whichever order the shared caches were filled in."""
    content = "Ana's build uses -5 °C, 3.5% more RAM; rock'n'roll in C++ and C#, set up at 9am"
    m = Memory(id="mem-0000abcd", profile_name="p", raw_input=content + " (raw)", processed_content=content,
               summary=default_summary(content))
    row = write_row(m)
    want = (hygiene.text_key(content), hygiene.text_key(content + " (raw)"),
            hygiene.signature_key(_signature_reference(content)), features_of(content, m.summary))
    assert (row[15], row[16], row[17], row[18]) == want


def test_a_word_memo_is_bounded_and_returns_what_its_function_does() -> None:
    memo = text.WordMemo(str.upper, limit=2)
    assert list(map(memo.__getitem__, ["a", "b", "a", "c"])) == ["A", "B", "A", "C"]
    assert len(memo) <= 2  # emptied when full, never grown past its limit
