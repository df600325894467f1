"""The recall index's file, `<workspace>/memory/.recall.sqlite`.

Its writing connection, its schema, and the refresh that keeps it in step with the session and memory files (rebuilt
from them when damaged)."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path

from nanobot_hooks.contract.recall import (
    PAGE_BYTES,
    RECALL_INDEX,
    RECALL_SCHEMA_VERSION,
    RECALL_TABLES,
    VECTORS_TABLE,
    fts_problem,
)
from worker.errors import WorkerError
from worker.memory.recall_index.forget import (
    Tombstones,
    add_tombstones,
    drop_passages_holding,
    passages_holding,
    unarchived_holding,
)
from worker.memory.recall_index.memory_files import sync_memory_files
from worker.memory.recall_index.messages import sweep, sync_session
from worker.memory.recall_index.rows import archived_through
from worker.memory.recall_index.tables import is_damaged, transaction
from worker.memory.recall_index.vectors import Embedder
from worker.nanobot.sessions import SessionFile
from worker.text.prepare import Lines

log = logging.getLogger("worker.memory.recall_index")

WRITE_WAIT_SECONDS = 30.0  # another worker process may hold the write lock for one transaction
WAL_PAGES = 64  # pages written between two copies of the WAL into the file (SQLite: 1,000)
WAL_BYTES = 0  # what the WAL file is cut back to after a copy: nothing kept beside a small index


class RecallIndexError(WorkerError):
    """The index cannot be kept here (this Python's SQLite has no FTS5 with bm25 and the porter tokenizer)."""


@dataclass
class Refreshed:
    """What one refresh did, for the job's log line."""

    messages: int = 0
    files: int = 0
    rebuilt: bool = False
    embedded: int = 0  # passages given their embedding (NANOBOT_SUMMARY_EMBEDDING_MODEL)

    def __str__(self) -> str:
        what = f"+{self.messages} messages, {self.files} memory files re-read"
        what += f", {self.embedded} passages embedded" if self.embedded else ""
        return f"recall index rebuilt: {what}" if self.rebuilt else f"recall index: {what}"


class RecallIndex:
    """`<workspace>/memory/.recall.sqlite`, written by the worker only."""

    def __init__(self, workspace: Path, tz: tzinfo | None = None, embedder: Embedder | None = None) -> None:
        self.workspace = Path(workspace).expanduser()
        self.path = self.workspace / RECALL_INDEX
        self.memory_dir = self.path.parent
        self.tz = tz
        self.embedder = embedder  # passages embedded after each refresh (vectors.py); None: words only
        self.tombstones = Tombstones(self.memory_dir)
        # The writing connection, kept open between refreshes: its statements stay prepared, and closing the
        # last connection would checkpoint the WAL into the file each time (a third of a refresh); SQLite's own
        # auto-checkpoint does it every thousand pages instead. It is kept with what the index's files looked
        # like when it last finished: files another hand changed since (another worker process, a rebuild, a
        # damaged or replaced file) get a new connection, which checks them as a first one does. The jobs of
        # one process refresh from several threads, one at a time on it.
        self._writer: tuple[tuple[tuple[int, int, int] | None, ...], sqlite3.Connection] | None = None
        self._lock = threading.Lock()
        self._known_complete = False  # the writer saw the `complete` mark: it is never taken back

    def refresh(
        self,
        sessions_dir: Path,
        session: SessionFile | None = None,
        through: int | None = None,
        lines: Lines | None = None,
    ) -> Refreshed:
        """Index `session` up to `through`, then every memory file that changed.

        Index `session` (as the job read it, `lines` as the job rendered them) up to `through`, then every memory file
        that changed.

        Without a session, or when the index is new, every session of `sessions_dir` is indexed too
        (the sweep at start-up, and the rebuild). Raises RecallIndexError, sqlite3.Error or OSError."""
        problem = fts_problem()
        if problem:
            raise RecallIndexError(problem)
        with self._lock:
            try:
                done = self._refresh(sessions_dir, session, through, lines)
            except sqlite3.DatabaseError as exc:
                if not is_damaged(exc):
                    raise
                log.warning("recall index %s is damaged (%s): rebuilding it from the files", self.path, exc)
                self.discard()
                done = self._refresh(sessions_dir, session, through, lines)
            if self._writer is not None:
                if self.embedder is not None:
                    done.embedded = self.embedder.run(self._writer[1])
                self._writer = (self._files_seen(), self._writer[1])
            return done

    def passages_holding(self, text: str, remove: bool = False) -> list[tuple[int, str, str]]:
        """The passages that hold `text` outside MEMORY.md's rows, taken out when `remove`.

        The passages that hold `text` outside MEMORY.md's rows (forget.passages_holding), taken out of the index when
        `remove`, the messages' kept out of it for good (forget.py's tombstones). Raises sqlite3.Error or OSError."""
        with self._lock:
            db = self._connection()
            return drop_passages_holding(db, text, self.memory_dir) if remove else passages_holding(db, text)

    def keep_out_unarchived(self, sessions_dir: Path, text: str) -> int:
        """The messages that hold `text` and that no summary covered yet, kept out of the index for good.

        The messages that hold `text` and that no summary covered yet, kept out of the index for good (their tombstones:
        forget.unarchived_holding); how many. The session files are read before the write lock is taken. Raises
        sqlite3.Error or OSError."""
        bodies = unarchived_holding(sessions_dir, text, self.tz)
        if bodies:
            with self._lock:
                with transaction(self._connection()):  # the index's write lock: two forgets never lose each other's
                    add_tombstones(self.memory_dir, bodies)
        return len(bodies)

    def _refresh(
        self, sessions_dir: Path, session: SessionFile | None, through: int | None, lines: Lines | None = None
    ) -> Refreshed:
        db = self._connection()
        done = Refreshed(rebuilt=not self._complete(db))
        forgotten = self.tombstones  # what the user forgot everywhere is never indexed again (looked at per step)
        if session is not None and not done.rebuilt:
            # A job's update is one transaction: its messages and the memory files it changed (a long
            # backlog commits each step on the way, see messages.sync_session).
            with transaction(db):
                done.messages += sync_session(db, session, _through(session, through), self.tz, lines, forgotten)
                done.files = sync_memory_files(db, self.memory_dir, self.tz)
            return done
        if session is not None:
            done.messages += sync_session(db, session, _through(session, through), self.tz, lines, forgotten)
        done.messages += sweep(db, sessions_dir, session.key if session else None, self.tz, forgotten)
        done.files = sync_memory_files(db, self.memory_dir, self.tz)
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
                log.info(
                    "recall index %s has schema %s, not %s: rebuilding it", self.path, version, RECALL_SCHEMA_VERSION
                )
                self.discard()
                db = sqlite3.connect(
                    self.path, timeout=WRITE_WAIT_SECONDS, isolation_level=None, check_same_thread=False
                )
            if version != RECALL_SCHEMA_VERSION:
                db.execute(f"PRAGMA page_size={PAGE_BYTES}")  # a new file: before anything is written to it
            db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer, nor it for them
            db.execute("PRAGMA synchronous=NORMAL")  # a power cut may lose the last refresh, never the file
            # The WAL copied into the file every WAL_PAGES pages and cut back to WAL_BYTES after: at SQLite's
            # default (1,000 pages, never cut back) a conversation's index of 300 KB had 1.6 MB of WAL beside it.
            db.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
            db.execute(f"PRAGMA journal_size_limit={WAL_BYTES}")
            if version != RECALL_SCHEMA_VERSION:
                db.executescript(f"BEGIN IMMEDIATE;{RECALL_TABLES};PRAGMA user_version={RECALL_SCHEMA_VERSION};COMMIT;")
            else:
                db.execute(VECTORS_TABLE)  # an index of this version made before vectors were kept
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


def _through(session: SessionFile, through: int | None) -> int:
    """How far to index a job's session: as far as the job says, or as far as its messages left the context."""
    return archived_through(session) if through is None else through
