"""The ``rest`` section of scripts/bench.py: memlocal's REST API under a mixed load from ``wrk``,
side by side with the plain service of scripts/rest_baseline.py under the same load.

The load (one Lua script for both servers): 10 profiles of a 10k-memory bank (1,000 each), 60%
search, 20% save, 10% list (20 newest), 10% injection preview, uniformly over the profiles, the
queries drawn from the benchmark corpus; ``wrk`` (Debian's) with 32 connections. Every save's
content is unique, so a save that is acknowledged (2xx) and not in the database afterwards is
``lost``; ``errors`` counts non-2xx answers and wrk's socket errors (timeouts included).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from _benchlib import Corpus, free_port, insert_rows

from memlocal import MemoryBank
from memlocal.config import Config

PROFILES = 10
PER_PROFILE = 1_000
SAVE_MARK = "load save"

LUA = r"""
local queries = {%(queries)s}
local escaped = {%(escaped)s}
local profiles = %(profiles)d
counter = 0
statuses = {}
acked = 0
local threads = {}


function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(id * 7919 + os.time())
end

function request()
  local p = "p" .. math.random(0, profiles - 1)
  local r = math.random()
  local k = math.random(1, #queries)
  local q, qe = queries[k], escaped[k]
  if r < 0.6 then

    return wrk.format("GET", "/api/profiles/" .. p .. "/memories/search?q=" .. qe)
  elseif r < 0.8 then
    counter = counter + 1

    local body = '{"content": "%(mark)s ' .. id .. '-' .. counter .. ': ' .. q .. '"}'
    return wrk.format("POST", "/api/profiles/" .. p .. "/memories", {["Content-Type"] = "application/json"}, body)
  elseif r < 0.9 then

    return wrk.format("GET", "/api/profiles/" .. p .. "/memories?limit=20")
  else

    return wrk.format("GET", "/api/profiles/" .. p .. "/injection-preview?q=" .. qe)
  end
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  -- wrk answers in order per connection, but not across them: count saves by their body instead
  if status >= 200 and status < 300 and body:find('"synced"', 1, true) then acked = acked + 1 end
end

function done(summary, latency, requests)
  local all, saves = {}, 0
  for _, t in ipairs(threads) do
    for s, n in pairs(t:get("statuses")) do all[tostring(s)] = (all[tostring(s)] or 0) + n end
    saves = saves + t:get("acked")
  end
  local e = summary.errors
  local parts = {}
  for s, n in pairs(all) do parts[#parts + 1] = '"' .. s .. '": ' .. n end
  io.write(string.format('RESULT {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, "max_us": %%d,'
    .. ' "socket_errors": %%d, "statuses": {%%s}, "saves_acked": %%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    e.connect + e.read + e.write + e.timeout, table.concat(parts, ", "), saves))
end
"""


def lua_script(queries: list[str]) -> str:
    import urllib.parse

    quoted = ", ".join(json.dumps(q) for q in queries)
    escaped = ", ".join(json.dumps(urllib.parse.quote(q)) for q in queries)
    return LUA % {"queries": quoted, "escaped": escaped, "profiles": PROFILES, "mark": SAVE_MARK}


def build_banks(tmp: Path, seed: int, per_profile: int = PER_PROFILE) -> tuple[Path, Path, list[str]]:
    """memlocal's 10k bank (10 profiles) and the baseline's database holding the same memories."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from rest_baseline import create

    corpus = Corpus(seed)
    memlocal_db, baseline_db = tmp / "rest-memlocal.db", tmp / "rest-baseline.db"
    rows = []
    bank = MemoryBank(memlocal_db, config=Config.load(environ={}))
    try:
        for i in range(PROFILES):
            memories = corpus.memories(per_profile, profile=f"p{i}")
            insert_rows(bank.store, memories)
            # As saves leave them: the recall features derived (rows inserted here lack them).
            bank.store.derive_stale_features(f"p{i}")
            rows += [(m.id, m.profile_name, m.processed_content, m.summary, m.category, m.to_dict()["createdAt"])
                     for m in memories]
    finally:
        bank.close()
    create(str(baseline_db), rows)
    return memlocal_db, baseline_db, corpus.queries(500)


def _wait_up(url: str, proc: subprocess.Popen[Any], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                r.read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer in {timeout:.0f} s")


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def run_wrk(url: str, script: Path, seconds: float, connections: int, threads: int = 2) -> dict[str, Any]:
    wrk = shutil.which("wrk")
    assert wrk is not None
    out = subprocess.run([wrk, "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s", "--timeout", "10s",
                          "-s", str(script), url], capture_output=True, text=True, timeout=seconds + 120)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed ({out.returncode}): {out.stderr.strip()[-500:]} {out.stdout[-500:]}")
    return dict(json.loads(line[len("RESULT "):]))


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of process group ``pgid`` (a server and
    its pre-forked workers), from /proc; 0 where /proc is absent."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def count_saves(db: Path, table: str, column: str) -> int:
    conn = sqlite3.connect(str(db))
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table} WHERE {column} LIKE ?", (SAVE_MARK + " %",)).fetchone()[0])
    finally:
        conn.close()


def one_load(name: str, cmd: list[str], env: dict[str, str], port: int, db: Path, count: tuple[str, str],
             script: Path, seconds: float, connections: int, log_path: Path, warmup: float = 5) -> dict[str, Any]:
    """Start a server, run the load against it, stop it, count its saves."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_up(url + "/api/profiles/p0/memories?limit=1", proc)
        # A server that has been up a while: its first requests (imports, caches, memlocal's recall
        # index per profile) are not what a user of a running server meets. Same for both.
        if warmup > 0:
            run_wrk(url, script, warmup, connections)
        before = count_saves(db, *count)
        cpu0 = group_cpu_s(proc.pid)
        res = run_wrk(url, script, seconds, connections)
        cpu = group_cpu_s(proc.pid) - cpu0
    finally:
        _stop(proc)
    found = count_saves(db, *count) - before
    statuses = {int(k): v for k, v in res["statuses"].items()}
    bad = sum(n for s, n in statuses.items() if not 200 <= s < 300)
    return {"req_per_s": res["requests"] / (res["duration_us"] / 1e6), "p50_ms": res["p50_us"] / 1000,
            "p99_ms": res["p99_us"] / 1000, "errors": bad + res["socket_errors"],
            "lost": max(0, res["saves_acked"] - found),
            # The server's CPU per answered request: on a shared machine the ratio of the two
            # services' figures holds where their wall-clock throughput does not.
            "cpu_ms_per_req": 1000 * cpu / max(1, res["requests"]),
            "_details": {"server": name, "cpu_s": cpu, "requests": res["requests"], "statuses": res["statuses"],
                         "socket_errors": res["socket_errors"], "saves_acked": res["saves_acked"],
                         "saves_found": found, "max_ms": res["max_us"] / 1000}}


def bench_rest(tmp: Path, *, seconds: float = 20, connections: int = 32, rounds: int = 1, seed: int = 7,
               workers: int | None = None, warmup: float = 5, memories: int = PROFILES * PER_PROFILE,
               log=print) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """``rest.{req_per_s, p50_ms, p99_ms, errors, lost}`` and ``rest.baseline.{...}``: each round
    runs memlocal then the baseline (fresh copies of the same data), back to back."""
    if shutil.which("wrk") is None:
        raise SystemExit("the rest section needs wrk: apt-get install -y wrk")
    log(f"rest: building a {memories:,}-memory bank over {PROFILES} profiles (and the baseline's copy)")
    memlocal_src, baseline_src, queries = build_banks(tmp, seed, max(1, memories // PROFILES))
    script = tmp / "load.lua"
    script.write_text(lua_script(queries))
    here = Path(__file__).resolve().parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLOCAL_", "INTERNAL_S3_", "S3_"))}
    env.setdefault("PYTHONPYCACHEPREFIX", str(tmp / "pycache"))
    mine: list[dict[str, Any]] = []
    base: list[dict[str, Any]] = []
    for r in range(rounds):
        for name in ("memlocal", "baseline"):
            src = memlocal_src if name == "memlocal" else baseline_src
            db = tmp / f"round{r}-{src.name}"
            shutil.copyfile(src, db)
            port = free_port()
            if name == "memlocal":
                cmd = [sys.executable, "-m", "memlocal", "--db", str(db), "serve", "--port", str(port)]
                if workers is not None:
                    cmd += ["--workers", str(workers)]
                count = ("memories", "raw_input")
            else:
                cmd = [sys.executable, str(here / "rest_baseline.py"), str(db), "--port", str(port)]
                count = ("memories", "content")
            log(f"  rest round {r + 1}/{rounds}: {name}, wrk {connections} connections, {seconds:g} s")
            res = one_load(name, cmd, env, port, db, count, script, seconds, connections, tmp / f"rest-{name}.log",
                           warmup)
            log(f"    {res['req_per_s']:.0f} req/s, p50 {res['p50_ms']:.1f} ms, p99 {res['p99_ms']:.1f} ms, "
                f"{res['errors']} errors, {res['lost']} lost, server CPU {res['cpu_ms_per_req']:.2f} ms/request")
            (mine if name == "memlocal" else base).append(res)
    def med(runs: list[dict[str, Any]], key: str) -> float:
        import statistics

        return float(statistics.median(x[key] for x in runs))
    out: dict[str, Any] = {k: med(mine, k) for k in ("req_per_s", "p50_ms", "p99_ms", "cpu_ms_per_req")}
    out["errors"] = sum(x["errors"] for x in mine)
    out["lost"] = sum(x["lost"] for x in mine)
    out["baseline"] = {k: med(base, k) for k in ("req_per_s", "p50_ms", "p99_ms", "cpu_ms_per_req")}
    out["baseline"]["_details"] = {"errors": sum(x["errors"] for x in base), "rounds": [x["_details"] | {
        k: x[k] for k in ("req_per_s", "p50_ms", "p99_ms", "cpu_ms_per_req")} for x in base]}
    out["_details"] = {"rounds": [x["_details"] | {k: x[k] for k in ("req_per_s", "p50_ms", "p99_ms", "cpu_ms_per_req",
                                                                     "errors", "lost")} for x in mine], "seconds": seconds, "connections": connections,
                       "memories": memories, "profiles": PROFILES, "workers": workers}
    return out


if __name__ == "__main__":  # a quick look: python scripts/_restload.py [seconds]
    with tempfile.TemporaryDirectory() as d:
        print(json.dumps(bench_rest(Path(d), seconds=float(sys.argv[1]) if len(sys.argv) > 1 else 10), indent=2))
