"""Hygiene across hosts (a real moto_server): supersession travels with its lineage and its
inactive state, wins over an edit on another host as a deletion does, and prunes reach the bucket
(by hand and from the daemon's retention job)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Callable

from memlocal.hygiene.rules import RetentionRule
from memlocal.model import utcnow
from memlocal.store import to_us
from s3server import S3, Host
from test_sync_daemon import wait_for
from memlocal import RecallQuery, SaveRequest

P = "researcher"


def key(mid: str) -> str:
    return f"memory/{P}/{mid}.json"


def edit(host: Host, mid: str, text: str) -> None:
    """An edit of the memory's content on ``host`` (as another writer of the spec would make)."""
    m = host.bank.get(P, mid)
    host.bank.store.upsert(m.with_changes(processed_content=text, raw_input=text))


def test_supersession_travels_with_its_lineage(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    old = a.bank.save(SaveRequest(P, "The release branch is release-1.4", category="fact")).memory
    assert b.sync().ok
    new = a.bank.save(SaveRequest(P, "The release branch is release-1.5", category="fact", supersedes=old.id))
    assert new.synced is True and s3.get_json(key(new.memory.id))["supersedes"] == old.id
    assert a.sync().ok  # pushes the old memory's inactive state
    remote_old = s3.get_json(key(old.id))
    assert remote_old["isActive"] is False and remote_old["supersededBy"] == new.memory.id
    assert b.sync().ok
    b_old = b.bank.get(P, old.id)
    assert b_old.is_active is False and b_old.superseded_by == new.memory.id
    assert b.bank.get(P, new.memory.id).supersedes == old.id
    assert [s.memory.id for s in b.bank.recall(RecallQuery(P, "which release branch? release-1.4"))] == [new.memory.id]
    assert "release-1.4" not in b.bank.build_context_block(P, "release branch")
    assert [m.id for m in b.bank.history(P, old.id)] == [old.id, new.memory.id]
    assert b.sync().ok and a.sync().ok  # B's recall bumps travel; then both hosts agree
    assert a.sync().summary().startswith("ok: nothing to do")
    assert b.sync().summary().startswith("ok: nothing to do")


def test_supersession_wins_over_an_edit_made_first_elsewhere(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    old = a.bank.save(SaveRequest(P, "Standup is at 9:30")).memory
    assert b.sync().ok
    edit(b, old.id, "Standup is at 9:45")
    assert b.sync().ok and s3.get_json(key(old.id))["processedContent"] == "Standup is at 9:45"
    new = a.bank.save(SaveRequest(P, "Standup moved to 10:00", supersedes=old.id)).memory
    assert a.sync().ok  # fetches B's edit; the supersession wins and is pushed
    for copy in (s3.get_json(key(old.id)), a.bank.get(P, old.id).to_dict()):
        assert copy["isActive"] is False and copy["supersededBy"] == new.id
    assert b.sync().ok
    assert b.bank.get(P, old.id).is_active is False
    assert [s.memory.id for s in b.bank.recall(RecallQuery(P, "when is standup?"))] == [new.id]


def test_supersession_wins_over_an_edit_made_later_elsewhere(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    old = a.bank.save(SaveRequest(P, "The on-call phone is with Dana")).memory
    assert b.sync().ok
    new = a.bank.save(SaveRequest(P, "The on-call phone is with Eli", supersedes=old.id)).memory
    assert a.sync().ok
    edit(b, old.id, "The on-call phone is with Dana until Friday")
    assert b.sync().ok  # B's edit meets the supersession in the bucket: the supersession wins
    for copy in (s3.get_json(key(old.id)), b.bank.get(P, old.id).to_dict()):
        assert copy["isActive"] is False and copy["supersededBy"] == new.id
    assert a.sync().ok and a.bank.get(P, old.id).is_active is False


def _age(host: Host, mid: str, days: float) -> None:
    with host.bank.store.transaction() as c:
        c.execute("UPDATE memories SET created_us = ? WHERE id = ?", (to_us(utcnow() - timedelta(days=days)), mid))


def test_prune_deletes_reach_the_bucket_and_other_hosts(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    old = a.bank.save(SaveRequest(P, "Context: the CI runner is flaky this week", category="context")).memory
    pref = a.bank.save(SaveRequest(P, "Prefers terse commit messages", category="preference")).memory
    _age(a, old.id, 120)
    _age(a, pref.id, 120)
    assert a.sync().ok and b.sync().ok
    rule = RetentionRule.build(older_than="90d")
    assert [p.memory.id for p in a.bank.prune(P, rule, dry_run=True)] == [old.id]
    assert key(old.id) in s3.keys()  # a dry run changes nothing, in the bucket either
    assert [p.memory.id for p in a.bank.prune(P, rule)] == [old.id]
    assert s3.keys() == [key(pref.id)]
    assert b.sync().ok and b.ids(P) == {pref.id}


def test_the_daemon_runs_the_retention_policy_when_enabled(hosts: Callable[..., Host], s3: S3) -> None:
    from memlocal_sync.daemon import SyncDaemon
    from memlocal_sync.engine import SyncEngine

    a = hosts("a", retention__enabled=True, retention__interval_s=0.5, retention__older_than="30d",
              retention__staleness_above=0.0)
    old = a.bank.save(SaveRequest(P, "Context: a sprint that ended long ago", category="context")).memory
    fact = a.bank.save(SaveRequest(P, "The repository is monorepo-x", category="fact")).memory
    _age(a, old.id, 60)
    _age(a, fact.id, 60)
    engine = SyncEngine(a.config, a.bank.replica)
    daemon = SyncDaemon(engine, interval_s=60, debounce_s=0.1, retention=a.bank.apply_retention)
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: key(old.id) not in s3.keys(), 30, "the retention job to delete the old memory")
        assert a.ids(P) == {fact.id} and key(fact.id) in s3.keys()
    finally:
        daemon.stop()
        thread.join(30)
        engine.close()
    assert daemon.retention_runs >= 1
