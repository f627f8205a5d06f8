"""A snapshot's entries made ready to insert, here and in the helper process (memlocal_sync.prepared):
the same memories, hashes and store rows either way; a body that is not a snapshot is refused
either way; a cancelled helper leaves no process behind."""

from __future__ import annotations

import hashlib
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from memlocal.model import Memory
from memlocal.store import Store
from memlocal.store.replica import StoreReplica
from memlocal_sync import prepared, snapshot
from memlocal_sync.objects import BadObject, content_hash, encode

P = "prof"


def memories(n: int) -> list[Memory]:
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    return [Memory(id=f"mem-{i:08x}", profile_name=P, raw_input=f"likes tea number {i}",
                   processed_content=f"likes tea number {i}", summary=f"tea {i}", created_at=at,
                   extra={"tags": ["é", i]} if i % 3 == 0 else {}) for i in range(n)]


def in_helper(data: bytes, profile: str, max_object_bytes: int, cancelled: threading.Event | None = None,
              **kwargs: Any) -> dict[str, prepared.Prepared] | None:
    """Every entry the helper prepares of ``data``, in one dict (``None`` when ``cancelled``):
    ``prepared.stream_in_helper`` with its chunks gathered, as the pass's feed gathers them."""
    ready: dict[str, prepared.Prepared] = {}

    def take(frame: bytes, taken: Callable[[], None]) -> None:
        taken()
        ready.update(prepared.entries_of(frame))

    done = prepared.stream_in_helper(data, profile, max_object_bytes, take,
                                     cancelled.is_set if cancelled is not None else (lambda: False), **kwargs)
    return ready if done else None


def rows_added(ready: dict[str, prepared.Prepared], replica: StoreReplica) -> dict[str, prepared.Prepared]:
    """``ready`` with the store's rows and signatures made here where the helper made none (as the
    pass makes them, ``prepared.row_of``)."""
    out = {}
    for key, p in ready.items():
        if p.memory is not None and p.row is None:
            row, sig = prepared.row_of(p.memory, replica.prepare, replica.signature)
            p = prepared.Prepared(p.etag, p.body, p.memory, p.reason, p.hash, row, sig, p.md5)
        out[key] = p
    return out


def snapshot_of(ms: list[Memory], extra: list[tuple[str, str, bytes]] = ()) -> bytes:  # type: ignore[assignment]
    entries = [(f"memory/{P}/{m.id}.json", f'"{hashlib.md5(encode(m)).hexdigest()}"', encode(m)) for m in ms]
    return snapshot.build(P, [*entries, *extra])[1]


def test_the_helper_prepares_what_this_process_prepares(tmp_path: Path) -> None:
    ms = memories(40)
    bad = (f"memory/{P}/mem-ffffffff.json", '"x"', b'{"id": "mem-ffffffff"')  # not JSON: a reason, no row
    data = snapshot_of(ms, [bad])
    store = Store(tmp_path / "m.db")
    try:
        replica = StoreReplica(store)
        here = prepared.prepare_entries(snapshot.read(data, P), P, 1 << 20, replica.prepare, replica.signature)
        helped = in_helper(data, P, 1 << 20)  # decoded and hashed there, without a store
        assert helped is not None and all(p.row is None and p.signature is None for p in helped.values())
        there = rows_added(helped, replica)  # the rows added here
    finally:
        store.close()
    assert here is not None and there == here
    assert there[bad[0]].memory is None and "not valid JSON" in there[bad[0]].reason
    for m in ms:
        entry = there[f"memory/{P}/{m.id}.json"]
        assert entry.memory == m and entry.hash == content_hash(m) and entry.body == encode(m)
        assert entry.signature is not None and entry.row is not None


def test_the_helper_refuses_what_is_not_a_snapshot_of_the_profile() -> None:
    with pytest.raises(BadObject, match="not a snapshot"):
        in_helper(b"not gzip at all", P, 1 << 20)
    with pytest.raises(BadObject, match="this profile"):
        in_helper(snapshot_of(memories(2)), "other", 1 << 20)


def test_a_cancelled_pass_prepares_nothing() -> None:
    cancelled = threading.Event()
    cancelled.set()
    assert in_helper(snapshot_of(memories(5)), P, 1 << 20, cancelled) is None
    assert prepared.prepare_entries({}, P, 1 << 20, lambda m: (), lambda m: "", cancelled.is_set) is None


def test_the_helper_hands_its_entries_over_chunk_by_chunk() -> None:
    """What the pass inserts while the helper prepares the rest: every entry once, in chunks."""
    data = snapshot_of(memories(40))
    frames: list[bytes] = []
    assert prepared.stream_in_helper(data, P, 1 << 20, lambda frame, taken: frames.append(frame), lambda: False,
                                     chunk=16)
    chunks = [prepared.entries_of(frame) for frame in frames]
    assert [len(c) for c in chunks] == [16, 16, 8]
    merged = {key: p for c in chunks for key, p in c.items()}
    assert merged == prepared.prepare_entries(snapshot.read(data, P), P, 1 << 20, None, None)
    assert all(p.md5 == hashlib.md5(p.body).hexdigest() for p in merged.values())


def test_the_helper_makes_the_stores_rows_with_the_function_the_port_hands_it(tmp_path: Path) -> None:
    """``Replica.row_function``, pickled by reference to the helper: its rows and signatures are
    this process's, for the chunks it makes them for (from the second on, when the pass is
    behind: always, with a lag of 0); the rest get them here, as before."""
    data = snapshot_of(memories(40))
    store = Store(tmp_path / "m.db")
    try:
        replica = StoreReplica(store)
        here = prepared.prepare_entries(snapshot.read(data, P), P, 1 << 20, replica.prepare, replica.signature)
        helped = in_helper(data, P, 1 << 20, rows=replica.row_function(), chunk=8, lag=0)
        assert helped is not None and here is not None
        with_rows = [key for key, p in helped.items() if p.row is not None]
        assert len(with_rows) == 32 and all(helped[k] == here[k] for k in with_rows)  # all but the first chunk
        assert rows_added(helped, replica) == here
    finally:
        store.close()


def test_a_row_function_that_cannot_cross_starts_no_helper() -> None:
    """``Replica.row_function`` must be a module-level function (it is pickled by reference); a
    replica that hands out another callable gets an error before any helper is started, never
    a helper left waiting for a request that will not come."""
    import os
    import pickle

    def helpers() -> set[int]:
        found = set()
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                    line = cmd.read()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == os.getpid() and b"memlocal_sync.prepared" in line:
                found.add(int(pid))
        return found

    before = helpers()
    with pytest.raises((pickle.PicklingError, AttributeError)):  # "Can't pickle local object"
        prepared.stream_in_helper(snapshot_of(memories(5)), P, 1 << 20, lambda frame, taken: None, lambda: False,
                                  rows=lambda m: ((), ""))
    assert helpers() == before
