"""No 5xx for anything a client can send: a hand-written battery of malformed requests, and a
schemathesis run over the app's own OpenAPI schema (bounded examples per operation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator
import pytest
import schemathesis
import schemathesis.generation.hypothesis.builder as _builder
from api_live import LiveServer
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from support import http_client

from memlocal import MemoryBank, SaveRequest
from memlocal.faces.api import create_app
from memlocal.errors import BankNotWiredError

EXAMPLES_PER_OPERATION = 25

P = "/api/profiles/p1/memories"
JSON = {"content-type": "application/json"}


def _serve_seeded(path: Path) -> Iterator[str]:
    with MemoryBank(path) as bank:
        first = bank.save(SaveRequest("p1", content="Prefers dark roast coffee in the morning", category="preference"))
        bank.save(SaveRequest("p1", content="Deploys on Fridays", category="behavior"))
        bank.automations.put("auto-1", "last run stopped at page 3")
        with LiveServer(create_app(bank)) as server:
            server.seed_id = first.memory.id  # type: ignore[attr-defined]
            yield server.url


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for the module (the battery and schemathesis only need it to stay up)."""
    yield from _serve_seeded(tmp_path_factory.mktemp("fuzz") / "fuzz.db")


def _body(obj: str | bytes) -> dict[str, Any]:
    return {"content": obj.encode() if isinstance(obj, str) else obj, "headers": JSON}


BAD_PROFILES = ["..%2Fx", "%2e%2e", ".hidden", "a%20b", "a%00b", "x" * 65, "%C3%A9", "a%2Fb", "a%5Cb", "%0A"]
BAD_IDS = ["mem-ZZZZZZZZ", "mem-0000000", "mem-000000000", "MEM-00000000", "..%2F..%2Fetc", "mem-0000000%00", "%FF"]

