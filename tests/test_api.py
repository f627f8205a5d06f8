"""The REST API over real HTTP: uvicorn on a free 127.0.0.1 port, httpx as the client."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from api_live import LiveServer
from support import http_client

from memlocal import MemoryBank, RecallQuery
from memlocal.faces.api import create_app
from memlocal.config import Config
from memlocal.errors import BankNotWiredError, StoreError
from memlocal.model import JSON_FIELDS

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def api_bank(tmp_path: Path) -> Iterator[MemoryBank]:
    with MemoryBank(tmp_path / "api.db") as bank:
        yield bank


@pytest.fixture
def client(api_bank: MemoryBank) -> Iterator[httpx.Client]:
    with LiveServer(create_app(api_bank)) as server, http_client(base_url=server.url, timeout=30) as c:
        yield c


def save(c: httpx.Client, profile: str, **body: Any) -> dict[str, Any]:
    r = c.post(f"/api/profiles/{profile}/memories", json=body)
    assert r.status_code == 201, r.text
    return r.json()["memory"]


def assert_error(r: httpx.Response, status: int, code: str, *needles: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    message = body["error"]["message"]
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


# --- per-profile ------------------------------------------------------------------------------------


def test_create_returns_201_with_the_memory_and_synced(client: httpx.Client) -> None:
    r = client.post("/api/profiles/researcher/memories",
                    json={"content": "Prefers JSON output", "summary": "JSON", "category": "preference",
                          "confidence": 0.8})
    assert r.status_code == 201
    body = r.json()
    assert set(body) == {"memory", "synced", "deduplicated", "redacted", "proposedSupersedes", "superseded"}
    assert body["synced"] is False and body["deduplicated"] is False and body["redacted"] == []
    m = body["memory"]
    assert set(m) == set(JSON_FIELDS)
    assert (m["profileName"], m["processedContent"], m["summary"], m["category"], m["confidence"]) == (
        "researcher", "Prefers JSON output", "JSON", "preference", 0.8)
    assert m["source"] == "explicit" and m["accessCount"] == 0 and m["lastAccessedAt"] is None
    assert m["createdAt"].endswith("Z")

    raw = save(client, "researcher", rawInput="I like dark roast coffee")
    assert (raw["rawInput"], raw["processedContent"], raw["category"], raw["confidence"]) == (
        "I like dark roast coffee", "I like dark roast coffee", "general", 1.0)


def test_list_is_newest_first_with_paging_and_read_only(client: httpx.Client) -> None:
    ids = [save(client, "p1", content=f"memory number {i}")["id"] for i in range(5)]
    save(client, "p2", content="another profile")
    r = client.get("/api/profiles/p1/memories")
    assert r.status_code == 200
    page = r.json()
    assert (page["total"], page["limit"], page["offset"]) == (5, 50, 0)
    assert [m["id"] for m in page["memories"]] == ids[::-1]
    page = client.get("/api/profiles/p1/memories", params={"limit": 2, "offset": 1}).json()
    assert [m["id"] for m in page["memories"]] == ids[::-1][1:3]
    assert (page["total"], page["limit"], page["offset"]) == (5, 2, 1)
    assert client.get("/api/profiles/p1/memories", params={"offset": 10}).json()["memories"] == []
    assert client.get("/api/profiles/nobody/memories").json() == {"memories": [], "total": 0, "limit": 50, "offset": 0}
    again = client.get("/api/profiles/p1/memories").json()["memories"]
    assert all(m["accessCount"] == 0 for m in again)


def test_get_and_delete_one(client: httpx.Client) -> None:
    m = save(client, "p1", content="to be deleted")
    r = client.get(f"/api/profiles/p1/memories/{m['id']}")
    assert r.status_code == 200 and r.json() == {"memory": m}
    # Profile-scoped: the id is not visible through another profile.
    assert_error(client.get(f"/api/profiles/p2/memories/{m['id']}"), 404, "not_found", m["id"])
    assert_error(client.delete(f"/api/profiles/p2/memories/{m['id']}"), 404, "not_found")
    r = client.delete(f"/api/profiles/p1/memories/{m['id']}")
    assert r.status_code == 204 and r.content == b""
    assert_error(client.get(f"/api/profiles/p1/memories/{m['id']}"), 404, "not_found")
    assert_error(client.delete(f"/api/profiles/p1/memories/{m['id']}"), 404, "not_found")
    assert_error(client.get("/api/profiles/p1/memories/mem-00000000"), 404, "not_found")


def test_search_ranks_with_a_breakdown_and_does_not_bump_access(client: httpx.Client, api_bank: MemoryBank) -> None:
    allergy = save(client, "p1", content="Has a severe peanut allergy", category="fact")
    deploys = save(client, "p1", content="Deploys on Fridays after lunch", category="behavior")
    save(client, "p1", content="Prefers dark mode in every editor", category="preference")
    save(client, "p2", content="Peanut butter fan", category="preference")  # another profile: never returned

    r = client.get("/api/profiles/p1/memories/search", params={"q": "diet"})
    assert r.status_code == 200
    results = r.json()["results"]
    assert results[0]["memory"]["id"] == allergy["id"]  # "diet" reaches "peanut allergy" through food
    assert all(x["memory"]["profileName"] == "p1" for x in results)
    scores = [x["score"] for x in results]
    assert scores == sorted(scores, reverse=True)
    for x in results:
        assert set(x) == {"memory", "score", "breakdown", "evidence"}
        assert x["evidence"]["strength"] > 0  # evidence mode: no result without query evidence
        b = x["breakdown"]
        assert set(b) >= {"recency", "usage", "topic", "confidenceMul", "weights", "maturity", "score"}
        assert set(b["weights"]) == {"recency", "usage", "topic"}
        assert b["score"] == x["score"]
    # The API returns what the library's ranking returns.
    expected = [(m.memory.id, m.score) for m in api_bank.query_with_relevance(RecallQuery("p1", "friday deploys"))]
    got = client.get("/api/profiles/p1/memories/search", params={"q": "friday deploys"}).json()["results"]
    assert [x["memory"]["id"] for x in got] == [i for i, _ in expected] and got[0]["memory"]["id"] == deploys["id"]
    assert [x["score"] for x in got] == pytest.approx([sc for _, sc in expected], rel=1e-6)  # recency moves

    one = client.get("/api/profiles/p1/memories/search", params={"q": "diet", "limit": 1}).json()["results"]
    assert [x["memory"]["id"] for x in one] == [allergy["id"]]
    high = client.get("/api/profiles/p1/memories/search", params={"q": "diet", "minScore": 0.6}).json()["results"]
    assert high and all(x["score"] >= 0.6 for x in high)
    top = results[0]["score"]
    assert client.get("/api/profiles/p1/memories/search", params={"q": "diet", "minScore": min(1.0, top + 1e-6)}
                      ).json()["results"] == []

    # A dashboard read: nothing was marked accessed by any of these searches.
    for m in client.get("/api/profiles/p1/memories").json()["memories"]:
        assert (m["accessCount"], m["lastAccessedAt"]) == (0, None)

    assert_error(client.get("/api/profiles/p1/memories/search"), 422, "invalid_input", "q is required")
    assert_error(client.get("/api/profiles/p1/memories/search", params={"q": "x", "limit": 0}), 400, "invalid_input")
    assert_error(client.get("/api/profiles/p1/memories/search", params={"q": "x", "minScore": 2}), 400, "invalid_input")
    assert client.get("/api/profiles/empty/memories/search", params={"q": "diet"}).json() == {"results": []}


# --- automation notes -------------------------------------------------------------------------------


def test_automation_notes(client: httpx.Client, api_bank: MemoryBank) -> None:
    url = "/api/automations/nightly-report/memory"
    assert client.get(url).json() == {"memory": ""}

    r = client.put(url, content="Run 12 found 3 new issues; stopped at page 2 of the tracker.",
                   headers={"content-type": "text/plain"})
    assert r.status_code == 200 and r.json() == {"memory": "Run 12 found 3 new issues; stopped at page 2 of the tracker."}
    assert client.get(url).json() == r.json()
    assert api_bank.automations.get("nightly-report").note.startswith("Run 12")  # type: ignore[union-attr]

    assert client.put(url, json={"memory": "Run 13 finished the backlog."}).json() == {"memory": "Run 13 finished the backlog."}
    assert client.get(url).json() == {"memory": "Run 13 finished the backlog."}
    assert client.put(url, content="no content type at all").json() == {"memory": "no content type at all"}

    # An empty body clears it, whichever way it is sent.
    for clear in ({"content": b""}, {"content": b"", "headers": {"content-type": "application/json"}},
                  {"json": {"memory": ""}}, {"json": {"memory": None}}, {"content": b"  \n "}):
        client.put(url, content="something to clear")
        r = client.put(url, **clear)
        assert r.status_code == 200 and r.json() == {"memory": ""}, clear
        assert client.get(url).json() == {"memory": ""}
    assert api_bank.automations.get("nightly-report") is None

    client.put(url, content="kept")
    assert_error(client.put(url, content="é" * 2049), 413, "too_large", "4096 bytes")
    assert_error(client.put(url, json={"note": "wrong key"}), 400, "invalid_input", "memory")
    assert_error(client.put(url, content=b"{broken", headers={"content-type": "application/json"}), 400, "invalid_input", "JSON")
    assert_error(client.put(url, content=b"\xff\xfe"), 400, "invalid_input", "UTF-8")
    assert_error(client.get("/api/automations/.hidden/memory"), 400, "invalid_input", "automation id")
    assert client.get(url).json() == {"memory": "kept"}  # none of the bad writes changed it

    # Deleting the automation removes its note with it (and is idempotent).
    other = "/api/automations/other/memory"
    client.put(other, content="belongs to another automation")
    r = client.delete("/api/automations/nightly-report")
    assert r.status_code == 204 and r.content == b""
    assert client.get(url).json() == {"memory": ""}
    assert client.delete("/api/automations/nightly-report").status_code == 204
    assert client.get(other).json() == {"memory": "belongs to another automation"}
    assert_error(client.delete("/api/automations/.x"), 400, "invalid_input")


# --- global -----------------------------------------------------------------------------------------


def test_memory_bank_grouped_and_flattened(client: httpx.Client) -> None:
    a1 = save(client, "alpha", content="Alpha likes green tea", category="preference")
    b1 = save(client, "beta", content="Beta deploys on Fridays", category="behavior")
    a2 = save(client, "alpha", content="Alpha's repo uses TEA-style docs", category="fact")
    b2 = save(client, "beta", content="Beta prefers tabs", category="preference")

    grouped = client.get("/api/memory-bank").json()
    assert set(grouped) == {"profiles"}
    assert {p: [m["id"] for m in ms] for p, ms in grouped["profiles"].items()} == {
        "alpha": [a2["id"], a1["id"]], "beta": [b2["id"], b1["id"]]}

    flat = client.get("/api/memory-bank", params={"limit": 3}).json()
    assert set(flat) == {"memories", "total", "limit", "offset"}
    assert [m["id"] for m in flat["memories"]] == [b2["id"], a2["id"], b1["id"]]
    assert (flat["total"], flat["limit"], flat["offset"]) == (4, 3, 0)
    flat = client.get("/api/memory-bank", params={"offset": 3}).json()
    assert [m["id"] for m in flat["memories"]] == [a1["id"]] and flat["limit"] == 50

    tea = client.get("/api/memory-bank", params={"q": "tea"}).json()  # case-insensitive substring
    assert [m["id"] for m in tea["memories"]] == [a2["id"], a1["id"]] and tea["total"] == 2
    prefs = client.get("/api/memory-bank", params={"category": "preference"}).json()
    assert [m["id"] for m in prefs["memories"]] == [b2["id"], a1["id"]]
    both = client.get("/api/memory-bank", params={"category": "preference", "q": "TEA"}).json()
    assert [m["id"] for m in both["memories"]] == [a1["id"]]
    assert client.get("/api/memory-bank", params={"q": "nothing like this"}).json()["total"] == 0
    assert_error(client.get("/api/memory-bank", params={"category": "gossip"}), 400, "invalid_input", "gossip")
    assert_error(client.get("/api/memory-bank", params={"limit": 0}), 400, "invalid_input", "limit")


def test_stats(client: httpx.Client) -> None:
    assert client.get("/api/memory-bank/stats").json() == {
        "totalMemories": 0, "activeMemories": 0, "supersededMemories": 0, "profilesWithMemory": 0,
        "perProfile": {}, "perProfileActive": {}}
    for profile, n in (("a", 3), ("b", 1)):
        for i in range(n):
            save(client, profile, content=f"m{i}")
    assert client.get("/api/memory-bank/stats").json() == {
        "totalMemories": 4, "activeMemories": 4, "supersededMemories": 0, "profilesWithMemory": 2,
        "perProfile": {"a": 3, "b": 1}, "perProfileActive": {"a": 3, "b": 1}}


# --- errors -----------------------------------------------------------------------------------------


def test_bad_input_errors(client: httpx.Client) -> None:
    assert_error(client.get("/api/profiles/.hidden/memories"), 400, "invalid_input", "profile name")
    assert_error(client.get("/api/profiles/p1/memories/mem-XYZ"), 400, "invalid_input", "memory id")
    assert_error(client.get("/api/profiles/p1/memories", params={"limit": "many"}), 422, "invalid_input", "limit")
    assert_error(client.post("/api/profiles/p1/memories", content=b"{not json",
                             headers={"content-type": "application/json"}), 422, "invalid_input", "JSON")
    assert_error(client.post("/api/profiles/p1/memories", json={}), 400, "invalid_input", "rawInput or content")
    assert_error(client.post("/api/profiles/p1/memories", json={"content": "x", "category": "gossip"}),
                 400, "invalid_input", "category")
    assert_error(client.post("/api/profiles/p1/memories", json={"content": "x", "confidence": 1.5}),
                 400, "invalid_input", "confidence")
    assert_error(client.post("/api/profiles/p1/memories", json={"content": "x", "confidence": "high"}),
                 422, "invalid_input", "confidence")
    assert_error(client.post("/api/profiles/p1/memories", json={"content": "x", "catgory": "fact"}),
                 422, "invalid_input", "catgory")
    assert_error(client.post("/api/profiles/p1/memories", json={"content": "x", "summary": "s" * 51}),
                 400, "invalid_input", "summary")
    assert_error(client.get("/api/no/such/thing"), 404, "not_found")
    assert_error(client.put("/api/memory-bank"), 405, "method_not_allowed")
    # Nothing was written by any of these.
    assert client.get("/api/memory-bank/stats").json()["totalMemories"] == 0


def test_raw_input_over_the_cap_is_413_naming_4096_bytes(client: httpx.Client) -> None:
    assert_error(client.post("/api/profiles/p1/memories", json={"rawInput": "é" * 2049}),
                 413, "too_large", "4096 bytes", "4098")
    save(client, "p1", rawInput="x" * 4096)  # exactly at the cap is fine
    # A body far over any legitimate size is refused before it is read.
    assert_error(client.post("/api/profiles/p1/memories", json={"rawInput": "x" * 3_000_000}),
                 413, "too_large", "4096 bytes")


# --- 503 when the bank is not wired -----------------------------------------------------------------


def test_not_wired_answers_503_everywhere_and_healthz_is_degraded() -> None:
    reason = StoreError("cannot open database /nowhere/x.db: unable to open database file")
    with LiveServer(create_app(reason, Config.load(environ={}))) as server, http_client(base_url=server.url) as c:
        h = c.get("/healthz")
        assert h.status_code == 200 and h.json()["status"] == "degraded" and "/nowhere/x.db" in h.json()["reason"]
        calls = [
            ("GET", "/api/profiles/p1/memories"), ("POST", "/api/profiles/p1/memories"),
            ("GET", "/api/profiles/p1/memories/search?q=x"), ("GET", "/api/profiles/p1/memories/mem-00000000"),
            ("DELETE", "/api/profiles/p1/memories/mem-00000000"), ("GET", "/api/memory-bank"),
            ("GET", "/api/memory-bank?limit=5"), ("GET", "/api/memory-bank/stats"),
            ("GET", "/api/automations/auto-1/memory"), ("PUT", "/api/automations/auto-1/memory"),
            ("DELETE", "/api/automations/auto-1"),
        ]
        for method, path in calls:
            kwargs: dict[str, Any] = {"json": {"content": "x"}} if method == "POST" else {}
            assert_error(c.request(method, path, **kwargs), 503, BankNotWiredError.code, "not wired", "/nowhere/x.db")
        assert c.get("/openapi.json").status_code == 200


# --- authentication ---------------------------------------------------------------------------------


def test_token_is_required_on_every_request_when_configured(api_bank: MemoryBank) -> None:
    config = Config.load(environ={"MEMLOCAL_API_TOKEN": TOKEN})
    with LiveServer(create_app(api_bank, config)) as server, http_client(base_url=server.url) as c:
        for path in ("/api/memory-bank/stats", "/healthz", "/openapi.json", "/docs", "/api/no/such/thing"):
            r = c.get(path)
            assert_error(r, 401, "unauthorized", "Authorization")
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert_error(c.get(path, headers={"Authorization": "Bearer wrong"}), 401, "unauthorized", "wrong")
            assert_error(c.get(path, headers={"Authorization": f"Basic {TOKEN}"}), 401, "unauthorized")
            assert_error(c.get(path, headers={"Authorization": f"Bearer {TOKEN}x"}), 401, "unauthorized")
        r = c.post("/api/profiles/p1/memories", json={"content": "x"})
        assert_error(r, 401, "unauthorized")
        assert api_bank.stats()["totalMemories"] == 0
        ok = {"Authorization": f"Bearer {TOKEN}"}
        assert c.post("/api/profiles/p1/memories", json={"content": "x"}, headers=ok).status_code == 201
        assert c.get("/api/memory-bank/stats", headers=ok).json()["totalMemories"] == 1
        assert c.get("/healthz", headers=ok).json()["status"] == "ok"
        assert c.get("/docs", headers=ok).status_code == 200


def test_no_token_means_no_auth(client: httpx.Client) -> None:
    assert client.get("/api/memory-bank/stats", headers={"Authorization": "Bearer anything"}).status_code == 200


# --- schema, docs, health ---------------------------------------------------------------------------


def test_openapi_and_docs(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    assert set(paths) >= {
        "/api/profiles/{name}/memories", "/api/profiles/{name}/memories/search",
        "/api/profiles/{name}/memories/{id}", "/api/memory-bank", "/api/memory-bank/stats",
        "/api/automations/{id}/memory", "/api/automations/{id}", "/healthz"}
    create = schema["components"]["schemas"]["MemoryCreateRequest"]["properties"]
    assert set(create) == {"rawInput", "content", "summary", "category", "confidence", "supersedes", "autoSupersede"}
    assert "503" in paths["/api/memory-bank/stats"]["get"]["responses"]
    assert "413" in paths["/api/profiles/{name}/memories"]["post"]["responses"]
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    assert client.get("/healthz").json() == {"status": "ok", "reason": None, "version": schema["info"]["version"]}


# --- concurrency ------------------------------------------------------------------------------------


def test_concurrent_requests_are_safe(client: httpx.Client) -> None:
    """Writers and readers in parallel through the server's thread pool: nothing lost or failed."""
    failures: list[str] = []
    url = str(client.base_url)

    def worker(n: int) -> None:
        with http_client(base_url=url, timeout=60) as c:
            for i in range(15):
                r = c.post(f"/api/profiles/w{n % 3}/memories", json={"content": f"worker {n} item {i}"})
                if r.status_code != 201:
                    failures.append(r.text)
                for path in (f"/api/profiles/w{n % 3}/memories?limit=5", "/api/memory-bank/stats",
                             "/api/memory-bank?limit=3", f"/api/profiles/w{n % 3}/memories/search?q=item+{i}"):
                    r = c.get(path)
                    if r.status_code != 200:
                        failures.append(r.text)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == []
    stats = client.get("/api/memory-bank/stats").json()
    assert stats["totalMemories"] == 8 * 15
    assert sum(len(ms) for ms in client.get("/api/memory-bank").json()["profiles"].values()) == 120
    # The search index kept up with the concurrent writes.
    for n in range(3):
        hits = client.get(f"/api/profiles/w{n}/memories/search", params={"q": "worker item", "limit": 100}).json()
        assert len(hits["results"]) == stats["perProfile"][f"w{n}"] == 15 * len(range(n, 8, 3))


def test_every_library_error_has_its_http_status_in_the_api_layer() -> None:
    """The status of each error class lives in the REST layer (memlocal.faces.api.errors.HTTP_STATUS), not
    on the classes: every class memlocal.errors declares is listed, and a subclass elsewhere (the
    sync's bucket errors) answers its nearest listed base's."""
    import inspect

    from memlocal import errors
    from memlocal.faces.api.errors import HTTP_STATUS, http_status
    from memlocal_sync.bucket import BucketUnavailable

    declared = {cls for _, cls in inspect.getmembers(errors, inspect.isclass)
                if issubclass(cls, errors.MemoryBankError)}
    assert declared == set(HTTP_STATUS)
    assert not any("http_status" in vars(cls) for cls in declared)
    assert http_status(BucketUnavailable("down")) == 503
    assert (http_status(errors.InputTooLargeError("big")), http_status(errors.DiskFullError("full"))) == (413, 507)
