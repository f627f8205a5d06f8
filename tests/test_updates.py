"""Updates without an LLM (memlocal/hygiene/updates.py, docs/hygiene.md "Updates"): a save that restates
an active memory's subject with a changed value supersedes it when the rule is sure; look-alikes
about other subjects are never retired; where the rule is not sure, the block dates both lines;
``--no-supersede`` and the undo on every face where saves are.

The examples here are not the dev set's (scripts/updates_eval.py measures that one).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import pytest
from anthropic_fake import FakeAnthropic, Reply
from api_live import LiveServer
from conftest import Cli
from support import http_client

from memlocal import MemoryBank, SaveRequest, ValidationError
from memlocal.faces.api import create_app
from memlocal.config import Config
from memlocal.model import utcnow
from memlocal.faces.tools import dispatch
from memlocal.hygiene.updates import MAYBE, SURE, relation, replaced_values, value_kind

P = "team"

# (old, new): one pair per kind of changed value; each new one retires its old one.
UPDATES = {
    "number": ("The staging cluster runs 6 nodes", "The staging cluster now runs 9 nodes"),
    # Found trying a team bank by hand: "listens" was no verb the reader knew, so the text had no
    # value and the two lines reached the block undated, side by side.
    "a port": ("The staging API listens on port 8443", "The staging API listens on port 9443"),
    "an address": ("The metrics exporter binds to 0.0.0.0:9100", "The metrics exporter binds to 127.0.0.1:9100"),
    "time": ("The on-call handover is at 17:00 on Fridays", "The on-call handover moved to 16:30 on Fridays"),
    "date": ("The security audit is due on 3 March", "The security audit is due on 17 March"),
    "weekday": ("The release train leaves on Tuesdays", "The release train now leaves on Wednesdays"),
    "version": ("The API gateway runs nginx 1.24", "The API gateway was upgraded to nginx 1.26"),
    "name in a role": ("The incident commander is Priya Raman", "The incident commander is now Lukas Berg"),
    "identifier": ("The primary database host is db-east-2", "The primary database host is now db-west-1"),
    "address": ("Alerts go to ops-alerts@corp.example", "Alerts now go to sre-pager@corp.example"),
    "amount": ("The monthly cloud limit is 12000 USD", "The monthly cloud limit was lowered to 9000 USD"),
}

# (fact, look-alike about another subject): neither is ever retired by the other.
LOOKALIKES = {
    "another machine, same value": ("ci-runner-3 has 16 cores", "ci-runner-4 has 16 cores"),
    "another person's": ("My leave starts on 4 August", "Marta's leave starts on 11 August"),
    "another event, same time": ("The design review is on Mondays at 11:00", "The budget review is on Mondays at 11:00"),
    "another owner, same thing": ("I commute by the 08:10 tram", "My brother commutes by the 08:10 tram"),
    "another budget": ("The hardware budget is 50000 EUR", "The training budget is 5000 EUR"),
    "another number": ("My desk phone is 0201 5550 1234", "The team hotline is 0201 5550 9876"),
    "another conference": ("The KDD deadline is 9 February", "The ACL deadline is 15 February"),
    # A qualifier the first fact lacks, or another scope, is another fact.
    "a region the first lacks": ("The refund limit without manager approval is 5000 EUR",
                                 "The refund limit without manager approval is 5000 GBP for UK merchants"),
    "another service": ("Release trains leave on Tuesdays at 10:00 UTC for payments-api",
                        "Release trains leave on Tuesdays at 10:00 UTC for auth-service"),
    "another region and time": ("Database snapshots run at 02:00 UTC in eu-west-1",
                                "Database snapshots run at 03:30 UTC in us-east-1"),
    "another environment": ("The request timeout is 30 seconds in production",
                            "The request timeout is 90 seconds in staging"),
    "an audience the first lacks": ("The VPN password rotates every 90 days",
                                    "The VPN password rotates every 30 days for contractors"),
    "another person's, same role": ("Priya is the release manager for iOS", "Lukas is the release manager for Android"),
}

# Updates the rule did not relate, whose two lines reached the block undated:
# (old, new, task, a string only the new holds, a string only the old holds).
UNCAUGHT = {
    "a new person in the role": ("Chen Wei is the SRE lead and owns the on-call rotation",
                                 "Kofi Asante is now the SRE lead and owns the on-call rotation; "
                                 "Chen Wei moved to the Risk team",
                                 "Who is the SRE lead?", "Kofi Asante is now", "Chen Wei is the SRE"),
    "two values at once": ("The events topic has 24 partitions and 7 days of retention",
                           "The events topic has 48 partitions and 14 days of retention",
                           "How is the events topic configured?", "48 partitions", "24 partitions"),
    "a rename": ("The primary database is db-primary-01", "The primary database is db-primary-02 after the failover",
                 "Which host is the primary database?", "db-primary-02", "db-primary-01"),
    "the values dropped for words": ("We deploy on Tuesdays and Thursdays", "We now deploy every weekday",
                                     "When do we deploy?", "every weekday", "Tuesdays and Thursdays"),
    "a trailing condition": ("Standups are at 09:30", "Standups start at 09:45 from next week",
                             "When is the standup?", "09:45", "09:30"),
    "a new holder in the passive": ("Ana Lima handles vendor contracts",
                                    "Vendor contracts are handled by Rui Costa since Ana Lima left",
                                    "Who handles vendor contracts?", "Rui Costa", "Ana Lima handles"),
    "a leading clause": ("The artifact bucket is s3://builds-old",
                         "Since the migration, the artifact bucket is s3://builds-2026",
                         "Where do build artifacts go?", "builds-2026", "builds-old"),
}


@pytest.fixture
def local(tmp_path: Path) -> Iterator[MemoryBank]:
    with MemoryBank.open(tmp_path / "u.db", config=Config.load()) as b:
        yield b


def _aged(bank: MemoryBank, memory_id: str, days: float) -> None:
    from memlocal.store import to_us

    with bank.store.transaction() as c:
        c.execute("UPDATE memories SET created_us = ? WHERE id = ?", (to_us(utcnow() - timedelta(days=days)), memory_id))


@pytest.mark.parametrize("kind", sorted(UPDATES))
def test_each_kind_of_changed_value_supersedes_with_lineage(local: MemoryBank, kind: str) -> None:
    old_text, new_text = UPDATES[kind]
    assert relation(old_text, new_text) == SURE
    old = local.save(SaveRequest(P, content=old_text, category="fact")).memory
    local.save(SaveRequest(P, content="The team uses Grafana for dashboards", category="fact"))
    res = local.save(SaveRequest(P, content=new_text, category="fact"))
    assert res.superseded == old.id and res.to_dict()["superseded"] == old.id
    assert res.memory.supersedes == old.id
    stored = local.get(P, old.id)
    assert not stored.is_active and stored.superseded_by == res.memory.id
    assert [m.id for m in local.history(P, res.memory.id)] == [old.id, res.memory.id]
    assert old_text not in local.build_context_block(P, new_text)


def test_a_chain_of_updates_retires_each_value_in_turn(local: MemoryBank) -> None:
    """The memory a supersession stores is a candidate of the next update at once: it is stored
    with its recall features (so it waits for the FTS5 batch like any save), not left for a query
    to derive them. Before, the third value found no candidate and two values stayed active."""
    texts = [f"The staging server for project 7 runs on port {port}" for port in (8443, 9000, 9100, 9200)]
    saved = [local.save(SaveRequest(P, content=t, category="fact")) for t in texts]
    assert [s.superseded for s in saved[1:]] == [s.memory.id for s in saved[:-1]]
    assert [m.processed_content for m in local.store.iter_profile(P, active_only=True)] == [texts[-1]]
    assert [m.id for m in local.history(P, saved[-1].memory.id)] == [s.memory.id for s in saved]


@pytest.mark.parametrize("kind", sorted(LOOKALIKES))
def test_look_alikes_about_other_subjects_are_never_retired(local: MemoryBank, kind: str) -> None:
    fact, other = LOOKALIKES[kind]
    # Never sure (a look-alike may be dated in the block, never retired).
    assert SURE not in (relation(fact, other), relation(other, fact))
    first = local.save(SaveRequest(P, content=fact, category="fact")).memory
    res = local.save(SaveRequest(P, content=other, category="fact"))
    assert res.superseded is None and res.memory.supersedes is None
    assert local.get(P, first.id).is_active and local.get(P, res.memory.id).is_active


def test_a_scoped_fact_restated_in_its_own_scope_is_an_update(local: MemoryBank) -> None:
    old_text = "Release trains leave on Tuesdays at 10:00 UTC for payments-api"
    new_text = "Release trains leave on Wednesdays at 10:00 UTC for payments-api"
    assert relation(old_text, new_text) == SURE
    old = local.save(SaveRequest(P, content=old_text, category="fact")).memory
    assert local.save(SaveRequest(P, content=new_text, category="fact")).superseded == old.id


@pytest.mark.parametrize("kind", sorted(UNCAUGHT))
def test_an_update_the_rule_cannot_be_sure_of_is_dated_in_the_block(local: MemoryBank, kind: str) -> None:
    """The current value is in the block, and the stale one is not beside it undated: retired,
    or both lines dated so that the reader can order them."""
    old_text, new_text, task, new_s, old_s = UNCAUGHT[kind]
    assert relation(old_text, new_text) is not None
    old = local.save(SaveRequest(P, content=old_text, category="fact")).memory
    _aged(local, old.id, 60)
    local.save(SaveRequest(P, content="The team uses Grafana for dashboards", category="fact"))
    local.save(SaveRequest(P, content=new_text, category="fact"))
    lines = local.render_context_block(P, task).text.splitlines()
    current = [ln for ln in lines if new_s in ln]
    stale = [ln for ln in lines if old_s in ln and new_s not in ln]
    assert current, lines
    assert not stale or all("(saved " in ln for ln in (*current, *stale)), lines
    # Newest first: a reader meets the current value before the one it may replace.
    assert not stale or lines.index(current[0]) < lines.index(stale[0]), lines


def test_numbered_things_are_not_updates() -> None:
    """A value right after "number", "item", "page", ... names which one: a list of numbered notes
    is not a chain of updates."""
    assert relation("the runner's deploy note number 0", "the runner's deploy note number 1") is None
    assert relation("alice prefers green tea number 1", "alice prefers green tea number 2") is None
    assert relation("Step 3 runs the migrations", "Step 4 runs the migrations") is None


def test_kinds_of_values() -> None:
    assert [value_kind(v) for v in ("14:00", "9am", "42", "1.26", "friday", "march", "chen", "db-west-1")] == [
        "time", "time", "number", "number", "calendar", "calendar", "name", "id"]
    # A value replaced by one of another kind is no update ("... on Fridays" is not a new name).
    assert relation("The incident commander is Priya", "The incident commander is now on Fridays") is None


def test_no_supersede_keeps_both_and_the_block_dates_them(local: MemoryBank) -> None:
    old_text, new_text = UPDATES["time"]
    old = local.save(SaveRequest(P, content=old_text, category="fact")).memory
    _aged(local, old.id, 40)
    res = local.save(SaveRequest(P, content=new_text, category="fact", auto_supersede=False))
    assert res.superseded is None and local.get(P, old.id).is_active
    block = local.render_context_block(P, "When is the on-call handover?").text
    day_old = (utcnow() - timedelta(days=40)).strftime("%Y-%m-%d")
    day_new = res.memory.created_at.strftime("%Y-%m-%d")
    assert f"* [fact] (saved {day_old}) {old_text}" in block.splitlines()
    assert f"* [fact] (saved {day_new}) {new_text}" in block.splitlines()
    assert local.config.with_overrides(dedup__supersede=False)["dedup.supersede"] is False


def test_unsure_pairs_are_dated_and_unrelated_lines_are_not(local: MemoryBank) -> None:
    old_text = "My dentist is Dr. Alvarez at the Riverside clinic"
    new_text = "My dentist is now Dr. Chen at the Harbour Street practice"
    assert relation(old_text, new_text) == MAYBE  # the place is said in other words: not sure
    old = local.save(SaveRequest(P, content=old_text, category="fact")).memory
    _aged(local, old.id, 90)
    other = local.save(SaveRequest(P, content="The dentist's bills go to the health insurance", category="fact")).memory
    _aged(local, other.id, 60)
    res = local.save(SaveRequest(P, content=new_text, category="fact"))
    assert res.superseded is None and local.get(P, old.id).is_active
    lines = local.render_context_block(P, "Book my dental check-up with my dentist").text.splitlines()
    dated = [ln for ln in lines if "(saved " in ln]
    assert len(dated) == 2 and any(old_text in ln for ln in dated) and any(new_text in ln for ln in dated)
    assert any(ln == "* [fact] The dentist's bills go to the health insurance" for ln in lines)


def test_a_line_holding_a_value_an_update_replaced_is_dated_with_the_update(local: MemoryBank) -> None:
    """A look-alike about another subject that holds the value an update replaced is never retired,
    but the block dates it and the update: the rule cannot tell another subject from the old
    value in other words, the dates let the reader. Lines holding no replaced value stay undated,
    and so does a bare number of one or two digits ("16" cores)."""
    old = local.save(SaveRequest(P, content="The design review is on Mondays at 11:00", category="fact")).memory
    _aged(local, old.id, 60)
    look = local.save(SaveRequest(P, content="The budget review is on Mondays at 11:00", category="fact")).memory
    _aged(local, look.id, 30)
    other = local.save(SaveRequest(P, content="The code review checklist lives in the wiki", category="fact")).memory
    _aged(local, other.id, 20)
    res = local.save(SaveRequest(P, content="The design review moved to Tuesdays at 15:00", category="fact"))
    assert res.superseded == old.id and local.get(P, look.id).is_active
    lines = local.render_context_block(P, "When is the design review?").text.splitlines()
    dated = sorted(ln for ln in lines if "(saved " in ln)
    day = (utcnow() - timedelta(days=30)).strftime("%Y-%m-%d")
    assert dated == sorted([f"* [fact] (saved {day}) The budget review is on Mondays at 11:00",
                            f"* [fact] (saved {res.memory.created_at:%Y-%m-%d}) The design review moved to Tuesdays at 15:00"])
    assert "* [fact] The code review checklist lives in the wiki" in lines
    local.restore(P, old.id)  # no longer an update: the old line and the new are a pair the rule relates
    lines = local.render_context_block(P, "When is the design review?").text.splitlines()
    assert "* [fact] The budget review is on Mondays at 11:00" in lines
    assert replaced_values("The build server is build-01 with 16 cores", "The build server is build-07 with 24 cores") \
        == {"build-01"}
    assert replaced_values(*UPDATES["time"]) == {"17:00"} and replaced_values(*UPDATES["amount"]) == {"12000"}


def test_two_related_lines_of_one_day_carry_the_minute(local: MemoryBank) -> None:
    old = local.save(SaveRequest(P, content=UPDATES["number"][0], category="fact")).memory
    _aged(local, old.id, 0.01)  # some 15 minutes earlier, most often the same day
    new = local.save(SaveRequest(P, content=UPDATES["number"][1], category="fact", auto_supersede=False)).memory
    block = local.render_context_block(P, "How many nodes does the staging cluster run?").text
    aged = local.get(P, old.id).created_at  # the old line's date as the block reads it (aged)
    if aged.date() == new.created_at.date():  # not so when the test runs just after midnight UTC
        assert block.count(" UTC) ") == 2
    assert block.count("(saved ") == 2


def test_restore_undoes_it_on_the_library(local: MemoryBank) -> None:
    old_text, new_text = UPDATES["identifier"]
    old = local.save(SaveRequest(P, content=old_text, category="fact")).memory
    new = local.save(SaveRequest(P, content=new_text, category="fact")).memory
    restored = local.restore(P, old.id)
    assert restored.is_active and restored.superseded_by is None
    assert local.get(P, new.id).is_active and local.get(P, new.id).supersedes is None
    assert [m.id for m in local.history(P, old.id)] == [old.id]
    with pytest.raises(ValidationError, match="is active"):
        local.restore(P, old.id)


def _ok(cli: Cli, *args: str) -> str:
    r = cli(*args)
    assert r.exit_code == 0, r.output
    return r.output


def test_no_supersede_and_restore_on_the_cli(local: MemoryBank, cli: Cli) -> None:
    old_text, new_text = UPDATES["version"]
    old_id = cli.json("save", "-p", P, "--content", old_text, "--category", "fact", "--json")["memory"]["id"]
    kept = cli.json("save", "-p", P, "--content", new_text, "--category", "fact", "--no-supersede", "--json")
    assert kept["superseded"] is None
    _ok(cli, "delete", "-p", P, kept["memory"]["id"])
    out = _ok(cli, "save", "-p", P, "--content", new_text, "--category", "fact")
    assert f"restates {old_id}" in out and f"memlocal restore {old_id}" in out
    assert "superseded by" in _ok(cli, "history", "-p", P, old_id)
    assert "active again" in _ok(cli, "restore", "-p", P, old_id)
    assert cli.json("get", "-p", P, old_id, "--json")["isActive"] is True


def test_no_supersede_and_restore_on_rest_and_the_tool(local: MemoryBank) -> None:
    old_text, new_text = UPDATES["address"]
    old = local.save(SaveRequest(P, content=old_text, category="fact")).memory
    out = dispatch(local, "memory_save", {"content": new_text, "category": "fact", "autoSupersede": False}, P)
    assert out["superseded"] is None and local.get(P, old.id).is_active
    local.delete(P, out["memory"]["id"])
    with LiveServer(create_app(local)) as server, http_client(base_url=server.url, timeout=30) as c:
        r = c.post(f"/api/profiles/{P}/memories", json={"content": new_text, "category": "fact"})
        assert r.status_code == 201 and r.json()["superseded"] == old.id
        r = c.post(f"/api/profiles/{P}/memories/{old.id}/restore")
        assert r.status_code == 200 and r.json()["memory"]["isActive"] is True
        assert c.post(f"/api/profiles/{P}/memories/{old.id}/restore").status_code == 400


def test_the_llm_proposal_joins_the_rule(anthropic_fake: FakeAnthropic, tmp_path: Path) -> None:
    with MemoryBank.open(tmp_path / "llm.db", config=Config.load().with_overrides(llm__timeout_s=30.0)) as bank:
        old = bank.save(SaveRequest(P, content="The weekly sync is on Tuesdays", category="fact", use_llm=False)).memory
        other = bank.save(SaveRequest(P, content="The quarterly review is on Tuesdays", category="fact", use_llm=False)).memory
        # A proposal the rule finds related (a weekday changed) is applied...
        anthropic_fake.respond(Reply.structured({
            "processedContent": "The weekly sync moved to Thursdays", "summary": "sync day",
            "category": "fact", "confidence": 0.9, "supersedes": old.id}))
        res = bank.save(SaveRequest(P, "the weekly sync is thursdays from now on"))
        assert res.superseded == old.id and res.proposed_supersedes is None
        # ...one about another subject stays a proposal.
        anthropic_fake.respond(Reply.structured({
            "processedContent": "The weekly sync agenda lives in the team wiki", "summary": "agenda",
            "category": "fact", "confidence": 0.9, "supersedes": other.id}))
        res = bank.save(SaveRequest(P, "agenda for the weekly sync: team wiki"))
        assert res.superseded is None and bank.get(P, other.id).is_active


def test_an_llm_judges_the_pairs_the_rule_is_unsure_of(anthropic_fake: FakeAnthropic, tmp_path: Path) -> None:
    """With an LLM configured, an update the rule is unsure of (a maybe) is asked of the
    model under its deadline; the rule is the fallback (nothing retired) when the model names
    none, fails, or is late. A sure update and a save without a maybe ask nothing."""
    old_text = "Chen Wei is the SRE lead and owns the on-call rotation"
    new_text = "Kofi Asante is now the SRE lead and owns the on-call rotation; Chen Wei moved to the Risk team"
    assert relation(old_text, new_text) == MAYBE
    config = Config.load().with_overrides(llm__timeout_s=1.0)
    with MemoryBank.open(tmp_path / "judge.db", config=config) as bank:
        old = bank.save(SaveRequest(P, content=old_text, category="fact", use_llm=False)).memory
        # The model says it replaces the old one: retired, as a supersession the rule allows.
        anthropic_fake.respond(Reply.structured({"replaces": old.id}))
        res = bank.save(SaveRequest(P, content=new_text, category="fact"))
        assert res.superseded == old.id and not bank.get(P, old.id).is_active
        asked = anthropic_fake.requests[-1].body
        assert old.id in asked["messages"][0]["content"] and "replaces" in json.dumps(asked["output_config"])
        assert [m.id for m in bank.history(P, res.memory.id)] == [old.id, res.memory.id]
        bank.restore(P, old.id)
        bank.delete(P, res.memory.id)
        # null, a failure, or no answer within the deadline: both stay active.
        for reply in (Reply.structured({"replaces": None}), Reply.error(500), Reply.sleep(5.0)):
            anthropic_fake.respond(reply)
            res = bank.save(SaveRequest(P, content=new_text, category="fact"))
            assert res.superseded is None and bank.get(P, old.id).is_active, reply
            bank.delete(P, res.memory.id)
        # A sure update is the rule's alone; --no-supersede asks nothing.
        before = len(anthropic_fake.requests)
        sure_old = bank.save(SaveRequest(P, content=UPDATES["number"][0], category="fact", use_llm=False)).memory
        assert bank.save(SaveRequest(P, content=UPDATES["number"][1], category="fact")).superseded == sure_old.id
        assert bank.save(SaveRequest(P, content=new_text, category="fact", auto_supersede=False)).superseded is None
        assert len(anthropic_fake.requests) == before
