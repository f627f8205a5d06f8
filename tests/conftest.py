"""Shared fixtures. Feature-specific fixtures live in their own plugin modules listed below.

- ``cli``: run ``memlocal`` against this test's database, in process (``cli(...)``) or as a real
  process (``cli.process(...)``); ``cli.json(...)`` parses the output of a command that must pass.
- ``make_bank``: a local-only bank on a fresh file in ``tmp_path`` with settings given as keyword
  arguments (``make_bank(inject__budget_chars=420)``), closed after the test. A new file (here and
  in ``bank``) starts as a copy of the session's empty migrated database (``support.fresh_database``).
- ``wait_for``: poll until a condition holds (``support.wait_for``).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

# What the suite keeps between runs lives in the user's cache, never in the repository.
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memlocal-tests"


def _link_installed_bytecode() -> None:
    """Give the pycache prefix the bytecode that was compiled at install time.

    With a prefix, Python reads bytecode only from the prefix's mirror of each source folder,
    never from the ``__pycache__`` pip (or the interpreter's installer) compiled beside the
    installed modules: a fresh clone's run compiled every library it imports again, ~20 s of
    CPU. So, once per environment (a ``.linked`` file in the mirror of each root says it is
    done), each of those files is hard-linked (copied across devices) to where the prefix
    expects it (``importlib.util.cache_from_source``). Python still checks each file against
    its source, and replaces a stale one with a new file, never writing through the link."""
    import importlib.util
    import shutil
    import sysconfig

    tag = f".{sys.implementation.cache_tag}.pyc"
    paths = sysconfig.get_paths()  # as on sys.path: the mirror follows the path a module is found by
    site = {paths["purelib"], paths["platlib"]}
    for root in dict.fromkeys([paths["stdlib"], *site]):
        done = Path(importlib.util.cache_from_source(os.path.join(root, "x.py"))).parent / ".linked"
        if done.exists() or not os.path.isdir(root):
            continue
        for folder, subfolders, files in os.walk(root):
            if folder == root and root not in site:
                subfolders[:] = [d for d in subfolders if d != "site-packages"]  # the base's, not ours
            if os.path.basename(folder) != "__pycache__":
                continue
            for name in files:
                if not name.endswith(tag) or name.count(".") != 2:  # "mod.cpython-311.pyc", no opt- levels
                    continue
                target = importlib.util.cache_from_source(
                    os.path.join(os.path.dirname(folder), name[: -len(tag)] + ".py"))
                if os.path.exists(target):
                    continue
                os.makedirs(os.path.dirname(target), exist_ok=True)
                try:
                    os.link(os.path.join(folder, name), target)
                except FileExistsError:
                    pass
                except OSError:
                    shutil.copyfile(os.path.join(folder, name), target)
        done.parent.mkdir(parents=True, exist_ok=True)
        done.touch()


# Set before memlocal or any test module is imported, so nothing is compiled into the repository.
# Compiled bytecode (pytest's rewritten test modules included) goes to CACHE/pycache, for this
# process, the xdist workers and every subprocess a test starts: with PYTHONDONTWRITEBYTECODE set
# (as on the team's machines) each process compiled memlocal and rewrote every test module again.
# The installed libraries' own bytecode is linked into it (``_link_installed_bytecode``).
sys.pycache_prefix = str(CACHE / "pycache")
sys.dont_write_bytecode = False
os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
_link_installed_bytecode()


def _temporary_files_in_memory() -> Path | None:
    """Put the run's temporary files (every test's database, data dir and logs, and those of the
    processes it starts) on ``/dev/shm`` when it is a tmpfs with room, unless ``TMPDIR`` is set:
    each commit's fsync then returns at once instead of waiting for the disk (the recall
    properties' ~8,000 commits waited ~4 s on it). What the tests check does not change: the
    files are real SQLite files, the crash tests kill real processes (an fsync only matters when
    the machine loses power, which no test can do). Returns the disk's temporary folder."""
    import shutil
    import tempfile

    if os.environ.get("MEMLOCAL_TESTS_DISK_TMP"):  # an xdist worker: the controller chose
        return Path(os.environ["MEMLOCAL_TESTS_DISK_TMP"])
    disk = Path(tempfile.gettempdir())
    if os.environ.get("TMPDIR") or not Path("/proc/mounts").exists():
        return disk
    try:
        mounts = Path("/proc/mounts").read_text()
        shm = Path("/dev/shm")
        if (not any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in mounts.splitlines() if line.strip())
                or shutil.disk_usage(shm).free < 2 << 30):
            return disk
        mine = shm / f"memlocal-tests-{os.getuid()}"
        mine.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return disk
    os.environ["TMPDIR"] = str(mine)
    os.environ["MEMLOCAL_TESTS_DISK_TMP"] = str(disk)
    tempfile.tempdir = None  # gettempdir() looks again
    return disk


