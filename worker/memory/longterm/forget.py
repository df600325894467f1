"""Forgetting one fact of MEMORY.md's managed part and every copy still held for it, and putting it back.

Forgetting one fact of MEMORY.md's managed part and every copy still held for it, and putting it back (the web page's
forget and its undo); what a fact someone else changed reads now.

Both go through the worker's own write path (store._MemoryFile): its lock, the compare-and-replace against
nanobot's Dream, the sidecar written before the file, and only the managed part changed (the user's lines
and any byte outside the part stay as they are). A forgotten fact also leaves the held facts (it would
come back at the next flush) and, once the file no longer holds it, the sidecar (its text is its key there);
its text is kept out of the merges of jobs that asked their model before (forgotten.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from worker.files import read_bytes
from worker.memory.dedup import best_match, near_matches, normalize
from worker.memory.longterm.held import Held, held_line, read_held
from worker.memory.longterm.merge import Merged, MergeStats
from worker.memory.longterm.part import Line, Part, locate, parse
from worker.memory.longterm.sidecar import Meta
from worker.memory.longterm.store import _MemoryFile, _replace, in_part
from worker.text.redact import one_line


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


@dataclass(frozen=True)
class Forgot:
    """What a forget took away: the written fact as it stood (None: it was only held) and its held copies."""

    written: Forgotten | None
    held: list[Held]

    @property
    def text(self) -> str:
        return self.written.text if self.written is not None else self.held[0].batch.facts[0].text


def forget_fact(path: Path, text: str, today: str) -> Forgot | None:
    """Removes the fact `text` and every copy still held; remembers that the user took it out.

    Removes the fact whose text is `text` (compared normalized) from the managed part and its sidecar record, and every
    copy of it still held (the flush may have written a held fact a moment ago, or a job held it again); remembers that
    the user took it out, so that no job that asked its model before brings it back. Returns what went, or None when
    neither the part nor the held facts hold it."""
    memory = _MemoryFile(path)
    with memory.lock:
        found = change_fact(memory, text, today, lambda line, lines: lines.remove(line))
        if found is not None:
            drop_record(memory, normalize(text), today)
        held = drop_held(memory, normalize(text))
        if found is None and not held:
            return None
        memory.take_out([text])
    return Forgot(found, held)


def change_fact(
    memory: _MemoryFile, text: str, today: str, change: Callable[[Line, list[Line]], None]
) -> Forgotten | None:
    """`change(line, lines)` applied to the fact whose text is `text` (compared normalized), the lock held.

    The fact as it was before, or None when the part holds no such fact."""
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
    """Drops the sidecar's record of a fact the file no longer holds.

    Once the file is written (the lock held): the sidecar's record of a fact the file no longer holds goes, its text
    being the record's key."""
    memory._update(
        lambda content, meta: Merged(
            content,
            {k: v for k, v in meta.items() if k != key} if _absent(content, key, today, meta) else meta,
            MergeStats(),
        )
    )


def _absent(content: str, key: str, today: str, meta: dict[str, Meta]) -> bool:
    span = locate(content)
    return span is None or all(
        normalize(line.text) != key for line in parse(content[span[0] : span[1]], today, "en", meta).lines
    )


def drop_held(memory: _MemoryFile, key: str) -> list[Held]:
    """The fact's copies waiting in the pending file go (the next flush would write it again).

    Returns them, each as a batch of its own with its session, day and time held."""
    kept: list[bytes] = []
    removed: list[Held] = []
    for h in read_held(memory.given):
        facts = [fact for fact in h.batch.facts if normalize(fact.text) != key]
        gone = [fact for fact in h.batch.facts if normalize(fact.text) == key]
        if gone:
            removed.append(Held(replace(h.batch, facts=gone, pinned=h.batch.pinned & {key}), h.held_at))
        if facts:
            kept.append(held_line(replace(h.batch, facts=facts, pinned=h.batch.pinned - {key}), h.held_at))
    if removed and kept:
        _replace(memory.pending_path, b"".join(kept))
    elif removed:
        memory.pending_path.unlink(missing_ok=True)
    return removed


def rename_held(memory: _MemoryFile, key: str, text: str) -> int:
    """Gives every held copy of a fact a new text, the lock held.

    The lock held: every held copy of the fact whose normalized text is `key` gets the text `text` (an edit of a fact
    not written yet); returns how many."""
    renamed = 0
    lines: list[bytes] = []
    for h in read_held(memory.given):
        facts = [
            fact.model_copy(update={"text": text}) if normalize(fact.text) == key else fact for fact in h.batch.facts
        ]
        renamed += sum(1 for fact in h.batch.facts if normalize(fact.text) == key)
        pinned = h.batch.pinned - {key} | {normalize(text)} if key in h.batch.pinned else h.batch.pinned
        lines.append(held_line(replace(h.batch, facts=facts, pinned=pinned), h.held_at))
    if renamed:
        _replace(memory.pending_path, b"".join(lines))
    return renamed


