"""The optional semantic signal: vectors in SQLite, similarity queries, the wordllama loader.

The plumbing is tested with a small deterministic embedder (a real class: hashed bag of words);
the real model is tested when the ``semantic`` extra is installed (it is in the ``test`` extra).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import support
import pytest

from memlocal import MemoryBank
from memlocal.config import Config
from memlocal.semantic import SemanticIndex, available, similarity_bonus
from memlocal.text import words

# numpy is imported by the tests that use it: at module level, every worker paid for it while
# collecting (the store's own import of sqlite_utils leaves it out, docs/architecture.md).
if importlib.util.find_spec("numpy") is None:
    pytest.skip("numpy is not installed (the semantic extra)", allow_module_level=True)
if TYPE_CHECKING:
    import numpy as np

DEV = {
    "allergy": "The user is allergic to shellfish and vegetarian on weekdays",
    "pytest": "Prefers pytest over unittest",
    "lisbon": "Lives in Lisbon, timezone Europe/Lisbon",
    "indent": "Uses 4-space indentation",
    "coffee": "Orders a flat white every morning",
    "migrations": "Ask before running database migrations",
}


class HashEmbedder:
    """A deterministic embedder: each word adds a fixed pseudo-random direction (from its hash)."""

    name = "hash-64"
    dim = 64

    def embed(self, texts: Sequence[str]) -> "np.ndarray":
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for w in words(text):
                seed = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
                out[i] += np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        return out


def _bank(path: Path, **env: str) -> MemoryBank:
    return MemoryBank(path, config=Config.load(environ=env))


def test_available_matches_the_installed_packages() -> None:
    assert available() == (importlib.util.find_spec("wordllama") is not None)


def test_similar_ranks_by_cosine_and_keeps_to_the_profile(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db") as bank:
        ids = {k: bank.save("dev", content=v).memory.id for k, v in DEV.items()}
        other = bank.save("ops", content="Prefers pytest over unittest").memory.id
        index = SemanticIndex(bank.store, HashEmbedder())
        got = index.similar("dev", "prefers pytest", k=3)
        assert list(got)[0] == ids["pytest"] and other not in got and len(got) == 3
        assert list(got.values()) == sorted(got.values(), reverse=True)
        want = HashEmbedder().embed([DEV["pytest"], "prefers pytest"])
        import numpy as np

        cos = float(want[0] @ want[1] / np.linalg.norm(want[0]) / np.linalg.norm(want[1]))
        assert got[ids["pytest"]] == pytest.approx(cos, abs=1e-6)
        # Every memory got a vector lazily, stored as float32 unit vectors beside the memory.
        rows = bank.store.read("SELECT id, model, length(vector) FROM memory_vectors WHERE id IN"
                               f" ({', '.join('?' for _ in ids)})", list(ids.values()))
        assert {r[0] for r in rows} == set(ids.values()) and {r[1:] for r in rows} == {("hash-64", 256)}
        assert index.similar("dev", "   ") == {}


def test_vectors_follow_the_memory_text_and_deletion(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db") as bank:
        a = bank.save("dev", content=DEV["pytest"]).memory
        b = bank.save("dev", content=DEV["coffee"]).memory
        index = SemanticIndex(bank.store, HashEmbedder())
        assert list(index.similar("dev", "flat white coffee", k=1)) == [b.id]
        with bank.store.transaction() as c:  # another writer rewrites the text: the vector goes
            c.execute("UPDATE memories SET processed_content = 'Drinks flat white coffee' WHERE id = ?", (a.id,))
        assert bank.store.read("SELECT count(*) FROM memory_vectors WHERE id = ?", (a.id,)) == [(0,)]
        assert set(index.similar("dev", "flat white coffee", k=2)) == {a.id, b.id}
        bank.delete("dev", b.id)
        assert bank.store.read("SELECT count(*) FROM memory_vectors WHERE id = ?", (b.id,)) == [(0,)]
        assert list(index.similar("dev", "flat white coffee", k=5)) == [a.id]


def test_the_bonus_is_a_quarter_of_the_similarity_above_a_floor() -> None:
    assert similarity_bonus(0.05) == 0.0
    assert similarity_bonus(0.5) == pytest.approx(0.1)
    assert similarity_bonus(1.0) == pytest.approx(0.225)


def test_off_unless_enabled(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db") as bank:
        assert bank.semantic is None
        bank.save("dev", content=DEV["pytest"])
        assert bank.store.read("SELECT count(*) FROM memory_vectors") == [(0,)]


@pytest.mark.skipif(not available(), reason="the semantic extra (wordllama) is not installed")
def test_the_shipped_model_loads_offline_and_bridges_paraphrases(tmp_path: Path) -> None:
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    with _bank(tmp_path / "m.db", MEMLOCAL_SEMANTIC_ENABLED="1") as bank:
        assert bank.semantic is not None
        ids = {k: bank.save("dev", content=v).memory.id for k, v in DEV.items()}
        assert (list(root.handlers), root.level) == before  # wordllama's basicConfig was undone
        # Written on save.
        assert bank.store.read("SELECT count(*) FROM memory_vectors") == [(len(DEV),)]
        sem = bank.semantic
        assert list(sem.similar("dev", "which test framework?", k=1)) == [ids["pytest"]]
        assert list(sem.similar("dev", "what food should I avoid at lunch?", k=1)) == [ids["allergy"]]
        assert ids["lisbon"] in sem.similar("dev", "what time zone is the user in?", k=2)


# --- the signal in recall (evidence mode) ---------------------------------------------------------

def _dev_bank(path: Path, semantic: bool, **overrides: object) -> tuple[MemoryBank, dict[str, str]]:
    from dev_profile import dev_profile

    bank = MemoryBank(path, config=Config.load(environ={}, overrides={"semantic.enabled": semantic, **overrides}))
    return bank, {m.id: key for key, m in dev_profile(bank).items()}


def test_recall_adds_similarity_to_the_topic_exactly_as_the_full_scan(tmp_path: Path) -> None:
    """The wiring, with the deterministic embedder: recall under the semantic signal is the full
    scan given the same embedding top-k, and each result's topic is its lexical topic plus the
    bonus of the similarity its evidence records."""
    from memlocal.scoring import RankQuery, rank_brute_force
    from memory_factory import NOW

    bank, _ = _dev_bank(tmp_path / "on.db", True)
    plain, _ = _dev_bank(tmp_path / "off.db", False)
    with bank, plain:
        bank._semantic = SemanticIndex(bank.store, HashEmbedder())  # stands in for the shipped model
        for query in ("prefers dark editor", "weekly team standup on Thursdays", "flat white coffee order"):
            got = bank.query_with_relevance("dev", query, limit=8, min_score=0.0, now=NOW)
            sim = bank.semantic.similar("dev", query)
            want = rank_brute_force(bank.store.iter_profile("dev"), RankQuery(query, 8, 0.0, now=NOW, similarity=sim))
            assert [(r.memory.id, r.score, r.evidence) for r in got] == [(r.memory.id, r.score, r.evidence) for r in want]
            lexical = {r.memory.id: r.breakdown.topic
                       for r in plain.query_with_relevance("dev", query, limit=30, min_score=0.0, now=NOW)}
            assert any(r.evidence.semantic is not None for r in got)
            for r in got:
                bonus = similarity_bonus(r.evidence.semantic) if r.evidence.semantic is not None else 0.0
                assert r.breakdown.topic == pytest.approx(lexical.get(r.memory.id, 0.0) + bonus)
                assert "semantic" in r.evidence.to_dict() or r.evidence.semantic is None


def test_the_spec_mode_ignores_the_signal(tmp_path: Path) -> None:
    from memory_factory import NOW

    bank, _ = _dev_bank(tmp_path / "on.db", True, **{"ranking.mode": "spec"})
    plain, _ = _dev_bank(tmp_path / "off.db", False, **{"ranking.mode": "spec"})
    with bank, plain:
        bank._semantic = SemanticIndex(bank.store, HashEmbedder())
        for query in ("prefers dark editor", "flat white coffee order"):
            got = bank.query_with_relevance("dev", query, now=NOW)
            assert [(r.memory.id, r.score, r.evidence) for r in got] == [
                (r.memory.id, r.score, r.evidence) for r in plain.query_with_relevance("dev", query, now=NOW)]


def test_off_means_numpy_is_never_imported(tmp_path: Path) -> None:
    """The default install's recall, save and inject never import the extra (a fresh process on
    an existing database: creating one runs the migrations through sqlite_utils, which imports
    numpy by itself whenever it is installed)."""
    import subprocess
    import sys

    MemoryBank(tmp_path / "m.db", config=Config.load(environ={})).close()
    code = ("import sys\nfrom memlocal import MemoryBank\nfrom memlocal.config import Config\n"
            f"b = MemoryBank({str(tmp_path / 'm.db')!r}, config=Config.load(environ={{}}))\n"
            "b.save('dev', content='Prefers pytest over unittest')\n"
            "assert b.recall('dev', 'which test framework?')\n"
            "b.inject('dev', '@memory', 'which test framework?')\nb.close()\n"
            "print(sorted(m for m in ('numpy', 'wordllama', 'tokenizers') if m in sys.modules))\n")
    out = support.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(not available(), reason="the semantic extra (wordllama) is not installed")
def test_the_shipped_model_in_recall_bridges_paraphrases_and_pads_nothing(tmp_path: Path) -> None:
    """The real model through ``recall``: paraphrases gain similarity evidence, and off-topic
    queries still return nothing (similarity alone must reach ``SIMILARITY_EVIDENCE``)."""
    from memory_factory import NOW

    bank, key = _dev_bank(tmp_path / "m.db", True)
    with bank:
        drink = bank.query_with_relevance("dev", "what should I drink?", now=NOW)
        assert key[drink[0].memory.id] == "tea" and drink[0].evidence.semantic is not None
        assert drink[0].breakdown.topic > 1.0  # full lexical coverage plus the similarity bonus
        for query, want in (("what food should I avoid at lunch?", "allergy"),
                            ("what time zone is the user in?", "lisbon"),
                            ("which test framework?", "pytest")):
            results = bank.recall("dev", query, now=NOW)
            assert want in [key[r.memory.id] for r in results[:3]], query
        for off_topic in ("quantum chromodynamics lattice gauge", "weather tomorrow in Paris", "knit a scarf",
                          "photosynthesis in plants", "football world cup winner"):
            assert bank.query_with_relevance("dev", off_topic, now=NOW) == [], off_topic
