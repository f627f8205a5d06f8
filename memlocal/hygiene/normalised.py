"""One text as every write-time check reads it, normalised once: :class:`NormalisedText`.

A save's text is read by the exact rule (its key and exact form), the near rule (its signature
and near key), the update rule (its statement and terms) and the store (the keys it writes
beside the row). Each of those forms is a fold and a tokenisation of the same text; the save
builds one :class:`NormalisedText` and hands it to every check
(:class:`memlocal.hygiene.dedup.Deduplicator`), which reads the forms from it instead of deriving them
from the string again. Each form is computed on first use, once.

The forms come from the pure rules' own functions (:mod:`memlocal.hygiene.rules`, :mod:`memlocal.hygiene.updates`,
:mod:`memlocal.relevance.text`), whose per-text caches it fills: the store's keys of the saved row
(``hygiene.text_key``, ``hygiene.near_key``) are then read from them, not computed again.
"""

from __future__ import annotations

from functools import cached_property
from typing import Final

from ..relevance import text
from .rules import Signature, exact_form, normalise, signature, signature_key, text_key
from .updates import Statement, statement

# Terms of a text sent to the full-text index to find similar memories.
QUERY_TERMS: Final = 32


class NormalisedText:
    """A text and its normalised forms, each computed once on first use (see the module
    docstring). Two are equal when their texts are."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NormalisedText) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"NormalisedText({self.value!r})"

    @cached_property
    def key_form(self) -> str:
        """The form exact duplicates share (:func:`memlocal.hygiene.rules.normalise`)."""
        return normalise(self.value)

    @cached_property
    def text_key(self) -> str:
        """The stored exact-duplicate key (:func:`memlocal.hygiene.rules.text_key`)."""
        return text_key(self.value)

    @cached_property
    def exact_form(self) -> tuple[str, ...]:
        """What the exact rule compares (:func:`memlocal.hygiene.rules.exact_form`)."""
        return exact_form(self.value)

    @cached_property
    def signature(self) -> Signature:
        """What the near rule compares (:func:`memlocal.hygiene.rules.signature`)."""
        return signature(self.value)

    @cached_property
    def near_key(self) -> str | None:
        """The stored near-duplicate key (:func:`memlocal.hygiene.rules.signature_key`); ``None`` for a
        text too short for the near rule."""
        return signature_key(self.signature)

    @cached_property
    def terms(self) -> frozenset[str]:
        """The recall index's terms (:func:`memlocal.relevance.text.terms`)."""
        return text.terms(self.value)

    @cached_property
    def query_terms(self) -> list[str]:
        """At most ``QUERY_TERMS`` of :attr:`terms`, in a stable order: what a look-up of similar
        memories sends to the full-text index."""
        return sorted(self.terms)[:QUERY_TERMS]

    @cached_property
    def statement(self) -> Statement:
        """What the update rule reads of it (:func:`memlocal.hygiene.updates.statement`)."""
        return statement(self.value)
