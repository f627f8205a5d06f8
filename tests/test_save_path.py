"""The save path's update check (``MemoryBank.save``, docs/hygiene.md "Updates"): what it reads
and the pre-checks it makes before :func:`memlocal.hygiene.updates.relation`, which must never change a
decision the rule alone would make.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlocal import MemoryBank, SaveRequest
from memlocal.config import Config
from memlocal.hygiene.updates import SURE, relation, statement

# Sentences built from these: subjects with and without a possessor or a pronoun, verbs (change
# verbs and markers among them), values of every kind, content words.
_SUBJECTS = ["The staging cluster", "My dentist", "I", "We", "The lab meeting", "Our rent", "The user",
             "My daughter's school", "ci-runner-3", "The release train", "Report 12", "It"]
_VERBS = ["is", "runs", "now runs", "moved to", "was upgraded to", "has", "takes", "prefers", "is now",
          "switched to", "leaves on", "costs"]
_VALUES = ["6 nodes", "9 nodes", "17:00", "16:30", "Fridays", "Tuesdays", "Dr. Chen", "Dr. Alvarez",
           "nginx 1.24", "nginx 1.26", "db-west-1", "1200 GBP", "the 08:20 train", "structured JSON"]
_TAILS = ["", "a month", "on weekdays", "at the Riverside clinic", "for report 5", "since May"]


@st.composite
def _sentences(draw: st.DrawFn) -> str:
    return " ".join(w for w in (draw(st.sampled_from(_SUBJECTS)), draw(st.sampled_from(_VERBS)),
                                draw(st.sampled_from(_VALUES)), draw(st.sampled_from(_TAILS))) if w)


@given(_sentences(), _sentences())
def test_the_rule_is_sure_only_of_the_same_subject(old: str, new: str) -> None:
    """The save's pre-checks skip a candidate whose statement's subject differs from the new
    text's, and the whole look-up when the new text has no subject: sound only while the rule
    is sure of nothing else."""
    if relation(old, new) == SURE:
        assert statement(new).subject and statement(old).subject == statement(new).subject


def test_the_update_check_reads_the_waiting_memories_without_indexing_them(tmp_path: Path) -> None:
    """A memory still waiting for its FTS5 batch is a candidate of the update check, which
    writes nothing of its own (the batch stays waiting; only the save commits)."""
    with MemoryBank(tmp_path / "u.db", config=Config.defaults()) as bank:
        old = bank.save(SaveRequest("p", content="The staging cluster runs 6 nodes")).memory
        assert bank.store.read("SELECT count(*) FROM memory_features_docs")[0][0] == 0
        new = bank.save(SaveRequest("p", content="The staging cluster now runs 9 nodes"))
        assert new.superseded == old.id
        # Nothing was indexed; the retired one left the waiting set and its successor waits.
        assert bank.store.read("SELECT count(*) FROM memory_features_docs")[0][0] == 0
        assert bank.store.read("SELECT m.id FROM memory_features_pending p JOIN memories m"
                               " ON m.rowid = p.rowid") == [(new.memory.id,)]


def test_a_text_without_a_subject_updates_nothing(tmp_path: Path) -> None:
    """"The user prefers ..." has no subject the rule can compare (``user`` is a stopword): two
    such texts with different values are both kept, with no look-up for candidates."""
    with MemoryBank(tmp_path / "u.db", config=Config.defaults()) as bank:
        a = bank.save(SaveRequest("p", content="The user prefers structured JSON output whenever report 1 has a schema"))
        b = bank.save(SaveRequest("p", content="The user prefers structured JSON output whenever report 2 has a schema"))
        assert not statement(b.memory.processed_content).subject
        assert b.superseded is None and not b.deduplicated
        assert bank.get("p", a.memory.id).is_active


def test_a_save_normalises_its_text_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One save reads its text through one :class:`~memlocal.hygiene.normalised.NormalisedText`: the
    exact, near and update checks and the store's keys of the row all take their forms from it,
    so the text is folded once and split into words once (it was folded for the key and again for
    the exact form, and each check derived its own forms from the string)."""
    from functools import lru_cache

    from memlocal.relevance import fold, text
    from memlocal.hygiene import rules as hygiene, normalised, updates

    body = "The staging cluster now runs 9 nodes in the Frankfurt region"
    with MemoryBank(tmp_path / "n.db", config=Config.defaults()) as bank:
        # Candidates for every check: an older statement of the subject, and a near look-alike.
        bank.save(SaveRequest("p", content="The staging cluster runs 6 nodes in the Frankfurt region"))
        bank.save(SaveRequest("p", content="The staging cluster runs 6 nodes in Frankfurt"))
        for cached in (hygiene.normalise, hygiene.exact_form, hygiene.signature, text.word_tuple, updates.statement):
            cached.cache_clear()  # every form of the new text is computed, not found from an earlier test
        folds: list[str] = []
        splits: list[str] = []
        built: list[str] = []

        def counted_fold(value: str) -> str:
            folds.append(value)
            return fold.fold_exact(value)

        real_words, real_init = text.words, normalised.NormalisedText.__init__

        def counted_words(value: str) -> list[str]:
            splits.append(value)
            return real_words(value)

        def counted_init(self: normalised.NormalisedText, value: str) -> None:
            built.append(value)
            real_init(self, value)

        monkeypatch.setattr(hygiene, "fold_exact", counted_fold)  # a fold outside the one cache counts too
        monkeypatch.setattr(hygiene, "_fold_exact", lru_cache(maxsize=1024)(counted_fold))
        monkeypatch.setattr(text, "words", counted_words)
        monkeypatch.setattr(normalised.NormalisedText, "__init__", counted_init)
        result = bank.save(SaveRequest("p", content=body))
    assert result.superseded is not None and not result.deduplicated  # every check ran, the update applied
    assert built.count(body) == 1, "one NormalisedText per save"
    assert folds.count(body) == 1, "the text is folded once"
    assert splits.count(body) == 1, "the text is split into words once"


def test_a_save_takes_one_save_request(tmp_path: Path) -> None:
    """Every face builds one SaveRequest and the bank's save takes it, its only argument: there
    is no second, loose-argument form. The request is a frozen value, checked when saved."""
    import dataclasses

    from memlocal.errors import ValidationError

    request = SaveRequest("p", content="Ana prefers dark mode", category="preference")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.content = "other"  # type: ignore[misc]
    with MemoryBank(tmp_path / "r.db", config=Config.defaults()) as bank:
        assert bank.save(request).memory.processed_content == "Ana prefers dark mode"
        with pytest.raises(TypeError):
            bank.save("p", content="Ana prefers dark mode")  # type: ignore[call-arg]
        with pytest.raises(ValidationError, match="give rawInput or content"):
            bank.save(SaveRequest("p"))
