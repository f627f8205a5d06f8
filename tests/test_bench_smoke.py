"""Smoke tests of the benchmark scripts on tiny sizes, so that they cannot rot.

They check that every section runs end to end (moto_server included) and prints the documented
JSON keys; they measure nothing (speed is measured by running the scripts, see
docs/benchmarks.md). The baselines' packages (the ``[bench]`` extra: rclone, rank-bm25) are not
needed: without them the scripts report those baselines as missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import support
import pytest

from s3server import S3Server

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_script_{name}", SCRIPTS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.mark.slow  # a few short-lived interpreters, SeaweedFS, a filled moto_server
def test_bench_runs_every_section_and_prints_the_documented_keys(tmp_path: Path, moto_server: S3Server) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    # 50 memories: every section, the push, both hydrations and the rclone baseline run end to end
    # (200 took ~6 s longer and checked nothing more; exactness at size is test_recall.py's job).
    # One repeat: one fresh process of each kind (start-up, CLI, runner), and --no-warmup: the
    # suite's bytecode cache (PYTHONPYCACHEPREFIX, kept by the children) is filled already, so the
    # untimed first run of each kind would only repeat the timed one (~3 s of CPU, the runner's ~1.5).
    # --quick: the plan without the second rclone copy (rclone's default HEAD after each PUT), a
    # flag of the same function; the overrides below set everything else. --moto: the sync sections
    # use (and reset) this worker's moto_server, as every test's ``s3`` does, rather than starting
    # and stopping one of their own (its start-up was ~2 s of CPU, and each request cost a third more).
    proc = support.run(
        [sys.executable, str(SCRIPTS / "bench.py"), "--quick", "--json", "--details", "--sizes", "50",
         "--queries", "2", "--saves", "5", "--repeats", "1", "--sync-repeats", "1", "--frozen", "1,2,0.1",
         "--noop-big", "20", "--no-warmup", "--moto", f"{moto_server.endpoint},{moto_server.pid}",
         # Every section but the fleet (tests/test_sync_fleet.py runs scripts/fleet.py's run_fleet).
         "--only", "save,recall,inject,import,startup,sync,runner,seaweedfs,secrets"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    details = out.pop("details")
    assert out.keys() == {"save", "recall", "cli", "inject", "import", "startup", "sync", "secrets"}
    assert out["secrets"].keys() == {"rescan_10k_s"} and details["secrets"]["rescan_changed"] == 1
    assert out["save"].keys() == {"p50_ms", "plain_p50_ms", "bare_p50_ms"}
    assert out["recall"].keys() == {"50", "cold", "first50_max_50_ms", "rss_50_mb"}
    assert out["recall"]["cold"].keys() == {"50_ms"}
    assert out["cli"].keys() == {"recall_ms"}
    assert out["recall"]["50"].keys() == {"p50_ms", "p95_ms", "fullscan_p50_ms", "fts_floor_p50_ms"}
    assert out["inject"].keys() == {"p50_ms"}
    assert out["import"].keys() == {"per_s"}
    assert out["startup"].keys() == {"open_first_recall_ms", "hydrate_ms"}
    assert out["sync"].keys() == {"push_per_s", "rclone_per_s", "noop_pass_s", "noop_requests", "noop_pass_100k_s",
                                  "hydrate_s", "hydrate_per_object_s", "fresh_runner_inject_s", "fresh_after_push_s",
                                  "frozen_cli_10_saves_s",
                                  "frozen_lib_100_saves_s", "frozen_rest_100_saves_s", "hung_pass_s", "seaweedfs"}
    weed = out["sync"].pop("seaweedfs")
    assert weed.keys() == {"push_per_s", "rclone_per_s", "push_cpu_ms_per_object", "rclone_cpu_ms_per_object",
                           "hydrate_s", "hydrate_per_object_s", "noop_requests", "noop_pass_s"}
    assert weed["noop_requests"] <= 3 and details["sync"]["seaweedfs"]["objects"] == 50
    for section, values in [*out.items(), ("seaweedfs", weed)]:
        for key, value in (values["50"] if section == "recall" else values).items():
            if not (section in ("sync", "seaweedfs") and key.startswith("rclone_")):
                assert isinstance(value, (int, float)) and value > 0, (section, key, value)
    # The fast path agreed with the full scan on every query, and the push pushed everything.
    assert details["recall"]["50"]["mismatches_vs_fullscan"] == 0
    assert details["sync"]["objects"] == 50
    assert details["sync"]["noop_full_listing_pages"] == 1
    assert out["sync"]["noop_requests"] <= 3 and details["sync"]["noop_100k_requests_runs"] == [2]
    assert details["machine"]["cpus"]


@pytest.mark.slow  # two servers under a second of wrk's load each
def test_bench_rest_section_runs_and_prints_the_documented_keys(tmp_path: Path) -> None:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is missing: apt-get install -y wrk (the rest section's load generator)")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = support.run([sys.executable, str(SCRIPTS / "bench.py"), "--only", "rest", "--rest-tiny", "--json", "--details"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    details = out.pop("details")
    assert out.keys() == {"rest"}
    assert out["rest"].keys() == {"req_per_s", "p50_ms", "p99_ms", "cpu_ms_per_req", "errors", "lost", "baseline"}
    assert out["rest"]["baseline"].keys() == {"req_per_s", "p50_ms", "p99_ms", "cpu_ms_per_req"}
    assert out["rest"]["cpu_ms_per_req"] > 0 and out["rest"]["baseline"]["cpu_ms_per_req"] > 0
    assert out["rest"]["errors"] == 0 and out["rest"]["lost"] == 0
    assert out["rest"]["req_per_s"] > 0 and out["rest"]["baseline"]["req_per_s"] > 0
    (first,) = details["rest"]["rounds"]
    assert first["saves_found"] >= first["saves_acked"] > 0


@pytest.mark.slow  # its own SeaweedFS, a push and two fresh hosts of 60 memories
def test_hydrate_floor_measures_every_step_and_the_real_passes(tmp_path: Path) -> None:
    """scripts/hydrate_floor.py (the floor of a fresh host's hydrate, docs/benchmarks.md) runs
    end to end on a tiny bank and prints each step, their sum, and the real passes beside it."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = support.run([sys.executable, str(SCRIPTS / "hydrate_floor.py"), "--count", "60", "--repeats", "1",
                        "--hydrates", "1", "--per-object", "1", "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out.keys() == {"count", "steps", "floor", "hydrates", "per_object"} and out["count"] == 60
    assert len(out["steps"]) == 9 and all(step["cpu_s"] >= 0 for step in out["steps"])
    assert out["floor"].keys() == {"cpu_s", "server_cpu_s", "two_core_wall_s"}
    assert out["floor"]["cpu_s"] == pytest.approx(sum(step["cpu_s"] for step in out["steps"]), abs=0.002)
    assert len(out["hydrates"]) == 1 and len(out["per_object"]) == 1
    assert out["hydrates"][0]["wall_s"] > 0 and out["per_object"][0]["wall_s"] > 0


def _locomo_fixture(path: Path) -> None:
    """Two tiny conversations in LoCoMo's shape, with its malformed evidence strings."""
    conv = {
        "speaker_a": "Ana", "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a beagle named Biscuit last week."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "That is lovely, I went hiking in the Alps."},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "Look at this!", "blip_caption": "a photo of a red kayak"},
        ],
        "session_2_date_time": "10:00 am on 20 June, 2023",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "My sister moved to Lisbon for a new job."},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "Biscuit learned to fetch the newspaper."},
        ],
    }
    qa = [
        {"question": "What is the name of Ana's beagle?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 1},
        {"question": "Where did Ben's sister move?", "answer": "Lisbon", "evidence": ["D:2:1"], "category": 2},
        {"question": "What did Ana show in the photo?", "answer": "a kayak", "evidence": ["D1:03"], "category": 4},
        {"question": "What tricks does the dog know?", "answer": "fetch", "evidence": ["D2:2; D1:1"], "category": 3},
        {"question": "Unanswerable?", "adversarial_answer": "x", "evidence": ["D1:2"], "category": 5},
        {"question": "No evidence left", "answer": "x", "evidence": ["D9:9", "D"], "category": 1},
    ]
    data = [{"sample_id": "conv-a", "conversation": conv, "qa": qa},
            {"sample_id": "conv-b", "conversation": conv, "qa": qa[:2]}]
    path.write_text(json.dumps(data), encoding="utf-8")


def test_locomo_eval_scores_every_system_on_a_tiny_conversation(tmp_path: Path) -> None:
    locomo = _load("locomo_eval")
    data = tmp_path / "locomo.json"
    _locomo_fixture(data)
    convs = locomo.load(data)
    assert [len(c.questions) for c in convs] == [4, 2]  # category 5 and evidence-less ones skipped
    assert [q.evidence for q in convs[0].questions] == [
        frozenset({"D1:1"}), frozenset({"D2:1"}), frozenset({"D1:3"}), frozenset({"D2:2", "D1:1"})]
    assert "[image: a photo of a red kayak]" in convs[0].turns[2].text

    result = locomo.evaluate(data)
    overall = result["overall"]
    assert overall["memlocal"]["questions"] == 6
    # "beagle" and "Lisbon" are each in one turn only: memlocal ranks it first.
    first = result["conversations"][1]["memlocal"]
    assert first["recall@1"] == 1.0 and first["mrr@10"] == 1.0
    for system, scores in overall.items():
        if scores is None:
            assert system == "bm25" and "rank-bm25" in result["missing"][system]
            continue
        assert set(scores) == {"recall@1", "recall@5", "recall@8", "recall@10", "mrr@10", "questions"}
        assert 0.0 <= scores["recall@1"] <= scores["recall@5"] <= scores["recall@8"] <= scores["recall@10"] <= 1.0
    assert "overall" in locomo.format_table(result)
    assert locomo.main([str(data), "--json", "--no-dated"]) == 0


def test_locomo_eval_reports_bm25_missing_without_the_bench_extra(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    locomo = _load("locomo_eval")
    data = tmp_path / "locomo.json"
    _locomo_fixture(data)
    monkeypatch.setitem(sys.modules, "rank_bm25", None)  # as if the [bench] extra were not installed
    result = locomo.evaluate(data, dated=False)
    assert result["overall"]["bm25"] is None
    assert "rank-bm25 is not installed" in result["missing"]["bm25"]
    assert result["overall"]["memlocal"]["questions"] == 6
    assert "not run" in locomo.format_table(result)
