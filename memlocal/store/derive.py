"""What the store derives from a memory's text, for every row at once: the recall features
(:mod:`memlocal.relevance.features`) and the duplicate keys (:func:`memlocal.hygiene.rules.text_key`,
:func:`memlocal.hygiene.rules.near_key`). Run by migrations and by the store when the tokenizer or the
key functions changed, inside the caller's write transaction."""

from __future__ import annotations

import sqlite3

from ..hygiene.rules import near_key, text_key
from .database import set_meta


def derive_features(conn: sqlite3.Connection, profile: str | None = None) -> int:
    """Derive the features of every memory (of ``profile``) that has none yet; inside the
    caller's write transaction. Returns how many rows were derived."""
    from ..relevance.features import features_of

    sql = "SELECT rowid, processed_content, summary FROM memories WHERE features IS NULL"
    rows = conn.execute(sql + (" AND profile = ?" if profile is not None else ""),
                        (profile,) if profile is not None else ()).fetchall()
    conn.executemany("UPDATE memories SET features = ? WHERE rowid = ?",
                     [(features_of(pc, sm), rid) for rid, pc, sm in rows])
    if profile is None:
        _stamp_features(conn)
    return len(rows)


def derive_near_keys(conn: sqlite3.Connection) -> None:
    """Set every memory's :func:`memlocal.hygiene.rules.near_key` (migration 9, and again whenever the
    tokenizer changes); inside the caller's write transaction."""
    rows = conn.execute("SELECT id, processed_content FROM memories").fetchall()
    conn.executemany("UPDATE memories SET near_key = ? WHERE id = ?", [(near_key(p), i) for i, p in rows])


def derive_text_keys(conn: sqlite3.Connection) -> None:
    """Set every memory's exact and near duplicate keys (``text_key``, ``raw_key``, ``near_key``)
    and stamp them with :func:`memlocal.hygiene.rules.keys_fingerprint` (whenever the key functions
    change); inside the caller's write transaction."""
    from ..hygiene.rules import KEYS_META_KEY, keys_fingerprint

    rows = conn.execute("SELECT id, raw_input, processed_content FROM memories").fetchall()
    conn.executemany("UPDATE memories SET text_key = ?, raw_key = ?, near_key = ? WHERE id = ?",
                     [(text_key(p), text_key(r) if r != p else None, near_key(p), i) for i, r, p in rows])
    set_meta(conn, KEYS_META_KEY, keys_fingerprint())


def _stamp_features(conn: sqlite3.Connection) -> None:
    from ..relevance.features import FEATURES_META_KEY, fingerprint

    set_meta(conn, FEATURES_META_KEY, fingerprint())
