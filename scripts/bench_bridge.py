#!/usr/bin/env python3
"""The bridge to Claude's hosted memory stores at 1,000 memories (``scripts/bench.py --only bridge``).

    python scripts/bench_bridge.py [--memories 1000] [--json]

A profile of ``--memories`` memories (scripts/_benchlib.py's corpus, imported) is mirrored
through the real anthropic SDK client into the memory stores server of the tests
(tests/memory_stores_fake.py: a local HTTP server on 127.0.0.1 that speaks the API), from an
empty store: ``bridge.first_sync_1k_s`` (the store's creation, the listing, one create per
memory, the links written). Then a sync with nothing changed: ``bridge.noop_sync_s`` (median of
five) and ``bridge.noop_requests`` (the requests it sent: the listing's pages, nothing else).
``--details`` (through bench.py) adds the requests of the first sync and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

PROFILE = "bench"


def bench_bridge(tmp: Path, memories: int = 1000, noop_repeats: int = 5) -> dict[str, Any]:
    """The figures above, on a fresh database in ``tmp``."""
    from memory_stores_fake import FAKE_KEY, FakeMemoryStores

    from memlocal import MemoryBank
    from memlocal.config import Config
    from memlocal.integrations.claude_stores import sync_profile

    fake = FakeMemoryStores()
    saved = {k: os.environ.get(k) for k in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")}
    os.environ.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY=FAKE_KEY)
    try:
        config = Config.load(environ={}, overrides={"store.path": str(tmp / "bridge.db"),
                                                    "bucket.local_only_notice": False, "llm.enabled": False})
        with MemoryBank.open(config=config) as bank:
            from _benchlib import Corpus

            bank.import_memories(Corpus(7).memories(memories, PROFILE))  # the bench's corpus, one transaction
            t = time.perf_counter()
            first = sync_profile(bank, PROFILE)
            first_s = time.perf_counter() - t
            assert first.result == "ok" and first.created == memories, first.to_dict()
            noop_s, noop_requests = [], []
            for _ in range(noop_repeats):
                fake.clear()
                t = time.perf_counter()
                noop = sync_profile(bank, PROFILE)
                noop_s.append(time.perf_counter() - t)
                assert noop.unchanged == memories and not fake.writes(), noop.to_dict()
                noop_requests.append(len(fake.requests))
        return {"first_sync_1k_s" if memories == 1000 else f"first_sync_{memories}_s": first_s,
                "noop_sync_s": statistics.median(noop_s), "noop_requests": max(noop_requests),
                "_details": {"memories": memories, "first_sync_requests": first.requests,
                             "noop_sync_runs_s": noop_s, "loadavg": os.getloadavg()}}
    finally:
        fake.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memlocal-bench-bridge-") as tmp:
        res = bench_bridge(Path(tmp), args.memories)
    if args.json:
        print(json.dumps({"bridge": {k: v for k, v in res.items() if not k.startswith("_")}}, indent=2))
    else:
        d = res["_details"]
        first = next(v for k, v in res.items() if k.startswith("first_sync"))
        print(f"bridge first sync   {first:.2f} s for {d['memories']:,} memories ({d['first_sync_requests']} requests)   "
              f"no-op sync {res['noop_sync_s'] * 1000:.1f} ms, {res['noop_requests']} requests   "
              f"(load {' '.join(f'{x:.1f}' for x in d['loadavg'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
