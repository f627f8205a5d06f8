"""Profile copy and rename (``memlocal profile copy|rename``, docs/cli.md): every memory of one
profile copied into an empty one under new ids in one durable transaction, the originals deleted
for a rename; the copies and deletions written through to the bucket like saves and deletions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from ..model import validate_profile
from ..services.redact import refuse_credential_name

if TYPE_CHECKING:
    from ..plugins import Replicator
    from ..store import Store


@dataclass(frozen=True, slots=True)
class ProfileCopy:
    """What a profile copy or rename did: each original id and its copy's new id (oldest first),
    and how many of the writes (the copies' saves, a rename's deletions) the bucket already has;
    the rest are in the change log for the next sync pass."""

    source: str
    target: str
    renamed: bool
    ids: tuple[tuple[str, str], ...]
    synced: int
    pending: int

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "renamed": self.renamed,
                "copied": len(self.ids), "ids": {old: new for old, new in self.ids},
                "synced": self.synced, "pending": self.pending}


def copy_profile(store: "Store", replicator: "Replicator | None", source: str, target: str, *,
                 move: bool) -> ProfileCopy:
    """Copy every memory of ``source`` into ``target``, a profile with no memories, under new
    ids, in one durable transaction. A copy keeps every field (text, category, confidence,
    times, access counts, active or superseded), its supersession links point at the other
    copies, and ``copiedFrom`` names its original. The copies are saves: written through to
    the bucket when one is configured, else queued for the next sync pass. ``NotFoundError`` when
    ``source`` has no memories, ``ValidationError`` when ``target`` has some or is ``source``.

    ``move`` (a rename): the originals are deleted in the same transaction. A memory's bucket key
    holds its profile (``memory/<profile>/<id>.json``) and an id is unique across profiles on
    every host, so a rename is new ids plus deletions, synced like any save and delete: the other
    hosts' next pass pulls the copies and deletes the originals (a rename of more than
    ``sync.mass_delete_min`` memories is held there by the mass-delete guard, as any mass
    deletion is, until ``memlocal sync run --force``)."""
    validate_profile(source)
    refuse_credential_name(validate_profile(target), "target profile name")
    if source == target:
        raise ValidationError(f"{'rename' if move else 'copy'} {source} to itself: give another target profile")
    pairs = store.copy_profile(source, target, move=move)
    synced = 0
    if replicator is not None:
        for _original, copy in pairs:
            synced += replicator.push_saved(copy)
        if move:
            for original, _copy in pairs:
                synced += replicator.push_deleted(original)
    writes = len(pairs) * (2 if move else 1)
    return ProfileCopy(source, target, move, tuple((o.id, c.id) for o, c in pairs), synced, writes - synced)
