"""scripts/bench.py's ``bridge`` section prints its documented keys (a small profile: the keys, not the rates)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.mark.slow
@pytest.mark.anthropic_sdk
def test_the_bridge_bench_prints_its_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """bench.py's ``main`` with the command line ``--only bridge --bridge-memories 200 --json``,
    in this process: the section runs the real anthropic SDK client against the tests' local
    memory stores server (scripts/bench_bridge.py), which this worker has imported already (the
    test is ``anthropic_sdk``). As its own interpreter it was ~3.5 s of CPU, ~2.5 of them the
    interpreter, memlocal and the SDK starting; bench.py as a process is test_bench_smoke's."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("_bench_script_bench_bridge", SCRIPTS / "bench.py")
        assert spec is not None and spec.loader is not None
        bench: Any = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = bench  # dataclasses look their module up there
        spec.loader.exec_module(bench)
        code = bench.main(["--only", "bridge", "--bridge-memories", "200", "--json"])
    finally:
        while str(SCRIPTS) in sys.path:  # bench.py inserts it as well
            sys.path.remove(str(SCRIPTS))
        sys.modules.pop("_bench_script_bench_bridge", None)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert set(out) == {"bridge"}
    # At the bench's 1,000 memories the first key is first_sync_1k_s (scripts/bench_bridge.py).
    assert set(out["bridge"]) == {"first_sync_200_s", "noop_sync_s", "noop_requests"}
    assert out["bridge"]["noop_requests"] == 2  # two listing pages of 100, nothing else
