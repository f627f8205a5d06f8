"""scripts/bench.py's ``bridge`` section prints its documented keys (a small profile: the keys, not the rates)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import support

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.mark.slow
@pytest.mark.anthropic_sdk
def test_the_bridge_bench_prints_its_keys() -> None:
    proc = support.run([sys.executable, str(SCRIPTS / "bench.py"), "--only", "bridge", "--bridge-memories", "200",
                        "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"bridge"}
    # At the bench's 1,000 memories the first key is first_sync_1k_s (scripts/bench_bridge.py).
    assert set(out["bridge"]) == {"first_sync_200_s", "noop_sync_s", "noop_requests"}
    assert out["bridge"]["noop_requests"] == 2  # two listing pages of 100, nothing else
