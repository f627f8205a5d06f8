"""A snapshot's entries made ready to insert, in this process or in a helper process.

A fresh host pulls thousands of memories from a profile's snapshot (docs/sync.md, "Snapshots").
Each needs its body read through the tolerant decoder, its content hash and its store row (the
derived keys and recall features a save computes): about 0.12 ms of pure Python CPU a memory,
all of it under this process's GIL, while the same process lists the bucket and then inserts
the rows. A snapshot of at least ``HELPER_MIN_BYTES`` (about 2,500 memories) is therefore read by
a helper process (``python -m memlocal_sync.prepared``) on another core while this one lists the
bucket: it decodes and hashes; this process unpickles the result and adds the store's rows and
signatures through the port (``Replica.prepare``, ``Replica.signature``; the helper imports no
store, as nothing in the sync does). The helper runs only this module's code on
the snapshot's bytes, and its answer is a pickle from a process this one started with its own
interpreter (never anything read from the bucket). Any failure (one core, the interpreter cannot
be started, a timeout, the helper's error) falls back to doing it here; a body that is not a
snapshot is ``BadObject`` either way.

Nothing here trusts a snapshot: the engine uses an entry only where the listing shows its key
with an ETag equal to the MD5 of its body (docs/sync.md, "What a hint may do").
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Final

from memlocal.model import Memory

from . import snapshot
from .objects import BadObject, content_hash, decode, parse_key

# A snapshot this large (compressed) is read by a helper process when there is a second core:
# below it, starting an interpreter (~0.2 s of CPU, on the other core) saves too little.
HELPER_MIN_BYTES: Final = 256 << 10
# The helper's bound; past it, it is killed and the snapshot read here.
HELPER_TIMEOUT_S: Final = 300.0


@dataclass(frozen=True, slots=True)
class Prepared:
    """One snapshot entry made ready: its ETag and body, the memory (``None`` with the reason when
    the body is unusable), its content hash, its store row and content signature
    (``Replica.prepare``, ``Replica.signature``; ``None`` if that failed, left to the usual path)."""

    etag: str
    body: bytes
    memory: Memory | None
    reason: str
    hash: str
    row: tuple[Any, ...] | None
    signature: str | None = None


def prepare_entries(entries: dict[str, tuple[str, bytes]], profile: str, max_object_bytes: int,
                    prepare: Callable[[Memory], tuple[Any, ...]] | None, signature: Callable[[Memory], str] | None,
                    cancelled: Callable[[], bool] = lambda: False) -> dict[str, Prepared] | None:
    """Every entry of ``snapshot.read`` decoded, hashed and given its row and signature
    (``prepare``, ``signature``: the replica's); ``None``
    when ``cancelled`` says so. Entries that are not memory keys or over ``max_object_bytes`` are
    left out (the engine fetches those objects, if the listing shows them)."""
    ready: dict[str, Prepared] = {}
    if cancelled():
        return None
    for n, (obj_key, (etag, body)) in enumerate(entries.items(), 1):
        if not n % 256 and cancelled():
            return None
        parsed = parse_key(obj_key)
        if parsed is None or len(body) > max_object_bytes:
            continue
        try:
            memory = decode(body, profile, parsed[1])
        except BadObject as exc:
            ready[obj_key] = Prepared(etag, body, None, exc.reason, "", None)
            continue
        row, sig = _row_of(memory, prepare, signature)
        ready[obj_key] = Prepared(etag, body, memory, "", content_hash(memory), row, sig)
    return ready


def _row_of(memory: Memory, prepare: Callable[[Memory], tuple[Any, ...]] | None,
            signature: Callable[[Memory], str] | None) -> tuple[tuple[Any, ...] | None, str | None]:
    if prepare is None or signature is None:
        return None, None
    try:
        return tuple(prepare(memory)), signature(memory)
    except Exception:  # containment: the usual path reports it
        return None, None


def with_rows(ready: dict[str, Prepared], prepare: Callable[[Memory], tuple[Any, ...]],
              signature: Callable[[Memory], str]) -> dict[str, Prepared]:
    """``ready`` (from the helper, which knows no store) with the store's rows and signatures,
    computed here by the replica (``Replica.prepare``, ``Replica.signature``): the store's row
    layout stays behind the port, in this process."""
    out: dict[str, Prepared] = {}
    for key, p in ready.items():
        if p.memory is not None and p.row is None:
            row, sig = _row_of(p.memory, prepare, signature)
            p = Prepared(p.etag, p.body, p.memory, p.reason, p.hash, row, sig)
        out[key] = p
    return out


def helper_available() -> bool:
    """Whether a helper process can run beside this one (a second core to run on)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return cores > 1 and bool(sys.executable)


def in_helper(data: bytes, profile: str, max_object_bytes: int,
              cancelled: threading.Event | None = None, timeout_s: float = HELPER_TIMEOUT_S) -> dict[str, Prepared] | None:
    """``snapshot.read`` + :func:`prepare_entries` of the snapshot ``data`` in a helper process:
    decoded and hashed, without the store's rows (the helper imports no store; the caller adds
    them with :func:`with_rows`). ``BadObject`` when
    ``data`` is not a snapshot of ``profile``; ``None`` when ``cancelled``; any other exception
    when the helper failed (the caller then reads it here)."""
    if cancelled is not None and cancelled.is_set():
        return None
    env = dict(os.environ)
    # The helper imports what this process imports, from where this process found it.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen([sys.executable, "-P", "-m", "memlocal_sync.prepared"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, close_fds=True)
    request = pickle.dumps((data, profile, max_object_bytes), protocol=pickle.HIGHEST_PROTOCOL)
    answer: dict[str, Any] = {}

    def talk() -> None:  # one communicate() call: a retried one would not send the rest of its input
        try:
            answer["out"] = proc.communicate(request)
        except BaseException as exc:  # handed to the caller below
            answer["error"] = exc

    talker = threading.Thread(target=talk, name="memlocal-sync-helper", daemon=True)
    talker.start()
    waited = 0.0
    stopped = ""
    while talker.is_alive():
        talker.join(0.25)
        waited += 0.25
        if talker.is_alive() and not stopped:
            if cancelled is not None and cancelled.is_set():
                stopped = "cancelled"
            elif waited >= timeout_s:
                stopped = "timeout"
            if stopped:
                proc.kill()  # its pipes close: communicate() returns
    if stopped == "cancelled":
        return None
    if stopped == "timeout":
        raise TimeoutError(f"the snapshot helper took over {timeout_s:g} s")
    if "error" in answer:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise answer["error"]
    out, err = answer["out"]
    if proc.returncode != 0:
        raise RuntimeError(f"the snapshot helper exited {proc.returncode}: "
                           f"{err.decode('utf-8', 'replace').strip().splitlines()[-1:]}")
    kind, value = pickle.loads(out)  # a pickle from the helper this process started, never from the bucket
    if kind == "bad":
        raise BadObject(value)
    return {key: Prepared(*fields) for key, fields in value.items()}


def _main() -> None:  # pragma: no cover - runs in the helper process (tested through in_helper)
    data, profile, max_object_bytes = pickle.loads(sys.stdin.buffer.read())
    try:
        entries = snapshot.read(data, profile)
    except BadObject as exc:
        result: tuple[str, Any] = ("bad", exc.reason)
    else:
        ready = prepare_entries(entries, profile, max_object_bytes, None, None) or {}
        result = ("ok", {key: (p.etag, p.body, p.memory, p.reason, p.hash, p.row, p.signature)
                         for key, p in ready.items()})
    sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


if __name__ == "__main__":  # pragma: no cover
    _main()
