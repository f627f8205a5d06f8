"""A snapshot's entries made ready to insert, here and in the helper process (memlocal_sync.prepared):
the same memories and hashes either way; a body that is not a snapshot is refused
either way; a cancelled helper leaves no process behind."""

from __future__ import annotations

import hashlib
import threading
from datetime import datetime, timezone
from typing import Any

import pytest

from memlocal.model import Memory
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

    def take(frame: bytes) -> None:
        ready.update(prepared.entries_of(frame))

    done = prepared.stream_in_helper(data, profile, max_object_bytes, take,
                                     cancelled.is_set if cancelled is not None else (lambda: False), **kwargs)
    return ready if done else None


def snapshot_of(ms: list[Memory], extra: list[tuple[str, str, bytes]] = ()) -> bytes:  # type: ignore[assignment]
    entries = [(f"memory/{P}/{m.id}.json", f'"{hashlib.md5(encode(m)).hexdigest()}"', encode(m)) for m in ms]
    return snapshot.build(P, [*entries, *extra])[1]


def test_the_helper_prepares_what_this_process_prepares() -> None:
    ms = memories(40)
    bad = (f"memory/{P}/mem-ffffffff.json", '"x"', b'{"id": "mem-ffffffff"')  # not JSON: a reason, no memory
    data = snapshot_of(ms, [bad])
    here = prepared.prepare_entries(snapshot.read(data, P), P, 1 << 20)
    there = in_helper(data, P, 1 << 20)  # decoded and hashed there
    assert here is not None and there == here
    assert there[bad[0]].memory is None and "not valid JSON" in there[bad[0]].reason
    for m in ms:
        entry = there[f"memory/{P}/{m.id}.json"]
        assert entry.memory == m and entry.hash == content_hash(m) and entry.body == encode(m)


def test_the_helper_refuses_what_is_not_a_snapshot_of_the_profile() -> None:
    with pytest.raises(BadObject, match="not a snapshot"):
        in_helper(b"not gzip at all", P, 1 << 20)
    with pytest.raises(BadObject, match="this profile"):
        in_helper(snapshot_of(memories(2)), "other", 1 << 20)


def test_a_cancelled_pass_prepares_nothing() -> None:
    cancelled = threading.Event()
    cancelled.set()
    assert in_helper(snapshot_of(memories(5)), P, 1 << 20, cancelled) is None
    assert prepared.prepare_entries({}, P, 1 << 20, cancelled.is_set) is None


def test_the_helper_hands_its_entries_over_chunk_by_chunk() -> None:
    """What the pass inserts while the helper prepares the rest: every entry once, in chunks."""
    data = snapshot_of(memories(40))
    frames: list[bytes] = []
    assert prepared.stream_in_helper(data, P, 1 << 20, frames.append, lambda: False, chunk=16)
    chunks = [prepared.entries_of(frame) for frame in frames]
    assert [len(c) for c in chunks] == [16, 16, 8]
    merged = {key: p for c in chunks for key, p in c.items()}
    assert merged == prepared.prepare_entries(snapshot.read(data, P), P, 1 << 20)
    assert all(p.md5 == hashlib.md5(p.body).hexdigest() for p in merged.values())


def test_the_helpers_frames_are_taken_whole_however_the_pipe_cuts_them() -> None:
    """The pass reads the helper's pipe a pipeful at a time (not a header, then a body): each
    read hands whole frames on, keeps a frame cut short for the next, and a frame never whole
    (the helper died while writing it) is never handed on."""
    bodies = [b"o" + bytes([i]) * (i * 37) for i in range(12)] + [b"", b"e"]
    stream = b"".join(len(b).to_bytes(8, "big") + b for b in bodies)
    for cut in (1, 5, 8, 9, 64, 1000, len(stream)):
        pending, got = bytearray(), []
        for at in range(0, len(stream), cut):
            pending += stream[at:at + cut]
            got += prepared.take_frames(pending)
        assert got == bodies and not pending
    pending = bytearray(stream[:-1])  # the last frame is one byte short
    assert prepared.take_frames(pending) == bodies[:-1] and pending == stream[-9:-1]


@pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_GETPIPE_SZ"), reason="Linux's pipe sizes")
def test_the_helpers_pipes_hold_a_few_chunks() -> None:
    """A default pipe (64 KiB) holds a fifth of a chunk's frame: the helper waited on it while the
    pass, busy in Python, took the GIL back read after read (2-3x its time in a hydrate)."""
    import fcntl
    import os

    with open("/proc/sys/fs/pipe-max-size") as f:
        if int(f.read()) < prepared._PIPE_BYTES:
            pytest.skip("this system's pipe-max-size is smaller")
    r, w = os.pipe()
    try:
        with os.fdopen(w, "wb") as pipe:
            prepared._widen_pipe(pipe)
            assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) >= prepared._PIPE_BYTES
    finally:
        os.close(r)
