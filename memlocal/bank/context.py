"""The injection path's parts the bank wires together: the memory block rendered for a run (as
the faces show it), the values a superseding memory replaced, and the audit trail of the blocks
rendered (:mod:`memlocal.services.audit`: each run's block recorded without waiting, its query hashed with
the host's key). :meth:`memlocal.MemoryBank.inject` and ``build_context_block`` run them.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from ..services.shown import shown_block

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from ..services.audit import Injection
    from ..config import Config, InjectConfig
    from ..services.injection import RenderedBlock
    from ..model import Memory
    from ..recall import RecallIndex
    from ..relevance.scoring import Ranking
    from ..store import Store
    from ..store.access import AccessMarker

log = logging.getLogger("memlocal")


def render(index: "RecallIndex", store: "Store", profile: str, query: str, *, ranking: "Ranking",
           now: "datetime", settings: "InjectConfig", similarity: "Mapping[str, float] | None",
           trimmed: bool) -> "RenderedBlock":
    """The block (:func:`memlocal.services.injection.render_block`), its memories as the faces show
    them; ``trimmed=False`` (a run's block): the candidates the budget left out are not
    listed (nothing reads them)."""
    from ..services.injection import render_block

    block = render_block(index, profile, query, ranking=ranking, now=now, settings=settings, similarity=similarity,
                         trimmed=trimmed, replaced=functools.partial(replaced_values, store))
    return shown_block(block)


def replaced_values(store: "Store", memory: "Memory") -> frozenset[str]:
    """The values the memory ``memory`` superseded stated and ``memory`` no longer does
    (:func:`memlocal.hygiene.updates.replaced_values`; none when that memory is gone): the block
    dates the lines that hold one."""
    from ..hygiene.updates import replaced_values as replaced

    old = store.find(memory.supersedes) if memory.supersedes else None
    if old is None or old.profile_name != memory.profile_name:
        return frozenset()
    return replaced(old.processed_content, memory.processed_content)


class AuditTrail:
    """The audit trail of one bank's rendered blocks (``audit.*``): the host's key read on first
    use, each row queued on the bank's background writer (never on the run's path)."""

    def __init__(self, store: "Store", config: "Config") -> None:
        self.store = store
        self.config = config
        self._key: bytes | None = None  # the host's audit key (memlocal.services.audit), read on first use

    @property
    def enabled(self) -> bool:
        return self.config.audit.enabled

    def record(self, background: "AccessMarker", profile: str, query: str, block: "RenderedBlock",
               now: "datetime") -> None:
        """Queue the row of ``block``, rendered for ``query`` at ``now``."""
        from ..services.audit import InjectionRecord, record

        row = InjectionRecord(now, profile, self.query_hash(query), len(block.text),
                              tuple(s.memory.id for s in block.core), tuple(s.memory.id for s in block.relevant))
        background.submit_write(
            functools.partial(record, rec=row, max_rows=self.config.get_int("audit.max_rows"),
                              retention_days=self.config.get_float("audit.retention_days")),
            f"the injection audit row of profile {profile}")

    def query_hash(self, query: str) -> str:
        """The audit's keyed hash of ``query`` (``""`` when the host's key can neither be read nor
        made, say in a read-only folder: the row is still recorded, without a hash)."""
        from ..services.audit import host_key, query_hash

        if self._key is None:
            try:
                self._key = host_key(self.store.path)
            except OSError as exc:
                log.warning("audit rows go without a query hash: no audit key (%s)", exc)
                self._key = b""
        return query_hash(query, self._key) if self._key else ""

    def injections(self, profile: str, *, memory_id: str | None = None, limit: int = 20) -> "list[Injection]":
        """The rows of ``profile``'s runs, newest first (:func:`memlocal.services.audit.injections`)."""
        from ..services.audit import injections

        return injections(self.store, profile, memory_id=memory_id, limit=limit)
