"""The memory files a finished summary writes (daily notes, then MEMORY.md): the façade the job calls."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from filelock import Timeout

from worker.answer import DailyNotes, Fact
from worker import longterm, notes
from worker.dedup import DEFAULT_THRESHOLD
from worker.errors import MemoryFilesError


@dataclass(frozen=True)
class MemoryResult:
    """What one write did, for logs and the job's outcome."""

    notes_sections: int  # sections appended to day files (a span already noted adds none)
    facts_added: int
    facts_replaced: int  # corrections applied in place
    facts_skipped: int  # ephemeral, unimportant, duplicate, or below the cap
    facts_evicted: int  # older facts dropped to keep the cap

    def __str__(self) -> str:
        return (f"notes +{self.notes_sections} sections; facts +{self.facts_added} added, "
                f"{self.facts_replaced} replaced, {self.facts_skipped} skipped, {self.facts_evicted} evicted")


class MemoryFiles:
    """`<workspace>/memory/YYYY-MM-DD.md` and `<workspace>/memory/MEMORY.md`, shared safely by many workers."""

    def __init__(self, workspace: Path, timezone: str = "UTC", max_facts: int = 300,
                 threshold: float = DEFAULT_THRESHOLD) -> None:
        try:
            self.tz = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {timezone!r}: expected an IANA name such as Asia/Shanghai") from None
        if max_facts < 1:
            raise ValueError("max_facts must be at least 1")
        self.workspace = Path(workspace).expanduser()
        self.max_facts = max_facts
        self.threshold = threshold

    @property
    def memory_dir(self) -> Path:
        return self.workspace / "memory"

    @property
    def memory_path(self) -> Path:
        return self.memory_dir / "MEMORY.md"

    def today(self) -> str:
        return datetime.now(self.tz).date().isoformat()

    async def write(self, session_key: str, day_notes: list[DailyNotes], facts: list[Fact],
                    language: str) -> MemoryResult:
        """Writes notes and facts; file work and locks run in a thread, off the event loop.

        Raises MemoryFilesError for what the file system refused (the caller reports it)."""
        try:
            return await asyncio.to_thread(self.write_now, session_key, day_notes, facts, language)
        except (OSError, Timeout) as exc:
            raise MemoryFilesError(str(exc) or type(exc).__name__) from exc

    def write_now(self, session_key: str, day_notes: list[DailyNotes], facts: list[Fact],
                  language: str) -> MemoryResult:
        # Both writers redact every line they write (worker.redact.one_line): no secret reaches a file.
        sections = notes.append_notes(self.memory_dir, session_key, day_notes, language, self.tz, self.threshold)
        stats = longterm.MergeStats()
        if facts:
            stats = longterm.write_facts(self.memory_path, facts, language, self.today(),
                                         self.max_facts, self.threshold, session_key)
        return MemoryResult(sections, stats.added, stats.replaced, stats.skipped, stats.evicted)

    def known_facts(self, limit: int | None = None) -> list[str]:
        """What MEMORY.md already holds, most important of ours first, for the summarizer's prompt."""
        return longterm.known_facts(self.memory_path, limit)

    def forget(self, session_key: str, dry_run: bool = False) -> list[str]:
        """Removes the facts a session taught MEMORY.md; returns their texts (a dry run only lists them)."""
        return longterm.forget_session(self.memory_path, session_key, self.today(), dry_run)

    def noted_spans(self, session_key: str, date: str) -> list[tuple[str, str]]:
        """The spans of a session's messages already in that day's notes (first, last timestamps)."""
        return notes.noted_spans(self.memory_dir, session_key, date)
