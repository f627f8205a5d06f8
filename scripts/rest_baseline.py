#!/usr/bin/env python3
"""The REST baseline: the plain memory service a user could write in an afternoon.

FastAPI + the standard library's sqlite3, with the same routes' shapes as memlocal's REST API
(docs/rest.md) for the four calls of the load in ``scripts/bench.py``'s ``rest`` section:

- ``GET  /api/profiles/{name}/memories/search?q=``: FTS5 ``bm25`` top 8 of the profile;
- ``POST /api/profiles/{name}/memories`` ``{"content": ...}``: one INSERT, committed durably;
- ``GET  /api/profiles/{name}/memories?limit=&offset=``: newest first, with the total;
- ``GET  /api/profiles/{name}/injection-preview?q=``: the profile's preferences and facts, then
  the query's bm25 top 8, as one text block.

WAL, ``synchronous=FULL`` (every commit fsynced, as memlocal's saves are), one connection per
worker thread, plain ``def`` endpoints (FastAPI's thread pool), one uvicorn worker. It checks
nothing, ranks nothing but bm25, redacts nothing, records nothing: the floor memlocal is compared
with, not a product.

    python scripts/rest_baseline.py DB --port 8766     # DB made by ``create(DB, rows)``
"""

from __future__ import annotations

import argparse
import secrets
import sqlite3
import threading
from datetime import datetime, timezone
from typing import Any, Iterable

SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, profile TEXT NOT NULL, content TEXT NOT NULL,
    summary TEXT NOT NULL, category TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS memories_profile ON memories (profile, created_at);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(content, content='memories', content_rowid='rowid',
    tokenize='porter unicode61');
"""


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.row_factory = sqlite3.Row
    return conn


def create(path: str, rows: Iterable[tuple[str, str, str, str, str, str]]) -> None:
    """The baseline's database: ``rows`` of (id, profile, content, summary, category, createdAt)."""
    conn = connect(path)
    conn.executescript(SCHEMA)
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO memories (id, profile, content, summary, category, created_at)"
                     " VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('rebuild')")
    conn.execute("COMMIT")
    conn.close()


def fts_query(q: str) -> str:
    words = [w for w in "".join(c if c.isalnum() else " " for c in q).split() if w]
    return " OR ".join(f'"{w}"' for w in words) or '""'


from pydantic import BaseModel  # noqa: E402


class Body(BaseModel):
    content: str
    category: str = "general"


def build_app(path: str) -> Any:
    from fastapi import FastAPI, HTTPException

    local = threading.local()

    def db() -> sqlite3.Connection:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = connect(path)
        return conn

    def as_dict(r: sqlite3.Row) -> dict[str, Any]:
        return {"id": r["id"], "profileName": r["profile"], "processedContent": r["content"],
                "summary": r["summary"], "category": r["category"], "createdAt": r["created_at"]}

    def search(name: str, q: str, limit: int = 8) -> list[dict[str, Any]]:
        rows = db().execute(
            "SELECT m.*, bm25(memories_fts) AS rank FROM memories_fts JOIN memories m ON m.rowid = memories_fts.rowid"
            " WHERE memories_fts MATCH ? AND m.profile = ? ORDER BY rank LIMIT ?", (fts_query(q), name, limit)).fetchall()
        return [{"memory": as_dict(r), "score": -r["rank"]} for r in rows]

    app = FastAPI(title="plain memory service")

    @app.get("/api/profiles/{name}/memories/search")
    def search_memories(name: str, q: str) -> dict[str, Any]:
        return {"results": search(name, q)}

    @app.post("/api/profiles/{name}/memories", status_code=201)
    def create_memory(name: str, body: Body) -> dict[str, Any]:
        if not body.content.strip():
            raise HTTPException(400, "content is empty")
        memory = {"id": "mem-" + secrets.token_hex(4), "profileName": name, "processedContent": body.content,
                  "summary": body.content[:50], "category": body.category,
                  "createdAt": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")}
        conn = db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute("INSERT INTO memories (id, profile, content, summary, category, created_at)"
                               " VALUES (?, ?, ?, ?, ?, ?)", (memory["id"], name, body.content, memory["summary"],
                                                              body.category, memory["createdAt"]))
            conn.execute("INSERT INTO memories_fts (rowid, content) VALUES (?, ?)", (cur.lastrowid, body.content))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return {"memory": memory, "synced": False}

    @app.get("/api/profiles/{name}/memories")
    def list_memories(name: str, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        conn = db()
        rows = conn.execute("SELECT * FROM memories WHERE profile = ? ORDER BY created_at DESC LIMIT ? OFFSET ?",
                            (name, limit, offset)).fetchall()
        total = conn.execute("SELECT count(*) FROM memories WHERE profile = ?", (name,)).fetchone()[0]
        return {"memories": [as_dict(r) for r in rows], "total": total, "limit": limit, "offset": offset}

    @app.get("/api/profiles/{name}/injection-preview")
    def injection_preview(name: str, q: str) -> dict[str, Any]:
        core = db().execute("SELECT * FROM memories WHERE profile = ? AND category IN ('preference', 'fact')"
                            " ORDER BY created_at DESC LIMIT 10", (name,)).fetchall()
        relevant = search(name, q)
        lines = ["--- CONTEXT FROM MEMORY ---", "Core knowledge (always apply):"]
        lines += [f"* [{r['category']}] {r['content']}" for r in core]
        lines += ["Relevant to this task:"] + [f"* [{r['memory']['category']}] {r['memory']['processedContent']}"
                                               for r in relevant]
        block = "\n".join([*lines, "---"])[:2000]
        return {"query": q, "block": block, "chars": len(block)}

    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db")
    ap.add_argument("--port", type=int, default=8766)
    args = ap.parse_args()
    import uvicorn

    uvicorn.run(build_app(args.db), host="127.0.0.1", port=args.port, log_level="warning", workers=1)


if __name__ == "__main__":
    main()
