"""Profile copy and rename (library, CLI, sync to a second host) and imports whose ids are taken."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
from conftest import Cli

from memlocal import MemoryBank, RecallQuery, SaveRequest
from memlocal.errors import NotFoundError, ValidationError
from s3server import S3, Host


def fill(bank: MemoryBank) -> tuple[str, str, str]:
    """Three memories of ``coder``: a preference, an old fact superseded by a new one."""
    pref = bank.save(SaveRequest("coder", content="Prefers pytest over unittest", category="preference")).memory.id
    old = bank.save(SaveRequest("coder", content="The CI runs on Jenkins", category="fact")).memory.id
    new = bank.save(SaveRequest("coder", content="The CI runs on GitHub Actions", category="fact", supersedes=old)).memory.id
    bank.recall(RecallQuery("coder", "pytest"))
    return pref, old, new


def test_copy_gives_new_ids_keeps_every_field_and_moves_the_links(bank: MemoryBank) -> None:
    pref, old, new = fill(bank)
    before = {m.id: m for m in bank.export("coder")}
    result = bank.copy_profile("coder", "coder-copy")
    assert [o for o, _ in result.ids] == [pref, old, new] and not result.renamed
    ids = dict(result.ids)
    assert not set(ids.values()) & set(ids)
    assert {m.id: m for m in bank.export("coder")} == before  # the source is untouched
    copies = {m.id: m for m in bank.export("coder-copy")}
    for original in before.values():
        c = copies[ids[original.id]]
        assert c.profile_name == "coder-copy" and c.extra["copiedFrom"] == original.id
        assert (c.processed_content, c.summary, c.category, c.confidence, c.created_at, c.access_count,
                c.is_active) == (original.processed_content, original.summary, original.category,
                                 original.confidence, original.created_at, original.access_count, original.is_active)
    assert copies[ids[new]].supersedes == ids[old] and copies[ids[old]].superseded_by == ids[new]
    assert [m.id for m in bank.history("coder-copy", ids[new])] == [ids[old], ids[new]]
    assert [r.memory.id for r in bank.recall(RecallQuery("coder-copy", "pytest"))] == [ids[pref]]
    assert result.synced == 0 and result.pending == 3


def test_rename_moves_everything_and_refuses_what_would_merge(bank: MemoryBank) -> None:
    fill(bank)
    bank.save(SaveRequest("other", content="Something else"))
    with pytest.raises(ValidationError, match="profile other already has 1 memory"):
        bank.rename_profile("coder", "other")
    with pytest.raises(NotFoundError, match="profile nobody has no memories"):
        bank.copy_profile("nobody", "x")
    with pytest.raises(ValidationError, match="to itself"):
        bank.rename_profile("coder", "coder")
    with pytest.raises(ValidationError, match="profile name"):
        bank.copy_profile("coder", "bad/name")
    assert bank.stats()["perProfile"] == {"coder": 3, "other": 1}
    result = bank.rename_profile("coder", "coder2")
    assert result.renamed and bank.stats()["perProfile"] == {"coder2": 3, "other": 1}
    assert bank.store.read("SELECT op, count(*) FROM sync_outbox GROUP BY op ORDER BY op") == [("delete", 3), ("put", 4)]


def test_cli_profile_copy_and_rename(cli: Cli) -> None:
    cli("save", "-p", "coder", "--content", "Prefers pytest")
    code, out, err = cli("profile", "copy", "coder", "coder-copy")
    assert code == 0 and out.startswith("copied 1 memory of coder to coder-copy under new ids") and "local only" in out
    data = cli.json("profile", "rename", "coder-copy", "tester", "--json")
    assert data["renamed"] and data["copied"] == 1 and data["source"] == "coder-copy"
    code, out, err = cli("profile", "rename", "coder", "tester")
    assert code == 1 and err.strip() == "Error: profile tester already has 1 memory; copy or rename into a profile that has none"
    assert cli.json("stats", "--json")["perProfile"] == {"coder": 1, "tester": 1}


def test_import_into_the_same_database_gives_copies_new_ids_once(tmp_path: Path, cli: Cli, bank: MemoryBank) -> None:
    _pref, old, new = fill(bank)
    dump = tmp_path / "coder.jsonl"
    # The superseding memory first: its link points at a line further down the file.
    lines = sorted(bank.export("coder"), key=lambda m: m.id != new)
    dump.write_text("".join(json.dumps(m.to_dict()) + "\n" for m in lines))
    bank.close()
    code, out, err = cli("import", dump, "--profile", "coder-copy")
    assert code == 0, err
    assert out.strip() == ("imported 3 (3 with new ids: their ids belong to memories of another profile), "
                           "unchanged 0, rejected 0")
    report = cli.json("import", dump, "--profile", "coder-copy", "--json")
    assert (report["imported"], report["unchanged"], report["newIds"]) == (0, 3, [])
    with MemoryBank(cli.db) as again:
        copies = {m.extra["copiedFrom"]: m for m in again.export("coder-copy")}
        assert set(copies) == {m.id for m in lines}
        assert copies[new].supersedes == copies[old].id and copies[old].superseded_by == copies[new].id
        assert again.stats()["perProfile"] == {"coder": 3, "coder-copy": 3}
        # A profile copied with `profile copy` holds copies of the same ids: importing the source's
        # export into it adds nothing either.
        again.copy_profile("coder", "coder-3")
    assert cli.json("import", dump, "--profile", "coder-3", "--json")["unchanged"] == 3


def test_copy_and_rename_reach_a_second_host(hosts: Callable[..., Host], s3: S3) -> None:
    a, b = hosts("a"), hosts("b")
    _pref, old, new = fill(a.bank)
    assert b.sync().ok
    copied = a.bank.copy_profile("coder", "coder-copy")
    assert copied.synced == 3 and copied.pending == 0
    renamed = a.bank.rename_profile("coder", "coder2")
    assert renamed.synced == 6 and renamed.pending == 0
    assert sorted(k.split("/")[1] for k in s3.keys()) == ["coder-copy"] * 3 + ["coder2"] * 3
    report = b.sync()
    assert report.ok and report.counts["pulled"] == 6 and report.counts["deleted_local"] == 3
    assert b.bank.stats()["perProfile"] == {"coder-copy": 3, "coder2": 3}
    moved = dict(renamed.ids)
    assert b.bank.get("coder2", moved[new]).supersedes == moved[old]
    assert {b.bank.get("coder2", n).extra["copiedFrom"] for n in moved.values()} == set(moved)
    assert a.sync().summary().startswith("ok: nothing to do")
