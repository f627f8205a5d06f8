"""Logs never hold a credential: the server's access log writes paths without their
query values, and every line memlocal writes passes the projection the bank's texts pass."""

from __future__ import annotations

import logging
from pathlib import Path

from api_live import ServeProcess
from support import http

from memlocal.logs import RedactingFilter

_B62 = "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5xY7zA9bC1"
GHP = "ghp_" + _B62[:36]
API_TOKEN = "Zk3Jq9Lm2Xp8Rt5Vw1Yb6Nc4Hd7Gf0Ae"


def test_the_access_log_of_memlocal_serve_holds_no_token(tmp_path: Path) -> None:
    proc = ServeProcess(tmp_path, ["--db", str(tmp_path / "t.db")], env={"MEMLOCAL_API_TOKEN": API_TOKEN},
                        serve_args=["--workers", "1"])
    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    try:
        proc.wait_ready(auth)
        for path in (f"/api/profiles/ops/memories/search?q=deploy%20{GHP}",
                     f"/api/profiles/ops/injection-preview?q=use+{GHP}&limit=3",
                     f"/api/profiles/ops/memories?password=Tr0ub4dor%263-horse",
                     f"/healthz?token={GHP}"):
            http.get(proc.url + path, headers=auth, timeout=10)
        http.get(proc.url + f"/api/profiles/ops/memories/search?q={GHP}", timeout=10)  # no token: 401
        log = proc.log
    finally:
        proc.stop()
    log += proc.log
    assert "GET /api/profiles/ops/memories/search" in log  # the access log is there
    for secret in (GHP, GHP[4:20], API_TOKEN, "Tr0ub4dor", "deploy%20"):
        assert secret not in log, secret


def test_every_line_memlocal_logs_passes_the_projection() -> None:
    record = logging.LogRecord("memlocal.x", logging.WARNING, __file__, 1, "pushed %s for %s", None, None)
    record.args = (f"config password=Tr0ub4dor&3-horse", f"gh\u200bp_{_B62[:36]}")
    RedactingFilter().filter(record)
    line = record.getMessage()
    assert "Tr0ub4dor" not in line and _B62[:36] not in line and "[REDACTED:" in line
