"""The sessions' archived messages in the recall index.

A job's session up to its watermark, in resumable steps, and the sweep over every session file that changed (files that
went are forgotten), and over the copies of what sessions held before `/new` (each a source of its own,
`contract.retired_source`)."""

from __future__ import annotations

import logging
import sqlite3
from datetime import tzinfo
from pathlib import Path

from nanobot_hooks.contract.recall import retired_source
from nanobot_hooks.contract.session_format import is_internal_session, storage_name, timestamp_before
from worker.errors import SessionError
from worker.memory.recall_index.forget import Tombstones, unforgotten
from worker.memory.recall_index.rows import archived_through, message_rows
from worker.memory.recall_index.tables import drop, insert, known, remember, source_id, transaction
from worker.nanobot.sessions import (
    Retired,
    SessionFile,
    held_end,
    list_session_keys,
    read_session,
    read_window,
    retired_files,
    session_path,
)
from worker.text.prepare import Lines

log = logging.getLogger("worker.memory.recall_index")

MESSAGES_PER_TRANSACTION = 2_000  # a long history is indexed in steps: short write locks, resumable
# A history the read does not hold is read in windows of about this many bytes of lines: a 200 MB session's
# first fill holds one window's messages at a time, never the whole file's (each window read on from where the
# one before ended, while the file is the same: the file is read once).
WINDOW_BYTES = 4 * 2**20


def sweep(
    db: sqlite3.Connection, sessions_dir: Path, skip: str | None, tz: tzinfo | None, forgotten: Tombstones | None = None
) -> int:
    """Every session whose file changed since it was last read here; files that went are forgotten.

    `forgotten`: the tombstones of the message passages the user forgot everywhere (forget.py), never indexed again."""
    added = 0
    keys = list_session_keys(sessions_dir)
    kept = {retired_source(copy.key, copy.name): copy for copy in retired_files(sessions_dir, noted=True)}
    if sessions_dir.is_dir():  # an unreachable folder is not a folder emptied
        _forget_gone(db, keys + list(kept), skip)
    added += _sweep_retired(db, kept, skip, tz, forgotten)
    for key in keys:
        if key == skip or is_internal_session(key):
            continue
        try:
            path = session_path(sessions_dir, key)
            seen = path.stat()
            name = f"sessions/{path.name}"
            if known(db, name) == (seen.st_size, seen.st_mtime_ns):
                continue
            session = read_session(sessions_dir, key, from_watermark=True)  # the rest in windows
        except (SessionError, OSError) as exc:
            log.warning("recall index: session %s not indexed: %s", key, exc)
            continue
        added += sync_session(db, session, archived_through(session), tz, forgotten=forgotten)
        # The size and time from before the read: a change during it is read again next time.
        with transaction(db):
            remember(db, name, seen.st_size, seen.st_mtime_ns)
    return added


def _sweep_retired(
    db: sqlite3.Connection, kept: dict[str, Retired], skip: str | None, tz: tzinfo | None, forgotten: Tombstones | None
) -> int:
    """What sessions held before `/new` (the copies the hooks keep), each indexed once, whole."""
    added = 0
    for name, copy in kept.items():
        try:
            seen = copy.path.stat()
            if name == skip or known(db, f"retired/{copy.name}") == (seen.st_size, seen.st_mtime_ns):
                continue
            session = copy.read(as_key=name, hold_bytes=WINDOW_BYTES)  # the rest in windows
        except (SessionError, OSError) as exc:
            log.warning("recall index: %s not indexed: %s", copy.name, exc)
            continue
        added += sync_session(db, session, len(session.messages), tz, forgotten=forgotten)
        with transaction(db):
            remember(db, f"retired/{copy.name}", seen.st_size, seen.st_mtime_ns)
    return added


def _forget_gone(db: sqlite3.Connection, keys: list[str], skip: str | None) -> None:
    present = set(keys)  # the sweep's keys: thousands on a busy host, looked up once per indexed session
    for source, key in db.execute("SELECT id, session FROM sources WHERE kind = 'messages'").fetchall():
        if key not in present and key != skip:
            with transaction(db):
                drop(db, source)
                db.execute("UPDATE sources SET through = 0, stamp = NULL WHERE id = ?", (source,))
                db.execute("DELETE FROM files WHERE name = ?", (f"sessions/{storage_name(key)}",))


def sync_session(
    db: sqlite3.Connection,
    session: SessionFile,
    through: int,
    tz: tzinfo | None,
    lines: Lines | None = None,
    forgotten: Tombstones | None = None,
) -> int:
    """Messages [indexed, through) of the session, but those forgotten everywhere (`forgotten`: their tombstones).

    A session that was reset (`/new`) is indexed anew. What the read does not hold (the job's read starts at nanobot's
    watermark) is read in windows of WINDOW_BYTES."""
    added = 0
    while True:
        with transaction(db):
            source = source_id(db, "messages", session.key)
            done, stamp = db.execute("SELECT through, stamp FROM sources WHERE id = ?", (source,)).fetchone()
            session = _holding(session, done)
            messages = session.messages
            if done > len(messages) or (done and timestamp_before(messages, done) != stamp):
                drop(db, source)
                done = 0
                session = _holding(session, done)  # reset (`/new`): indexed anew from its first message
                messages = session.messages
            through = min(through, len(messages))  # a window read later may find the file shorter
            if through <= done:
                db.execute(
                    "UPDATE sources SET through = ?, stamp = ? WHERE id = ?",
                    (done, timestamp_before(messages, done), source),
                )
                return added
            end = min(through, done + MESSAGES_PER_TRANSACTION, held_end(messages))
            rows = unforgotten(
                message_rows(messages, done, end, tz, lines),
                forgotten.current() if forgotten is not None else frozenset(),
            )
            insert(db, source, rows)
            db.execute(
                "UPDATE sources SET through = ?, stamp = ? WHERE id = ?", (end, timestamp_before(messages, end), source)
            )
            added += len(rows)
            if end >= through:
                return added
        if db.in_transaction:  # the caller's transaction: each step is committed as it would be alone
            db.execute("COMMIT")
            db.execute("BEGIN IMMEDIATE")


def _holding(session: SessionFile, done: int) -> SessionFile:
    """The session holding message `done - 1` (its timestamp checks the indexed part) and the ones after it.

    As read, or the next window of the file (read again: one window of a huge file at a time)."""
    end = held_end(session.messages)
    holds_before = session.first <= max(0, done - 1) and (done == 0 or done - 1 < end)
    if holds_before and (done < end or end == len(session.messages)):
        return session
    return read_window(session.path.parent, session.key, done, WINDOW_BYTES, after=session, path=session.path)
