"""The memory model: JSON round trips, timestamps from other implementations, SQLite identity."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlocal.errors import ValidationError
from memlocal.model import (
    CATEGORIES,
    Memory,
    compute_staleness,
    format_time,
    new_id,
    parse_time,
)
from memlocal.store import Store

UTC = timezone.utc

times = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300
).filter(lambda s: s.strip() != "")
extra_values = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=20))

memories = st.builds(
    Memory,
    id=st.text(alphabet="0123456789abcdef", min_size=8, max_size=8).map(lambda h: "mem-" + h),
    profile_name=st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,20}", fullmatch=True),
    raw_input=text,
    processed_content=text,
    summary=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=50),
    category=st.sampled_from(CATEGORIES),
    source=st.sampled_from(["explicit", "inferred"]),
    confidence=st.floats(0, 1, allow_nan=False),
    created_at=times,
    last_accessed_at=st.one_of(st.none(), times),
    access_count=st.integers(0, 10**9),
    staleness_score=st.floats(0, 1, allow_nan=False),
    is_active=st.booleans(),
    version=st.integers(1, 5),
    extra=st.dictionaries(st.from_regex(r"x[A-Za-z]{1,8}", fullmatch=True), extra_values, max_size=3),
)


@given(memories)
def test_json_round_trip_is_identity(memory: Memory) -> None:
    wire = json.dumps(memory.to_dict())
    assert Memory.from_dict(json.loads(wire)) == memory


# No deadline: each example creates a database (every migration) and fsyncs a commit, which a
# loaded machine can stretch past hypothesis's default 200 ms.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(memory=memories)
def test_memory_json_sqlite_memory_is_identity(tmp_path: Path, memory: Memory) -> None:
    store = Store(tmp_path / "roundtrip.db")
    try:
        via_json = Memory.from_dict(json.loads(json.dumps(memory.to_dict())))
        store.upsert(via_json)
        assert store.get(memory.profile_name, memory.id) == memory
    finally:
        store.close()


def test_json_field_names_are_the_spec_camelcase() -> None:
    m = Memory(id="mem-0123abcd", profile_name="p", raw_input="r", processed_content="c", summary="s")
    assert list(m.to_dict()) == [
        "id", "profileName", "rawInput", "processedContent", "summary", "category", "source",
        "confidence", "createdAt", "lastAccessedAt", "accessCount", "stalenessScore", "isActive", "version",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-04T05:06:07Z", datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)),
        ("2026-03-04T05:06:07.123456789Z", datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)),
        ("2026-03-04T05:06:07.5+02:00", datetime(2026, 3, 4, 3, 6, 7, 500000, tzinfo=UTC)),
        ("2026-03-04T23:30:00-05:30", datetime(2026, 3, 5, 5, 0, 0, tzinfo=UTC)),
        ("2026-03-04t05:06:07z", datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)),
        ("0001-01-01T00:00:00Z", None),
        ("0001-01-01T00:00:00+01:00", None),
    ],
)
def test_go_style_timestamps(text: str, expected: datetime | None) -> None:
    assert parse_time(text) == expected


@given(
    instant=st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)),
    offset_minutes=st.integers(-14 * 60, 14 * 60),
    nanos=st.integers(0, 999),
)
def test_go_timestamps_parse_to_the_right_instant(instant: datetime, offset_minutes: int, nanos: int) -> None:
    tz = timezone(timedelta(minutes=offset_minutes))
    local = instant.astimezone(tz)
    off = local.strftime("%z")
    go_text = local.strftime("%Y-%m-%dT%H:%M:%S") + f".{local.microsecond:06d}{nanos:03d}" + f"{off[:3]}:{off[3:]}"
    assert parse_time(go_text) == instant


def test_times_are_written_in_utc_with_z() -> None:
    dt = datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(dt) == "2026-01-02T01:04:05.12Z"
    assert format_time(None) == "0001-01-01T00:00:00Z"


@pytest.mark.parametrize("bad", ["2026-03-04", "yesterday", "2026-13-01T00:00:00Z", 1234, "2026-03-04T05:06:07"])
def test_bad_timestamps_are_rejected(bad: object) -> None:
    with pytest.raises(ValidationError):
        parse_time(bad)


def test_go_object_with_unknown_fields_is_read_and_kept() -> None:
    go = {
        "id": "mem-deadbeef", "profileName": "researcher", "rawInput": "likes tea",
        "processedContent": "The user likes tea.", "summary": "likes tea", "category": "preference",
        "source": "explicit", "confidence": 0.9, "createdAt": "2026-05-01T10:00:00.123456789Z",
        "lastAccessedAt": "0001-01-01T00:00:00Z", "accessCount": 0, "stalenessScore": 0,
        "isActive": True, "version": 1, "tenantHint": {"a": 1},
    }
    m = Memory.from_dict(go)
    assert m.last_accessed_at is None
    assert m.extra == {"tenantHint": {"a": 1}}
    assert m.to_dict()["tenantHint"] == {"a": 1}


def test_ids_are_mem_plus_8_hex() -> None:
    ids = {new_id() for _ in range(1000)}
    assert all(len(i) == 12 and i.startswith("mem-") and int(i[4:], 16) >= 0 for i in ids)
    assert len(ids) > 990


def test_staleness_formula_and_clamp() -> None:
    now = datetime(2026, 1, 31, tzinfo=UTC)
    created = datetime(2026, 1, 1, tzinfo=UTC)  # 30 days
    # (30*0.05 - log10(1)*0.2 + 0*0.3) * 0.5 = 0.75
    assert compute_staleness(category="preference", confidence=1.0, access_count=0,
                             created_at=created, last_accessed_at=None, now=now) == pytest.approx(0.75)
    # (10*0.05 - log10(10)*0.2 + 0.5*0.3) * 1.0 = 0.5 - 0.2 + 0.15 = 0.45, from lastAccessedAt
    assert compute_staleness(category="general", confidence=0.5, access_count=9, created_at=created,
                             last_accessed_at=datetime(2026, 1, 21, tzinfo=UTC), now=now) == pytest.approx(0.45)
    assert compute_staleness(category="context", confidence=0.0, access_count=0, created_at=created,
                             last_accessed_at=None, now=now) == 1.0
    assert compute_staleness(category="fact", confidence=1.0, access_count=1000, created_at=now,
                             last_accessed_at=None, now=now) == 0.0
