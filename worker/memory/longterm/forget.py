"""Forgetting one fact of MEMORY.md's managed part, or one still held for it, and putting it back (the web page's
forget and its undo).

Both go through the worker's own write path (store._MemoryFile): its lock, the compare-and-replace against
nanobot's Dream, the sidecar written before the file, and only the managed part changed (the user's lines
and any byte outside the part stay as they are). A forgotten fact also leaves the held facts (it would
come back at the next flush) and, once the file no longer holds it, the sidecar (its text is its key there)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from worker.memory.dedup import normalize
from worker.memory.longterm.held import Held, held_line, read_held
from worker.memory.longterm.merge import Batch, Merged, MergeStats
from worker.memory.longterm.part import Line, Part, locate, parse
from worker.memory.longterm.sidecar import Meta
from worker.memory.longterm.store import _MemoryFile, _replace, hold_facts, in_part


def forgotten(line: Line, position: int) -> Forgotten:
    """A fact of the part as it stands, to be put back as it was."""
    return Forgotten(line.text, line.group, line.importance, line.date, line.session, position, line.pinned)


@dataclass(frozen=True)
class Forgotten:
    """A fact as it stood before it was forgotten: enough to put it back where it was."""

    text: str
    group: str
    importance: int
    date: str
    session: str | None
    position: int  # its index among the part's facts
    pinned: bool = False


def forget_fact(path: Path, text: str, today: str) -> Forgotten | None:
    """Removes the fact whose text is `text` (compared normalized) from the managed part, its held copies and
    its sidecar record; returns it as it was, or None when the part holds no such fact."""
    memory = _MemoryFile(path)
    with memory.lock:
        found = change_fact(memory, text, today, lambda line, lines: lines.remove(line))
        if found is not None:
            _drop_held(memory, normalize(text))
            drop_record(memory, normalize(text), today)
    return found


def change_fact(memory: _MemoryFile, text: str, today: str,
                change: Callable[[Line, list[Line]], None]) -> Forgotten | None:
    """`change(line, lines)` applied to the fact whose text is `text` (compared normalized), the lock held;
    the fact as it was before, or None when the part holds no such fact."""
    key = normalize(text)
    found: list[Forgotten] = []

    def edit(part: Part) -> bool:
        found.clear()
        position = next((n for n, line in enumerate(part.lines) if normalize(line.text) == key), None)
        if position is None:
            return False
        found.append(forgotten(part.lines[position], position))
        change(part.lines[position], part.lines)
        return True

    memory._update(in_part(today, edit))
    return found[0] if found else None


def drop_record(memory: _MemoryFile, key: str, today: str) -> None:
    """Once the file is written (the lock held): the sidecar's record of a fact the file no longer holds goes,
    its text being the record's key."""
    memory._update(lambda content, meta: Merged(content, {k: v for k, v in meta.items() if k != key}
                                                if _absent(content, key, today, meta) else meta, MergeStats()))


def _absent(content: str, key: str, today: str, meta: dict[str, Meta]) -> bool:
    span = locate(content)
    return span is None or all(normalize(line.text) != key
                               for line in parse(content[span[0]:span[1]], today, "en", meta).lines)


def _drop_held(memory: _MemoryFile, key: str) -> list[Held]:
    """The fact's copies waiting in the pending file go (the next flush would write it again); returns them, each
    as a batch of its own with its session, day and time held."""
    kept: list[bytes] = []
    removed: list[Held] = []
    for h in read_held(memory.given):
        facts = [fact for fact in h.batch.facts if normalize(fact.text) != key]
        gone = [fact for fact in h.batch.facts if normalize(fact.text) == key]
        if gone:
            removed.append(Held(Batch(gone, h.batch.language, h.batch.today, h.batch.session), h.held_at))
        if facts:
            kept.append(held_line(Batch(facts, h.batch.language, h.batch.today, h.batch.session), h.held_at))
    if removed and kept:
        _replace(memory.pending_path, b"".join(kept))
    elif removed:
        memory.pending_path.unlink(missing_ok=True)
    return removed


def forget_held(path: Path, text: str) -> list[Held]:
    """Removes a fact still waiting for MEMORY.md (memory/.MEMORY.pending.jsonl), every copy of it; returns them."""
    memory = _MemoryFile(path)
    with memory.lock:
        return _drop_held(memory, normalize(text))


def restore_held(path: Path, held: Sequence[Held]) -> None:
    """Holds forgotten held facts again, as they were held (the worker's own hold: appended, under its lock)."""
    for h in held:
        hold_facts(path, h.batch, h.held_at)


def restore_fact(path: Path, fact: Forgotten, today: str) -> bool:
    """Puts a forgotten fact back at its place, with its importance, day, session and pin; False when the part
    holds it again already (or has no part any more: nothing to put it in)."""
    key = normalize(fact.text)
    done: list[bool] = []

    def edit(part: Part) -> bool:
        done.clear()
        if any(normalize(line.text) == key for line in part.lines):
            return False
        line = Line(fact.text, fact.group, fact.importance, fact.date, session=fact.session, pinned=fact.pinned)
        part.lines.insert(min(fact.position, len(part.lines)), line)
        done.append(True)
        return True

    memory = _MemoryFile(path)
    with memory.lock:
        memory._update(in_part(today, edit))
    return bool(done)
