"""The optional semantic signal: vectors in SQLite, similarity queries, the wordllama loader.

The plumbing is tested with a small deterministic embedder (a real class: hashed bag of words);
the real model is tested when the ``semantic`` extra is installed (it is in the ``test`` extra).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from pathlib import Path
from typing import Sequence

import pytest

from memlocal import MemoryBank
from memlocal.config import Config
from memlocal.semantic import SemanticIndex, available, similarity_bonus
from memlocal.text import words

np = pytest.importorskip("numpy")

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
