"""Attacks on the bank's safety, each reproduced on the faces it reaches: characters the fold kept inside a key,
secrets in keys of values, the integrations' reads, the LLM path, look-alike structure lines,
exact duplicates, the memory tool's paths. What "survives" means: the key is in the output once
it is read as the detectors read it (:func:`memlocal.relevance.fold.project`: every character no key is
made of dropped), so a key decorated by any such character counts as there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any, Callable

import pytest
from anthropic_fake import FakeAnthropic, Reply

from memlocal import MemoryBank, SaveRequest, ValidationError
from memlocal.config import Config
from memlocal.bank.portability import import_jsonl
from memlocal.services.redact import redact

_B62 = "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5xY7zA9bC1dE3fG5hJ7kL9mN1pQ3rS5xY7zA9bC1dE3fG5"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GHP = "ghp_" + _B62[:36]


def _seen_char(ch: str) -> str:
    """What :func:`seen` makes of one character: its NFKC form, digits of any script as ASCII,
    printable ASCII and white space kept, everything else dropped."""
    out = []
    for c in unicodedata.normalize("NFKC", ch):
        if c.isascii():
            out.append(c if c.isprintable() or c.isspace() else "")
        elif unicodedata.decimal(c, None) is not None:
            out.append(str(unicodedata.decimal(c)))
    return "".join(out)


class _SeenTable(dict[int, str]):
    """``str.translate``'s table for :func:`seen`: each character's ``_seen_char``, computed the
    first time it is met (the contract property reads a whole database each example, ~5M
    characters: a Python step per character was most of its time)."""

    def __missing__(self, code: int) -> str:
        self[code] = _seen_char(chr(code))
        return self[code]


_SEEN = _SeenTable()


def seen(text: str) -> str:
    """``text`` as a reader who skips every character no key is made of sees it (the test's own
    oracle, independent of the library's projection): each character by ``_seen_char``."""
    return text.translate(_SEEN)


def survives(value: str, output: str) -> bool:
    return value in seen(output)


def db_text(folder: Path) -> str:
    data = b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())
    return seen(data.replace(b"\x00", b"").decode("utf-8", "ignore"))


def _digits(key: str, zero: int) -> str:
    return "".join(chr(zero + int(c)) if c.isdigit() else c for c in key)


# --- 1. characters the fold keeps -------------------------------------------------------------

DECORATED = {
    "combining acute": AWS[:4] + "\u0301" + AWS[4:],
    "combining low line under every character": "".join(c + "\u0332" for c in AWS),
    "private use": AWS[:4] + "\ue000" + AWS[4:],
    "unassigned": AWS[:4] + "\u0378" + AWS[4:],
    "noncharacter": AWS[:4] + "\uffff" + AWS[4:],
    "devanagari digits": _digits(AWS, 0x966),
    "arabic-indic digits": _digits(AWS, 0x660),
    "thai digits": _digits(AWS, 0xE50),
    "musical symbol": AWS[:8] + "\U0001d159" + AWS[8:],
    "a CJK letter": AWS[:8] + "\u4e2d" + AWS[8:],
    "github, a mark after ten": GHP[:10] + "\u0301" + GHP[10:],
    "ascii control": AWS[:4] + "\x01" + AWS[4:],
}


@pytest.mark.parametrize("name", sorted(DECORATED))
def test_a_decorated_key_is_cut_out_whole(name: str) -> None:
    text = f"backup key {DECORATED[name]} here"
    out = redact(text)
    assert out.kinds and out.text.startswith("backup key [REDACTED:") and out.text.endswith("] here"), out.text
    key = GHP if name.startswith("github") else AWS
    assert not survives(key, out.text)
    assert not survives(key[:10], out.text)  # not even its first characters


