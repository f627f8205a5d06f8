"""Tolerant reads of other hosts' objects, and hostile objects contained.

An object another writer put in the bucket is read whenever it can be made valid (long summary,
category case, confidence out of range, unknown fields kept; numbers clamped to their domains)
and is not rewritten unless the memory changes. Everything else is skipped and reported for that
object alone: the pass goes on, records itself and exits 0; REST reads keep answering 200.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable
import pytest
from api_live import LiveServer
from click.testing import CliRunner
from support import http_client

from memlocal.faces.api import create_app
from memlocal.faces.cli import main
from memlocal.model import utcnow
from s3server import S3, Host

# The engine's decisions, on the in-process bucket (tests/s3server.py, "memory").
pytestmark = pytest.mark.s3_servers("memory")

P = "tol"
COUNT_MAX = 2**53

VALID = {
    "id": "mem-00000001",
    "profileName": P,
    "rawInput": "The user prefers tea over coffee",
    "processedContent": "Prefers tea over coffee",
    "summary": "Prefers tea",
    "category": "preference",
    "source": "explicit",
    "confidence": 0.9,
    "createdAt": "2026-01-02T03:04:05Z",
    "lastAccessedAt": "0001-01-01T00:00:00Z",
    "accessCount": 0,
    "stalenessScore": 0,
    "isActive": True,
    "version": 1,
}


def obj(mid: str, **changes: Any) -> dict[str, Any]:
    return {**VALID, "id": mid, **changes}


def key(mid: str) -> str:
    return f"memory/{P}/{mid}.json"


def strict_json(text: str) -> Any:
    """``json.loads`` that refuses NaN and Infinity (which are not JSON)."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in JSON output")
    return json.loads(text, parse_constant=refuse)


def cli(db: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["--db", str(db), *args])


def rest_reads_answer_200(host: Host, *ids: str) -> None:
    with LiveServer(create_app(host.bank)) as server, http_client(base_url=server.url, timeout=30) as c:
        for path in (f"/api/profiles/{P}/memories", "/api/memory-bank", "/api/memory-bank/stats", "/api/profiles",
                     *(f"/api/profiles/{P}/memories/{i}" for i in ids)):
            r = c.get(path)
            assert r.status_code == 200, (path, r.text)
            strict_json(r.text)


def test_unusual_objects_are_read_made_valid_and_not_rewritten(hosts: Callable[..., Host], s3: S3) -> None:
    long_summary = "A summary written by a Go host's LLM path, well over fifty characters long"
    # Two distinct texts: the same text in two categories is one memory, and the hosts would
    # converge them (a rewrite this test is not about).
    etags = {
        "mem-0000000a": s3.put_json(key("mem-0000000a"), obj(
            "mem-0000000a", summary=long_summary, category="Preference", confidence=1.7,
            tags=["ui", "editor"], embedding={"model": "none", "dims": 0})),
        "mem-0000000b": s3.put_json(key("mem-0000000b"), obj("mem-0000000b", category=" FACT ", confidence=-0.25,
                                                            rawInput="The staging cluster runs in Frankfurt",
                                                            processedContent="Staging runs in Frankfurt")),
    }
    a = hosts("a")
    report = a.sync()
    assert report.ok, report.reason
    assert report.counts["pulled"] == 2 and not report.skipped
    first = a.bank.get(P, "mem-0000000a")
    assert first.summary == long_summary
    assert first.category == "preference" and first.confidence == 1.0
    assert dict(first.extra) == {"tags": ["ui", "editor"], "embedding": {"model": "none", "dims": 0}}
    second = a.bank.get(P, "mem-0000000b")
    assert second.category == "fact" and second.confidence == 0.0
    # Not rewritten: the bucket keeps the other writer's bytes until the memory changes.
    for _ in range(2):
        again = a.sync()
        assert again.summary().startswith("ok: nothing to do"), again.summary()
    for mid, etag in etags.items():
        assert s3.client.head_object(Bucket=s3.bucket, Key=key(mid))["ETag"] == etag
    # A change (two recalls) is merged; the unknown fields and the long summary survive it.
    a.bank.store.mark_accessed(P, ["mem-0000000a"], utcnow())
    a.bank.store.mark_accessed(P, ["mem-0000000a"], utcnow())
    assert a.sync().counts["merged"] == 1
    written = s3.get_json(key("mem-0000000a"))
    assert written["accessCount"] == 2 and written["summary"] == long_summary
    assert written["tags"] == ["ui", "editor"] and written["embedding"] == {"model": "none", "dims": 0}
    assert written["category"] == "preference" and written["confidence"] == 1.0
    rest_reads_answer_200(a, "mem-0000000a", "mem-0000000b")


