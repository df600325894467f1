"""What every job needs, built once at worker start-up.

The settings, nanobot's config, the models, the memory files and the recall index."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Protocol

from worker.memory.entries import DailyNotes, Fact
from worker.memory.notes import Noted
from worker.memory.recall_index import RecallIndex
from worker.nanobot.config import ModelChoice, NanobotConfig
from worker.settings import Settings
from worker.text.tokens import Counter


class Memory(Protocol):
    """The memory files, as the job uses them (worker.memory.writer.MemoryFiles)."""

    def noted_spans(self, session_key: str, date: str, generation: int = 0) -> list[Noted]: ...

    def known_facts(self, limit: int | None = None) -> list[str]: ...

    async def write(
        self,
        session_key: str,
        notes: list[DailyNotes],
        facts: list[Fact],
        language: str,
        sessions_dir: Path | None = None,
        cache_ttl: float = 0.0,
        asked: float | None = None,
    ) -> object:
        """Returns what it did; its str() goes into the job's outcome."""


@dataclass
class Deps:
    """What every job needs, built once at worker start-up."""

    settings: Settings
    nanobot: NanobotConfig
    model: ModelChoice
    fallback: ModelChoice | None
    counter: Counter
    memory: Memory
    tz: tzinfo | None = None  # notes are dated in nanobot's configured timezone
    instructions: str | None = None
    job_timeout: float = 300.0  # arq's, for the deadline of one try
    recall: RecallIndex | None = None

    @property
    def sessions_dir(self) -> Path:
        return self.nanobot.sessions_dir

    def is_trusted(self, session_key: str) -> bool:
        """May this session write MEMORY.md.

        NANOBOT_MEMORY_SESSIONS, with nanobot's web chat one-to-one when its channel asks for a token."""
        return self.settings.is_trusted(session_key, self.nanobot.web_chat_private)
