"""Shared pieces of the benchmark scripts (``bench.py``, ``bench_recall.py``, ``bench_sync.py``).

- a synthetic profile generator (Zipf-distributed pseudo-words with the real cluster words mixed
  in, ages over a year, Zipf access counts) and query generator;
- the FTS5 floor query (the reference full scan is memlocal's own :class:`memlocal.relevance.scoring.FullScan`);
- timing helpers (percentiles, a stopwatch in milliseconds);
- a moto_server started on a free loopback port, and a fast way to fill a store.

The scripts import this module by putting ``scripts/`` on ``sys.path`` (they are not a package).
Nothing here is part of memlocal; the tests import it only to smoke-test the scripts.
"""

from __future__ import annotations

import bisect
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from memlocal import MemoryBank
from memlocal.relevance.clusters import CLUSTER_WORDS
from memlocal.config import Config
from memlocal.model import Memory, new_id, staleness_of, utcnow
from memlocal.relevance.scoring import ScoredMemory
from memlocal.store import WRITE_COLUMNS, Store, to_us, write_row

CATEGORIES = ("preference", "fact", "behavior", "context", "general")
PROFILE = "bench"
BUCKET = "memlocal-bench"
MS = 1000.0


# --- timing ------------------------------------------------------------------------------------


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def p50(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def timed_ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(milliseconds, result) of one call."""
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * MS, out


def rnd(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


# --- synthetic memories ------------------------------------------------------------------------


def vocabulary(rng: random.Random, size: int = 6000) -> list[str]:
    """Pseudo-words with a Zipf rank order, real cluster words spread through it."""
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pa", "do", "gre", "tra", "spi", "ble"]
    words = {"".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(size)}
    vocab = sorted(words)
    rng.shuffle(vocab)
    real = sorted({w for text in CLUSTER_WORDS.values() for w in text.split()})
    for w in real:
        vocab.insert(rng.randrange(len(vocab)), w)
    return vocab


class Zipf:
    """Rank sampler with P(rank i) ∝ 1 / (i + 1)^s."""

    def __init__(self, n: int, s: float = 1.05) -> None:
        weights = [1.0 / (i + 1) ** s for i in range(n)]
        total = sum(weights)
        acc, self.cdf = 0.0, []
        for w in weights:
            acc += w / total
            self.cdf.append(acc)

    def sample(self, rng: random.Random) -> int:
        return min(bisect.bisect_left(self.cdf, rng.random()), len(self.cdf) - 1)


class Corpus:
    """A seeded generator of synthetic memories and queries (same seed, same data)."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.vocab = vocabulary(self.rng)
        self.zipf = Zipf(len(self.vocab))

    def memories(self, n: int, profile: str = PROFILE) -> list[Memory]:
        rng, vocab, zipf = self.rng, self.vocab, self.zipf
        now = utcnow()
        out: list[Memory] = []
        ids: set[str] = set()
        for _ in range(n):
            mid = new_id()
            while mid in ids:  # 2^32 ids: a 100k profile draws a duplicate or two
                mid = new_id()
            ids.add(mid)
            words = [vocab[zipf.sample(rng)] for _ in range(rng.randint(6, 22))]
            text = " ".join(words).capitalize() + "."
            created = now - timedelta(days=rng.random() * 365)
            count = int(rng.paretovariate(1.3)) - 1 if rng.random() < 0.4 else 0
            last = created + (now - created) * rng.random() if count else None
            m = Memory(id=mid, profile_name=profile, raw_input=text, processed_content=text, summary=text[:50],
                       category=rng.choice(CATEGORIES), confidence=rng.choice((1.0, 1.0, 0.9, 0.7, 0.5)),
                       created_at=created, last_accessed_at=last, access_count=count)
            out.append(m.with_changes(staleness_score=staleness_of(m, now)))
        return out

    def queries(self, count: int) -> list[str]:
        rng, vocab, zipf = self.rng, self.vocab, self.zipf
        out = []
        for _ in range(count):
            k = rng.randint(1, 5)
            words = [vocab[zipf.sample(rng)] if rng.random() < 0.7 else rng.choice(vocab[:3000]) for _ in range(k)]
            out.append(" ".join(words))
        return out


def insert_rows(store: Store, memories: Iterable[Memory]) -> None:
    """Insert complete memories in one transaction (benchmark setup, not a measured path)."""
    with store.transaction() as c:
        c.executemany(f"INSERT INTO memories ({', '.join(WRITE_COLUMNS)}) VALUES "
                      f"({', '.join('?' for _ in WRITE_COLUMNS)})", [write_row(m) for m in memories])


def build(path: Path, n: int, corpus: Corpus) -> MemoryBank:
    """A local-only bank at ``path`` holding ``n`` synthetic memories in profile ``bench``."""
    bank = MemoryBank(path, config=Config.load(environ={}))
    insert_rows(bank.store, corpus.memories(n))
    add_fts_floor(bank.store)
    return bank


def add_fts_floor(store: Store) -> None:
    """The baseline's own full-text index: FTS5 ``porter unicode61`` over the memories' text
    (memlocal's store indexes the formula's features instead, docs/storage.md). Setup only."""
    with store.transaction() as c:
        c.execute("CREATE VIRTUAL TABLE IF NOT EXISTS bench_fts USING fts5(processed_content, summary,"
                  " content='memories', tokenize='porter unicode61')")
        c.execute("INSERT INTO bench_fts (bench_fts) VALUES ('rebuild')")


def fill(store: Store, n: int, profile: str = PROFILE) -> None:
    """N plain memories created now, inserted in one transaction (sync benchmark setup)."""
    now = utcnow()
    memories: list[Memory] = []
    seen: set[str] = set()
    while len(memories) < n:
        mid = new_id()
        if mid in seen:
            continue
        seen.add(mid)
        text = f"benchmark memory {len(memories)}: the user prefers structured JSON output for report {mid}"
        memories.append(Memory(id=mid, profile_name=profile, raw_input=text, processed_content=text,
                               summary=text[:50], created_at=now))
    insert_rows(store, memories)


# --- the reference and the floor ---------------------------------------------------------------


def same_ranking(got: Sequence[ScoredMemory], want: Sequence[ScoredMemory]) -> bool:
    """The exactness check: the same ids in the same order with the same scores."""
    return [(r.memory.id, r.score) for r in got] == [(r.memory.id, r.score) for r in want]


def fts_query(query: str) -> str:
    """The query's words OR-ed as FTS5 phrases (quotes escaped), the way a bare FTS search would."""
    from memlocal.relevance.text import words

    terms = [w.replace('"', '""') for w in words(query)]
    return " OR ".join(f'"{t}"' for t in terms) if terms else '""'


FTS_TOP8_SQL = (
    "SELECT m.id FROM bench_fts JOIN memories m ON m.rowid = bench_fts.rowid"
    " WHERE bench_fts MATCH ? AND m.profile = ? ORDER BY bm25(bench_fts) LIMIT 8"
)


# --- moto_server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m moto.server`` on a free 127.0.0.1 port; returns (process, endpoint URL)."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).read()
            return proc, endpoint
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"moto_server did not start (see {log})")