DISK_TMP = _temporary_files_in_memory()


def _exit_without_teardown() -> None:
    """An xdist worker's last step: leave without the interpreter's teardown. xdist's controller
    waits for every worker to exit before it reports, and tearing down a worker's heap (the
    collection, every library the run imported) took 0.7-2 s at the end of each run. Registered
    before anything else of the suite, so every other exit handler (``support.stop_every_group``
    among them) has run by then; the results went to the controller before (the worker is being
    shut down by it). Only a process that ``pytest_configure`` found to be an xdist worker
    leaves this way: the environment variable that registers it is inherited by whatever a test
    starts, and a pytest run inside a test must still exit with its own status."""
    if not _XDIST_WORKER:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# Set by pytest_configure in a real xdist worker (its config has ``workerinput``).
_XDIST_WORKER: list[bool] = []

if os.environ.get("PYTEST_XDIST_WORKER"):
    import atexit

    atexit.register(_exit_without_teardown)  # exit handlers run last-registered first

import pytest
from hypothesis import settings as hypothesis_settings
from hypothesis.configuration import set_hypothesis_home_dir
import support
from support import wait_for as _wait_for

from memlocal import Config, MemoryBank

# Plugin modules with fixtures for one area each (S3 server, fake Anthropic API, ...).
pytest_plugins: list[str] = ["anthropic_fake", "s3server"]


# Hypothesis keeps no example database, and no per-example deadline (a wall-clock bound that a
# loaded machine breaks). Its other files (the Unicode tables it would otherwise rebuild in every
# worker, the constants it collects from the code) go to CACHE as well.
hypothesis_settings.register_profile("memlocal", database=None, deadline=None)
hypothesis_settings.load_profile("memlocal")
set_hypothesis_home_dir(str(CACHE / "hypothesis"))


# The collector, tuned for a test process that holds ~200k objects from collection on and makes
# garbage in bursts. With CPython's defaults (700, 10, 10) each worker ran 11-16 full collections,
# 0.2-0.8 s each, ~5.6-7.3 s of a worker's CPU in all (timed with gc.callbacks); with a young
# generation of 10,000 objects and the collection's objects frozen (never scanned again), 2 full
# collections and ~3 s. Cycles are still collected, only in fewer, larger passes.
gc.set_threshold(10_000, 10, 10)


ROOT = Path(__file__).resolve().parent.parent
TYPE_CHECK_TEST = ROOT / "tests" / "test_types.py"


def _runs_the_type_check(config: pytest.Config) -> bool:
    """Whether this run may select ``test_mypy_strict_is_clean``, judged from the command line
    alone (xdist's controller collects nothing): no ``-k``, ``-m``, ``--lf`` or ``--collect-only``,
    and a path argument that is tests/test_types.py or a folder holding it (no argument: the
    ``testpaths``). A wrong guess costs only time: the test runs the check itself when no
    background one was started, and a background one no test waited for is killed at the end."""
    option = config.option
    if (getattr(option, "keyword", "") or getattr(option, "markexpr", "") or getattr(option, "lf", False)
            or getattr(option, "collectonly", False)):
        return False
    for arg in config.args:
        path, _, rest = str(arg).partition("::")
        target = (config.invocation_params.dir / path).resolve()
        if target == TYPE_CHECK_TEST and rest in ("", "test_mypy_strict_is_clean"):
            return True
        if target.is_dir() and TYPE_CHECK_TEST.is_relative_to(target):
            return True
    return False


class _TypeCheckAfterCollection:
    """xdist's controller starts the background type check when the first worker has collected:
    the workers' start-up (imports and collection, ~2-3 s of CPU each) is the one stretch of a
    run that keeps every core busy, and mypy's ~20 s of a fresh clone would stretch it."""

    def __init__(self, result: Path) -> None:
        self.result: Path | None = result

    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        if self.result is not None:
            support.start_type_check(ROOT, self.result)
            self.result = None