def test_a_decorated_key_never_reaches_the_database_the_cli_or_the_block(tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "db" / "m.db"
    db.parent.mkdir()
    env = {**os.environ, "MEMLOCAL_DB": str(db)}
    # The first save and the listing are real processes (argv and stdout through the OS); the
    # other saves run the same command in process (a process start is ~0.4 s of CPU each, and
    # argv carries any text without a surrogate unchanged).
    for i, (name, key) in enumerate(DECORATED.items()):
        args = ["--db", str(db), "save", "-p", "ops", f"backup key {key} ({name})"]
        if "\x01" in key:  # a control character: the save is refused, so the key is stored nowhere either
            assert "control character" in cli(*args, db=None).stderr
        elif i == 0:
            run = subprocess.run([sys.executable, "-m", "memlocal", *args], capture_output=True, text=True,
                                 timeout=60, env=env)
            assert run.returncode == 0, run.stderr
        else:
            assert cli(*args, db=None).exit_code == 0
    shown = subprocess.run([sys.executable, "-m", "memlocal", "--db", str(db), "list", "-p", "ops", "--json"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert shown.returncode == 0 and "backup key" in shown.stdout
    assert not survives(AWS, shown.stdout) and not survives(GHP[:10], shown.stdout)
    with MemoryBank(db) as bank:
        block = bank.inject("ops", "@memory", "what is the backup key?")
        assert "backup key" in block and not survives(AWS, block) and not survives(GHP[:10], block)
    text = db_text(db.parent)
    assert not survives(AWS, text) and not survives(GHP[:10], text)


def test_a_decorated_key_never_reaches_the_bucket(hosts: Callable[..., Any], s3: Any) -> None:
    a = hosts("a")
    ids = [a.bank.save(SaveRequest("p", content=f"backup key {key}")).memory.id for key in DECORATED.values()
           if "\x01" not in key]  # a control character is refused (docs/storage.md): nothing to send
    a.sync()
    for i in ids:
        body = s3.client.get_object(Bucket=s3.bucket, Key=f"memory/p/{i}.json")["Body"].read().decode()
        assert "backup key" in body and not survives(AWS, json.loads(body)["processedContent"])
        assert not survives(GHP[:10], json.loads(body)["rawInput"])


# --- 2. secrets in dict keys, control characters, namespace labels ----------------------------


def test_import_redacts_keys_at_any_depth(bank: MemoryBank) -> None:
    line = json.dumps({"id": "mem-0000000c", "profileName": "p", "rawInput": "deploy notes",
                       "createdAt": "2024-01-01T00:00:00Z", "meta": {"creds": {GHP: "x"}}})
    report = import_jsonl(bank, [line])
    assert report.imported == 1
    assert report.to_dict()["redacted"] == [{"line": 1, "kinds": ["github-token"], "fields": ["meta"]}]
    exported = json.dumps([m.to_dict() for m in bank.export("p")])
    assert "deploy notes" in exported and not survives(GHP, exported)
    assert not survives(GHP, db_text(bank.path.parent))


def test_a_pulled_key_in_a_dict_key_is_not_shown(bank: MemoryBank, cli: Any) -> None:
    from memory_factory import memory

    pulled = memory("p", "deploy notes", memory_id="mem-0000000d").with_changes(extra={"meta": {GHP: "x"}})
    bank.store.upsert(pulled)  # as a sync pull writes it
    assert not survives(GHP, json.dumps(bank.get("p", "mem-0000000d").to_dict()))
    code, out, _ = cli.at(bank.path)("get", "-p", "p", "mem-0000000d", "--json")
    assert code == 0 and "deploy notes" in out and not survives(GHP, out)


# --- 3 and 2. the integrations ----------------------------------------------------------------


def test_the_memory_tool_reads_through_the_redaction(bank: MemoryBank) -> None:
    from anthropic.types.beta import BetaMemoryTool20250818ViewCommand as View

    from memlocal.integrations.claude import MemlocalMemoryTool
    from memory_factory import memory

    pulled = memory("claude", f"deploy with {GHP}", memory_id="mem-0000000e").with_changes(
        extra={"memoryFile": "/memories/deploy.md"})
    bank.store.upsert(pulled)
    assert "[REDACTED:github-token]" in bank.get("claude", "mem-0000000e").processed_content
    tool = MemlocalMemoryTool(bank, "claude")
    out = tool.view(View(command="view", path="/memories/deploy.md"))
    assert "deploy with" in out and not survives(GHP, out) and "[REDACTED:github-token]" in out
    listing = tool.view(View(command="view", path="/memories"))
    assert "deploy.md" in listing


def test_the_langgraph_store_reads_through_the_redaction(bank: MemoryBank) -> None:
    from memlocal.integrations.langgraph import MemlocalStore
    from memory_factory import memory

    pulled = memory("users.1", f"deploy with {GHP}", memory_id="mem-0000000f").with_changes(extra={"langgraph": {
        "namespace": ["users", "1"], "key": "k0", "value": {"text": f"deploy with {GHP}", GHP: "x"}}})
    bank.store.upsert(pulled)
    store = MemlocalStore(bank)
    item = store.get(("users", "1"), "k0")
    assert item is not None and "deploy with" in json.dumps(item.value) and not survives(GHP, json.dumps(item.value))
    found = store.search(("users",), query="deploy")
    assert found and not survives(GHP, json.dumps([f.dict() for f in found], default=str))


def test_the_langgraph_store_redacts_keys_controls_labels_and_item_keys(bank: MemoryBank) -> None:
    from memlocal.integrations.langgraph import MemlocalStore

    store = MemlocalStore(bank)
    store.put(("users", "1"), "k1", {"tokens": {GHP: "x"}})
    store.put(("users", "1"), "k2", {"note": AWS[:4] + "\x01" + AWS[4:]})
    # Labels and item keys are identifiers: one holding a credential is refused, never redacted
    # into another's (docs/hygiene.md, "Identifiers are never redacted into each other").
    for namespace, key in ((("users", AWS), "k3"), (("users", "1"), f"key {GHP}")):
        with pytest.raises(ValidationError, match="holds a credential") as err:
            store.put(namespace, key, {"note": "labelled"})
        assert not survives(GHP, str(err.value)) and not survives(AWS, str(err.value))
    everything = [store.get(("users", "1"), "k1"), store.get(("users", "1"), "k2")]
    assert all(everything)
    out = json.dumps([i.dict() for i in everything if i is not None], default=str)
    assert not survives(GHP, out) and not survives(AWS, out)
    assert all(not survives(AWS, p["name"]) for p in bank.profiles())
    assert not survives(GHP, db_text(bank.path.parent)) and not survives(AWS, db_text(bank.path.parent))


# --- 4. the LLM path ------------------------------------------------------------------------------


def test_the_models_answer_is_redacted_before_it_is_stored(anthropic_fake: FakeAnthropic, db_path: Path) -> None:
    anthropic_fake.respond(Reply.structured({"processedContent": f"My AWS key is {AWS}.", "summary": f"AWS key {AWS}",
                                             "category": "fact", "confidence": 0.9}))
    with MemoryBank.open(db_path, config=Config.load()) as bank:
        saved = bank.save(SaveRequest("llm", "my aws key: " + " ".join(AWS[i:i + 4] for i in range(0, 20, 4))))
        assert "aws-key" in saved.redacted
        assert not survives(AWS, saved.memory.processed_content) and not survives(AWS, saved.memory.summary)
    assert not survives(AWS, db_text(db_path.parent))


def test_a_pulled_key_is_not_sent_to_the_model(anthropic_fake: FakeAnthropic, db_path: Path) -> None:
    from memory_factory import memory

    anthropic_fake.respond(Reply.structured({"processedContent": "The deploy key was rotated.", "summary": "rotated",
                                             "category": "fact", "confidence": 0.9, "supersedes": None}))
    with MemoryBank.open(db_path, config=Config.load()) as bank:
        bank.store.upsert(memory("llm", f"the deploy key is {GHP}", memory_id="mem-00000010"))
        bank.save(SaveRequest("llm", "the deploy key was rotated yesterday"))
    sent = json.dumps([r.body for r in anthropic_fake.requests])
    assert "deploy key is" in sent and not survives(GHP, sent)


# --- 6. exact duplicates stay exact -----------------------------------------------------------------

NOT_THE_SAME = [
    ("The server handles 10\u2076 requests a day", "The server handles 106 requests a day"),
    ("The loop costs n\u00b2 steps", "The loop costs n2 steps"),
    ("Water is H\u2082O", "Water is H2O"),
    ("Add \u00bd cup of sugar", "Add 1/2 cup of sugar"),
    ("Add \u00bd cup of sugar", "Add 1 2 cup of sugar"),
    ("Everything is 5\u066a off", "Everything is 5 off"),
    ("It was \u20145 degrees", "It was 5 degrees"),
    ("The limit is -\u221e", "The limit is \u221e"),
]


@pytest.mark.parametrize(("first", "second"), NOT_THE_SAME)
def test_exact_duplicates_do_not_fold_what_changes_the_meaning(bank: MemoryBank, first: str, second: str) -> None:
    a = bank.save(SaveRequest("p", content=first, category="fact"))
    b = bank.save(SaveRequest("p", content=second, category="fact"))
    assert not b.deduplicated and a.memory.id != b.memory.id


def test_the_cli_does_not_answer_already_saved_for_a_different_number(cli: Any) -> None:
    assert cli("save", "-p", "p", "--content", NOT_THE_SAME[0][0]).exit_code == 0
    out = cli("save", "-p", "p", "--content", NOT_THE_SAME[0][1])
    assert out.exit_code == 0 and "already saved" not in out.output


def test_exact_duplicates_still_see_through_invisible_and_lookalike_characters(bank: MemoryBank) -> None:
    a = bank.save(SaveRequest("p", content="Ana prefers dark mode", category="preference"))
    for same in ("Ana prefers da\u200brk mode", "Ana prefers d\u0430rk mode", "\uff21na prefers dark mode",
                 "It was \u22125 degrees"):
        if same.startswith("It"):
            assert bank.save(SaveRequest("p", content="It was -5 degrees", category="fact")).memory.id == \
                bank.save(SaveRequest("p", content=same, category="fact")).memory.id  # a minus sign is a minus
            continue
        assert bank.save(SaveRequest("p", content=same, category="preference")).memory.id == a.memory.id, same


# --- 7. the memory tool's paths are bounded -------------------------------------------------------


def _tool(bank: MemoryBank) -> Any:
    from memlocal.integrations.claude import MemlocalMemoryTool

    return MemlocalMemoryTool(bank, "claude")


@pytest.mark.parametrize("path", [
    "/memories/" + "a" * 1015,  # 1,025 bytes
    "/memories/" + "é" * 508,  # 1,026 bytes of UTF-8
    "/memories/" + "/".join("d" * 19) + "/f.md",  # 21 segments, /memories counted
    "/memories/a\x01b.md", "/memories/a\u200bb.md", "/memories/a\u202eb.md", "/memories/a\u2028b.md",
    "/memories/" + "a" * 1_200_000,  # the kernel killed a command over a 1.2 MB path
])
def test_an_unbounded_path_is_refused_in_the_tools_own_style(bank: MemoryBank, path: str) -> None:
    from anthropic.lib.tools import ToolError

    tool = _tool(bank)
    for command in ({"command": "create", "path": path, "file_text": "x"}, {"command": "view", "path": path},
                    {"command": "rename", "old_path": "/memories/ok.md", "new_path": path}):
        with pytest.raises(ToolError) as err:
            tool.call(command)
        assert "Path" in str(err.value.content) and len(str(err.value.content)) < 200
    assert bank.stats()["totalMemories"] == 0


def test_the_longest_paths_allowed_work_and_nfc_is_one_name(bank: MemoryBank) -> None:
    tool = _tool(bank)
    longest = "/memories/" + "a" * 1014
    deepest = "/memories/" + "/".join("d" * 18) + "/f.md"  # 20 segments, /memories counted
    for path in (longest, deepest):
        assert "created" in tool.call({"command": "create", "path": path, "file_text": f"text of {path[-8:]}"})
        assert "text of" in tool.call({"command": "view", "path": path})
    tool.call({"command": "create", "path": "/memories/caf\u00e9.md", "file_text": "espresso notes"})
    assert "espresso notes" in tool.call({"command": "view", "path": "/memories/cafe\u0301.md"})  # NFD: the same file


def test_a_secret_in_a_path_is_not_kept(bank: MemoryBank) -> None:
    from anthropic.lib.tools import ToolError

    tool = _tool(bank)
    # A path is an identifier: one holding a credential is refused (read or write), never
    # redacted into another path (docs/hygiene.md, "Identifiers are never redacted into each other").
    for command in ({"command": "create", "path": f"/memories/{GHP}.md", "file_text": "the deploy notes"},
                    {"command": "view", "path": f"/memories/other/{GHP}.md"}):
        with pytest.raises(ToolError) as err:  # the error names the kind, never the path as written
            tool.call(command)
        assert "holds a credential (github-token)" in str(err.value.content)
        assert not survives(GHP, str(err.value.content))
    listing = tool.call({"command": "view", "path": "/memories"})
    assert "REDACTED" not in listing and not survives(GHP, listing)
    assert not survives(GHP, db_text(bank.path.parent))


# --- 8. one line, never a traceback ---------------------------------------------------------------


def test_damaged_sync_tables_are_one_line(hosts: Callable[..., Any], s3: Any, cli: Any) -> None:
    import sqlite3

    a = hosts("a")
    a.bank.save(SaveRequest("p", content="first note"))
    a.sync()
    tables = [r[0] for r in a.bank.store.read("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'sync%'")]
    a.close()
    conn = sqlite3.connect(a.path)
    conn.execute("DROP TABLE sync_base" if "sync_base" in tables else f"DROP TABLE {tables[0]}")
    conn.commit()
    conn.close()
    host = cli.at(a.path)
    for args in (("sync", "status"), ("sync", "run"), ("save", "-p", "p", "--content", "second note")):
        code, out, err = host(*args)
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, (args, err)


def _full_disk(args: tuple[str, ...], db: Path, limit: int) -> subprocess.CompletedProcess[str]:
    """``memlocal --db db *args`` in a process whose files cannot grow past ``limit`` bytes (the
    file size limit, RLIMIT_FSIZE: every write past it fails as a full disk's does)."""
    import support

    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (%d, %d)); "
              "from memlocal.faces.cli import main; sys.argv = ['memlocal'] + sys.argv[1:]; main()" % (limit, limit))
    return support.run([sys.executable, "-c", script, "--db", str(db), *args],  # type: ignore[no-any-return]
                       capture_output=True, text=True, timeout=60)


@pytest.mark.slow  # seven memlocal processes
def test_sync_and_save_on_a_full_disk_are_one_line(tmp_path: Path, s3: Any, cli: Any) -> None:
    """The sync's tables cannot be created (a database made before the bucket was set, now on a
    full disk), and a synced database whose next writes do not fit: ``sync status``, ``sync run``
    and ``save`` answer with one line, never a traceback, and the first says the disk is full."""
    local = tmp_path / "local.db"
    env = {k: v for k, v in os.environ.items() if "S3" not in k}
    made = subprocess.run([sys.executable, "-m", "memlocal", "--db", str(local), "save", "-p", "p", "--content",
                           "first note"], env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    synced = tmp_path / "synced.db"
    assert cli.at(synced)("save", "-p", "p", "--content", "first note").exit_code == 0
    assert cli.at(synced)("sync", "run").exit_code == 0
    for db in (local, synced):
        limit = 36000  # room for the shared-memory index (32 KiB), not for a migration or a save
        for args in (("sync", "status"), ("sync", "run"), ("save", "-p", "p", "--content", "more text " * 300)):
            p = _full_disk(args, db, limit)
            assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 1, (db.name, args, p.stderr)
            if p.returncode != 0:
                assert "full" in p.stderr or "disk" in p.stderr, (db.name, args, p.stderr)


def test_a_profile_name_holding_a_credential_is_refused(tmp_path: Path, cli: Any) -> None:
    """A profile name is stored and synced as given (it is part of the bucket key), so one that is
    a credential is refused, never redacted into another name: by save, import and a rename."""
    db = tmp_path / "bank" / "names.db"
    db.parent.mkdir()
    host = cli.at(db)
    for name in (AWS, f"users.{AWS}", GHP):
        code, _out, err = host("save", "-p", name, "--content", "the deploy notes")
        assert code == 1 and "credential" in err and len(err.strip().splitlines()) == 1, err
        assert not survives(name, err)
    line = json.dumps({"id": "mem-0000abcd", "profileName": GHP, "processedContent": "deploy notes",
                       "rawInput": "deploy notes", "category": "fact"})
    (tmp_path / "in.jsonl").write_text(line + "\n")
    code, out, err = host("import", str(tmp_path / "in.jsonl"), "--json")
    assert json.loads(out)["imported"] == 0, out
    assert host("save", "-p", "ops", "--content", "the deploy notes").exit_code == 0
    code, _out, err = host("profile", "rename", "ops", AWS)
    assert code == 1 and "credential" in err, err
    assert not survives(AWS, db_text(db.parent)) and not survives(GHP, db_text(db.parent))
