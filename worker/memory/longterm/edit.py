"""Editing one fact of MEMORY.md's managed part, or one still held for it, and undoing the edit.

Editing one fact of MEMORY.md's managed part, or one still held for it (the web page's edit and pin: a held fact's pin
rides in its line of the pending file until the flush writes it pinned), and undoing the edit.

Through the worker's own write path (store._MemoryFile: its lock, compare-and-replace, the sidecar first, only
the managed part changed). The new text is made a fact as the merge makes one (merge.fact_text: one line,
redacted, nothing that would read back as a heading, a list item or a comment); the fact keeps its heading,
importance and session under its new text, and its day becomes today's (the day it was last corrected). The old
text's held copies go (or, for a fact not written yet, take the new text), and the old text is kept out of the
merges of jobs that asked their model before the edit (forgotten.py): nothing brings it back beside the new one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from worker.memory.dedup import normalize
from worker.memory.longterm.forget import Forgotten, change_fact, drop_held, drop_record, pin_held, rename_held
from worker.memory.longterm.merge import fact_text
from worker.memory.longterm.part import Line
from worker.memory.longterm.store import _MemoryFile


class EditRefused(ValueError):
    """Why an edit was not made, in one line for the page."""


@dataclass(frozen=True)
class Edit:
    """An edit made: the old text, the new one, the written fact as it was (None: only held copies were edited)."""

    old: str
    new: str
    before: Forgotten | None
    held: int  # the old text's held copies: given the new text (a fact not written yet) or dropped


def edit_fact(path: Path, old: str, new: str, today: str) -> Edit | None:
    """Replaces the text of the fact whose text is `old` (compared normalized) by `new`, written or held.

    Returns the edit (for undo), or None when neither the part nor the held facts hold such a fact. Raises EditRefused
    for an empty text or one the part holds already as another fact."""
    text = fact_text(new)
    if not text:
        raise EditRefused("the new text is empty: forget the fact instead")

    def change(line: Line, lines: list[Line]) -> None:
        if normalize(text) != normalize(line.text) and any(normalize(other.text) == normalize(text) for other in lines):
            raise EditRefused("MEMORY.md holds that fact already")
        line.text, line.date = text, today

    memory = _MemoryFile(path)
    with memory.lock:
        found = change_fact(memory, old, today, change)
        if found is not None:
            drop_record(memory, normalize(old), today)  # the old text's record, once no fact has that text
            held = len(drop_held(memory, normalize(old)))  # its copies would come back beside the new text
        elif not (held := rename_held(memory, normalize(old), text)):
            return None
        memory.take_out([old], [text])
    return Edit(old, text, found, held)


def pin_fact(path: Path, text: str, pinned: bool, today: str) -> str | None:
    """Pins the fact whose text is `text` against the cap's eviction, or unpins it.

    Pins the fact whose text is `text` against the cap's eviction (or unpins it), written or held (a held one is pinned
    when the flush writes it); the fact's text as it stands, or None when neither is found. Held copies of a written
    fact follow its pin: an unpinned fact's held copy must not pin it again at the flush."""

    def change(line: Line, lines: list[Line]) -> None:
        line.pinned = pinned

    memory = _MemoryFile(path)
    with memory.lock:
        written = change_fact(memory, text, today, change)
        held = pin_held(memory, normalize(text), pinned)
    return written.text if written is not None else held


def undo_edit(path: Path, edit: Edit, today: str) -> bool:
    """The edited fact back as it was.

    Its text and its record (heading, importance, day, session), written or held (the flush may have written a held one
    since); False when no fact has the edit's text any more."""

    def change(line: Line, lines: list[Line]) -> None:
        original = edit.before
        line.text = edit.old
        if original is not None:
            line.group, line.importance, line.date = original.group, original.importance, original.date
            line.session, line.pinned = original.session, original.pinned

    memory = _MemoryFile(path)
    with memory.lock:
        _check_free(memory, edit, today)
        written = change_fact(memory, edit.new, today, change) is not None
        if written:
            drop_record(memory, normalize(edit.new), today)
        done = rename_held(memory, normalize(edit.new), edit.old) > 0 or written
        if done:
            memory.take_out([edit.new], [edit.old])
    return done


def _check_free(memory: _MemoryFile, edit: Edit, today: str) -> None:
    """An undo would not make the old text a second copy of a fact the part holds again (a job wrote it since)."""
    if normalize(edit.old) != normalize(edit.new):
        change_fact(memory, edit.old, today, _refuse_again)


def _refuse_again(line: Line, lines: list[Line]) -> None:
    raise EditRefused(f"MEMORY.md holds the old text again already: {line.text}")
