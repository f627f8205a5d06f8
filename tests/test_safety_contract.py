"""One read path: a memory another writer put in the bucket with a credential in every field it
can carry is pulled, then every public read of every face runs over it (the library, the CLI,
REST and the dashboard's API, the MCP tools, the Claude memory tool, the LangGraph store), and
(a Hypothesis property) a credential of any detector family with characters of any Unicode
category inserted anywhere never reaches the database, the bucket object, the block or a face."""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any, Callable

import pytest
from api_live import LiveServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import http_client

from memlocal import MemoryBank, RecallQuery, SaveRequest
from memlocal.faces.api import create_app
from memlocal.errors import ValidationError
from memlocal.relevance.fold import project
from memlocal.faces.tools import dispatch
from test_safety import AWS, GHP, _B62, db_text, survives

MID = "mem-00000c0d"
NOTE = f"the deploy key {GHP} and {AWS}"


@pytest.fixture
def pulled(hosts: Callable[..., Any], s3: Any) -> Any:
    s3.put_json(f"memory/team/{MID}.json", {
        "id": MID, "profileName": "team", "rawInput": NOTE, "processedContent": NOTE, "summary": f"key {AWS}",
        "category": "fact", "createdAt": "2024-01-01T00:00:00Z",
        "memoryFile": f"/memories/{GHP}/deploy.md",
        "langgraph": {"namespace": ["team"], "key": GHP, "value": {"text": NOTE, GHP: [AWS, {AWS: GHP}]}},
        "meta": {GHP: {"nested": [AWS]}}})
    a = hosts("a")
    a.sync()
    assert survives(GHP, a.bank.store.get("team", MID).processed_content)  # stored as pulled
    return a


def _check(outputs: dict[str, str], *, shown: bool = True) -> None:
    for face, out in outputs.items():
        assert "deploy" in out or not shown, face  # (the memory is there: not an empty answer)
        assert not survives(GHP, out) and not survives(AWS, out), face


def test_every_read_of_the_library_and_the_tools(pulled: Any) -> None:
    bank: MemoryBank = pulled.bank
    dumps = lambda value: json.dumps(value, default=str)  # noqa: E731
    outputs = {
        "get": dumps(bank.get("team", MID).to_dict()), "list": dumps(bank.list("team").to_dict()),
        "list_all": dumps(bank.list_all(q="deploy").to_dict()),
        "export": dumps([m.to_dict() for m in bank.export("team")]),
        "grouped": dumps({p: [m.to_dict() for m in ms] for p, ms in bank.grouped().items()}),
        "history": dumps([m.to_dict() for m in bank.history("team", MID)]),
        "memories": dumps([m.to_dict() for m in bank.memories("team")]),
        "memories with a field": dumps([m.to_dict() for m in bank.memories("team", with_field="memoryFile")]),
        "get_many": dumps({k: m.to_dict() for k, m in bank.get_many("team", [MID]).items()}),
        "recall": dumps([s.memory.to_dict() for s in bank.recall(RecallQuery("team", "deploy key"))]),
        "query_with_relevance": dumps([s.memory.to_dict() for s in bank.query_with_relevance(
            RecallQuery("team", "deploy key", 10, 0.0))]),
        "render_context_block": bank.render_context_block("team", "deploy key").text,
        "inject": bank.inject("team", "@memory", "the deploy key?"),
        "memory_recall": dumps(dispatch(bank, "memory_recall", {"query": "deploy key"}, "team")),
        "memory_list": dumps(dispatch(bank, "memory_list", {}, "team")),
    }
    _check(outputs)


def test_every_read_of_rest_and_the_dashboard_api(pulled: Any) -> None:
    outputs = {}
    with LiveServer(create_app(pulled.bank)) as server, http_client(base_url=server.url, timeout=30) as c:
        for path in ("/api/profiles/team/memories", f"/api/profiles/team/memories/{MID}",
                     "/api/profiles/team/memories/search?q=deploy+key", "/api/memory-bank",
                     "/api/memory-bank?grouped=true", "/api/memory-bank?q=deploy",
                     "/api/profiles/team/injection-preview?q=deploy+key"):
            r = c.get(path)
            assert r.status_code == 200, (path, r.text)
            outputs[path] = r.text
    _check(outputs)


def test_every_read_of_the_cli(pulled: Any, cli: Any) -> None:
    host = cli.at(pulled.path)
    pulled.close()
    outputs = {}
    for args in (("get", "-p", "team", MID, "--json"), ("get", "-p", "team", MID), ("list", "-p", "team", "--json"),
                 ("list", "-p", "team"), ("recall", "-p", "team", "deploy key"), ("export", "-p", "team"),
                 ("history", "-p", "team", MID)):
        code, out, err = host(*args)
        assert code == 0, (args, err)
        outputs[" ".join(args)] = out
    _check(outputs, shown=False)  # (a plain list shows the summary, "key [REDACTED:aws-key]")
    assert all(MID in out for out in outputs.values())


