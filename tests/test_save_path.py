"""The save path's update check (``MemoryBank.save``, docs/hygiene.md "Updates"): what it reads
and the pre-checks it makes before :func:`memlocal.updates.relation`, which must never change a
decision the rule alone would make.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from memlocal import MemoryBank
from memlocal.config import Config
from memlocal.updates import SURE, relation, statement

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
        old = bank.save("p", content="The staging cluster runs 6 nodes").memory
        assert bank.store.read("SELECT count(*) FROM memory_features_docs")[0][0] == 0
        new = bank.save("p", content="The staging cluster now runs 9 nodes")
        assert new.superseded == old.id
        # Nothing was indexed; the retired one left the waiting set and its successor waits.
        assert bank.store.read("SELECT count(*) FROM memory_features_docs")[0][0] == 0
        assert bank.store.read("SELECT m.id FROM memory_features_pending p JOIN memories m"
                               " ON m.rowid = p.rowid") == [(new.memory.id,)]


def test_a_text_without_a_subject_updates_nothing(tmp_path: Path) -> None:
    """"The user prefers ..." has no subject the rule can compare (``user`` is a stopword): two
    such texts with different values are both kept, with no look-up for candidates."""
    with MemoryBank(tmp_path / "u.db", config=Config.defaults()) as bank:
        a = bank.save("p", content="The user prefers structured JSON output whenever report 1 has a schema")
        b = bank.save("p", content="The user prefers structured JSON output whenever report 2 has a schema")
        assert not statement(b.memory.processed_content).subject
        assert b.superseded is None and not b.deduplicated
        assert bank.get("p", a.memory.id).is_active
