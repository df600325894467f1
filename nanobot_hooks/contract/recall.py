"""The recall index's layout.

Where the SQLite file lives, its schema, how row ids are built, and the text its search terms are indexed from."""

from __future__ import annotations

import json
import math
import re
import sys
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from itertools import accumulate
from typing import NamedTuple

from nanobot_hooks.text import CJK_RUN, cjk_grams

__all__ = [
    "BLOCK_BYTES",
    "NOTE_LINE_BITS",
    "PAGE_BYTES",
    "RECALL_INDEX",
    "RECALL_SCHEMA_VERSION",
    "RECALL_TABLES",
    "RETIRED_SOURCE",
    "SOURCE_BITS",
    "Block",
    "Directory",
    "directory",
    "fts_problem",
    "index_text",
    "length",
    "lengths",
    "pack",
    "Passage",
    "read_block",
    "retired_source",
    "source_owner",
    "unpack",
    "VECTORS_TABLE",
    "quantize",
    "similarity",
]

# The recall index: written by the worker (worker/memory/recall_index/), read by the recall tool
# (nanobot_hooks/recall.py). SQLite in the workspace's memory folder, beside the files it is built from:
# the tool finds it from nanobot's workspace alone, and nanobot's git store commits only the files it
# tracks, so the index never enters the workspace's history. The files stay the source of truth; the
# index is rebuilt from them when it is missing or of another schema version.
RECALL_INDEX = "memory/.recall.sqlite"  # relative to the workspace
# PRAGMA user_version; any other value means "rebuild" (3: each passage's text twice; 4: word positions kept, and a
# row a passage saying which block holds it)
RECALL_SCHEMA_VERSION = 5
# SQLite's page: every table and index takes one at least, and a short conversation's index has a dozen of them
# (at 4 KB, SQLite's default, 56 KB before the first passage: more than the text of a thousand short turns).
PAGE_BYTES = 1024
# A row's id is `source << SOURCE_BITS | position`: the rows of one source (one session's archived messages,
# one session's notes lines, MEMORY.md) form one rowid range, which FTS5 filters inside its index.
# Positions: a message's index in the session; a notes line's `date.toordinal() << NOTE_LINE_BITS | n`;
# a MEMORY.md line's number.
SOURCE_BITS = 32
NOTE_LINE_BITS = 12
TOKENIZE = "porter unicode61 remove_diacritics 2"
# A passage's meaning, when NANOBOT_SUMMARY_EMBEDDING_MODEL is set: its embedding normalized and quantized to int8
# (`quantize`, one byte a dimension), kept by the passage's rowid; an empty blob marks a passage the model refused
# (never asked again). Created by the worker in an index of this version that lacks it: no rebuild.
VECTORS_TABLE = "CREATE TABLE IF NOT EXISTS vectors(rowid INTEGER PRIMARY KEY, v BLOB NOT NULL);"
RECALL_TABLES = f"""
CREATE TABLE IF NOT EXISTS sources(
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,                -- messages | notes | memory
  session TEXT NOT NULL,             -- '' for MEMORY.md, which every session sees
  through INTEGER NOT NULL DEFAULT 0, -- messages: how many of the session's messages are indexed
  stamp TEXT,                        -- messages: the timestamp of the last one (a reset session lacks it)
  UNIQUE(kind, session));
CREATE TABLE IF NOT EXISTS files(name TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL);
-- The first and last positions (not rowids: smaller numbers) a source holds of each day.
CREATE TABLE IF NOT EXISTS days(source INTEGER NOT NULL, day TEXT NOT NULL, low INTEGER NOT NULL,
  high INTEGER NOT NULL, PRIMARY KEY(source, day)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS state(name TEXT PRIMARY KEY, value TEXT NOT NULL);
-- A passage's words: `terms` (index_text below) in an index without a copy of the text (contentless, no
-- lengths kept: the search ranks by BM25 itself) nor the words' positions (detail=none: which passages hold a
-- word is all the search asks), so the text is kept once, in `blocks`. Words are stemmed (porter: "shows" finds
-- "show"), accents and case aside.
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(
  terms, content='', columnsize=0, detail=none, tokenize='{TOKENIZE}');
-- Neighbouring passages of one source, compressed together (pack: a block compresses far better than one short
-- message alone): what the answer shows of each (Passage). A block is named by its first passage's rowid (`id`)
-- and holds the rowids up to `last` (blocks never overlap), `n` passages; `lengths` (directory) says which rowids
-- it holds and each one's length in words, so that ranking reads no text.
CREATE TABLE IF NOT EXISTS blocks(id INTEGER PRIMARY KEY, last INTEGER NOT NULL, n INTEGER NOT NULL,
  lengths BLOB NOT NULL, passages BLOB NOT NULL);
{VECTORS_TABLE}
"""
RECORD_SEPARATOR = b"\x1e"
GROUP_SEPARATOR = b"\x1d"
BLOCK_BYTES = 16 * 1024  # of passages' text compressed together: what a hit shown decompresses


