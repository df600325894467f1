"""The memory files in the recall index.

Each day file and MEMORY.md whose size or time changed is read again, and a day file that only grew has just its
appended sections read."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from datetime import date as Date
from datetime import tzinfo
from pathlib import Path

from nanobot_hooks.contract.recall import NOTE_LINE_BITS
from worker.files import read_bytes
from worker.memory import longterm, notes
from worker.memory.recall_index.rows import Row, memory_rows, note_rows, starts_a_section
from worker.memory.recall_index.tables import digest, drop, insert, note_counts, remember, source_id, transaction

MEMORY_FILE = "MEMORY.md"
_DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
READ_BLOCK = 1 << 16
# `state` rows "indexed:<day file>" = "<bytes indexed> <digest of those bytes>": a file that only grew has just
# its new bytes read; one edited, truncated or replaced below that point no longer matches and is read whole.
_INDEXED = "indexed:"


def sync_memory_files(db: sqlite3.Connection, memory_dir: Path, tz: tzinfo | None) -> int:
    """Re-index each day file and MEMORY.md whose size or modification time differs from last time."""
    current = _memory_files(memory_dir)
    known = {
        name: (size, mtime)
        for name, size, mtime in db.execute("SELECT name, size, mtime_ns FROM files WHERE name NOT LIKE 'sessions/%'")
    }
    changed = sorted(name for name in set(current) | set(known) if current.get(name) != known.get(name))
    for name in changed:
        if name != MEMORY_FILE and name in current and _append_day(db, memory_dir, name, current[name], tz):
            continue
        data = (read_bytes(memory_dir / name) or b"") if name in current else b""
        with transaction(db):
            _read_whole(db, memory_dir, name, data, tz)
            if name in current:
                remember(db, name, *current[name])
            else:
                db.execute("DELETE FROM files WHERE name = ?", (name,))
    return len(changed)


def _memory_files(memory_dir: Path) -> dict[str, tuple[int, int]]:
    """Each day file and MEMORY.md there now: (size, modification time)."""
    current: dict[str, tuple[int, int]] = {}
    if memory_dir.is_dir():
        with os.scandir(memory_dir) as entries:
            for entry in entries:
                if entry.name == MEMORY_FILE or _DAY_FILE.match(entry.name):
                    try:
                        seen = entry.stat()
                    except OSError:
                        continue
                    current[entry.name] = (seen.st_size, seen.st_mtime_ns)
    return current


def _read_whole(db: sqlite3.Connection, memory_dir: Path, name: str, data: bytes, tz: tzinfo | None) -> None:
    """A memory file's rows replaced by those of its text now (none when it went)."""
    text = data.decode("utf-8", errors="replace")
    if name == MEMORY_FILE:
        source = source_id(db, "memory", "")
        drop(db, source)
        meta = longterm.load_meta(longterm.sidecar_path(memory_dir / name))
        insert(db, source, memory_rows(text, meta))
        return
    _index_day(db, name.removesuffix(".md"), text, tz)
    db.execute("DELETE FROM state WHERE name = ?", (_INDEXED + name,))
    if data:
        db.execute("INSERT INTO state(name, value) VALUES(?, ?)", (_INDEXED + name, f"{len(data)} {digest(data)}"))


def _append_day(db: sqlite3.Connection, memory_dir: Path, name: str, seen: tuple[int, int], tz: tzinfo | None) -> bool:
    """Index only what was appended to a day file since it was last indexed.

    False (nothing done) when that cannot be told apart: never indexed, shorter, changed before the indexed point, or an
    appended part that does not open a section of its own."""
    row = db.execute("SELECT value FROM state WHERE name = ?", (_INDEXED + name,)).fetchone()
    if row is None:
        return False
    size, _, indexed_digest = str(row[0]).partition(" ")
    indexed = int(size)
    try:
        with (memory_dir / name).open("rb") as handle:
            hashed = hashlib.blake2b(digest_size=16)
            left = indexed
            while left > 0 and (block := handle.read(min(READ_BLOCK, left))):
                hashed.update(block)
                left -= len(block)
            if left or hashed.hexdigest() != indexed_digest:
                return False
            tail = handle.read()
    except OSError:
        return False
    text = tail.decode("utf-8", errors="replace")
    if not starts_a_section(text):
        return False
    hashed.update(tail)
    day = name.removesuffix(".md")
    with transaction(db):
        sessions = {span.session for span in notes.spans(text)}
        _insert_notes(db, note_rows(text, day, tz, note_counts(db, day, sessions)))
        db.execute(
            "UPDATE state SET value = ? WHERE name = ?",
            (f"{indexed + len(tail)} {hashed.hexdigest()}", _INDEXED + name),
        )
        remember(db, name, *seen)
    return True


def _index_day(db: sqlite3.Connection, day: str, text: str, tz: tzinfo | None) -> None:
    try:
        first = Date.fromisoformat(day).toordinal() << NOTE_LINE_BITS
    except ValueError:
        return  # 2026-13-45.md: not a day file
    for (source,) in db.execute(
        "SELECT days.source FROM days JOIN sources ON sources.id = days.source "
        "WHERE sources.kind = 'notes' AND days.day = ?",
        (day,),
    ).fetchall():
        drop(db, source, first, first | ((1 << NOTE_LINE_BITS) - 1))
    _insert_notes(db, note_rows(text, day, tz))


def _insert_notes(db: sqlite3.Connection, found: list[tuple[str, Row]]) -> None:
    """Notes lines into each session's notes source."""
    by_session: dict[str, list[Row]] = {}
    for session, row in found:
        by_session.setdefault(session, []).append(row)
    for session, rows in by_session.items():
        insert(db, source_id(db, "notes", session), rows)
