"""The automation notes' change log (owned by ``memlocal.services.automation``): ``automation_outbox``.
(``automation_notes`` itself came with the first step of the ``memories`` set.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..migrations import MigrationSet

if TYPE_CHECKING:
    import sqlite_utils


def _migration_8(db: sqlite_utils.Database) -> None:
    """The change log of automation notes: ``automation_outbox``, one row per note written
    (``put``) or cleared (``delete``) here and not yet known to be in the bucket, recorded by the
    store inside the transaction of the change (as ``sync_outbox`` for memories). Every note
    that exists already is queued, so a host upgraded with notes pushes them (docs/sync.md).
    """
    c = db.conn
    c.execute("CREATE TABLE automation_outbox (automation_id TEXT PRIMARY KEY, op TEXT NOT NULL,"
              " queued_us INTEGER NOT NULL)")
    c.execute("INSERT INTO automation_outbox (automation_id, op, queued_us)"
              " SELECT automation_id, 'put', updated_us FROM automation_notes")


# Each step is named by its number in the single chain that came before named sets.
AUTOMATION = MigrationSet("automation", {1: _migration_8}, legacy={1: 8})