BATTERY: list[tuple[str, str, dict[str, Any]]] = [
    # bad JSON and wrong shapes
    ("POST", P, _body("{")),
    ("POST", P, _body("")),
    ("POST", P, _body("null")),
    ("POST", P, _body("[1, 2]")),
    ("POST", P, _body('"just a string"')),
    ("POST", P, _body(b"\xff\xfe\x00garbage")),
    ("POST", P, _body("[" * 50_000 + "]" * 50_000)),
    ("POST", P, _body('{"content": "x", "confidence": NaN}')),
    ("POST", P, _body('{"content": "x", "confidence": Infinity}')),
    ("POST", P, _body('{"content": "x", "confidence": -Infinity}')),
    ("POST", P, _body('{"content": "x", "confidence": 1e999}')),
    ("POST", P, _body('{"content": "x", "confidence": 12345678901234567890123456789}')),
    ("POST", P, _body('{"content": "\\ud800"}')),
    ("POST", P, _body('{"rawInput": "\\udfff lone surrogate"}')),
    ("POST", P, {"json": {"rawInput": 5}}),
    ("POST", P, {"json": {"rawInput": ["a"]}}),
    ("POST", P, {"json": {"rawInput": {"a": 1}}}),
    ("POST", P, {"json": {"rawInput": True}}),
    ("POST", P, {"json": {"rawInput": None, "content": None}}),
    ("POST", P, {"json": {"content": "x", "summary": 5}}),
    ("POST", P, {"json": {"content": "x", "category": 1}}),
    ("POST", P, {"json": {"content": "x", "category": "gossip"}}),
    ("POST", P, {"json": {"content": "x", "category": ""}}),
    ("POST", P, {"json": {"content": "x", "confidence": True}}),
    ("POST", P, {"json": {"content": "x", "confidence": -0.1}}),
    ("POST", P, {"json": {"content": "x", "confidence": "0.5"}}),
    ("POST", P, {"json": {"content": "", "rawInput": ""}}),
    ("POST", P, {"json": {"content": "   \n\t "}}),
    ("POST", P, {"json": {"content": "x", "id": "mem-00000000"}}),
    ("POST", P, {"content": b"content=x", "headers": {"content-type": "application/x-www-form-urlencoded"}}),
    ("POST", P, {"content": b"--b\r\n\r\n", "headers": {"content-type": "multipart/form-data; boundary=b"}}),
    ("POST", P, {"content": b'{"content": "x"}', "headers": {"content-type": "text/plain"}}),
    ("POST", P, {"content": b'{"content": "x"}', "headers": {"content-type": "application/json; charset=latin-1"}}),
    # huge bodies
    ("POST", P, {"json": {"rawInput": "x" * 5000}}),
    ("POST", P, {"json": {"content": "x" * 5000}}),
    ("POST", P, {"json": {"rawInput": "x" * 2_000_000}}),
    ("POST", P, {"content": (b"x" * 4096 for _ in range(600)), "headers": JSON}),  # chunked, 2.4 MB
    # paging
    ("GET", P + "?limit=0", {}),
    ("GET", P + "?limit=-1", {}),
    ("GET", P + "?limit=1001", {}),
    ("GET", P + "?limit=abc", {}),
    ("GET", P + "?limit=1.5", {}),
    ("GET", P + "?limit=" + "9" * 40, {}),
    ("GET", P + "?offset=-5", {}),
    ("GET", P + "?offset=" + "9" * 40, {}),
    ("GET", P + "?offset=9223372036854775808", {}),
    ("GET", P + "?offset=9223372036854775807", {}),
    # search: FTS syntax and odd numbers in q/limit/minScore
    *[("GET", P + "/search", {"params": {"q": q}}) for q in (
        '"NEAR(', "a OR", "OR", "AND NOT", "*", "^", '"', "a:b", "NEAR(a b, 2)", "col:x", "(((", "-x",
        "'; DROP TABLE memories; --", "\x00", "é" * 3000, "a " * 5000, "")],
    ("GET", P + "/search", {}),
    ("GET", P + "/search?q=x&minScore=NaN", {}),
    ("GET", P + "/search?q=x&minScore=inf", {}),
    ("GET", P + "/search?q=x&minScore=-1", {}),
    ("GET", P + "/search?q=x&minScore=abc", {}),
    ("GET", P + "/search?q=x&limit=0", {}),
    ("GET", P + "/search?q=x&limit=" + "9" * 40, {}),
    # global
    ("GET", "/api/memory-bank?category=gossip", {}),
    ("GET", "/api/memory-bank?category=", {}),
    ("GET", "/api/memory-bank?q=%25", {}),
    ("GET", "/api/memory-bank?q=_", {}),
    ("GET", "/api/memory-bank?q=%00", {}),
    ("GET", "/api/memory-bank?limit=-1&offset=-1", {}),
    ("GET", "/api/memory-bank?offset=" + "9" * 40, {}),
    # automations
    ("GET", "/api/automations/%2e%2e/memory", {}),
    ("GET", "/api/automations/" + "a" * 500 + "/memory", {}),
    ("GET", "/api/automations/a%00b/memory", {}),
    ("GET", "/api/automations/%20/memory", {}),
    ("PUT", "/api/automations/auto-2/memory", {"content": b"\xff\xfe"}),
    ("PUT", "/api/automations/auto-2/memory", _body("{")),
    ("PUT", "/api/automations/auto-2/memory", _body("[1]")),
    ("PUT", "/api/automations/auto-2/memory", _body('{"memory": 5}')),
    ("PUT", "/api/automations/auto-2/memory", _body('{"memory": "x", "other": 1}')),
    ("PUT", "/api/automations/auto-2/memory", _body('{"memory": "\\ud800"}')),
    ("PUT", "/api/automations/auto-2/memory", {"content": "x" * 2_000_000}),
    ("PUT", "/api/automations/auto-2/memory", {"content": "x" * 100_000}),
    ("PUT", "/api/automations/..%2Fx/memory", {"content": "x"}),
    ("DELETE", "/api/automations/%2e%2e", {}),
    ("DELETE", "/api/automations/" + "a" * 500, {}),
    # methods and paths
    ("PATCH", P, {"json": {}}),
    ("PUT", P, {"json": {}}),
    ("OPTIONS", P, {}),
    ("HEAD", P, {}),
    ("GET", "/api/profiles//memories", {}),
    ("GET", "/api/profiles/p1/memories/", {}),
    ("GET", "/api/%ZZ", {}),
]
BATTERY += [("GET", f"/api/profiles/{p}/memories", {}) for p in BAD_PROFILES]
BATTERY += [("POST", f"/api/profiles/{p}/memories", {"json": {"content": "x"}}) for p in BAD_PROFILES]
BATTERY += [("GET", f"/api/profiles/{p}/memories/search?q=x", {}) for p in BAD_PROFILES]
BATTERY += [(m, f"{P}/{i}", {}) for i in BAD_IDS for m in ("GET", "DELETE")]


