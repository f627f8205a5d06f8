"""The suite cleans up after itself: a process a test starts (``support.spawn``/``support.run``),
and whatever that process starts in turn, is gone after a timeout, a failure, an interrupt or
pytest-timeout's bound, not left behind as an orphan (a timed-out bench smoke once left its
moto_server running with parent 1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import support
from support import wait_for

# A child that starts a grandchild in the background (as bench.py starts moto_server), writes the
# grandchild's pid, then waits (far longer than any bound below).
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[1], "w").write(str(grandchild.pid))
    time.sleep(float(sys.argv[2]))
""")

# The same in a shell, for the tests bounded by a timeout: sh starts and forks its background
# ``sleep`` within milliseconds, where an interpreter's start-up can take a second on a loaded
# machine, so their bound is 1 s rather than 3 (a bound that fired before the grandchild started
# would leave no pid to check).
SH_PARENT = 'sleep 600 & echo $! > "$1"; exec sleep "$2"'


def sh_parent(pid_file: Path, seconds: str) -> list[str]:
    return ["sh", "-c", SH_PARENT, "sh", str(pid_file), seconds]


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def grandchild_of(pid_file: Path) -> int:
    return int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 60, "the grandchild's pid"))


def test_a_timed_out_run_takes_its_whole_process_group_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        support.run(sh_parent(pid_file, "600"), timeout=1)
    grandchild = grandchild_of(pid_file)
    wait_for(lambda: not alive(grandchild), 10, "the grandchild to be killed")


def test_a_run_that_exits_leaves_nothing_it_started_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    assert support.run([sys.executable, "-c", PARENT, str(pid_file), "0"]).returncode == 0
    grandchild = grandchild_of(pid_file)
    wait_for(lambda: not alive(grandchild), 10, "the grandchild to be killed")


def test_a_failure_inside_spawned_stops_the_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    with pytest.raises(AssertionError, match="the test failed"):
        with support.spawned([sys.executable, "-c", PARENT, str(pid_file), "600"]) as proc:
            grandchild = grandchild_of(pid_file)
            raise AssertionError("the test failed")
    assert proc.returncode is not None
    wait_for(lambda: not alive(grandchild), 10, "the grandchild to be killed")


INNER_TEST = textwrap.dedent("""
    import signal, sys, time
    import support

    # Ctrl-C is a KeyboardInterrupt even where this run was started with SIGINT ignored (a job a
    # non-interactive shell put in the background with '&' inherits SIG_IGN, and Python then
    # installs no handler): the suite's CI run was once started that way.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def test_hangs(tmp_path):
        proc = support.spawn({sh_parent!r})
        try:
            proc.wait()  # forever: pytest-timeout ends it
        finally:
            support.stop(proc)

    def test_interrupted(tmp_path):
        with support.spawned([sys.executable, "-c", {parent!r}, {pid_file2!r}, "600"]):
            time.sleep(600)  # until SIGINT (Ctrl-C)
""")


@pytest.mark.slow  # two inner pytest runs
@pytest.mark.parametrize("how", ["pytest-timeout", "ctrl-c"])
def test_pytest_timeout_and_ctrl_c_kill_what_a_hung_test_started(tmp_path: Path, how: str) -> None:
    """The suite's own settings (pyproject's timeout method: signal) in an inner run."""
    pid_file, pid_file2 = tmp_path / "timeout.pid", tmp_path / "interrupt.pid"
    (tmp_path / "test_inner.py").write_text(INNER_TEST.format(parent=PARENT, sh_parent=sh_parent(pid_file, "600"),
                                                               pid_file2=str(pid_file2)))
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")])}
    inner = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--disable-plugin-autoload",
             "-p", "timeout", "-o", "addopts=", "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")]
    if how == "pytest-timeout":
        done = support.run([*inner, "-k", "hangs", "--timeout", "1", "-o", "timeout_method=signal"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
        assert "Timeout" in done.stdout and done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        grandchild = grandchild_of(pid_file)
    else:
        with support.spawned([*inner, "-k", "interrupted"], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            grandchild = grandchild_of(pid_file2)
            os.kill(proc.pid, signal.SIGINT)
            out, _ = proc.communicate(timeout=60)
            assert "KeyboardInterrupt" in out, out[-2000:]
    wait_for(lambda: not alive(grandchild), 10, "the grandchild to be killed")
