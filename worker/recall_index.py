"""The recall index: archived messages, daily-notes lines and MEMORY.md lines, redacted, in SQLite FTS5.

The worker keeps it in step with the files after each job (off the turn's path); the recall tool inside
nanobot reads it (nanobot_hooks/recall.py). Its layout is part of the contract (nanobot_hooks/contract.py).
The files stay the source of truth: an index that is missing, of another schema version or unreadable is
rebuilt from them, and every refresh re-reads the memory files whose size or time changed.
Crash safety: WAL, and every change is one transaction that also records how far it got, so a crash
leaves the last committed state (which readers keep using) and the next refresh continues from there.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import date as Date
from datetime import tzinfo
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nanobot_hooks.contract import (
    METADATA_KEY,
    NOTE_LINE_BITS,
    PART_BITS,
    RECALL_INDEX,
    RECALL_SCHEMA_VERSION,
    RECALL_TABLES,
    SummaryRecord,
    fts_problem,
)
from nanobot_hooks.nanobot_format import is_internal_session, storage_name, timestamp_before
from worker import longterm, notes
from worker.errors import SessionError, WorkerError
from worker.language import CJK_LETTERS
from worker.prepare import local_time, render
from worker.redact import redact
from worker.sessions import SessionFile, list_session_keys, read_session, session_path

log = logging.getLogger("worker.recall_index")

MEMORY_FILE = "MEMORY.md"
_DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
_CJK_RUN = re.compile(f"[{CJK_LETTERS}]+")
_WORD = re.compile(r"[^\W_]+")
WRITE_WAIT_SECONDS = 30.0  # another worker process may hold the write lock for one transaction
MESSAGES_PER_TRANSACTION = 2_000  # a long history is indexed in steps: short write locks, resumable
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


def message_rows(messages: Sequence[dict[str, Any]], start: int, end: int, tz: tzinfo | None) -> list[Row]:
    """Messages [start, end) as the summarizer read them (hidden rows and empty ones left out), redacted."""
    rows = []
    for index in range(start, end):
        message = messages[index]
        line = render(message)
        if line is None:
            continue
        role = str(message.get("role") or "")
        day, at = _local(message.get("timestamp"), tz)
        rows.append(Row(index, day, at, role, redact(line.removeprefix(f"{role}: "))))  # the label says who
    return rows


def note_rows(text: str, day: str, tz: tzinfo | None) -> list[tuple[str, Row]]:
    """(session, row) for every bullet of a day file's sections; a session's lines keep their order."""
    base = Date.fromisoformat(day).toordinal() << NOTE_LINE_BITS
    counts: dict[str, int] = {}
    rows = []
    for span, heading, item in notes.section_items(text):
        number = counts.get(span.session, 0)
        body = notes.clean(item)
        if not span.session or not body or number >> NOTE_LINE_BITS:
            continue
        counts[span.session] = number + 1
        rows.append((span.session, Row(base | number, day, _local(span.first, tz)[1], heading, body)))
    return rows


def memory_rows(text: str, meta: Mapping[str, longterm.Meta] | None = None) -> list[Row]:
    """Every text line of MEMORY.md, dated by the day it was learned when its sidecar record (`meta`) says so."""
    return [Row(number, learned, None, heading, line)
            for number, heading, line, learned in longterm.dated_lines(text, meta)]


def archived_through(session: SessionFile) -> int:
    """How many of the session's messages have left the context: nanobot's watermark, or the boundary of
    the worker's record waiting in line 1 when it still fits (it is applied at the next turn)."""
    through = session.last_archived
    mine = session.metadata.get(METADATA_KEY)
    pending = mine.get("pending") if isinstance(mine, dict) else None
    if isinstance(pending, dict):
        try:
            record = SummaryRecord.model_validate(pending)
        except ValidationError:
            return through
        if record.fits(through, len(session.messages), session.timestamp_before(record.boundary)):
            through = max(through, record.boundary)
    return through


