"""The REST server's lighter path under load (docs/rest.md, "Concurrency"), over real HTTP:

- the hot routes (search, list, save, injection preview) answer their JSON directly: exactly what
  their response models would answer;
- a read never waits for a write: with a save's transaction open (its commit and fsync pending),
  searches, lists and previews of the same bank answer;
- one recall index per bank, however many requests arrive first at once.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from api_live import LiveServer
from memory_factory import memory
from pydantic import BaseModel
from support import http_client

from memlocal import MemoryBank, SaveRequest
from memlocal.faces.api import create_app
from memlocal.faces.api import models


def _same_as_model(model: type[BaseModel], body: Any) -> None:
    """``body`` is what FastAPI made of it through ``model`` (validated, then dumped by alias)."""
    want = model.model_validate(body).model_dump(mode="json", by_alias=True)
    assert want == body, _differences(want, body)


def _differences(want: Any, got: Any, at: str = "") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        return [d for k in want.keys() | got.keys() for d in (
            [f"{at}.{k}: {want.get(k, '<absent>')!r} != {got.get(k, '<absent>')!r}"] if k not in want or k not in got
            else _differences(want[k], got[k], f"{at}.{k}"))]
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in _differences(a, b, f"{at}[{i}]")]
    return [] if want == got else [f"{at}: {want!r} != {got!r}"]


def _filled(bank: MemoryBank) -> dict[str, str]:
    """A profile with every shape of memory the hot routes answer: core and relevant tiers, a
    supersession (both links), another writer's fields, a credential the faces redact."""
    ids = {}
    for i, (text, category) in enumerate((("prefers tea over coffee in the morning", "preference"),
                                          ("the release train leaves on friday", "fact"),
                                          ("deploy the release with the blue pipeline", "behavior"),
                                          ("release notes live in docs/changes.md", "context"))):
        ids[category] = bank.save(SaveRequest("p", None, content=text, category=category)).memory.id
    bank.save(SaveRequest("p", None, content="the release train leaves on thursday", category="fact", supersedes=ids["fact"]))
    other = memory("p", "release checklist kept by the other host").with_changes(extra={"hostNote": {"by": "other"}})
    bank.store.upsert(other)
    ids["other"] = other.id
    bank.store.upsert(memory("p", "release token AKIAIOSFODNN7EXAMPLE for the deploy", category="fact"))
    return ids


def test_the_hot_routes_answer_what_their_response_models_would(make_bank: Any) -> None:
    bank = make_bank()
    ids = _filled(bank)
    with LiveServer(create_app(bank)) as server, http_client(server.url, timeout=30) as client:
        listed = client.get("/api/profiles/p/memories", params={"limit": 20})
        assert listed.status_code == 200 and listed.headers["content-type"] == "application/json"
        _same_as_model(models.MemoryPage, listed.json())
        shown = {m["id"]: m for m in listed.json()["memories"]}
        assert shown[ids["other"]]["hostNote"] == {"by": "other"}  # another writer's field passed through
        assert "supersededBy" in shown[ids["fact"]] and "supersedes" not in shown[ids["other"]]
        assert "AKIAIOSFODNN7EXAMPLE" not in listed.text

        found = client.get("/api/profiles/p/memories/search", params={"q": "release"})
        assert found.status_code == 200 and found.json()["results"]
        _same_as_model(models.SearchResponse, found.json())
        assert "AKIAIOSFODNN7EXAMPLE" not in found.text

        preview = client.get("/api/profiles/p/injection-preview", params={"q": "deploy the release pipeline"})
        assert preview.status_code == 200 and preview.json()["block"]
        _same_as_model(models.InjectionPreview, preview.json())
        assert {e["tier"] for e in preview.json()["included"]} == {"core", "relevant"}

        created = client.post("/api/profiles/p/memories", json={"content": "a new memory about the release"})
        assert created.status_code == 201
        _same_as_model(models.SaveResponse, created.json())
        again = client.post("/api/profiles/p/memories", json={"content": "a new memory about the release"})
        assert again.status_code == 200 and again.json()["deduplicated"] is True
        _same_as_model(models.SaveResponse, again.json())

        # Errors keep their one shape on the fast path.
        bad = client.get("/api/profiles/.bad/memories/search", params={"q": "x"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_input"


def test_reads_answer_while_a_save_holds_the_write_lock(make_bank: Any) -> None:
    """A save's transaction (its commit and fsync still to come) does not hold up the reads of
    the same bank: they run on read connections of their own, and see the last commit."""
    bank = make_bank()
    _filled(bank)
    inside, release = threading.Event(), threading.Event()

    def slow_save() -> None:
        with bank.store.transaction() as c:
            c.execute("UPDATE memories SET summary = 'changing' WHERE category = 'context'")
            inside.set()
            release.wait(60)

    writer = threading.Thread(target=slow_save)
    with LiveServer(create_app(bank)) as server, http_client(server.url, timeout=20) as client:
        writer.start()
        try:
            assert inside.wait(20)
            for path, params in (("/api/profiles/p/memories/search", {"q": "release"}),
                                 ("/api/profiles/p/memories", {"limit": 5}),
                                 ("/api/profiles/p/injection-preview", {"q": "release"})):
                answer = client.get(path, params=params)
                assert answer.status_code == 200, answer.text
                assert "changing" not in answer.text  # not committed yet: not seen
            assert bank.store.read("SELECT count(*) FROM memories WHERE summary = 'changing'")[0][0] == 0
        finally:
            release.set()
            writer.join(20)
        assert bank.store.read("SELECT count(*) FROM memories WHERE summary = 'changing'")[0][0] == 1


def test_a_write_reads_its_own_rows_and_a_snapshot_sees_one_moment(make_bank: Any) -> None:
    """Inside a write, the store's reads see what it wrote; a snapshot sees the state it began
    with, whatever commits meanwhile (here from this very bank, on another thread)."""
    bank = make_bank()
    _filled(bank)
    count = "SELECT count(*) FROM memories"
    before = bank.store.read(count)[0][0]
    with bank.store.transaction() as c:
        c.execute("UPDATE memories SET summary = 'mine' WHERE category = 'context'")
        assert bank.store.read("SELECT count(*) FROM memories WHERE summary = 'mine'")[0][0] == 1
    with bank.store.snapshot():
        first = bank.store.read(count)[0][0]
        saver = threading.Thread(target=lambda: bank.save(SaveRequest("p", None, content="saved while a snapshot is open")))
        saver.start()
        saver.join(30)
        assert not saver.is_alive()  # the snapshot held up no write
        assert bank.store.read(count)[0][0] == first == before
    assert bank.store.read(count)[0][0] == before + 1


def test_concurrent_first_requests_make_one_recall_index(make_bank: Any) -> None:
    bank = make_bank()
    start = threading.Barrier(8)
    made: list[Any] = []

    def first() -> None:
        start.wait(10)
        made.append(bank._index())

    threads = [threading.Thread(target=first) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(made) == 8 and len({id(i) for i in made}) == 1
