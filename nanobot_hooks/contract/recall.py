"""The recall index's layout: where the SQLite file lives, its schema, and how row ids are built."""

from __future__ import annotations

from functools import lru_cache

# The recall index: written by the worker (worker/memory/recall_index/), read by the recall tool
# (nanobot_hooks/recall.py). SQLite in the workspace's memory folder, beside the files it is built from:
# the tool finds it from nanobot's workspace alone, and nanobot's git store commits only the files it
# tracks, so the index never enters the workspace's history. The files stay the source of truth; the
# index is rebuilt from them when it is missing or of another schema version.
RECALL_INDEX = "memory/.recall.sqlite"  # relative to the workspace
RECALL_SCHEMA_VERSION = 2  # PRAGMA user_version; any other value means "rebuild"
# A row's id is `source << SOURCE_BITS | position`: the rows of one source (one session's archived messages,
# one session's notes lines, MEMORY.md) form one rowid range, which FTS5 filters inside its index.
# Positions: a message's index in the session; a notes line's `date.toordinal() << NOTE_LINE_BITS | n`;
# a MEMORY.md line's number.
SOURCE_BITS = 32
NOTE_LINE_BITS = 12
RECALL_TABLES = """
CREATE TABLE IF NOT EXISTS sources(
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,                -- messages | notes | memory
  session TEXT NOT NULL,             -- '' for MEMORY.md, which every session sees
  through INTEGER NOT NULL DEFAULT 0, -- messages: how many of the session's messages are indexed
  stamp TEXT,                        -- messages: the timestamp of the last one (a reset session lacks it)
  UNIQUE(kind, session));
CREATE TABLE IF NOT EXISTS files(name TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS days(source INTEGER NOT NULL, day TEXT NOT NULL, low INTEGER NOT NULL,
  high INTEGER NOT NULL, PRIMARY KEY(source, day)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS state(name TEXT PRIMARY KEY, value TEXT NOT NULL);
-- The redacted text with its local day and time and a label (a message's role, a notes line's or a
-- MEMORY.md line's heading); trigram finds any substring of 3 or more characters, in any script.
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(
  body, day UNINDEXED, at UNINDEXED, label UNINDEXED, tokenize='trigram');
-- Two-character words, which trigrams cannot find (most Chinese words): the body's CJK bigrams and its
-- short words, one token each. Contentless and without positions: it only answers "which rows".
CREATE VIRTUAL TABLE IF NOT EXISTS grams USING fts5(gram, content='', detail='none', tokenize='unicode61');
"""


@lru_cache(maxsize=1)
def fts_problem() -> str | None:
    """Why this Python's SQLite cannot hold the index (None when it can)."""
    import sqlite3  # here: the hooks import the contract on every nanobot start, most never need SQLite
    from contextlib import closing

    try:
        with closing(sqlite3.connect(":memory:")) as db:
            db.execute("CREATE VIRTUAL TABLE probe USING fts5(body, tokenize='trigram')")
    except sqlite3.Error as exc:
        return (f"this Python's SQLite {sqlite3.sqlite_version} has no FTS5 trigram tokenizer ({exc}); "
                "SQLite 3.34 or later with FTS5 is needed")
    return None
