"""The memory files a finished summary writes (daily notes, then MEMORY.md): the façade the job calls.

MEMORY.md's new facts can wait in a pending file until no session's prompt cache is warm."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from filelock import Timeout

from worker.errors import MemoryFilesError, MemoryReadOnly
from worker.memory import longterm, notes
from worker.memory.dedup import DEFAULT_THRESHOLD
from worker.memory.entries import DailyNotes, Fact
from worker.text.clock import zone


@dataclass(frozen=True)
class MemoryResult:
    """What one write did, for logs and the job's outcome."""

    notes_sections: int  # sections appended to day files (a span already noted adds none)
    facts_added: int
    facts_replaced: int  # corrections applied in place
    facts_skipped: int  # ephemeral, unimportant, duplicate, or below the cap
    facts_evicted: int  # older facts dropped to keep the cap
    facts_held: int = 0  # waiting for a quiet moment (NANOBOT_MEMORY_WRITE=idle)
    held_why: str = ""  # why they wait beyond that: the user made MEMORY.md read-only
    notes_fallback: int = 0  # of the sections, those the fallback wrote (the user's own lines: no model's notes)
    notes_missing: int = 0  # days left un-noted: the model's answer had no notes for them, asked again later

    def notes(self) -> str:
        """What the notes did, in words."""
        by_model = self.notes_sections - self.notes_fallback
        if self.notes_fallback and not by_model:
            said = "notes: fallback (the model's answer had no notes)"
        elif self.notes_fallback:
            said = (
                f"notes +{by_model} sections, +{self.notes_fallback} by the fallback (the model's answer had no notes)"
            )
        elif self.notes_missing and not self.notes_sections:
            said = "notes: none yet (the model's answer had no notes; asked again at the next run)"
        else:
            said = f"notes +{self.notes_sections} sections"
        if self.notes_missing and self.notes_sections:
            said += f"; {self.notes_missing} day(s) without notes, asked again at the next run"
        return said

    def __str__(self) -> str:
        if self.held_why:
            return f"{self.notes()}; {self.facts_held} facts held for MEMORY.md: {self.held_why}"
        if self.facts_held:
            return f"{self.notes()}; {self.facts_held} facts held for MEMORY.md until no session is active"
        return (
            f"{self.notes()}; facts +{self.facts_added} added, "
            f"{self.facts_replaced} replaced, {self.facts_skipped} skipped, {self.facts_evicted} evicted"
        )


def last_session_write(sessions_dir: Path | None) -> float | None:
    """When nanobot last wrote anything in its sessions folder (a session file, or a running turn's recovery file).

    Close to its last request, since it saves after each turn and each tool round. None: nothing."""
    if sessions_dir is None:
        return None
    newest = None
    try:
        entries = os.scandir(sessions_dir)
    except OSError:  # no folder yet: nanobot has not run
        return None
    with entries:
        for entry in entries:
            if entry.name.endswith((".lock", ".tmp")):  # the lock files the worker takes too; half-written files
                continue
            try:
                modified = entry.stat().st_mtime
            except OSError:
                continue
            newest = modified if newest is None else max(newest, modified)
    return newest


def quiet(last_write: float | None, now: float, cache_ttl: float) -> bool:
    """No session sent a prompt within the provider's cache lifetime: a MEMORY.md change costs no warm cache."""
    return last_write is None or now - last_write >= cache_ttl