def test_numbers_are_clamped_to_their_domains(hosts: Callable[..., Host], s3: S3) -> None:
    bodies = {
        "mem-000000c1": json.dumps(obj("mem-000000c1", accessCount=18446744073709551616)),
        "mem-000000c2": json.dumps(obj("mem-000000c2", accessCount=2**63 - 1)),
        "mem-000000c3": json.dumps(obj("mem-000000c3", accessCount=-3, stalenessScore=-5)),
        # 1e999 is valid JSON syntax that no double can hold.
        "mem-000000c4": json.dumps(obj("mem-000000c4", stalenessScore="@INF@", confidence="@INF@"))
        .replace('"@INF@"', "1e999"),
    }
    for mid, body in bodies.items():
        s3.put_raw(key(mid), body.encode())
    a = hosts("a")
    report = a.sync()
    assert report.ok, report.reason
    assert report.counts["pulled"] == 4 and not report.skipped
    got = {m.id: m for m in a.bank.store.iter_profile(P)}
    assert got["mem-000000c1"].access_count == COUNT_MAX
    assert got["mem-000000c2"].access_count == COUNT_MAX
    assert got["mem-000000c3"].access_count == 0 and got["mem-000000c3"].staleness_score == 0.0
    assert got["mem-000000c4"].staleness_score == 1.0 and got["mem-000000c4"].confidence == 1.0
    # Two recalls of a clamped count stay an exact integer here; what goes back to the bucket
    # stays in the documented range (nothing pushed back exceeds it: docs/sync.md, "Tolerant reads").
    a.bank.store.mark_accessed(P, ["mem-000000c2"], utcnow())
    a.bank.store.mark_accessed(P, ["mem-000000c2"], utcnow())
    assert a.bank.get(P, "mem-000000c2").access_count == COUNT_MAX + 2
    assert a.sync().ok
    assert s3.get_json(key("mem-000000c2"))["accessCount"] == COUNT_MAX
    res = cli(a.path, "list", "-p", P, "--json")
    assert res.exit_code == 0, res.output
    listed = strict_json(res.stdout)
    assert isinstance(listed, (list, dict))
    rest_reads_answer_200(a, *bodies)


def _deep(n: int) -> str:
    return "[" * n + "]" * n


HOSTILE: dict[str, tuple[bytes, str]] = {
    # name: (body, a word the skip reason contains)
    "version-2^70": (json.dumps(obj("mem-000000d1", version=2**70)).encode(), "version"),
    "lone-surrogate-summary": (json.dumps(obj("mem-000000d1", summary="\ud800")).encode(), "surrogate"),
    "lone-surrogate-unknown-key": (json.dumps(obj("mem-000000d1", **{"x\udfff": 1})).encode(), "surrogate"),
    "lone-surrogate-raw-input": (json.dumps(obj("mem-000000d1", rawInput="ok \udbff then")).encode(), "surrogate"),
    "not-json": (b'{"id": "mem-000000d1", ', "JSON"),
    "nan": (json.dumps(obj("mem-000000d1", confidence=float("nan"))).encode(), "JSON"),
    "invalid-utf8": (b'{"id": "mem-000000d1", "rawInput": "\xc3\x28"}', "UTF-8"),
    "id-key-mismatch": (json.dumps(obj("mem-000000d9")).encode(), "mem-000000d9"),
    "not-an-object": (b"[1, 2, 3]", "object"),
    "deep-nesting": (json.dumps(obj("mem-000000d1")).encode()[:-1] + b', "deep": ' + _deep(5_000).encode() + b"}",
                     "JSON"),
    "huge-number-literal": (json.dumps(obj("mem-000000d1")).replace('"accessCount": 0', '"accessCount": '
                                                                      + "9" * 5000).encode(), "JSON"),
    "infinity-in-unknown-field": (json.dumps(obj("mem-000000d1", score="@INF@")).replace('"@INF@"', "-1e999")
                                  .encode(), "score"),
    "bad-timestamp": (json.dumps(obj("mem-000000d1", createdAt="yesterday")).encode(), "timestamp"),
    "count-is-a-string": (json.dumps(obj("mem-000000d1", accessCount="many")).encode(), "accessCount"),
    "oversize": (json.dumps(obj("mem-000000d1", padding="x" * 100_000)).encode(), "cap"),
}


