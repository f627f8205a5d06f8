"""The REST endpoints the dashboard adds (profiles by activity, the category filter, the injection
preview, the automation-note listing, the sync status) and how the page itself is served: real
HTTP against a real uvicorn server, on a real SQLite file (and a real moto_server for the sync)."""

from __future__ import annotations

import json
import re
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from api_live import LiveServer
import support
from support import http_client

from memlocal import MemoryBank, SaveRequest
from memlocal.faces.api import create_app
from memlocal.config import Config
from memlocal.faces.dashboard import ASSETS_DIR
from memlocal.model import utcnow

TOKEN = "dash-" + "7" * 24


@pytest.fixture
def served(tmp_path: Path, make_bank: Callable[..., MemoryBank]) -> Iterator[tuple[MemoryBank, httpx.Client]]:
    with make_bank(tmp_path / "d.db") as bank, LiveServer(create_app(bank)) as server:
        with http_client(base_url=server.url, timeout=30) as client:
            yield bank, client


def test_profiles_are_listed_newest_activity_first_with_the_stats_counts(served: Any) -> None:
    bank, c = served
    old = bank.save(SaveRequest("old-profile", content="an early memory about coffee")).memory
    bank.save(SaveRequest("old-profile", content="another early one"))
    bank.save(SaveRequest("new-profile", content="a later memory"))
    assert [p["name"] for p in c.get("/api/profiles").json()["profiles"]] == ["new-profile", "old-profile"]
    # An access is activity too: the old profile moves to the top.
    later = utcnow() + timedelta(minutes=5)
    bank.store.mark_accessed("old-profile", [old.id], later)
    profiles = c.get("/api/profiles").json()["profiles"]
    assert [p["name"] for p in profiles] == ["old-profile", "new-profile"]
    per_profile = c.get("/api/memory-bank/stats").json()["perProfile"]
    assert {p["name"]: p["memoryCount"] for p in profiles} == per_profile == {"old-profile": 2, "new-profile": 1}
    assert profiles[0]["lastActivityAt"].startswith(later.strftime("%Y-%m-%dT%H:%M"))


def test_a_profile_list_filters_by_category(served: Any) -> None:
    bank, c = served
    for i, category in enumerate(["fact", "preference", "fact", "behavior", "fact"]):
        bank.save(SaveRequest("p1", content=f"memory {i}", category=category))
    bank.save(SaveRequest("p2", content="a fact of another profile", category="fact"))
    page = c.get("/api/profiles/p1/memories", params={"category": "fact", "limit": 2}).json()
    assert page["total"] == 3 and len(page["memories"]) == 2
    assert [m["processedContent"] for m in page["memories"]] == ["memory 4", "memory 2"]  # newest first
    assert c.get("/api/profiles/p1/memories", params={"category": "fact", "offset": 2}).json()["memories"][0][
        "processedContent"] == "memory 0"
    assert c.get("/api/profiles/p1/memories").json()["total"] == 5
    r = c.get("/api/profiles/p1/memories", params={"category": "gossip"})
    assert r.status_code == 400 and "category" in r.json()["error"]["message"]


def test_a_profile_list_leaves_out_superseded_memories_when_asked(served: Any) -> None:
    """``activeOnly=true``: the list and its total are what ``memlocal list`` counts (the
    dashboard's count); without it the superseded ones are listed too, flagged, as before."""
    bank, c = served
    old = bank.save(SaveRequest("p1", content="prefers tea", category="preference")).memory
    bank.save(SaveRequest("p1", content="a fact", category="fact"))
    new = bank.save(SaveRequest("p1", content="prefers coffee now", category="preference", supersedes=old.id)).memory
    every = c.get("/api/profiles/p1/memories").json()
    assert every["total"] == 3 and {m["id"]: m["isActive"] for m in every["memories"]}[old.id] is False
    active = c.get("/api/profiles/p1/memories", params={"activeOnly": "true"}).json()
    assert active["total"] == 2 == c.get("/api/memory-bank/stats").json()["perProfileActive"]["p1"]
    assert old.id not in [m["id"] for m in active["memories"]] and new.id in [m["id"] for m in active["memories"]]
    assert c.get("/api/profiles/p1/memories", params={"activeOnly": "true", "category": "preference"}).json()["total"] == 1
    assert c.get("/api/profiles/p1/memories", params={"activeOnly": "false"}).json()["total"] == 3
    assert c.get("/api/profiles/p1/memories", params={"activeOnly": "maybe"}).status_code == 422


