"""A snapshot's entries made ready to insert, in this process or in a helper process.

A fresh host pulls thousands of memories from a profile's snapshot (docs/sync.md, "Snapshots").
Each needs its body read through the tolerant decoder, its content hash and its store row (the
derived keys and recall features a save computes): about 0.12 ms of pure Python CPU a memory,
all of it under this process's GIL, while the same process lists the bucket and then inserts
the rows. A snapshot of at least ``HELPER_MIN_BYTES`` (about 2,500 memories) is therefore read by
a helper process (``python -m memlocal_sync.prepared``) on another core while this one lists the
bucket: it decodes, hashes and takes each body's MD5, and sends its entries back in chunks of
``CHUNK`` as it goes; the pass inserts the chunks as they come (a :class:`Feed`; the store makes
each memory's row as it inserts it), while the helper works on the next ones: the helper and the
inserts overlap instead of following each other. The helper runs only this package's code on the
snapshot's bytes, and its answer is a pickle from a process this one started with its own
interpreter (never anything read from the bucket). Any failure (one core, the interpreter cannot
be started, a timeout, the helper's error) falls back to doing it here; a body that is not a
snapshot is ``BadObject`` either way.

Nothing here trusts a snapshot: the engine uses an entry only where the listing shows its key
with an ETag equal to the MD5 of its body (docs/sync.md, "What a hint may do").
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from queue import SimpleQueue
from typing import IO, Any, Callable, Final, Iterator

from memlocal.model import Memory

from . import snapshot
from .objects import BadObject, content_hash, decode, max_clock_skew, parse_key, set_max_clock_skew

# A snapshot this large (compressed) is read by a helper process when there is a second core:
# below it, starting an interpreter (~0.2 s of CPU, on the other core) saves too little.
HELPER_MIN_BYTES: Final = 256 << 10
# The helper's bound without progress (no chunk for this long); past it, it is killed and the
# snapshot read here. A pass gives its own deadline (``sync.deadline_s``), as for the bucket.
HELPER_TIMEOUT_S: Final = 300.0
# Entries per chunk the helper sends (and the in-process path prepares) at a time: small enough
# that the pass's rows and inserts start soon after the helper does, large enough that a chunk's
# pickling and its insert statements cost little each.
CHUNK: Final = 256
# The helper's pipes are widened to this (Linux; the default ``pipe-max-size``): its answer pipe
# then holds a few chunks' frames, and one read takes them all (``stream_in_helper``'s receive).
_PIPE_BYTES: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class Prepared:
    """One snapshot entry made ready: its ETag and body, the memory (``None`` with the reason when
    the body is unusable), its content hash, and the MD5 of its body (hex: what the listing's ETag
    of that body is, ``snapshot.etag_md5``)."""

    etag: str
    body: bytes
    memory: Memory | None
    reason: str
    hash: str
    md5: str = ""


def prepare_entries(entries: dict[str, tuple[str, bytes]], profile: str, max_object_bytes: int,
                    cancelled: Callable[[], bool] = lambda: False) -> dict[str, Prepared] | None:
    """Every entry of ``snapshot.read`` decoded and hashed; ``None`` when ``cancelled`` says so. Entries that are not memory keys or over ``max_object_bytes`` are
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
        md5 = hashlib.md5(body).hexdigest()
        try:
            memory = decode(body, profile, parsed[1])
        except BadObject as exc:
            ready[obj_key] = Prepared(etag, body, None, exc.reason, "", md5)
            continue
        ready[obj_key] = Prepared(etag, body, memory, "", content_hash(memory), md5)
    return ready


class Feed:
    """The prepared entries of one profile's snapshot, chunk by chunk as they are made ready
    (a thread of the pass fills it; the pass reads it). A chunk is put as entries or as the
    helper's frame (``stream_in_helper``), unpickled by the reader: the thread that fills the feed
    then holds the GIL for nothing, so the pass's inserts never wait on it. ``read`` once
    finished: whether a snapshot was read (every entry of it was put); ``False``: none could be,
    the pass reads it itself."""

    _END: Final = None

    def __init__(self) -> None:
        self._chunks: SimpleQueue[dict[str, Prepared] | bytes | None] = SimpleQueue()
        self.read = False
        self.finished = False  # every chunk is put (the end too)
        self._ended = False  # the reader has taken the end
        # Called (on the filling thread) once the feed is finished: a reader waiting on other
        # things too wakes up to take the chunks (``lister.EarlyTake``).
        self.notify: Callable[[], None] | None = None

    def put(self, chunk: dict[str, Prepared] | bytes) -> None:
        """Add a chunk."""
        if chunk:
            self._chunks.put(chunk)

    def finish(self, read: bool) -> None:
        """No more chunks (call exactly once, whatever happened: a reader waits for it)."""
        self.read = read
        self._chunks.put(self._END)
        self.finished = True
        notify = self.notify
        if notify is not None:
            notify()

    @property
    def ended(self) -> bool:
        """Whether the reader has taken every chunk and the end."""
        return self._ended

    def pending(self) -> bool:
        """Whether a chunk (or the end) is ready now, so that reading it does not wait."""
        return not self._chunks.empty()

    def chunks(self, wait: bool = True) -> Iterator[dict[str, Prepared]]:
        """Every chunk not taken yet, waiting for each, until the feed is finished; with
        ``wait=False``, only those ready now (one reader: the pass's thread)."""
        while not self._ended and (wait or not self._chunks.empty()):
            item = self._chunks.get()
            if item is self._END:
                self._ended = True
                return
            yield entries_of(item) if isinstance(item, bytes) else item