def pytest_configure(config: pytest.Config) -> None:
    """The session's first process (xdist's controller, or the only one) runs mypy's check in
    the background when the run may include it (``support.start_type_check``), from the moment
    the first worker has collected: it runs beside the workers' tests rather than holding one
    worker for ~20 s of CPU."""
    if hasattr(config, "workerinput"):
        _XDIST_WORKER[:] = [True]  # this process may leave without its teardown (_exit_without_teardown)
    if hasattr(config, "workerinput") or support.TYPE_CHECK_RESULT or not _runs_the_type_check(config):
        return
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="memlocal-types-"))
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    support.announce_type_check(folder / "result.json")  # before xdist starts the workers
    if getattr(config.option, "numprocesses", None) and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_TypeCheckAfterCollection(folder / "result.json"), "memlocal-type-check")
    else:
        support.start_type_check(ROOT, folder / "result.json")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection made (the test modules, their items, the imported libraries): it
    lives until the run ends, so a full collection need not walk it again."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Kill any process group a test or fixture started and did not stop (``support.spawn``)."""
    support.stop_every_group()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After pytest's own end-of-run collection (its unraisable-exception plugin collects in
    ``pytest_unconfigure``, then once more in its clean-up, where CPython finds nothing more),
    freeze what is left: the second full collection of a worker's heap (every module the run
    imported) took 0.4-1.4 s at load 6, at the end of each worker."""
    gc.freeze()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the usable cores. A worker spends about a third of its
    time waiting (a subprocess or a server starting, a deadline or a back-off, moto_server), and
    the extra worker fills those gaps; ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still overrides it.
    The measurements behind it: CONTRIBUTING.md, "Where the time goes"."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1


# A fixture whose first use in a process imports something heavy: the anthropic SDK, ~3 s of CPU.
HEAVY_IMPORT_FIXTURES = ("anthropic_fake",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order the xdist workers are given the tests in (computed the same way in every
    worker, as xdist requires). ``--dist worksteal`` hands worker k the k-th of as many
    contiguous slices of the collection as there are workers, then idle workers take the second
    half of the longest queue. So:

    - each slice starts with its share of the ``slow`` tests (with them simply moved to the
      front, all fell into the first worker's slice and ran one after another); a module's slow
      tests stay together (the dashboard's module shares one browser), the biggest modules
      placed first, each on the slice with the fewest so far;
    - the modules that use a fixture of ``HEAVY_IMPORT_FIXTURES``, and the tests marked
      ``anthropic_sdk`` (they import it themselves), come next, together, on the slice with the
      fewest slow tests: one worker imports the anthropic SDK, not every one."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    module_of = {item: item.nodeid.split("::")[0] for item in items}
    heavy_modules = {module_of[item] for item in items
                     if any(name in getattr(item, "fixturenames", ()) for name in HEAVY_IMPORT_FIXTURES)}
    slow_modules: dict[str, list[pytest.Item]] = {}
    heavy: list[pytest.Item] = []
    fast: list[pytest.Item] = []
    for item in items:
        if item.get_closest_marker("slow") is not None:
            slow_modules.setdefault(module_of[item], []).append(item)
        else:
            sdk = module_of[item] in heavy_modules or item.get_closest_marker("anthropic_sdk") is not None
            (heavy if sdk else fast).append(item)
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for group in sorted(slow_modules.values(), key=len, reverse=True):  # stable: ties keep file order
        min(shares, key=len).extend(group)
    min(shares, key=len).extend(heavy)
    ordered: list[pytest.Item] = []
    remaining = len(items)
    for k, share in enumerate(shares):
        size = remaining // (workers - k)  # xdist's own split of the pending tests
        take = max(0, size - len(share))
        ordered += share + fast[:take]
        del fast[:take]
        remaining -= len(share) + take
    items[:] = ordered + fast


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's config, database, bucket or API key."""
    for var in list(os.environ):
        if var.startswith(("MEMLOCAL_", "ANTHROPIC_", "INTERNAL_S3_", "S3_", "AWS_")):
            monkeypatch.delenv(var, raising=False)
    # Tables fit COLUMNS (pytest-xdist sets it to 80 in its workers): a test that wants a width sets it.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    # boto3 must never find real credentials or reach a real endpoint from a test.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session", autouse=True)