def test_a_memorys_history_is_its_supersession_chain_oldest_first(served: Any) -> None:
    bank, c = served
    v1 = bank.save(SaveRequest("p1", content="the runbook is at wiki/old")).memory
    v2 = bank.save(SaveRequest("p1", content="the runbook is at wiki/new", supersedes=v1.id)).memory
    v3 = bank.save(SaveRequest("p1", content="the runbook is at docs/runbook.md", supersedes=v2.id)).memory
    alone = bank.save(SaveRequest("p1", content="an unrelated memory")).memory
    for one in (v1, v2, v3):
        chain = c.get(f"/api/profiles/p1/memories/{one.id}/history").json()["memories"]
        assert [m["id"] for m in chain] == [v1.id, v2.id, v3.id] == [m.id for m in bank.history("p1", one.id)]
    chain = c.get(f"/api/profiles/p1/memories/{v2.id}/history").json()["memories"]
    assert (chain[1]["supersedes"], chain[1]["supersededBy"], chain[1]["isActive"]) == (v1.id, v3.id, False)
    assert [m["id"] for m in c.get(f"/api/profiles/p1/memories/{alone.id}/history").json()["memories"]] == [alone.id]
    r = c.get("/api/profiles/p1/memories/mem-0000dead/history")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert c.get(f"/api/profiles/p2/memories/{v1.id}/history").status_code == 404  # another profile's
    assert c.get("/api/profiles/p1/memories/nope/history").status_code == 400


def test_the_injection_preview_is_the_exact_block_and_names_what_the_budget_trimmed(tmp_path: Path, make_bank: Callable[..., MemoryBank]) -> None:
    # The spec mode's block, whose trim order (relevant tier first) this checks; the evidence
    # mode's order is tests/test_block.py's.
    with make_bank(tmp_path / "d.db", inject__budget_chars=420, ranking__mode="spec") as bank, \
            LiveServer(create_app(bank)) as server:
        core = [bank.save(SaveRequest("p1", content=f"Core fact {i}: the staging database lives in region eu-west-{i}.",
                          category="fact")).memory for i in range(3)]
        relevant = [bank.save(SaveRequest("p1", content=f"When deploying the staging database, step {i} is to check the "
                              "replica lag first and wait for it to drain.", category="behavior")).memory
                    for i in range(5)]
        with http_client(base_url=server.url) as c:
            r = c.get("/api/profiles/p1/injection-preview", params={"q": "deploying staging database"})
        assert r.status_code == 200, r.text
        p = r.json()
        assert p["budget"] == 420 and p["chars"] == len(p["block"]) <= 420
        assert p["block"].startswith("--- CONTEXT FROM MEMORY ---\nCore knowledge (always apply):\n")
        assert p["block"].endswith("\n---")
        included = [e["memory"]["id"] for e in p["included"]]
        trimmed = [e["memory"]["id"] for e in p["trimmed"]]
        # Every candidate is either in the block or trimmed; the relevant tier went first.
        assert sorted(included + trimmed) == sorted(m.id for m in core + relevant)
        assert trimmed and all(e["tier"] == "relevant" for e in p["trimmed"])
        assert {e["memory"]["id"] for e in p["included"] if e["tier"] == "core"} == {m.id for m in core}
        for e in p["included"]:
            assert e["memory"]["processedContent"] in p["block"]
        for e in p["trimmed"]:
            assert e["memory"]["processedContent"] not in p["block"]
            assert e["score"] <= min(x["score"] for x in p["included"] if x["tier"] == "relevant")
        # A preview marks nothing accessed ...
        assert all(m.access_count == 0 for m in bank.list("p1", limit=100).memories)
        # ... and it is exactly what a run that opts in to @memory starts with.
        prompt = "Deploy the staging database today."
        assert bank.inject("p1", ["@memory"], prompt, query="deploying staging database") == p["block"] + "\n" + prompt


def test_the_injection_preview_of_an_empty_profile_is_an_empty_block(served: Any) -> None:
    _, c = served
    p = c.get("/api/profiles/nobody/injection-preview", params={"q": "anything"}).json()
    assert p == {"query": "anything", "block": "", "chars": 0, "budget": 2000, "included": [], "trimmed": []}
    assert c.get("/api/profiles/.bad/injection-preview", params={"q": "x"}).status_code == 400
    assert c.get("/api/profiles/p1/injection-preview").status_code == 422