def entries_of(frame: bytes) -> dict[str, Prepared]:
    """The entries of a chunk the helper sent (``stream_in_helper``'s ``on_chunk``)."""
    # A pickle from the helper this process started, never from the bucket.
    return {key: Prepared(etag, body, _memory_of(memory), *rest)
            for key, (etag, body, memory, *rest) in pickle.loads(frame).items()}


# A memory crosses from the helper as the tuple of its fields and is rebuilt here by setting its
# slots: pickling the frozen dataclass itself cost ~5 us a memory each way (dataclasses' own
# __getstate__/__setstate__ look its fields up on every call).
_FIELDS: Final = tuple(f.name for f in dataclasses.fields(Memory))
_SETTERS: Final = tuple(getattr(Memory, name).__set__ for name in _FIELDS)


def _memory_fields(memory: Memory | None) -> tuple[Any, ...] | None:
    return None if memory is None else tuple([getattr(memory, name) for name in _FIELDS])


def _memory_of(fields: tuple[Any, ...] | None) -> Memory | None:
    """The memory whose fields the helper sent (built there by the decoder: valid as it is)."""
    if fields is None:
        return None
    memory: Memory = object.__new__(Memory)
    for put, value in zip(_SETTERS, fields):
        put(memory, value)
    return memory


def helper_available() -> bool:
    """Whether a helper process can run beside this one (a second core to run on)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return cores > 1 and bool(sys.executable)


def stream_in_helper(data: bytes, profile: str, max_object_bytes: int,
                     on_chunk: Callable[[bytes], None], cancelled: Callable[[], bool],
                     timeout_s: float = HELPER_TIMEOUT_S, chunk: int | None = None,
                     max_bytes: int = snapshot.MAX_SNAPSHOT_BYTES) -> bool:
    """``snapshot.read`` + :func:`prepare_entries` of the snapshot ``data`` in a helper process
    (decoded and hashed), each chunk of ``chunk`` (default ``CHUNK``) entries handed to
    ``on_chunk`` (on this thread, still pickled: :func:`entries_of` reads it) as soon as the
    helper has sent it, while the helper prepares the next. ``True`` once every
    entry was handed over; ``False`` when ``cancelled`` (some chunks may have been handed over);
    ``BadObject`` when ``data`` is not a snapshot of ``profile`` (before any chunk); any other
    exception when the helper failed (the chunks handed over are good: the caller prepares the
    rest)."""
    if cancelled():
        return False
    request = pickle.dumps((data, profile, max_object_bytes, chunk or CHUNK, max_bytes, max_clock_skew()),
                           protocol=pickle.HIGHEST_PROTOCOL)
    env = dict(os.environ)
    # The helper imports what this process imports, from where this process found it.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # Its error output goes to a file: a pipe nobody reads while the chunks come could fill and stall it.
    errfile = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen([sys.executable, "-P", "-m", "memlocal_sync.prepared"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errfile, env=env, close_fds=True)
    except BaseException:
        errfile.close()
        raise
    assert proc.stdin is not None and proc.stdout is not None
    _widen_pipe(proc.stdout)
    _widen_pipe(proc.stdin)
    finished = threading.Event()
    stopped: list[str] = []
    errors: list[BaseException] = []
    # The request, its length first.
    writing = threading.Lock()

    def send(stdin: IO[bytes]) -> None:  # its own thread: the helper answers while it reads
        try:
            with writing:
                stdin.write(len(request).to_bytes(8, "big") + request)
                stdin.flush()
        except BaseException as exc:  # a helper that died early: its answer says why
            errors.append(exc)

    progress = [time.monotonic()]  # when the helper last sent a frame

    def watch() -> None:  # a cancelled pass or a helper stalled past its bound is killed: its pipe closes
        while not finished.wait(0.1):
            if cancelled() or time.monotonic() - progress[0] >= timeout_s:
                stopped.append("cancelled" if cancelled() else "timeout")
                proc.kill()
                return

    frames: SimpleQueue[bytes | None] = SimpleQueue()

    def receive(stdout: IO[bytes]) -> None:
        # Its own thread: the helper never waits on a full pipe while the pass inserts the
        # chunk before. One read takes whatever the pipe holds (``_PIPE_BYTES`` at most: a few
        # frames), not a frame's header and then its body: each read gives the GIL up and takes
        # it back from a pass busy in Python (up to the 5 ms switch interval a time), and a
        # ~300 KiB frame read from a default 64 KiB pipe cost several of those waits, during
        # which the helper stood still on its full pipe (a hydrate's helper took 2-3x its time).
        fd = stdout.fileno()
        pending = bytearray()
        try:
            while part := os.read(fd, _PIPE_BYTES):
                pending += part
                whole = take_frames(pending)
                for frame in whole:
                    frames.put(frame)
                if whole:  # (progress is a chunk, not a byte)
                    progress[0] = time.monotonic()
        except (OSError, ValueError):  # the pipe closed under it: the helper was stopped
            pass
        finally:
            # What is left in ``pending`` is a frame the helper died while writing: a truncated
            # pickle is not a chunk.
            frames.put(None)

    threads = [threading.Thread(target=send, args=(proc.stdin,), name="memlocal-sync-helper-in", daemon=True),
               threading.Thread(target=receive, args=(proc.stdout,), name="memlocal-sync-helper-out", daemon=True),
               threading.Thread(target=watch, name="memlocal-sync-helper-watch", daemon=True)]
    for t in threads:
        t.start()
    complete = False
    try:
        while True:
            frame = frames.get()
            if frame is None:
                break  # the helper's output ended without its last frame: it failed (or was killed)
            kind, body = frame[:1], frame[1:]
            if kind == b"o":
                on_chunk(body)
                continue
            if kind == b"b":  # (a pickle from the helper this process started, never from the bucket)
                raise BadObject(pickle.loads(body))
            complete = kind == b"e"
            break
    finally:
        finished.set()
        if not complete and proc.poll() is None:
            proc.kill()
        with writing:
            try:
                proc.stdin.close()
            except OSError:  # (a helper that exited first: a broken pipe)
                pass
        proc.wait()
        for t in threads:
            t.join()
        proc.stdout.close()
        errfile.seek(0)
        err = errfile.read()
        errfile.close()
    if stopped and stopped[0] == "cancelled":
        return False
    if stopped:
        raise TimeoutError(f"the snapshot helper sent nothing for {timeout_s:g} s")
    if not complete:
        raise RuntimeError(f"the snapshot helper exited {proc.returncode}: "
                           f"{err.decode('utf-8', 'replace').strip().splitlines()[-1:]}")
    return True


def take_frames(pending: bytearray) -> list[bytes]:
    """The whole frames (an 8-byte length, then that many bytes) at the start of ``pending``,
    taken out of it; a frame not yet whole stays."""
    out: list[bytes] = []
    at = 0
    while len(pending) - at >= 8:
        end = at + 8 + int.from_bytes(pending[at:at + 8], "big")
        if end > len(pending):
            break
        out.append(bytes(pending[at + 8:end]))
        at = end
    del pending[:at]
    return out


def _widen_pipe(pipe: IO[bytes]) -> None:
    """Let ``pipe`` hold ``_PIPE_BYTES`` (Linux's ``F_SETPIPE_SZ``, up to
    ``/proc/sys/fs/pipe-max-size``: 1 MiB by default); elsewhere, or refused, it stays as it is."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setsize is None:  # not Linux
        return
    try:
        fcntl.fcntl(pipe.fileno(), setsize, _PIPE_BYTES)
    except OSError:  # over the system's or this user's limit: the default pipe works, slower
        pass