class Passage(NamedTuple):
    """What the answer shows of a passage."""

    body: str  # redacted
    day: str | None  # YYYY-MM-DD, local
    at: str | None  # "YYYY-MM-DD HH:MM", local
    label: str  # a message's role, a notes line's or a MEMORY.md line's heading


def pack(passages: dict[int, Passage]) -> bytes:
    """A block's passages, compressed together field by field.

    A block's passages (by rowid), compressed together field by field (alike values side by side compress far better
    than record by record): a JSON header `[first rowid, steps to the next ones, days, times, labels]` (a day is 0 when
    it is its time's), GROUP_SEPARATOR, then each body as a JSON string, apart by RECORD_SEPARATOR (JSON escapes every
    control character, so no body holds either)."""
    rowids = sorted(passages)
    shown = [passages[rowid] for rowid in rowids]
    header = [
        rowids[0],
        [b - a for a, b in zip(rowids, rowids[1:], strict=False)],
        [0 if p.at and p.day == p.at[:10] else p.day for p in shown],
        _minutes([p.at for p in shown]),
        [p.label for p in shown],
    ]
    bodies = RECORD_SEPARATOR.join(json.dumps(p.body, ensure_ascii=False).encode("utf-8") for p in shown)
    return zlib.compress(json.dumps(header, ensure_ascii=False).encode("utf-8") + GROUP_SEPARATOR + bodies)


_EPOCH = datetime(2000, 1, 1)
_AT = "%Y-%m-%d %H:%M"


def _minutes(ats: list[str | None]) -> list[int | str | None]:
    """Passages' times as the minutes since the time before.

    Passages' times as the minutes since the time before (a conversation's times differ by a few minutes: a number or
    two each, where "2026-11-20 10:00" costs several bytes even compressed); a time that is no such string stays as it
    is."""
    found: list[int | str | None] = []
    last = 0
    for at in ats:
        try:
            minute = (datetime.strptime(at, _AT) - _EPOCH) // timedelta(minutes=1) if at else None
        except ValueError:
            minute = None
        if minute is not None and at == (_EPOCH + timedelta(minutes=minute)).strftime(_AT):
            found.append(minute - last)
            last = minute
        else:
            found.append(at)
    return found


class Block(NamedTuple):
    """A block's passages, decompressed; each body decoded only when shown (`passage`)."""

    rowids: list[int]  # ascending
    days: list[str | int | None]
    ats: list[str | int | None]  # minutes since _EPOCH, or a time that is no "YYYY-MM-DD HH:MM"
    labels: list[str]
    bodies: list[bytes]  # JSON strings

    def passage(self, rowid: int) -> Passage | None:
        """The passage, None when the block does not hold it; ValueError or TypeError for a damaged one."""
        at = bisect_left(self.rowids, rowid)
        if at >= len(self.rowids) or self.rowids[at] != rowid:
            return None
        when, day = self.ats[at], self.days[at]
        if isinstance(when, int):
            when = (_EPOCH + timedelta(minutes=when)).strftime(_AT)
        return Passage(
            str(json.loads(self.bodies[at])),
            when[:10] if day == 0 and when else day,  # type: ignore[arg-type]
            when,
            str(self.labels[at] or ""),
        )


def read_block(block: bytes) -> Block:
    """A block as `pack` made it; ValueError, TypeError or zlib.error for a damaged one."""
    header, _, bodies = zlib.decompress(block).partition(GROUP_SEPARATOR)
    first, steps, days, ats, labels = json.loads(header.decode("utf-8"))
    rowids = [int(first)]
    for step in steps:
        rowids.append(rowids[-1] + int(step))
    minute = 0
    for number, when in enumerate(ats):  # the minutes since the time before, as absolute minutes
        if isinstance(when, int):
            minute += when
            ats[number] = minute
    found = Block(rowids, days, ats, labels, bodies.split(RECORD_SEPARATOR))
    if not len(rowids) == len(days) == len(ats) == len(labels) == len(found.bodies):
        raise ValueError("a damaged block")
    return found


def unpack(block: bytes) -> dict[int, Passage]:
    """A block's passages; ValueError, TypeError or zlib.error for a damaged one."""
    held = read_block(block)
    return {rowid: passage for rowid in held.rowids if (passage := held.passage(rowid)) is not None}


_WORD = re.compile(r"[^\W_]+")  # what SQLite's unicode61 tokenizer takes as one word