def test_automation_notes_are_listed_most_recently_written_first(served: Any) -> None:
    bank, c = served
    assert c.get("/api/automations").json() == {"automations": []}
    bank.automations.put("nightly", "stopped at page 3")
    bank.automations.put("weekly", "all done")
    listed = c.get("/api/automations").json()["automations"]
    assert [(a["automationId"], a["note"]) for a in listed] == [("weekly", "all done"), ("nightly", "stopped at page 3")]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", a["updatedAt"]) for a in listed)
    assert c.put("/api/automations/weekly/memory", json={"memory": ""}).json() == {"memory": ""}
    assert [a["automationId"] for a in c.get("/api/automations").json()["automations"]] == ["nightly"]


def test_sync_status_without_a_bucket_says_local_only(served: Any) -> None:
    bank, c = served
    s = c.get("/api/sync/status").json()
    assert s == {"localOnly": True, "bucket": None, "message": "no bucket configured (local only)",
                 "database": str(bank.path)}


def test_sync_status_with_a_bucket_is_what_sync_status_shows(tmp_path: Path, hosts: Callable[..., Any], s3: Any) -> None:
    host = hosts("dashboard")
    host.bank.save(SaveRequest("p1", content="pushed on save"))
    s3.put_raw("memory/p1/mem-0000beef.json", b"{not json")
    db = str(host.path)
    support.run([sys.executable, "-m", "memlocal", "--db", db, "sync", "run"], check=False, capture_output=True)
    with LiveServer(create_app(host.bank)) as server, http_client(base_url=server.url, timeout=30) as c:
        s = c.get("/api/sync/status").json()
    assert s["localOnly"] is False
    assert s["bucket"]["name"] == s3.bucket and s["bucket"]["source"] == "env:INTERNAL_S3_BUCKET"
    assert s["bucket"]["endpoint"] == s3.endpoint
    assert s["lastPass"]["result"] in ("ok", "errors")
    assert [o["key"] for o in s["skipped"]] == ["memory/p1/mem-0000beef.json"]
    cli = json.loads(support.run([sys.executable, "-m", "memlocal", "--db", db, "sync", "status", "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    assert s["message"] is None
    assert {k: v for k, v in s.items() if k not in ("localOnly", "message")} == cli
    assert "secretAccessKey" not in json.dumps(s) and "testing-secret" not in json.dumps(s)


# --- the page -------------------------------------------------------------------------------------


def test_the_page_and_its_assets_load_without_the_token_and_the_api_still_needs_it(tmp_path: Path, make_bank: Callable[..., MemoryBank]) -> None:
    with make_bank(tmp_path / "d.db") as bank, LiveServer(create_app(bank, token=TOKEN)) as server:
        bank.save(SaveRequest("p1", content="secret-ish memory text"))
        with http_client(base_url=server.url) as c:
            page = c.get("/")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert "default-src 'none'" in page.headers["content-security-policy"]
            assert "/dashboard/app.js" in page.text and "secret-ish" not in page.text
            assert c.head("/").status_code == 200
            js = c.get("/dashboard/app.js")
            assert js.status_code == 200 and "javascript" in js.headers["content-type"]
            assert c.get("/dashboard/style.css").headers["content-type"].startswith("text/css")
            assert c.get("/dashboard/nope.js").status_code == 404
            # Only GET/HEAD of the page and its assets are public; everything else needs the token.
            assert c.post("/").status_code == 401
            assert c.get("/api/memory-bank/stats").status_code == 401
            assert c.get("/healthz").status_code == 401
            assert c.get("/openapi.json").status_code == 401
            ok = c.get("/api/profiles", headers={"Authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 200 and ok.json()["profiles"][0]["name"] == "p1"
        # A dot-segment path under the public prefix reaches the static files, never the API.
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"GET /dashboard/../api/memory-bank HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        assert b"secret-ish" not in raw and not raw.startswith(b"HTTP/1.1 200")


def test_the_page_is_served_when_the_bank_is_not_wired(tmp_path: Path) -> None:
    with LiveServer(create_app(OSError("disk on fire"), Config.load(environ={}))) as server:
        with http_client(base_url=server.url) as c:
            assert c.get("/").status_code == 200
            r = c.get("/api/profiles")
            assert r.status_code == 503 and "disk on fire" in r.json()["error"]["message"]
            assert c.get("/api/sync/status").status_code == 503
            assert "/" not in c.get("/openapi.json").json()["paths"]


def test_the_assets_load_nothing_from_outside() -> None:
    """Works offline: no CDN, no web font, no absolute URL in the page, the styles or the script."""
    for asset in ASSETS_DIR.iterdir():
        text = asset.read_text()
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), asset
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", text), asset
        assert not re.search(r"@import|fetch\(\s*['\"]https?:", text), asset
