"""Write-time deduplication as one component: the exact rule, the near rule and the update rule
(docs/hygiene.md), each asking the store only the look-ups of :class:`DuplicateLookups`.

The rules themselves are pure (:mod:`memlocal.hygiene.rules`: the keys, signatures and the near rule;
:mod:`memlocal.hygiene.updates`: whether a statement updates another); this module is where they meet
the rows: which candidates each check reads, in which order, and which one wins. The bank asks
:class:`Deduplicator` and acts on the answer (returns the duplicate, or supersedes).
"""

from __future__ import annotations

import re
from typing import Final, Iterable, Protocol, Sequence

from ..relevance import text
from ..config import DedupConfig
from ..relevance.fold import fold_exact
from .rules import NEAR_MIN_TERMS, exact_form, is_technical, jaccard, near_duplicate, normalise, signature
from ..model import Memory
from .normalised import NormalisedText
from .updates import MAYBE, SURE, relation, statement

# Candidates the near-duplicate rule examines (the recall index's best matches), and the update
# rule its required-terms matches.
NEAR_CANDIDATES = 8


class DuplicateLookups(Protocol):
    """What deduplication reads of the store (:class:`memlocal.store.Store` has them): active
    memories of one profile only, oldest first where several share a key."""

    def find_by_keys(self, profile: str, keys: Sequence[str], *, near_key: str | None = None
                     ) -> tuple[list[Memory], list[Memory]]:
        """Those with one of the exact ``keys`` (:func:`memlocal.hygiene.rules.text_key`), and, by the
        same read, those with ``near_key`` (:func:`memlocal.hygiene.rules.near_key`)."""
        ...

    def find_by_near_key(self, profile: str, key: str) -> list[Memory]:
        """Those with this near key."""
        ...

    def similar(self, profile: str, terms: Sequence[str], limit: int) -> list[Memory]:
        """Up to ``limit`` sharing the most of ``terms``, best first (a full-text ranking)."""
        ...

    def similar_texts(self, profile: str, terms: Sequence[str], limit: int, *,
                      required: Sequence[str] = ()) -> list[tuple[str, str]]:
        """``(id, processedContent)`` of the full-text matches (with ``required``: those holding
        all of them, newest first), then of those not in the full-text index yet; no write."""
        ...


Found = tuple[list[Memory], list[Memory]]

def _technical_tokens(form: tuple[str, ...]) -> tuple[str, ...]:
    """The technical tokens of a text's :func:`exact_form` ``form``, in order: a near duplicate must
    hold the same ones ("Run the tests with -v" is not "... with -V")."""
    return tuple(t for t in form if is_technical(t))