class MemoryFiles:
    """`<workspace>/memory/YYYY-MM-DD.md` and `<workspace>/memory/MEMORY.md`, shared safely by many workers."""

    def __init__(
        self,
        workspace: Path,
        timezone: str = "UTC",
        max_facts: int = 300,
        threshold: float = DEFAULT_THRESHOLD,
        hold: bool = False,
    ) -> None:
        self.tz = zone(timezone)
        if max_facts < 1:
            raise ValueError("max_facts must be at least 1")
        self.workspace = Path(workspace).expanduser()
        self.max_facts = max_facts
        self.threshold = threshold
        self.hold = hold  # MEMORY.md's facts wait for `flush` (nanobot puts the file in every prompt)

    @property
    def memory_dir(self) -> Path:
        return self.workspace / "memory"

    @property
    def memory_path(self) -> Path:
        return self.memory_dir / "MEMORY.md"

    def today(self) -> str:
        return datetime.now(self.tz).date().isoformat()

    async def write(
        self,
        session_key: str,
        day_notes: list[DailyNotes],
        facts: list[Fact],
        language: str,
        sessions_dir: Path | None = None,
        cache_ttl: float = 0.0,
        asked: float | None = None,
    ) -> MemoryResult:
        """Writes notes and facts (`asked`: when their model call was made, epoch seconds).

        File work and locks run in a thread, off the event loop.

        Raises MemoryFilesError for what the file system refused (the caller reports it)."""
        try:
            return await asyncio.to_thread(
                self.write_now, session_key, day_notes, facts, language, sessions_dir, cache_ttl, asked
            )
        except (OSError, Timeout) as exc:
            raise MemoryFilesError(str(exc) or type(exc).__name__) from exc

    def write_now(
        self,
        session_key: str,
        day_notes: list[DailyNotes],
        facts: list[Fact],
        language: str,
        sessions_dir: Path | None = None,
        cache_ttl: float = 0.0,
        asked: float | None = None,
    ) -> MemoryResult:
        """Facts, then notes.

        Facts are held while a session of `sessions_dir` was written within `cache_ttl` seconds (or no folder is given),
        else merged at once with whatever was held before. Facts first: the notes' markers say which messages are done,
        so a write the disk refuses leaves their span un-noted and a later run (the daily one at the latest) asks for
        its notes and facts again; the other way round, a full disk lost the facts for good. Asked twice, a fact is
        merged once. A MEMORY.md the user made read-only is left alone: the facts are held, the notes written."""
        # Both writers redact every line they write (worker.text.redact.one_line): no secret reaches a file.
        stats = longterm.MergeStats()
        held, why = 0, ""
        batch = longterm.Batch(facts, language, self.today(), session_key, asked)
        cold = sessions_dir is not None and quiet(last_session_write(sessions_dir), time.time(), cache_ttl)
        if facts and self.hold and not cold:
            longterm.hold_facts(self.memory_path, batch, time.time())
            held = len(facts)
        elif facts:
            try:
                stats = longterm.write_batches(self.memory_path, [batch], self.max_facts, self.threshold)
            except MemoryReadOnly as exc:  # held by the write: nothing lost, nothing asked again
                held, why = len(facts), f"{exc}; they wait until it is writable again"
        sections = notes.append_notes(self.memory_dir, session_key, day_notes, language, self.tz, self.threshold)
        verbatim = sum(1 for note in day_notes if note.verbatim and notes.has_notes(note))
        return MemoryResult(
            sections,
            stats.added,
            stats.replaced,
            stats.skipped,
            stats.evicted,
            held,
            why,
            notes_fallback=min(verbatim, sections),
        )

    def held_since(self) -> float | None:
        """When the oldest batch still waiting for MEMORY.md was held (epoch seconds), or None."""
        return longterm.HELD.get(longterm.pending_path(self.memory_path)).oldest

    def flush(self, sessions_dir: Path | None, cache_ttl: float, force: bool = False) -> longterm.MergeStats | None:
        """Writes the held facts into MEMORY.md if no session was written within `cache_ttl` seconds (or `force`).

        None when nothing was held or a session is still active. Blocking: call it in a thread."""
        if not longterm.pending_path(self.memory_path).exists():
            return None
        if not force and not quiet(last_session_write(sessions_dir), time.time(), cache_ttl):
            return None
        return longterm.flush(self.memory_path, self.max_facts, self.threshold)

    def known_facts(self, limit: int | None = None) -> list[str]:
        """What MEMORY.md already holds, most important of ours first, for the summarizer's prompt."""
        return longterm.known_facts(self.memory_path, limit)

    def forget(self, session_key: str, dry_run: bool = False) -> list[str]:
        """Removes the facts a session taught MEMORY.md, held ones too.

        Returns their texts (a dry run only lists them)."""
        return longterm.forget_session(self.memory_path, session_key, self.today(), dry_run)

    def noted_spans(self, session_key: str, date: str, generation: int = 0) -> list[notes.Noted]:
        """The spans of a session's (generation's) messages already in that day's notes."""
        return notes.noted_spans(self.memory_dir, session_key, date, generation)
