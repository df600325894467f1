"""The recall index's passages that hold a text the user asked to forget everywhere.

Found, taken out (the archive's messages, the notes' lines), and the archived messages kept out for good.

nanobot's session files still hold those messages, and the index is indexed again from them: when it is rebuilt
(missing, damaged, of another version), when nanobot rewrites a session in a way that reads as a reset, and from
the copy the hooks keep at `/new`, and a message no summary covered yet enters it when one does. So each message
passage taken out, and each such message not archived yet, leaves a tombstone, the digest of its redacted text
(never the text), in `memory/.recall.forgotten.json` beside the index (a file of its own: a rebuild starts the
index afresh), and no message passage with that digest is indexed again. The day files' lines are
removed from the files themselves, and MEMORY.md's rows follow the file: neither needs a tombstone."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import tzinfo
from pathlib import Path

from nanobot_hooks.contract.recall import SOURCE_BITS, read_block
from nanobot_hooks.contract.session_format import is_internal_session
from worker.errors import SessionError
from worker.files import read_bytes, temp_beside
from worker.memory.notes import holds, key_words
from worker.memory.recall_index.rows import Row, archived_through, message_rows
from worker.memory.recall_index.tables import digest, drop, transaction
from worker.nanobot.sessions import list_session_keys, read_session

log = logging.getLogger("worker.memory.recall_index")

FULL_POSITION = (1 << SOURCE_BITS) - 1
TOMBSTONES = ".recall.forgotten.json"  # in the memory folder, beside the index


def passages_holding(db: sqlite3.Connection, text: str) -> list[tuple[int, str, str]]:
    """Each passage that holds `text`, outside MEMORY.md's own rows.

    Each passage that holds `text` (every one of its key words, as notes.holds tells), outside MEMORY.md's own rows
    (those follow the file): (rowid, source kind, session)."""
    return [(rowid, kind, session) for rowid, kind, session, _ in _holding(db, text)]


def _holding(db: sqlite3.Connection, text: str) -> list[tuple[int, str, str, str]]:
    words = key_words(text)
    if not words:
        return []
    needles = _needles(words)
    sources = {number: (kind, session) for number, kind, session in db.execute("SELECT id, kind, session FROM sources")}
    found = []
    for (packed,) in db.execute("SELECT passages FROM blocks"):
        block = read_block(packed)
        for rowid, record in zip(block.rowids, block.bodies, strict=True):
            kind, session = sources.get(rowid >> SOURCE_BITS, ("", ""))
            if kind == "memory" or not _may_hold(record, needles):
                continue
            shown = block.passage(rowid)
            body = shown.body if shown else ""
            if holds(body, words):
                found.append((rowid, kind, session, body))
    return found


def _needles(words: frozenset[str]) -> list[bytes] | None:
    """What an ASCII record is looked for before it is decoded.

    What an ASCII record is looked for before it is decoded (most records, told without their JSON: 100,000 passages
    searched in 0.2 s rather than 0.5 s), as holds() tells an ASCII line; None: the words are not all ASCII, or one
    holds a control character, which the record would hold escaped (every record is decoded)."""
    return [word.encode() for word in words] if all(w.isascii() and w.isprintable() for w in words) else None


def _may_hold(record: bytes, needles: list[bytes] | None) -> bool:
    """Whether a passage's record may hold the words (pure).

    A record that is not ASCII may; an ASCII one must hold each as a run of its lowered bytes once the apostrophes are
    out (JSON escapes only quotes, backslashes and control characters, none of which a word holds)."""
    if needles is None or not record.isascii():
        return True
    lowered = record.lower().replace(b"'", b"").replace(b"`", b"")
    return all(needle in lowered for needle in needles)


def drop_passages_holding(db: sqlite3.Connection, text: str, memory_dir: Path) -> list[tuple[int, str, str]]:
    """passages_holding's passages, taken out of the index in one transaction.

    passages_holding's passages, taken out of the index in one transaction, the messages' tombstones added (written
    while the index's write lock is held: two forgets never lose each other's); returns them."""
    with transaction(db):
        found = _holding(db, text)
        for rowid, _, _, _ in found:
            position = rowid & FULL_POSITION
            drop(db, rowid >> SOURCE_BITS, position, position)
        add_tombstones(memory_dir, [body for _, kind, _, body in found if kind == "messages"])
    return [(rowid, kind, session) for rowid, kind, session, _ in found]


def unarchived_holding(sessions_dir: Path, text: str, tz: tzinfo | None) -> list[str]:
    """The redacted texts of the messages that hold `text` and that no summary covered yet.

    The redacted texts, as the index would hold them, of the messages that hold `text` and that no summary covered yet:
    nanobot still sends them, and the index takes them in when a summary archives them. Each session's messages from
    where its summaries reach (rows.archived_through) on; a file that cannot be read is named in the log and passed
    over."""
    words = key_words(text)
    bodies: list[str] = []
    for key in list_session_keys(sessions_dir) if words else []:
        if is_internal_session(key):
            continue
        try:
            session = read_session(sessions_dir, key, from_watermark=True)  # the history before it counted, not kept
        except (SessionError, OSError) as exc:
            log.warning("session %s not read for a text forgotten everywhere: %s", key, exc)
            continue
        rows = message_rows(session.messages, archived_through(session), len(session.messages), tz)
        bodies += [row.body for row in rows if holds(row.body, words)]
    return bodies


def passage_digest(body: str) -> str:
    """A message passage's tombstone: the digest of its redacted text, as the index holds it (pure)."""
    return digest(body.encode("utf-8"))


