"""``memlocal serve`` as a real process: start-up, the not-wired 503s, the token, the bind rule.
What does not depend on the process (the token check, the refusal's message for more hosts, reading
the database afterwards) runs in process."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from api_live import ServedInProcess, ServeProcess, free_port
from support import http, http_client, wait_for

from memlocal.faces.api.auth import check_bind
from memlocal.errors import ConfigError

TOKEN = "tok-" + "9" * 20


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_serve_answers_on_loopback_and_stops_cleanly_on_sigterm(tmp_path: Path, cli: Any) -> None:
    """Also the banner serve prints (the database, the bucket, the URLs): one serve process for
    both, this test and test_cli_output's former ``test_serve_prints_the_database_the_bucket_and_the_urls``
    (a serve process with its workers is ~1.3 s of CPU), every assertion of both kept."""
    db = tmp_path / "served.db"
    proc = ServeProcess(tmp_path, ["--db", str(db)])
    try:
        proc.wait_ready()
        with http_client(base_url=proc.url) as c:
            assert c.get("/healthz").json()["status"] == "ok"
            r = c.post("/api/profiles/p1/memories", json={"content": "served over HTTP"})
            assert r.status_code == 201
            assert c.get("/api/profiles/p1/memories").json()["total"] == 1
            assert c.get("/openapi.json").json()["info"]["title"] == "memlocal"
    finally:
        assert proc.stop() == 0, proc.log
    log = proc.log
    assert f"database:   {db}" in log
    assert "bucket:     none: local only" in log
    assert f"dashboard:  {proc.url}/" in log and f"API docs:   {proc.url}/docs" in log
    # The save went to the database named by --db, durably.
    assert "served over HTTP" in cli.at(db)("list", "--profile", "p1", "--json").stdout


@pytest.mark.parametrize("case", ["unwritable path", "not a database"])
def test_serve_starts_when_the_store_cannot_be_opened_and_answers_503(tmp_path: Path, case: str) -> None:
    if case == "unwritable path":
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory")
        db = blocker / "sub" / "memlocal.db"  # its parent cannot be created, even by root
        needle = "cannot open database"
    else:
        db = tmp_path / "junk.db"
        db.write_bytes(b"this is not an SQLite database at all\n" * 200)
        needle = "file is not a database"

    def answers_503(url: str) -> None:
        with http_client(base_url=url) as c:
            health = c.get("/healthz").json()
            assert health["status"] == "degraded" and needle in health["reason"]
            for method, path in (("GET", "/api/profiles/p1/memories"), ("POST", "/api/profiles/p1/memories"),
                                 ("GET", "/api/memory-bank"), ("GET", "/api/memory-bank/stats"),
                                 ("GET", "/api/automations/a1/memory")):
                r = c.request(method, path, json={"content": "x"} if method == "POST" else None)
                assert r.status_code == 503, r.text
                error = r.json()["error"]
                assert error["code"] == "not_wired" and needle in error["message"] and str(db) in error["message"]

    if case == "unwritable path":
        # The same wiring in process (the cases differ in the open's error only): a serve process
        # with its workers is ~1.5 s of CPU, and the other case shows the process starting degraded.
        with ServedInProcess(db) as served:
            answers_503(served.url)
        return
    proc = ServeProcess(tmp_path, ["--db", str(db)])
    try:
        proc.wait_ready()
        answers_503(proc.url)
    finally:
        proc.stop()
    assert "not wired" in proc.log
    assert db.read_bytes().startswith(b"this is not an SQLite database")  # left untouched


def test_token_from_the_environment_guards_every_request(tmp_path: Path) -> None:
    """The environment's token, served as ``serve`` wires it (in process: the process adds nothing
    here; test_non_loopback_bind_with_a_token_is_allowed_and_its_access_log_holds_no_token has a
    token in a real process)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with ServedInProcess(tmp_path / "t.db", env={"MEMLOCAL_API_TOKEN": TOKEN}) as served:
        with http_client(base_url=served.url) as c:
            assert c.get("/api/memory-bank/stats").status_code == 401
            assert c.get("/healthz").status_code == 401
            assert c.get("/api/memory-bank/stats", headers={"Authorization": "Bearer nope"}).status_code == 401
            assert c.get("/api/memory-bank/stats", headers=auth).status_code == 200


