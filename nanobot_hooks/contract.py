"""The one contract between nanobot and the worker: queue, job names, Redis keys, and the result record."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, Field

QUEUE_NAME = "nanobot-summary:queue"
KEY_PREFIX = "nanobot-summary"

JOB_SUMMARIZE = "summarize_session"
JOB_DAILY = "daily_summaries"

# Published (payload: the session key) when a record is stored and ready for pickup.
NOTICE_CHANNEL = f"{KEY_PREFIX}:ready"
# Session keys whose record waits for pickup; read by nanobot at start-up.
PENDING_SET = f"{KEY_PREFIX}:pending"

# Counters kept by nanobot_hooks (a hash): records "applied", "stale" (dropped, the session had
# changed), "duplicate" (already applied elsewhere).
STATS_KEY = f"{KEY_PREFIX}:stats"

# Where nanobot_hooks keeps its own marker inside the session metadata.
METADATA_KEY = "_summary_worker"

Reason = Literal["tokens", "interval", "manual", "daily"]
FactTag = Literal["permanent", "durable", "ephemeral", "correction"]


def job_id(session_key: str) -> str:
    """One id per session: arq refuses a second job while one is queued or running."""
    return f"{KEY_PREFIX}:job:{session_key}"


def record_key(session_key: str) -> str:
    return f"{KEY_PREFIX}:record:{session_key}"


def daily_flag_key(session_key: str) -> str:
    """Set by the daily run: the next job for the session also notes the kept tail, from this date on."""
    return f"{KEY_PREFIX}:daily:{session_key}"


def session_from_job_id(value: str) -> str | None:
    prefix = f"{KEY_PREFIX}:job:"
    return value[len(prefix):] if value.startswith(prefix) else None


def outcome_key(session_key: str) -> str:
    """The last job's outcome for a session, for `--wait` and status."""
    return f"{KEY_PREFIX}:outcome:{session_key}"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class SummarizeRequest(BaseModel):
    """The argument of the summarize job."""

    session_key: str
    reason: Reason = "manual"
    requested_at: datetime = Field(default_factory=utcnow)
    prompt_tokens: int | None = None
    context_window: int | None = None
    # The daily run notes every message up to the end, not only up to the cut, from this date on.
    notes_through_end: bool = False
    notes_since: str | None = None  # YYYY-MM-DD


class TechnicalIssue(BaseModel):
    problem: str
    solution: str = ""


class DailyNotes(BaseModel):
    """One day's notes for one session and covered span (the user's DailySummary)."""

    date: str  # YYYY-MM-DD, from the messages' own timestamps
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    topics: list[str] = Field(default_factory=list)
    preferences: list[str] = Field(default_factory=list)
    decisions: list[str] = Field(default_factory=list)
    tasks: list[str] = Field(default_factory=list)
    technical_issues: list[TechnicalIssue] = Field(default_factory=list)
    insights: list[str] = Field(default_factory=list)

    def is_empty(self) -> bool:
        return not any(
            (self.topics, self.preferences, self.decisions, self.tasks, self.technical_issues, self.insights)
        )


class Fact(BaseModel):
    """A candidate for long-term memory."""

    text: str
    tag: FactTag = "durable"
    importance: int = Field(default=3, ge=1, le=5)
    category: str | None = None
    # For a correction: the old fact it replaces, as the model quoted it.
    replaces: str | None = None


class SummaryRecord(BaseModel):
    """A finished summary, kept in Redis until nanobot applies it."""

    session_key: str
    summary: str
    # Messages [start, boundary) are covered; nanobot inserts its checkpoint at `boundary`.
    start: int
    boundary: int
    boundary_timestamp: str | None  # the timestamp of message boundary-1, to re-check before applying
    messages_before: int  # replayed messages before / after applying
    messages_after: int
    tokens_before: int  # estimated replay tokens before / after (summary included after)
    tokens_after: int
    language: str = "en"
    notes: list[DailyNotes] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list)
    model: str = ""
    chunks: int = 1
    reason: Reason = "manual"
    created_at: datetime = Field(default_factory=utcnow)

    @property
    def stamp(self) -> str:
        """What identifies one record: the worker's creation time, as stored in its JSON."""
        return self.model_dump(mode="json")["created_at"]

    def fits(self, last_archived: int, message_count: int, timestamp_at_boundary: str | None) -> bool:
        """Does the record still describe the live session? (`/new` or a native compaction break it.)

        nanobot stamps every message it saves, so a record without the boundary's timestamp cannot
        be re-checked against the session and never fits.
        """
        if self.boundary_timestamp is None or not last_archived <= self.boundary <= message_count:
            return False
        return timestamp_at_boundary == self.boundary_timestamp


class JobOutcome(BaseModel):
    """What the last job for a session did, for scripts and status."""

    session_key: str
    status: Literal["summarized", "noted", "noop", "failed"]
    detail: str = ""
    boundary: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    seconds: float | None = None  # how long the job ran (LLM calls included)
    job_try: int = 1
    finished_at: datetime = Field(default_factory=utcnow)