def length(body: str) -> int:
    """A passage's length for BM25: the tokens its index text holds (a word, or a CJK letter's token)."""
    letters = sum(len(run) for run in CJK_RUN.findall(body))
    return letters + len(_WORD.findall(CJK_RUN.sub(" ", body) if letters else body))


def directory(first: int, passages: dict[int, Passage]) -> bytes:
    """A block's `lengths`.

    The steps from one passage's rowid to the next (from the block's `first`: mostly 1, which compresses to nearly
    nothing, where the offsets themselves would not), then each passage's length (capped at 65,535), little-endian
    unsigned arrays compressed together."""
    rowids = sorted(passages)
    steps = array("I", (b - a for a, b in zip([first, *rowids], rowids, strict=False)))
    sizes = array("H", (min(length(passages[rowid].body), 0xFFFF) for rowid in rowids))
    if sys.byteorder == "big":
        steps.byteswap()
        sizes.byteswap()
    return zlib.compress(steps.tobytes() + sizes.tobytes())


class Directory(NamedTuple):
    """A block's passages, read from its `lengths` without its text.

    Their rowids (as offsets from the block's first, ascending) and their lengths in words."""

    first: int
    offsets: array[int]
    sizes: array[int]

    def length(self, rowid: int) -> int | None:
        """The passage's length, None when the block does not hold it."""
        offset = rowid - self.first
        at = bisect_left(self.offsets, offset)
        return self.sizes[at] if at < len(self.offsets) and self.offsets[at] == offset else None

    def rowids(self) -> list[int]:
        return [self.first + offset for offset in self.offsets]


def lengths(first: int, data: bytes) -> Directory:
    """A block's `lengths` read (directory); ValueError or zlib.error for a damaged one."""
    raw = zlib.decompress(data)
    count = len(raw) // 6
    if len(raw) != count * 6:
        raise ValueError("a damaged block directory")
    steps, sizes = array("I", raw[: 4 * count]), array("H", raw[4 * count :])
    if sys.byteorder == "big":
        steps.byteswap()
        sizes.byteswap()
    return Directory(first, array("I", accumulate(steps)), sizes)


# What a session held before `/new` is indexed as a source of its own (its row ids must not meet the new
# conversation's), named `<session key>` + RETIRED_SOURCE + `<the kept copy's name>`; it is the session's own
# material all the same (`source_owner`). A session key holds no control character, so the separator is no key's.
RETIRED_SOURCE = "\x1f"


def retired_source(key: str, copy: str) -> str:
    return f"{key}{RETIRED_SOURCE}{copy}"


def source_owner(session: str) -> str:
    """The session a source's material belongs to: itself, or the session a pre-`/new` copy came from."""
    return session.partition(RETIRED_SOURCE)[0]


@lru_cache(maxsize=1)
def fts_problem() -> str | None:
    """Why this Python's SQLite cannot hold the index (None when it can)."""
    import sqlite3  # here: the hooks import the contract on every nanobot start, most never need SQLite
    from contextlib import closing

    try:
        with closing(sqlite3.connect(":memory:")) as db:
            db.execute("CREATE VIRTUAL TABLE probe USING fts5(terms, tokenize='porter unicode61 remove_diacritics 2')")
            db.execute("SELECT bm25(probe) FROM probe WHERE probe MATCH 'x'").fetchall()
    except sqlite3.Error as exc:
        return (
            f"this Python's SQLite {sqlite3.sqlite_version} cannot rank full-text searches ({exc}); "
            "SQLite 3.27 or later with FTS5 is needed"
        )
    return None


def index_text(body: str) -> str:
    """The text a passage's words are indexed from: the body, each CJK run replaced by its tokens.

    Changing what this returns needs a new RECALL_SCHEMA_VERSION: a passage is taken out of the index with the
    words it was indexed from, made again from its text by this function."""
    return CJK_RUN.sub(lambda run: " " + " ".join(cjk_grams(run.group())) + " ", body)


def quantize(vector: Sequence[float]) -> bytes:
    """An embedding as stored (VECTORS_TABLE): normalized, each dimension an int8 of -127..127; b"" for none."""
    norm = math.sqrt(sum(x * x for x in vector))
    if not vector or not norm or not math.isfinite(norm):
        return b""
    return array("b", (max(-127, min(127, round(127 * x / norm))) for x in vector)).tobytes()


def similarity(a: bytes, b: bytes) -> float:
    """The cosine of two quantized embeddings (0.0 when either is empty or their sizes differ)."""
    if not a or len(a) != len(b):
        return 0.0
    x, y = array("b", a), array("b", b)
    norms = math.sqrt(sum(v * v for v in x) * sum(v * v for v in y))
    return sum(map(int.__mul__, x, y)) / norms if norms else 0.0
