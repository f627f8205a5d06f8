"""The SQLite file itself: the connection, its transactions, the ``meta`` key/value table and
the schema's migrations (run by :mod:`memlocal.store.migrations`).

Decisions:
- WAL journal with ``synchronous=FULL``: a commit is fsynced before ``save`` returns, and readers
  never block the writer.
- The connection runs in autocommit mode and every write is an explicit ``BEGIN IMMEDIATE``
  transaction, so a writer takes the lock up front (no deadlock-prone lock upgrades) and waits
  ``busy_timeout`` (``store.busy_timeout_s``) for other processes; past that the write fails
  with one line saying so.
- Schema changes are named migration sets, one per owner (``memlocal/store/schemas/``), each
  versioned by its own stamp in ``meta`` (docs/storage.md, "Migrations").
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Iterator, Sequence

from ..errors import CorruptDatabaseError, DiskFullError, StoreError, fold_whitespace

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
# Best-effort commits (access bumps, about 15 pages each) between two checkpoints run off the
# caller's path (``Database.lazy_commits``): about ``WAL_AUTOCHECKPOINT`` pages.
LAZY_CHECKPOINT_COMMITS: Final = 64


_SQLITE_ERROR: Final = 1  # SQLITE_ERROR: a generic error, "no such table" among them


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
        return CorruptDatabaseError(
            f"database {path} is corrupt: {detail}; restore it from a backup (`sqlite3 {path.name} .recover` "
            "saves what is readable), or move it aside and pull the bucket with `memlocal sync run`")
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

    One connection per ``Database``; a re-entrant lock makes it usable from the background thread
    that marks memories accessed.
    """

    # The migration sets run on open, in order (a subclass names its tables' sets).
    migration_sets: tuple[MigrationSet, ...] = ()

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        # Best-effort commits since this connection last checkpointed (``transaction``): the
        # owner hands a checkpoint to a background thread every ``LAZY_CHECKPOINT_COMMITS``.
        self.lazy_commits = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                str(self.path),
                timeout=busy_timeout_s,
                isolation_level=None,  # autocommit: transactions are explicit BEGIN IMMEDIATE
                check_same_thread=False,
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from None
        self.conn = conn
        try:
            self._configure()
            self._migrate()
            self._opened()
        except StoreError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise database_error(self.path, exc) or StoreError(f"cannot use database {self.path}: {exc}") from None

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

        try:
            run(self, (migrations,))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot migrate {migrations.name} in {self.path}: {exc}") from None

    def _opened(self) -> None:
        """Hook run once the schema is current (a subclass's checks on open)."""

    def close(self) -> None:
        with self._lock:
            try:
                self.conn.close()
            except sqlite3.Error:
                pass

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
        ``lazy_commits`` counts them for the owner to run :meth:`checkpoint` off the caller's path."""
        with self._lock:
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
                        raise database_error(self.path, exc) or exc from None
                    raise StoreError(
                        f"database {self.path} stayed locked by another process for store.busy_timeout_s "
                        f"({self.busy_timeout_s:g} s)"
                    ) from None
                try:
                    yield self.conn
                    self.conn.execute("COMMIT")
                except BaseException as exc:
                    if self.conn.in_transaction:
                        try:
                            self.conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass  # SQLite rolled back already (a failed COMMIT on a full disk)
                    error = database_error(self.path, exc)
                    if error is not None:
                        raise error from None
                    raise
            finally:
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
            try:
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error as exc:
                raise database_error(self.path, exc) or StoreError(f"cannot checkpoint {self.path}: {exc}") from None

    def iter_rows(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of one query, fetched ``ITER_PAGE_ROWS`` at a time from a cursor on a
        connection of their own, in one read snapshot (every row as of the first fetch).

        A caller walking a huge table (an export) never holds it all, and neither holds this
        store's lock between rows: the store stays usable, and writable, meanwhile (a WAL reader
        does not block the writer). The connection closes when the iteration ends or the
        iterator is dropped. Sees committed rows only."""
        try:
            conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise database_error(self.path, exc) or StoreError(f"cannot open database {self.path}: {exc}") from None
        try:
            with self.translated():
                conn.execute("PRAGMA query_only = ON")
                conn.execute("BEGIN")  # one snapshot for every page
                cursor = conn.execute(sql, params)
                while rows := cursor.fetchmany(ITER_PAGE_ROWS):
                    yield from rows
        finally:
            conn.close()

    def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self.conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise database_error(self.path, exc) or exc from None

    @contextmanager
    def translated(self) -> Iterator[None]:
        """SQLite's failures of the file or the disk, met in the block, as :func:`database_error`
        (for queries on ``conn`` outside ``transaction``, ``read`` and ``snapshot``, which do it)."""
        try:
            yield
        except sqlite3.Error as exc:
            error = database_error(self.path, exc)
            if error is None:
                raise
            raise error from None

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same committed state (WAL snapshot)."""
        with self._lock:
            if self.conn.in_transaction:  # already inside a transaction of this connection
                yield self.conn
                return
            self.conn.execute("BEGIN")
            try:
                with self.translated():
                    yield self.conn
            finally:
                if self.conn.in_transaction:
                    try:
                        self.conn.execute("COMMIT")
                    except sqlite3.Error:  # a read transaction has nothing to lose: end it anyway
                        try:
                            self.conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass

    # --- key/value metadata -------------------------------------------------------------------

    def meta_get(self, key: str) -> str | None:
        rows = self.read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def meta_set(self, key: str, value: str) -> None:
        with self.transaction() as c:
            set_meta(c, key, value)

    def integrity_check(self) -> str:
        return str(self.read("PRAGMA integrity_check")[0][0])


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    """Write one ``meta`` entry inside the caller's write transaction."""
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                 (key, value))
