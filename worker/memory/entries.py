"""What the memory files are made of: a day's notes of one session's span, and a fact for long-term memory.

The summarizer's answer carries them (worker.model.answer parses them out of it); the memory files write them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from worker.text.language import NOTE_FIELDS

# The fields that are plain lists of strings (technical issues are problem/solution pairs).
TEXT_FIELDS = tuple(name for name in NOTE_FIELDS if name != "technical_issues")

FactTag = Literal["permanent", "durable", "ephemeral", "correction"]
# Who stated a fact. Only what the user said may become long-term memory; "unknown" (the model did not
# say) counts as not the user.
FactSource = Literal["user", "assistant", "tool", "unknown"]
SOURCES = ("user", "assistant", "tool")


class TechnicalIssue(BaseModel):
    problem: str
    solution: str = ""


class DailyNotes(BaseModel):
    """One day's notes for one session and covered span."""

    date: str  # YYYY-MM-DD, from the messages' own timestamps
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    first_position: int | None = None  # among the session's visible messages: set from them, never by the model
    last_position: int | None = None
    generation: int = 0  # the session's generation (how many `/new` before): set from the session, never by the model
    # Written by the fallback, not a model: its topics are the user's own lines (worker.summarize.remember).
    verbatim: bool = False
    topics: list[str] = Field(default_factory=list)
    preferences: list[str] = Field(default_factory=list)
    decisions: list[str] = Field(default_factory=list)
    tasks: list[str] = Field(default_factory=list)
    technical_issues: list[TechnicalIssue] = Field(default_factory=list)
    insights: list[str] = Field(default_factory=list)


class Fact(BaseModel):
    """A candidate for long-term memory."""

    text: str
    tag: FactTag = "durable"
    importance: int = Field(default=3, ge=1, le=5)
    category: str | None = None
    # For a correction: the old fact it replaces, as the model quoted it.
    replaces: str | None = None
    source: FactSource = "unknown"
