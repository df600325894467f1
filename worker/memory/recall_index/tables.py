"""The recall index's tables, written.

One transaction at a time, a source's rows inserted and dropped (with their day ranges), and the files as last read."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date as Date

from nanobot_hooks.contract.recall import (
    BLOCK_BYTES,
    NOTE_LINE_BITS,
    SOURCE_BITS,
    Passage,
    directory,
    index_text,
    pack,
    unpack,
)
from worker.memory.recall_index.rows import Row

FULL = (1 << SOURCE_BITS) - 1


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    if db.in_transaction:
        yield  # a part of the caller's transaction
        return
    db.execute("BEGIN IMMEDIATE")  # the write lock first: what we read stays true until we commit
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def is_damaged(exc: sqlite3.DatabaseError) -> bool:
    # OperationalError (locked, busy, disk full) is trouble of the moment; a bare DatabaseError is the file.
    return type(exc) is sqlite3.DatabaseError


def source_id(db: sqlite3.Connection, kind: str, session: str) -> int:
    db.execute("INSERT OR IGNORE INTO sources(kind, session) VALUES(?, ?)", (kind, session))
    return int(db.execute("SELECT id FROM sources WHERE kind = ? AND session = ?", (kind, session)).fetchone()[0])


def known(db: sqlite3.Connection, name: str) -> tuple[int, int] | None:
    row = db.execute("SELECT size, mtime_ns FROM files WHERE name = ?", (name,)).fetchone()
    return (row[0], row[1]) if row else None


def remember(db: sqlite3.Connection, name: str, size: int, mtime_ns: int) -> None:
    db.execute("INSERT OR REPLACE INTO files(name, size, mtime_ns) VALUES(?, ?, ?)", (name, size, mtime_ns))


def note_counts(db: sqlite3.Connection, day: str, sessions: set[str]) -> dict[str, int]:
    """How many lines each of these sessions has indexed from one day file (positions count from 0)."""
    first = Date.fromisoformat(day).toordinal() << NOTE_LINE_BITS
    counts = {}
    for session in sessions:
        row = db.execute(
            "SELECT days.high FROM sources JOIN days ON days.source = sources.id WHERE sources.kind = "
            "'notes' AND sources.session = ? AND days.day = ?",
            (session, day),
        ).fetchone()
        if row is not None:
            counts[session] = (row[0] & FULL) - first + 1
    return counts


def insert(db: sqlite3.Connection, source: int, rows: Sequence[Row]) -> None:
    """A source's rows, after those it holds (or in place of rows dropped): their words, and their text in blocks."""
    base = source << SOURCE_BITS
    db.executemany(
        "INSERT INTO passages(rowid, terms) VALUES(?, ?)", [(base | r.position, index_text(r.body)) for r in rows]
    )
    for block in _blocks(rows):
        _put(db, {base | r.position: Passage(r.body, r.day, r.at, r.label) for r in block})
    # Each day's positions: a date range becomes a rowid range that FTS5 filters by itself.
    db.executemany(
        "INSERT INTO days(source, day, low, high) VALUES(?, ?, ?, ?) ON CONFLICT(source, day) "
        "DO UPDATE SET low = min(low, excluded.low), high = max(high, excluded.high)",
        [(source, r.day, r.position, r.position) for r in rows if r.day],
    )


def _put(db: sqlite3.Connection, passages: dict[int, Passage]) -> None:
    """One block, named by its first rowid (blocks.id)."""
    first = min(passages)
    db.execute(
        "INSERT INTO blocks(id, last, n, lengths, passages) VALUES(?, ?, ?, ?, ?)",
        (first, max(passages), len(passages), directory(first, passages), pack(passages)),
    )


def _blocks(rows: Sequence[Row]) -> Iterator[Sequence[Row]]:
    """The rows in runs of about BLOCK_BYTES of text, each compressed as one block."""
    start = size = 0
    for end, row in enumerate(rows, start=1):
        size += len(row.body)
        if size >= BLOCK_BYTES:
            yield rows[start:end]
            start, size = end, 0
    if start < len(rows):
        yield rows[start:]


def drop(db: sqlite3.Connection, source: int, low: int = 0, high: int = FULL) -> None:
    """Forget a source's positions [low, high].

    The index holds no copy of a passage's words: each is taken out with the words it was indexed from (its text, from
    its block); the block keeps the passages outside."""
    base = source << SOURCE_BITS
    first, last = base | low, base | high
    # The blocks that begin in the range, and the one before it when it reaches into the range.
    held = db.execute(
        "SELECT id, passages FROM blocks WHERE id BETWEEN ? AND ? UNION ALL "
        "SELECT id, passages FROM blocks WHERE id = (SELECT max(id) FROM blocks WHERE id < ?) "
        "AND last >= ?",
        (first, last, first, first),
    ).fetchall()
    for number, packed in held:
        passages = unpack(packed)
        db.executemany(
            "INSERT INTO passages(passages, rowid, terms) VALUES('delete', ?, ?)",
            [(rowid, index_text(p.body)) for rowid, p in passages.items() if first <= rowid <= last],
        )
        db.execute("DELETE FROM blocks WHERE id = ?", (number,))
        kept = {rowid: p for rowid, p in passages.items() if not first <= rowid <= last}
        if kept:  # named again by its first passage left, so that blocks never overlap
            _put(db, kept)
    db.execute("DELETE FROM vectors WHERE rowid BETWEEN ? AND ?", (first, last))
    db.execute("DELETE FROM days WHERE source = ? AND low >= ? AND high <= ?", (source, low, high))
