"""The injection audit trail: which memories each rendered block carried, kept locally.

Every memory block rendered for a run (``MemoryBank.build_context_block``, and so ``inject`` and
the MCP ``memory_context`` prompt) records when, which profile, which memory ids in which tier, the
block's size in characters, and a hash of the query: never the query or prompt text, which may
hold what the memories must not. The record is written on the same background connection as the
access marks (``memlocal.store.access.AccessMarker``), so a run never waits for it.

Decisions:
- The query hash is the first 16 hex digits of HMAC-SHA-256 over the query's UTF-8 bytes, keyed
  by a per-host secret kept beside the database (``<db>.audit-key``, 0600): equal queries can be
  recognised across runs, the text cannot be read back, and a guessed query cannot be confirmed
  from the database alone (a copy, a backup). Rows written before the key keep their plain
  SHA-256 prefix; they stay readable, and simply match no new row.
- A block with no memory in it is recorded too (size 0): "what did the last run see?" can be
  "nothing". Previews (the dashboard's injection preview) are not runs and are not recorded.
- Retention: rows older than ``audit.retention_days`` and beyond the newest ``audit.max_rows`` are
  deleted as new rows are written (0 turns that rule off); ``audit.enabled = false`` records none.
- The trail is local to the host that rendered the block; it is not synced.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Sequence

from ..model import format_time, validate_id, validate_profile
from ..store import Store, from_us, to_us
from ..store.schemas import AUDIT

if TYPE_CHECKING:
    from ..store.tables import TableHandle

log = logging.getLogger(__name__)

# The host's audit key: a file beside the database (``<db>.audit-key``), random, 0600.
KEY_SUFFIX: Final = ".audit-key"
KEY_BYTES: Final = 32


def key_path(db_path: Path) -> Path:
    """Where the audit key of the database ``db_path`` lives (beside it)."""
    return db_path.with_name(db_path.name + KEY_SUFFIX)


def host_key(db_path: Path) -> bytes:
    """The audit key of the database ``db_path``, created on first use.

    Created once, atomically: the random bytes go to a private temporary file (0600, fsynced),
    which is then hard-linked to the key's name; a link never replaces an existing file, so when
    several processes create it at once the first link wins and every process reads that one.
    ``OSError`` when it can neither be read nor created (a read-only folder).
    """
    path = key_path(db_path)
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process linked its key first: that one is the host's
    finally:
        tmp.unlink(missing_ok=True)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    key = path.read_bytes()
    if len(key) < 16:
        raise OSError(f"the audit key {path} is damaged ({len(key)} bytes): delete it to make a new one")
    return key


def query_hash(query: str, key: bytes) -> str:
    """The audit's stand-in for a query: 16 hex digits of HMAC-SHA-256 under the host's key, so
    that someone holding the database but not the key cannot confirm a guessed query."""
    return hmac.new(key, query.encode("utf-8"), hashlib.sha256).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class InjectionRecord:
    """What the background writer stores for a rendered block (see :func:`record`)."""

    at: datetime
    profile: str
    query_hash: str
    chars: int
    core: tuple[str, ...]
    relevant: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Injection(InjectionRecord):
    """One rendered block as stored: its record, with the row's id."""

    id: int

    def tier_of(self, memory_id: str) -> str | None:
        return "core" if memory_id in self.core else "relevant" if memory_id in self.relevant else None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": format_time(self.at), "profile": self.profile, "queryHash": self.query_hash,
                "chars": self.chars, "core": list(self.core), "relevant": list(self.relevant)}


def record(store: Store, rec: InjectionRecord, *, max_rows: int, retention_days: float) -> int:
    """Store one record and apply the cap and the retention, in one transaction; its row id."""
    with store.own_tables(AUDIT, write=True) as t:
        t.execute("INSERT INTO injections (at_us, profile, query_hash, chars) VALUES (?, ?, ?, ?)",
                  (to_us(rec.at), rec.profile, rec.query_hash, rec.chars))
        row_id = int(t.execute("SELECT last_insert_rowid()")[0][0] or 0)
        t.executemany(
            "INSERT OR IGNORE INTO injection_memories (injection_id, memory_id, tier, rank) VALUES (?, ?, ?, ?)",
            [(row_id, mid, tier, rank) for tier, ids in (("core", rec.core), ("relevant", rec.relevant))
             for rank, mid in enumerate(ids)],
        )
        _prune(t, row_id, max_rows=max_rows, retention_days=retention_days, now=rec.at)
    return row_id