class Deduplicator:
    """The duplicate and update checks of one save (or of :meth:`MemoryBank.find_duplicate`)
    under ``settings`` (``dedup.*``), reading through ``lookups``. The new text comes as one
    :class:`~memlocal.hygiene.normalised.NormalisedText`: every check reads its forms from it."""

    def __init__(self, lookups: DuplicateLookups, settings: DedupConfig) -> None:
        self.lookups = lookups
        self.settings = settings

    def find(self, profile: str, value: NormalisedText, category: str | None, skip: frozenset[str] = frozenset()
             ) -> Memory | None:
        """The active memory that a save of ``value`` in ``category`` (``None``: any) repeats:
        the exact rule, then the near rule when ``dedup.near`` is on; ignoring ``skip``."""
        found = self.candidates(profile, value)
        dup = self.exact(profile, (value,), category, skip, found=found[0] if found else None)
        if dup is None and self.settings.near:
            dup = self.near(profile, value, category, skip, found=found[1] if found else None)
        return dup

    def candidates(self, profile: str, value: NormalisedText) -> Found | None:
        """The rows both checks of ``value`` would read, with one query: the active memories of
        ``profile`` with its exact key, and those with its near key. ``None`` when the near check
        would not use the stored near key (``dedup.near`` off, a threshold below 1.0, a short
        text): the exact check then reads its rows alone."""
        if not self.settings.near or self.settings.near_threshold < 1.0:
            return None
        key = value.near_key
        if len(value.signature.terms) < NEAR_MIN_TERMS or key is None:
            return None
        return self.lookups.find_by_keys(profile, [value.text_key], near_key=key)

    def exact(self, profile: str, texts: Iterable[NormalisedText], category: str | None,
              skip: frozenset[str] = frozenset(), *, found: list[Memory] | None = None) -> Memory | None:
        """The oldest active memory of ``profile`` that one of ``texts`` repeats exactly, in
        ``category`` (``None``: any category), ignoring the ids in ``skip``. ``found``: the rows
        with the texts' keys, when already read (:meth:`candidates`)."""
        texts = tuple(texts)
        wanted = {t.exact_form for t in texts}
        if found is None:
            found = self.lookups.find_by_keys(profile, sorted({t.text_key for t in texts}))[0]
        for m in found:
            if category is not None and m.category != category:
                continue  # the same words as a preference and as a context are two memories
            # Confirm on the text: a key written by another tool could be stale.
            if m.id not in skip and (exact_form(m.processed_content) in wanted or exact_form(m.raw_input) in wanted):
                return m
        return None

    def near(self, profile: str, processed: NormalisedText, category: str | None,
             skip: frozenset[str] = frozenset(), *, found: list[Memory] | None = None) -> Memory | None:
        """An active memory of ``profile`` in ``category`` (``None``: any) that ``processed``
        restates (the guarded rule), ignoring the ids in ``skip``. ``found``: the rows with its
        near key, when already read (:meth:`candidates`)."""
        sig = processed.signature
        if len(sig.terms) < NEAR_MIN_TERMS:
            return None
        threshold = self.settings.near_threshold
        if found is not None and threshold >= 1.0:
            candidates = found
        elif threshold >= 1.0:
            # At 1.0 the rule is an equivalence: one lookup of the stored near_key (migration 9).
            candidates = self.lookups.find_by_near_key(profile, processed.near_key or "")
        else:
            candidates = self.lookups.similar(profile, processed.query_terms, NEAR_CANDIDATES)
        for m in candidates:
            if m.id in skip or (category is not None and m.category != category):
                continue
            other = signature(m.processed_content)
            # Cheap test first: the terms alone already rule it out. The signature's terms, not the
            # recall index's (text.terms adds topic words, "food" for "peanuts": a reworded text
            # never reached 1.0 against them, and nothing with such a word was ever merged).
            if jaccard(sig.terms, other.terms) < threshold:
                continue
            if near_duplicate(sig, other, threshold) \
                    and _technical_tokens(exact_form(m.processed_content)) == _technical_tokens(processed.exact_form):
                return m
        return None

    def update_of(self, profile: str, processed: NormalisedText, proposed: str | None = None,
                  shown_to_model: Sequence[Memory] = ()) -> str | None:
        """The id of the active memory of ``profile`` that a save of ``processed`` updates, if
        the rule is sure of one (:func:`memlocal.hygiene.updates.relation`): among the full-text index's
        matches, the one the rule is sure of. The LLM processor's proposal (one of
        ``shown_to_model``) joins the rule: it is taken when the rule finds the two related at
        all (sure or maybe), never for look-alikes the rule tells apart."""
        if proposed is not None:
            for m in shown_to_model:
                if m.id == proposed and m.is_active and relation(m.processed_content, processed.value) is not None:
                    return m.id
        said = processed.statement
        if not said.subject or not (said.values or said.marked):
            # relation() needs a subject to be sure of anything; without a value or a word of
            # change nothing is updated surely: no look-up.
            return None
        # A sure update has this subject, word for word, so the candidates hold all its terms (an
        # AND: bm25 ranks a few matches, however common the words); a pronoun alone ("I ...")
        # must keep its verb ("I now take the 08:20 train"), unless it is a form of be or have.
        # The memories still waiting for the FTS5 batch are read too, without indexing them (a
        # commit); only their ids and texts are read, which is all the rule looks at.
        required = text.terms(" ".join(said.subject_words))
        if not required and said.verb not in ("", "*", "be", "have"):
            required = text.terms(said.verb)
        # relation() is sure only of the same subject: a candidate with another is passed over
        # without the rest of the rule (statement() is cached by text).
        sure = [(mid, old) for mid, old in self.lookups.similar_texts(profile, processed.query_terms,
                                                                      NEAR_CANDIDATES, required=sorted(required))
                if statement(old).subject == said.subject and relation(old, processed.value) == SURE]
        if not sure:
            return None
        # Of several, the one that shares the most words with the new text (the same subject
        # restated twice: "The rent is 1200 GBP a month, due on the 1st" before "The rent is ...").
        mine = processed.terms
        return max(sure, key=lambda s: jaccard(mine, text.terms(s[1])))[0]

    def unsure_updates(self, profile: str, processed: NormalisedText, limit: int = 4) -> list[Memory]:
        """The active memories of ``profile`` that a save of ``processed`` may update, the rule
        unsure (:data:`memlocal.hygiene.updates.MAYBE`): among the full-text index's best matches, at most
        ``limit``, best first. What an LLM may judge (the save's judge step, :mod:`memlocal.bank.saving`);
        none when the rule is sure of one (:meth:`update_of` retires it without asking)."""
        said = processed.statement
        if not said.subject:
            return []
        out: list[Memory] = []
        for m in self.lookups.similar(profile, processed.query_terms, NEAR_CANDIDATES):
            if not m.is_active:
                continue
            rel = relation(m.processed_content, processed.value)
            if rel == SURE:
                return []
            if rel == MAYBE and len(out) < limit:
                out.append(m)
        return out