@pytest.mark.anthropic_sdk  # the Claude memory tool's module imports the SDK
def test_every_read_of_the_integrations(pulled: Any) -> None:
    from anthropic.types.beta import BetaMemoryTool20250818ViewCommand as View

    from memlocal.integrations.claude import MemlocalMemoryTool
    from memlocal.integrations.langgraph import MemlocalStore

    tool = MemlocalMemoryTool(pulled.bank, "team")
    listing = tool.view(View(command="view", path="/memories"))
    # (the key's whole token is cut, "/deploy" with it: a base64 key may hold "/")
    path = next(line.split("\t")[1] for line in listing.splitlines() if line.endswith(".md"))
    store = MemlocalStore(pulled.bank)
    items = store.search(("team",), query="deploy key") + store.search(("team",))
    outputs = {"tool listing": listing + " deploy", "tool view": tool.view(View(command="view", path=path)),
               "langgraph search": json.dumps([i.dict() for i in items], default=str),
               "langgraph namespaces": json.dumps(store.list_namespaces()) + " deploy"}
    got = [store.get(("team",), GHP)]  # asked for by its key as written: found under its redacted key
    outputs["langgraph get"] = json.dumps([i.dict() for i in got if i is not None], default=str)
    _check(outputs)


# --- the property --------------------------------------------------------------------------------

FAMILIES = {
    "aws-key": AWS, "github-token": GHP, "stripe-key": "sk_" + "live_" + _B62[:24],
    "slack-token": "xoxb-" + "123456789012-1234567890123-" + _B62[:24],
    "openai-key": "sk-" + "proj-" + _B62[:48], "anthropic-key": "sk-ant-" + "api03-" + _B62[:80] + "-xyzAA",
    "gitlab-token": "glpat-" + _B62[:20], "npm-token": "npm_" + _B62[:36],
}
# Every general category; the characters of each that no key is made of (the white space
# separators and the decimal digits have none: a space ends a word, a digit is a key's own).
CATEGORIES = ("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po",
              "Sm", "Sc", "Sk", "So", "Cc", "Cf", "Co", "Cn")


def _dropped(ch: str) -> bool:
    return project(ch)[0] == "" and not ch.isspace()


# Built once: a strategy made inside the composite was built and validated again on every draw
# (most of the properties' time).
_DROPPED_CHARS = {c: st.characters(categories=[c]).filter(_dropped) for c in CATEGORIES}  # type: ignore[list-item]


@st.composite
def decorated(draw: st.DrawFn) -> tuple[str, str]:
    kind = draw(st.sampled_from(sorted(FAMILIES)))
    key = FAMILIES[kind]
    cats = draw(st.lists(st.sampled_from(CATEGORIES), min_size=1, max_size=4))
    chars = draw(st.lists(st.one_of(*[_DROPPED_CHARS[c] for c in cats]), min_size=1, max_size=8))
    positions = draw(st.lists(st.integers(0, len(key)), min_size=len(chars), max_size=len(chars)))
    out = list(key)
    for at, ch in sorted(zip(positions, chars), reverse=True):
        out.insert(at, ch)
    return key, "".join(out)


@pytest.mark.slow  # a long property: started first
@settings(max_examples=400, deadline=None)
@given(decorated())
def test_redaction_cuts_out_any_decorated_key(case: tuple[str, str]) -> None:
    from memlocal.services.redact import redact

    key, text = case
    out = redact(f"note: {text} end")
    assert out.kinds and not survives(key, out.text), out.text


_HOSTS: dict[int, Any] = {}


@pytest.mark.slow  # 40 saves through a bucket, each database read whole
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(case=decorated())
def test_a_decorated_key_reaches_no_database_bucket_block_or_face(hosts: Callable[..., Any], s3: Any,
                                                                 case: tuple[str, str]) -> None:
    key, text = case
    if id(hosts) not in _HOSTS:  # one host for every example of a run (the fixture is per test)
        _HOSTS.clear()
        _HOSTS[id(hosts)] = hosts("a")
    host = _HOSTS[id(hosts)]
    profile = f"p{abs(hash(text)) % 10**9}"
    content = f"the deploy key is {text}"
    clean = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", "", content)
    if clean != content:  # a save refuses a C0 control (docs/storage.md): the rest runs on the text without it
        with pytest.raises(ValidationError, match="control character"):
            host.bank.save(SaveRequest(profile, content=content, category="fact"))
    saved = host.bank.save(SaveRequest(profile, content=clean, category="fact", extra={"meta": {text: [text]}}))
    body = s3.client.get_object(Bucket=s3.bucket, Key=f"memory/{profile}/{saved.memory.id}.json")["Body"].read()
    block = host.bank.inject(profile, "@memory", "what is the deploy key?")
    shown = json.dumps([host.bank.get(profile, saved.memory.id).to_dict(),
                        dispatch(host.bank, "memory_list", {}, profile)], default=str)
    for out in (body.decode(), block, shown, db_text(host.path.parent)):
        assert not survives(key, out)
    assert "deploy key" in block
    assert unicodedata.is_normalized("NFC", "x")  # (the block is text: nothing above raised)
