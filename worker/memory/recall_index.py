"""The recall index: archived messages, daily-notes lines and MEMORY.md lines, redacted, in SQLite FTS5.

The worker keeps it in step with the files after each job (off the turn's path); the recall tool inside
nanobot reads it (nanobot_hooks/recall.py). Its layout is part of the contract (nanobot_hooks/contract.py).
The files stay the source of truth: an index that is missing, of another schema version or unreadable is
rebuilt from them, and every refresh follows the memory files whose size or time changed: a day file that
only grew (notes are appended) has only its new sections read, any other change re-reads the file whole.
Crash safety: WAL, and every change is one transaction that also records how far it got, so a crash
leaves the last committed state (which readers keep using) and the next refresh continues from there.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date as Date
from datetime import tzinfo
from functools import lru_cache
from pathlib import Path
from typing import Any

from nanobot_hooks.contract import (
    NOTE_LINE_BITS,
    PART_BITS,
    RECALL_INDEX,
    RECALL_SCHEMA_VERSION,
    RECALL_TABLES,
    SessionMarker,
    fts_problem,
)
from nanobot_hooks.nanobot_format import is_internal_session, storage_name, timestamp_before
from worker.memory import longterm
from worker.memory import notes
from worker.errors import SessionError, WorkerError
from worker.text.language import CJK_LETTERS
from worker.text.clock import local_time
from worker.text.prepare import Lines
from worker.text.redact import redact
from worker.nanobot.sessions import SessionFile, list_session_keys, read_session, session_path

log = logging.getLogger("worker.memory.recall_index")

MEMORY_FILE = "MEMORY.md"
_DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
_CJK_RUN = re.compile(f"[{CJK_LETTERS}]+")
_WORD = re.compile(r"[^\W_]+")
WRITE_WAIT_SECONDS = 30.0  # another worker process may hold the write lock for one transaction
MESSAGES_PER_TRANSACTION = 2_000  # a long history is indexed in steps: short write locks, resumable
READ_BLOCK = 1 << 16
# `state` rows "indexed:<day file>" = "<bytes indexed> <digest of those bytes>": a file that only grew has just
# its new bytes read; one edited, truncated or replaced below that point no longer matches and is read whole.
_INDEXED = "indexed:"
_FULL = (1 << PART_BITS) - 1


class RecallIndexError(WorkerError):
    """The index cannot be kept here (no FTS5 trigram tokenizer in this Python's SQLite)."""


@dataclass(frozen=True)
class Row:
    """One searchable passage of a part."""

    position: int
    day: str | None  # YYYY-MM-DD, local
    at: str | None  # "YYYY-MM-DD HH:MM", local
    label: str
    body: str  # redacted


@dataclass
class Refreshed:
    """What one refresh did, for the job's log line."""

    messages: int = 0
    files: int = 0
    rebuilt: bool = False

    def __str__(self) -> str:
        what = f"+{self.messages} messages, {self.files} memory files re-read"
        return f"recall index rebuilt: {what}" if self.rebuilt else f"recall index: {what}"


# -- what goes in (pure) ---------------------------------------------------------------------------


def gram_text(body: str) -> str:
    """The tokens of the `grams` table: overlapping CJK bigrams and two-character words, each once."""
    found: list[str] = []
    for run in _CJK_RUN.findall(body):
        found.extend(run[i:i + 2] for i in range(len(run) - 1))
    found.extend(word.lower() for word in _WORD.findall(_CJK_RUN.sub(" ", body)) if len(word) == 2)
    return " ".join(dict.fromkeys(found))


def _local(stamp: Any, tz: tzinfo | None) -> tuple[str | None, str | None]:
    moment = local_time(stamp, tz)  # the same conversion that dates the notes
    return (moment.date().isoformat(), moment.strftime("%Y-%m-%d %H:%M")) if moment else (None, None)


def message_rows(messages: Sequence[dict[str, Any]], start: int, end: int, tz: tzinfo | None,
                 lines: Lines | None = None) -> list[Row]:
    """Messages [start, end) as the summarizer read them (hidden rows and empty ones left out), redacted.
    `lines`: those the job already rendered of these messages."""
    if lines is None or lines.messages is not messages:
        lines = Lines(messages)
    rows = []
    for index in range(start, end):
        message = messages[index]
        line = lines(index)
        if line is None:
            continue
        role = str(message.get("role") or "")
        day, at = _local(message.get("timestamp"), tz)
        rows.append(Row(index, day, at, role, redact(line.removeprefix(f"{role}: "))))  # the label says who
    return rows


def note_rows(text: str, day: str, tz: tzinfo | None, counts: dict[str, int] | None = None
              ) -> list[tuple[str, Row]]:
    """(session, row) for every bullet of a day file's sections; a session's lines keep their order.

    `counts`: how many lines each session already has that day (for text appended to an indexed file)."""
    base = Date.fromisoformat(day).toordinal() << NOTE_LINE_BITS
    counts = dict(counts or {})
    rows = []
    for span, heading, item in notes.section_items(text):
        number = counts.get(span.session, 0)
        body = notes.clean(item)
        if not span.session or not body or number >> NOTE_LINE_BITS:
            continue
        counts[span.session] = number + 1
        rows.append((span.session, Row(base | number, day, _local(span.first, tz)[1], heading, body)))
    return rows


def starts_a_section(text: str) -> bool:
    """Does text appended to a day file open a section of its own (its first non-blank line a notes
    marker)? Only then can it be indexed apart from what precedes it; anything else is a mid-file edit."""
    for line in text.splitlines():
        if line.strip():
            return bool(notes.spans(line))
    return True  # blank lines alone add nothing


def memory_rows(text: str, meta: Mapping[str, longterm.Meta] | None = None) -> list[Row]:
    """Every text line of MEMORY.md, dated by the day it was learned when its sidecar record (`meta`) says so."""
    return [Row(number, learned, None, heading, line)
            for number, heading, line, learned in longterm.dated_lines(text, meta)]


def archived_through(session: SessionFile) -> int:
    """How many of the session's messages have left the context: nanobot's watermark, or the boundary of
    the worker's record waiting in line 1 when it still fits (it is applied at the next turn)."""
    through = session.last_archived
    record = SessionMarker.from_metadata(session.metadata).pending
    if record is not None and record.fits(through, len(session.messages), session.timestamp_before(record.boundary)):
        through = max(through, record.boundary)
    return through


# -- the database (I/O) ------------------------------------------------------------------------------


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
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


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _is_damaged(exc: sqlite3.DatabaseError) -> bool:
    # OperationalError (locked, busy, disk full) is trouble of the moment; a bare DatabaseError is the file.
    return type(exc) is sqlite3.DatabaseError


class RecallIndex:
    """`<workspace>/memory/.recall.sqlite`, written by the worker only."""

    def __init__(self, workspace: Path, tz: tzinfo | None = None) -> None:
        self.workspace = Path(workspace).expanduser()
        self.path = self.workspace / RECALL_INDEX
        self.memory_dir = self.path.parent
        self.tz = tz
        # The writing connection, kept open between refreshes: its statements stay prepared, and closing the
        # last connection would checkpoint the WAL into the file each time (a third of a refresh); SQLite's own
        # auto-checkpoint does it every thousand pages instead. It is kept with what the index's files looked
        # like when it last finished: files another hand changed since (another worker process, a rebuild, a
        # damaged or replaced file) get a new connection, which checks them as a first one does. The jobs of
        # one process refresh from several threads, one at a time on it.
        self._writer: tuple[tuple[tuple[int, int, int] | None, ...], sqlite3.Connection] | None = None
        self._lock = threading.Lock()
        self._known_complete = False  # the writer saw the `complete` mark: it is never taken back

    def refresh(self, sessions_dir: Path, session: SessionFile | None = None, through: int | None = None,
                lines: Lines | None = None) -> Refreshed:
        """Index `session` (as the job read it, `lines` as the job rendered them) up to `through`, then every
        memory file that changed.

        Without a session, or when the index is new, every session of `sessions_dir` is indexed too
        (the sweep at start-up, and the rebuild). Raises RecallIndexError, sqlite3.Error or OSError."""
        problem = fts_problem()
        if problem:
            raise RecallIndexError(problem)
        with self._lock:
            try:
                done = self._refresh(sessions_dir, session, through, lines)
            except sqlite3.DatabaseError as exc:
                if not _is_damaged(exc):
                    raise
                log.warning("recall index %s is damaged (%s): rebuilding it from the files", self.path, exc)
                self.discard()
                done = self._refresh(sessions_dir, session, through, lines)
            if self._writer is not None:
                self._writer = (self._files_seen(), self._writer[1])
            return done

    def _refresh(self, sessions_dir: Path, session: SessionFile | None, through: int | None,
                 lines: Lines | None = None) -> Refreshed:
        db = self._connection()
        done = Refreshed(rebuilt=not self._complete(db))
        if session is not None and not done.rebuilt:
            # A job's update is one transaction: its messages and the memory files it changed (a long
            # backlog commits each step on the way, see _sync_session).
            with _transaction(db):
                done.messages += self._sync_session(db, session, archived_through(session) if through is None
                                                    else through, lines)
                done.files = self._sync_memory_files(db)
            return done
        if session is not None:
            done.messages += self._sync_session(db, session, archived_through(session) if through is None
                                                else through, lines)
        done.messages += self._sweep(db, sessions_dir, skip=session.key if session else None)
        done.files = self._sync_memory_files(db)
        if done.rebuilt:
            db.execute("INSERT OR REPLACE INTO state(name, value) VALUES('complete', '1')")
        return done

    def _connection(self) -> sqlite3.Connection:
        """The writing connection, opened anew when the index's files changed since it last finished."""
        if self._writer is not None and self._writer[0] == self._files_seen():
            return self._writer[1]
        old, self._writer, self._known_complete = self._writer, None, False
        try:
            db = self.connect()
        finally:
            # Closed after the new one opened: the last connection to close copies its WAL into the file,
            # which would mend a file damaged under it.
            if old is not None:
                old[1].close()
        self._writer = ((), db)
        return db

    def _files_seen(self) -> tuple[tuple[int, int, int] | None, ...]:
        seen: list[tuple[int, int, int] | None] = []
        for suffix in ("", "-wal"):
            try:
                info = os.stat(f"{self.path}{suffix}")
                seen.append((info.st_ino, info.st_size, info.st_mtime_ns))
            except OSError:
                seen.append(None)
        return tuple(seen)

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer[1].close()
            self._writer = None
        self._known_complete = False

    def close(self) -> None:
        with self._lock:
            self._close_writer()

    def connect(self) -> sqlite3.Connection:
        """A writing connection to the index, made (tables and all) when missing or of another version."""
        self.memory_dir.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=WRITE_WAIT_SECONDS, isolation_level=None, check_same_thread=False)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, RECALL_SCHEMA_VERSION):
                db.close()
                log.info("recall index %s has schema %s, not %s: rebuilding it", self.path, version,
                         RECALL_SCHEMA_VERSION)
                self.discard()
                db = sqlite3.connect(self.path, timeout=WRITE_WAIT_SECONDS, isolation_level=None,
                                     check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer, nor it for them
            db.execute("PRAGMA synchronous=NORMAL")  # a power cut may lose the last refresh, never the file
            if version != RECALL_SCHEMA_VERSION:
                db.executescript(f"BEGIN IMMEDIATE;{RECALL_TABLES};PRAGMA user_version={RECALL_SCHEMA_VERSION};"
                                 "COMMIT;")
            return db
        except BaseException:
            db.close()
            raise

    def discard(self) -> None:
        """Remove the index and its WAL files (readers that have it open keep their copy until they close)."""
        self._close_writer()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def _complete(self, db: sqlite3.Connection) -> bool:
        """Has one full sweep finished? Until then every refresh sweeps (a crash mid-rebuild resumes)."""
        if not self._known_complete:
            self._known_complete = db.execute("SELECT 1 FROM state WHERE name = 'complete'").fetchone() is not None
        return self._known_complete

    @staticmethod
    def _part(db: sqlite3.Connection, kind: str, session: str) -> int:
        db.execute("INSERT OR IGNORE INTO parts(kind, session) VALUES(?, ?)", (kind, session))
        return int(db.execute("SELECT id FROM parts WHERE kind = ? AND session = ?", (kind, session)).fetchone()[0])

    def _sweep(self, db: sqlite3.Connection, sessions_dir: Path, skip: str | None) -> int:
        """Every session whose file changed since it was last read here; files that went are forgotten."""
        added = 0
        keys = list_session_keys(sessions_dir)
        if sessions_dir.is_dir():  # an unreachable folder is not a folder emptied
            for part, key in db.execute("SELECT id, session FROM parts WHERE kind = 'messages'").fetchall():
                if key not in keys and key != skip:
                    with _transaction(db):
                        self._drop(db, part)
                        db.execute("UPDATE parts SET through = 0, stamp = NULL WHERE id = ?", (part,))
                        db.execute("DELETE FROM files WHERE name = ?", (f"sessions/{storage_name(key)}",))
        for key in keys:
            if key == skip or is_internal_session(key):
                continue
            try:
                path = session_path(sessions_dir, key)
                seen = path.stat()
                name = f"sessions/{path.name}"
                if self._known(db, name) == (seen.st_size, seen.st_mtime_ns):
                    continue
                session = read_session(sessions_dir, key)
            except (SessionError, OSError) as exc:
                log.warning("recall index: session %s not indexed: %s", key, exc)
                continue
            added += self._sync_session(db, session, archived_through(session))
            # The size and time from before the read: a change during it is read again next time.
            with _transaction(db):
                self._remember(db, name, seen.st_size, seen.st_mtime_ns)
        return added

    def _sync_session(self, db: sqlite3.Connection, session: SessionFile, through: int,
                      lines: Lines | None = None) -> int:
        """Messages [indexed, through) of the session; a session that was reset (`/new`) is indexed anew."""
        if session.first:
            row = db.execute("SELECT parts.through FROM parts WHERE kind = 'messages' AND session = ?",
                             (session.key,)).fetchone()
            if row is None or row[0] - 1 < session.first:
                # The job read from the watermark, and the index is further behind: read it all.
                session = read_session(session.path.parent, session.key)
        messages = session.messages
        through = min(through, len(messages))
        added = 0
        while True:
            with _transaction(db):
                part = self._part(db, "messages", session.key)
                done, stamp = db.execute("SELECT through, stamp FROM parts WHERE id = ?", (part,)).fetchone()
                if done > len(messages) or (done and timestamp_before(messages, done) != stamp):
                    self._drop(db, part)
                    done = 0
                    if session.first:  # reset (`/new`): indexed anew from its first message
                        session = read_session(session.path.parent, session.key)
                        messages = session.messages
                if through <= done:
                    db.execute("UPDATE parts SET through = ?, stamp = ? WHERE id = ?",
                               (done, timestamp_before(messages, done), part))
                    return added
                end = min(through, done + MESSAGES_PER_TRANSACTION)
                rows = message_rows(messages, done, end, self.tz, lines)
                self._insert(db, part, rows)
                db.execute("UPDATE parts SET through = ?, stamp = ? WHERE id = ?",
                           (end, timestamp_before(messages, end), part))
                added += len(rows)
                if end >= through:
                    return added
            if db.in_transaction:  # the caller's transaction: each step is committed as it would be alone
                db.execute("COMMIT")
                db.execute("BEGIN IMMEDIATE")

    def _sync_memory_files(self, db: sqlite3.Connection) -> int:
        """Re-index each day file and MEMORY.md whose size or modification time differs from last time."""
        current: dict[str, tuple[int, int]] = {}
        if self.memory_dir.is_dir():
            with os.scandir(self.memory_dir) as entries:
                for entry in entries:
                    if entry.name == MEMORY_FILE or _DAY_FILE.match(entry.name):
                        try:
                            seen = entry.stat()
                        except OSError:
                            continue
                        current[entry.name] = (seen.st_size, seen.st_mtime_ns)
        known = {name: (size, mtime) for name, size, mtime in
                 db.execute("SELECT name, size, mtime_ns FROM files WHERE name NOT LIKE 'sessions/%'")}
        changed = sorted(name for name in set(current) | set(known) if current.get(name) != known.get(name))
        for name in changed:
            if name != MEMORY_FILE and name in current and self._append_day(db, name, current[name]):
                continue
            data = self._read_bytes(self.memory_dir / name) if name in current else b""
            text = data.decode("utf-8", errors="replace")
            with _transaction(db):
                if name == MEMORY_FILE:
                    part = self._part(db, "memory", "")
                    self._drop(db, part)
                    meta = longterm.load_meta(longterm.sidecar_path(self.memory_dir / name))
                    self._insert(db, part, memory_rows(text, meta))
                else:
                    self._index_day(db, name.removesuffix(".md"), text)
                    db.execute("DELETE FROM state WHERE name = ?", (_INDEXED + name,))
                    if data:
                        db.execute("INSERT INTO state(name, value) VALUES(?, ?)",
                                   (_INDEXED + name, f"{len(data)} {_digest(data)}"))
                if name in current:
                    self._remember(db, name, *current[name])
                else:
                    db.execute("DELETE FROM files WHERE name = ?", (name,))
        return len(changed)

    def _append_day(self, db: sqlite3.Connection, name: str, seen: tuple[int, int]) -> bool:
        """Index only what was appended to a day file since it was last indexed; False (nothing done) when
        that cannot be told apart: never indexed, shorter, changed before the indexed point, or an
        appended part that does not open a section of its own."""
        row = db.execute("SELECT value FROM state WHERE name = ?", (_INDEXED + name,)).fetchone()
        if row is None:
            return False
        size, _, digest = str(row[0]).partition(" ")
        indexed = int(size)
        try:
            with (self.memory_dir / name).open("rb") as handle:
                hashed = hashlib.blake2b(digest_size=16)
                left = indexed
                while left > 0 and (block := handle.read(min(READ_BLOCK, left))):
                    hashed.update(block)
                    left -= len(block)
                if left or hashed.hexdigest() != digest:
                    return False
                tail = handle.read()
        except OSError:
            return False
        text = tail.decode("utf-8", errors="replace")
        if not starts_a_section(text):
            return False
        hashed.update(tail)
        day = name.removesuffix(".md")
        with _transaction(db):
            sessions = {span.session for span in notes.spans(text)}
            found = note_rows(text, day, self.tz, self._note_counts(db, day, sessions))
            by_session: dict[str, list[Row]] = {}
            for session, row in found:
                by_session.setdefault(session, []).append(row)
            for session, rows in by_session.items():
                self._insert(db, self._part(db, "notes", session), rows)
            db.execute("UPDATE state SET value = ? WHERE name = ?",
                       (f"{indexed + len(tail)} {hashed.hexdigest()}", _INDEXED + name))
            self._remember(db, name, *seen)
        return True

    @staticmethod
    def _note_counts(db: sqlite3.Connection, day: str, sessions: set[str]) -> dict[str, int]:
        """How many lines each of these sessions has indexed from one day file (positions count from 0)."""
        first = Date.fromisoformat(day).toordinal() << NOTE_LINE_BITS
        counts = {}
        for session in sessions:
            row = db.execute("SELECT days.high FROM parts JOIN days ON days.part = parts.id WHERE parts.kind = "
                             "'notes' AND parts.session = ? AND days.day = ?", (session, day)).fetchone()
            if row is not None:
                counts[session] = (row[0] & _FULL) - first + 1
        return counts

    def _index_day(self, db: sqlite3.Connection, day: str, text: str) -> None:
        try:
            first = Date.fromisoformat(day).toordinal() << NOTE_LINE_BITS
        except ValueError:
            return  # 2026-13-45.md: not a day file
        for (part,) in db.execute("SELECT days.part FROM days JOIN parts ON parts.id = days.part "
                                  "WHERE parts.kind = 'notes' AND days.day = ?", (day,)).fetchall():
            self._drop(db, part, first, first | ((1 << NOTE_LINE_BITS) - 1))
        by_session: dict[str, list[Row]] = {}
        for session, row in note_rows(text, day, self.tz):
            by_session.setdefault(session, []).append(row)
        for session, rows in by_session.items():
            self._insert(db, self._part(db, "notes", session), rows)

    @staticmethod
    def _read_bytes(path: Path) -> bytes:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return b""

    @staticmethod
    def _known(db: sqlite3.Connection, name: str) -> tuple[int, int] | None:
        row = db.execute("SELECT size, mtime_ns FROM files WHERE name = ?", (name,)).fetchone()
        return (row[0], row[1]) if row else None

    @staticmethod
    def _remember(db: sqlite3.Connection, name: str, size: int, mtime_ns: int) -> None:
        db.execute("INSERT OR REPLACE INTO files(name, size, mtime_ns) VALUES(?, ?, ?)", (name, size, mtime_ns))

    @staticmethod
    def _insert(db: sqlite3.Connection, part: int, rows: Sequence[Row]) -> None:
        base = part << PART_BITS
        db.executemany("INSERT INTO passages(rowid, body, day, at, label) VALUES(?, ?, ?, ?, ?)",
                       [(base | r.position, r.body, r.day, r.at, r.label) for r in rows])
        db.executemany("INSERT INTO grams(rowid, gram) VALUES(?, ?)",
                       [(base | r.position, g) for r in rows if (g := gram_text(r.body))])
        # Each day's rowid range: a date range becomes a rowid range that FTS5 filters by itself.
        db.executemany("INSERT INTO days(part, day, low, high) VALUES(?, ?, ?, ?) ON CONFLICT(part, day) "
                       "DO UPDATE SET low = min(low, excluded.low), high = max(high, excluded.high)",
                       [(part, r.day, base | r.position, base | r.position) for r in rows if r.day])

    @staticmethod
    def _drop(db: sqlite3.Connection, part: int, low: int = 0, high: int = _FULL) -> None:
        """Forget a part's positions [low, high]."""
        base = part << PART_BITS
        first, last = base | low, base | high
        # A contentless table forgets a row only when told exactly what it holds: the same bigrams again.
        for rowid, body in db.execute("SELECT rowid, body FROM passages WHERE rowid BETWEEN ? AND ?",
                                      (first, last)).fetchall():
            if grams := gram_text(body):
                db.execute("INSERT INTO grams(grams, rowid, gram) VALUES('delete', ?, ?)", (rowid, grams))
        db.execute("DELETE FROM passages WHERE rowid BETWEEN ? AND ?", (first, last))
        db.execute("DELETE FROM days WHERE part = ? AND low >= ? AND high <= ?", (part, first, last))