def pin_held(memory: _MemoryFile, key: str, pinned: bool) -> str | None:
    """Pins or unpins every held copy of a fact, the lock held.

    The lock held: every held copy of the fact whose normalized text is `key` pinned (or unpinned), so that the flush
    writes it pinned; the held fact's text, or None when none is held."""
    found: str | None = None
    lines: list[bytes] = []
    for h in read_held(memory.given):
        texts = [fact.text for fact in h.batch.facts if normalize(fact.text) == key]
        found = found or (texts[0] if texts else None)
        marks = h.batch.pinned | {key} if pinned and texts else h.batch.pinned - {key}
        lines.append(held_line(replace(h.batch, pinned=marks), h.held_at))
    if found is not None:
        _replace(memory.pending_path, b"".join(lines))
    return found


def restore_forgotten(path: Path, forgot: Forgot, today: str) -> Restored:
    """Undoes a forget.

    The written fact back at its place, its held copies held again (the user wants the text again: no longer kept
    out)."""
    memory = _MemoryFile(path)
    with memory.lock:
        memory.take_out([], [forgot.text])
        done: Restored = "restored" if forgot.held else "absent"
        if forgot.written is not None:
            done = restore_fact(memory, forgot.written, today)
        for h in forgot.held:
            memory.hold(h.batch, h.held_at)
    return done


def fact_texts(path: Path, today: str) -> list[str]:
    """The texts of the managed part's facts, then of the held ones.

    The texts of the managed part's facts, then of the held ones, as MEMORY.md (`path`) and its pending file hold them
    now."""
    raw = read_bytes(path)
    content = raw.decode("utf-8", errors="replace") if raw is not None else ""
    span = locate(content)
    texts = [] if span is None else [line.text for line in parse(content[span[0] : span[1]], today).lines]
    return texts + [one_line(fact.text) for h in read_held(path) for fact in h.batch.facts]


def find_fact(path: Path, text: str, today: str) -> str | None:
    """The fact, written or held, whose text is `text` (compared normalized), as it reads.

    None when there is none (what forget_fact would forget, read without the lock: for a dry run)."""
    key = normalize(text)
    return next((each for each in fact_texts(path, today) if normalize(each) == key), None)


def now_reads(path: Path, text: str, today: str) -> str | None:
    """What the fact `text` reads now, after someone else changed it.

    The fact of the part, or a held one, closest to it (the merge's correction keeps most of the words); None when there
    is none."""
    texts = fact_texts(path, today)
    found = best_match(normalize(text), [normalize(each) for each in texts])
    return None if found is None else texts[found]


def near_facts(path: Path, text: str, today: str, limit: int = 3) -> list[str]:
    """The facts, written or held, nearest to `text` (a text mistyped, or a part of a fact), nearest first."""
    texts = list(dict.fromkeys(fact_texts(path, today)))
    return [texts[n] for n in near_matches(normalize(text), [normalize(each) for each in texts], limit)]


# What an undo of a forget did: put it back; found it in the part again already (a job wrote it meanwhile); or
# found no managed part to put it in.
Restored = Literal["restored", "again", "no part", "absent"]


def restore_fact(memory: _MemoryFile, fact: Forgotten, today: str) -> Restored:
    """The lock held: puts a forgotten fact back at its place, with its importance, day, session and pin."""
    key = normalize(fact.text)
    done: list[Restored] = []

    def edit(part: Part) -> bool:
        done[:] = ["again" if any(normalize(line.text) == key for line in part.lines) else "restored"]
        if done[0] == "again":
            return False
        line = Line(fact.text, fact.group, fact.importance, fact.date, session=fact.session, pinned=fact.pinned)
        part.lines.insert(min(fact.position, len(part.lines)), line)
        return True

    memory._update(in_part(today, edit))
    return done[0] if done else "no part"


ADDED_ON_PAGE = "(added on the page)"  # the provenance of a fact the user typed: its sidecar's session


def add_fact(path: Path, text: str, group: str, importance: int, today: str) -> Restored:
    """Adds a fact the user typed to the managed part, as a forgotten one is put back.

    A fact the user typed, added last to the managed part as a forgotten one is put back (through the worker's lock and
    write rules; no longer kept out if it was forgotten before), learned today and said to be added on the page; "again"
    when the part holds it already, "no part" when MEMORY.md has no managed part yet."""
    fact = Forgotten(one_line(text), group, importance, today, ADDED_ON_PAGE, position=1 << 30)
    return restore_forgotten(path, Forgot(fact, []), today)
