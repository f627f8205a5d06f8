"""The optional semantic signal: static word embeddings, stored in SQLite beside the memories.

Install ``pip install 'memlocal[semantic]'`` (the ``wordllama`` package, whose wheel ships its
weights: nothing is downloaded at run time) and enable ``semantic.enabled``; otherwise this
module is never imported by the recall path and numpy stays out of the default install (it is
imported here only).

- :func:`available` says whether the extra is installed (without importing it).
- :class:`WordLlamaEmbedder` loads the shipped model: ``WordLlama.load()`` looks for its
  tokenizer under ``tokenizer/`` while the wheel ships ``tokenizers/``, and then tries the
  network, so it is loaded with ``cache_dir`` = the package folder and ``disable_download``;
  importing ``wordllama`` calls ``logging.basicConfig`` on the root logger, which is undone.
- :class:`SemanticIndex` keeps one unit vector per memory in the table ``memory_vectors``
  (migration 5; a trigger drops a memory's vector when its text changes or it is deleted),
  written right after each save when enabled and back-filled lazily for memories that have none, and answers
  :meth:`SemanticIndex.similar`: the ``k`` memories of a profile most similar to a query, with
  their cosine similarity.

Any object with ``name``, ``dim`` and ``embed(texts) -> float32 array (n, dim)`` can stand in
for the embedder (the tests use a small deterministic one when wordllama is not installed).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, Sequence

# How similarity enters the topic (docs/relevance.md): topic + BONUS·max(0, cos − FLOOR). The
# formula is the scoring module's (pure, shared by the recall index and the full scan).
from .scoring import SIMILARITY_BONUS, SIMILARITY_FLOOR, similarity_bonus  # noqa: F401

if TYPE_CHECKING:
    import numpy as np

    from .store import Store

MODEL_CONFIG: Final = "l2_supercat"  # the configuration whose 256-dim weights the wheel ships
MODEL_DIM: Final = 256
CANDIDATES: Final = 50  # the embedding top-k unioned with the lexical top-k


def available() -> bool:
    """True when the ``semantic`` extra (wordllama and numpy) is installed; imports nothing."""
    return importlib.util.find_spec("wordllama") is not None and importlib.util.find_spec("numpy") is not None


class Embedder(Protocol):
    """Turns texts into vectors: ``name`` identifies the model (stored with each vector)."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> "np.ndarray":
        """A float32 array of shape (len(texts), dim)."""
        ...


class WordLlamaEmbedder:
    """wordllama's shipped static embeddings (``l2_supercat``, 256 dimensions), loaded offline."""

    name = f"wordllama-{MODEL_CONFIG}-{MODEL_DIM}"
    dim = MODEL_DIM

    def __init__(self) -> None:
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            import wordllama  # calls logging.basicConfig(level=INFO) on import
        finally:
            for h in list(root.handlers):  # put the root logger back as the application left it
                if h not in handlers:
                    root.removeHandler(h)
            root.setLevel(level)
        package = Path(wordllama.__file__).resolve().parent
        self._model = wordllama.WordLlama.load(config=MODEL_CONFIG, dim=MODEL_DIM, cache_dir=package,
                                               disable_download=True)

    def embed(self, texts: Sequence[str]) -> "np.ndarray":
        import numpy as np

        return np.asarray(self._model.embed(list(texts), norm=False), dtype=np.float32)


_shared: WordLlamaEmbedder | None = None
_shared_lock = threading.Lock()


def shared_embedder() -> WordLlamaEmbedder:
    """One loaded model per process (loading reads 8 MB of weights)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WordLlamaEmbedder()
        return _shared


def _unit(vectors: "np.ndarray") -> "np.ndarray":
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)


class SemanticIndex:
    """Memory vectors of one store, and similarity queries over one profile's active memories."""

    def __init__(self, store: "Store", embedder: Embedder | None = None) -> None:
        self.store = store
        self.embedder: Embedder = embedder if embedder is not None else shared_embedder()
        self._lock = threading.Lock()
        # profile -> (rev, ids, matrix of unit vectors): reloaded when the profile changes
        self._cache: dict[str, tuple[int, int, list[str], Any]] = {}

    def vectors_for(self, texts: Sequence[str]) -> list[bytes]:
        """Unit vectors of ``texts`` as stored (float32 bytes)."""
        return [v.tobytes() for v in _unit(self.embedder.embed(texts))]

    def store_vector(self, memory_id: str, vector: bytes) -> None:
        """Store one memory's vector (from :meth:`vectors_for`), right after its save."""
        with self.store.transaction() as c:
            c.execute("INSERT INTO memory_vectors (id, model, vector) SELECT ?, ?, ?"
                      " WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?)"
                      " ON CONFLICT(id) DO UPDATE SET model = excluded.model, vector = excluded.vector",
                      (memory_id, self.embedder.name, vector, memory_id))

    def backfill(self, profile: str, batch: int = 512) -> int:
        """Embed the active memories of ``profile`` that have no vector of this model yet."""
        missing = self.store.read(
            "SELECT m.id, m.processed_content FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id"
            " AND v.model = ? WHERE m.profile = ? AND m.is_active = 1 AND v.id IS NULL",
            (self.embedder.name, profile))
        for i in range(0, len(missing), batch):
            chunk = missing[i:i + batch]
            vectors = self.vectors_for([text for _, text in chunk])
            with self.store.transaction() as c:
                c.executemany("INSERT INTO memory_vectors (id, model, vector) VALUES (?, ?, ?)"
                              " ON CONFLICT(id) DO UPDATE SET model = excluded.model, vector = excluded.vector",
                              [(mid, self.embedder.name, v) for (mid, _), v in zip(chunk, vectors)])
        return len(missing)

    def _matrix(self, profile: str) -> tuple[list[str], Any]:
        import numpy as np

        row = self.store.read("SELECT rev, resets FROM profile_revs WHERE profile = ?", (profile,))
        rev, resets = row[0] if row else (0, 0)
        cached = self._cache.get(profile)
        if cached is not None and cached[:2] == (rev, resets):
            return cached[2], cached[3]
        self.backfill(profile)
        rows = self.store.read(
            "SELECT m.id, v.vector FROM memories m JOIN memory_vectors v ON v.id = m.id AND v.model = ?"
            " WHERE m.profile = ? AND m.is_active = 1", (self.embedder.name, profile))
        ids = [r[0] for r in rows]
        matrix = (np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), self.embedder.dim)
                  if rows else np.zeros((0, self.embedder.dim), dtype=np.float32))
        self._cache[profile] = (rev, resets, ids, matrix)
        return ids, matrix

    def similar(self, profile: str, query: str, k: int = CANDIDATES) -> dict[str, float]:
        """The ``k`` active memories of ``profile`` most similar to ``query``: id -> cosine.

        Ties are broken by id, so the answer is a function of the stored vectors alone.
        """
        import numpy as np

        if not query.strip():
            return {}
        with self._lock:
            ids, matrix = self._matrix(profile)
        if not ids:
            return {}
        q = _unit(self.embedder.embed([query]))[0]
        cos = matrix @ q
        if len(ids) > k:  # everything at least as similar as the k-th, then ties by id
            kth = np.partition(cos, len(ids) - k)[len(ids) - k]
            pool = np.nonzero(cos >= kth)[0].tolist()
        else:
            pool = list(range(len(ids)))
        order = sorted(pool, key=lambda i: (-float(cos[i]), ids[i]))[:k]
        return {ids[i]: float(cos[i]) for i in order}
