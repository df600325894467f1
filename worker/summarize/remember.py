"""What a summarize job reads from and writes to the memory files: which messages are noted already, the
facts MEMORY.md holds, and the notes and facts a call gave, dated by their messages."""

from __future__ import annotations

import logging

from worker.errors import MemoryFilesError, NanobotConfigError
from worker.memory.entries import DailyNotes, Fact
from worker.memory.notes import Noted, is_noted
from worker.summarize.deps import Deps
from worker.summarize.run import Run
from worker.text.language import NOTE_FIELDS
from worker.text.prepare import Entry

log = logging.getLogger("worker.summarize.remember")
KNOWN_FACTS_IN_PROMPT = 100


async def write_memory(run: Run, notes: list[DailyNotes], facts: list[Fact], language: str) -> str:
    """Notes of the session's day files, and the facts MEMORY.md may take: only what the user said, only
    in a trusted session (NANOBOT_MEMORY_SESSIONS). A fact the user took out of MEMORY.md after the try asked its
    model (`run.started`) is not written back. Memory-file trouble (a full disk, a read-only workspace, a lock held
    too long) is reported, not fatal: the job's outcome says memory was not written."""
    deps, key, asked = run.deps, run.key, run.started
    trusted = deps.is_trusted(key)
    admitted = [fact for fact in facts if fact.source == "user"] if trusted else []
    left_out = len(facts) - len(admitted)
    why = "" if not left_out else (
        f"; {left_out} facts left out ({'not stated by the user' if trusted else 'an untrusted session'})")
    try:
        sessions_dir = deps.sessions_dir
    except NanobotConfigError:
        sessions_dir = None  # facts are held then, as while a session is active
    try:
        written = await deps.memory.write(key, notes, admitted, language, sessions_dir,
                                          deps.settings.summary_cache_ttl, asked)
        return str(written) + why
    except MemoryFilesError as exc:
        log.warning("%s: memory files not written: %s", key, exc)
        run.memory_unwritten = f"memory files not written: {exc}"
        return run.memory_unwritten


def known_facts(deps: Deps) -> list[str]:
    """What MEMORY.md holds, so the model does not add it again; bounded, it rides in every call."""
    try:
        return deps.memory.known_facts(KNOWN_FACTS_IN_PROMPT)
    except OSError as exc:
        log.warning("MEMORY.md not readable: %s", exc)
        return []


def unnoted(deps: Deps, session_key: str, entries: list[Entry], generation: int = 0) -> list[Entry]:
    """Entries that no span of this session (this generation of it) in their day's notes file covers yet."""
    noted: dict[str, list[Noted]] = {}
    fresh = []
    for entry in entries:
        if entry.date is None or entry.timestamp is None:
            fresh.append(entry)
            continue
        if entry.date not in noted:
            noted[entry.date] = _noted_spans(deps, session_key, entry.date, generation)
        if not is_noted(entry.timestamp, noted[entry.date], entry.position):
            fresh.append(entry)
    return fresh


def _noted_spans(deps: Deps, session_key: str, date: str, generation: int) -> list[Noted]:
    try:
        return deps.memory.noted_spans(session_key, date, generation)
    except (OSError, ValueError) as exc:
        log.warning("%s: cannot read the notes of %s: %s", session_key, date, exc)
        return []


def dated_notes(notes: list[DailyNotes], entries: list[Entry], generation: int = 0) -> list[DailyNotes]:
    """One entry per day of the messages, merged across chunks; spans come from the messages.

    A day with nothing worth noting still gets its (empty) entry: its span marks those messages as noted.
    No messages, no notes: whatever the model wrote then repeats what the day files already hold.
    """
    if not entries:
        return []
    dates = sorted({e.date for e in entries if e.date})
    by_date: dict[str, DailyNotes] = {d: DailyNotes(date=d) for d in dates}
    for note in notes:
        date = note.date if note.date in dates else (dates[-1] if dates else note.date)
        merged = by_date.setdefault(date, DailyNotes(date=date))
        for name in NOTE_FIELDS:
            target = getattr(merged, name)
            target.extend(item for item in getattr(note, name) if item not in target)
    for date, note in by_date.items():
        note.generation = generation
        stamps = [e for e in entries if e.date == date]
        if stamps:
            note.first_timestamp = stamps[0].timestamp
            note.last_timestamp = stamps[-1].timestamp
            note.first_position, note.last_position = stamps[0].position, stamps[-1].position
    return [by_date[d] for d in sorted(by_date)]
