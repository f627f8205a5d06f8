"""The bridge to Claude's hosted memory stores (memlocal.integrations.claude_stores), through the
real anthropic SDK client against a local server that speaks the memory stores API
(tests/memory_stores_fake.py). No test reaches the internet: ``ANTHROPIC_BASE_URL`` is the fake."""

from __future__ import annotations

import time
import unicodedata
from typing import Any, Callable

import pytest

from memlocal.bank.facade import MemoryBank
from memory_stores_fake import FakeMemoryStores, memory_stores, path_problem, sha256  # noqa: F401 (the fixture)
from memlocal import SaveRequest

pytestmark = pytest.mark.anthropic_sdk

P = "researcher"


def bridge(bank: MemoryBank, **kw: Any) -> Any:
    from memlocal.integrations.claude_stores import sync_profile

    return sync_profile(bank, P, **kw)


def save(bank: MemoryBank, text: str, **kw: Any) -> str:
    return bank.save(SaveRequest(P, content=text, use_llm=False, **kw)).memory.id


@pytest.fixture
def mk(make_bank: Callable[..., MemoryBank]) -> Callable[..., MemoryBank]:
    return make_bank


def test_a_profile_is_one_store_and_each_lineage_one_memory(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    a = save(bank, "Ana prefers dark mode in every editor", category="preference")
    b = save(bank, "The build runs on Python 3.12", category="fact")
    b2 = save(bank, "The build runs on Python 3.13", category="fact", supersedes=b)
    report = bridge(bank)
    assert report.result == "ok" and report.store_created and report.created == 2, report.to_dict()
    sid = memory_stores.store_of(P)
    assert memory_stores.stores[sid]["metadata"] == {"memlocal_profile": P}
    # The path is the lineage's (its root id), the content the active version's text; the
    # superseded version is not mirrored.
    assert memory_stores.contents(sid) == {f"/preference/{a}.md": "Ana prefers dark mode in every editor",
                                           f"/fact/{b}.md": "The build runs on Python 3.13"}
    assert b2 != b and report.refused == []
    creates = [r for r in memory_stores.requests if r.method == "POST" and r.path.endswith("/memories")]
    assert sorted(r.body["content"] for r in creates) == ["Ana prefers dark mode in every editor",
                                                           "The build runs on Python 3.13"]
    # A second store is never made: the next sync (from the links or, on a fresh host, the
    # store's metadata) finds this one.
    assert bridge(bank).store == sid and len(memory_stores.stores) == 1


def test_a_sync_with_nothing_changed_writes_nothing_and_lists_once(memory_stores: FakeMemoryStores, mk: Any,
                                                                    db_path: Any) -> None:
    bank = mk()
    for i in range(230):
        save(bank, f"fact number {i} about the deployment of service {i}", category="fact")
    agent_side = bridge(bank)
    assert agent_side.created == 230
    memory_stores.clear()
    report = bridge(bank)
    assert report.to_dict()["result"] == "ok" and report.unchanged == 230 and report.created == report.updated == 0
    reqs = memory_stores.requests
    # One listing: three pages of at most 100, basic view; nothing else.
    assert [(r.method, r.query.get("limit"), r.query.get("view")) for r in reqs] == [("GET", "100", "basic")] * 3
    assert report.requests == 3


def test_the_links_table_is_not_written_by_a_noop_sync(memory_stores: FakeMemoryStores, mk: Any, tmp_path: Any) -> None:
    import sqlite3

    path = tmp_path / "one.db"
    bank = mk(path)
    save(bank, "Use ruff for linting")
    bridge(bank)
    watcher = sqlite3.connect(path)
    try:
        # PRAGMA data_version changes when another connection commits anything to the file.
        before = watcher.execute("PRAGMA data_version").fetchone()[0]
        assert bridge(bank).unchanged == 1
        assert watcher.execute("PRAGMA data_version").fetchone()[0] == before
        save(bank, "Use mypy --strict")  # the check itself sees a commit
        assert watcher.execute("PRAGMA data_version").fetchone()[0] != before
    finally:
        watcher.close()


def test_local_changes_reach_the_store_with_preconditions(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    a = save(bank, "The API timeout is 30 seconds", category="fact")
    gone = save(bank, "The old build server is jenkins-1", category="fact")
    bridge(bank)
    sid = memory_stores.store_of(P)
    old_sha = sha256("The API timeout is 30 seconds")
    a2 = save(bank, "The API timeout is 45 seconds", category="fact", supersedes=a)
    bank.delete(P, gone)
    memory_stores.clear()
    report = bridge(bank)
    assert (report.updated, report.deleted_hosted) == (1, 1), report.to_dict()
    update = next(r for r in memory_stores.writes() if r.method == "POST")
    assert update.body["precondition"] == {"type": "content_sha256", "content_sha256": old_sha}
    assert "path" not in update.body or update.body["path"] is None  # the lineage keeps its path
    delete = next(r for r in memory_stores.writes() if r.method == "DELETE")
    assert delete.query["expected_content_sha256"] == sha256("The old build server is jenkins-1")
    assert memory_stores.contents(sid) == {f"/fact/{a}.md": "The API timeout is 45 seconds"}
    assert a2 != a


def test_a_refused_precondition_is_sent_once_and_loses_nothing(memory_stores: FakeMemoryStores, mk: Any) -> None:
    """The SDK retries 409 by default: the bridge's calls run with its retries off."""
    bank = mk()
    a = save(bank, "Deploys happen on Tuesdays", category="fact")
    bridge(bank)
    sid = memory_stores.store_of(P)
    save(bank, "Deploys happen on Thursdays", category="fact", supersedes=a)
    memory_stores.fault(409, method="POST", path="/memories/")
    memory_stores.clear()
    report = bridge(bank)
    assert [r.method for r in memory_stores.requests] == ["GET", "POST"]  # the update, once
    assert report.updated == 0
    assert memory_stores.contents(sid) == {f"/fact/{a}.md": "Deploys happen on Tuesdays"}
    assert bridge(bank).updated == 1  # the next sync carries it
    assert memory_stores.contents(sid) == {f"/fact/{a}.md": "Deploys happen on Thursdays"}


def test_a_hosted_agents_new_memory_comes_back_as_a_save(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    bridge(bank)
    sid = memory_stores.store_of(P)
    memory_stores.agent_create(sid, "/preferences/editor.md", "The user prefers vim keybindings")
    memory_stores.agent_create(sid, "/notes/2026/standup.md", "Standups moved to 9:30 on Mondays")
    report = bridge(bank)
    assert report.taken_back == 2, report.to_dict()
    got = {m.processed_content: m for m in bank.memories(P)}
    pref = got["The user prefers vim keybindings"]
    assert (pref.category, pref.source, pref.confidence) == ("preference", "inferred", 0.6)
    assert pref.extra["claudeStore"] == {"path": "/preferences/editor.md"}
    assert got["Standups moved to 9:30 on Mondays"].category == "general"  # the path names none
    memory_stores.clear()
    again = bridge(bank)
    assert again.taken_back == 0 and again.created == 0 and memory_stores.writes() == []
    assert len(memory_stores.contents(sid)) == 2  # nothing mirrored back as a copy


def test_the_confidence_of_what_comes_back_is_a_setting(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk(**{"bridge.claude_confidence": 0.3})
    bridge(bank)
    memory_stores.agent_create(memory_stores.store_of(P), "/facts/db.md", "The database is Postgres 16")
    bridge(bank)
    assert bank.memories(P)[0].confidence == 0.3


def test_a_hosted_edit_comes_back_as_a_supersession(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    a = save(bank, "The team standup is at 9:00", category="context")
    bridge(bank)
    sid = memory_stores.store_of(P)
    hosted = memory_stores.by_path(sid, f"/context/{a}.md")
    # An edit the update rule would not take for a new value of the same fact: only the lineage
    # (the hosted memory is the lineage's) makes it the next version.
    edit = "Standups are cancelled while the team is at the offsite"
    memory_stores.agent_update(sid, hosted["id"], content=edit)
    memory_stores.clear()
    report = bridge(bank)
    assert report.superseded == 1 and report.result == "ok", report.to_dict()
    [now] = bank.memories(P)
    assert now.processed_content == edit and now.supersedes == a
    assert [m.id for m in bank.history(P, now.id)] == [a, now.id]
    assert now.category == "context" and now.source == "inferred"
    assert memory_stores.writes() == []  # the store already holds that text
    assert bridge(bank).to_dict()["superseded"] == 0


def test_a_hosted_deletion_deletes_here_through_the_guard(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk(**{"sync.mass_delete_min": 2})
    ids = [save(bank, f"Service {n} runs on port {8000 + n}", category="fact") for n in range(6)]
    bridge(bank)
    sid = memory_stores.store_of(P)
    memory_stores.agent_delete(sid, memory_stores.by_path(sid, f"/fact/{ids[0]}.md")["id"])
    assert bridge(bank).deleted_local == 1
    assert {m.id for m in bank.memories(P)} == set(ids[1:])
    for i in ids[1:5]:  # 4 of the 5 left: more than 2 and more than half
        memory_stores.agent_delete(sid, memory_stores.by_path(sid, f"/fact/{i}.md")["id"])
    held = bridge(bank)
    assert held.result == "guarded" and held.deleted_local == 0, held.to_dict()
    assert "sync.mass_delete_min = 2" in held.held and "--force" in held.held
    assert len(bank.memories(P)) == 5
    assert bridge(bank).result == "guarded"  # still held, still nothing deleted
    forced = bridge(bank, force=True)
    assert forced.deleted_local == 4 and [m.id for m in bank.memories(P)] == [ids[5]]


def test_changed_on_both_sides_keeps_both_texts(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    a = save(bank, "The release branch is release-7", category="fact")
    bridge(bank)
    sid = memory_stores.store_of(P)
    hosted = memory_stores.by_path(sid, f"/fact/{a}.md")
    local = save(bank, "The release branch is release-8", category="fact", supersedes=a)
    memory_stores.agent_update(sid, hosted["id"], content="The release branch is release-7b (hotfix)")
    report = bridge(bank)
    assert report.result == "conflict", report.to_dict()
    [c] = report.conflicts
    assert c["local"] == local and c["hosted"] == hosted["id"]
    texts = {m.processed_content: m for m in bank.memories(P)}
    assert set(texts) == {"The release branch is release-8", "The release branch is release-7b (hotfix)"}
    assert texts["The release branch is release-7b (hotfix)"].id == c["kept"]
    # Both texts in the store too: the lineage's path holds the local text, the agent's is a
    # memory of its own.
    assert memory_stores.contents(sid) == {f"/fact/{a}.md": "The release branch is release-8",
                                           f"/fact/{c['kept']}.md": "The release branch is release-7b (hotfix)"}
    assert "conflict" in report.summary() and local in report.summary() and hosted["id"] in report.summary()
    memory_stores.clear()
    assert bridge(bank).result == "ok" and memory_stores.writes() == []


def test_deleted_here_and_edited_there_keeps_the_edit(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    a = save(bank, "The VPN endpoint is vpn.example.org", category="fact")
    bridge(bank)
    sid = memory_stores.store_of(P)
    hosted = memory_stores.by_path(sid, f"/fact/{a}.md")
    bank.delete(P, a)
    memory_stores.agent_update(sid, hosted["id"], content="The VPN endpoint is vpn2.example.org")
    report = bridge(bank)
    assert report.result == "conflict" and report.deleted_hosted == 0, report.to_dict()
    assert [m.processed_content for m in bank.memories(P)] == ["The VPN endpoint is vpn2.example.org"]
    assert memory_stores.contents(sid) == {f"/fact/{a}.md": "The VPN endpoint is vpn2.example.org"}


def test_edited_here_and_deleted_there_keeps_the_edit(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    a = save(bank, "Lunch is at noon", category="context")
    bridge(bank)
    sid = memory_stores.store_of(P)
    memory_stores.agent_delete(sid, memory_stores.by_path(sid, f"/context/{a}.md")["id"])
    b = save(bank, "Lunch is at 12:30", category="context", supersedes=a)
    report = bridge(bank)
    assert report.result == "conflict" and report.deleted_local == 0, report.to_dict()
    assert [m.id for m in bank.memories(P)] == [b]
    assert memory_stores.contents(sid) == {f"/context/{a}.md": "Lunch is at 12:30"}


def test_what_comes_back_passes_the_save_path(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    save(bank, "The staging API timeout is 30 seconds", category="fact")
    dup_of = save(bank, "Prefer tabs over spaces in Go files", category="preference")
    bridge(bank)
    sid = memory_stores.store_of(P)
    memory_stores.agent_create(sid, "/preferences/go.md", "prefer tabs over spaces in go files.")  # a repeat
    memory_stores.agent_create(sid, "/facts/timeout.md", "The staging API timeout is 60 seconds")  # an update
    memory_stores.agent_create(sid, "/notes/huge.md", "x" * 5000)  # over the 4096-byte cap
    memory_stores.agent_create(sid, "/notes/blank.md", "   ")
    report = bridge(bank)
    assert report.duplicates == 1 and report.taken_back == 1, report.to_dict()
    texts = {m.processed_content for m in bank.memories(P)}
    assert texts == {"Prefer tabs over spaces in Go files", "The staging API timeout is 60 seconds"}
    assert any(m.id == dup_of for m in bank.memories(P))
    refused = {r["what"].split(" ")[0]: r["reason"] for r in report.refused}
    assert set(refused) == {"/notes/huge.md", "/notes/blank.md"}
    assert all("\n" not in r for r in refused.values()) and "4096" in refused["/notes/huge.md"]
    # The update rule retired the old value here; the store drops its copy in the same sync.
    assert "The staging API timeout is 30 seconds" not in memory_stores.contents(sid).values()
    memory_stores.clear()
    assert bridge(bank).refused == [] and memory_stores.writes() == []  # refused once, not fetched again


def test_a_credential_a_hosted_agent_wrote_is_redacted_on_both_sides(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    bridge(bank)
    sid = memory_stores.store_of(P)
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    mid = memory_stores.agent_create(sid, "/notes/ci.md", f"The CI token is {token}")
    memory_stores.agent_update(sid, mid, content=f"The CI token is {token} (rotate monthly)")
    report = bridge(bank)
    assert report.redacted == [mid], report.to_dict()
    [m] = bank.memories(P)
    assert token not in m.processed_content and "[REDACTED:github-token]" in m.processed_content
    hosted = memory_stores.contents(sid)["/notes/ci.md"]
    assert hosted == m.processed_content
    versions = memory_stores.versions_of(sid, mid)
    assert [v["operation"] for v in versions] == ["created", "modified", "modified"]
    assert all(v["redacted_at"] is not None for v in versions[:2]) and versions[2]["redacted_at"] is None
    assert not any(token in (v["content"] or "") for v in versions)
    memory_stores.clear()
    assert bridge(bank).result == "ok" and memory_stores.writes() == []


PATHS_THE_STORE_REFUSES = [
    "/memories/" + "x" * 1100 + ".md",                       # over 1,024 bytes
    "/memories/cafe\u0301.md",                               # not NFC
    "/memories//double.md",                                  # an empty segment
    "/memories/./dot.md",
    "/memories/../up.md",
    "/memories/tab\there.md",                                # a control character
    "/memories/zero\u200bwidth.md",                          # a format character
    "/memories/line\u2028sep.md",
    "memories/relative.md",                                  # no leading /
    "/" + "/".join("d" for _ in range(21)) + ".md",          # 22 segments
]


def test_paths_that_would_break_the_store_are_refused_in_one_line(memory_stores: FakeMemoryStores, mk: Any) -> None:
    from memlocal.integrations.claude_stores import store_path_problem

    bank = mk()
    for i, path in enumerate(PATHS_THE_STORE_REFUSES):
        bank.save(SaveRequest(P, content=f"note {i} on the memory tool", use_llm=False, deduplicate=False,
                  extra={"memoryFile": path}))
    good = bank.save(SaveRequest(P, content="A file the store takes", use_llm=False, extra={"memoryFile": "/memories/ok/é.md"}))
    report = bridge(bank)
    assert report.created == 1 and len(report.refused) == len(PATHS_THE_STORE_REFUSES), report.to_dict()
    assert all("\n" not in r["reason"] and r["reason"].startswith("the path ") for r in report.refused)
    assert memory_stores.contents(memory_stores.store_of(P)) == {"/memories/ok/é.md": "A file the store takes"}
    assert not any(r.method == "POST" and r.path.endswith("/memories") and r.body["path"] != "/memories/ok/é.md"
                   for r in memory_stores.requests)  # never sent
    assert good.memory.id
    # The same rules as the service's (the fake's own, independent check), and fine paths pass.
    for path in PATHS_THE_STORE_REFUSES + ["/a.md", "/memories/ok/é.md", "/ünï/cödé.md", "/" + "/".join("d" * 20)]:
        assert (store_path_problem(path) is None) == (path_problem(path) is None), path
    assert unicodedata.is_normalized("NFC", "/memories/ok/é.md")


def test_the_cap_mirrors_by_priority_and_reports_what_was_left_out(memory_stores: FakeMemoryStores, mk: Any) -> None:
    memory_stores.cap = 5
    bank = mk()
    bridge(bank, cap=5)
    sid = memory_stores.store_of(P)
    memory_stores.agent_create(sid, "/notes/agent.md", "The agent keeps this one")  # counts toward the cap
    ctx = [save(bank, f"context note {i} about sprint {i}", category="context") for i in range(3)]
    pref = [save(bank, f"preference {i}: style rule {i}", category="preference") for i in range(2)]
    facts = [save(bank, f"fact {i}: the system has {i} nodes", category="fact") for i in range(2)]
    report = bridge(bank, cap=5)
    mirrored = {p.rsplit("/", 1)[1].removesuffix(".md") for p in memory_stores.contents(sid) if p != "/notes/agent.md"}
    # 5 memories a store: the agent's, and of 7 local ones the 2 preferences and 2 facts (the core
    # tier first); the 3 context notes are left out and named. (The agent's came back as a save.)
    assert mirrored == set(pref + facts), report.to_dict()
    assert set(report.left_out) == set(ctx) and "left out 3" in report.summary()
    assert len(memory_stores.contents(sid)) == 5


def test_listing_pages_are_bounded(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    bridge(bank)
    sid = memory_stores.store_of(P)
    for i in range(45):
        memory_stores.agent_create(sid, f"/facts/f{i:02}.md", f"Fact {i}: the cluster {i} runs version {i}.0")
    memory_stores.clear()
    report = bridge(bank)
    assert report.taken_back == 45
    listings = [r.query for r in memory_stores.requests if r.method == "GET" and r.path.endswith("/memories")]
    assert all(int(q["limit"]) <= (20 if q.get("view") == "full" else 100) for q in listings)
    assert [q.get("view") for q in listings] == ["basic"] + ["full"] * 3  # 45 contents: pages of 20


def test_429_and_5xx_are_retried_with_back_off_inside_the_deadline(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    save(bank, "Retries are fine")
    memory_stores.fault(429, retry_after=0.5, path="/v1/memory_stores")
    memory_stores.fault(503, times=2)
    report = bridge(bank)
    assert report.result == "ok" and report.created == 1, report.to_dict()
    assert report.requests == 3 + 3  # the faults, then list stores, create store, create memory
    at = [r.at for r in memory_stores.requests]
    assert at[1] - at[0] >= 0.5  # retry-after honoured
    assert at[2] - at[1] >= 0.1 and at[3] - at[2] >= at[2] - at[1] - 0.2  # back-off, growing (with jitter)
    memory_stores.fault(500, times=1000)
    failed = bridge(bank, deadline_s=1.0)
    assert failed.result == "failed" and "bridge.claude_deadline_s = 1 s" in failed.error
    assert "\n" not in failed.summary()


def test_a_hung_api_is_bounded_by_the_deadline(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    save(bank, "Hung servers end")
    memory_stores.fault(200, delay_s=60, times=10)
    started = time.monotonic()
    report = bridge(bank, deadline_s=1.5, timeout_s=0.5)
    took = time.monotonic() - started
    assert report.result == "failed" and "did not answer" in report.error, report.to_dict()
    assert took < 10, took


def test_a_create_whose_answer_was_lost_is_found_again_not_duplicated(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    bridge(bank)
    sid = memory_stores.store_of(P)
    a = save(bank, "Answers get lost sometimes")
    memory_stores.fault(500, method="POST", path="/memories", lose_answer=True)
    report = bridge(bank)
    assert report.result == "ok" and report.adopted == 1 and report.created == 0, report.to_dict()
    assert memory_stores.contents(sid) == {f"/general/{a}.md": "Answers get lost sometimes"}
    memory_stores.clear()
    assert bridge(bank).unchanged == 1 and memory_stores.writes() == []


def test_an_interrupted_sync_resumes_without_duplicates(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    ids = [save(bank, f"resumable memory {i} of the batch {i}") for i in range(60)]
    bridge(bank)  # the store and the first links
    sid = memory_stores.store_of(P)
    more = [save(bank, f"second batch memory {i} about topic {i}") for i in range(60)]
    memory_stores.agent_create(sid, "/notes/agent.md", "An agent note taken back once")
    # The API dies part way through the second sync.
    for _ in range(25):
        memory_stores.fault(200, then_serve=True)
    memory_stores.fault(503, times=10_000)
    first = bridge(bank, deadline_s=1.0)
    assert first.result == "failed"
    memory_stores.faults.clear()
    second = bridge(bank)
    assert second.result == "ok", second.to_dict()
    contents = memory_stores.contents(sid)
    assert len(contents) == 121 and len(set(contents.values())) == 121
    assert len(bank.memories(P)) == 121
    # And with every link lost (a crash before they were written), the next sync finds its
    # memories again by path and hash: nothing created twice, nothing taken back twice.
    import sqlite3

    with sqlite3.connect(bank.path) as c:
        c.execute("DELETE FROM claude_store_links WHERE kind = 'link'")
    third = bridge(bank)
    assert third.created == 0 and len(memory_stores.contents(sid)) == 121, third.to_dict()
    assert len(bank.memories(P)) == 121
    assert ids and more


def test_a_dry_run_writes_nothing(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    save(bank, "Dry runs only read", category="fact")
    report = bridge(bank, dry_run=True)
    assert report.dry_run and report.store_created and report.created == 1, report.to_dict()
    assert memory_stores.writes() == [] and memory_stores.stores == {}
    assert "would" in report.summary()
    bridge(bank)
    sid = memory_stores.store_of(P)
    memory_stores.agent_create(sid, "/facts/new.md", "Dry runs report take-backs too")
    memory_stores.clear()
    dry = bridge(bank, dry_run=True)
    assert dry.taken_back == 1 and memory_stores.writes() == [] and len(bank.memories(P)) == 1


def test_a_fresh_host_finds_the_store_by_its_metadata(memory_stores: FakeMemoryStores, mk: Any, tmp_path: Any) -> None:
    """A second database with the same memories (a synced host): the store's metadata names the
    profile, and each memory is found at its lineage's path: nothing created twice."""
    import shutil

    first = mk(tmp_path / "a.db")
    for i in range(5):
        save(first, f"shared memory {i} on host a")
    bridge(first)
    memory_stores.add_store("someone else's", {"memlocal_profile": "other"})
    first.close()
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")
    import sqlite3

    with sqlite3.connect(tmp_path / "b.db") as c:
        c.execute("DELETE FROM claude_store_links")
    second = mk(tmp_path / "b.db")
    report = bridge(second)
    assert report.created == 0 and report.adopted == 5 and not report.store_created, report.to_dict()
    assert len(memory_stores.stores) == 2


def test_no_api_key_is_one_line(mk: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from memlocal.errors import ValidationError

    with pytest.raises(ValidationError, match="ANTHROPIC_API_KEY"):
        bridge(mk())


def test_a_credential_in_a_hosted_path_is_renamed_away(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk()
    bridge(bank)
    sid = memory_stores.store_of(P)
    token = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    mid = memory_stores.agent_create(sid, f"/notes/{token}.md", "The deploy key file is named after the token")
    report = bridge(bank)
    assert report.redacted == [mid], report.to_dict()
    assert list(memory_stores.contents(sid)) == ["/notes/[REDACTED:github-token].md"]
    [m] = bank.memories(P)
    assert m.extra["claudeStore"] == {"path": "/notes/[REDACTED:github-token].md"}
    assert all(token not in (v["path"] or "") for v in memory_stores.versions_of(sid, mid))
    memory_stores.clear()
    assert bridge(bank).result == "ok" and memory_stores.writes() == []


def test_in_reject_mode_a_credential_is_refused_and_left_in_the_store(memory_stores: FakeMemoryStores, mk: Any) -> None:
    bank = mk(**{"secrets.mode": "reject"})
    bridge(bank)
    sid = memory_stores.store_of(P)
    memory_stores.agent_create(sid, "/notes/key.md", "aws key AKIAIOSFODNN7EXAMPLE for the bucket")
    report = bridge(bank)
    [refused] = report.refused
    assert refused["what"].startswith("/notes/key.md") and "credential" in refused["reason"], report.to_dict()
    assert bank.memories(P) == [] and report.redacted == []


def test_a_store_deleted_elsewhere_is_made_again_and_nothing_is_deleted_here(memory_stores: FakeMemoryStores,
                                                                               mk: Any) -> None:
    bank = mk()
    ids = [save(bank, f"kept memory {i} about component {i}") for i in range(7)]
    bridge(bank)
    old = memory_stores.store_of(P)
    with memory_stores.lock:  # deleted in the console, say
        del memory_stores.stores[old]
    dry = bridge(bank, dry_run=True)  # says what the sync would do: make the store again, delete nothing
    assert dry.store_created and dry.result != "guarded" and dry.deleted_local == 0, dry.to_dict()
    report = bridge(bank)
    assert report.store_created and report.created == 7 and report.deleted_local == 0, report.to_dict()
    assert {m.id for m in bank.memories(P)} == set(ids)
    assert len(memory_stores.contents(memory_stores.store_of(P))) == 7


def test_a_conflict_whose_hosted_text_is_refused_here_leaves_that_text_in_the_store(memory_stores: FakeMemoryStores,
                                                                                      mk: Any) -> None:
    """Changed on both sides, and the agent's text cannot be kept here (a credential under
    secrets.mode = reject): the hosted memory keeps the agent's text (it is not overwritten with
    the local one), so neither text is lost."""
    bank = mk(**{"secrets.mode": "reject"})
    a = save(bank, "The release branch is release-7", category="fact")
    bridge(bank)
    sid = memory_stores.store_of(P)
    hosted = memory_stores.by_path(sid, f"/fact/{a}.md")
    save(bank, "The release branch is release-8", category="fact", supersedes=a)
    agent_text = "The release branch is release-7b, key AKIAIOSFODNN7EXAMPLE"
    memory_stores.agent_update(sid, hosted["id"], content=agent_text)
    report = bridge(bank)
    assert report.result == "conflict" and report.conflicts[0]["kept"] == "(refused)", report.to_dict()
    assert [m.processed_content for m in bank.memories(P)] == ["The release branch is release-8"]
    assert agent_text in memory_stores.contents(sid).values()


# --- found in review: a hosted edit, a taken path, a repeat's credential, the full listing ---------


def _tool(bank: MemoryBank) -> Any:
    from memlocal.integrations.claude import MemlocalMemoryTool

    return MemlocalMemoryTool(bank, P)


def _view(bank: MemoryBank, path: str) -> str:
    from anthropic.types.beta import BetaMemoryTool20250818ViewCommand

    return str(_tool(bank).view(BetaMemoryTool20250818ViewCommand(command="view", path=path)))


def test_a_hosted_edit_of_a_memory_tool_file_keeps_the_file(memory_stores: FakeMemoryStores, mk: Any) -> None:
    """Was: the edit came back as a version without ``memoryFile``, so the file left the memory
    tool's directory (and the lineage's hosted path fell back to the default one)."""
    bank = mk()
    first = bank.save(SaveRequest(P, content="Ana's team meets on Mondays", use_llm=False,
                      extra={"memoryFile": "/memories/people/ana.md"})).memory
    bridge(bank)
    sid = memory_stores.store_of(P)
    hosted = memory_stores.by_path(sid, "/memories/people/ana.md")
    memory_stores.agent_update(sid, hosted["id"], content="Ana's team meets on Tuesdays")
    report = bridge(bank)
    assert report.superseded == 1 and report.result == "ok", report.to_dict()
    [now] = bank.memories(P)
    assert now.supersedes == first.id and now.extra.get("memoryFile") == "/memories/people/ana.md"
    assert "Tuesdays" in _view(bank, "/memories/people/ana.md")
    # The agent moves and edits it: the file follows the hosted path.
    memory_stores.agent_update(sid, hosted["id"], content="Ana's team meets on Wednesdays",
                               path="/memories/people/ana-k.md")
    assert bridge(bank).superseded == 1
    [moved] = bank.memories(P)
    assert moved.extra.get("memoryFile") == "/memories/people/ana-k.md"
    assert "Wednesdays" in _view(bank, "/memories/people/ana-k.md")
    memory_stores.clear()
    again = bridge(bank)
    assert again.result == "ok" and memory_stores.writes() == [], again.to_dict()
    assert memory_stores.contents(sid) == {"/memories/people/ana-k.md": "Ana's team meets on Wednesdays"}


def test_a_memory_file_moved_onto_a_taken_path_is_not_retried_every_sync(memory_stores: FakeMemoryStores,
                                                                          mk: Any) -> None:
    """The memory tool renames a file to a path a hosted agent's memory holds in the store: the
    move is refused once (reported), the text still reaches the store at the lineage's path, and
    the next sync sends nothing. Was: an update with the move, answered 409, on every sync."""
    from anthropic.types.beta import BetaMemoryTool20250818RenameCommand, BetaMemoryTool20250818StrReplaceCommand

    bank = mk()
    bank.save(SaveRequest(P, content="Ana's team meets on Mondays", use_llm=False, extra={"memoryFile": "/memories/people/ana.md"}))
    bridge(bank)
    sid = memory_stores.store_of(P)
    agents = memory_stores.agent_create(sid, "/memories/people/ana-k.md", "Ana K. leads the platform team")
    assert bridge(bank).taken_back == 1
    tool = _tool(bank)
    tool.rename(BetaMemoryTool20250818RenameCommand(command="rename", old_path="/memories/people/ana.md",
                                                   new_path="/memories/people/ana-k.md"))
    memory_stores.clear()
    moved = bridge(bank)  # a rename alone: nothing to send
    [refused] = moved.refused
    assert "/memories/people/ana-k.md" in refused["what"] and "taken" in refused["reason"], moved.to_dict()
    assert memory_stores.writes() == [] and bridge(bank).refused == [] and memory_stores.writes() == []
    tool.str_replace(BetaMemoryTool20250818StrReplaceCommand(command="str_replace", path="/memories/people/ana-k.md",
                                                             old_str="Mondays", new_str="Fridays"))
    memory_stores.clear()
    report = bridge(bank)
    [update] = memory_stores.writes()  # the text, without the move (which the store answers with 409)
    assert update.method == "POST" and update.body.get("path") is None, report.to_dict()
    [refused] = report.refused
    assert "/memories/people/ana-k.md" in refused["what"] and "taken" in refused["reason"], report.to_dict()
    contents = memory_stores.contents(sid)
    assert contents["/memories/people/ana.md"] == "Ana's team meets on Fridays"  # the text, at the lineage's path
    assert contents["/memories/people/ana-k.md"] == "Ana K. leads the platform team"  # the agent's, untouched
    assert memory_stores.by_path(sid, "/memories/people/ana-k.md")["id"] == agents
    memory_stores.clear()
    for _ in range(2):
        quiet = bridge(bank)
        assert quiet.result == "ok" and quiet.refused == [] and memory_stores.writes() == [], quiet.to_dict()


def test_a_deduplicated_take_back_redacts_the_store_copy(memory_stores: FakeMemoryStores, mk: Any) -> None:
    """A hosted agent writes a credential into a text that, redacted, repeats a local memory: the
    save answers with that memory, and the store's copy is still rewritten redacted (its versions
    too). Was: left with the credential, since only a new memory's copy was rewritten."""
    bank = mk()
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    mine = bank.save(SaveRequest(P, content=f"The CI token is {token}", use_llm=False)).memory  # redacted on save
    assert token not in mine.processed_content
    bridge(bank)
    sid = memory_stores.store_of(P)
    mid = memory_stores.agent_create(sid, "/notes/ci.md", f"The CI token is {token}")
    report = bridge(bank)
    assert report.duplicates == 1 and report.redacted == [mid], report.to_dict()
    assert [m.id for m in bank.memories(P)] == [mine.id]
    assert token not in memory_stores.contents(sid)["/notes/ci.md"]
    assert not any(token in (v["content"] or "") for v in memory_stores.versions_of(sid, mid))
    memory_stores.clear()
    assert bridge(bank).result == "ok" and memory_stores.writes() == []


def test_reading_many_contents_never_lists_more_of_the_store_than_it_reads(memory_stores: FakeMemoryStores,
                                                                           mk: Any) -> None:
    """Forty changed memories in a store of a thousand: one retrieve each (40 requests), not a
    ``view=full`` listing of the whole store (50 pages of every memory's content). Was: the
    full listing whenever 40 or more were wanted, whatever the store's size."""
    bank = mk()
    bridge(bank)
    sid = memory_stores.store_of(P)
    for i in range(1000):  # blank files: refused once and not read again (cheap to set up)
        memory_stores.agent_create(sid, f"/scratch/{i:04}.md", " ")
    assert len(bridge(bank).refused) == 1000
    for i in range(40):
        memory_stores.agent_create(sid, f"/facts/f{i:02}.md", f"Fact {i}: the cluster {i} runs version {i}.0")
    memory_stores.clear()
    report = bridge(bank)
    assert report.taken_back == 40, report.to_dict()
    full = [r for r in memory_stores.requests if r.method == "GET" and r.query.get("view") == "full"]
    assert len(full) <= 40 and not any(r.path.endswith("/memories") for r in full)
