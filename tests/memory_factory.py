"""Test helper: put memories with chosen timestamps and counters straight into a bank's store.

``MemoryBank.save`` stamps "now"; relevance tests need memories of known age and use, so they
write complete memory objects through the store (the same path the sync and imports use).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from memlocal import Memory, MemoryBank
from memlocal.model import default_summary, new_id, staleness_of

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)


def days_ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def put(bank: MemoryBank, profile: str, content: str, **fields: Any) -> Memory:
    """``memory(...)`` written into ``bank``'s store as it is."""
    m = memory(profile, content, **fields)
    bank.store.upsert(m)
    return m


def memory(
    profile: str,
    content: str,
    *,
    category: str = "general",
    confidence: float = 1.0,
    created: datetime | None = None,
    last: datetime | None = None,
    count: int = 0,
    active: bool = True,
    summary: str | None = None,
    memory_id: str | None = None,
) -> Memory:
    """A complete memory of ``profile`` with the given age, use and state (staleness as of ``NOW``)."""
    m = Memory(
        id=memory_id or new_id(),
        profile_name=profile,
        raw_input=content,
        processed_content=content,
        summary=default_summary(content) if summary is None else summary,
        category=category,
        confidence=confidence,
        created_at=created or NOW,
        last_accessed_at=last,
        access_count=count,
        is_active=active,
    )
    return m.with_changes(staleness_score=staleness_of(m, NOW))
