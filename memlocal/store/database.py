"""The SQLite file itself: the connection, its transactions, the ``meta`` key/value table and
the schema's migrations (run by :mod:`memlocal.store.migrations`).

Decisions:
- WAL journal with ``synchronous=FULL``: a commit is fsynced before ``save`` returns, and readers
  never block the writer.
- The connection runs in autocommit mode and every write is an explicit ``BEGIN IMMEDIATE``
  transaction, so a writer takes the lock up front (no deadlock-prone lock upgrades) and waits
  ``busy_timeout`` (``store.busy_timeout_s``) for other processes; past that the write fails
  with one line saying so.
- Reads outside a write run on a small pool of read connections of their own (``read``,
  ``snapshot``): WAL lets them proceed while another connection commits, so a save's commit and
  its fsync hold up neither this process's reads nor another's. A thread inside a write (it holds
  the store's lock) reads on the writer's connection, and sees what it wrote.
- Schema changes are named migration sets, one per owner (``memlocal/store/schemas/``), each
  versioned by its own stamp in ``meta`` (docs/storage.md, "Migrations").
"""

from __future__ import annotations

import shlex
import sqlite3
import stat
import sys
import threading
import time
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Final, Iterator, Sequence

from ..errors import CorruptDatabaseError, DiskFullError, StoreError, fold_whitespace
from .tables import Connection, TableHandle

if TYPE_CHECKING:
    # Imported only to migrate (and by ``Database.db``): opening an up-to-date database, which a
    # one-shot ``memlocal recall`` does, never pays for sqlite_utils and its plugin scan.
    import sqlite_utils

    from .migrations import MigrationSet


# SQLite's primary result codes that blame the file or the disk, not the statement.
_SQLITE_FULL: Final = 13
_SQLITE_CORRUPT: Final = frozenset({11, 26})  # CORRUPT, NOTADB
_SQLITE_DISK: Final = frozenset({3, 8, 10, 14, 22})  # PERM, READONLY, IOERR, CANTOPEN, NOLFS

# Rows a streamed read (``Database.iter_rows``) fetches at a time.
ITER_PAGE_ROWS: Final = 500
# SQLite's own default: a commit that leaves the log this many pages long checkpoints it inline.
WAL_AUTOCHECKPOINT: Final = 1000
# Idle read connections a ``Database`` keeps for its reads (``Database.read``/``snapshot``); more
# may be open at once (one per concurrent reader), the extra ones are closed when returned.
READ_POOL_IDLE: Final = 8
# Best-effort commits (access bumps, about 15 pages each) between two checkpoints run off the
# caller's path (``Database.lazy_commits``): about ``WAL_AUTOCHECKPOINT`` pages.
LAZY_CHECKPOINT_COMMITS: Final = 64


_SQLITE_ERROR: Final = 1  # SQLITE_ERROR: a generic error, "no such table" among them
# A database file of 0 bytes older than this is refused (SQLite would take it for a new, empty
# database: a truncated bank silently became an empty one); a younger one may be another
# process's new database, between its creation and its first write.
EMPTY_FILE_GRACE_S: Final = 2.0


def refuse_empty_file(path: Path) -> None:
    """``CorruptDatabaseError`` when ``path`` is an existing file of 0 bytes, last written more
    than ``EMPTY_FILE_GRACE_S`` ago: a copy, a disk or a tool that failed left it empty, and
    opening it would start a new bank over the old one's name without a word."""
    try:
        st = path.stat()
    except OSError:
        return
    if st.st_size == 0 and stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > EMPTY_FILE_GRACE_S:
        raise CorruptDatabaseError(
            f"database {path.absolute()} is an empty file (0 bytes), not a memlocal database: a copy or a disk that "
            "failed may have truncated it; restore it from a backup, or delete it to start a new bank there")


def database_error(path: Path, exc: BaseException) -> StoreError | None:
    """The one-line error a failure of the file or the disk becomes (``None`` for any other
    exception, which keeps its own meaning: a constraint, a query FTS5 cannot parse, ...)."""
    if not isinstance(exc, sqlite3.Error) or isinstance(exc, sqlite3.IntegrityError):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return None
    name = getattr(exc, "sqlite_errorname", "") or str(code)
    detail = f"{fold_whitespace(exc)} ({name})"
    primary = code & 0xFF
    if primary == _SQLITE_FULL:
        return DiskFullError(f"database {path} is full: {detail}; nothing was written (free some disk space)")
    if primary in _SQLITE_CORRUPT:
        whole = path.absolute()  # the file a person must find: with its folder, however it was given
        return CorruptDatabaseError(
            f"database {whole} is corrupt: {detail}; restore it from a backup (`sqlite3 {shlex.quote(str(whole))} "
            ".recover` saves what is readable), or move it aside to start a new one")
    if primary == _SQLITE_ERROR and ("no such table" in detail or "no such column" in detail):
        # A migration that did not finish (a full disk) or a table another tool dropped or altered.
        return StoreError(f"database {path} lacks what memlocal needs: {detail}; a migration did not finish "
                          "(the disk may be full) or another tool altered the file: free some space and retry, "
                          "or restore it from a backup")
    if primary in _SQLITE_DISK:
        return StoreError(f"database {path}: {detail}; nothing was written (the disk may be full, "
                          "read-only or failing)")
    return None



