"""The library's named migration sets, one module per owner, run in this order on every open.

To add a table: add a step to its owner's set (the next number), or a new module here with a new
:class:`~memlocal.store.migrations.MigrationSet` appended to ``CORE_SETS`` (docs/storage.md,
"Migrations"). The sync package declares its own set (``memlocal_sync.tables.SYNC_TABLES``) and runs
it through the replication port.
"""

from __future__ import annotations

from ..migrations import MigrationSet
from .audit import AUDIT
from .automation import AUTOMATION
from .lineage import LINEAGE
from .memories import MEMORIES
from .recall import RECALL
from .secrets import SECRETS
from .semantic import SEMANTIC

__all__ = ["AUDIT", "CORE_SETS", "LEGACY_CHAIN", "SEMANTIC"]

# Run in this order: later sets build on the ``memories`` table.
CORE_SETS: tuple[MigrationSet, ...] = (MEMORIES, RECALL, SEMANTIC, AUDIT, AUTOMATION, LINEAGE, SECRETS)

# The old single chain (``PRAGMA user_version`` 1 to 9), step by step: how a database of any old
# version was built (tests build one with these).
LEGACY_CHAIN = {old: s.steps[step] for s in CORE_SETS for step, old in s.legacy.items()}