def _empty_database(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The empty, migrated database that ``support.fresh_database`` copies."""
    path = tmp_path_factory.mktemp("empty") / "empty.db"
    MemoryBank(path, config=Config.load(environ={})).close()
    support.EMPTY_DATABASE[:] = [path]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memlocal.db"


@pytest.fixture
def disk_tmp_path() -> Iterator[Path]:
    """A temporary folder on the disk's temporary folder, not tmpfs: for answers that come from
    a disk filesystem (the size a directory reports, as the Claude SDK's file tool shows it)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="memlocal-disk-", dir=DISK_TMP))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def bank(db_path: Path) -> Iterator[MemoryBank]:
    with MemoryBank(db_path if db_path.exists() else support.fresh_database(db_path)) as b:
        yield b


def settings_config(**settings: Any) -> Config:
    """Defaults plus ``settings`` as flags (``inject__budget_chars=420`` or ``**{"inject.budget_chars": 420}``)."""
    return Config.load(environ={}, overrides={k.replace("__", "."): v for k, v in settings.items()})


@pytest.fixture
def make_bank(tmp_path: Path) -> Iterator[Callable[..., MemoryBank]]:
    """``make_bank(path=None, **settings)``: a local-only bank (no bucket, no LLM), closed after
    the test. ``path`` defaults to a fresh file in ``tmp_path``."""
    opened: list[MemoryBank] = []

    def make(path: Path | None = None, **settings: Any) -> MemoryBank:
        path = path or tmp_path / f"bank-{len(opened)}.db"
        bank = MemoryBank(path if path.exists() else support.fresh_database(path), config=settings_config(**settings))
        opened.append(bank)
        return bank

    yield make
    for b in opened:
        b.close()


@dataclass
class CliResult:
    """What a ``memlocal`` run printed, and how it exited."""

    exit_code: int
    stdout: str
    stderr: str

    def __iter__(self) -> Iterator[Any]:
        """``code, out, err = cli(...)``."""
        return iter((self.exit_code, self.stdout, self.stderr))

    @property
    def output(self) -> str:
        """stdout then stderr (most assertions do not care which stream a line went to)."""
        return self.stdout + self.stderr


class Cli:
    """``memlocal`` bound to one database (``db=None`` passes no ``--db``)."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def at(self, db: Path | str) -> "Cli":
        """The same runner bound to another database (another host's file)."""
        return Cli(Path(db))

    def _argv(self, args: tuple[str, ...], db: Path | str | None | bool) -> list[str]:
        chosen = self.db if db is True else db
        return [*(["--db", str(chosen)] if chosen else []), *map(str, args)]

    def __call__(self, *args: Any, input: str | None = None, env: Mapping[str, str] | None = None,
                 db: Path | str | None | bool = True) -> CliResult:
        """In process, through click's runner (fast: no interpreter start-up)."""
        from click.testing import CliRunner

        from memlocal.faces.cli import main

        r = CliRunner().invoke(main, self._argv(args, db), input=input, env=dict(env or {}))
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception
        return CliResult(r.exit_code, r.stdout, r.stderr)

    def json(self, *args: Any, **kwargs: Any) -> Any:
        """Run a command that must succeed and parse its stdout as JSON."""
        r = self(*args, **kwargs)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    def process(self, *args: Any, input: str | None = None, env: Mapping[str, str] | None = None,
                db: Path | str | None | bool = True, timeout: float = 60) -> CliResult:
        """As a real ``python -m memlocal`` process (stdin, exit codes and start-up as a user sees them)."""
        p = support.run([sys.executable, "-m", "memlocal", *self._argv(args, db)], input=input,
                           capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)
        return CliResult(p.returncode, p.stdout, p.stderr)


@pytest.fixture
def cli(db_path: Path) -> Cli:
    return Cli(db_path)


@pytest.fixture
def wait_for() -> Callable[..., Any]:
    """``wait_for(predicate, timeout=30, what=...)``: see ``support.wait_for``."""
    return _wait_for


@pytest.fixture(scope="session")
def screenshots_dir() -> Path | None:
    """Where browser tests write their screenshots of the views: ``$MEMLOCAL_TEST_SCREENSHOTS``
    (never the repository unless you name it); ``None`` when it is not set: no screenshots."""
    chosen = os.environ.get("MEMLOCAL_TEST_SCREENSHOTS")
    if not chosen:
        return None
    path = Path(chosen)
    path.mkdir(parents=True, exist_ok=True)
    return path