def test_non_loopback_bind_without_a_token_is_refused_at_start_up(tmp_path: Path, cli: Any) -> None:
    """The command, as a real process, for the first host (its exit and its one line on stderr);
    the rule it applies (``check_bind``, before anything is opened) for the others."""
    code, out, err = cli.process("serve", "--host", "0.0.0.0", "--port", str(free_port()), db=tmp_path / "x.db")
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "loopback" in lines[0] and "MEMLOCAL_API_TOKEN" in lines[0], (code, out, err)
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened
    for host in ("::", "192.0.2.10", "example.com"):
        with pytest.raises(ConfigError, match=f"refusing to listen on {re.escape(host)}, .*MEMLOCAL_API_TOKEN"):
            check_bind(host, "")


_B62 = "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5xY7zA9bC1"
GHP = "ghp_" + _B62[:36]


def test_non_loopback_bind_with_a_token_is_allowed_and_its_access_log_holds_no_token(tmp_path: Path) -> None:
    """A token lets serve listen beyond loopback; and the server's access log writes paths without
    their query values (no token, no credential). One serve process for both: this test and
    test_secrets_logs' former ``test_the_access_log_of_memlocal_serve_holds_no_token`` (which
    also ran one worker with a token), every assertion of both kept."""
    # One worker: uvicorn in the one process, without gunicorn's arbiter (the other tests here
    # run serve.workers' default, two or more workers on a machine of two cores or more).
    proc = ServeProcess(tmp_path, ["--db", str(tmp_path / "t.db")], env={"MEMLOCAL_API_TOKEN": TOKEN},
                        host="0.0.0.0", serve_args=["--workers", "1"])
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        proc.wait_ready()
        assert http.get(proc.url + "/healthz").status_code == 401
        assert http.get(proc.url + "/healthz", headers=auth).status_code == 200
        assert not os.popen(f"pgrep -P {proc.proc.pid}").read().split()  # no worker process
        for path in (f"/api/profiles/ops/memories/search?q=deploy%20{GHP}",
                     f"/api/profiles/ops/injection-preview?q=use+{GHP}&limit=3",
                     f"/api/profiles/ops/memories?password=Tr0ub4dor%263-horse",
                     f"/healthz?token={GHP}"):
            http.get(proc.url + path, headers=auth, timeout=10)
        http.get(proc.url + f"/api/profiles/ops/memories/search?q={GHP}", timeout=10)  # no token: 401
        log = proc.log
    finally:
        assert proc.stop() == 0, proc.log
    log += proc.log
    assert "GET /api/profiles/ops/memories/search" in log  # the access log is there
    for secret in (GHP, GHP[4:20], TOKEN, "Tr0ub4dor", "deploy%20"):
        assert secret not in log, secret


