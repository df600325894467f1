"""The recall index's passages that hold a text the user asked to forget everywhere: found, and taken out (the
archive's messages, the notes' lines). A session nanobot rewrites whole is indexed again from its file, which
stays nanobot's."""

from __future__ import annotations

import sqlite3

from nanobot_hooks.contract.recall import SOURCE_BITS, unpack
from worker.memory.notes import holds, key_words
from worker.memory.recall_index.tables import drop, transaction

FULL_POSITION = (1 << SOURCE_BITS) - 1


def passages_holding(db: sqlite3.Connection, text: str) -> list[tuple[int, str, str]]:
    """Each passage that holds `text` (every one of its key words, as notes.holds tells), outside MEMORY.md's own
    rows (those follow the file): (rowid, source kind, session)."""
    words = key_words(text)
    if not words:
        return []
    sources = {number: (kind, session) for number, kind, session in db.execute("SELECT id, kind, session FROM sources")}
    found = []
    for (packed,) in db.execute("SELECT passages FROM blocks"):
        for rowid, passage in unpack(packed).items():
            kind, session = sources.get(rowid >> SOURCE_BITS, ("", ""))
            if kind != "memory" and holds(passage.body, words):
                found.append((rowid, kind, session))
    return found


def drop_passages_holding(db: sqlite3.Connection, text: str) -> list[tuple[int, str, str]]:
    """passages_holding's passages, taken out of the index in one transaction; returns them."""
    with transaction(db):
        found = passages_holding(db, text)
        for rowid, _, _ in found:
            position = rowid & FULL_POSITION
            drop(db, rowid >> SOURCE_BITS, position, position)
    return found