def _prune(t: TableHandle, newest: int, *, max_rows: int, retention_days: float, now: datetime) -> None:
    # Ids only grow, and rows only go from the oldest end, so "id <= newest - max_rows" keeps
    # exactly the newest max_rows rows; both deletes use an index and usually remove 0 or 1 row.
    if max_rows > 0:
        t.execute("DELETE FROM injections WHERE id <= ?", (newest - max_rows,))
    if retention_days > 0:
        t.execute("DELETE FROM injections WHERE at_us < ?", (to_us(now - timedelta(days=retention_days)),))


def _load(t: TableHandle, rows: Sequence[tuple[Any, ...]]) -> list[Injection]:
    if not rows:
        return []
    ids = [r[0] for r in rows]
    members: dict[Any, dict[str, list[str]]] = {i: {"core": [], "relevant": []} for i in ids}
    for injection_id, memory_id, tier in t.execute(
        f"SELECT injection_id, memory_id, tier FROM injection_memories WHERE injection_id IN"
        f" ({', '.join('?' for _ in ids)}) ORDER BY injection_id, tier, rank", ids
    ):
        tiers = members.get(injection_id, {})
        if tier in tiers and isinstance(memory_id, str):
            tiers[tier].append(memory_id)
    out = []
    for i, at, p, h, n in rows:
        # A row another tool damaged (a time that is not a number, a foreign tier) is left out
        # of the answer, never the reason there is none.
        if not (isinstance(i, int) and isinstance(at, int) and isinstance(p, str) and isinstance(n, int)):
            log.warning("audit row %r is damaged: skipped", i)
            continue
        try:
            when = from_us(at)
        except (OverflowError, ValueError):
            log.warning("audit row %r has an impossible time: skipped", i)
            continue
        out.append(Injection(when, p, h if isinstance(h, str) else "", n,
                             tuple(members[i]["core"]), tuple(members[i]["relevant"]), id=i))
    return out


def injections(store: Store, profile: str, *, memory_id: str | None = None, limit: int = 20) -> list[Injection]:
    """The profile's rendered blocks, newest first; with ``memory_id``, only those that carried it.
    Damaged rows are skipped; tables that cannot be read at all raise one ``StoreError``."""
    validate_profile(profile)
    if memory_id is not None:
        validate_id(memory_id)
    # A table dropped or altered by another tool is one StoreError.
    with store.translated(f"the audit trail of {store.path} cannot be read"), store.own_tables(AUDIT) as t:
        if memory_id is not None:
            rows = t.execute(
                "SELECT i.id, i.at_us, i.profile, i.query_hash, i.chars FROM injection_memories m"
                " JOIN injections i ON i.id = m.injection_id WHERE m.memory_id = ? AND i.profile = ?"
                " ORDER BY i.id DESC LIMIT ?", (memory_id, profile, limit))
        else:
            rows = t.execute("SELECT id, at_us, profile, query_hash, chars FROM injections WHERE profile = ?"
                             " ORDER BY id DESC LIMIT ?", (profile, limit))
        return _load(t, rows)


def profiles(store: Store) -> list[tuple[Any, ...]]:
    """Every row's id and profile name, as stored: all of the trail that is text
    (``memlocal.bank.rescan``)."""
    with store.own_tables(AUDIT) as t:
        return t.execute("SELECT id, profile FROM injections")


def rename_profiles(store: Store, renamed: Sequence[tuple[str, int]]) -> None:
    """Set the profile name of rows: ``(name, row id)`` pairs, in one transaction (a rescan's
    redaction of a name)."""
    with store.own_tables(AUDIT, write=True) as t:
        t.executemany("UPDATE injections SET profile = ? WHERE id = ?", renamed)