def stop_moto(proc: subprocess.Popen[bytes]) -> None:
    """Stop the moto_server this script started (by its pid)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class FrozenEndpoint:
    """A bucket endpoint that accepts connections and never answers (a hung bucket): a TCP
    server on 127.0.0.1 whose accepted sockets are held open, unread, until ``close``."""

    def __init__(self) -> None:
        import threading

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.endpoint = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _addr = self._sock.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self._sock.close()
        for conn in self.accepted:
            conn.close()

    def __enter__(self) -> "FrozenEndpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reset_moto(endpoint: str) -> None:
    """Wipe every bucket of the moto_server (``POST /moto-api/reset``)."""
    req = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST", data=b"")
    urllib.request.urlopen(req, timeout=30).read()


def s3_env(endpoint: str, bucket: str = BUCKET, workers: int = 16) -> dict[str, str]:
    """The environment memlocal reads its bucket from, pointed at ``endpoint``."""
    return {"INTERNAL_S3_BUCKET": bucket, "INTERNAL_S3_ENDPOINT": endpoint, "INTERNAL_S3_REGION": "us-east-1",
            "INTERNAL_S3_ACCESS_KEY_ID": "bench", "INTERNAL_S3_SECRET_ACCESS_KEY": "bench",
            "MEMLOCAL_SYNC_WORKERS": str(workers)}


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                        aws_secret_access_key="bench")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``), to tell whose time it was."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