# -- the database (I/O) ------------------------------------------------------------------------------


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")  # the write lock first: what we read stays true until we commit
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


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

    def refresh(self, sessions_dir: Path, session: SessionFile | None = None, through: int | None = None) -> Refreshed:
        """Index `session` (as the job read it) up to `through`, then every memory file that changed.

        Without a session, or when the index is new, every session of `sessions_dir` is indexed too
        (the sweep at start-up, and the rebuild). Raises RecallIndexError, sqlite3.Error or OSError."""
        problem = fts_problem()
        if problem:
            raise RecallIndexError(problem)
        try:
            return self._refresh(sessions_dir, session, through)
        except sqlite3.DatabaseError as exc:
            if not _is_damaged(exc):
                raise
            log.warning("recall index %s is damaged (%s): rebuilding it from the files", self.path, exc)
            self.discard()
            return self._refresh(sessions_dir, session, through)

    def _refresh(self, sessions_dir: Path, session: SessionFile | None, through: int | None) -> Refreshed:
        with closing(self.connect()) as db:
            done = Refreshed(rebuilt=not self._complete(db))
            if session is not None:
                done.messages += self._sync_session(db, session, archived_through(session) if through is None
                                                    else through)
            if session is None or done.rebuilt:
                done.messages += self._sweep(db, sessions_dir, skip=session.key if session else None)
            done.files = self._sync_memory_files(db)
            if done.rebuilt:
                db.execute("INSERT OR REPLACE INTO state(name, value) VALUES('complete', '1')")
            return done

    def connect(self) -> sqlite3.Connection:
        """A writing connection to the index, made (tables and all) when missing or of another version."""
        self.memory_dir.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=WRITE_WAIT_SECONDS, isolation_level=None)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, RECALL_SCHEMA_VERSION):
                db.close()
                log.info("recall index %s has schema %s, not %s: rebuilding it", self.path, version,
                         RECALL_SCHEMA_VERSION)
                self.discard()
                db = sqlite3.connect(self.path, timeout=WRITE_WAIT_SECONDS, isolation_level=None)
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
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    @staticmethod
    def _complete(db: sqlite3.Connection) -> bool:
        """Has one full sweep finished? Until then every refresh sweeps (a crash mid-rebuild resumes)."""
        return db.execute("SELECT 1 FROM state WHERE name = 'complete'").fetchone() is not None

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

    def _sync_session(self, db: sqlite3.Connection, session: SessionFile, through: int) -> int:
        """Messages [indexed, through) of the session; a session that was reset (`/new`) is indexed anew."""
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
                if through <= done:
                    db.execute("UPDATE parts SET through = ?, stamp = ? WHERE id = ?",
                               (done, timestamp_before(messages, done), part))
                    return added
                end = min(through, done + MESSAGES_PER_TRANSACTION)
                rows = message_rows(messages, done, end, self.tz)
                self._insert(db, part, rows)
                db.execute("UPDATE parts SET through = ?, stamp = ? WHERE id = ?",
                           (end, timestamp_before(messages, end), part))
                added += len(rows)

    def _sync_memory_files(self, db: sqlite3.Connection) -> int:
        """Re-index each day file and MEMORY.md whose size or modification time differs from last time."""
        current: dict[str, tuple[int, int]] = {}
        if self.memory_dir.is_dir():
            for path in self.memory_dir.iterdir():
                if path.name == MEMORY_FILE or _DAY_FILE.match(path.name):
                    try:
                        seen = path.stat()
                    except OSError:
                        continue
                    current[path.name] = (seen.st_size, seen.st_mtime_ns)
        known = {name: (size, mtime) for name, size, mtime in
                 db.execute("SELECT name, size, mtime_ns FROM files WHERE name NOT LIKE 'sessions/%'")}
        changed = sorted(name for name in set(current) | set(known) if current.get(name) != known.get(name))
        for name in changed:
            text = self._read(self.memory_dir / name) if name in current else ""
            with _transaction(db):
                if name == MEMORY_FILE:
                    part = self._part(db, "memory", "")
                    self._drop(db, part)
                    meta = longterm.load_meta(longterm.sidecar_path(self.memory_dir / name))
                    self._insert(db, part, memory_rows(text, meta))
                else:
                    self._index_day(db, name.removesuffix(".md"), text)
                if name in current:
                    self._remember(db, name, *current[name])
                else:
                    db.execute("DELETE FROM files WHERE name = ?", (name,))
        return len(changed)

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
    def _read(path: Path) -> str:
        try:
            return path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

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