def _main() -> None:  # pragma: no cover - runs in the helper process (tested through stream_in_helper)
    def read(n: int) -> bytes:
        got = b""
        while len(got) < n and (part := os.read(0, n - len(got))):
            got += part
        return got

    data, profile, max_object_bytes, chunk, max_bytes, skew = pickle.loads(read(int.from_bytes(read(8), "big")))
    set_max_clock_skew(skew)
    out = sys.stdout.buffer

    def send(kind: bytes, value: Any) -> None:  # a length, the kind (ok, bad, end), the pickle
        body = kind + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(len(body).to_bytes(8, "big"))
        out.write(body)
        out.flush()

    try:
        # Streaming, capped (a bomb costs its cap, not its size).
        entries = snapshot.read(data, profile, max_bytes, snapshot.entry_cap(max_object_bytes))
    except BadObject as exc:
        send(b"b", exc.reason)
        return
    items = list(entries.items())
    for i in range(0, len(items), chunk):
        ready = prepare_entries(dict(items[i:i + chunk]), profile, max_object_bytes) or {}
        send(b"o", {key: (p.etag, p.body, _memory_fields(p.memory), p.reason, p.hash, p.md5)
                    for key, p in ready.items()})
    send(b"e", len(items))


if __name__ == "__main__":  # pragma: no cover
    _main()