def test_hostile_objects_beside_a_valid_one(hosts: Callable[..., Host], s3: S3,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every hostile body of ``HOSTILE`` in one bucket, each under a key of its own, beside a
    valid object: each is skipped alone with its reason, the valid one is pulled (one host and
    one REST server for them all; each object is decoded on its own, so they cannot mask each
    other)."""
    monkeypatch.setenv("MEMLOCAL_SYNC_MAX_OBJECT_BYTES", str(64 * 1024))
    s3.put_json(key("mem-00000001"), VALID)
    words = {}
    for i, name in enumerate(sorted(HOSTILE)):
        body, word = HOSTILE[name]
        mid = f"mem-0000d1{i:02x}"  # the body's own id is this key's (the id-key mismatch keeps its other id)
        bad_key = key(mid)
        s3.put_raw(bad_key, body.replace(b"mem-000000d1", mid.encode()))
        words[bad_key] = (name, word)
    a = hosts("a")
    res = cli(a.path, "sync", "run")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    for bad_key, (name, word) in words.items():
        said = [line for line in lines if f"skipped {bad_key}" in line]
        assert len(said) == 1 and word in said[0].split(f"skipped {bad_key}", 1)[1], (name, res.output)
    assert a.ids(P) == {"mem-00000001"}
    st = json.loads(cli(a.path, "sync", "status", "--json").stdout)
    assert st["lastPass"]["result"] == "ok"
    assert [s["key"] for s in st["skipped"]] == sorted(words)
    # The next pass does not fetch them again, and still exits 0 listing them.
    res = cli(a.path, "sync", "run")
    assert res.exit_code == 0 and all(f"skipped {k}" in res.output for k in words), res.output
    rest_reads_answer_200(a, "mem-00000001")


# --- the decoder, fed generated JSON (hypothesis) ---------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from memlocal.model import COUNT_MAX as MODEL_COUNT_MAX  # noqa: E402
from memlocal.store import Store  # noqa: E402
from memlocal_sync.objects import BadObject, decode, encode  # noqa: E402

# Any JSON value: every type, huge and negative numbers, any Unicode (lone surrogates included).
_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-2**80, max_value=2**80)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(st.characters(codec=None), max_size=80))
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)
_fields = st.sampled_from(sorted(VALID) + ["tags", "\ud800", "supersedes"])


@st.composite
def memory_like(draw: Any) -> dict[str, Any]:
    """A valid object with a few fields replaced by arbitrary JSON (reaches past the first check)."""
    out = obj("mem-00000001")
    for field in draw(st.lists(_fields, max_size=4)):
        out[field] = draw(_json)
    if draw(st.booleans()):
        for field in draw(st.lists(_fields, max_size=3)):
            out.pop(field, None)
    return out


def _encode_any(value: Any, infinities: bool) -> bytes:
    text = json.dumps(value, ensure_ascii=True)
    if infinities:  # numbers no double holds, as another writer may put them in the body
        text = text.replace("0.5", "1e999").replace("1.5", "-1e999")
    return text.encode("utf-8", "surrogatepass")


# 200 examples: generating the nested JSON is most of this test's cost (the decoder is cheap), and
# the hostile bodies above pin the known edge cases one by one.
@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=memory_like() | _json, infinities=st.booleans(), raw=st.binary(max_size=64))
def test_the_decoder_returns_a_valid_memory_or_a_skip_reason(value: Any, infinities: bool, raw: bytes,
                                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    for body in (_encode_any(value, infinities), raw):
        try:
            memory = decode(body, P, "mem-00000001")
        except BadObject as exc:
            assert exc.reason and "\n" not in exc.reason
            continue
        # Valid: strict JSON when written back, numbers in their domains, storable.
        written = strict_json(encode(memory).decode("utf-8"))
        assert written["id"] == "mem-00000001" and written["profileName"] == P
        assert 0 <= memory.access_count <= MODEL_COUNT_MAX and 0 <= memory.version <= MODEL_COUNT_MAX
        assert 0.0 <= memory.confidence <= 1.0 and 0.0 <= memory.staleness_score <= 1.0
        assert decode(encode(memory), P, "mem-00000001") == memory   # reads the same again
        _store(tmp_path_factory).upsert(memory)


_STORES: dict[str, Store] = {}


def _store(factory: pytest.TempPathFactory) -> Store:
    if "s" not in _STORES:
        _STORES["s"] = Store(factory.mktemp("decoder") / "m.db")
        # The property is that a decoded memory is storable (the schema's checks), not that the
        # write survives a power cut: no fsync per example (~0.5 s per hundred on a busy disk).
        _STORES["s"].conn.execute("PRAGMA synchronous = OFF")
    return _STORES["s"]


def test_an_import_reports_hostile_lines_and_imports_the_rest(tmp_path: Path) -> None:
    lines = [
        json.dumps(obj("mem-000000e1")),
        json.dumps(obj("mem-000000e2", accessCount=18446744073709551616)),
        json.dumps(obj("mem-000000e3", version=2**70)),
        json.dumps(obj("mem-000000e4", summary="\ud800")),
        json.dumps(obj("mem-000000e5", stalenessScore="@INF@")).replace('"@INF@"', "1e999"),
        json.dumps(obj("mem-000000e6", **{"k\udc00": "v"})),
        "[" * 5000 + "]" * 5000,
        json.dumps(obj("mem-000000e7", stalenessScore=-5)),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    res = cli(tmp_path / "x.db", "import", str(path))
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "imported 2, unchanged 0, rejected 6" in res.stdout
    reported = {int(line.split(":")[0].split()[1]): line for line in res.stderr.splitlines() if line.startswith("line")}
    assert sorted(reported) == [2, 3, 4, 5, 6, 7], res.stderr
    assert "accessCount" in reported[2] and "version" in reported[3] and "surrogate" in reported[4]
    assert "stalenessScore" in reported[5] and "surrogate" in reported[6]
    listed = cli(tmp_path / "x.db", "list", "-p", P, "--json")
    assert listed.exit_code == 0
    strict_json(listed.stdout)
