"""Importing memories written elsewhere (``memlocal import``, :mod:`memlocal.bank.portability`): ids and
timestamps kept, never overwriting, batch by batch in durable transactions, queued for the
bucket like saves; with the semantic signal on, each batch's stored memories embedded once it is
durable.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

if TYPE_CHECKING:
    from ..model import Memory
    from ..recall.semantic import SemanticIndex
    from ..store import Store


def import_batches(store: "Store", semantic: "SemanticIndex | None", batches: "Iterable[Sequence[Memory]]",
                   copied: "dict[str, str] | None" = None) -> "Iterator[list[str]]":
    """:meth:`memlocal.MemoryBank.import_batches`: each batch's outcomes once it is durable (the
    next batch read while the one before it is written, ``Store.import_batches``)."""
    if semantic is None:
        return store.import_batches(batches, copied)
    return _embedded(store, semantic, batches, copied)


def _embedded(store: "Store", semantic: "SemanticIndex", batches: "Iterable[Sequence[Memory]]",
              copied: "dict[str, str] | None") -> "Iterator[list[str]]":
    """:func:`import_batches` that stores each imported memory's vector (the save path's,
    batched): an import's memories are found by similarity from the first query on."""
    handed: "deque[Sequence[Memory]]" = deque()

    def tracked() -> "Iterator[Sequence[Memory]]":
        for batch in batches:
            handed.append(batch)
            yield batch

    for outcomes in store.import_batches(tracked(), copied):
        batch = handed.popleft()
        semantic.embed_ids([m.id if o == "imported" else o[len("copied:"):]  # the store's outcomes
                            for m, o in zip(batch, outcomes) if o == "imported" or o.startswith("copied:")])
        yield outcomes