def import_sqlite_utils() -> ModuleType:
    """``sqlite_utils``, imported without numpy and pandas unless the process has them already.

    sqlite_utils' ``db`` module imports both, when installed, only to map their scalar types to
    column types; the store never writes such values. numpy (which the semantic extra installs)
    was the largest import of a fresh host's first CLI command, which creates the database. They
    are hidden for the import only (a ``None`` in ``sys.modules`` makes ``import`` fail), so any
    later ``import numpy`` works as usual."""
    loaded = sys.modules.get("sqlite_utils")
    if loaded is not None:
        return loaded
    hidden = [name for name in ("numpy", "pandas") if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import sqlite_utils
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return sqlite_utils


class Database:
    """One SQLite file: connection, transactions, ``meta`` and migrations.

    One writing connection per ``Database`` (``conn``), behind a re-entrant lock that makes it
    usable from several threads; reads outside a write take a connection of the read pool
    (``READ_POOL_IDLE`` kept idle), so they never wait for a commit's fsync.
    """

    # The migration sets run on open, in order (a subclass names its tables' sets).
    migration_sets: tuple[MigrationSet, ...] = ()

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        # The read pool: idle read connections, and the one each thread's open snapshot holds.
        self._idle_readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self._local = threading.local()
        self._trace: Callable[[str], object] | None = None  # ``set_trace_callback``'s, for new readers
        # Best-effort commits since this connection last checkpointed (``transaction``): the
        # owner hands a checkpoint to a background thread every ``LAZY_CHECKPOINT_COMMITS``.
        self.lazy_commits = 0
        # How deep this connection's open ``transaction`` blocks are (read under the lock: only
        # the thread holding it changes it); an inner block joins the outer one.
        self._write_depth = 0
        refuse_empty_file(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                str(self.path),
                factory=Connection,  # can carry the guard of the owners' table handles
                timeout=busy_timeout_s,
                isolation_level=None,  # autocommit: transactions are explicit BEGIN IMMEDIATE
                check_same_thread=False,
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from None
        self.conn: sqlite3.Connection = conn
        try:
            with self.translated(f"cannot use database {self.path}"):
                self._configure()
                self._migrate()
                self._opened()
        except StoreError:
            conn.close()
            raise

    @cached_property
    def db(self) -> "sqlite_utils.Database":
        """A sqlite_utils view of the connection (made on first use: importing sqlite_utils
        loads its plugins, which a fresh process answering one recall should not pay for)."""
        database: sqlite_utils.Database = import_sqlite_utils().Database(self.conn)
        return database

    def _configure(self) -> None:
        c = self.conn
        c.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.DatabaseError(f"could not switch to WAL journal (got {mode})")
        # FULL: in WAL mode the commit fsyncs the log, so an acknowledged save survives power loss.
        c.execute("PRAGMA synchronous = FULL")
        c.execute("PRAGMA foreign_keys = ON")

    def _migrate(self) -> None:
        """Bring ``migration_sets`` (the subclass's own tables) up to date."""
        from .migrations import LEGACY_VERSION, run

        if not self.migration_sets:
            return
        current = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if current > LEGACY_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {current} is newer than this memlocal ({LEGACY_VERSION}); upgrade memlocal"
            )
        run(self, self.migration_sets, legacy_version=LEGACY_VERSION)

    def migrate(self, migrations: "MigrationSet") -> None:
        """Bring one more migration set (an optional package's own tables) up to date; cheap
        when it is current. ``StoreError`` when the database cannot be written."""
        from .migrations import run

        with self.translated(f"cannot migrate {migrations.name} in {self.path}"):
            run(self, (migrations,))

    @contextmanager
    def own_tables(self, owner: "MigrationSet", *, write: bool = False) -> Iterator[TableHandle]:
        """A handle on ``owner``'s tables (and reads of its ``reads``): the one way a library
        module that owns tables (the audit trail, the semantic vectors, an integration's
        ``LocalTable``) runs its statements on them (docs/storage.md, "Migrations"). A statement
        on any other table is refused by SQLite. With ``write``, inside one transaction
        (committed at the block's end); without, reads only, on the connection :meth:`reading`
        chooses, each statement its own read transaction as with :meth:`read` (inside a
        :meth:`snapshot` of this thread, that snapshot's). Errors are translated as
        :meth:`read`'s."""
        with self.transaction() if write else self.reading() as conn:
            handle = TableHandle(conn, frozenset(owner.tables), write=write, reads=frozenset(owner.reads))
            try:
                if write:
                    yield handle
                else:
                    with self.translated():
                        yield handle
            finally:
                handle.close()

    def _opened(self) -> None:
        """Hook run once the schema is current (a subclass's checks on open)."""

    def close(self) -> None:
        with self._readers_lock:
            self._closed = True
            idle, self._idle_readers = self._idle_readers, []
        for reader in idle:
            reader.close()
        with self._lock:
            try:
                self.conn.close()
            except sqlite3.Error:
                pass

    # --- the read pool ------------------------------------------------------------------------

    def _take_reader(self) -> sqlite3.Connection:
        """An idle read connection of the pool, or a new one (:meth:`_open_reader`)."""
        with self._readers_lock:
            if self._idle_readers:
                return self._idle_readers.pop()
        return self._open_reader()

    def _open_reader(self) -> sqlite3.Connection:
        """A new read-only (``query_only``) connection to this file, traced as the others are."""
        with self.translated(f"cannot open database {self.path}"):
            conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout_s, isolation_level=None,
                                   check_same_thread=False, factory=Connection)
        try:
            with self.translated(f"cannot use database {self.path}"):
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
                conn.execute("PRAGMA query_only = ON")
                conn.set_trace_callback(self._trace)
        except StoreError:
            conn.close()
            raise
        return conn

    def set_trace_callback(self, callback: Callable[[str], object] | None) -> None:
        """``sqlite3.Connection.set_trace_callback`` on every connection of this store, the read
        pool's included (tests count the statements a call runs, wherever they run)."""
        with self._readers_lock:
            self._trace = callback
            readers = list(self._idle_readers)
        for conn in (self.conn, *readers):
            conn.set_trace_callback(callback)

    def _give_reader(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                conn.close()
                return
        conn.set_trace_callback(self._trace)  # as the store's is now
        with self._readers_lock:
            if not self._closed and len(self._idle_readers) < READ_POOL_IDLE:
                self._idle_readers.append(conn)
                return
        conn.close()

    def _writing(self) -> bool:
        """Whether this thread holds the store's lock (inside ``transaction`` or a block of the
        subclass under the lock): its reads then go to the writer's connection."""
        return bool(self._lock._is_owned())  # type: ignore[attr-defined]

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection a read of this thread uses now, for a few statements: the one of this
        thread's open ``snapshot``; the writer's, when this thread holds the store's lock (it sees
        its own uncommitted writes); else one of the read pool (each statement its own read
        transaction, unless the caller begins one). Never write on it."""
        held: sqlite3.Connection | None = getattr(self._local, "snapshot", None)
        if held is not None:
            yield held
            return
        if self._writing():
            with self._lock:
                yield self.conn
            return
        conn = self._take_reader()
        try:
            yield conn
        finally:
            self._give_reader(conn)

    # --- transactions -------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """An immediate write transaction. SQLite's ``busy_timeout`` is the one wait for another
        process's lock; past it the write fails with ``StoreError`` (no retry loop on top, which
        would make a writer wait a multiple of the setting).

        ``durable=False`` commits without the fsync (``synchronous=NORMAL`` for this one
        transaction): in WAL mode the database stays consistent and every reader sees the commit
        at once, but a power cut may undo it. Only for best-effort writes (access bumps); the next
        durable commit fsyncs the log, these frames included. Nor does it checkpoint the log
        (SQLite would, inline, every thousand pages: the slowest recalls were those commits);
        ``lazy_commits`` counts them for the owner to run :meth:`checkpoint` off the caller's path.

        Inside a transaction of this thread the block joins it (``durable`` is the outer one's):
        nothing is committed or rolled back at its end, and an error it raises goes on to the
        outer block, which rolls the whole back unless the caller handles it (a failed statement
        itself undoes only its own changes, so a caller may go on after a constraint error).
        A save runs its checks and its insert so, in one transaction (:meth:`MemoryBank.save`)."""
        with self._lock:
            if self._write_depth:
                self._write_depth += 1
                try:
                    yield self.conn
                finally:
                    self._write_depth -= 1
                return
            # 1 is NORMAL; a connection already on NORMAL (the background marker's) is left as is.
            relax = not durable and self.conn.execute("PRAGMA synchronous").fetchone()[0] != 1
            if relax:
                self.conn.execute("PRAGMA synchronous = NORMAL")
            if not durable:
                self.conn.execute("PRAGMA wal_autocheckpoint = 0")
            try:
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) and "busy" not in str(exc):
                        raise self.translate(exc) from None
                    raise StoreError(
                        f"database {self.path} stayed locked by another process for store.busy_timeout_s "
                        f"({self.busy_timeout_s:g} s)"
                    ) from None
                self._write_depth = 1
                try:
                    yield self.conn
                    self.conn.execute("COMMIT")
                except BaseException as exc:
                    if self.conn.in_transaction:
                        try:
                            self.conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass  # SQLite rolled back already (a failed COMMIT on a full disk)
                    if isinstance(exc, sqlite3.Error):
                        raise self.translate(exc) from None
                    raise
            finally:
                self._write_depth = 0
                if relax:
                    self.conn.execute("PRAGMA synchronous = FULL")
                if not durable:
                    self.conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}")
                    self.lazy_commits += 1

    def checkpoint(self) -> None:
        """Copy the log's committed pages into the database file, without waiting for readers
        or writers (a PASSIVE checkpoint): what the best-effort commits left to do."""
        with self._lock:
            self.lazy_commits = 0
            with self.translated(f"cannot checkpoint {self.path}"):
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def iter_rows(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of one query, fetched ``ITER_PAGE_ROWS`` at a time from a cursor on a
        connection of their own, in one read snapshot (every row as of the first fetch).

        A caller walking a huge table (an export) never holds it all, and neither holds this
        store's lock between rows: the store stays usable, and writable, meanwhile (a WAL reader
        does not block the writer). The connection closes when the iteration ends or the
        iterator is dropped. Sees committed rows only."""
        conn = self._open_reader()
        try:
            with self.translated():
                conn.execute("BEGIN")  # one snapshot for every page
                cursor = conn.execute(sql, params)
                while rows := cursor.fetchmany(ITER_PAGE_ROWS):
                    yield from rows
        finally:
            conn.close()

    def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one query (on the connection :meth:`reading` chooses; its choice made here
        without the context manager: a save's duplicate look-up is one of these per save)."""
        try:
            conn: sqlite3.Connection | None = getattr(self._local, "snapshot", None)
            if conn is not None:
                return conn.execute(sql, params).fetchall()
            if self._writing():
                with self._lock:
                    return self.conn.execute(sql, params).fetchall()
            conn = self._take_reader()
            try:
                return conn.execute(sql, params).fetchall()
            finally:
                self._give_reader(conn)
        except sqlite3.Error as exc:
            raise self.translate(exc) from None

    def translate(self, exc: sqlite3.Error, failure: str | None = None) -> Exception:
        """The one translation of SQLite's errors, which every method here raises through: a
        failure of the file or the disk as :func:`database_error` (full, corrupt, unwritable, a
        table missing); any other as ``StoreError("<failure>: <SQLite's words>")`` when the caller
        says what failed, else ``exc`` itself, whose meaning is the caller's (a constraint, a
        query FTS5 cannot parse, a feature probe)."""
        error = database_error(self.path, exc)
        if error is not None:
            return error
        if failure is not None:
            return StoreError(f"{failure}: {fold_whitespace(exc)}")
        return exc

    @contextmanager
    def translated(self, failure: str | None = None) -> Iterator[None]:
        """:meth:`translate` over a block: for queries on ``conn`` outside ``transaction``,
        ``read`` and ``snapshot`` (which translate their own), and for a module that reads the
        store's tables itself (``failure``: what it was doing, as the one line begins)."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self.translate(exc, failure) from None

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same committed state (WAL snapshot),
        the ``read`` calls of this thread included. On a connection of the read pool, without the
        store's lock: writers (of this process too) go on meanwhile, unseen. Inside a write of this
        thread (it holds the lock), the writer's own transaction. Read-only: never write in it."""
        if getattr(self._local, "snapshot", None) is not None:
            yield self._local.snapshot  # already inside one
            return
        if self._writing():
            with self._lock:
                if self.conn.in_transaction:  # already inside a transaction of this connection
                    yield self.conn
                    return
                self.conn.execute("BEGIN")
                try:
                    with self.translated():
                        yield self.conn
                finally:
                    _end_read(self.conn)
            return
        conn = self._take_reader()
        try:
            with self.translated():
                conn.execute("BEGIN")
            self._local.snapshot = conn
            try:
                with self.translated():
                    yield conn
            finally:
                self._local.snapshot = None
                _end_read(conn)
        finally:
            self._give_reader(conn)

    # --- key/value metadata -------------------------------------------------------------------

    def meta_get(self, key: str) -> str | None:
        rows = self.read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def meta_set(self, key: str, value: str) -> None:
        with self.transaction() as c:
            set_meta(c, key, value)

    def integrity_check(self) -> str:
        return str(self.read("PRAGMA integrity_check")[0][0])


def _end_read(conn: sqlite3.Connection) -> None:
    """End a read transaction (it has nothing to lose: rolled back if the commit fails)."""
    if conn.in_transaction:
        try:
            conn.execute("COMMIT")
        except sqlite3.Error:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    """Write one ``meta`` entry inside the caller's write transaction."""
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                 (key, value))