def unforgotten(rows: Sequence[Row], tombstones: frozenset[str]) -> Sequence[Row]:
    """The message rows whose passage was not forgotten everywhere (pure)."""
    if not tombstones:
        return rows
    return [row for row in rows if passage_digest(row.body) not in tombstones]


class Tombstones:
    """The tombstones as their file holds them now, read again only when it changed (a stat a look).

    Looked at inside each transaction that indexes messages: a forget writes them while it holds the index's write lock,
    so no refresh of another process that began before it indexes a message it keeps out."""

    def __init__(self, memory_dir: Path) -> None:
        self.memory_dir = memory_dir
        self._seen: tuple[int, int, int] | None = None
        self._digests: frozenset[str] = frozenset()

    def current(self) -> frozenset[str]:
        try:
            info = os.stat(tombstones_path(self.memory_dir))
            seen: tuple[int, int, int] | None = (info.st_ino, info.st_size, info.st_mtime_ns)
        except FileNotFoundError:
            seen = None
        if seen != self._seen:  # the file is replaced whole, so a change is a new inode
            self._digests = load_tombstones(self.memory_dir) if seen is not None else frozenset()
            self._seen = seen
        return self._digests


def tombstones_path(memory_dir: Path) -> Path:
    return memory_dir / TOMBSTONES


def load_tombstones(memory_dir: Path) -> frozenset[str]:
    """The digests of the message passages forgotten everywhere; none when the file is missing.

    One that cannot be read is named in the log (what it kept out could be indexed again)."""
    raw = read_bytes(tombstones_path(memory_dir))
    if raw is None:
        return frozenset()
    try:
        found = json.loads(raw.decode("utf-8"))["passages"]
        if not isinstance(found, list):
            raise TypeError("passages is not a list")
        return frozenset(str(each) for each in found)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("%s is not readable (%s): passages forgotten everywhere may be indexed again", TOMBSTONES, exc)
        return frozenset()


def add_tombstones(memory_dir: Path, bodies: Iterable[str]) -> None:
    """The passages' digests added to the tombstones (the file replaced whole)."""
    new = {passage_digest(body) for body in bodies}
    known = load_tombstones(memory_dir)
    if new <= known:
        return
    path = tombstones_path(memory_dir)
    data = json.dumps({"format": 1, "passages": sorted(known | new)}, indent=0) + "\n"
    os.replace(temp_beside(path, data.encode("utf-8")), path)