@pytest.mark.parametrize(("method", "path", "kwargs"), BATTERY, ids=[f"{m} {p[:60]}" for m, p, _ in BATTERY])
def test_malformed_requests_never_get_a_5xx(live: str, method: str, path: str, kwargs: dict[str, Any]) -> None:
    with http_client(base_url=live, timeout=30) as c:
        r = c.request(method, path, **kwargs)
    assert r.status_code < 500, r.text
    if r.status_code >= 400 and method != "HEAD":
        body = r.json()
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
        assert body["error"]["message"] and "\n" not in body["error"]["message"]


def test_the_battery_changed_nothing_it_should_not(tmp_path: Path) -> None:
    # Its own server: the module's is shared with schemathesis (whose valid cases do save), and
    # tests may run in any order and on any worker.
    for live in _serve_seeded(tmp_path / "battery.db"):
        with http_client(base_url=live, timeout=30) as c:
            for method, path, kwargs in BATTERY:
                c.request(method, path, **kwargs)
            # The two seeded memories, plus the battery's only valid save (JSON sent with a charset
            # parameter): every malformed or oversize request was refused without writing.
            assert c.get("/api/memory-bank/stats").json()["perProfile"] == {"p1": 3}
            assert c.get("/api/automations/auto-1/memory").json() == {"memory": "last run stopped at page 3"}


# --- schemathesis -----------------------------------------------------------------------------------


# Schemathesis computes each operation's coverage cases (its boundary and type-confusion
# examples, run as Hypothesis's explicit examples) while collecting: ~1.5 s of CPU in every xdist
# worker, though one of them runs these tests. They are computed when the test is set up instead,
# by the same function with the same arguments, on the same test object: Hypothesis reads a test's
# explicit examples when it runs (``_coverage_cases_when_run`` below), so every case still runs.
_ADD_COVERAGE = _builder.add_coverage


def _add_coverage_later(test: Any, *args: Any, **kwargs: Any) -> Any:
    test._memlocal_add_coverage = lambda: _ADD_COVERAGE(test, *args, **kwargs)
    return test


_builder.add_coverage = _add_coverage_later


@pytest.fixture(autouse=True)
def _coverage_cases_when_run(request: pytest.FixtureRequest) -> None:
    """Attach the deferred coverage cases of this schemathesis test (no-op for the others)."""
    attach = getattr(request.node.obj, "_memlocal_add_coverage", None)
    if attach is not None:
        del request.node.obj._memlocal_add_coverage
        assert attach() is request.node.obj  # the examples were added to the test that runs


# The app's own schema (it does not depend on the bank), loaded at collection time; the cases
# are sent over real HTTP to the live server. (schemathesis' lazy ``from_fixture`` loader does
# not work with pytest 9.2, hence ``from_dict``.)
schema = schemathesis.openapi.from_dict(create_app(BankNotWiredError("schema only")).openapi())
schema.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE],
    max_examples=EXAMPLES_PER_OPERATION,
    database="none",
)


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck),
          database=None)
def test_schemathesis_finds_no_5xx_and_no_schema_violation(case: Any, live: str) -> None:
    case.call_and_validate(
        base_url=live,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
        timeout=30,
    )

