"""``memlocal serve`` as a real process: start-up, the not-wired 503s, the token, the bind rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from api_live import ServeProcess, free_port

TOKEN = "tok-" + "9" * 20


def test_serve_answers_on_loopback_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "served.db"
    proc = ServeProcess(tmp_path, ["--db", str(db)])
    try:
        proc.wait_ready()
        with httpx.Client(base_url=proc.url) as c:
            assert c.get("/healthz").json()["status"] == "ok"
            r = c.post("/api/profiles/p1/memories", json={"content": "served over HTTP"})
            assert r.status_code == 201
            assert c.get("/api/profiles/p1/memories").json()["total"] == 1
            assert c.get("/openapi.json").json()["info"]["title"] == "memlocal"
    finally:
        assert proc.stop() == 0, proc.log
    # The save went to the database named by --db, durably.
    out = subprocess.run([sys.executable, "-m", "memlocal", "--db", str(db), "list", "--profile", "p1", "--json"],
                         capture_output=True, text=True, check=True)
    assert "served over HTTP" in out.stdout


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
    proc = ServeProcess(tmp_path, ["--db", str(db)])
    try:
        proc.wait_ready()
        with httpx.Client(base_url=proc.url) as c:
            health = c.get("/healthz").json()
            assert health["status"] == "degraded" and needle in health["reason"]
            for method, path in (("GET", "/api/profiles/p1/memories"), ("POST", "/api/profiles/p1/memories"),
                                 ("GET", "/api/memory-bank"), ("GET", "/api/memory-bank/stats"),
                                 ("GET", "/api/automations/a1/memory")):
                r = c.request(method, path, json={"content": "x"} if method == "POST" else None)
                assert r.status_code == 503, r.text
                error = r.json()["error"]
                assert error["code"] == "not_wired" and needle in error["message"] and str(db) in error["message"]
    finally:
        proc.stop()
    assert "not wired" in proc.log
    if case == "not a database":
        assert db.read_bytes().startswith(b"this is not an SQLite database")  # left untouched


def test_token_from_the_environment_guards_every_request(tmp_path: Path) -> None:
    proc = ServeProcess(tmp_path, ["--db", str(tmp_path / "t.db")], env={"MEMLOCAL_API_TOKEN": TOKEN})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        proc.wait_ready()
        with httpx.Client(base_url=proc.url) as c:
            assert c.get("/api/memory-bank/stats").status_code == 401
            assert c.get("/healthz").status_code == 401
            assert c.get("/api/memory-bank/stats", headers={"Authorization": "Bearer nope"}).status_code == 401
            assert c.get("/api/memory-bank/stats", headers=auth).status_code == 200
    finally:
        proc.stop()


def test_non_loopback_bind_without_a_token_is_refused_at_start_up(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "::", "192.0.2.10", "example.com"):
        r = subprocess.run(
            [sys.executable, "-m", "memlocal", "--db", str(tmp_path / "x.db"), "serve", "--host", host,
             "--port", str(free_port())],
            capture_output=True, text=True, timeout=60,
        )
        assert r.returncode != 0
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "loopback" in lines[0] and "MEMLOCAL_API_TOKEN" in lines[0], (r.returncode, r.stdout, r.stderr)
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened


def test_non_loopback_bind_with_a_token_is_allowed(tmp_path: Path) -> None:
    proc = ServeProcess(tmp_path, ["--db", str(tmp_path / "t.db")], env={"MEMLOCAL_API_TOKEN": TOKEN},
                        host="0.0.0.0")
    try:
        proc.wait_ready()
        assert httpx.get(proc.url + "/healthz").status_code == 401
        assert httpx.get(proc.url + "/healthz", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    finally:
        proc.stop()
