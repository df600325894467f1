"""Where a text lives besides MEMORY.md, found and taken out there.

Where a text lives besides MEMORY.md (the day files' note lines, the recall index's passages), found and taken out
there: "forget everywhere", the one home of the web page's button and `nanobot-summary forget --everywhere`. nanobot's
session files are never changed: they are nanobot's."""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path

from worker.memory.dedup import normalize
from worker.memory.notes import drop_lines_holding, key_words
from worker.memory.recall_index import RecallIndex, RecallIndexError
from worker.memory.recall_index.forget import unarchived_holding

log = logging.getLogger("worker.memory")

MIN_LETTERS = 3  # a shorter text would hold in half the notes: too blunt to aim a removal with


def too_short(text: str) -> bool:
    """Whether `text` is too short to forget everywhere (pure)."""
    return len(normalize(text)) < MIN_LETTERS


@dataclass(frozen=True)
class Elsewhere:
    """Where a text lives besides MEMORY.md.

    The day files' note lines that hold it (by day file) and the recall index's passages that do ((rowid, kind,
    session): an archived message of a session, or a notes line)."""

    text: str
    notes: dict[str, list[str]]
    passages: list[tuple[int, str, str]]
    problem: str | None = None  # the recall index could not be read (the exception's name)
    unarchived: int = 0  # messages no summary covered yet, kept out of the index when one does (if removed)

    @property
    def archives(self) -> list[str]:
        """The sessions whose archived messages in the recall index hold the text."""
        return sorted({session for _, kind, session in self.passages if kind == "messages"})

    @property
    def words(self) -> list[str]:
        """The words a line or passage holds to hold the text (notes.key_words)."""
        return sorted(key_words(self.text))

    @property
    def note_lines(self) -> int:
        return sum(len(lines) for lines in self.notes.values())

    @property
    def anywhere(self) -> bool:
        return bool(self.notes or self.passages or self.unarchived)


def where_else(
    workspace: Path, sessions_dir: Path, tz: tzinfo | None, text: str, remove: bool = False, unarchived: bool = False
) -> Elsewhere:
    """Elsewhere for `text` in `workspace`.

    With `remove`, its note lines are taken out of the day files and its passages out of the recall index, the archived
    messages' kept out of it for good, and so are the messages no summary covered yet (the index's tombstones: nanobot's
    session files still hold them, and a rebuild, a rewritten session file or the next summary would index them again).
    MEMORY.md's rows follow the file. `unarchived` (without `remove`): those messages are counted too, which reads every
    session file. Raises filelock.Timeout or OSError when the notes cannot be changed now."""
    notes = drop_lines_holding(workspace / "memory", text, remove)
    index = RecallIndex(workspace, tz)
    passages: list[tuple[int, str, str]] = []
    problem = None
    live = 0
    try:
        if index.path.exists():
            if remove:
                # The messages not archived yet first: one a summary archives meanwhile is then either kept out
                # or already indexed, and taken out below.
                live = index.keep_out_unarchived(sessions_dir, text)
                index.refresh(sessions_dir)  # the day files just changed: their rows follow them
            elif unarchived:
                live = len(unarchived_holding(sessions_dir, text, tz))
            passages = index.passages_holding(text, remove)
    except (RecallIndexError, sqlite3.Error, OSError) as exc:
        log.warning("recall index not searched for a forgotten text: %s", exc)
        problem = type(exc).__name__
    finally:
        index.close()
    return Elsewhere(text, notes, passages, problem, live)