@pytest.mark.slow  # a serve process with a second worker
def test_serve_with_two_workers_spreads_a_burst_answers_from_both_and_stops_them_on_sigterm(
        tmp_path: Path, cli: Any) -> None:
    """``--workers 2``: two worker processes (gunicorn's, under the server's process) answer on
    the one port over the one WAL database.

    - Clients that connect at once are spread over the workers: each worker listens on a socket
      of its own (SO_REUSEPORT). On one shared socket the worker that woke first accepted every
      connection waiting, and the other idled while those clients' requests queued.
    - Every save is in the database whichever worker answered it.
    - SIGTERM to the server (the parent alone) stops the workers too, and it exits 0.

    One server for the three (each start is three interpreters)."""
    import signal
    import threading
    import time

    db = tmp_path / "workers.db"
    proc = ServeProcess(tmp_path, ["--db", str(db)], serve_args=["--workers", "2"])
    try:
        proc.wait_ready()
        workers = [int(p) for p in os.popen(f"pgrep -P {proc.proc.pid}").read().split()]
        assert len(workers) == 2, workers

        port = int(proc.url.rsplit(":", 1)[1])

        def tcp_table() -> list[list[str]]:
            with open("/proc/net/tcp") as table:
                return [line.split() for line in list(table)[1:]]

        def listening() -> int:  # the listening sockets on the port (/proc/net/tcp, state 0A)
            return sum(1 for row in tcp_table() if row[1].endswith(f":{port:04X}") and row[3] == "0A")

        def holders() -> dict[str, int]:
            """The connections to the port the workers hold now: established sockets with the
            port as their local one (by inode), each with the worker whose fd it is."""
            served = {row[9] for row in tcp_table() if row[1].endswith(f":{port:04X}") and row[3] == "01"}
            found = {}
            for pid in workers:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    try:
                        link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    except FileNotFoundError:  # closed meanwhile
                        continue
                    if link.startswith("socket:[") and link[8:-1] in served:
                        found[link[8:-1]] = pid
            return found

        # Which worker holds each connection is sampled all along, not once at the end: under
        # load a connection answered early can reach uvicorn's 5 s keep-alive timeout and be
        # closed before the last client is answered (a count of 23 of 24 was seen).
        seen: dict[str, int] = {}
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                seen.update(holders())
                done.wait(0.02)

        # Ready means one worker answered; the other may still be binding its socket.
        wait_for(lambda: listening() >= 2, 30, "both workers listening")
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(24)]
        try:
            for c in clients:
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            for c in clients:
                assert c.recv(4096).startswith(b"HTTP/1.1 200")
            done.set()
            sampler.join()
            seen.update(holders())
            accepted = [sum(1 for pid in seen.values() if pid == worker) for worker in workers]
        finally:
            done.set()
            for c in clients:
                c.close()
        assert sum(accepted) == 24 and min(accepted) > 0, accepted
        with http_client(base_url=proc.url, timeout=30) as hc:
            ids = {hc.post("/api/profiles/p1/memories", json={"content": f"saved through a worker {i}"}).json()["memory"]["id"]
                   for i in range(20)}
            assert len(ids) == 20
            assert hc.get("/api/profiles/p1/memories", params={"limit": 50}).json()["total"] == 20
        assert "workers:    2 processes" in proc.log
        os.kill(proc.proc.pid, signal.SIGTERM)  # the parent only, as a service manager does
        assert proc.proc.wait(30) == 0, proc.log
        for child in workers:
            deadline = time.monotonic() + 30
            while _running(child) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not _running(child), child
    finally:
        proc.stop()
    assert {m["id"] for m in cli.at(db).json("list", "-p", "p1", "--json", "--limit", "50")["memories"]} == ids


@pytest.mark.slow  # a serve process with a second worker
def test_the_workers_stop_when_the_server_process_is_killed(tmp_path: Path) -> None:
    """SIGKILL to the server (no chance to stop anything): its workers notice within seconds and
    stop, rather than serving on as orphans, and the port is free again."""
    import signal

    proc = ServeProcess(tmp_path, ["--db", str(tmp_path / "orphans.db")], serve_args=["--workers", "2"])
    try:
        proc.wait_ready()
        workers = [int(p) for p in os.popen(f"pgrep -P {proc.proc.pid}").read().split()]
        assert len(workers) == 2, workers
        os.kill(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(30)
        wait_for(lambda: not any(_running(w) for w in workers), 30, "the workers to stop after their server died")
        port = int(proc.url.rsplit(":", 1)[1])
        with socket.socket() as probe:  # nothing listens any more
            assert probe.connect_ex(("127.0.0.1", port)) != 0
    finally:
        proc.stop()


@pytest.mark.slow  # three serve processes with two workers each
def test_sigterm_while_a_worker_is_still_starting_stops_the_server(tmp_path: Path) -> None:
    """SIGTERM to the server's process group (as ``support.stop`` and a terminal's Ctrl-C send it)
    while one worker is up and the other is still opening its bank: every process stops within a
    few seconds. A worker that took the signal before uvicorn's handlers were in place once lost it
    and served on, until the arbiter's graceful timeout (30 s) ended in a SIGKILL."""
    import signal
    import subprocess
    import time

    for round_ in range(3):
        proc = ServeProcess(tmp_path, ["--db", str(tmp_path / f"w{round_}.db")], serve_args=["--workers", "2"])
        try:
            wait_for(lambda: "Started server process" in proc.log or proc.proc.poll() is not None, 30,
                     "a first worker to start")
            started = time.monotonic()
            os.killpg(proc.proc.pid, signal.SIGTERM)
            try:
                proc.proc.wait(10)
            except subprocess.TimeoutExpired:
                pytest.fail(f"round {round_}: still running 10 s after SIGTERM: {proc.log}")
            assert time.monotonic() - started < 10
        finally:
            proc.stop()
