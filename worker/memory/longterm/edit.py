"""Editing one fact of MEMORY.md's managed part (the web page's edit and pin) and undoing the edit.

Through the worker's own write path (store._MemoryFile: its lock, compare-and-replace, the sidecar first, only
the managed part changed). The new text is made a fact as the merge makes one (merge.fact_text: one line,
redacted, nothing that would read back as a heading, a list item or a comment); the fact keeps its heading,
importance and session under its new text, and its day becomes today's (the day it was last corrected)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from worker.memory.dedup import normalize
from worker.memory.longterm.forget import Forgotten, change_fact, drop_record
from worker.memory.longterm.merge import fact_text
from worker.memory.longterm.part import Line
from worker.memory.longterm.store import _MemoryFile


class EditRefused(ValueError):
    """Why an edit was not made, in one line for the page."""


def edit_fact(path: Path, old: str, new: str, today: str) -> Forgotten | None:
    """Replaces the text of the fact whose text is `old` (compared normalized) by `new`; returns the fact as it
    was (for undo), or None when the part holds no such fact. Raises EditRefused for an empty text or one the
    part holds already as another fact."""
    text = fact_text(new)
    if not text:
        raise EditRefused("the new text is empty: forget the fact instead")

    def change(line: Line, lines: list[Line]) -> None:
        if normalize(text) != normalize(line.text) and any(normalize(other.text) == normalize(text) for other in lines):
            raise EditRefused("MEMORY.md holds that fact already")
        line.text, line.date = text, today

    return _change_line(path, old, today, change)


def pin_fact(path: Path, text: str, pinned: bool, today: str) -> Forgotten | None:
    """Pins the fact whose text is `text` against the cap's eviction (or unpins it); the fact as it was, or None."""
    def change(line: Line, lines: list[Line]) -> None:
        line.pinned = pinned

    return _change_line(path, text, today, change)


def undo_edit(path: Path, edited: str, original: Forgotten, today: str) -> bool:
    """The edited fact back as it was: its text and its record (heading, importance, day, session)."""
    def change(line: Line, lines: list[Line]) -> None:
        line.text, line.group, line.importance = original.text, original.group, original.importance
        line.date, line.session, line.pinned = original.date, original.session, original.pinned

    return _change_line(path, edited, today, change) is not None


def _change_line(path: Path, text: str, today: str, change: Callable[[Line, list[Line]], None]) -> Forgotten | None:
    """`change(line, lines)` applied to the fact whose text is `text`, under the lock; the fact as it was before."""
    memory = _MemoryFile(path)
    with memory.lock:
        found = change_fact(memory, text, today, change)
        if found is not None:
            drop_record(memory, normalize(text), today)  # the old text's record, once no fact has that text
    return found
