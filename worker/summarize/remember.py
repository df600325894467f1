"""What a summarize job reads from and writes to the memory files.

Which messages are noted already, the facts MEMORY.md holds, and the notes and facts a call gave, dated by their
messages."""

from __future__ import annotations

import logging
import re
from dataclasses import replace

from arq.connections import ArqRedis

from nanobot_hooks.contract.keys import Keys
from worker.errors import MemoryFilesError, NanobotConfigError
from worker.memory.entries import DailyNotes, Fact
from worker.memory.notes import Noted, clean, has_notes, is_noted
from worker.memory.writer import MemoryResult
from worker.state import formats
from worker.summarize.deps import Deps
from worker.summarize.run import Run
from worker.text.language import NOTE_FIELDS
from worker.text.prepare import Entry

log = logging.getLogger("worker.summarize.remember")
KNOWN_FACTS_IN_PROMPT = 100
# A day of a session whose user messages a model's answer gave no notes for is asked this many times in all
# (the job, then the daily run); then the fallback writes the user's own lines. Counted in Redis, per session.
NOTES_TRIES = 2
MISSES_SECONDS = 3 * 24 * 3600  # the daily run reaches back a day: a count older than that is of no use
FALLBACK_CHARS = 300  # of each of the user's lines the fallback writes
NO_NOTES = "the model's answer had no notes"
_USER_ENTRY = re.compile(r"^(?:\[\d{4}-\d{2}-\d{2} (?P<time>\d{2}:\d{2})\] )?user: (?P<text>.*)$", re.DOTALL)


def user_said(entry: Entry) -> tuple[str, str] | None:
    """(its HH:MM, "" without a time; its text) when the entry is a message of the user's, else None."""
    found = _USER_ENTRY.match(entry.text)
    return (found["time"] or "", found["text"]) if found else None


def fallback_note(note: DailyNotes, entries: list[Entry]) -> DailyNotes:
    """The day's notes no model wrote.

    The user's own lines of its messages, each redacted, on one line, trimmed, with its time; marked verbatim (pure)."""
    lines = []
    for entry in entries:
        said = user_said(entry)
        if said is None or entry.date != note.date:
            continue
        text = clean(" ".join(said[1].split()))  # redacted, one line
        if len(text) > FALLBACK_CHARS:
            text = text[: FALLBACK_CHARS - 1].rstrip() + "…"
        if text:
            lines.append(f"{said[0]} {text}".strip())
    return note.model_copy(update={"topics": lines, "verbatim": True})


def misses_key(keys: Keys, session_key: str) -> str:
    """The count of a session's answers that held no notes (the fallback writes them past NOTES_TRIES)."""
    return f"{keys.prefix}notes-misses:{session_key}"


async def _count(redis: ArqRedis, key: str, missed: list[str], done: list[str]) -> list[int]:
    """Each missed day's count of answers without notes, one more.

    The days noted (or written by the fallback) start over."""
    async with redis.pipeline(transaction=False) as pipe:
        for field in missed:
            pipe.hincrby(key, field, 1)
        if missed:
            pipe.expire(key, MISSES_SECONDS)
        if done:
            pipe.hdel(key, *done)
        counts = await pipe.execute()
    return [int(n) for n in counts[: len(missed)]]


async def settle_notes(
    run: Run, notes: list[DailyNotes], entries: list[Entry], generation: int = 0
) -> tuple[list[DailyNotes], int]:
    """The notes to write for `entries`, dated by their messages, and how many days stay un-noted.

    A day the answer gave no notes for, holding messages of the user's, is written by nobody: no marker says it
    was noted, and it is asked for again. Once it was asked NOTES_TRIES times, or the model follows no notes
    format at all (worker.state.formats: asking again is paying for nothing), the fallback writes the user's own
    lines (`fallback_note`). A day without a message of the user's and without notes is left as it is."""
    dated = dated_notes(notes, entries, generation)
    empty = [
        note for note in dated if not has_notes(note) and any(user_said(e) for e in entries if e.date == note.date)
    ]
    redis, key = run.redis, misses_key(Keys.of(run.redis), run.key)
    done = [f"{generation}:{note.date}" for note in dated if has_notes(note)]
    counts = await _count(redis, key, [f"{generation}:{note.date}" for note in empty], done)
    if not empty:
        return dated, 0
    learned = await formats.learned(redis, run.deps.model.model)
    off = learned is not None and learned.format == "off"
    written = {
        note.date: fallback_note(note, entries)
        for note, misses in zip(empty, counts, strict=True)
        if off or misses >= NOTES_TRIES
    }
    if written:
        await _count(redis, key, [], [f"{generation}:{date}" for date in written])
        why = run.notes_skipped or "its answers held no notes for the user's messages"
        run.notes_fallback = f"{NO_NOTES}: {why}"
        log.info(
            "%s: notes of %d day(s) written by the fallback, the user's own lines: %s",
            run.key,
            len(written),
            run.notes_fallback,
        )
    return [written.get(note.date, note) for note in dated], len(empty) - len(written)


async def write_notes(
    run: Run, notes: list[DailyNotes], facts: list[Fact], entries: list[Entry], language: str, generation: int = 0
) -> tuple[str, list[DailyNotes]]:
    """The answer's notes and facts for `entries` written (`settle_notes`, then `write_memory`).

    What was done, and the notes written."""
    dated, missing = await settle_notes(run, notes, entries, generation)
    return await write_memory(run, dated, facts, language, missing), dated


async def write_memory(run: Run, notes: list[DailyNotes], facts: list[Fact], language: str, missing: int = 0) -> str:
    """Notes of the session's day files, and the facts MEMORY.md may take.

    Only what the user said, only in a trusted session (NANOBOT_MEMORY_SESSIONS). A fact the user took out of MEMORY.md
    after the try asked its model (`run.started`) is not written back. Memory-file trouble (a full disk, a read-only
    workspace, a lock held too long) is reported, not fatal: the job's outcome says memory was not written."""
    deps, key, asked = run.deps, run.key, run.started
    trusted = deps.is_trusted(key)
    admitted = [fact for fact in facts if fact.source == "user"] if trusted else []
    left_out = len(facts) - len(admitted)
    why = (
        ""
        if not left_out
        else (f"; {left_out} facts left out ({'not stated by the user' if trusted else 'an untrusted session'})")
    )
    try:
        sessions_dir = deps.sessions_dir
    except NanobotConfigError:
        sessions_dir = None  # facts are held then, as while a session is active
    try:
        written = await deps.memory.write(
            key, notes, admitted, language, sessions_dir, deps.settings.summary_cache_ttl, asked
        )
        if isinstance(written, MemoryResult):
            written = replace(written, notes_missing=missing)
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

    A day the model noted nothing for gets an empty entry, which writes nothing (`settle_notes` decides what is
    written for it). No messages, no notes: whatever the model wrote then repeats what the day files already hold.
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
